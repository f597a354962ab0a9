"""A private store: owner-only files under ORIGIN_HOME, and private database copies.

The archive holds prompts, code and pasted secrets, so every file Origin
keeps is readable by its owner only, whatever the umask of the shell that
ran it; an older store is tightened on open, once.  Agent databases that
must be copied to be read (a WAL without its index) are copied under
ORIGIN_HOME, owner-only, and a copy left by a killed run goes at the next.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import adapters
import origin
from conftest import FIXTURES, ROOT

CURSOR_DB = FIXTURES / "cursor" / "urpg-global" / "state.vscdb"


def modes(home: Path) -> dict[str, int]:
    """Return the permission bits of every path under home (and home itself)."""
    out = {".": stat.S_IMODE(home.stat().st_mode)}
    for p in sorted(home.rglob("*")):
        out[str(p.relative_to(home))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def loose(home: Path) -> dict[str, str]:
    """Return the paths under home that a user other than the owner could read."""
    return {k: oct(m) for k, m in modes(home).items() if m & 0o077}


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def run_cli(*argv: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real `origin` command in a child process under umask 022."""
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, str(ROOT / "origin.py"), *argv], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=lambda: os.umask(0o022))


def test_a_new_store_is_owner_only_under_umask_022(claude_root, origin_home, umask_022):
    """Repro: ORIGIN_HOME was 755 and origin.db, index/*.db and the mirrors 644."""
    proc = run_cli("sync")
    assert proc.returncode == 0, proc.stderr
    assert "readable by other users" not in proc.stderr  # nothing to tighten in a new store
    m = modes(origin_home)
    assert m["."] == 0o700
    names = set(m)
    assert {"origin.db", "index/messages.db", "index/tools.db"} <= names
    assert any(n.startswith("raw/") and not (origin_home / n).is_dir() for n in names)  # mirrors
    assert loose(origin_home) == {}
    for name, mode in m.items():
        assert mode == (0o700 if (origin_home / name).is_dir() else 0o600), name


def test_files_made_outside_the_cli_are_private_too(claude_root, origin_home, umask_022):
    """The library (the MCP server's own connections, tests) needs no umask of its own."""
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        assert store.reader.execute("SELECT count(*) FROM event").fetchone()[0] > 0
        assert (origin_home / "origin.db-wal").exists()
        assert loose(origin_home) == {}


def test_an_older_readable_store_is_tightened_once_and_says_so(claude_root, origin_home, umask_022):
    with origin.open_store(origin_home) as store:
        origin.sync(store)
    # Make it look like a store written before files were private.
    os.chmod(origin_home, 0o755)
    for p in origin_home.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    extra = origin_home / "notes.txt"  # a file of the store's top level (a log, a setting)
    extra.write_text("x")
    os.chmod(extra, 0o644)
    assert loose(origin_home)

    first = run_cli("status")
    assert first.returncode == 0, first.stderr
    assert "readable by other users; made it private" in first.stderr
    assert loose(origin_home) == {}
    second = run_cli("status")
    assert second.returncode == 0 and "readable by other users" not in second.stderr  # said once


def test_tightening_leaves_a_shared_folder_alone(tmp_path, umask_022):
    """An ORIGIN_HOME pointed at a folder that also holds other things: only Origin's own change."""
    shared = tmp_path / "shared"
    (shared / "docs").mkdir(parents=True)
    (shared / "docs" / "readme.txt").write_text("public")
    os.chmod(shared / "docs", 0o755)
    with origin.open_store(shared):
        pass
    assert stat.S_IMODE((shared / "docs").stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "docs" / "readme.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((shared / "origin.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((shared / "raw").stat().st_mode) == 0o700


# Private copies of agent databases ------------------------------------------------------------


def crashed_cursor(user_dir: Path) -> Path:
    """Give a Cursor User folder a global state.vscdb with a WAL and no -shm (a crashed Cursor)."""
    live = user_dir.parent / "live"
    live.mkdir(parents=True)
    shutil.copyfile(CURSOR_DB, live / "state.vscdb")
    writer = sqlite3.connect(live / "state.vscdb")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO ItemTable VALUES ('cursorAuth/accessToken', 'tok-in-the-wal-5e1f')")
    writer.commit()
    target = user_dir / "globalStorage"
    target.mkdir(parents=True)
    shutil.copyfile(live / "state.vscdb", target / "state.vscdb")
    shutil.copyfile(live / "state.vscdb-wal", target / "state.vscdb-wal")
    writer.close()
    assert not (target / "state.vscdb-shm").exists()
    return target / "state.vscdb"


def legacy_snapshots() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("origin-snapshot-*")}


