"""The store rebuilt from what Origin keeps: the entries journal and `origin rebuild`.

Stores are real SQLite files under tmp_path, fed the real Claude Code
fixture logs (tests/fixtures) by origin.sync.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import origin
from conftest import expected_rows, index_rows
from helpers import GrokOpenBlock, served_hub


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


def _synced_with_entries(store) -> tuple[str, str, str]:
    """Sync, remember an entry, correct it, remember another and forget it; return the three ids."""
    origin.sync(store)
    kept = origin.remember(store, kind="knowledge", text="the build runs on two cores",
                           sources=[{"quote": "Package.json Analysis Summary"}], author="user", project="demo")
    fixed = origin.correct(store, kept["id"], text="the build runs on four cores", author="user")
    gone = origin.remember(store, kind="memory", text="a private detail nobody should read again",
                           sources=[{"quote": "The directory appears to be empty"}], author="user")
    origin.forget(store, gone["id"], reason="private")
    return kept["id"], fixed["id"], gone["id"]


@pytest.fixture
def entries_home(claude_root, origin_home):
    """A synced fixture store with an entry, its correction and a forgotten entry; return their ids."""
    with origin.open_store(origin_home) as store:
        return _synced_with_entries(store)


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


@pytest.mark.parametrize("ending", ["\n", ""], ids=["whole-line", "newline-not-written"])
def test_invariant_2_a_forget_a_crashed_writer_left_in_the_log_is_applied_by_the_next_forget(
        entries_home, origin_home, ending):
    kept, fixed, gone = entries_home
    with origin.open_store(origin_home) as store:
        cited = {r[0] for r in store.conn.execute("SELECT event_id FROM entry_source")}
        event = next(r[0] for r in store.conn.execute(
            "SELECT id FROM event WHERE role = 'user' AND kind = 'message' AND id NOT IN "
            "(SELECT event_id FROM excluded_event) ORDER BY id") if r[0] not in cited)
        plan = origin.plan_forget(store, event)
        rec = origin.check_tombstone_record({
            "uid": origin.new_tombstone_uid(), "target": event, "kind": plan["kind"], "reason": None,
            "created_at": origin.now_ms(), "device": None, "entries": plan["entries"], "events": plan["events"],
            "fingerprints": plan["fingerprints"]})
        # A forget whose record reached the log but whose commit did not,
        # written while this store is open.
        with open(origin_home / origin.TOMBSTONE_LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"type": "tombstone", **rec}) + ending)
        origin.forget(store, fixed, reason="another forget")
        with pytest.raises(origin.Forgotten):
            origin.get_event(store, event)
    with origin.open_store(origin_home) as store:
        with pytest.raises(origin.Forgotten):
            origin.get_event(store, event)
        assert store.conn.execute("SELECT 1 FROM tombstone WHERE uid = ?", (rec["uid"],)).fetchone()


@pytest.mark.parametrize("ending", ["\n", ""], ids=["whole-line", "newline-not-written"])
def test_invariant_2_an_entry_a_crashed_writer_left_in_the_journal_is_applied_by_the_next_remember(
        entries_home, origin_home, ending):
    kept, fixed, gone = entries_home
    with origin.open_store(origin_home) as store:
        orphan = {**origin.entry_records(store.conn, [fixed])[0], "id": "ent_0000000000000000ab", "supersedes": None,
                  "text": "written before a crash"}
        with open(origin_home / origin.ENTRIES_LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(orphan) + ending)
        origin.remember(store, kind="knowledge", text="remembered after the crash",
                        sources=[{"quote": "Package.json Analysis Summary"}], author="user")
        assert origin.get_entry(store, orphan["id"])["text"] == "written before a crash"
    assert _entry_rows(origin_home)[orphan["id"]]["text"] == "written before a crash"


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


# -- origin rebuild ------------------------------------------------------------

#: Each table as rows keyed by global ids: what a rebuilt store must hold again.
COMPARED = {
    "events": "SELECT e.id, e.source, e.session, e.ts, e.ts_approx, e.project, e.cwd, e.branch, e.model, e.role, "
              "e.kind, e.text, e.indexed, r.mirror, e.line, e.offset, e.span "
              "FROM event e JOIN raw_file r ON r.id = e.raw_file_id",
    "entries": "SELECT id, kind, text, confidence, author, project, supersedes, valid_from, valid_to, created_at "
               "FROM entry",
    "entry sources": "SELECT entry_id, event_id, quote FROM entry_source",
    "tombstones": "SELECT uid, target, kind, reason, created_at, device FROM tombstone",
    "excluded events": "SELECT x.event_id, t.uid FROM excluded_event x JOIN tombstone t ON t.id = x.tombstone_id",
    "forgotten entries": "SELECT f.entry_id, t.uid FROM forgotten_entry f JOIN tombstone t ON t.id = f.tombstone_id",
    "fingerprints": "SELECT f.key_id, f.fp, t.uid FROM tombstone_fingerprint f "
                    "JOIN tombstone t ON t.id = f.tombstone_id",
    "sessions": "SELECT source, id, title, project, cwd, branch, first_ts, last_ts, events, messages FROM session",
    "mirrors": "SELECT mirror, source, rel, generation, kind, bytes_ingested, lines_ingested FROM raw_file",
}


def _snapshot(home: Path, dest: Path) -> dict[str, set]:
    """Copy the store's database to dest and read every compared table from the copy."""
    src = sqlite3.connect(home / origin.DB_NAME)
    out = sqlite3.connect(dest)
    try:
        src.backup(out)
        return {name: set(out.execute(sql).fetchall()) for name, sql in COMPARED.items()}
    finally:
        src.close()
        out.close()


