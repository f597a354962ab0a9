"""Benchmark: ingest, re-sync and search on a synthetic multi-month corpus.

Run with ``make bench`` (``BENCH_MB`` sets the corpus size, default 200).
The corpus mixes the agents by share of raw bytes: Claude Code 45 %, Codex
25 % (a third of its rollouts zstd-compressed, some archived), Grok Build
15 % and one large Cursor state.vscdb 15 %.  Raw bytes are JSONL as the
agent wrote it (decompressed for .zst) plus the database files.  It is
generated from a fixed seed and cached under the system temp directory, so
runs are reproducible and repeat runs skip generation; so is a separate
archive of 10,000 small Claude Code files for the re-sync figures.  Every
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
import re
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

import adapters  # noqa: E402
import origin  # noqa: E402
import corpus  # noqa: E402
from bench_mcp import bench_mcp  # noqa: E402
from corpus import (write_aider_corpus, write_claude_corpus, write_codex_corpus, write_copilot_corpus,  # noqa: E402
                    write_cursor_db, write_gemini_corpus, write_goose_db, write_grok_corpus, write_opencode_db,
                    write_pi_corpus, write_qwen_corpus)

SEED = 20261129
#: Bumped whenever a generator changes, so no stale cached corpus is used.
CORPUS_VERSION = 6
TURNS = (2, 40)  # Claude Code sessions of ~30 KB to ~600 KB, ~280 KB on average
CODEX_TURNS = GROK_TURNS = (2, 30)  # ~370 to ~400 KB on average
BUBBLES = (10, 120)  # bubbles per Cursor conversation, ~400 KB of database each
#: Each agent's share of the corpus's raw bytes, in the order Origin syncs them.
SHARES = {"claude-code": 0.38, "codex": 0.21, "cursor": 0.13, "grok": 0.12, "opencode": 0.04, "gemini": 0.04,
          "goose": 0.04, "copilot-cli": 0.01, "qwen": 0.01, "pi": 0.01, "aider": 0.01}
#: Average raw bytes of one generated file, session or conversation (measured).
UNIT_BYTES = {"claude-code": 250_000, "codex": 610_000, "cursor": 400_000, "grok": 370_000, "opencode": 175_000,
              "gemini": 100_000, "goose": 186_000, "copilot-cli": 167_000, "qwen": 170_000, "pi": 94_000,
              "aider": 76_000}
#: How the Claude Code and Codex logs are shaped, so that the share of raw
#: bytes Origin indexes, and the tool calls' and outputs' share of that, are
#: those of the real logs in tests/fixtures (``fixture_shares`` measures
#: both; the bench prints them side by side): Claude Code about 17 % text,
#: four fifths of it tool calls and outputs; Codex about 29 %, nine tenths
#: tool output.
CLAUDE_SHAPE = {"edits": 0.5, "outputs": (40, 120, 600, 1500), "talk": 0.7}
CODEX_SHAPE = {"outputs": (120, 600, 1500, 1500), "talk": 0.3}
#: Fewest units per agent, so a small corpus still has zstd and archived rollouts.
MIN_UNITS = {"claude-code": 10, "codex": 12, "cursor": 5, "grok": 10, "opencode": 5, "gemini": 6, "goose": 5,
             "copilot-cli": 3, "qwen": 3, "pi": 3, "aider": 3}
#: Files of short Claude Code sessions (~85 events each) added per BENCH
#: MB before the search figures, so they are taken at ~1,000 events per MB.
TOPUP_FILES_PER_MB = 8.5
#: The archive of many small files that the re-sync figures run on.
SMALL_FILES = 10_000
#: Variables that point discovery at real logs; the bench clears them.
AGENT_VARS = (*dict.fromkeys(v for a in adapters.ADAPTERS.values() for v in a.env_vars), "APPDATA")


def sample_identifier(store: origin.Store) -> str:
    """Return an identifier token that occurs in the corpus (deterministic)."""
    import re

    for (text,) in store.conn.execute(
            "SELECT text FROM event WHERE seq % 97 = 0 AND kind = 'message' AND indexed = 1 ORDER BY seq"):
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
    cjk, _ = corpus._cjk_vocab()
    return [
        ("rare word", words[15000], {}),
        ("rare word + project", words[12000], {"project": "proj3"}),
        ("identifier", identifier, {}),
        ("2-term AND", f"{words[150]} {words[400]}", {}),
        ("2-term AND + project", f"{words[250]} {words[300]}", {"project": "proj1"}),
        ("CJK", cjk[3000], {}),
        ("CJK + project", cjk[800], {"project": "proj2"}),
        ("2-char fallback", "索引", {}),
        ("common code phrase", "fts5(text,", {}),
        ("recent", f"{words[120]} {words[220]}", {"recent": True}),
        ("common term (>= 10% of messages)", words[20], {}),
    ]


DOCS = ROOT / "docs" / "performance.md"
DOCS_HEADER = """# Performance

