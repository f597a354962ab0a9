"""What the agents deleted, Origin still holds; carrying the memory out as Markdown; native memory notes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import origin
from conftest import FIXTURES
from test_entries import ClaudeLog


def test_preserved_lists_the_sessions_whose_files_were_deleted_after_archiving(user_home, store, cli):
    logs = [ClaudeLog(user_home, session=f"sess-{i}", cwd=f"/home/dev/src/p{i}") for i in range(3)]
    for i, log in enumerate(logs):
        for j in range(3):
            log.user(f"u{i}-{j}", f"message {j} of session topic{i}x about the parser")
        log.write()
    codex = user_home / ".codex" / "sessions" / "2025" / "11" / "03"
    codex.mkdir(parents=True)
    rollout = "rollout-2025-11-03T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"
    shutil.copy(next((FIXTURES / "codex").rglob("*.jsonl")), codex / rollout)
    origin.sync(store)
    assert store.conn.execute("SELECT count(*) FROM event WHERE source = 'codex'").fetchone()[0] > 0
    assert origin.preserved(store) == {"agents": {}, "files": 0, "events": 0, "sessions": 0}
    code, out = cli("preserved")
    assert code == 0 and "still on disk" in out
    # Claude Code deletes two transcripts; Codex archives and compresses its rollout (a move, not a loss).
    logs[0].path.unlink()
    logs[2].path.unlink()
    archived = user_home / ".codex" / "archived_sessions"
    archived.mkdir()
    import zstandard
    (archived / (rollout + ".zst")).write_bytes(zstandard.ZstdCompressor().compress((codex / rollout).read_bytes()))
    (codex / rollout).unlink()
    origin.sync(store)
    res = origin.preserved(store, list_sessions=True)
    claude = res["agents"]["claude-code"]
    assert set(res["agents"]) == {"claude-code"}
    assert (claude["files"], claude["sessions"], claude["events"]) == (2, 2, 6)
    assert [s["session"] for s in claude["session_list"]] == ["sess-0", "sess-2"]
    assert claude["oldest"]["session"] == "sess-0" and claude["newest"]["session"] == "sess-2"
    # Nothing was lost: the deleted sessions are still searchable.
    assert {e["session"] for e in origin.search_events(store, "topic0x", limit=10)} == {"sess-0"}
    code, st = cli("status", "--json")
    assert st["files_gone"] == 2
    code, out = cli("status")
    assert "2 archived files are gone from disk" in out
    code, out = cli("preserved")
    assert code == 0 and "claude-code" in out and "sess-0" in out and "sess-2" in out and "codex" not in out
