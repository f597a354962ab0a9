"""`origin backup` and `origin restore`: a consistent copy of a live store, and back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import origin
from conftest import expected_rows, index_rows
from helpers import grep
from reliability_tools import lay_mixed_corpus, origin_argv, origin_env, run_sync
from shiptools import close, mcp_session, read_rounds, rows, start_loader, wait_for


def _rows(home: Path, sql: str) -> list:
    return rows(home / origin.DB_NAME, sql)


def _events(home: Path, upto: int | None = None) -> list:
    where = f" WHERE seq <= {int(upto)}" if upto is not None else ""
    return _rows(home, f"SELECT seq, id, text, raw_file_id, line, offset FROM event{where} ORDER BY seq")


def _mcp_server(home: Path, origin_home: Path) -> subprocess.Popen:
    """Start `origin mcp` and answer one search, so it holds the store open."""
    p, answers = mcp_session(origin_argv("mcp"), origin_env(home, origin_home),
                             [("tools/call", {"name": "search", "arguments": {"query": "schema"}})])
    assert "result" in answers[0], answers
    return p


def test_backup_of_a_store_under_load_restores_to_an_identical_store(tmp_path, user_home, origin_home):
    env, claude = lay_mixed_corpus(user_home, claude_files=40, claude_turns=(10, 30))
    run_sync(user_home, origin_home, env)
    with origin.open_store(origin_home) as store:
        gone = origin.search_events(store, "schema", limit=1)[0]["id"]
        origin.forget(store, gone, reason="backup test")
    rounds, stop = tmp_path / "rounds", tmp_path / "stop"
    loader = start_loader(user_home, origin_home, env, claude, rounds, stop)
    mcp = None
    try:
        wait_for(lambda: read_rounds(rounds) >= 1 or loader.poll() is not None, "the loader's first round")
        assert loader.poll() is None, loader.stderr.read().decode()[-2000:]
        mcp = _mcp_server(user_home, origin_home)
        before = read_rounds(rounds)
        with origin.open_store(origin_home) as store:
            manifest = origin.backup(store, tmp_path / "backup")
        # The writer went on during and after the copy: wait for one more
        # round, so the live store is surely ahead of the backup.
        after = read_rounds(rounds)
        wait_for(lambda: read_rounds(rounds) > after or loader.poll() is not None, "another round")
    finally:
        stop.touch()
        if mcp is not None:
            close(mcp)
        loader.wait(timeout=300)
    assert loader.returncode == 0, loader.stderr.read().decode()[-2000:]
    assert read_rounds(rounds) > before >= 1

    restored = tmp_path / "restored"
    result = origin.restore(tmp_path / "backup", restored)
    assert result["integrity"] == "ok"
    assert result["events"] == manifest["events"] > 0

    # Events: exactly the live store's events up to the copy's last one.
    top = _rows(restored, "SELECT max(seq) FROM event")[0][0]
    assert _events(restored) == _events(origin_home, top)
    assert len(_events(origin_home)) > top, "the live store should have moved on after the backup"
    # Entries and their sources, up to the copy's last one; forgets all.
    top_entry = _rows(restored, "SELECT max(seq) FROM entry")[0][0]
    assert _rows(restored, "SELECT * FROM entry ORDER BY seq") == \
        _rows(origin_home, f"SELECT * FROM entry WHERE seq <= {top_entry} ORDER BY seq")
    assert _rows(restored, "SELECT * FROM entry_source ORDER BY 1, 2") == \
        _rows(origin_home, "SELECT s.* FROM entry_source s JOIN entry e ON e.id = s.entry_id "
                           f"WHERE e.seq <= {top_entry} ORDER BY 1, 2")
    for table in ("tombstone", "forgotten_entry"):
        assert _rows(restored, f"SELECT * FROM {table} ORDER BY 1") == \
            _rows(origin_home, f"SELECT * FROM {table} ORDER BY 1")
    # Events the writer added later may be excluded on arrival (same text as
    # the forgotten one); up to the copy's last event, exclusions are equal.
    excluded = "SELECT x.* FROM excluded_event x JOIN event e ON e.id = x.event_id WHERE e.seq <= {} ORDER BY 1"
    assert _rows(restored, excluded.format(top)) == _rows(origin_home, excluded.format(top))
    assert _rows(restored, "SELECT count(*) FROM excluded_event") == _rows(restored, excluded.format(top).replace(
        "x.*", "count(*)").replace(" ORDER BY 1", ""))
    # Every mirror is the live mirror's first bytes, as many as the copy records.
    for mirror, size in _rows(restored, "SELECT mirror, bytes_ingested FROM raw_file"):
        copy = restored / mirror
        data = copy.read_bytes() if copy.exists() else b""
        assert len(data) == size
        with open(origin_home / mirror, "rb") as fh:
            assert fh.read(size) == data, mirror
    with origin.open_store(restored) as store:
        assert index_rows(store) == expected_rows(store)
        with pytest.raises(origin.Forgotten):
            origin.get_event(store, gone)
    # The restored store catches up from the same logs to the live store.
    run_sync(user_home, restored, env)
    run_sync(user_home, origin_home, env)
    assert {r[1] for r in _events(restored)} == {r[1] for r in _events(origin_home)}


@pytest.fixture
def forgotten_home(claude_root, origin_home, tmp_path):
    """A synced fixture home with one message forgotten and one entry; return (event id, its words)."""
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        hit = origin.search_events(store, "CLAUDE.md", limit=1)[0]
        text = origin.get_event(store, hit["id"])["text"]
        origin.remember(store, kind="knowledge", text="kept across backups", sources=[{"quote": "CLAUDE.md"}],
                        author="user")
        origin.forget(store, hit["id"], reason="private")
    return hit["id"], text


def test_invariant_2_a_forgotten_event_stays_forgotten_after_restore(forgotten_home, origin_home, tmp_path):
    gone, text = forgotten_home
    words = " ".join(text.split()[:4])
    with origin.open_store(origin_home) as store:
        origin.backup(store, tmp_path / "b")
    restored = tmp_path / "restored"
    origin.restore(tmp_path / "b", restored)
    for _ in range(2):  # as restored, and after a re-sync of the same logs
        with origin.open_store(restored) as store:
            with pytest.raises(origin.Forgotten):
                origin.get_event(store, gone)
            hits = origin.search_events(store, words, limit=50, include_tools=True)
            assert gone not in {h["id"] for h in hits}
            assert index_rows(store) == expected_rows(store)
            assert store.conn.execute("SELECT count(*) FROM excluded_event WHERE event_id = ?",
                                      (gone,)).fetchone()[0] == 1
            origin.sync(store)


def test_backup_and_restore_through_the_cli(forgotten_home, origin_home, tmp_path, cli, monkeypatch):
    _, live = cli("status", "--json")
    code, out = cli("backup", str(tmp_path / "b"), "--json")
    assert code == 0, cli.err
    assert out["events"] > 0 and out["tombstones"] == 1 and out["entries"] == 1
    manifest = json.loads((tmp_path / "b" / "backup.json").read_text())
    assert {f["path"] for f in manifest["files"]} >= {"origin.db", "index/messages.db", "index/tools.db"}
    monkeypatch.setenv("ORIGIN_HOME", str(tmp_path / "new"))
    code, out = cli("restore", str(tmp_path / "b"), "--json")
    assert code == 0, cli.err
    assert (out["events"], out["entries"], out["tombstones"], out["integrity"]) == \
        (manifest["events"], 1, 1, "ok")
    code, st = cli("status", "--json")
    assert st["index_behind"] is False
    assert {k: st[k] for k in ("events", "sessions", "entries", "tombstones")} == \
        {k: live[k] for k in ("events", "sessions", "entries", "tombstones")}


def test_backup_and_restored_store_are_owner_only(forgotten_home, origin_home, tmp_path):
    with origin.open_store(origin_home) as store:
        origin.backup(store, tmp_path / "b")
    origin.restore(tmp_path / "b", tmp_path / "restored")
    for root in (tmp_path / "b", tmp_path / "restored"):
        loose = [str(p) for p in [root, *root.rglob("*")] if p.stat().st_mode & 0o077]
        assert loose == [], loose


def test_restore_refuses_a_home_that_is_not_empty(forgotten_home, origin_home, tmp_path, cli, monkeypatch):
    with origin.open_store(origin_home) as store:
        origin.backup(store, tmp_path / "b")
    before = sorted(p.name for p in origin_home.iterdir())
    with pytest.raises(origin.UsageError, match="not empty"):
        origin.restore(tmp_path / "b", origin_home)
    assert sorted(p.name for p in origin_home.iterdir()) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    monkeypatch.setenv("ORIGIN_HOME", str(other))
    code, _ = cli("restore", str(tmp_path / "b"))
    assert code == origin.UsageError.exit_code and "not empty" in cli.err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_backup_refuses_a_folder_that_is_not_empty_or_inside_the_store(forgotten_home, origin_home, tmp_path):
    dest = tmp_path / "full"
    dest.mkdir()
    (dest / "keep").write_text("x")
    with origin.open_store(origin_home) as store:
        with pytest.raises(origin.UsageError, match="not empty"):
            origin.backup(store, dest)
        with pytest.raises(origin.UsageError, match="inside ORIGIN_HOME"):
            origin.backup(store, origin_home / "backups" / "one")
        empty = tmp_path / "empty"
        empty.mkdir()
        assert origin.backup(store, empty)["events"] > 0
    assert (dest / "keep").read_text() == "x" and sorted(p.name for p in dest.iterdir()) == ["keep"]


def test_a_damaged_or_unfinished_backup_is_refused_and_leaves_the_home_empty(forgotten_home, origin_home, tmp_path):
    with origin.open_store(origin_home) as store:
        manifest = origin.backup(store, tmp_path / "b")
    mirror = next(f for f in manifest["files"] if f["path"].startswith("raw/") and f["bytes"] > 10)
    path = tmp_path / "b" / mirror["path"]
    data = bytearray(path.read_bytes())
    data[5] ^= 0x20
    path.write_bytes(bytes(data))
    target = tmp_path / "restored"
    with pytest.raises(origin.StoreError, match="does not match the backup's manifest"):
        origin.restore(tmp_path / "b", target)
    assert list(target.iterdir()) == []
    (tmp_path / "b" / "backup.json").unlink()
    with pytest.raises(origin.UsageError, match="interrupted backup"):
        origin.restore(tmp_path / "b", target)
    assert list(target.iterdir()) == []


def test_backup_stops_when_a_mirror_is_shorter_than_the_store_records(forgotten_home, origin_home, tmp_path):
    with origin.open_store(origin_home) as store:
        mirror = store.conn.execute("SELECT mirror FROM raw_file WHERE bytes_ingested > 100 LIMIT 1").fetchone()[0]
        with open(origin_home / mirror, "r+b") as fh:
            fh.truncate(50)
        with pytest.raises(origin.StoreError, match="damaged outside Origin"):
            origin.backup(store, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_purge_during_the_backup_is_caught_and_a_backup_after_it_holds_no_purged_text(
        forgotten_home, origin_home, tmp_path, monkeypatch):

    gone, text = forgotten_home
    assert grep(origin_home, text)  # forgotten, not purged: the bytes are still there
    real_copy = origin._copy_prefix
    with origin.open_store(origin_home) as store:
        def copy_then_purge(*a, **kw):
            out = real_copy(*a, **kw)
            if not store.conn.execute("SELECT count(*) FROM purged_line").fetchone()[0]:
                origin.purge(store)
            return out

        monkeypatch.setattr(origin, "_copy_prefix", copy_then_purge)
        with pytest.raises(origin.StoreError, match="ran while the backup was copying"):
            origin.backup(store, tmp_path / "b")
        assert not (tmp_path / "b").exists()
        monkeypatch.setattr(origin, "_copy_prefix", real_copy)
        origin.backup(store, tmp_path / "b")
    assert grep(origin_home, text) == [] and grep(tmp_path / "b", text) == []
    origin.restore(tmp_path / "b", tmp_path / "restored")
    with origin.open_store(tmp_path / "restored") as store:
        with pytest.raises(origin.Forgotten):
            origin.get_event(store, gone)


def test_invariant_2_a_forget_made_while_the_backup_copies_holds_after_restore(forgotten_home, origin_home,
                                                                                tmp_path, monkeypatch):
    """The copy of origin.db predates the forget; the tombstone log copied after it carries it."""
    with origin.open_store(origin_home) as store:
        late = origin.search_events(store, "CLAUDE.md", limit=5)[0]["id"]
        real = origin._snapshot_db

        def snapshot_then_forget(src, dst):
            real(src, dst)
            if dst.name == origin.DB_NAME:
                origin.forget(store, late, reason="during the backup")

        monkeypatch.setattr(origin, "_snapshot_db", snapshot_then_forget)
        manifest = origin.backup(store, tmp_path / "b")
    assert manifest["tombstones"] == 1  # the database copy holds only the first forget
    assert origin.TOMBSTONE_LOG in {f["path"] for f in manifest["files"]}
    result = origin.restore(tmp_path / "b", tmp_path / "restored")
    assert result["tombstones"] == 2
    with origin.open_store(tmp_path / "restored") as store:
        for gone in (forgotten_home[0], late):
            with pytest.raises(origin.Forgotten):
                origin.get_event(store, gone)
        assert index_rows(store) == expected_rows(store)
