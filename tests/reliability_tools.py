"""Machinery of the reliability tier: corpora, independent oracles, store checks, processes.

Nothing here counts events with Origin's own code: Claude files are counted
with ``json`` (``oracle_ids``), every other source against a clean sync of the
same files into a fresh ORIGIN_HOME, and stores are inspected with plain
``sqlite3``.  Run as a script, the module is a worker of the concurrency test:
``python tests/reliability_tools.py worker <role> <origin_home> <home> <seconds> <out.json> [--deferred]``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import adapters  # noqa: E402
import origin  # noqa: E402
from conftest import AGENT_VARS  # noqa: E402
from corpus import claude_session_lines, write_claude_corpus  # noqa: E402

ORIGIN_PY = ROOT / "origin.py"
#: The labelled durable steps of the ingest protocol (origin._crash_point).
LABELS = ("registered", "mirror-appended", "events-inserted", "before-commit", "committed")
#: Exit status of a process stopped by ORIGIN_CRASH_AT.
CRASH_EXIT = 137


###############################################################################
# Environments and processes ##################################################
###############################################################################


def origin_env(home: Path, origin_home: Path, extra: dict | None = None, crash: str | None = None) -> dict:
    """Return the environment of an `origin` subprocess for one HOME and store."""
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    env.update({"HOME": str(home), "ORIGIN_HOME": str(origin_home), **(extra or {})})
    if crash:
        env["ORIGIN_CRASH_AT"] = crash
    return env


def origin_argv(*args: str) -> list[str]:
    return [sys.executable, str(ORIGIN_PY), *args]


def sync_proc(home: Path, origin_home: Path, extra: dict | None = None, crash: str | None = None,
              prefix: list[str] | None = None) -> subprocess.Popen:
    """Start `origin sync --json` for HOME into origin_home."""
    return subprocess.Popen((prefix or []) + origin_argv("sync", "--json"),
                            env=origin_env(home, origin_home, extra, crash),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_sync(home: Path, origin_home: Path, extra: dict | None = None, timeout: float = 300) -> dict:
    """Run `origin sync --json` to completion; return its report."""
    p = sync_proc(home, origin_home, extra)
    out, err = p.communicate(timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"sync exited {p.returncode}: {err.decode(errors='replace')[-2000:]}")
    return json.loads(out)


def holds_store_open(pid: int, origin_home: Path) -> bool:
    """True when process pid has the store's database file open (it is syncing)."""
    db = str(origin_home / origin.DB_NAME)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == db:
                return True
        except OSError:
            continue
    return False


def kill_mid_sync(proc: subprocess.Popen, delay: float, origin_home: Path, *, wait_open: float = 120.0) -> str:
    """SIGKILL proc delay seconds after it opened the store; return where it was.

    The delay counts from the moment the sync holds ``origin.db`` open, not
    from the start of the process, so a slow interpreter start-up on a
    loaded machine does not move the kill into the start-up.  "finished"
    when the sync ended first, "starting" when it never opened the store
    within wait_open seconds, else "mid-sync".
    """
    give_up = time.monotonic() + wait_open
    while proc.poll() is None and not holds_store_open(proc.pid, origin_home) and time.monotonic() < give_up:
        time.sleep(0.002)
    deadline = time.monotonic() + delay
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
    if proc.poll() is not None:
        proc.communicate()
        return "finished"
    where = "mid-sync" if holds_store_open(proc.pid, origin_home) else "starting"
    proc.kill()
    proc.communicate()
    return where


def popen_in_empty_network_namespace(argv: list[str], **kw) -> subprocess.Popen:
    """Start argv inside a new network namespace that has no interface up.

    Used for sync, search and remember; the MCP server can be started the
    same way.  Raises OSError or returns a process exiting non-zero when the
    machine does not allow ``unshare -n``.
    """
    return subprocess.Popen(["unshare", "-n", "--", *argv], **kw)