The sections between `<!-- …:begin -->` and `<!-- …:end -->` markers are
written by `make bench` itself, on the machine stated with each table (date,
CPU count, Python and SQLite versions); a new run replaces them.  The rest
of the page records full-scale runs (`BENCH_MB=2000`) and how each figure is
taken, with the machine and load each was measured on.
"""


def write_docs(text: str, section: str, title: str, path: Path = DOCS) -> None:
    """Put text between the markers of section in docs/performance.md, keeping all else
    (a section not there yet is added at the end, under title)."""
    begin, end = f"<!-- {section}:begin -->", f"<!-- {section}:end -->"
    block = f"{begin}\n{text}{end}"
    old = path.read_text(encoding="utf-8") if path.exists() else DOCS_HEADER
    if begin in old and end in old.split(begin, 1)[1]:
        before, rest = old.split(begin, 1)
        new = before + block + rest.split(end, 1)[1]
    else:
        new = old.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")


def units(mb: int, source: str) -> int:
    """Return how many files (sessions, conversations) give source its share of mb."""
    return max(MIN_UNITS[source], round(mb * 1_000_000 * SHARES[source] / UNIT_BYTES[source]))


def corpus_dir(mb: int) -> Path:
    """Return a cached mixed corpus of about mb megabytes of raw logs.

    ``home/`` is the HOME of the agents (``.claude``, ``.codex``, ``.grok``);
    ``cursor/User/`` is the Cursor User folder, for ORIGIN_CURSOR_USER_DIR.
    """
    return _cached(f"origin-bench-mixed{CORPUS_VERSION}-{mb}mb-{SEED}", lambda d: _write_mixed(d, mb),
                   f"the {mb} MB corpus")


def _cached(name: str, build, what: str) -> Path:
    """Return the temp folder name, building it with build(folder) once."""
    d = Path(tempfile.gettempdir()) / name
    done = d / ".complete"
    if done.exists():
        return d
    shutil.rmtree(d, ignore_errors=True)
    t = time.perf_counter()
    build(d)
    done.write_text("ok")
    print(f"generated {what} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return d


def _write_mixed(d: Path, mb: int) -> None:
    home = d / "home"
    write_claude_corpus(home / ".claude", files=units(mb, "claude-code"), turns=TURNS, seed=SEED, projects=8,
                        **CLAUDE_SHAPE)
    write_codex_corpus(home / ".codex", files=units(mb, "codex"), turns=CODEX_TURNS, seed=SEED + 1, projects=8,
                       **CODEX_SHAPE)
    write_grok_corpus(home / ".grok", sessions=units(mb, "grok"), turns=GROK_TURNS, seed=SEED + 2, projects=8)
    write_cursor_db(d / "cursor" / "User" / "globalStorage" / "state.vscdb", composers=units(mb, "cursor"),
                    bubbles_per_composer=BUBBLES, seed=SEED + 3, projects=8)
    data = home / ".local" / "share"  # OpenCode's and Goose's default folders
    write_opencode_db(data / "opencode" / "opencode.db", sessions=units(mb, "opencode"), turns=CODEX_TURNS,
                      seed=SEED + 5, projects=8)
    write_gemini_corpus(home / ".gemini", sessions=units(mb, "gemini"), turns=CODEX_TURNS, seed=SEED + 6, projects=8)
    write_goose_db(data / "goose" / "sessions" / "sessions.db", sessions=units(mb, "goose"), turns=CODEX_TURNS,
                   seed=SEED + 7, projects=8)
    write_copilot_corpus(home / ".copilot", sessions=units(mb, "copilot-cli"), turns=GROK_TURNS, seed=SEED + 8,
                         projects=8)
    write_qwen_corpus(home / ".qwen", sessions=units(mb, "qwen"), turns=GROK_TURNS, seed=SEED + 9, projects=8)
    write_pi_corpus(home / ".pi" / "agent", sessions=units(mb, "pi"), turns=GROK_TURNS, seed=SEED + 10, projects=8)
    write_aider_corpus(home / "code", repos=units(mb, "aider"), runs=(1, 6), turns=5, seed=SEED + 11)


def topup_corpus_dir(mb: int) -> Path:
    """Return a cached Claude Code archive of short events that brings the
    search store to about 1,000 events per BENCH MB (2M at full scale)."""
    return _cached(f"origin-bench-topup{CORPUS_VERSION}-{mb}mb-{SEED}",
                   lambda d: write_claude_corpus(d / "home" / ".claude", files=round(mb * TOPUP_FILES_PER_MB), turns=TURNS,
                                                 seed=SEED + 4, projects=8, outputs=(15, 40, 120)),
                   f"the search top-up for {mb} MB")


def small_corpus_dir() -> Path:
    """Return a cached archive of SMALL_FILES Claude Code sessions of a few KB each."""
    return _cached(f"origin-bench-small{CORPUS_VERSION}-{SMALL_FILES}-{SEED}",
                   lambda d: write_claude_corpus(d / "home" / ".claude", files=SMALL_FILES, turns=1, seed=SEED,
                                                 projects=20, outputs=(15, 40, 120)),
                   f"{SMALL_FILES} small files")


def _raw_size(path: Path) -> int:
    """Return a log's size as the agent wrote it (decompressed for .zst)."""
    if path.suffix != ".zst":
        return path.stat().st_size
    import zstandard

    total = 0
    with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True) as r:
        while chunk := r.read(1 << 20):
            total += len(chunk)
    return total


def source_files(user: Path, cursor_user: Path) -> dict[str, list[Path]]:
    """Return each agent's source files: the logs, and Cursor's databases."""
    return {
        "claude-code": sorted((user / ".claude").rglob("*.jsonl")),
        "codex": sorted(p for p in (user / ".codex").rglob("rollout-*") if p.is_file()),
        "cursor": sorted(cursor_user.rglob("state.vscdb")),
        "grok": sorted((user / ".grok").rglob("updates.jsonl")),
        "opencode": sorted((user / ".local" / "share" / "opencode").glob("opencode*.db")),
        "gemini": sorted((user / ".gemini" / "tmp").rglob("session-*")),
        "goose": sorted((user / ".local" / "share" / "goose" / "sessions").glob("sessions.db")),
        "copilot-cli": sorted((user / ".copilot").rglob("events.jsonl")),
        "qwen": sorted((user / ".qwen").rglob("*.jsonl")),
        "pi": sorted((user / ".pi").rglob("*.jsonl")),
        "aider": sorted((user / "code").rglob(".aider.chat.history.md")),
    }


def corpus_sizes(user: Path, cursor_user: Path) -> dict[str, dict]:
    """Return per agent: files, raw bytes, bytes on disk, raw bytes from .zst."""
    out = {}
    for source, files in source_files(user, cursor_user).items():
        raw = {p: _raw_size(p) for p in files}
        out[source] = {"files": len(files), "raw": sum(raw.values()), "disk": sum(p.stat().st_size for p in files),
                       "zst_raw": sum(n for p, n in raw.items() if p.suffix == ".zst"),
                       "zst_disk": sum(p.stat().st_size for p in files if p.suffix == ".zst")}
    return out


def agent_env(user: Path, cursor_user: Path) -> dict:
    """Return an environment whose agents' logs are the bench corpus only."""
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    env.update(HOME=str(user), ORIGIN_CURSOR_USER_DIR=str(cursor_user), ORIGIN_AIDER_ROOTS=str(user / "code"))
    return env


