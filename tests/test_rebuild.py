"""The store rebuilt from what Origin keeps: the entries journal and `origin rebuild`.

Stores are real SQLite files under tmp_path, fed the real Claude Code
fixture logs (tests/fixtures) by origin.sync.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import origin


def _journal(home: Path) -> list[dict]:
    path = home / origin.ENTRIES_LOG
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _entry_rows(home: Path) -> dict:
    """Every entry with its sources, keyed by id (local seqs left out: a rebuild renumbers them)."""
    with origin.open_store(home) as store:
        conn = store.conn
        out = {}
        for r in conn.execute("SELECT * FROM entry ORDER BY seq"):
            d = {k: r[k] for k in r.keys() if k != "seq"}
            d["sources"] = sorted(tuple(s) for s in conn.execute(
                "SELECT event_id, quote FROM entry_source WHERE entry_id = ?", (r["id"],)))
            d["status"] = origin.entry_status(conn, r["id"])
            out[r["id"]] = d
        return out


def _drop_db(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(home / origin.DB_NAME) + suffix).unlink(missing_ok=True)


@pytest.fixture
def entries_home(claude_root, origin_home):
    """A synced fixture store with an entry, its correction and a forgotten entry; return their ids."""
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        kept = origin.remember(store, kind="knowledge", text="the build runs on two cores",
                               sources=[{"quote": "Package.json Analysis Summary"}], author="user", project="demo")
        fixed = origin.correct(store, kept["id"], text="the build runs on four cores", author="user")
        gone = origin.remember(store, kind="memory", text="a private detail nobody should read again",
                               sources=[{"quote": "The directory appears to be empty"}], author="user")
        origin.forget(store, gone["id"], reason="private")
    return kept["id"], fixed["id"], gone["id"]


def test_every_remember_and_correct_is_in_the_entries_journal(entries_home, origin_home):
    kept, fixed, gone = entries_home
    records = {r["id"]: r for r in _journal(origin_home)}
    assert set(records) == {kept, fixed, gone}
    rows = _entry_rows(origin_home)
    for eid, rec in records.items():
        row = rows[eid]
        assert rec["type"] == "entry"
        for field in ("kind", "text", "confidence", "author", "project", "supersedes", "valid_from", "valid_to",
                      "created_at"):
            assert rec[field] == row[field], field
        assert sorted(tuple(s) for s in rec["sources"]) == row["sources"]
    assert records[fixed]["supersedes"] == kept
    with origin.open_store(origin_home) as store:
        assert origin._setting(store.conn, origin._ENTRIES_DONE) == str((origin_home / origin.ENTRIES_LOG).stat().st_size)


def test_invariant_2_a_lost_origin_db_gets_its_entries_back_and_a_forgotten_one_stays_forgotten(
        entries_home, origin_home):
    kept, fixed, gone = entries_home
    before = _entry_rows(origin_home)
    _drop_db(origin_home)
    after = _entry_rows(origin_home)
    assert after == before
    assert after[gone]["status"] == "forgotten" and after[kept]["status"] == "superseded"
    with origin.open_store(origin_home) as store:
        listed = {e["id"] for e in origin.list_entries(store, history=True)}
        assert gone not in listed and fixed in listed
        assert not origin.search_entries(store, "private detail", limit=10)
        with pytest.raises(origin.Forgotten):
            origin.get_entry(store, gone)


def test_the_entries_journal_replays_by_id_and_takes_a_record_a_crash_kept_out_of_the_tables(
        entries_home, origin_home):
    kept, fixed, gone = entries_home
    with origin.open_store(origin_home) as store:
        orphan = origin.entry_records(store.conn, [fixed])[0]
    # A remember whose record reached the journal but whose commit did not.
    orphan = {**orphan, "id": "ent_0000000000000000aa", "supersedes": None, "text": "written before a crash"}
    with open(origin_home / origin.ENTRIES_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(orphan) + "\n" + '{"type": "entry", "id": "ent_torn')
    for _ in range(2):
        rows = _entry_rows(origin_home)
        assert rows[orphan["id"]]["text"] == "written before a crash"
        assert len(rows) == 4


def test_a_store_older_than_the_journal_writes_its_entries_into_it_once(entries_home, origin_home):
    (origin_home / origin.ENTRIES_LOG).unlink()
    with origin.open_store(origin_home) as store:
        with origin.transaction(store.conn):
            store.conn.execute("DELETE FROM setting WHERE key = ?", (origin._ENTRIES_DONE,))
    before = _entry_rows(origin_home)
    assert {r["id"] for r in _journal(origin_home)} == set(before)
    size = (origin_home / origin.ENTRIES_LOG).stat().st_size
    _entry_rows(origin_home)
    assert (origin_home / origin.ENTRIES_LOG).stat().st_size == size
    _drop_db(origin_home)
    assert _entry_rows(origin_home) == before


def test_purge_rewrites_the_entries_journal_without_the_forgotten_text(entries_home, origin_home):
    kept, fixed, gone = entries_home
    with origin.open_store(origin_home) as store:
        origin.purge(store)
    data = (origin_home / origin.ENTRIES_LOG).read_bytes()
    assert b"private detail" not in data
    records = {r["id"]: r for r in _journal(origin_home)}
    assert records[gone]["text"] == "" and records[gone]["project"] is None
    assert all(q is None for _e, q in records[gone]["sources"])
    assert records[gone]["kind"] == "memory" and records[gone]["created_at"]
    assert records[fixed]["text"] == "the build runs on four cores"
    before = _entry_rows(origin_home)
    before[gone]["project"] = None  # the journal keeps no project of a purged entry
    _drop_db(origin_home)
    assert _entry_rows(origin_home) == before


def test_a_backup_carries_the_entries_journal_and_a_restore_brings_it_back(entries_home, origin_home, tmp_path):
    with origin.open_store(origin_home) as store:
        manifest = origin.backup(store, tmp_path / "b")
    assert origin.ENTRIES_LOG in {f["path"] for f in manifest["files"]}
    restored = tmp_path / "restored"
    origin.restore(tmp_path / "b", restored)
    assert (restored / origin.ENTRIES_LOG).read_bytes() == (origin_home / origin.ENTRIES_LOG).read_bytes()
    assert _entry_rows(restored) == _entry_rows(origin_home)