def empty_network_namespace_available() -> tuple[bool, str]:
    """Return whether ``unshare -n`` works here, and why not."""
    try:
        p = subprocess.run(["unshare", "-n", "--", sys.executable, "-c",
                            "import socket; print(len(socket.if_nameindex()))"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"unshare -n cannot run: {e}"
    if p.returncode != 0:
        return False, f"unshare -n failed: {p.stderr.strip()[-300:]}"
    return True, ""


###############################################################################
# Corpora #####################################################################
###############################################################################


def age_tree(root: Path, seconds: float) -> None:
    """Set the mtime of every file under root to `seconds` ago (past QUIET_MS)."""
    t = time.time() - seconds
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            os.utime(p, (t, t))


def lay_mixed_corpus(home: Path, *, claude_files: int, claude_turns, seed: int = 11) -> tuple[dict, list[Path]]:
    """Lay synthetic Claude sessions and the real fixtures of the other agents under home.

    Codex (two plain rollouts and a two-frame .zst), Cursor (two state.vscdb
    and a transcript), Grok and every agent added since come from
    test_sources.LAYOUTS; the made-here
    Claude Code memory notes go beside the first synthetic project.  ZCode is the
    same made-here database with its clock three hours back, so that no
    message is still streaming; every file is then made quiet, so that every
    sync of the same bytes sees the same settled sources.  Return the extra
    environment the layouts need and the Claude files.
    """
    from helpers import LAYOUTS
    from zcode_made_here import build_zcode_db

    env: dict = {}
    claude = write_claude_corpus(home / ".claude", files=claude_files, turns=claude_turns, seed=seed)
    import shutil

    from conftest import FIXTURES
    shutil.copytree(FIXTURES / "claude-code" / "made-here" / "memory", claude[0].parent / "memory")
    for name in sorted(set(LAYOUTS) - {"claude-code", "claude-memory", "zcode"}):
        env.update(LAYOUTS[name](home) or {})
    build_zcode_db(home / ".zcode" / "cli" / "db" / "db.sqlite", origin.now_ms() - 3 * 3600 * 1000)
    age_tree(home, 7200)
    return env, claude


def grow_claude_files(files: list[Path], rng: random.Random, turns: int = 2) -> int:
    """Append whole new turns to some Claude files; return the lines added."""
    added = 0
    for f in rng.sample(files, k=max(1, len(files) // 3)):
        session = f.stem
        lines = claude_session_lines(rng, session, "/home/dev/src/grown", origin_dt(), turns)
        with open(f, "ab") as fh:
            fh.write(("\n".join(lines) + "\n").encode())
        added += len(lines)
    return added


def origin_dt():
    import datetime as dt

    return dt.datetime(2026, 9, 1, tzinfo=dt.timezone.utc)


def claude_oracle(files: list[Path]) -> set[str]:
    """Event ids of generated Claude files, counted with json alone."""
    from helpers import oracle_ids

    return oracle_ids(files)


###############################################################################
# Reference sync ##############################################################
###############################################################################


@dataclass
class Reference:
    """What a clean sync of a HOME into a fresh store holds."""

    events: dict = field(default_factory=dict)  # source -> set of event ids
    mirrors: dict = field(default_factory=dict)  # (source, rel, generation) -> mirror bytes
    files: dict = field(default_factory=dict)  # (source, rel) -> (lines_ingested, parse_errors)
    hits: list = field(default_factory=list)  # (label, source, rel) in the order they happen


def _file_in_progress() -> tuple[str, str]:
    """(source, rel) of the file whose ingest called the crash point, from the caller's frames."""
    frame = sys._getframe(2)
    while frame is not None:
        sf, adapter = frame.f_locals.get("sf"), frame.f_locals.get("adapter")
        if isinstance(sf, adapters.SourceFile) and getattr(adapter, "name", None):
            return adapter.name, sf.rel
        frame = frame.f_back
    return "?", "?"


def reference_sync(home: Path, extra: dict, workdir: Path) -> Reference:
    """Sync home into a fresh store at workdir in-process, recording every labelled step."""
    ref = Reference()
    real_crash = origin._crash_point

    def record(label: str) -> None:
        ref.hits.append((label, *_file_in_progress()))

    env = {**origin_env(home, workdir, extra)}
    origin._crash_point = record
    try:
        with origin.open_store(workdir) as s:
            origin.sync(s, env=env, home=home)
    finally:
        origin._crash_point = real_crash
    conn = sqlite3.connect(workdir / origin.DB_NAME)
    try:
        for source, eid in conn.execute("SELECT source, id FROM event"):
            ref.events.setdefault(source, set()).add(eid)
        for source, rel, gen, mirror, lines, errs in conn.execute(
                "SELECT source, rel, generation, mirror, lines_ingested, parse_errors FROM raw_file"):
            ref.mirrors[(source, rel, gen)] = (workdir / mirror).read_bytes()
            ref.files[(source, rel)] = (lines, errs)
    finally:
        conn.close()
    return ref


###############################################################################
# Store checks ################################################################
###############################################################################


def source_bytes(path: str, compression: str | None) -> bytes:
    """The bytes a log source holds, decompressed, read without Origin."""
    with open(path, "rb") as fh:
        if compression == "zstd":
            import zstandard

            with zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True) as r:
                return r.read()
        return fh.read()


def line_starts(data: bytes) -> list[int]:
    """Byte offset of every line start of data (line n starts at starts[n-1])."""
    starts, pos = [0], data.find(b"\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = data.find(b"\n", pos + 1)
    return starts


def index_should_hold(conn: sqlite3.Connection) -> dict[str, set[int]]:
    """Return the event seqs each part of the index should hold: indexed,
    visible events of its kinds, and of its slice for a sliced part."""
    out = {}
    for part, (_file, _fts, kinds) in origin.EVENT_INDEXES.items():
        seqs = {r[0] for r in conn.execute(
            f"SELECT seq FROM event e WHERE indexed = 1 AND kind IN ({','.join('?' * len(kinds))}) "
            "AND NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)", kinds)}
        if part in origin.INDEX_SLICES:  # computed here in Python, not by the SQL under test
            mine, slices = origin.INDEX_SLICES[part]
            seqs = {q for q in seqs if (q * origin.INDEX_HASH >> 16) % slices == mine}
        out[part] = seqs
    return out


def store_problems(origin_home: Path, *, claude_files: list[Path], reference: Reference,
                   max_generation: int = 0) -> list[str]:
    """Check a store against the oracles; return what is wrong (empty when all is well).

    Claude events must equal the json oracle of the files as they are now;
    every other source's events, mirrors, line counts and parse error counts
    must equal the clean reference.  Every log mirror must equal its source
    up to its last complete line, every event's locator must point at the
    start of its line inside the committed part of its mirror, the raw
    directory must hold exactly the mirrors the store names, the search index
    must hold exactly the visible indexed events, and SQLite must find the
    file sound.
    """
    bad: list[str] = []
    conn = sqlite3.connect(f"file:{origin_home / origin.DB_NAME}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        ic = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if ic != ["ok"]:
            bad.append(f"integrity_check: {ic[:5]}")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            bad.append(f"foreign_key_check: {[tuple(r) for r in fk[:5]]}")
        ids: dict = {}
        total = 0
        for r in conn.execute("SELECT source, id FROM event"):
            ids.setdefault(r["source"], set()).add(r["id"])
            total += 1
        if total != sum(len(v) for v in ids.values()):
            bad.append("duplicated event ids")
        want_claude = claude_oracle(claude_files)
        got_claude = ids.pop("claude-code", set())
        if got_claude != want_claude:
            bad.append(f"claude-code: {len(want_claude - got_claude)} lost, {len(got_claude - want_claude)} unexpected")
        for source, want in reference.events.items():
            if source == "claude-code":
                continue
            got = ids.pop(source, set())
            if got != want:
                bad.append(f"{source}: {len(want - got)} lost, {len(got - want)} unexpected")
        if ids:
            bad.append(f"events of unexpected sources: {sorted(ids)}")
        for part, want in index_should_hold(conn).items():
            # The search index holds exactly the visible indexed events.
            file, fts, _kinds = origin.EVENT_INDEXES[part]
            ix = sqlite3.connect(f"file:{origin_home / origin.INDEX_DIR / file}?mode=ro", uri=True)
            try:
                held = {r[0] for r in ix.execute(f"SELECT id FROM {fts}_docsize")}
            finally:
                ix.close()
            if held != want:
                bad.append(f"{part} index: {len(want - held)} events missing, {len(held - want)} extra")
        rows = conn.execute("SELECT * FROM raw_file").fetchall()
        mirrors = {}
        for r in rows:
            where = f"{r['source']}:{r['rel']}#g{r['generation']}"
            if r["generation"] > max_generation:
                bad.append(f"{where}: unexpected generation")
            path = origin_home / r["mirror"]
            if not path.is_file():
                bad.append(f"{where}: mirror missing")
                continue
            data = path.read_bytes()
            mirrors[r["id"]] = data
            if len(data) != r["bytes_ingested"]:
                bad.append(f"{where}: mirror has {len(data)} bytes, cursor says {r['bytes_ingested']}")
            if r["kind"] == "log" and r["source"] == "claude-code":
                src = source_bytes(r["path"], r["compression"])
                if data != src[: src.rfind(b"\n") + 1]:
                    bad.append(f"{where}: mirror differs from its source")
                if r["lines_ingested"] != data.count(b"\n") or r["parse_errors"]:
                    bad.append(f"{where}: {r['lines_ingested']} lines, {r['parse_errors']} parse errors")
                continue
            key = (r["source"], r["rel"], r["generation"])
            if r["kind"] == "log":
                src = source_bytes(r["path"], r["compression"])
                if data != src[: src.rfind(b"\n") + 1]:
                    bad.append(f"{where}: mirror differs from its source")
            if reference.mirrors.get(key) != data:
                bad.append(f"{where}: mirror differs from the clean sync's")
            if reference.files.get((r["source"], r["rel"])) != (r["lines_ingested"], r["parse_errors"]):
                bad.append(f"{where}: lines/parse errors {(r['lines_ingested'], r['parse_errors'])} != "
                           f"{reference.files.get((r['source'], r['rel']))}")
        keys = {(r["source"], r["rel"], r["generation"]) for r in rows}
        for key in reference.mirrors:
            if key[0] != "claude-code" and key not in keys:
                bad.append(f"{key}: file of the clean sync missing")
        on_disk = {p.relative_to(origin_home).as_posix() for p in (origin_home / "raw").rglob("*") if p.is_file()}
        named = {r["mirror"] for r in rows}
        if on_disk != named:
            bad.append(f"mirror files without a row: {sorted(on_disk - named)[:5]}; rows without a file: "
                       f"{sorted(named - on_disk)[:5]}")
        starts = {rid: line_starts(data) for rid, data in mirrors.items()}
        sizes = {r["id"]: r["bytes_ingested"] for r in rows}
        wrong = 0
        for e in conn.execute("SELECT id, raw_file_id, line, offset, span FROM event"):
            st = starts.get(e["raw_file_id"])
            if st is None:
                wrong += 1
                continue
            first, last = e["line"] - 1, e["line"] - 1 + e["span"]
            if not (0 <= first < last < len(st) and st[first] == e["offset"] and st[last] <= sizes[e["raw_file_id"]]):
                wrong += 1
        if wrong:
            bad.append(f"{wrong} event locators do not point at whole committed mirror lines")
    finally:
        conn.close()
    return bad


def table_fingerprint(origin_home: Path) -> dict:
    """Row count and content hash of every table, plus every mirror file's size."""
    out: dict = {}
    db = origin_home / origin.DB_NAME
    if not db.exists():
        return {"db": None}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for t in origin.TABLES:
            if t in ("event", "sync_log"):  # large and append-only: count and last row are enough
                out[t] = conn.execute(f"SELECT count(*), max(rowid) FROM {t}").fetchone()
                continue
            if t.endswith("_fts"):
                out[t] = conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                continue
            h = hashlib.sha256()
            n = 0
            # The records of when each source was last synced and of what the
            # sync looked at are bookkeeping of the sync a command runs first,
            # not something the command wrote.
            skip = (f" WHERE key NOT IN ('{origin.SYNC_RUNS_KEY}', '{origin.LOOKED_KEY}')"
                    if t == "setting" else "")
            for row in conn.execute(f"SELECT * FROM {t}{skip}"):
                h.update(repr(tuple(row)).encode("utf-8", "surrogatepass"))
                n += 1
            out[t] = (n, h.hexdigest())
    finally:
        conn.close()
    raw = origin_home / "raw"
    out["mirrors"] = sorted((p.relative_to(raw).as_posix(), p.stat().st_size)
                            for p in raw.rglob("*") if p.is_file()) if raw.exists() else []
    return out


###############################################################################
# Concurrency workers #########################################################
###############################################################################


class DeferredTransaction:
    """A transaction as it must not be written: BEGIN DEFERRED, read, then write.

    Swapped in for origin.transaction in a worker of the negative control
    only, never in origin itself: a read snapshot that later needs the write
    lock fails with SQLITE_BUSY when another writer committed meanwhile, and
    the busy handler cannot help.
    """

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN DEFERRED")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if not self.conn.in_transaction:
            return
        self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _words_of(text: str, n: int = 3) -> str:
    words = [w for w in text.split() if len(w) >= 4 and w.isalnum()]
    return " ".join(words[:n])


def worker(role: str, origin_home: Path, home: Path, seconds: float, out: Path, deferred: bool) -> None:
    """Run one role against the store until the deadline; write what happened to out."""
    rng = random.Random(f"{role}-{os.getpid()}")
    env = origin_env(home, origin_home)
    result = {"role": role, "ops": 0, "locked": [], "refused": 0, "errors": [], "entries": [],
              "forgotten_entries": [], "excluded_events": []}
    store = origin.open_store(origin_home)
    if deferred:
        origin.transaction = DeferredTransaction
        store.conn.execute("PRAGMA busy_timeout = 50")
    deadline = time.monotonic() + seconds

    def visible_event(kinds=("message",)) -> dict | None:
        word = rng.choice(("schema", "cursor", "index", "memory", "search", "commit", "thread", "cache"))
        hits = origin.search_events(store, word, limit=50, include_tools=False)
        return rng.choice(hits) if hits else None

    def op() -> None:
        if role == "syncer":
            origin.sync(store, env=env, home=home)
        elif role == "searcher":
            ev = visible_event()
            if ev:
                origin.get_event(store, ev["id"])
                origin.raw_sources(store, ev["id"])
                origin.timeline(store, session=ev["session"], limit=50)
            origin.search(store, rng.choice(("note", "memory", "schema migration")), limit=20)
            origin.status(store)
        elif role == "rememberer":
            ev = visible_event()
            if ev:
                token = f"note{rng.randrange(10**9):09d}"
                e = origin.remember(store, kind="memory", text=f"{token} decided after {ev['snippet'][:40]}",
                                    sources=[{"event": ev["id"]}], author=role)
                result["entries"].append([e["id"], token])
                if rng.random() < 0.3:
                    c = origin.correct(store, e["id"], text=f"{token} corrected", author=role)
                    result["entries"].append([c["id"], token])
        elif role == "forgetter":
            if rng.random() < 0.6:
                rows = origin.list_entries(store, limit=50)
                if rows:
                    res = origin.forget(store, rng.choice(rows)["id"], reason="test")
                    result["forgotten_entries"] += res["forgotten_entries"]
                    result["excluded_events"] += res["excluded_events"]
            else:
                ev = visible_event()
                if ev:
                    res = origin.forget(store, ev["id"], reason="test")
                    result["forgotten_entries"] += res["forgotten_entries"]
                    result["excluded_events"] += res["excluded_events"]
        elif role == "cli":
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                os.environ.update(ORIGIN_HOME=str(origin_home), HOME=str(home))
                word = rng.choice(("schema", "cursor", "index", "memory"))
                code = origin.main(["search", word, "--json"])
                if code == 0 and rng.random() < 0.5:
                    code = origin.main(["remember", f"cli note {rng.randrange(10**6)}", "--kind", "knowledge",
                                        "--quote", word, "--json"])
                origin.main(["status", "--json"])
            if code not in (0, origin.NotFound.exit_code):
                raise RuntimeError(f"cli exited {code}")
        else:
            raise ValueError(role)

    while time.monotonic() < deadline:
        try:
            op()
            result["ops"] += 1
        except sqlite3.OperationalError as e:
            (result["locked"] if "locked" in str(e) or "busy" in str(e) else result["errors"]).append(str(e))
        except origin.OriginError:
            result["refused"] += 1  # a race lost fairly: forgotten, superseded or not found
        except Exception as e:  # noqa: BLE001 - reported to the test
            result["errors"].append(f"{type(e).__name__}: {e}"[:300])
        time.sleep(0.002)
    store.close()
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "worker":
        worker(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), float(sys.argv[5]), Path(sys.argv[6]),
               "--deferred" in sys.argv[7:])
    else:
        sys.exit("usage: reliability_tools.py worker <role> <origin_home> <home> <seconds> <out.json> [--deferred]")
