"""Every adapter through the real engine: invariants 1 and 3, search, status, secrets.

``LAYOUTS`` lays each agent's real (or documented, made-here) fixtures out
where the agent keeps them.  The tests are parametrized over the adapter
registry, so an adapter added without a layout fails the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import adapters
import origin
from conftest import FIXTURES, read_line
from helpers import LAYOUTS, LOCALPUSH, decompressed

FAKE_TOKEN = "sk-origin-test-planted-9f8e7d6c5b4a39281706"


@pytest.fixture
def lay(user_home, monkeypatch):
    """Lay out the named agents' fixtures under HOME (and set their variables)."""

    def do(*names: str) -> None:
        for n in names:
            for k, v in (LAYOUTS[n](user_home) or {}).items():
                monkeypatch.setenv(k, v)

    return do


def test_every_registered_adapter_has_a_fixture_layout():
    assert set(adapters.ADAPTERS) == set(LAYOUTS), "add a layout of real fixtures for each new adapter"


@pytest.mark.parametrize("name", sorted(adapters.ADAPTERS))
def test_invariant_1_every_adapters_events_read_back_their_mirror_lines(name, lay, origin_home):
    lay(name)
    with origin.open_store(origin_home) as s:
        report = origin.sync(s)
        assert report.sources[name]["events_added"] > 0
        rows = s.conn.execute(
            "SELECT e.*, r.mirror, r.path, r.kind AS fkind, r.compression FROM event e "
            "JOIN raw_file r ON r.id = e.raw_file_id WHERE e.source = ?", (name,)).fetchall()
        assert len(rows) == report.sources[name]["events_added"]
        for r in rows:
            mirror = origin_home / r["mirror"]
            lines = [read_line(mirror, r["line"] + k) for k in range(r["span"])]
            assert origin.read_raw(s, r["mirror"], r["offset"], r["span"]).encode() == b"\n".join(lines)
            if r["fkind"] == "log":
                source_lines = decompressed(r["path"], r["compression"]).split(b"\n")
                assert lines == source_lines[r["line"] - 1 : r["line"] - 1 + r["span"]]
            else:
                assert all(isinstance(json.loads(x), dict) for x in lines)


@pytest.mark.parametrize("name", sorted(adapters.ADAPTERS))
def test_invariant_3_every_adapters_mirrors_match_and_resync_adds_nothing(name, lay, origin_home):
    lay(name)
    with origin.open_store(origin_home) as s:
        first = origin.sync(s)
        assert first.events_added > 0
        for r in s.conn.execute("SELECT * FROM raw_file WHERE source = ?", (name,)):
            mirror = (origin_home / r["mirror"]).read_bytes()
            assert len(mirror) == r["bytes_ingested"]
            if r["kind"] == "log":
                src = decompressed(r["path"], r["compression"])
                assert mirror == src[: len(mirror)] and src[len(mirror):].count(b"\n") == 0
        snapshot = {r["mirror"]: (origin_home / r["mirror"]).read_bytes() for r in s.conn.execute("SELECT mirror FROM raw_file")}
        again = origin.sync(s)
        assert again.events_added == 0
        for mirror, data in snapshot.items():
            assert (origin_home / mirror).read_bytes() == data
        assert s.conn.execute("SELECT count(*) FROM raw_file WHERE generation > 0").fetchone()[0] == 0


def test_search_finds_the_text_of_every_source_with_its_source_project_and_session(lay, origin_home):
    lay(*LAYOUTS)
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        st = origin.status(s)
        assert set(st["sources"]) == set(adapters.ADAPTERS)
        for name in adapters.ADAPTERS:
            assert st["sources"][name]["events"] > 0, name
            row = s.conn.execute(
                "SELECT * FROM event WHERE source = ? AND kind = 'message' AND indexed = 1 AND length(text) > 30 "
                "ORDER BY seq LIMIT 1", (name,)).fetchone()
            assert row is not None, name
            # Quotes are the query's phrase syntax, not part of the words.
            words = [w.strip('"') for w in row["text"].split() if len(w.strip('"')) >= 4][:4]
            hits = origin.search_events(s, " ".join(words), source=name, limit=200)
            hit = next((h for h in hits if h["id"] == row["id"]), None)
            assert hit is not None, (name, words)
            assert hit["source"] == name and hit["session"] == row["session"] and hit["project"] == row["project"]
            shown = origin.raw_sources(s, row["id"])[0]
            assert shown["raw"] and shown["mirror"].startswith(f"raw/{name}/")


