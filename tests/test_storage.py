"""Storage: schema, connection settings, append-only guards."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

import origin
from conftest import expected_rows, index_rows


def test_every_design_table_exists_and_schema_is_idempotent(origin_home):
    with origin.open_store(origin_home) as s:
        names = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master")}
    assert set(origin.TABLES) <= names
    # Opening again (and again) applies nothing new and loses nothing.
    with origin.open_store(origin_home) as s:
        s.conn.execute("INSERT INTO setting VALUES ('k', 'v')")
    with origin.open_store(origin_home) as s:
        assert s.conn.execute("SELECT value FROM setting WHERE key = 'k'").fetchone()[0] == "v"
        origin._apply_schema(s.conn)


def test_a_store_made_before_an_index_existed_gets_it_when_opened(origin_home):
    with origin.open_store(origin_home) as s:
        for name in ("session_first_ts", "raw_file_source_counts"):
            s.conn.execute(f"DROP INDEX {name}")
    with origin.open_store(origin_home) as s:
        names = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert set(origin._schema_indexes()) <= names
    assert {"session_first_ts", "raw_file_source_counts", "session_source_events"} <= names


def test_connection_is_wal_with_busy_timeout_and_explicit_transactions(store):
    c = store.conn
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert c.execute("PRAGMA busy_timeout").fetchone()[0] == origin.BUSY_TIMEOUT_MS
    assert c.execute("PRAGMA recursive_triggers").fetchone()[0] == 1
    assert c.isolation_level is None  # no hidden deferred BEGIN before DML
    with origin.transaction(c):
        assert c.in_transaction
    assert not c.in_transaction


def test_fts_tables_use_the_trigram_tokenizer(store):
    sql = {r[0]: r[1] for r in store.conn.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE '%_fts'")}
    assert "trigram" in sql["entry_fts"] and "content=" in sql["entry_fts"]
    # The event index: one contentless trigram table per part, in its own file.
    reader = store.reader
    for part, (file, fts, _kinds) in origin.EVENT_INDEXES.items():
        assert (store.home / origin.INDEX_DIR / file).is_file()
        ddl = reader.execute(f"SELECT sql FROM ix_{part}.sqlite_master WHERE name = ?", (fts,)).fetchone()[0]
        assert "trigram" in ddl and "content=''" in ddl and "detail='full'" in ddl


def _audit(c, action="login"):
    c.execute("INSERT INTO audit_log (ts, actor, action, details) VALUES (1, 'owner', ?, '{}')", (action,))
    return c.execute("SELECT max(id) FROM audit_log").fetchone()[0]


@pytest.mark.parametrize("statement", [
    "UPDATE audit_log SET action = 'x' WHERE id = {id}",
    "DELETE FROM audit_log WHERE id = {id}",
    "INSERT OR REPLACE INTO audit_log (id, ts, actor, action) VALUES ({id}, 2, 'x', 'y')",
    "REPLACE INTO audit_log (id, ts, actor, action) VALUES ({id}, 2, 'x', 'y')",
])
def test_audit_log_refuses_update_delete_and_replace(store, statement):
    rid = _audit(store.conn)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store.conn.execute(statement.format(id=rid))
    row = store.conn.execute("SELECT action FROM audit_log WHERE id = ?", (rid,)).fetchone()
    assert row[0] == "login"


def test_audit_log_refuses_replace_even_without_recursive_triggers(store):
    rid = _audit(store.conn)
    store.conn.execute("PRAGMA recursive_triggers = OFF")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store.conn.execute("INSERT OR REPLACE INTO audit_log (id, ts, actor, action) VALUES (?, 2, 'x', 'y')", (rid,))


def _event(c):
    c.execute("INSERT INTO raw_file (source, path, rel, mirror, first_seen) VALUES ('t', '/p', 'p', 'raw/t/p', 0)")
    c.execute("INSERT INTO event (id, source, session, kind, text, raw_file_id, line, offset) "
              "VALUES ('t:1', 't', 's', 'message', 'hello world', 1, 1, 0)")


@pytest.mark.parametrize("statement", [
    "UPDATE event SET text = 'changed' WHERE id = 't:1'",
    "DELETE FROM event WHERE id = 't:1'",
    "INSERT OR REPLACE INTO event (id, source, session, kind, text, raw_file_id, line, offset) "
    "VALUES ('t:1', 't', 's', 'message', 'changed', 1, 1, 0)",
])
def test_invariant_3_events_are_never_rewritten(store, statement):
    _event(store.conn)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store.conn.execute(statement)
    assert store.conn.execute("SELECT text FROM event").fetchone()[0] == "hello world"
    # INSERT OR IGNORE of an existing id is the idempotent path ingest uses.
    store.conn.execute("INSERT OR IGNORE INTO event (id, source, session, kind, text, raw_file_id, line, offset) "
                       "VALUES ('t:1', 't', 's', 'message', 'other', 1, 1, 0)")
    assert store.conn.execute("SELECT count(*) FROM event").fetchone()[0] == 1


@pytest.mark.parametrize("table", ["entry", "entry_source", "tombstone", "forgotten_entry", "excluded_event"])
def test_forget_and_entry_tables_refuse_update_and_delete(store, table):
    for op in ("UPDATE", "DELETE"):
        trig = store.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                                  (f"{table}_no_{op.lower()}",)).fetchone()
        assert trig is not None


def test_missing_fts5_trigram_gives_a_clear_error():
    class NoTrigram:
        def execute(self, sql, *a):
            raise sqlite3.OperationalError("no such tokenizer: trigram")

    with pytest.raises(origin.StoreError, match="FTS5 with the trigram tokenizer.*3.34"):
        origin.check_sqlite(NoTrigram())


def test_unusable_home_gives_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(origin.StoreError, match="ORIGIN_HOME"):
        origin.open_store(blocker / "home")


def test_corrupt_database_file_gives_a_clear_error(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "origin.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(origin.StoreError, match="not a usable Origin store"):
        origin.open_store(home)


def test_the_event_index_stays_in_step_with_the_events(claude_root, store):
    origin.sync(store)
    want = expected_rows(store)
    assert want["message"] and want["tool"]
    assert index_rows(store) == want
    top = store.conn.execute("SELECT max(seq) FROM event").fetchone()[0]
    assert all(origin.index_marks(store.reader, part)[0] == top for part in origin.EVENT_INDEXES)
    assert not origin.index_lagging(store)
    # A second sync of the same logs adds neither events nor index rows.
    origin.sync(store)
    assert index_rows(store) == want
    assert not store.conn.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'event_fts%'").fetchone()


def test_a_lost_index_is_rebuilt_and_search_never_misses_meanwhile(claude_root, store):
    origin.sync(store)
    word = "the"
    before = [e["id"] for e in origin.search_events(store, word, limit=200, recent=True)]
    assert len(before) > 5
    store.close()
    shutil.rmtree(store.home / origin.INDEX_DIR)
    with origin.open_store(store.home) as s:
        assert origin.status(s)["index_behind"]
        # Nothing is indexed now: the scan of what the index lacks finds the same events.
        assert [e["id"] for e in origin.search_events(s, word, limit=200, recent=True)] == before
        origin.sync(s)
        assert not origin.status(s)["index_behind"]
        assert index_rows(s) == expected_rows(s)
        assert [e["id"] for e in origin.search_events(s, word, limit=200, recent=True)] == before


def test_index_catch_up_works_in_bounded_steps(claude_root, store, monkeypatch):
    monkeypatch.setattr(origin, "IndexWriters", lambda home: None)  # sync leaves the index alone
    origin.sync(store)
    monkeypatch.undo()
    assert origin.index_lagging(store)
    conn = origin._open_index(store.home, "message")
    try:
        steps = 1
        while origin.index_catch_up(conn, "message", batch=7):
            steps += 1
    finally:
        conn.close()
    top = store.conn.execute("SELECT max(seq) FROM event").fetchone()[0]
    assert steps == -(-top // 7)
    assert index_rows(store)["message"] == expected_rows(store)["message"]


def test_an_index_failure_is_reported_once_and_loses_nothing(claude_root, store, monkeypatch):
    def broken(conn, part, **kw):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(origin, "index_catch_up", broken)
    report = origin.sync(store)
    monkeypatch.undo()
    assert report.events_added > 0
    index_problems = [p for p in report.problems if p["source"] == "index"]
    assert len(index_problems) == len(origin.EVENT_INDEXES)  # once per part, not once per commit
    assert all("disk I/O error" in p["error"] and "origin sync" in p["error"] for p in index_problems)
    assert origin.status(store)["index_behind"]
    hits = [e["id"] for e in origin.search_events(store, "the", limit=200, recent=True)]
    assert len(hits) > 5  # found by the scan of what the index lacks
    assert origin.sync(store).problems == []
    assert index_rows(store) == expected_rows(store)
    assert [e["id"] for e in origin.search_events(store, "the", limit=200, recent=True)] == hits


def _tool_text_bytes(store, part: str) -> int:
    want = expected_rows(store)[part]
    return sum(len(t.encode()) for seq, t in store.conn.execute(
        "SELECT seq, text FROM event WHERE kind IN ('tool_call', 'tool_result')") if seq in want)


def test_tool_events_are_split_by_volume_over_two_parts_and_messages_keep_their_own(user_home, store):
    # Issue 13 item 20: with one part for every tool event, its thread alone
    # set the pace of a first sync while the message thread idled.
    from corpus import write_claude_corpus

    write_claude_corpus(user_home / ".claude", files=6, turns=12, seed=13, edits=0.5)
    origin.sync(store)
    rows = index_rows(store)
    assert rows == expected_rows(store)
    tools = {r[0] for r in store.conn.execute(
        "SELECT seq FROM event WHERE kind IN ('tool_call', 'tool_result') AND indexed = 1")}
    parts = [p for p, (_f, _t, kinds) in origin.EVENT_INDEXES.items() if "tool_result" in kinds]
    assert len(parts) == 2 and not rows[parts[0]] & rows[parts[1]] and rows[parts[0]] | rows[parts[1]] == tools
    volume = [_tool_text_bytes(store, p) for p in parts]
    assert min(volume) > 0.35 * sum(volume)  # both halves carry a fair share of the text
    messages = {r[0] for r in store.conn.execute("SELECT seq FROM event WHERE kind = 'message' AND indexed = 1")}
    assert rows["message"] == messages
    # A search with tools finds hits held by either part, each once.
    hits = [h["id"] for h in origin.search_events(store, "the", include_tools=True, limit=200)]
    seqs = {r[0] for r in store.conn.execute(
        f"SELECT seq FROM event WHERE id IN ({','.join('?' * len(hits))})", hits)}
    assert len(set(hits)) == len(hits) and seqs & rows[parts[0]] and seqs & rows[parts[1]]


def test_a_tool_index_built_whole_by_an_older_version_is_rebuilt_as_its_slice(claude_root, store):
    origin.sync(store)
    want = expected_rows(store)
    store.close()
    # Make index/tools.db look as an older version left it: no slice mark,
    # and every tool event in it (those of the other slice too).
    path = store.home / origin.INDEX_DIR / origin.EVENT_INDEXES["tool"][0]
    c = sqlite3.connect(path)
    c.execute("DELETE FROM mark WHERE name = 'slices'")
    c.executemany("INSERT INTO tool_fts (rowid, text) VALUES (?, 'old whole part')", [(q,) for q in want["tool2"]])
    c.commit()
    c.close()
    with origin.open_store(store.home) as s:
        origin.sync(s)
        assert index_rows(s) == want
        marks = dict(s.reader.execute("SELECT name, value FROM ix_tool.mark"))
        assert marks["slices"] == 2
