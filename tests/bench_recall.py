"""Benchmark: how often search finds the answer to a question people ask.

Run with ``python tests/bench_recall.py`` (``make bench`` runs it with
``--docs``).  A fresh store gets the recall corpus of tests/recall_corpus.py
(about fifty conversations over six projects, some in Chinese), the real
logs of tests/fixtures and, as distractors, the first ``RECALL_NOISE_MB``
megabytes (default 20) of the synthetic bench corpus of tests/bench.py,
all synced by ``origin sync`` in a child process.  Each question of
tests/recall_questions.json names the events that answer it; the bench
asks ``origin.search`` and reads where the first of them ranks among the
events it returns.

Beside Origin stands a floor built in the same run over the same visible
message events: a plain SQLite FTS5 table (``porter unicode61``) searched
for the question's content words OR-ed together, ranked by ``bm25()``.
Any search worth having should not do worse than that.  Figures per
question: hit@1, hit@5 and hit@10 (an answering event among the first k),
no result (nothing returned), MRR (the mean of 1/rank of the first answering
event, 0 when it is not in the first 10); per slice: every question, each
kind, paraphrased or not (a paraphrase shares no word with its answer),
corpus or fixtures.  With ``--docs`` (or ``BENCH_DOCS=1``) the table is
written into docs/performance.md between its recall markers.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import origin  # noqa: E402
import recall_corpus as rc  # noqa: E402
from bench import DOCS, agent_env, corpus_dir, pct, run_sync, write_docs  # noqa: E402

#: How many results a question gets, and the cut-offs of hit@k.
LIMIT = 10
CUTS = (1, 5, 10)


###############################################################################
# The store ####################################################################
###############################################################################


def lay_out(user: Path, noise_mb: int) -> Path:
    """Fill user (a HOME of the agents) with the noise, the recall corpus and
    the fixtures; return the Cursor User folder."""
    if noise_mb > 0:
        # Only the JSONL agents: the fixtures bring their own Cursor databases.
        shutil.copytree(corpus_dir(noise_mb) / "home", user, dirs_exist_ok=True)
    rc.write_recall_corpus(user)
    return rc.lay_out_fixtures(user)


def visible_messages(db: sqlite3.Connection) -> list[tuple[int, str, str]]:
    """Return (seq, id, text) of every message event not excluded by a forget."""
    return db.execute("SELECT e.seq, e.id, e.text FROM event e WHERE e.kind = 'message' "
                      "AND NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id) "
                      "ORDER BY e.seq").fetchall()


###############################################################################
# The two searches #############################################################
###############################################################################


class Floor:
    """Plain FTS5 over the visible messages: content words OR-ed, bm25 order."""

    def __init__(self, messages: list[tuple[int, str, str]]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE f USING fts5(text, tokenize='porter unicode61')")
        self.conn.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", ((s, t) for s, _, t in messages))
        self.ids = {s: i for s, i, _ in messages}

    def search(self, question: str) -> list[str]:
        terms = rc.query_terms(question)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self.conn.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, LIMIT))
        return [self.ids[r[0]] for r in rows]


def origin_search(store: origin.Store, question: str, **kw) -> tuple[list[str] | None, float]:
    """Return the ids of the events Origin finds (None on a UsageError) and
    the milliseconds the call took."""
    t = time.perf_counter()
    try:
        if kw.pop("ask", False):
            events = origin.ask(store, question, limit=LIMIT)["events"]
        else:
            events = origin.search(store, question, scope="all", limit=LIMIT, **kw)["events"]
    except origin.UsageError:
        return None, (time.perf_counter() - t) * 1000
    return [e["id"] for e in events], (time.perf_counter() - t) * 1000


def rank(found: list[str] | None, answers: dict[str, str]) -> int | None:
    """Return the 1-based rank of the first answering event, or None."""
    return next((i for i, eid in enumerate(found or [], 1) if eid in answers), None)


###############################################################################
# Figures ######################################################################
###############################################################################


def figures(rows: list[dict], engine: str) -> dict:
    """Return hit@k, MRR and the no-result rate of one engine over rows."""
    n = max(1, len(rows))
    ranks = [r[engine]["rank"] for r in rows]
    out = {f"hit@{k}": sum(1 for x in ranks if x is not None and x <= k) / n for k in CUTS}
    out["mrr"] = sum(1 / x for x in ranks if x is not None) / n
    out["none"] = sum(1 for r in rows if not r[engine]["found"]) / n
    return out


def slices(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """Return the question slices the table shows, every question first."""
    out = [("all", rows),
           ("paraphrase", [r for r in rows if r["paraphrase"]]),
           ("not paraphrase", [r for r in rows if not r["paraphrase"]])]
    for kind in sorted({r["kind"] for r in rows}):
        out.append((f"kind: {kind}", [r for r in rows if r["kind"] == kind]))
    out.append(("recall corpus", [r for r in rows if r["set"] != "fixtures"]))
    out.append(("tests/fixtures", [r for r in rows if r["set"] == "fixtures"]))
    return [(name, part) for name, part in out if part]


def _p(x: float) -> str:
    return f"{x:.0%}"


def markdown(rows: list[dict], caption: str, notes: list[str]) -> str:
    """Return the caption, the side-by-side table and the notes as Markdown."""
    head = ["questions", "n", "Origin hit@1", "hit@5", "hit@10", "MRR", "no result",
            "floor hit@1", "hit@5", "hit@10", "MRR", "no result", "`ask` hit@10", "strict hit@10"]
    lines = [caption, "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for name, part in slices(rows):
        o, f = figures(part, "origin"), figures(part, "floor")
        cells = [name, str(len(part))]
        for fig in (o, f):
            cells += [_p(fig["hit@1"]), _p(fig["hit@5"]), _p(fig["hit@10"]), f"{fig['mrr']:.2f}", _p(fig["none"])]
        cells += [_p(figures(part, "ask")["hit@10"]), _p(figures(part, "strict")["hit@10"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


###############################################################################
# Run ##########################################################################
###############################################################################


#: How many exact phrases ``needles`` looks up, and how many words each has.
NEEDLES, NEEDLE_WORDS = 200, 5


def needles(home: Path, messages: list[tuple[int, str, str]]) -> tuple[int, int, int]:
    """Look up NEEDLES phrases that occur in exactly one visible message, quoted:
    return how many there were, how many came first, and how many came first
    with --strict too.  Partial matches must never push an exact phrase down."""
    picked = []
    for _seq, event_id, text in messages[::7]:
        words = text.split()
        if len(words) >= NEEDLE_WORDS + 2 and '"' not in text:
            picked.append((event_id, " ".join(words[1:1 + NEEDLE_WORDS])))
    first = strict_first = tried = 0
    with origin.open_store(home) as store:
        for event_id, phrase in picked:
            if tried == NEEDLES:
                break
            unique = store.conn.execute(
                "SELECT count(*) FROM event e WHERE e.kind = 'message' AND instr(lower(e.text), lower(?)) AND NOT "
                "EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)", (phrase,)).fetchone()[0] == 1
            if not unique:
                continue
            tried += 1
            for strict in (False, True):
                found = origin.search(store, f'"{phrase}"', scope="events", limit=LIMIT, strict=strict)["events"]
                hit = bool(found) and found[0]["id"] == event_id
                first += hit and not strict
                strict_first += hit and strict
    return tried, first, strict_first


def measure(home: Path, questions: list[dict], answers: list[dict[str, str]],
            floor: Floor) -> tuple[list[dict], list[float]]:
    """Ask every question of both engines; return one row per question and
    Origin's per-question milliseconds."""
    rows, times = [], []
    with origin.open_store(home) as store:
        origin_search(store, questions[0]["q"])  # warm up: first open of the index
        for item, ans in zip(questions, answers):
            found, ms = origin_search(store, item["q"])
            times.append(ms)
            row = {"q": item["q"], "kind": item["kind"], "paraphrase": item["paraphrase"],
                   "set": item.get("set", "corpus"),
                   "origin": {"found": found or [], "rank": rank(found, ans), "usage_error": found is None}}
            hits = floor.search(item["q"])
            row["floor"] = {"found": hits, "rank": rank(hits, ans)}
            for engine, kw in (("strict", {"strict": True}), ("ask", {"ask": True})):
                found, _ = origin_search(store, item["q"], **kw)
                row[engine] = {"found": found or [], "rank": rank(found, ans)}
            rows.append(row)
    return rows, times


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    docs = "--docs" in argv or os.environ.get("BENCH_DOCS") == "1"
    noise_mb = int(os.environ.get("RECALL_NOISE_MB", "20"))
    questions = rc.load_questions()
    work = Path(tempfile.mkdtemp(prefix="origin-bench-recall-"))
    try:
        user, home = work / "user", work / "home"
        cursor = lay_out(user, noise_mb)
        wall, _, report = run_sync(home, agent_env(user, cursor))
        db = rc.open_db(home)
        try:
            answers = rc.resolve_evidence(db, questions)
            messages = visible_messages(db)
            events = db.execute("SELECT count(*) FROM event").fetchone()[0]
        finally:
            db.close()
        floor = Floor(messages)
        rows, times = measure(home, questions, answers, floor)
        planted = needles(home, messages)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    origin10, floor10 = figures(rows, "origin")["hit@10"], figures(rows, "floor")["hit@10"]
    usage = sum(1 for r in rows if r["origin"]["usage_error"])
    n = len(rows)
    caption = (f"Search recall on {n} questions ({sum(r['paraphrase'] for r in rows)} paraphrased, "
               f"{sum(1 for r in rows if rc.has_cjk(r['q']))} in Chinese or Japanese, "
               f"{sum(1 for r in rows if r['set'] == 'fixtures')} about tests/fixtures) over {events:,} events, "
               f"{len(messages):,} of them visible messages (recall corpus, fixtures and {noise_mb} MB of the "
               f"synthetic bench corpus as distractors); {dt.date.today().isoformat()}, {os.cpu_count()} CPUs, "
               f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}.")
    notes = [
        f"Origin: `origin.search(store, q, scope=\"all\", limit={LIMIT})`, the events it returns in order; "
        f"floor: SQLite FTS5 `porter unicode61` over the same visible messages, the question's content words "
        f"OR-ed, `bm25()` order, top {LIMIT}.",
        f"Origin hit@10 / floor hit@10 = {origin10 / floor10:.2f}" if floor10 else
        "Origin hit@10 / floor hit@10: the floor found nothing",
        f"Origin search latency per question: p50 {pct(times, 50):.1f} ms, p95 {pct(times, 95):.1f} ms",
        f"questions Origin refused with a UsageError (counted as no result): {usage}",
        "`ask`: `origin.ask(store, q, limit=10)`, the question read for a project and a time (what the MCP "
        "`search` tool does with a plain question); strict: `strict=True`, every word must match, as before "
        "partial matches existed",
        f"exact phrases ({NEEDLE_WORDS} words, each in one message only) found first: {planted[1]} of "
        f"{planted[0]} ({planted[2]} with strict)",
        f"sync of the store: {report['events_added']:,} events in {wall:.1f} s",
    ]
    text = markdown(rows, caption, notes)
    print(text)
    if docs:
        write_docs(text, "recall", "Search recall")
        print(f"written to {DOCS.relative_to(ROOT)}", file=sys.stderr)
    print(f"bench_recall took {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