#: Runs origin.py and prints its own peak RSS and CPU seconds (all its
#: threads) as it exits.  The child's ru_maxrss is no use: Linux folds the
#: parent's peak into it at exec.
_PEAK_RSS = """
import atexit, resource, runpy, sys
def peak():
    use = resource.getrusage(resource.RUSAGE_SELF)
    try:
        kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    except OSError:  # no /proc: the best there is (bytes on macOS)
        kb = use.ru_maxrss // (1024 if sys.platform == "darwin" else 1)
    sys.stderr.write(f"peak-rss-kb {kb}\\ncpu-s {use.ru_utime + use.ru_stime:.2f}\\n")
atexit.register(peak)
sys.argv = sys.argv[1:]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_sync(home: Path, env: dict, *args: str) -> tuple[float, int, dict]:
    """Sync in a child process; return wall seconds, its peak RSS (KB), report.

    The report gets ``cpu_s``, the CPU seconds the child spent on all its
    threads.
    """
    env = {**env, "ORIGIN_HOME": str(home)}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(ROOT / "origin.py"), "sync", "--json", *args],
                       env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(p.stderr)
    rss = [int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("peak-rss-kb ")]
    cpu = [float(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("cpu-s ")]
    report = json.loads(p.stdout)
    report["cpu_s"] = cpu[-1] if cpu else 0.0
    return wall, rss[-1] if rss else 0, report


def per_source_times(home: Path, started_ms: int) -> dict[str, float]:
    """Return the seconds the sync spent on each agent, from its sync_log.

    Sources are ingested one after the other, each file logged as it is
    done, so an agent's time runs from the previous agent's last file (the
    start, for the first) to its own last file.
    """
    conn = sqlite3.connect(f"file:{home / origin.DB_NAME}?mode=ro", uri=True)
    try:
        ends = conn.execute("SELECT f.source, max(l.ts) FROM sync_log l JOIN raw_file f ON f.id = l.raw_file_id "
                            "GROUP BY f.source ORDER BY max(l.ts)").fetchall()
    finally:
        conn.close()
    out, last = {}, started_ms
    for source, end in ends:
        out[source] = max(end - last, 1) / 1000
        last = end
    return out


def quality(home: Path) -> dict[str, tuple[int, int]]:
    """Return per agent (parse errors, unknown records) of the whole archive."""
    conn = sqlite3.connect(f"file:{home / origin.DB_NAME}?mode=ro", uri=True)
    try:
        return {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT source, sum(parse_errors), sum(unknown_records) FROM raw_file GROUP BY source")}
    finally:
        conn.close()


def json_floor(files: list[Path]) -> float:
    """MB/s at which json.loads reads every line of the plain JSONL logs (one core)."""
    total = 0
    t = time.perf_counter()
    for p in files:
        with open(p, "rb") as fh:
            for line in fh:
                total += len(line)
                json.loads(line)
    return total / 1e6 / (time.perf_counter() - t)


#: A redacted fixture line keeps the length of what it hides:
#: ``[REDACTED_TEXT len=3638 sha=…]``.
_REDACTED = re.compile(r"\[REDACTED_(?:TEXT|OUTPUT) len=(\d+) sha=[0-9a-f]+\]")


def _unredacted(text: str) -> int:
    """Bytes of text with each redaction counted at the length it hides."""
    return len(text.encode("utf-8")) + sum(int(m.group(1)) - len(m.group(0)) for m in _REDACTED.finditer(text))


def text_shares(conn: sqlite3.Connection, raw: dict[str, int] | None = None,
                unredact: bool = False) -> dict[str, tuple[float, float]]:
    """Return per agent (indexed text / raw bytes, tool text / indexed text).

    raw: each agent's raw bytes (default: the bytes ingested).  With
    unredact, a redacted text counts at its original length, cut as the
    adapters cut tool text, so a redacted fixture weighs what the real log did.
    """
    import adapters

    caps = {"tool_call": adapters.TOOL_CALL_MAX, "tool_result": adapters.TOOL_RESULT_MAX}
    out = {}
    for source, ingested in conn.execute("SELECT source, sum(bytes_ingested) FROM raw_file GROUP BY source").fetchall():
        size = (raw or {}).get(source, ingested)
        if unredact:
            size = sum(_unredacted(Path(p).read_text(encoding="utf-8", errors="replace"))
                       for (p,) in conn.execute("SELECT path FROM raw_file WHERE source = ?", (source,)))
        text = tools = 0
        for kind, t in conn.execute("SELECT kind, text FROM event WHERE source = ? AND indexed = 1", (source,)):
            n = min(_unredacted(t), caps.get(kind, len(t) * 4)) if unredact else len(t.encode("utf-8"))
            text += n
            tools += n if kind != "message" else 0
        out[source] = (text / max(1, size), tools / max(1, text))
    return out


def fixture_shares() -> dict[str, tuple[float, float]]:
    """Return text_shares of the real Claude Code and Codex logs in tests/fixtures."""
    fixtures = ROOT / "tests" / "fixtures"
    with tempfile.TemporaryDirectory() as tmp:
        user = Path(tmp) / "user"
        projects = user / ".claude" / "projects" / "-fixtures"
        projects.mkdir(parents=True)
        for p in (fixtures / "claude-code").rglob("*.jsonl"):
            if "subagents" not in p.parts:
                shutil.copy(p, projects / p.name)
        day = user / ".codex" / "sessions" / "2026" / "02" / "23"
        day.mkdir(parents=True)
        for i, p in enumerate(sorted((fixtures / "codex").rglob("*.jsonl"))):
            name = p.name if p.name.startswith("rollout-") else \
                f"rollout-2026-02-23T10-00-{i:02d}-019b0000-0000-7000-8000-{i:012d}.jsonl"
            shutil.copy(p, day / name)
        with origin.open_store(Path(tmp) / "home") as s:
            origin.sync(s, env=agent_env(user, user / "no-cursor"), home=user)
            return text_shares(s.conn, unredact=True)


def shares_row(shares: dict[str, tuple[float, float]]) -> str:
    return ", ".join(f"{adapters.ADAPTERS[k].display} {t:.0%} text, {u:.0%} of it tools"
                     for k, (t, u) in sorted(shares.items()))


def fts_limit(store: origin.Store, raw_bytes: int) -> tuple[float, float, float, float]:
    """Return L as (MB/s of indexed text, MB/s of raw logs it corresponds to),
    with the insert's wall and CPU seconds."""
    texts = [r[0] for r in store.conn.execute("SELECT text FROM event WHERE indexed = 1")]
    size = sum(len(t.encode()) for t in texts)
    with tempfile.TemporaryDirectory() as tmp:
        c = sqlite3.connect(os.path.join(tmp, "l.db"), isolation_level=None)
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='trigram', detail='full')")
        t, cpu = time.perf_counter(), time.process_time()
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT INTO t (text) VALUES (?)", ((x,) for x in texts))
        c.execute("COMMIT")
        secs, cpu = time.perf_counter() - t, time.process_time() - cpu
        c.close()
    return size / 1e6 / secs, raw_bytes / 1e6 / secs, secs, cpu


