"""The audit log records every remember, correct and forget, whatever the channel.

The admin page audited its own writes; a forget or a remember made by a
device or an agent through the hub's /mcp, by an agent over stdio, or with
the CLI left no record.  Records hold ids and counts only, never text.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import origin
from helpers import QUOTE, Serve, http_client, ok

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running

SAID = "The kestrel build keeps its cache on the shared volume so CI reruns stay under a minute."


def audit_rows(home: Path) -> list[dict]:
    with sqlite3.connect(home / origin.DB_NAME) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute("SELECT actor, action, channel, details FROM audit_log ORDER BY id")]


def test_writes_through_the_hubs_mcp_are_audited_with_ids_and_counts_only(claude_root, tmp_path):
    home = tmp_path / "hub"
    with origin.open_store(home) as store:
        origin.sync(store)
    hub = Serve(home)
    try:
        token = hub.token("laptop")

        async def body(c):
            found = ok(await c.call_tool("search", {"query": "type-check", "scope": "events"}))["events"][0]
            new = ok(await c.call_tool("remember", {"kind": "knowledge", "text": SAID,
                                                    "sources": [{"event": found["id"]}]}))["entry"]
            fixed = ok(await c.call_tool("correct", {"id": new["id"], "text": SAID + " (checked)"}))["entry"]
            shown = ok(await c.call_tool("forget", {"id": fixed["id"]}))
            gone = ok(await c.call_tool("forget", {"id": fixed["id"], "digest": shown["digest"]}))
            return new, fixed, gone

        new, fixed, gone = http_client(hub.mcp, token, "auto", body, name="cloud-agent")
    finally:
        hub.stop()
    rows = audit_rows(home)
    # Before, none of these three writes left a record.
    mine = [r for r in rows if r["channel"] == "mcp"]
    assert [(r["actor"], r["action"]) for r in mine] == [
        ("cloud-agent@laptop", "entry_written"), ("cloud-agent@laptop", "entry_corrected"),
        ("cloud-agent@laptop", "forget")]
    details = [json.loads(r["details"]) for r in mine]
    assert details[0] == {"entry": new["id"], "sources": 1}
    assert details[1] == {"entry": fixed["id"], "supersedes": new["id"]}
    assert details[2] == {"tombstone": gone["tombstone"], "target": fixed["id"], "entries": 2, "events": 1}
    assert "kestrel" not in json.dumps(rows)  # never text
    assert [r["action"] for r in rows if r["channel"] != "mcp"] == ["token_created"]  # a preview writes nothing


def test_writes_over_stdio_and_with_the_cli_are_audited(claude_root, origin_home, cli):
    with origin.open_store(origin_home) as store:
        origin.sync(store)
    service = origin.McpService(origin_home, lambda st, **kw: None)
    try:
        text, is_error = service.call("remember", {"kind": "memory", "text": SAID, "sources": [{"quote": QUOTE}]},
                                      "codex")
        assert not is_error, text
        assert json.loads(text)["entry"]["id"]
    finally:
        service.close()
    code, entry = cli("remember", SAID + " Twice.", "--kind", "memory", "--quote", QUOTE, "--json")
    assert code == 0
    code, fixed = cli("correct", entry["id"], SAID + " Thrice.", "--json")
    assert code == 0
    cli("forget", fixed["id"], "--json")
    code, done = cli("forget", fixed["id"], "--yes", "--json")
    assert code == 0
    rows = audit_rows(origin_home)
    assert [(r["actor"], r["action"], r["channel"]) for r in rows] == [
        ("codex", "entry_written", "mcp"), ("user", "entry_written", "cli"), ("user", "entry_corrected", "cli"),
        ("user", "forget", "cli")]
    assert json.loads(rows[3]["details"]) == {
        "tombstone": done["tombstone"], "target": fixed["id"], "entries": len(done["forgotten_entries"]),
        "events": len(done["excluded_events"])}
    assert "kestrel" not in json.dumps(rows)
