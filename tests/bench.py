"""Benchmark: ingest, re-sync and search on a synthetic multi-month corpus.

Run with ``make bench`` (``BENCH_MB`` sets the corpus size, default 200).
The corpus is generated from a fixed seed and cached under the system temp
directory, so runs are reproducible and repeat runs skip generation.  Every
figure is measured in this run on this machine, alongside two floors that
bound it: the rate at which ``json.loads`` reads the same lines, and the
limit L, the rate at which one SQLite connection inserts exactly the text
Origin indexes into a bare FTS5 trigram table.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import origin  # noqa: E402
import corpus  # noqa: E402
from bench_mcp import bench_mcp  # noqa: E402
from corpus import write_claude_corpus  # noqa: E402

SEED = 20261129
TURNS = (2, 40)  # sessions of ~30 KB to ~600 KB, ~300 KB on average

def sample_identifier(store: origin.Store) -> str:
    """Return an identifier token that occurs in the corpus (deterministic)."""
    import re

    for (text,) in store.conn.execute("SELECT text FROM event WHERE seq % 97 = 0 ORDER BY seq"):
        m = re.search(r"\bid\d{6}\b", text)
        if m:
            return m.group(0)
    return "id000000"


def query_set(identifier: str = "id000000") -> list[tuple[str, str, dict]]:
    """Return the fixed query set, with words picked by their frequency rank.

    The corpus vocabulary follows Zipf's law, so a word's rank says how rare
    it is: rank 15,000 appears in a handful of events, rank 1,000 in a few
    hundred per million words.  The two-character term is a CJK word of
    moderate frequency, as such queries usually are.
    """
    words, _ = corpus._vocab()
    return [
        ("rare word", words[15000], {}),
        ("rare word + project", words[12000], {"project": "proj3"}),
        ("identifier", identifier, {}),
        ("2-term AND", f"{words[150]} {words[400]}", {}),
        ("2-term AND + project", f"{words[250]} {words[300]}", {"project": "proj1"}),
        ("CJK", "数据库", {}),
        ("CJK + project", "迁移", {"project": "proj2"}),
        ("2-char fallback", "索引", {}),
        ("code phrase", "fts5(text,", {}),
        ("recent", f"{words[120]} {words[220]}", {"recent": True}),
        ("common term (>= 10% of events)", words[40], {}),
    ]


def corpus_dir(mb: int) -> Path:
    """Return a cached corpus of about mb megabytes of Claude Code logs."""
    d = Path(tempfile.gettempdir()) / f"origin-bench-{mb}mb-{SEED}"
    done = d / ".complete"
    if done.exists():
        return d
    shutil.rmtree(d, ignore_errors=True)
    per_file = 310_000
    files = max(10, mb * 1_000_000 // per_file)
    t = time.perf_counter()
    write_claude_corpus(d / "claude", files=files, turns=TURNS, seed=SEED, projects=8)
    done.write_text("ok")
    print(f"generated {files} files in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return d


def corpus_bytes(d: Path) -> tuple[int, int]:
    files = [p for p in d.rglob("*.jsonl")]
    return sum(p.stat().st_size for p in files), len(files)


def run_sync(home: Path, user: Path) -> tuple[float, int, dict]:
    """Sync in a child process; return wall seconds, peak RSS (KB), report."""
    env = {**os.environ, "ORIGIN_HOME": str(home), "HOME": str(user)}
    env.pop("CLAUDE_CONFIG_DIR", None)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(ROOT / "origin.py"), "sync", "--json"], env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(p.stderr)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, rss, json.loads(p.stdout)


def json_floor(d: Path) -> float:
    """MB/s at which json.loads reads every line of the corpus (one core)."""
    total = 0
    t = time.perf_counter()
    for p in d.rglob("*.jsonl"):
        with open(p, "rb") as fh:
            for line in fh:
                total += len(line)
                json.loads(line)
    return total / 1e6 / (time.perf_counter() - t)


def fts_limit(store: origin.Store, raw_bytes: int) -> tuple[float, float]:
    """Return L as (MB/s of indexed text, MB/s of raw logs it corresponds to)."""
    texts = [r[0] for r in store.conn.execute("SELECT text FROM event WHERE indexed = 1")]
    size = sum(len(t.encode()) for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        c = sqlite3.connect(os.path.join(tmp, "l.db"), isolation_level=None)
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='trigram', detail='full')")
        t = time.perf_counter()
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT INTO t (text) VALUES (?)", ((x,) for x in texts))
        c.execute("COMMIT")
        secs = time.perf_counter() - t
        c.close()
    return size / 1e6 / secs, raw_bytes / 1e6 / secs


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench_search(store: origin.Store, reps: int = 15) -> tuple[list[tuple[str, float, float, int]], list[float]]:
    """Time each query; return per-query (name, p50, p95, hits) and the selective set's timings."""
    out, selective = [], []
    for name, q, kw in query_set(sample_identifier(store)):
        times = []
        n = 0
        for _ in range(reps):
            t = time.perf_counter()
            n = len(origin.search_events(store, q, **kw))
            times.append((time.perf_counter() - t) * 1000)
        out.append((name, pct(times, 50), pct(times, 95), n))
        if not name.startswith("common"):
            selective.extend(times)
    return out, selective


