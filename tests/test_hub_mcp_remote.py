"""Cloud registrations and managing the hub's memory from a device.

`origin token create` prints registrations of the hub's /mcp that a client
can use as printed; on a device connected to a hub, the CLI's search,
timeline, show, entries, remember, correct and forget act on the hub with
the same JSON as on the hub itself, `--local` on the device, and forget
keeps its preview-then-`--yes` flow with the plan's digest.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import tomllib

import pytest

import origin
from helpers import DECISION, HubDevice, QUOTE, TOOLS, claude_hook_input, http_client, ok
from reliability_tools import origin_argv

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def cli_json(run, *args: str, code: int = 0):
    p = run(*args, "--json")
    assert p.returncode == code, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_token_create_prints_registrations_a_cloud_client_uses_as_printed(hub):
    out = cli_json(hub.run, "token", "create", "cloud", "--url", hub.url)
    reg, token, endpoint = out["mcp"], out["token"], hub.url + "/mcp"
    assert shlex.split(reg["claude-code"]) == [
        "claude", "mcp", "add", "--scope", "user", "--transport", "http", "origin", endpoint,
        "--header", f"Authorization: Bearer {token}"]
    codex = tomllib.loads(reg["codex"])["mcp_servers"]["origin"]
    assert codex == {"url": endpoint, "http_headers": {"Authorization": f"Bearer {token}"}}
    cursor = reg["cursor"]["mcpServers"]["origin"]
    assert cursor == {"url": endpoint, "headers": {"Authorization": f"Bearer {token}"}}
    text = hub.run("token", "create", "other", "--url", hub.url).stdout
    for what in ("claude mcp add", "[mcp_servers.origin]", '"mcpServers"', "origin hub connect"):
        assert what in text

    # A client configured with exactly those values calls all seven tools.
    async def body(c):
        names = [t.name for t in (await c.list_tools()).tools]
        entry = ok(await c.call_tool("search", {"scope": "entries"}))["entries"][0]
        ok(await c.call_tool("timeline", {}))
        ok(await c.call_tool("get", {"ids": [entry["id"]]}))
        cited = ok(await c.call_tool("sources", {"id": entry["id"]}))["sources"][0]["event"]
        new = ok(await c.call_tool("remember", {"kind": "knowledge", "text": "Demo has no type-check script.",
                                                "sources": [{"event": cited}]}))["entry"]
        fixed = ok(await c.call_tool("correct", {"id": new["id"], "text": "Demo defines no type-check script."}))
        shown = ok(await c.call_tool("forget", {"id": fixed["entry"]["id"]}))
        gone = ok(await c.call_tool("forget", {"id": fixed["entry"]["id"], "digest": shown["digest"]}))
        return names, new, gone

    auth = cursor["headers"]["Authorization"].split(" ", 1)[1]
    names, new, gone = http_client(cursor["url"], auth, "auto", body, name="cloud-agent")
    assert names == TOOLS
    assert new["author"] == "cloud-agent@cloud"
    assert gone["done"] is True


@pytest.fixture
def device(hub, tmp_path):
    dev = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
    p = dev.run("push", "--json")
    assert p.returncode == 0, p.stderr
    return dev


def test_cli_reads_on_the_hub_with_the_hubs_own_json_shapes_and_local_reads_the_device(hub, device):
    entry = cli_json(hub.run, "entries")["entries"][0]
    session = cli_json(hub.run, "timeline", "--since", "2020-01-01")["sessions"][0]["session"]
    for args in (("search", "type-check"), ("search", "type-check", "--scope", "events", "--limit", "3"),
                 ("entries",), ("timeline", "--since", "2020-01-01"), ("timeline", "--session", session),
                 ("show", entry["id"])):
        on_hub, from_device = cli_json(hub.run, *args), cli_json(device.run, *args)
        assert from_device == on_hub, args
    # --local reads the device's own staging store: its events, no entries.
    local = cli_json(device.run, "search", "type-check", "--local")
    assert local["entries"] == [] and local["events"]
    assert cli_json(device.run, "entries", "--local")["entries"] == []
    # Text output works the same way.
    assert DECISION[:40] in device.run("show", entry["id"]).stdout
    # What only this device's store can do is refused, with the way to do it.
    p = device.run("show", entry["id"], "--reveal")
    assert p.returncode != 0 and "--local" in p.stderr


def test_remember_and_correct_from_the_device_cite_a_line_just_written_and_land_on_the_hub(hub, device):
    device.say("We decided to keep the Demo README in English only, for the reviewers.")
    made = cli_json(device.run, "remember", "Demo: the README stays English only (for the reviewers).",
                    "--kind", "memory", "--quote", "keep the Demo README in English only")
    assert made["author"] == "user@laptop"
    assert made["sources"][0]["file"].startswith("@laptop:")
    fixed = cli_json(device.run, "correct", made["id"], "Demo: the README stays in English only, for reviewers.")
    assert fixed["supersedes"] == made["id"]
    shown = cli_json(hub.run, "show", fixed["id"])
    assert shown["entry"]["history"][-1]["id"] == made["id"] or shown["entry"]["history"][0]["id"] == made["id"]
    with sqlite3.connect(device.store / "origin.db") as c:
        assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == 0  # nothing written on the device
    p = device.run("show", "ent_doesnotexist")
    assert p.returncode == origin.NotFound.exit_code and "on the hub" in p.stderr


def test_forget_from_the_device_previews_then_forgets_on_the_hub_and_here(hub, device):
    entry = cli_json(hub.run, "entries")["entries"][0]
    cited = cli_json(hub.run, "show", entry["id"])["entry"]["sources"][0]["event"]
    preview = cli_json(device.run, "forget", entry["id"], code=1)
    assert preview["done"] is False and preview["digest"]
    assert [e["id"] for e in preview["would_forget_entries"]] == [entry["id"]]
    assert cited in [e["id"] for e in preview["would_exclude_events"]]
    assert cli_json(device.run, "entries")["entries"]  # a preview forgets nothing
    done = cli_json(device.run, "forget", entry["id"], "--reason", "asked to", "--yes")
    assert done["done"] is True and done["forgotten_entries"] == [entry["id"]]
    # Gone on the hub, on every route, and on this device at once.
    assert cli_json(hub.run, "entries")["entries"] == []
    assert hub.run("show", entry["id"]).returncode == origin.Forgotten.exit_code
    assert hub.run("show", cited).returncode == origin.Forgotten.exit_code
    assert device.run("show", cited, "--local").returncode == origin.Forgotten.exit_code
    assert QUOTE not in json.dumps(cli_json(device.run, "search", "type-check", "--local", "--scope", "events"),
                                   ensure_ascii=False)


def test_a_forget_whose_plan_changed_after_its_preview_forgets_nothing(hub, device):
    entry = cli_json(hub.run, "entries")["entries"][0]
    cited = cli_json(hub.run, "show", entry["id"])["entry"]["sources"][0]["event"]
    event = next(e["id"] for e in cli_json(hub.run, "search", "type-check", "--scope", "events")["events"]
                 if e["id"] != cited)
    first = cli_json(device.run, "forget", event, code=1)
    assert first["would_forget_entries"] == []
    # Meanwhile an entry comes to cite the event: forgetting it would now forget that entry too.
    hub.run("remember", "Demo: type-check is gone from CLAUDE.md.", "--kind", "memory", "--event", event)
    p = device.run("forget", event, "--yes")
    assert p.returncode == origin.Conflict.exit_code
    assert "changed since its preview" in p.stderr and "nothing was forgotten" in p.stderr
    assert hub.run("show", event).returncode == 0
    second = cli_json(device.run, "forget", event, code=1)
    assert len(second["would_forget_entries"]) == 1 and second["digest"] != first["digest"]
    assert cli_json(device.run, "forget", event, "--yes")["done"] is True
    assert hub.run("show", event).returncode == origin.Forgotten.exit_code


def test_invariant_2_a_local_forget_is_refused_while_a_hub_is_configured(hub, device):
    event = cli_json(device.run, "search", "type-check", "--local", "--scope", "events")["events"][0]["id"]
    for args in (("forget", event, "--local"), ("forget", event, "--local", "--yes")):
        p = device.run(*args)
        assert p.returncode == origin.UsageError.exit_code
        assert hub.url in p.stderr and "without --local" in p.stderr
    assert device.run("show", event, "--local").returncode == 0
    assert hub.run("show", event).returncode == 0


def test_with_the_hub_killed_cli_reads_answer_from_the_device_and_writes_are_refused(hub, device):
    """Issue 29 item 1, on the command line: one stderr line, exit 0, the device's own archive."""
    entry = cli_json(device.run, "entries")["entries"][0]
    device.say("The okapi rule: Demo releases leave on Thursdays.")  # not synced: the read catches it up
    hub.proc.kill()
    hub.proc.wait(30)
    found = cli_json(device.run, "search", "okapi rule")
    event = found["events"][0]["id"]
    assert "okapi rule" in found["events"][0]["snippet"]
    for args in (("search", "okapi", "rule"), ("show", event), ("timeline", "--since", "2020-01-01"),
                 ("entries",), ("ask", "what", "is", "the", "okapi", "rule")):
        p = device.run(*args)
        assert p.returncode == 0, (args, p.stderr)
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and hub.url in lines[0] and "this device's store" in lines[0], (args, p.stderr)
    assert "okapi rule" in device.run("show", event).stdout
    for args in (("remember", "Demo releases leave on Thursdays.", "--kind", "memory", "--quote", "okapi rule"),
                 ("correct", entry["id"], "Something else entirely, said later."),
                 ("forget", entry["id"], "--yes")):
        p = device.run(*args)
        assert p.returncode == origin.HubUnavailable.exit_code, (args, p.stdout, p.stderr)
        assert "hub unreachable" in p.stderr and "nothing was written" in p.stderr and hub.url in p.stderr, args
    with sqlite3.connect(device.store / "origin.db") as c:
        assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0