def test_a_database_copy_is_made_under_origin_home_owner_only(tmp_path, origin_home, monkeypatch, umask_022):
    """Repro: the copy went to /tmp/origin-snapshot-*, tokens included, readable by all."""
    user_dir = tmp_path / "cursor" / "User"
    crashed_cursor(user_dir)
    monkeypatch.setenv("ORIGIN_CURSOR_USER_DIR", str(user_dir))
    seen = []
    real = adapters._stream_reader

    def spy(uri, reader):
        path = Path(uri.split("?")[0].removeprefix("file://"))
        seen.append((path, modes(path.parent)))
        yield from real(uri, reader)

    monkeypatch.setattr(adapters, "_stream_reader", spy)
    before = legacy_snapshots()
    with origin.open_store(origin_home) as store:
        report = origin.sync(store, sources=["cursor"])
    assert report.sources["cursor"]["events_added"] > 0
    copies = [(p, m) for p, m in seen if p.parent != user_dir / "globalStorage"]
    assert copies, "the crashed database was read through a copy"
    for path, m in copies:
        assert path.parent.parent == origin_home / origin.SCRATCH_DIR
        assert m["."] == 0o700 and set(m) >= {".", "state.vscdb", "state.vscdb-wal"}
        assert all(mode == 0o600 for name, mode in m.items() if name != "."), m
    assert stat.S_IMODE((origin_home / origin.SCRATCH_DIR).stat().st_mode) == 0o700
    assert list((origin_home / origin.SCRATCH_DIR).iterdir()) == []  # removed after the read
    assert legacy_snapshots() <= before  # nothing new in the system temp folder


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_copy_left_by_a_killed_sync_is_removed_at_the_next_start(tmp_path, origin_home, monkeypatch):
    user_dir = tmp_path / "cursor" / "User"
    crashed_cursor(user_dir)
    monkeypatch.setenv("ORIGIN_CURSOR_USER_DIR", str(user_dir))
    scratch = origin_home / origin.SCRATCH_DIR
    scratch.mkdir(parents=True)
    left = scratch / f"origin-snapshot-{dead_pid()}-abc123"
    left.mkdir()
    (left / "state.vscdb").write_text("cursorAuth/accessToken tok-left-behind")
    live = scratch / f"origin-snapshot-{os.getppid()}-def456"  # a live process's copy, in use
    live.mkdir()
    with origin.open_store(origin_home) as store:
        origin.sync(store, sources=["cursor"])
    assert not left.exists()
    assert live.exists()


def test_a_sync_killed_while_reading_a_copy_leaves_nothing_after_the_next(tmp_path, origin_home):
    """The real thing: a child process dies with the copy open; the next sync cleans up."""
    user_dir = tmp_path / "cursor" / "User"
    crashed_cursor(user_dir)
    script = (
        "import os, sys, adapters, origin\n"
        "real = adapters._stream_reader\n"
        "def dying(uri, reader):\n"
        "    if 'origin-snapshot-' in uri:\n"
        "        os._exit(137)\n"
        "    yield from real(uri, reader)\n"
        "adapters._stream_reader = dying\n"
        "sys.exit(origin.main(['sync', '--source', 'cursor']))\n"
    )
    env = {**os.environ, "ORIGIN_CURSOR_USER_DIR": str(user_dir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 137, proc.stderr
    scratch = origin_home / origin.SCRATCH_DIR
    leftovers = list(scratch.iterdir())
    assert leftovers and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in leftovers)
    env.pop("PYTHONPATH")
    again = run_cli("sync", "--source", "cursor", env_extra={"ORIGIN_CURSOR_USER_DIR": str(user_dir)})
    assert again.returncode == 0, again.stderr
    assert list(scratch.iterdir()) == []


def test_an_empty_wal_is_read_in_place_without_a_copy(tmp_path, monkeypatch):
    """Copy no more than needed: a WAL a clean close left empty adds nothing to the database."""
    db = tmp_path / "globalStorage" / "state.vscdb"
    db.parent.mkdir()
    shutil.copyfile(CURSOR_DB, db)
    (tmp_path / "globalStorage" / "state.vscdb-wal").write_bytes(b"")
    monkeypatch.setattr(adapters, "_snapshot", lambda db: pytest.fail("copied a database with an empty WAL"))
    f = adapters.SourceFile(str(db), "state.vscdb", kind="db", meta={"store": "global"})
    assert list(adapters.Cursor().export(f, {}, 1_900_000_000_000))