def scanner_cost(store: origin.Store) -> tuple[float, int]:
    """Time the secret scanner over every event text ingest stored: (seconds, characters).

    Ingest runs it once per event before the insert; the stored texts are
    what it saw (masked where it found a secret, which is rare).
    """
    texts = [r[0] for r in store.conn.execute("SELECT text FROM event")]
    t = time.perf_counter()
    for text in texts:
        origin.mask_secrets(text)
    return time.perf_counter() - t, sum(map(len, texts))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench_search(store: origin.Store, reps: int = 15, strict: bool = True
                 ) -> tuple[list[tuple[str, float, float, int]], list[float]]:
    """Time each query; return per-query (name, p50, p95, hits) and the selective set's timings.

    ``strict``: every word must match (``search_events``, as ``--strict``);
    else the default search a person or an agent gets: strict hits, then
    partial ones and replies, 20 events (``origin.search``).
    """
    out, selective = [], []
    for name, q, kw in query_set(sample_identifier(store)):
        times = []
        n = 0
        for _ in range(reps):
            t = time.perf_counter()
            if strict:
                n = len(origin.search_events(store, q, **kw))
            else:
                n = len(origin.search(store, q, scope="events", **kw)["events"])
            times.append((time.perf_counter() - t) * 1000)
        out.append((name, pct(times, 50), pct(times, 95), n))
        if not name.startswith("common"):
            selective.extend(times)
    return out, selective


#: Words no generated text holds: a question's word the archive never says.
ABSENT_WORDS = ("rationale", "tradeoff", "outcome", "motivation", "alternative")


def question_set(n: int = 20) -> list[str]:
    """Plain questions of five content words each, as people ask: one common
    word (Zipf rank 20-80), two of middling frequency (200-3,000), one rare
    (5,000-15,000) and one the archive never holds, among question words.
    No event holds them all, so every one runs the relaxed pass."""
    words, _ = corpus._vocab()
    rng = random.Random(SEED)
    templates = ("what was the {0} for the {1} {2} change in {3} {4}", "why did we pick {1} over {2} for {0} {3} {4}",
                 "when did the {0} {1} break after the {2} {3} {4}", "how do I fix {1} {2} in the {0} {3} {4}")
    out = []
    for i in range(n):
        picked = [words[rng.randrange(20, 80)], words[rng.randrange(200, 3000)], words[rng.randrange(200, 3000)],
                  words[rng.randrange(5000, 15000)], ABSENT_WORDS[i % len(ABSENT_WORDS)]]
        out.append(templates[i % len(templates)].format(*picked))
    return out


def bench_questions(store: origin.Store, reps: int = 5) -> tuple[float, float, float]:
    """Time ``question_set`` through the default search (10 events, as the MCP tool);
    return p50, p95 (ms) and the share of answers that hold partial hits.  The
    store's page caches stay warm; the term frequencies it remembers do not."""
    times, partial = [], 0
    for q in question_set():
        for i in range(reps):
            store._freq.clear()  # each time as a new process would: the words' frequencies unknown
            t = time.perf_counter()
            res = origin.search(store, q, scope="events", limit=10)
            times.append((time.perf_counter() - t) * 1000)
            partial += i == 0 and any("missing" in e for e in res["events"])
    return pct(times, 50), pct(times, 95), partial / len(question_set())


def bench_admin(home: Path, reps: int = 21) -> list[tuple[str, float, float]]:
    """Server-side render time of admin pages, in-process: (page, p50 ms, p95 ms).

    Each request goes through AdminApp.handle as the hub would call it: the
    host check, the session lookup (and its last-request write), the core
    operation, readout and the escaping renderer.
    """
    import types
    import urllib.parse

    app = origin.AdminApp()
    app.home = home
    out = []
    with origin.open_store(home) as s:
        sid, _ = origin.create_admin_session(s)
        ev = s.conn.execute("SELECT id FROM event WHERE kind = 'message' ORDER BY seq DESC LIMIT 1").fetchone()[0]
        q = query_set(sample_identifier(s))[0][1]
        pages = {"overview": "/admin/", "search": "/admin/search?" + urllib.parse.urlencode({"q": q}),
                 "timeline (365 days)": "/admin/timeline?since=365d",
                 "event": "/admin/event?" + urllib.parse.urlencode({"id": ev})}
        for name, target in pages.items():
            split = urllib.parse.urlsplit(target)
            req = types.SimpleNamespace(method="GET", path=split.path, query=urllib.parse.parse_qs(split.query),
                                        headers={"host": "127.0.0.1:7077", "cookie": f"origin-admin={sid}"},
                                        body=b"", client="127.0.0.1", store=s)
            times = []
            for _ in range(reps):
                t = time.perf_counter()
                r = app.handle(req)
                times.append((time.perf_counter() - t) * 1000)
                assert r.status == 200, (name, r.status, r.body[:300])
            out.append((name, pct(times, 50), pct(times, 95)))
    return out


def admin_rows(figures: list[tuple[str, float, float]]) -> list[tuple[str, str]]:
    return [(f"admin page render: {name}", f"p50 {p50:.1f} ms, p95 {p95:.1f} ms") for name, p50, p95 in figures]


def origin_command() -> tuple[list[str], str]:
    """Return how a user starts `origin` here, and a label for it.

    The console script next to this Python when Origin is installed (as
    ``make bench`` does), else the same two lines the script runs.
    """
    script = Path(sys.executable).parent / "origin"
    if script.is_file():
        return [str(script)], "the installed `origin` script"
    return [sys.executable, "-c", "import sys; from origin import main; sys.exit(main())"], "`from origin import main`"


def startup_env(home: Path, base: dict | None = None) -> dict[str, str]:
    """The environment of a start-up run (base, else this process's): bytecode
    written and used, as for any installed program."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(ORIGIN_HOME=str(home), PYTHONPATH=str(ROOT))
    return env


#: Entries of each kind the session-start hook's figure is taken over.
CONTEXT_ENTRIES = 20


def hook_input(home: Path, project: str) -> str:
    """Give project CONTEXT_ENTRIES entries of each kind (once); return the JSON
    Claude Code sends a SessionStart hook for a session in the project's folder."""
    with origin.open_store(home) as s:
        cwd, event = s.conn.execute(
            "SELECT s.cwd, e.id FROM session s JOIN event e ON e.source = s.source AND e.session = s.id "
            "WHERE s.project = ? AND s.cwd IS NOT NULL AND e.kind = 'message' LIMIT 1", (project,)).fetchone()
        if not origin.list_entries(s, project=project, limit=1):
            for kind in origin.ENTRY_KINDS:
                for i in range(CONTEXT_ENTRIES):
                    origin.remember(s, kind=kind, text=f"Bench {kind} {i}: the {project} service keeps its "
                                                       "cache warm across deploys, because cold starts cost.",
                                    sources=[{"event": event}], author="bench")
    return json.dumps({"session_id": "bench", "transcript_path": "/tmp/bench.jsonl", "cwd": cwd,
                       "permission_mode": "default", "hook_event_name": "SessionStart", "source": "startup"})