def test_a_line_written_a_moment_ago_is_found_on_the_hub_by_a_device_search(hub, device):
    """Issue 29 item 2 through a hub: the read catches up here and pushes what that added first."""
    device.say("The heron-fresh rule: no release without a changelog line.")
    found = cli_json(device.run, "search", "heron-fresh")
    assert found["events"] and "heron-fresh" in found["events"][0]["snippet"]
    assert "heron-fresh" in hub.run("search", "heron-fresh").stdout  # the hub holds it now


def test_the_session_start_hook_on_a_device_prints_the_hubs_entries(hub, device):
    """Issue 29 item 5 on a device with a hub: the entries live on the hub; a hub down costs only them."""
    import subprocess

    entry = cli_json(device.run, "entries")["entries"][0]
    hook = [*origin_argv("context", "--hook")]
    p = subprocess.run(hook, input=claude_hook_input("/path/to/Demo"), env=device.env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == ""
    assert f"({entry['id']})" in p.stdout and "project Demo" in p.stdout
    hub.proc.kill()
    hub.proc.wait(30)
    p = subprocess.run(hook, input=claude_hook_input("/path/to/Demo"), env=device.env(), capture_output=True,
                       text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "") and p.stdout == origin.CONTEXT_SEARCH_LINE + "\n"
