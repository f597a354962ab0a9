"""Forget that holds on every route (issue 12).

Exclusion by content as well as by id, Origin's own echoes, titles, whole
sessions, the tombstone log that outlives the store, and the exchange of
tombstones between stores.  Each numbered reproduction of the issue has a
test here that failed on the code before it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import origin
from conftest import FIXTURES, expected_rows, index_rows
from test_entries import ClaudeLog, counts, run  # noqa: F401  (run is a fixture)

# ---------------------------------------------------------------------------
# Helpers: every read route, counted
# ---------------------------------------------------------------------------


def visible_ids(store) -> list[str]:
    return [r[0] for r in store.conn.execute(
        "SELECT id FROM event e WHERE NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)")]


def sightings(store, word: str) -> list[str]:
    """Where a word can still be read: search, timeline (titles and events), get, sources, entries."""
    out = []
    low = word.casefold()
    for e in origin.search_events(store, word, include_tools=True, limit=200):
        out.append(f"search:{e['id']}")
    res = origin.search(store, word, include_tools=True, history=True, limit=200)
    out += [f"search-entry:{e['id']}" for e in res["entries"]]
    for s in origin.timeline(store, since=0, limit=200)["sessions"]:
        if low in (s["title"] or "").casefold():
            out.append(f"title:{s['session']}")
        tl = origin.timeline(store, session=s["session"], source=s["source"], include_tools=True)
        if low in json.dumps(tl, ensure_ascii=False).casefold():
            out.append(f"timeline:{s['session']}")
    for evid in visible_ids(store):
        ev = origin.get_event(store, evid)
        if low in json.dumps(ev, ensure_ascii=False).casefold():
            out.append(f"get:{evid}")
        for src in origin.raw_sources(store, evid):
            if low in json.dumps(src, ensure_ascii=False).casefold():
                out.append(f"sources:{evid}")
    for e in origin.list_entries(store, history=True, limit=200):
        if low in json.dumps(origin.get_entry(store, e["id"]), ensure_ascii=False).casefold():
            out.append(f"entry:{e['id']}")
    return out


def event_id_with(store, word: str, kind: str = "message") -> str:
    rows = [r[0] for r in store.conn.execute(
        "SELECT id FROM event WHERE kind = ? AND text LIKE ?", (kind, f"%{word}%"))]
    assert len(rows) == 1, rows
    return rows[0]


# ---------------------------------------------------------------------------
# Codex rollouts, as Codex writes them
# ---------------------------------------------------------------------------

THREAD = "019c9aaa-1111-7000-8000-00000000c0de"
FORK = "019c9bbb-2222-7000-8000-00000000f0c5"
SECRET = "The otterbridge migration waits for the pelican review before it ships."


def codex_line(ts: str, kind: str, payload: dict) -> str:
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload}, separators=(",", ":"))


def codex_message(ts: str, role: str, text: str) -> str:
    block = "input_text" if role == "user" else "output_text"
    return codex_line(ts, "response_item", {"type": "message", "role": role, "content": [{"type": block, "text": text}]})


def codex_meta(thread: str, **extra) -> str:
    return codex_line("2026-02-23T11:41:00.000Z", "session_meta",
                      {"id": thread, "timestamp": "2026-02-23T11:41:00.000Z", "cwd": "/home/dev/bridge",
                       "cli_version": "0.104.0", **extra})


HISTORY = [
    codex_message("2026-02-23T11:41:10.000Z", "user", "When does the bridge migration ship, and what blocks it?"),
    codex_message("2026-02-23T11:41:20.000Z", "assistant", SECRET),
    codex_message("2026-02-23T11:41:30.000Z", "user", "Fine, note the kingfisher checklist for the release."),
]


@pytest.fixture
def rollout(user_home, store):
    day = user_home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    path = day / f"rollout-2026-02-23T12-41-00-{THREAD}.jsonl"
    path.write_text("\n".join([codex_meta(THREAD), *HISTORY]) + "\n", encoding="utf-8")
    origin.sync(store)
    secret = event_id_with(store, "otterbridge")
    assert sightings(store, "otterbridge")
    return path, secret


# ---------------------------------------------------------------------------
# Item 5: tombstones outlive the store; the index belongs to one store
# ---------------------------------------------------------------------------


def test_the_tombstone_log_holds_every_forget_before_it_commits_and_is_replayed_on_open(store, rollout, monkeypatch):
    _path, secret = rollout
    # The forget dies after its log record is on disk, before it commits.
    def die(conn, rec):
        raise RuntimeError("power cut")

    monkeypatch.setattr(origin, "apply_tombstone_record", die)
    with pytest.raises(RuntimeError):
        origin.forget(store, secret)
    monkeypatch.undo()
    assert store.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0
    log = (store.home / origin.TOMBSTONE_LOG).read_text()
    assert secret in log and "otterbridge" not in log
    store.close()
    again = origin.open_store(store.home)
    try:
        assert again.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 1
        assert sightings(again, "otterbridge") == []
    finally:
        again.close()


def test_item_5_a_store_rebuilt_after_corruption_keeps_every_forget_and_a_fresh_index(user_home, origin_home, run):
    log = ClaudeLog(user_home, session="sess-rebuild")
    log.user("u-1", "Where do the deploy secrets live?")
    secret = log.assistant("a-1", "The quokka vault holds the deploy token for staging.")
    for i in range(5):
        log.user(f"u-t{i}", f"Rotate token number {i} before the audit.")
    log.write()
    store = origin.open_store(origin_home)
    origin.sync(store)
    origin.forget(store, secret)
    assert len(origin.search_events(store, "token", limit=50)) == 5
    store.close()
    db = origin_home / origin.DB_NAME
    with open(db, "r+b") as fh:  # the header is gone: not a database any more
        fh.write(b"\0" * 4096)
    code, _out, err = run("status")
    assert code != 0 and "move it aside" in err and origin.TOMBSTONE_LOG in err and "entries" in err
    aside = origin_home / "damaged"
    aside.mkdir()
    for p in origin_home.glob(origin.DB_NAME + "*"):
        shutil.move(p, aside / p.name)
    assert (origin_home / origin.INDEX_DIR).is_dir()  # the old index is kept, as the advice leaves it
    code, _out, _err = run("sync")
    assert code == 0
    store = origin.open_store(origin_home)
    try:
        assert origin.status(store)["tombstones"] == 1
        assert sightings(store, "quokka") == []
        found = origin.search_events(store, "token", limit=50)
        assert sorted(e["id"] for e in found) == sorted(f"claude-code:u-t{i}" for i in range(5))
        hits = origin.search(store, "quokka", include_tools=True, history=True, limit=50)
        assert hits == {"entries": [], "events": []}
    finally:
        store.close()


def test_item_5_an_index_of_another_store_is_emptied_and_rebuilt(user_home, origin_home):
    first = ClaudeLog(user_home, session="sess-index")
    first.user("u-1", "The heron index must only hold this store's rows.")
    first.user("u-2", "A second line about nothing.")
    first.write()
    store = origin.open_store(origin_home)
    origin.sync(store)
    old_id = store.conn.execute("SELECT value FROM setting WHERE key = 'store_id'").fetchone()[0]
    store.close()
    for p in origin_home.glob(origin.DB_NAME + "*"):
        p.unlink()
    first.path.unlink()
    other = ClaudeLog(user_home, session="sess-other")
    other.user("u-9", "An unrelated zebra note takes row one now.")
    other.user("u-8", "Another heron sighting, the only one.")
    other.write()
    store = origin.open_store(origin_home)
    try:
        new_id = store.conn.execute("SELECT value FROM setting WHERE key = 'store_id'").fetchone()[0]
        assert new_id != old_id
        origin.sync(store)
        # The old index's row 1 ("heron") would now point at the zebra note.
        assert [e["id"] for e in origin.search_events(store, "heron")] == ["claude-code:u-8"]
        assert [e["id"] for e in origin.search_events(store, "zebra")] == ["claude-code:u-9"]
        assert index_rows(store) == expected_rows(store)
        for part in origin.EVENT_INDEXES:
            assert [tuple(r) for r in store.reader.execute(f"SELECT store FROM ix_{part}.owner")] == [(new_id,)]
    finally:
        store.close()


def test_a_store_rebuilt_from_the_log_adopts_the_old_fingerprint_key(store, rollout):
    path, secret = rollout
    origin.forget(store, secret)
    keys = origin.fingerprint_keys(store)
    store.close()
    for p in store.home.glob(origin.DB_NAME + "*"):
        p.unlink()
    again = origin.open_store(store.home)
    try:
        assert origin.fingerprint_keys(again) == keys
        origin.sync(again)
        # A copy under a new id arrives after the rebuild: the old fingerprint still holds.
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(HISTORY[1] + "\n")
        origin.sync(again)
        assert sightings(again, "otterbridge") == []
    finally:
        again.close()


# ---------------------------------------------------------------------------
# The exchange of tombstones between stores (the hub's contract)
# ---------------------------------------------------------------------------


def test_tombstones_after_and_apply_tombstones_carry_a_forget_to_another_store(store, rollout, tmp_path):
    path, secret = rollout
    done = origin.forget(store, secret, reason="not for the archive")
    records = origin.tombstones_after(store, 0, 100)
    assert len(records) == 1
    rec = records[0]
    assert set(rec) >= {"seq", "uid", "target", "kind", "reason", "created_at", "entries", "events", "fingerprints"}
    assert rec["uid"] == done["uid"] and rec["events"] == [secret] and rec["kind"] == "event"
    assert "otterbridge" not in json.dumps(rec)
    assert json.loads(json.dumps(rec)) == rec
    assert origin.tombstones_after(store, rec["seq"], 100) == []
    other = origin.open_store(tmp_path / "other")
    try:
        origin.sync(other)
        assert sightings(other, "otterbridge")
        # The other store shares the key (a hub and its device), so the fingerprints match there too.
        for kid, key in origin.fingerprint_keys(store).items():
            assert origin.add_fingerprint_key(other, kid, key) is True
            assert origin.add_fingerprint_key(other, kid, key) is False
        assert origin.apply_tombstones(other, records) == 1
        assert origin.apply_tombstones(other, records) == 0  # idempotent by uid
        assert sightings(other, "otterbridge") == []
        assert origin.tombstones_after(other, 0, 10)[0]["uid"] == rec["uid"]
        assert rec["uid"] in (other.home / origin.TOMBSTONE_LOG).read_text()
        # A copy of the text reaching the other store later is excluded there.
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(HISTORY[1] + "\n")
        origin.sync(other)
        assert sightings(other, "otterbridge") == []
    finally:
        other.close()


@pytest.mark.parametrize("bad", [
    "not a list", [{"uid": "nope"}], [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "planet"}],
    [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "event", "created_at": 1, "events": "x"}],
    [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "event", "created_at": 1, "fingerprints": [["k", "zz"]]}],
], ids=["not a list", "bad uid", "bad kind", "events not a list", "bad fingerprint"])
def test_apply_tombstones_refuses_a_bad_record_and_writes_nothing(store, rollout, bad):
    before = counts(store)
    log = (store.home / origin.TOMBSTONE_LOG).read_bytes()
    with pytest.raises(origin.UsageError):
        origin.apply_tombstones(store, bad)
    assert counts(store) == before
    assert (store.home / origin.TOMBSTONE_LOG).read_bytes() == log


def test_add_fingerprint_key_refuses_another_key_under_a_known_id(store):
    kid, key = next(iter(origin.fingerprint_keys(store).items()))
    with pytest.raises(origin.Conflict):
        origin.add_fingerprint_key(store, kid, b"x" * 32)
    for bad_id, bad_key in (("", b"k" * 32), ("a b", b"k" * 32), ("hub", b"short"), ("hub", "text" * 8)):
        with pytest.raises(origin.UsageError):
            origin.add_fingerprint_key(store, bad_id, bad_key)
    assert origin.fingerprint_keys(store) == {kid: key}
