"""Issue 18's "Done when", tried as a new user would: the CLI in-process and the MCP server as a real process."""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import Implementation

import origin
from conftest import ROOT
from helpers import ClaudeLog

GITHUB = "ghp_" + "T7x" * 12
AWS_KEY, AWS_SECRET = "AKIA" + "Q4ZR7PLM2XVB9KDN", "k9Vb2Qm7Xz4Lp1Rt8Wc3Yn6Hs5Jd0Fg/A+eUiOoP"


def _mcp(body):
    argv = [sys.executable, str(ROOT / "origin.py"), "mcp"]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=str(ROOT))

    async def main():
        async with Client(params, client_info=Implementation(name="done-agent", version="1")) as client:
            return await body(client)
    return anyio.run(main)


def test_done_when_secrets_masked_citations_rechecked_preserved_and_exported(user_home, origin_home, cli, tmp_path):
    log = ClaudeLog(user_home, session="sess-deploy", cwd="/home/dev/src/deploy")
    ids = {
        "token": log.user("u-token", f"CI uses GITHUB_TOKEN={GITHUB} for the release workflow."),
        "aws": log.tool_result("r-env", f"AWS_ACCESS_KEY_ID={AWS_KEY}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"),
        "why": log.assistant("a-why", "We deploy from tags only, because a branch push must never ship."),
        "how": log.user("u-how", "Releases are built by the workflow in .github/workflows/release.yml."),
    }
    log.write()
    old = ClaudeLog(user_home, session="sess-old", cwd="/home/dev/src/deploy")
    old.user("u-old", "An early session about the first deploy script.")
    old.write()
    code, _ = cli("sync")
    assert code == 0
    secrets = (GITHUB, AWS_KEY, AWS_SECRET)

    # No CLI read shows either value; a search for the token finds nothing.
    reads = [cli("search", "GITHUB_TOKEN", "--all", "--json")[1], cli("search", "AWS", "--all", "--json")[1],
             cli("timeline", "--session", "sess-deploy", "--all", "--json")[1],
             cli("show", ids["token"], "--json")[1], cli("show", ids["aws"], "--json")[1],
             cli("show", ids["token"])[1], cli("timeline", "--since", "2020-01-01", "--json")[1]]
    text = json.dumps(reads, ensure_ascii=False) + "".join(r for r in reads if isinstance(r, str))
    assert not any(s in text for s in secrets)
    assert f"[secret:github…{GITHUB[-4:]}]" in text and f"[secret:aws-access-key…{AWS_KEY[-4:]}]" in text
    assert "[secret:aws-secret-key…" in text
    code, res = cli("search", GITHUB, "--all", "--json")
    assert code == 0 and res["events"] == [] and res["entries"] == []
    # show --reveal shows the original line on the device.
    code, out = cli("show", ids["token"], "--reveal")
    assert code == 0 and GITHUB in out
    code, out = cli("show", ids["aws"], "--reveal")
    assert AWS_KEY in out and (AWS_SECRET in out or AWS_SECRET.replace("/", "\\/") in out)

    # remember with the key in its text is refused, naming its kind.
    code, _ = cli("remember", f"The AWS key is {AWS_KEY}", "--kind", "knowledge", "--event", ids["why"])
    assert code == 2 and "aws-access-key" in cli.err

    # An entry whose cited event was forgotten reports that.
    code, kept = cli("remember", "Deploys ship from tags only, built by the release workflow.", "--kind", "knowledge",
                     "--event", ids["why"], "--event", ids["how"], "--json")
    assert code == 0 and kept["verified"] == "verified"
    code, other = cli("remember", "The release workflow lives in .github/workflows/release.yml.", "--kind", "knowledge",
                      "--event", ids["how"], "--json")
    code, _ = cli("forget", other["id"], "--yes")
    assert code == 0

    # The MCP server, as a separate process: nothing secret, the forgotten citation reported, all of it quoted.
    async def body(c):
        out = {}
        for name, args in (("search", {"query": "GITHUB_TOKEN", "include_tools": True}),
                           ("search", {"query": GITHUB, "include_tools": True}),
                           ("timeline", {"session": "sess-deploy", "include_tools": True}),
                           ("get", {"ids": [ids["token"], ids["aws"], kept["id"]]}),
                           ("sources", {"id": ids["aws"], "max_chars": 20000}),
                           ("sources", {"id": ids["token"], "max_chars": 200})):
            r = await c.call_tool(name, args)
            assert not r.is_error, r.content[0].text
            out.setdefault(name, []).append(r.content[0].text)
        r = await c.call_tool("remember", {"kind": "memory", "text": f"token {GITHUB}",
                                           "sources": [{"event": ids["why"]}]})
        out["refused"] = (r.is_error, r.content[0].text)
        return out

    out = _mcp(body)
    every = "".join(t for k, v in out.items() if k != "refused" for t in v)
    assert not any(s in every for s in secrets) and not any(s.replace("/", "\\/") in every for s in secrets)
    assert json.loads(out["search"][1])["events"] == []
    assert all(json.loads(t)["quoted"] == origin.MCP_QUOTED for k, v in out.items() if k != "refused" for t in v)
    entry = next(i["entry"] for i in json.loads(out["get"][0])["items"] if "entry" in i)
    assert {s["event"]: s["state"] for s in entry["sources"]} == {ids["why"]: "visible", ids["how"]: "forgotten"}
    assert entry["verified"] == "partial"
    assert out["refused"][0] is True and "github" in out["refused"][1]
    code, res = cli("search", "tags only", "--scope", "entries", "--json")
    assert [(e["id"], e["verified"]) for e in res["entries"]] == [(kept["id"], "partial")]
    code, shown = cli("show", kept["id"])
    assert f"source {ids['how']}  forgotten since it was cited" in shown

    # origin preserved lists the sessions whose files were deleted after archiving.
    old.path.unlink()
    code, res = cli("preserved", "--list", "--json")
    assert code == 0 and [s["session"] for s in res["agents"]["claude-code"]["session_list"]] == ["sess-old"]
    code, out_text = cli("preserved")
    assert "sess-old" in out_text

    # origin export --markdown writes the entries with their citations.
    dest = tmp_path / "md"
    code, res = cli("export", "--markdown", str(dest), "--sessions", "--json")
    assert code == 0 and res["entries"] == 1 and "entries/knowledge/deploy.md" in res["files"]
    md = (dest / "entries/knowledge/deploy.md").read_text()
    assert kept["id"] in md and ids["why"] in md and "sess-deploy" in md and "forgotten since it was cited" in md
    assert other["id"] not in md
    exported = "".join(p.read_text() for p in dest.rglob("*.md"))
    assert not any(s in exported for s in secrets) and "[secret:github…" in exported