def test_codex_rollout_seen_plain_then_compressed_then_archived_adds_each_event_once(user_home, origin_home):
    zstd = pytest.importorskip("zstandard")
    day = user_home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    src = sorted(LOCALPUSH.glob("rollout-*.jsonl"))[0]
    plain = day / src.name
    shutil.copy(src, plain)
    with origin.open_store(origin_home) as s:
        first = origin.sync(s).events_added
        assert first > 0
        data = plain.read_bytes()
        zst = day / (src.name + ".zst")
        zst.write_bytes(zstd.ZstdCompressor().compress(data))
        assert origin.sync(s).events_added == 0  # both present: the plain one wins
        plain.unlink()
        assert origin.sync(s).events_added == 0
        archived = user_home / ".codex" / "archived_sessions"
        archived.mkdir()
        zst.rename(archived / zst.name)
        assert origin.sync(s).events_added == 0
        assert s.conn.execute("SELECT count(*) FROM event").fetchone()[0] == first


def test_an_open_block_is_emitted_once_the_source_goes_quiet(user_home, origin_home):
    session = user_home / ".grok" / "sessions" / "%2Fsrv%2Fq" / "019f7000-0000-7000-8000-0000000000ff"
    session.mkdir(parents=True)
    def update(kind, text, t):
        return json.dumps({"timestamp": t, "method": "session/update", "params": {
            "sessionId": session.name, "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}})
    (session / "updates.jsonl").write_text("\n".join([
        update("user_message_chunk", "what does the quiet rule do?", 1767225600),
        update("agent_message_chunk", "It waits until the file ", 1767225601),
        update("agent_message_chunk", "stops changing.", 1767225602),
    ]) + "\n")
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        assert origin.search_events(s, "stops changing") == []
        old = time.time() - 2 * origin.QUIET_MS / 1000
        os.utime(session / "updates.jsonl", (old, old))
        origin.sync(s)
        hits = origin.search_events(s, "stops changing")
        assert [h["role"] for h in hits] == ["assistant"]
        assert origin.sync(s).events_added == 0


def test_credentials_next_to_agent_logs_never_reach_the_store(lay, user_home, origin_home):
    lay(*LAYOUTS)
    secret = json.dumps({"token": FAKE_TOKEN, "apiKey": FAKE_TOKEN})
    for rel in (".codex/auth.json", ".grok/auth.json", ".claude/.credentials.json", ".zcode/cli/config.json",
                ".zcode/v2/credentials.json", ".codex/config.toml", ".grok/config.toml",
                ".local/share/opencode/auth.json", ".gemini/oauth_creds.json", ".gemini/settings.json",
                ".config/goose/secrets.yaml", ".config/goose/config.yaml"):
        p = user_home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(secret)
    db = user_home / "Cursor" / "User" / "globalStorage" / "state.vscdb"
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO ItemTable (key, value) VALUES ('cursorAuth/accessToken', ?)", (FAKE_TOKEN,))
        c.execute("INSERT INTO ItemTable (key, value) VALUES ('cursorAuth/refreshToken', ?)", (FAKE_TOKEN,))
    # OpenCode keeps accounts and credentials in the same database as its sessions.
    with sqlite3.connect(user_home / ".local" / "share" / "opencode" / "opencode.db") as c:
        c.execute("INSERT INTO credential (id, label, value, time_created, time_updated) VALUES ('c', 'k', ?, 1, 1)",
                  (FAKE_TOKEN,))
        c.execute("INSERT INTO account (id, email, url, access_token, refresh_token, time_created, time_updated) "
                  "VALUES ('a', 'e', 'u', ?, ?, 1, 1)", (FAKE_TOKEN, FAKE_TOKEN))
    with origin.open_store(origin_home) as s:
        assert origin.sync(s).events_added > 0
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    leaks = [p for p in origin_home.rglob("*") if p.is_file() and FAKE_TOKEN.encode() in p.read_bytes()]
    assert leaks == []


def test_background_syncs_read_an_agent_database_still_being_written_at_most_every_thirty_seconds(lay, origin_home, monkeypatch):
    lay("zcode")
    with origin.open_store(origin_home) as s:
        assert origin.sync(s).sources["zcode"]["events_added"] > 0
        reads = []
        real = adapters.ZCode.export

        def counting(self, *a, **kw):
            reads.append(1)
            return real(self, *a, **kw)

        monkeypatch.setattr(adapters.ZCode, "export", counting)
        db = origin_home.parent / "home" / ".zcode" / "cli" / "db" / "db.sqlite"
        os.utime(db, None)  # the agent keeps writing: the database is not quiet
        origin.sync(s, revisit_db_ms=origin.DB_REVISIT_MS)
        assert reads == []  # read moments ago: a background sync leaves it
        origin.sync(s)
        assert reads == [1]  # a sync someone asked for always reads it
        s.conn.execute("UPDATE raw_file SET last_sync = last_sync - ? WHERE source = 'zcode'",
                       (origin.DB_REVISIT_MS + 1000,))
        os.utime(db, None)
        origin.sync(s, revisit_db_ms=origin.DB_REVISIT_MS)
        assert reads == [1, 1]  # due again


def test_a_reverted_codex_rollout_with_the_same_thread_keeps_its_own_lines(user_home, origin_home):
    """A revert writes `…-<thread>_<rollout>.jsonl`: same thread, new lines after the shared start."""
    day = user_home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    src = sorted(LOCALPUSH.glob("rollout-*.jsonl"))[1]
    lines = src.read_text().splitlines()
    shutil.copy(src, day / src.name)
    keep = 6
    diverged = []
    for i, raw in enumerate(lines[keep:]):
        rec = json.loads(raw)
        if rec.get("type") == "event_msg" and rec["payload"].get("type") == "user_message":
            rec["payload"]["message"] = f"after the revert, take another road {i}"
        diverged.append(json.dumps(rec))
    revert = day / (src.stem + "_019c0000-0000-7000-8000-00000000beef.jsonl")
    revert.write_text("\n".join(lines[:keep] + diverged) + "\n")
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        hits = origin.search_events(s, "another road")
        assert hits  # the revert's own prompt is archived, not dropped as a duplicate id
        thread = json.loads(lines[0])["payload"]["id"]
        assert {h["session"] for h in hits} == {thread}
        # The shared start is stored once: the revert file owns only events of
        # the lines after it.
        revert_lines = [r[0] for r in s.conn.execute(
            "SELECT e.line FROM event e JOIN raw_file f ON f.id = e.raw_file_id WHERE f.path = ?", (str(revert),))]
        assert revert_lines and min(revert_lines) > keep


def test_a_list_of_agent_folders_with_spaces_after_the_commas_is_synced_and_set_up_alike(user_home, tmp_path,
                                                                                         origin_home):
    # Issue 13 item 6: "/a, /b" named "/a" and " /b" for discovery, so the
    # second folder (and with it Claude Code) was left out of the sync.
    first, second = tmp_path / "cc-one", tmp_path / "cc-two"
    shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project",
                    first / "projects" / "-path-to-Demo")
    shutil.copytree(FIXTURES / "claude-code" / "agent-sessions" / "subagent", second / "projects" / "-tmp")
    env = {"HOME": str(user_home), "PATH": "", "CLAUDE_CONFIG_DIR": f" {first} , {second}, "}
    assert adapters.ADAPTERS["claude-code"].roots(env, user_home) == [first, second]
    with origin.open_store(origin_home) as s:
        origin.sync(s, env=env, home=user_home)
        files = {r[0] for r in s.conn.execute("SELECT path FROM raw_file WHERE source = 'claude-code'")}
    assert any(p.startswith(str(first) + os.sep) for p in files)
    assert any(p.startswith(str(second) + os.sep) for p in files)
    origin.setup_agents(env, user_home, ["/usr/bin/origin"], agents=["claude-code"])
    for d in (first, second):
        assert "origin" in json.loads((d / ".claude.json").read_text())["mcpServers"]


def _opencode_legacy_tree(db: Path, storage: Path) -> None:
    """Write a database's sessions back into the legacy JSON tree, as OpenCode's migration left them."""
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    for sid, project, directory, title, version, created, updated in conn.execute(
            "SELECT id, project_id, directory, title, version, time_created, time_updated FROM session"):
        path = storage / "session" / project / f"{sid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"id": sid, "projectID": project, "directory": directory, "title": title,
                                    "version": version, "time": {"created": created, "updated": updated}}))
    for mid, sid, data in conn.execute("SELECT id, session_id, data FROM message"):
        path = storage / "message" / sid / f"{mid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"id": mid, "sessionID": sid, **json.loads(data)}))
    for pid, mid, sid, data in conn.execute("SELECT id, message_id, session_id, data FROM part"):
        path = storage / "part" / mid / f"{pid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"id": pid, "messageID": mid, "sessionID": sid, **json.loads(data)}))
    conn.close()


def test_an_opencode_session_left_in_the_legacy_tree_after_migration_is_archived_once(user_home, origin_home):
    root = user_home / ".local" / "share" / "opencode"
    root.mkdir(parents=True)
    db = FIXTURES / "opencode" / "lantern-sqlite" / "opencode.db"
    shutil.copy(db, root / "opencode.db")
    with origin.open_store(origin_home) as s:
        only_db = origin.sync(s).sources["opencode"]["events_added"]
        assert only_db == 11
        _opencode_legacy_tree(db, root / "storage")
        report = origin.sync(s)
        assert report.sources["opencode"]["files"] == 4 and report.sources["opencode"]["parse_errors"] == 0
        assert report.sources["opencode"]["events_added"] == 0
        assert s.conn.execute("SELECT count(*) FROM event WHERE source = 'opencode'").fetchone()[0] == only_db
        assert s.conn.execute("SELECT count(*) FROM session WHERE source = 'opencode'").fetchone()[0] == 3
