"""What the agents deleted, Origin still holds; carrying the memory out as Markdown; native memory notes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import origin
from conftest import FIXTURES
from helpers import ClaudeLog


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
    assert origin.preserved(store) == {"agents": {}, "files": 0, "events": 0, "sessions": 0, "devices": {}}
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


def test_preserved_counts_tens_of_thousands_of_gone_files(user_home, store, cli):
    log = ClaudeLog(user_home, session="sess-old", cwd="/home/dev/src/old")
    log.user("u-old", "an old session whose transcript the agent deleted")
    log.write()
    origin.sync(store)
    log.path.unlink()
    # Years of deleted transcripts: more gone files than SQLite binds variables (32,766).
    cols = [r[1] for r in store.conn.execute("PRAGMA table_info(raw_file)") if r[1] != "id"]
    picked = ", ".join("?" if c in ("path", "mirror") else c for c in cols)
    with origin.transaction(store.conn) as conn:
        conn.executemany(f"INSERT INTO raw_file ({', '.join(cols)}) SELECT {picked} FROM raw_file LIMIT 1",
                         [tuple(f"/home/dev/.claude/projects/gone/{n}.jsonl" if c == "path" else f"raw/gone/{n}.jsonl"
                                for c in cols if c in ("path", "mirror")) for n in range(40_000)])
    import sqlite3

    # SQLite's own default limit (this Python's build allows 250,000).
    store.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 32_766)
    res = origin.preserved(store)
    claude = res["agents"]["claude-code"]
    assert (claude["files"], claude["sessions"], claude["events"]) == (40_001, 1, 1)
    code, out = cli("preserved")
    assert code == 0 and "40001" in out.replace(",", "")


@pytest.fixture
def two_projects(user_home, store):
    token = "ghp_" + "Zq9" * 12
    api = ClaudeLog(user_home, session="sess-api", cwd="/home/dev/src/api")
    ids = {"keep": api.user("u-keep", "We keep SQLite for the archive because it is one file."),
           "key": api.user("u-key", f"the CI token is {token}, use it for the release job"),
           "wal": api.assistant("a-wal", "WAL mode lets readers run during a sync.")}
    api.write()
    web = ClaudeLog(user_home, session="sess-web", cwd="/home/dev/src/web")
    ids["css"] = web.user("u-css", "Use CSS grid for the dashboard layout, not floats.")
    web.write()
    origin.sync(store)
    return ids, token


def test_export_markdown_writes_active_entries_with_their_citations_grouped_by_kind_and_project(
        two_projects, store, cli, tmp_path):
    ids, token = two_projects
    sqlite = origin.remember(store, kind="knowledge", text="The archive is one SQLite file.",
                             sources=[{"event": ids["keep"], "quote": "one file"}], author="t")
    release = origin.remember(store, kind="memory", text="The release job uses the CI token from the vault.",
                              sources=[{"event": ids["key"]}], author="t")
    grid = origin.remember(store, kind="cognition", text="The user prefers CSS grid over floats.",
                           sources=[{"quote": "CSS grid for the dashboard"}], author="t")
    gone = origin.remember(store, kind="knowledge", text="WAL mode lets readers run during a sync.",
                           sources=[{"event": ids["wal"]}], author="t")
    origin.forget(store, gone["id"], reason="test")
    out = tmp_path / "export"
    code, res = cli("export", "--markdown", str(out), "--json")
    assert code == 0 and res["entries"] == 3
    assert sorted(res["files"]) == ["README.md", "entries/cognition/web.md", "entries/knowledge/api.md",
                                    "entries/memory/api.md"]
    knowledge = (out / "entries/knowledge/api.md").read_text()
    assert sqlite["id"] in knowledge and ids["keep"] in knowledge and "> one file" in knowledge
    assert "sess-api" in knowledge and "line 1" in knowledge and "evidence verified" in knowledge
    memory = (out / "entries/memory/api.md").read_text()
    assert release["id"] in memory and f"[secret:github…{token[-4:]}]" in memory
    assert grid["id"] in (out / "entries/cognition/web.md").read_text()
    everything = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert token not in everything and gone["id"] not in everything and "WAL mode" not in everything
    # An earlier export is replaced; a folder holding other files is refused.
    origin.forget(store, grid["id"])
    code, res = cli("export", "--markdown", str(out), "--json")
    assert code == 0 and not (out / "entries/cognition/web.md").exists() and res["entries"] == 2
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.md").write_text("keep me")
    code, _ = cli("export", "--markdown", str(tmp_path / "notes"))
    assert code == 2 and "not empty" in cli.err and (tmp_path / "notes" / "mine.md").read_text() == "keep me"


def test_export_sessions_writes_transcripts_filtered_by_project_and_time(two_projects, store, cli, tmp_path):
    ids, token = two_projects
    code, res = cli("export", "--markdown", str(tmp_path / "all"), "--sessions", "--json")
    assert code == 0 and res["sessions"] == 2
    api = [f for f in res["files"] if f.startswith("sessions/claude-code/api/")]
    assert len(api) == 1 and api[0].endswith("-sess-api.md")
    text = (tmp_path / "all" / api[0]).read_text()
    assert "We keep SQLite" in text and ids["wal"] in text and "### assistant" in text
    assert token not in text and "[secret:github…" in text
    code, res = cli("export", "--markdown", str(tmp_path / "web"), "--sessions", "--project", "web", "--json")
    assert [f for f in res["files"] if f.startswith("sessions/")] == [
        next(f for f in res["files"] if f.startswith("sessions/claude-code/web/"))]
    code, res = cli("export", "--markdown", str(tmp_path / "none"), "--sessions", "--since", "2099-01-01", "--json")
    assert code == 0 and res["sessions"] == 0
    origin.forget(store, ids["css"])
    code, res = cli("export", "--markdown", str(tmp_path / "after"), "--sessions", "--json")
    assert res["sessions"] == 1 and "CSS grid" not in "".join(
        p.read_text() for p in (tmp_path / "after").rglob("*.md"))


NOTE = """---
name: testing policy
description: how the user wants tests run
type: feedback
---
Run the whole suite with make test before every push; never skip the slow tier on release branches.
"""


def test_claude_code_memory_notes_are_archived_once_per_version_searchable_and_citable(user_home, store, cli):
    log = ClaudeLog(user_home, session="sess-mem", cwd="/home/dev/src/shop.web")
    log.user("u-1", "Let us fix the checkout rounding.")
    log.write()
    memory = log.path.parent / "memory"
    memory.mkdir()
    (memory / "MEMORY.md").write_text("- [testing policy](feedback_testing.md): run make test before pushing\n")
    note = memory / "feedback_testing.md"
    note.write_text(NOTE)
    report = origin.sync(store)
    assert report.sources["claude-memory"]["events_added"] == 2 and report.problems == []
    rows = store.conn.execute("SELECT id, session, project, role, kind, text FROM event WHERE source = 'claude-memory' "
                              "ORDER BY id").fetchall()
    folder = log.path.parent.name
    assert [(r["session"], r["project"], r["role"], r["kind"]) for r in rows] == [
        (f"memory:{folder}", "shop.web", "memory", "message")] * 2  # the project comes from the transcript's cwd
    assert rows[1]["text"] == NOTE and rows[1]["id"].startswith(f"claude-memory:{folder}/feedback_testing.md@")
    # Transcripts are unchanged: the memory folder is not a session.
    assert store.conn.execute("SELECT count(*) FROM event WHERE source = 'claude-code'").fetchone()[0] == 1
    hits = origin.search_events(store, "slow tier on release")
    assert [h["id"] for h in hits] == [rows[1]["id"]]
    entry = origin.remember(store, kind="cognition", text="The user wants make test run before every push.",
                            sources=[{"quote": "make test before every push"}], author="t")
    assert entry["sources"][0]["event"] == rows[1]["id"] and entry["verified"] == "verified"
    # Unchanged, touched, then edited: one new event for the new version; the old one stays citable.
    assert origin.sync(store).events_added == 0
    os.utime(note, (1_900_000_000, 1_900_000_000))
    assert origin.sync(store).events_added == 0
    note.write_text(NOTE.replace("never skip the slow tier", "the slow tier may wait for nightly"))
    os.utime(note, (1_900_000_100, 1_900_000_100))
    assert origin.sync(store).events_added == 1
    texts = [r[0] for r in store.conn.execute(
        "SELECT text FROM event WHERE id LIKE 'claude-memory:%feedback_testing.md@%' ORDER BY ts")]
    assert len(texts) == 2 and "never skip" in texts[0] and "nightly" in texts[1]
    assert origin.get_entry(store, entry["id"])["verified"] == "verified"
    # The mirror is append-only: both versions, one line each.
    mirror = store.conn.execute("SELECT mirror FROM raw_file WHERE path = ?", (str(note),)).fetchone()[0]
    lines = (store.home / mirror).read_text().splitlines()
    assert [json.loads(x)["text"] for x in lines] == texts
    code, out = cli("search", "nightly", "--source", "claude-memory")
    assert code == 0 and "nightly" in out