def startup_times(home: Path, query: str, project: str, reps: int = 21, env: dict | None = None,
                  hook: bool = True) -> dict:
    """Return whole-process median ms of a bare interpreter, `origin --version`,
    a selective `origin search`, the same with --project and --since, and
    the session-start hook (`origin context --hook` given Claude Code's
    JSON for a folder of project; not with ``hook=False``), taken in turns so load hits all alike,
    and (as ``cpu:<name>``) the median CPU ms of each, which a loaded
    machine inflates far less than wall time.

    Bytecode is written first (as for any installed program), so no run pays
    for compiling origin.py.
    """
    import resource

    def children_cpu() -> float:
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        return use.ru_utime + use.ru_stime

    env = startup_env(home, env)
    cmd, _ = origin_command()
    runs = {"bare": [sys.executable, "-c", "pass"], "version": cmd + ["--version"],
            "search": cmd + ["search", query, "--limit", "5"],
            "filtered": cmd + ["search", query, "--project", project, "--since", "3650d", "--limit", "5"]}
    stdin = {}
    if hook:
        runs["hook"] = cmd + ["context", "--hook"]
        stdin["hook"] = hook_input(home, project)
    times: dict[str, list[float]] = {k: [] for k in [*runs, *(f"cpu:{k}" for k in runs)]}
    for name, argv in runs.items():  # warm up: bytecode, page cache
        p = subprocess.run(argv, env=env, capture_output=True, check=True, text=True, input=stdin.get(name))
        if name == "hook":
            times["hook_chars"] = len(p.stdout.rstrip("\n"))
            times["hook_ids"] = p.stdout.count("(ent_")
    for _ in range(reps):
        for name, argv in runs.items():
            t, cpu = time.perf_counter(), children_cpu()
            subprocess.run(argv, env=env, capture_output=True, check=True, text=True, input=stdin.get(name))
            times[name].append((time.perf_counter() - t) * 1000)
            times[f"cpu:{name}"].append((children_cpu() - cpu) * 1000)
    return {k: statistics.median(v) if isinstance(v, list) else v for k, v in times.items()}


def startup_rows(times: dict) -> list[tuple[str, str]]:
    bare = times["bare"]
    _, how = origin_command()
    cpu = times["cpu:bare"] or 1.0
    return [("CLI start-up (whole process, median)",
             f"bare `python -c pass` {bare:.0f} ms; `origin --version` {times['version']:.0f} ms = "
             f"{times['version'] / bare:.2f} x; selective `origin search` {times['search']:.0f} ms = "
             f"{times['search'] / bare:.2f} x; with --project and --since {times['filtered']:.0f} ms = "
             f"{times['filtered'] / bare:.2f} x (run as {how}; load average {os.getloadavg()[0]:.1f})"),
            ("CLI start-up, CPU time (median)",
             f"bare {cpu:.0f} ms; `origin --version` {times['cpu:version'] / cpu:.2f} x; "
             f"selective `origin search` {times['cpu:search'] / cpu:.2f} x; with --project and --since "
             f"{times['cpu:filtered'] / cpu:.2f} x"),
            ("session-start hook: `origin context --hook` with Claude Code's JSON (whole process, median)",
             f"{times['hook']:.0f} ms = {times['hook'] / bare:.2f} x bare; CPU {times['cpu:hook'] / cpu:.2f} x; "
             f"printed {times['hook_chars']:,} characters, {times['hook_ids']} entries "
             f"(of {CONTEXT_ENTRIES * len(origin.ENTRY_KINDS)} in the project)")]


#: The start-up budget: a command, its run in ``startup_times``, and the
#: most wall time it may take as a multiple of a bare ``python -c pass``.
STARTUP_BUDGET = (("`origin --version`", "version", 2.0), ("`origin search <word>`", "search", 3.0))
#: Runs of each command the budget's medians are taken over.
BUDGET_REPS = 21


def budget_rows(times: dict, reps: int = BUDGET_REPS) -> list[tuple[str, str]]:
    """One row per command of STARTUP_BUDGET: its median, its ratio to a bare
    interpreter's, the budget, and whether the budget is met."""
    bare = times["bare"]
    rows = [("bare `python -c pass`", f"{bare:.1f} ms (wall time, median of {reps}; load average "
                                      f"{os.getloadavg()[0]:.1f})")]
    for label, run, most in STARTUP_BUDGET:
        ratio = times[run] / bare
        rows.append((f"{label}, budget ≤ {most:g} ×",
                     f"{times[run]:.1f} ms = {ratio:.2f} × bare: {'met' if ratio <= most else 'NOT MET'}"))
    return rows