def _raw_files(home: Path) -> dict[str, bytes]:
    return {p.relative_to(home).as_posix(): p.read_bytes() for p in sorted((home / "raw").rglob("*")) if p.is_file()}


@pytest.fixture
def rich_home(all_agents, origin_home):
    """A store of every agent's real fixture logs with entries, a correction and forgets of both kinds."""
    with origin.open_store(origin_home) as store:
        _synced_with_entries(store)
        codex = store.conn.execute("SELECT id FROM event WHERE source = 'codex' AND kind = 'message' "
                                   "ORDER BY seq LIMIT 1").fetchone()[0]
        origin.forget(store, codex, reason="not for the archive")
    return origin_home


def test_invariant_2_a_store_rebuilt_after_the_agents_logs_are_gone_equals_the_lost_one(
        rich_home, user_home, tmp_path):
    # The agents deleted their logs; then origin.db is lost with its WAL.
    for folder in (".claude", ".codex", ".config", ".grok"):
        shutil.rmtree(user_home / folder)
    before = _snapshot(rich_home, tmp_path / "before.db")
    raw_before = _raw_files(rich_home)
    assert len(before["events"]) > 300 and before["tombstones"] and before["entries"]
    assert {r[1] for r in before["events"]} >= {"claude-code", "codex", "cursor", "grok"}
    _drop_db(rich_home)

    report = origin.rebuild(rich_home)

    after = _snapshot(rich_home, tmp_path / "after.db")
    for name in COMPARED:
        assert after[name] == before[name], (name, sorted(after[name] ^ before[name])[:3])
    assert _raw_files(rich_home) == raw_before  # no mirror copied, added or changed
    assert report["adopted"] == 0 and report["events"] == len(before["events"])
    with origin.open_store(rich_home) as store:
        for _tid, target in store.conn.execute("SELECT id, target FROM tombstone"):
            if not target.startswith("ent_"):
                with pytest.raises(origin.Forgotten):
                    origin.get_event(store, target)
                assert target not in {h["id"] for h in origin.search_events(store, "a", limit=500,
                                                                             include_tools=True)}
        assert index_rows(store) == expected_rows(store)


def test_rebuild_check_compares_with_the_live_store_and_changes_nothing(rich_home, cli):
    db = rich_home / origin.DB_NAME
    stamp = (db.stat().st_ino, db.stat().st_size, db.stat().st_mtime_ns)
    raw_before = _raw_files(rich_home)
    code, out = cli("rebuild", "--check", "--json")
    assert code == 0, out
    assert out["compare"]["same"] and out["compare"]["differ"] == []
    assert out["compare"]["tables"]["event"]["rebuilt"] == out["events"] > 300
    assert (db.stat().st_ino, db.stat().st_size, db.stat().st_mtime_ns) == stamp
    assert not list((rich_home / origin.SCRATCH_DIR).glob("rebuild-check*"))
    assert not list(rich_home.glob(origin.DB_NAME + ".*"))
    assert _raw_files(rich_home) == raw_before


def test_a_mirror_no_row_refers_to_is_reported_by_check_and_adopted_by_rebuild(rich_home, user_home, cli, tmp_path):
    # A mirror left by a store that was reset while raw/ was kept.
    log = user_home / "stray.jsonl"
    log.write_text(json.dumps({
        "type": "user", "sessionId": "s-stray", "uuid": "u-stray-1", "timestamp": "2026-11-02T10:00:00Z",
        "cwd": "/home/dev/stray", "message": {"role": "user", "content": "the stray mirror speaks of herons"}}) + "\n")
    stray = rich_home / "raw" / "claude-code" / "projects" / "-home-dev-stray" / "s-stray.jsonl"
    stray.parent.mkdir(parents=True)
    shutil.copyfile(log, stray)
    code, out = cli("status", "--json")
    assert code == 0 and out["mirrors_unowned"] == 1
    code, text = cli("status")
    assert "1 file under raw/ that no mirror of the store names" in text and "origin rebuild" in text
    code, out = cli("rebuild", "--check", "--json")
    assert code == 1
    assert out["compare"]["differ"] == ["event", "session", "raw_file"]
    assert out["compare"]["tables"]["event"]["only_rebuilt_first"] == ["claude-code:u-stray-1"]
    code, text = cli("rebuild", "--check")
    assert code == 1 and "event: 0 rows only in the live store" in text
    code, out = cli("rebuild", "--json")
    assert code == 0 and out["adopted"] == 1
    with origin.open_store(rich_home) as store:
        hit = origin.search_events(store, "herons", limit=5)
        assert [h["id"] for h in hit] == ["claude-code:u-stray-1"]
        assert [tuple(r) for r in store.conn.execute("SELECT mirror FROM raw_file WHERE path LIKE 'raw:%'")] == [
            ("raw/claude-code/projects/-home-dev-stray/s-stray.jsonl",)]
    # Named in the mirrors journal now: the next rebuild reads it the same way.
    code, out = cli("rebuild", "--check", "--json")
    assert code == 0 and out["compare"]["same"] and out["adopted"] == 0
    code, out = cli("status", "--json")
    assert out["mirrors_unowned"] == 0


