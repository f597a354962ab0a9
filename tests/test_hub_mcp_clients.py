"""A client nobody here wrote, and the whole story across machines.

The MCP Inspector CLI (Node 22, installed from npm as tests/test_mcp.py
does) lists and calls every tool on the hub over `--transport http` with
the bearer header, and through the stdio proxy of a device.  Then the
done-means scenario of the hub: a decision said on device A, remembered
through B's proxy quoting A's line, found by a cloud client over HTTP with
its citation expanding to A's original line, forgotten from B's CLI, and
gone from A, B and the hub on every route.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import origin
from conftest import ROOT
from helpers import QUOTE, TOOLS, HubDevice, failed, http_client, ok, proxy_client

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def run_inspector(inspector, target: list[str], *args: str, era: str) -> tuple[int, dict]:
    env = dict(os.environ, PATH=f"{Path(inspector[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([*inspector, "--cli", "--protocol-era", era, *target, *args, "--format", "json"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    return done.returncode, json.loads(done.stdout or done.stderr or "{}")


def every_tool(inspector, target: list[str], era: str) -> dict:
    """List the tools strictly, then call each one; return what came back."""
    def call(tool, args):
        code, res = run_inspector(inspector, target, "--method", "tools/call", "--tool-name", tool,
                                  "--tool-args-json", json.dumps(args), era=era)
        assert code == 0, res
        return json.loads(res["result"]["content"][0]["text"])

    code, listed = run_inspector(inspector, target, "--strict", "--method", "tools/list", era=era)
    assert code == 0, listed
    out = {"tools": [t["name"] for t in listed["result"]["tools"]]}
    out["search"] = call("search", {"query": "type-check"})
    entry = out["search"]["entries"][0]["id"]
    event = next(e["id"] for e in out["search"]["events"])
    out["timeline"] = call("timeline", {"since": "2020-01-01"})
    out["get"] = call("get", {"ids": [entry]})
    out["sources"] = call("sources", {"id": entry})
    out["remember"] = call("remember", {"kind": "knowledge", "text": f"Demo checks types in CI ({era}).",
                                        "sources": [{"event": event}]})["entry"]
    out["correct"] = call("correct", {"id": out["remember"]["id"], "text": f"Demo checks types in CI only ({era})."})
    shown = call("forget", {"id": out["correct"]["entry"]["id"]})
    out["forget"] = call("forget", {"id": out["correct"]["entry"]["id"], "digest": shown["digest"]})
    code, _ = run_inspector(inspector, target, "--method", "tools/call", "--tool-name", "get",
                            "--tool-args-json", json.dumps({"ids": [out["remember"]["id"]]}), era=era)
    out["after_code"] = code
    return out


def check(out: dict, author: str) -> None:
    assert out["tools"] == TOOLS
    assert out["search"]["entries"] and out["timeline"]["sessions"]
    assert QUOTE in out["sources"]["sources"][0]["raw"]
    assert out["remember"]["author"] == author
    assert out["correct"]["entry"]["supersedes"] == out["remember"]["id"]
    assert out["forget"]["done"] is True
    assert out["after_code"] == 5  # the Inspector's exit code for a tool error: it was forgotten


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_over_http_with_the_bearer_header_calls_every_tool(hub, inspector, era):
    token = hub.token("ci")
    target = [hub.mcp, "--transport", "http", "--header", f"Authorization: Bearer {token}"]
    out = every_tool(inspector, target, era)
    # The legacy era names no client per request; the 2026 era carries the Inspector's name.
    check(out, "mcp-client@ci" if era == "legacy" else "inspector-cli@ci")
    code, refused = run_inspector(inspector, [hub.mcp, "--transport", "http", "--header", "Authorization: Bearer x"],
                                  "--method", "tools/list", era=era)
    assert code != 0


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_through_the_stdio_proxy_calls_every_tool_on_the_hub(hub, inspector, tmp_path, era):
    dev = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
    target = [sys.executable, str(ROOT / "origin.py"), "mcp", "-e", f"ORIGIN_HOME={dev.store}",
              "-e", f"HOME={dev.home}"]
    out = every_tool(inspector, target, era)
    check(out, "inspector-cli@laptop")
    with origin.open_store(hub.home) as store:  # it was the hub that answered
        assert origin.entry_status(store.conn, out["remember"]["id"]) == "forgotten"


def test_done_means_a_decision_on_a_found_by_the_cloud_and_forgotten_from_b_everywhere(hub, tmp_path):
    a = HubDevice(tmp_path, "desktop", hub.url, hub.token("desktop"))
    b = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
    said = "Decision: Demo ships its docs as plain Markdown, no site generator, to keep reviews in the diff."
    a.say(said)
    assert a.run("push").returncode == 0

    # On B, an agent remembers the decision through its proxy, quoting A's words.
    async def remember_on_b(c):
        return ok(await c.call_tool("remember", {
            "kind": "memory", "text": "Demo: docs stay plain Markdown without a site generator (reviews in the diff).",
            "sources": [{"quote": "ships its docs as plain Markdown"}]}))["entry"]

    entry = proxy_client(b, remember_on_b, name="claude-code")
    assert entry["author"] == "claude-code@laptop"

    # A cloud agent finds it over HTTP; its citation expands to A's original line.
    async def cloud(c):
        found = ok(await c.call_tool("search", {"query": "plain Markdown", "scope": "entries"}))
        src = ok(await c.call_tool("sources", {"id": found["entries"][0]["id"]}))
        return found, src

    found, src = http_client(hub.mcp, hub.token("cloud"), "auto", cloud, name="cloud-agent")
    assert [e["id"] for e in found["entries"]] == [entry["id"]]
    line = src["sources"][0]
    assert line["file"].startswith("@desktop:") and said in line["raw"]
    cited = line["event"]
    assert said in json.loads(line["raw"])["message"]["content"]  # A's line, verbatim

    # B's CLI previews the forget on the hub, then forgets it.
    p = b.run("forget", entry["id"])
    assert p.returncode == 1 and entry["id"] in p.stdout and "--yes" in p.stdout
    assert b.run("forget", entry["id"], "--yes").returncode == 0
    assert a.run("push").returncode == 0  # A takes the forget in at its next push

    # Gone everywhere: the hub on every route, B's and A's own stores.
    for run, local in ((hub.run, ()), (b.run, ("--local",)), (a.run, ("--local",))):
        for target in (entry["id"], cited):
            p = run("show", target, *local)
            assert p.returncode in (origin.Forgotten.exit_code, origin.NotFound.exit_code), (target, p.stdout)
        hits = json.loads(run("search", "plain Markdown", "--json", *local).stdout)
        assert hits["entries"] == [] and hits["events"] == []

    async def cloud_after(c):
        return (ok(await c.call_tool("search", {"query": "plain Markdown"})),
                failed(await c.call_tool("get", {"ids": [entry["id"], cited]})),
                failed(await c.call_tool("sources", {"id": cited})))

    after, got, sources = http_client(hub.mcp, hub.token("cloud2"), "legacy", cloud_after)
    assert after["entries"] == [] and after["events"] == []
    assert "forgotten" in got and "forgotten" in sources