def startup_budget(docs: bool) -> None:
    """Measure the start-up budget on a small store (the real Claude Code
    fixtures), print it, and with docs write it into docs/performance.md."""
    work = Path(tempfile.mkdtemp(prefix="origin-bench-startup-"))
    try:
        projects = work / "user" / ".claude" / "projects"
        fixtures = ROOT / "tests" / "fixtures" / "claude-code"
        shutil.copytree(fixtures / "claude-code-viewer" / "sample-project", projects / "-path-to-Demo")
        env = {**agent_env(work / "user", work / "no-cursor"), "ORIGIN_HOME": str(work / "home")}
        cmd, how = origin_command()
        subprocess.run(cmd + ["sync"], env=env, capture_output=True, check=True)
        times = startup_times(work / "home", "Demo", "Demo", reps=BUDGET_REPS, env=env, hook=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [("machine", machine_row())] + budget_rows(times)
    table(rows)
    if docs:
        text = (f"Whole-process wall time on a store of the Claude Code fixtures, run as {how} with bytecode "
                f"written, each command in turns with a bare interpreter; measured {time.strftime('%Y-%m-%d')}.\n\n"
                + "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows))
        write_docs(text, "startup", "Start-up budget")


def timed_sync(home: Path, env: dict) -> float:
    """Open the store, sync in this process, close; return milliseconds."""
    t = time.perf_counter()
    with origin.open_store(home) as s:
        origin.sync(s, env=env, home=Path(env["HOME"]))
    return (time.perf_counter() - t) * 1000


def resync_times(home: Path, env: dict, reps: int, append: bool) -> list[float]:
    """Time reps syncs (after appending one line to one log, if append).

    Run in this process: called in a fresh child by ``_child_resyncs``, like
    the syncs of a long-running MCP server, so what the bench itself holds in
    memory does not weigh on them.
    """
    target = next((Path(env["HOME"]) / ".claude").rglob("*.jsonl"))
    rec = json.loads(target.read_text().splitlines()[-1])
    times = []
    for i in range(reps):
        if append:
            rec["uuid"] = f"bench-append-{time.time_ns()}-{i}"
            with open(target, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
        times.append(timed_sync(home, env))
    return times


def _child_resyncs(home: Path, env: dict, reps: int, append: bool) -> float:
    """Return the median ms of resync_times run in a fresh Python process."""
    p = subprocess.run([sys.executable, __file__, "--resyncs", str(home), str(reps), "append" if append else "noop"],
                       env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(p.stderr)
    return statistics.median(json.loads(p.stdout))


def bench_noop(home: Path, env: dict, reps: int = 7) -> float:
    """Return the median ms of a sync that finds nothing new."""
    return _child_resyncs(home, env, reps, append=False)


def bench_append_one(home: Path, env: dict, reps: int = 5) -> float:
    """Return the median ms of a sync after one line is appended to one log."""
    return _child_resyncs(home, env, reps, append=True)


def bench_touched_db(home: Path, env: dict, db: Path, reps: int = 3) -> float:
    """Return the median ms of a sync after Cursor rewrote state.vscdb with no new chat.

    A running Cursor writes its database all the time (editor state), so
    its mtime moves while no bubble changes.  The mtime is put back after.
    """
    st = db.stat()
    times = []
    try:
        for _ in range(reps):
            os.utime(db)
            times.append(timed_sync(home, env))
    finally:
        os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))
    return statistics.median(times)


def bench_small_files(work: Path) -> tuple[int, float, float, float, dict]:
    """Return files, first sync s, median no-op and append-one ms on the small archive, and the no-op push."""
    home, env, first = small_store(work)
    files = sum(1 for _ in (Path(env["HOME"]) / ".claude").rglob("*.jsonl"))
    return files, first, bench_noop(home, env), bench_append_one(home, env, reps=7), bench_noop_push(home, env)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bench_noop_push(home: Path, env: dict, reps: int = 11) -> dict:
    """Time the whole `origin push` command with nothing new, over the store at home (synced from env).

    A hub on loopback (`origin serve`, a child process) first takes everything
    in (one push); then `origin push --json` is run reps times, each beside a
    bare `python -c pass`, taken in turns so that load hits both alike.  Each
    timed run must have skipped its sync and sent nothing.  Returns median
    wall and CPU ms of both, and the load average before and after.
    """
    import resource
    import urllib.request

    def children_cpu() -> float:
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        return use.ru_utime + use.ru_stime

    hub_home = home.parent / f"{home.name}-hub"
    with origin.open_store(hub_home) as s:
        token = origin.create_token(s, "bench")
    url = f"http://127.0.0.1:{_free_port()}"
    hub_env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    hub_env.update(ORIGIN_HOME=str(hub_home), HOME=str(hub_home))
    hub = subprocess.Popen([sys.executable, str(ROOT / "origin.py"), "serve", "--listen", url[7:]], env=hub_env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=5):
                    break
            except OSError:
                time.sleep(0.1)
        origin.save_hub_config(home, origin.HubConfig(url, token, "bench"))
        cmd, how = origin_command()
        cli_env = {**startup_env(home), **{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}}
        cli_env["ORIGIN_HOME"] = str(home)
        runs = {"push": cmd + ["push", "--json"], "bare": [sys.executable, "-c", "pass"]}
        # The first push sends everything; the second syncs once more, with
        # the folders settled, so that later ones can tell by stat alone.
        for _ in range(2):
            subprocess.run(runs["push"], env=cli_env, capture_output=True, check=True)
        times: dict[str, list[float]] = {k: [] for k in [*runs, "cpu:push", "cpu:bare"]}
        load = os.getloadavg()[0]
        for _ in range(reps):
            for name, argv in runs.items():
                t, cpu = time.perf_counter(), children_cpu()
                p = subprocess.run(argv, env=cli_env, capture_output=True, check=True, text=True)
                times[name].append((time.perf_counter() - t) * 1000)
                times[f"cpu:{name}"].append((children_cpu() - cpu) * 1000)
                if name == "push":
                    out = json.loads(p.stdout)
                    assert out["sync_skipped"] and out["bytes_sent"] == 0, out
        files = out["files"]
    finally:
        hub.terminate()
        hub.wait(60)
    return {**{k: statistics.median(v) for k, v in times.items()}, "reps": reps, "files": files, "how": how,
            "load": (load, os.getloadavg()[0])}


def noop_push_rows(push: dict) -> list[tuple[str, str]]:
    return [(f"no-op `origin push` over {push['files']:,} files: whole command wall time, median of {push['reps']}",
             f"{push['push']:.0f} ms (CPU {push['cpu:push']:.0f} ms); a bare `python -c pass` beside it "
             f"{push['bare']:.0f} ms (CPU {push['cpu:bare']:.0f} ms); run as {push['how']}, load average "
             f"{push['load'][0]:.1f} to {push['load'][1]:.1f}")]


def noop_push_docs(push: dict) -> None:
    """Write the no-op push figure into docs/performance.md."""
    caption = (f"`origin push` when nothing changed, to a hub on loopback that holds everything, over the "
               f"archive of {push['files']:,} small Claude Code files; {time.strftime('%Y-%m-%d')}, "
               f"{machine_row()}.")
    rows = noop_push_rows(push)
    width = max(len(r[0]) for r in rows)
    lines = [caption, "", f"| {'figure':{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name:{width}} | {value} |" for name, value in rows]
    write_docs("\n".join(lines) + "\n", "noop-push", "No-op push")


def small_store(work: Path) -> tuple[Path, dict, float]:
    """Copy the small archive under work and sync it into a new store; return the store, its env and seconds."""
    src = small_corpus_dir()
    user = work / "small"
    shutil.copytree(src / "home", user)
    env = agent_env(user, user / "no-cursor")
    home = work / "small-origin"
    t = time.perf_counter()
    with origin.open_store(home) as s:
        origin.sync(s, env=env, home=user)
    return home, env, time.perf_counter() - t


def table(rows: list[tuple[str, str]]) -> None:
    """Print the figures as one Markdown table."""
    width = max(len(r[0]) for r in rows)
    print()
    print(f"| {'figure':{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name:{width}} | {value} |")


def corpus_rows(sizes: dict, report: dict, times: dict, events: int, wall: float) -> list[tuple[str, str]]:
    """Return the corpus row and one ingest row per agent."""
    raw = sum(v["raw"] for v in sizes.values())
    files = sum(v["files"] for v in sizes.values())
    parts = []
    for source, v in sizes.items():
        part = f"{adapters.ADAPTERS[source].display} {v['raw'] / 1e6:.0f} MB"
        if v["zst_raw"]:
            part += f" ({v['zst_raw'] / 1e6:.0f} MB of it .zst, {v['zst_disk'] / 1e6:.0f} MB on disk)"
        parts.append(part)
    rows = [("corpus", f"{raw / 1e6:.0f} MB raw: {', '.join(parts)}; {files} files, {events} events"),
            ("initial ingest", f"{raw / 1e6 / wall:.1f} MB/s raw, {events / wall:,.0f} events/s ({wall:.1f} s)")]
    for source, v in sizes.items():
        n = report["sources"].get(source, {}).get("events_added", 0)
        secs = times.get(source)
        rate = f"{v['raw'] / 1e6 / secs:.1f} MB/s, {n / secs:,.0f} events/s ({secs:.1f} s)" if secs else "not synced"
        rows.append((f"ingest: {adapters.ADAPTERS[source].display}",
                     f"{v['raw'] / 1e6:.0f} MB raw, {v['files']} files, {n} events: {rate}"))
    return rows


def search_rows(store: origin.Store) -> list[tuple[str, str]]:
    """The search figures: the query set with every word required (--strict) and by default
    (then partial matches and replies), and the relaxed questions."""
    rows = []
    for strict, label in ((True, "search, every word (--strict)"), (False, "search, default")):
        found, selective = bench_search(store, strict=strict)
        rows += [(f"{label}: {name}", f"p50 {p50:.1f} ms, p95 {p95:.1f} ms ({n} hits)") for name, p50, p95, n in found]
        rows.append((f"{label}: p95 over the selective set", f"{pct(selective, 95):.1f} ms"))
    p50, p95, partial = bench_questions(store)
    rows.append(("relaxed 5-word questions (20, 10 events each)",
                 f"p50 {p50:.1f} ms, p95 {p95:.1f} ms; {partial:.0%} answered with partial hits"))
    return rows


def search_docs(store: origin.Store, rows: list[tuple[str, str]]) -> None:
    """Write the search figures into docs/performance.md."""
    events = store.conn.execute("SELECT count(*) FROM event").fetchone()[0]
    caption = (f"Search on a store of {events:,} events (the mixed corpus topped up with short Claude Code "
               f"sessions); {time.strftime('%Y-%m-%d')}, {machine_row()}, load average "
               f"{os.getloadavg()[0]:.1f} at the end.")
    width = max(len(r[0]) for r in rows)
    lines = [caption, "", f"| {'figure':{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name:{width}} | {value} |" for name, value in rows]
    write_docs("\n".join(lines) + "\n", "search", "Search speed")


def machine_row() -> str:
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"


def main() -> None:
    startup_budget("--docs" in sys.argv or os.environ.get("BENCH_DOCS") == "1")
    mb = int(os.environ.get("BENCH_MB", "200"))
    src = corpus_dir(mb)
    work = Path(tempfile.mkdtemp(prefix="origin-bench-run-"))
    try:
        # Work on a copy so appends do not change the cached corpus; copies
        # keep the mtimes, so the logs are as settled as the originals.
        user, cursor = work / "user", work / "cursor" / "User"
        shutil.copytree(src / "home", user)
        shutil.copytree(src / "cursor", work / "cursor")
        for var in AGENT_VARS:
            os.environ.pop(var, None)
        os.environ["ORIGIN_CURSOR_USER_DIR"] = str(cursor)  # the MCP server and its syncs find Cursor by it
        env = agent_env(user, cursor)
        sizes = corpus_sizes(user, cursor)
        raw = sum(v["raw"] for v in sizes.values())
        # Each round is a first sync into a new store, then L on its text:
        # other work on the machine slows both alike only when they run
        # close together, so BENCH_ROUNDS > 1 repeats the pair and the
        # median ratio is the figure.  CPU seconds (all threads) do not
        # depend on that load, so they are printed beside the times.
        rounds = []
        for i in range(max(1, int(os.environ.get("BENCH_ROUNDS", "1")))):
            home = work / f"home{i}"
            load = os.getloadavg()[0]
            started = origin.now_ms()
            wall, rss_kb, report = run_sync(home, env)
            with origin.open_store(home) as s:
                limit = fts_limit(s, raw)
            rounds.append({"wall": wall, "cpu": report["cpu_s"], "limit": limit, "started": started,
                           "load": (load, os.getloadavg()[0]), "rss": rss_kb, "report": report})
        mid = sorted(rounds, key=lambda r: raw / 1e6 / r["wall"] / r["limit"][1])[len(rounds) // 2]
        wall, started, rss_kb, report = mid["wall"], mid["started"], mid["rss"], mid["report"]
        l_text, l_raw, l_wall, l_cpu = mid["limit"]
        home = work / f"home{rounds.index(mid)}"
        times = per_source_times(home, started)
        events = report["events_added"]
        with origin.open_store(home) as s:
            st = origin.status(s)
            scan_s, scan_chars = scanner_cost(s)
            shares = text_shares(s.conn)
        rate = raw / 1e6 / wall
        ratios = ", ".join(f"{raw / 1e6 / r['wall'] / r['limit'][1]:.2f}" for r in rounds)
        ingest_rows = corpus_rows(sizes, report, times, events, wall) + [
            ("limit L (bare FTS5 trigram insert)", f"{l_text:.1f} MB/s of indexed text = {l_raw:.1f} MB/s of raw logs; "
                                                  f"ingest is {rate / l_raw:.2f} x L"
                                                  + (f" (median of {len(rounds)} rounds: {ratios})" if len(rounds) > 1 else "")),
            ("CPU seconds, all threads", f"first sync {mid['cpu']:.1f} s in {wall:.1f} s = {mid['cpu'] / wall:.0%} of one "
                                         f"core; L {l_cpu:.1f} s in {l_wall:.1f} s; load average "
                                         + "; ".join(f"{r['load'][0]:.1f} to {r['load'][1]:.1f}" for r in rounds)),
            ("indexed text, real logs (tests/fixtures)", shares_row(fixture_shares())),
            ("indexed text, this corpus", shares_row(shares)),
        ]
        if os.environ.get("BENCH_ONLY") == "ingest":
            table([("machine", machine_row())] + ingest_rows)
            return
        if os.environ.get("BENCH_ONLY") == "startup":
            table([("machine", machine_row())] + startup_rows(startup_times(home, query_set()[0][1], "proj3")))
            return
        nfiles = sum(v["files"] for v in sizes.values())
        noop = bench_noop(home, env)
        append_one = bench_append_one(home, env)
        floor = json_floor([p for files in source_files(user, cursor).values() for p in files if p.suffix == ".jsonl"])
        touched = bench_touched_db(home, env, cursor / "globalStorage" / "state.vscdb")
        # A log streams through in chunks, but a database is exported whole:
        # its own peak shows what the largest state.vscdb costs.
        _, cursor_rss_kb, _ = run_sync(work / "cursor-home", env, "--source", "cursor")
        small_files, small_first, small_noop, small_append, noop_push = bench_small_files(work)
        faults = quality(home)
        db_mb = st["db_bytes"] / 1e6
        index_mb = st["index_bytes"] / 1e6
        mirror_mb = sum(p.stat().st_size for p in (home / "raw").rglob("*") if p.is_file()) / 1e6
        # Search, timeline and MCP figures on a store topped up with short
        # Claude Code sessions to ~1,000 events per MB (2M at full scale).
        topup = topup_corpus_dir(mb) / "home"  # only read, so the cached copy serves
        topup_env = agent_env(topup, topup / "no-cursor")
        topup_wall, topup_rss_kb, topup_report = run_sync(home, topup_env, "--source", "claude-code")
        topup_mb = sum(p.stat().st_size for p in (topup / ".claude").rglob("*.jsonl")) / 1e6
        with origin.open_store(home) as s:
            search_events = s.conn.execute("SELECT count(*) FROM event").fetchone()[0]
            messages = s.conn.execute("SELECT count(*) FROM event WHERE kind = 'message'").fetchone()[0]
            searches = search_rows(s)
            common = query_set()[-1][1]
            share = len(origin.match_events(s, [common], ("message",), cols="e.seq")) / max(1, messages)
            t = time.perf_counter()
            origin.timeline(s, since=origin.parse_when("2026-09-01"), until=origin.parse_when("2026-09-08"))
            tl_ms = (time.perf_counter() - t) * 1000
        if os.environ.get("BENCH_KEEP"):  # the search store, kept for bench_hub_mcp.py's BENCH_STORE
            keep = Path(os.environ["BENCH_KEEP"])
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(home, keep)
        if os.environ.get("BENCH_ONLY") == "admin":
            table([("machine", machine_row()), ("search store", f"{search_events:,} events")]
                  + admin_rows(bench_admin(home)))
            return
        mcp = bench_mcp(home, user, n=100, query=query_set()[3][1])
        startup = startup_times(home, query_set()[0][1], "proj3")
        rows = [("machine", machine_row())]
        rows += ingest_rows
        rows += [
            ("parse errors / unknown records", ", ".join(f"{adapters.ADAPTERS[k].display} {e}/{u}"
                                                         for k, (e, u) in sorted(faults.items()))),
            ("json.loads floor (plain JSONL)", f"{floor:.0f} MB/s"),
            ("secret scanner", f"{scan_s:.2f} s over {scan_chars / 1e6:.0f} M characters of event text = "
                               f"{scan_s / wall:.1%} of the initial ingest"),
            ("peak RSS of the sync process", f"{rss_kb / 1024:.0f} MB"),
            (f"peak RSS, Cursor alone ({sizes['cursor']['raw'] / 1e6:.0f} MB of state.vscdb)",
             f"{cursor_rss_kb / 1024:.0f} MB"),
            (f"no-op re-sync ({nfiles} files)", f"{noop:.0f} ms"),
            ("append one line, re-sync", f"{append_one:.0f} ms"),
            ("re-sync, state.vscdb rewritten, no new chat", f"{touched:.0f} ms"),
            (f"no-op re-sync ({small_files:,} small files)", f"{small_noop:.0f} ms (first sync {small_first:.1f} s)"),
            (f"append one line, re-sync ({small_files:,} small files)", f"{small_append:.0f} ms"),
            *noop_push_rows(noop_push),
            ("store size", f"{db_mb:.0f} MB db + {index_mb:.0f} MB index + {mirror_mb:.0f} MB mirrors per "
                           f"{raw / 1e9:.2f} GB of logs ({db_mb / (raw / 1e9):.0f} MB db and "
                           f"{index_mb / (raw / 1e9):.0f} MB index per GB)"),
            ("search store (mixed corpus + short Claude Code sessions)",
             f"{search_events:,} events, {messages:,} of them messages; the top-up ({topup_mb:.0f} MB, "
             f"{topup_report['events_added']:,} events) ingested at {topup_mb / topup_wall:.1f} MB/s, "
             f"{topup_report['events_added'] / topup_wall:,.0f} events/s, peak RSS {topup_rss_kb / 1024:.0f} MB"),
            ("timeline, 7 days", f"{tl_ms:.1f} ms"),
            ("MCP over stdio: get", f"p50 {mcp['get_p50_ms']:.1f} ms, p95 {mcp['get_p95_ms']:.1f} ms"),
            ("MCP over stdio: search (2-term AND)", f"p50 {mcp['search_p50_ms']:.1f} ms, p95 {mcp['search_p95_ms']:.1f} ms"),
        ]
        rows += searches
        if "--docs" in sys.argv or os.environ.get("BENCH_DOCS") == "1":
            with origin.open_store(home) as s:
                search_docs(s, searches)
            noop_push_docs(noop_push)
        rows.append(("common term's share of messages", f"{share:.0%}"))
        rows += startup_rows(startup)
        rows += admin_rows(bench_admin(home))
        table(rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--startup"]:  # the start-up budget alone, on a small store
        startup_budget("--docs" in sys.argv)
        sys.exit(0)
    if sys.argv[1:2] == ["--search"]:  # the search rows alone, on a kept store (BENCH_KEEP)
        with origin.open_store(Path(sys.argv[2])) as _s:
            _rows = search_rows(_s)
            table([("machine", machine_row())] + _rows)
            if "--docs" in sys.argv:
                search_docs(_s, _rows)
        sys.exit(0)
    if sys.argv[1:2] == ["--admin"]:  # the admin rows alone, on a kept store (BENCH_KEEP)
        with origin.open_store(Path(sys.argv[2])) as _s:
            _n = _s.conn.execute("SELECT count(*) FROM event").fetchone()[0]
        table([("machine", machine_row()), ("search store", f"{_n:,} events"),
               ("load average", f"{os.getloadavg()[0]:.1f}")] + admin_rows(bench_admin(Path(sys.argv[2]))))
    elif sys.argv[1:2] == ["--push"]:  # the no-op push figure alone, on the small archive
        for _var in AGENT_VARS:
            os.environ.pop(_var, None)
        _work = Path(tempfile.mkdtemp(prefix="origin-bench-push-"))
        try:
            _push = bench_noop_push(*small_store(_work)[:2])
            table([("machine", machine_row())] + noop_push_rows(_push))
            if "--docs" in sys.argv:
                noop_push_docs(_push)
        finally:
            shutil.rmtree(_work, ignore_errors=True)
    elif sys.argv[1:2] == ["--resyncs"]:
        _home, _reps, _mode = sys.argv[2:5]
        print(json.dumps(resync_times(Path(_home), dict(os.environ), int(_reps), _mode == "append")))
    else:
        random.seed(SEED)
        main()