def test_a_missing_origin_db_beside_mirrors_is_rebuilt_by_the_next_command_not_started_empty(
        rich_home, user_home, cli):
    for folder in (".claude", ".codex", ".config", ".grok"):
        shutil.rmtree(user_home / folder)
    with origin.open_store(rich_home) as store:
        before = origin.status(store)
    _drop_db(rich_home)
    code, out = cli("status", "--json")
    assert code == 0
    assert "rebuilding it from raw/" in cli.err
    assert (out["events"], out["entries"], out["tombstones"]) == (before["events"], before["entries"],
                                                                 before["tombstones"])
    assert not list(rich_home.glob(origin.DB_NAME + ".before-rebuild-*"))  # there was nothing to move aside


def test_a_rebuild_moves_the_old_store_aside_and_keeps_a_hubs_tokens(rich_home, cli):
    with origin.open_store(rich_home) as store:
        origin.create_token(store, "laptop")
        events = store.conn.execute("SELECT count(*) FROM event").fetchone()[0]
    code, out = cli("rebuild", "--json")
    assert code == 0 and out["events"] == events
    aside = Path(out["old"])
    assert aside.parent == rich_home and aside.name.startswith(origin.DB_NAME + ".before-rebuild-")
    with origin.open_store(rich_home) as store:
        assert [t["name"] for t in origin.list_tokens(store)] == ["laptop"]


def test_a_hub_rebuilds_every_devices_mirrors_with_their_flush_points(tmp_path, user_home, claude_root):
    # A Grok session whose open block the device closes once the file is quiet:
    # the hub must close it at the same byte when it parses the mirror again.
    grok = GrokOpenBlock(user_home)
    f, update, settle = grok.path, grok.update, grok.settle

    with served_hub(tmp_path) as (hub, cfg, dev):
        f.write_text(update("user_message_chunk", "how are open blocks replicated?", 1767225600) + "\n"
                     + update("agent_message_chunk", "The hub closes them ", 1767225601) + "\n")
        origin.sync(dev)
        origin.push(dev, cfg)
        settle()
        origin.sync(dev)
        origin.push(dev, cfg)
        with f.open("a") as fh:
            fh.write(update("agent_message_chunk", "where the device did.", 1767225602) + "\n")
        settle()
        origin.sync(dev)
        origin.push(dev, cfg)
        hs = hub.default_store()
        origin.forget(hs, "grok:" + hs.conn.execute(
            "SELECT id FROM event WHERE source = 'grok' ORDER BY seq LIMIT 1").fetchone()[0].split(":", 1)[1])
    home = tmp_path / "hubhome"
    before = _snapshot(home, tmp_path / "before.db")
    assert {r[13].split("/")[1] for r in before["events"]} == {"devices"}  # every event came from a device
    assert any("The hub closes them" in r[11] for r in before["events"])
    raw_before = _raw_files(home)
    _drop_db(home)
    origin.rebuild(home)
    after = _snapshot(home, tmp_path / "after.db")
    for name in COMPARED:
        assert after[name] == before[name], (name, sorted(after[name] ^ before[name])[:3])
    assert _raw_files(home) == raw_before


def test_a_sync_after_a_rebuild_without_the_old_database_copies_nothing_twice(rich_home):
    # The agents' logs and databases are still on disk: the rebuilt store
    # must carry on from the adopted mirrors, not mirror or export them again.
    raw_before = _raw_files(rich_home)
    _drop_db(rich_home)
    origin.rebuild(rich_home)
    with origin.open_store(rich_home) as store:
        events = store.conn.execute("SELECT count(*) FROM event").fetchone()[0]
        report = origin.sync(store)
        assert report.events_added == 0 and not report.problems
        assert store.conn.execute("SELECT count(*) FROM event").fetchone()[0] == events
    assert _raw_files(rich_home) == raw_before