def bench_noop(home: Path, user: Path, reps: int = 7) -> float:
    env = {"HOME": str(user)}
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        with origin.open_store(home) as s:
            origin.sync(s, env=env)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def bench_append_one(home: Path, user: Path) -> float:
    env = {"HOME": str(user)}
    target = next((user / ".claude").rglob("*.jsonl"))
    line = target.read_text().splitlines()[-1]
    rec = json.loads(line)
    times = []
    for i in range(5):
        rec["uuid"] = f"bench-append-{time.time_ns()}-{i}"
        with open(target, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        t = time.perf_counter()
        with origin.open_store(home) as s:
            origin.sync(s, env=env)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    mb = int(os.environ.get("BENCH_MB", "200"))
    src = corpus_dir(mb)
    raw, nfiles = corpus_bytes(src)
    work = Path(tempfile.mkdtemp(prefix="origin-bench-run-"))
    try:
        user = work / "user"
        user.mkdir()
        # Work on a copy so appends do not change the cached corpus.
        shutil.copytree(src / "claude", user / ".claude")
        home = work / "home"
        wall, rss_kb, report = run_sync(home, user)
        events = report["events_added"]
        with origin.open_store(home) as s:
            st = origin.status(s)
            l_text, l_raw = fts_limit(s, raw)
            searches, selective = bench_search(s)
            common = query_set()[-1][1]
            share = s.conn.execute("SELECT count(*) FROM event_fts WHERE event_fts MATCH ?", (f'"{common}"',)).fetchone()[0] / max(1, events)
            t = time.perf_counter()
            origin.timeline(s, since=origin.parse_when("2026-09-01"), until=origin.parse_when("2026-09-08"))
            tl_ms = (time.perf_counter() - t) * 1000
        noop = bench_noop(home, user)
        append_one = bench_append_one(home, user)
        floor = json_floor(user / ".claude")
        mcp = bench_mcp(home, user, n=100, query=query_set()[3][1])
        db_mb = st["db_bytes"] / 1e6
        mirror_mb = sum(p.stat().st_size for p in (home / "raw").rglob("*") if p.is_file()) / 1e6
        rate = raw / 1e6 / wall
        rows = [
            ("machine", f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"),
            ("corpus", f"{raw / 1e6:.0f} MB raw, {nfiles} files, {events} events"),
            ("initial ingest", f"{rate:.1f} MB/s raw, {events / wall:,.0f} events/s ({wall:.1f} s)"),
            ("limit L (bare FTS5 trigram insert)", f"{l_text:.1f} MB/s of indexed text = {l_raw:.1f} MB/s of raw logs; "
                                                  f"ingest is {rate / l_raw:.2f} x L"),
            ("json.loads floor", f"{floor:.0f} MB/s"),
            ("peak RSS of the sync process", f"{rss_kb / 1024:.0f} MB"),
            (f"no-op re-sync ({nfiles} files)", f"{noop:.0f} ms"),
            ("append one line, re-sync", f"{append_one:.0f} ms"),
            ("timeline, 7 days", f"{tl_ms:.1f} ms"),
            ("MCP over stdio: get", f"p50 {mcp['get_p50_ms']:.1f} ms, p95 {mcp['get_p95_ms']:.1f} ms"),
            ("MCP over stdio: search (2-term AND)", f"p50 {mcp['search_p50_ms']:.1f} ms, p95 {mcp['search_p95_ms']:.1f} ms"),
            ("store size", f"{db_mb:.0f} MB db + {mirror_mb:.0f} MB mirrors ({db_mb / (raw / 1e9):.0f} MB db per GB of logs)"),
        ]
        for name, p50, p95, n in searches:
            rows.append((f"search: {name}", f"p50 {p50:.1f} ms, p95 {p95:.1f} ms ({n} hits)"))
        rows.append(("search p95 over the selective set", f"{pct(selective, 95):.1f} ms"))
        rows.append(("common term's share of events", f"{share:.0%}"))
        width = max(len(r[0]) for r in rows)
        print()
        print(f"| {'figure':{width}} | value |")
        print(f"|{'-' * (width + 2)}|-------|")
        for name, value in rows:
            print(f"| {name:{width}} | {value} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    random.seed(SEED)
    main()
