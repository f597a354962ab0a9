"""Reliability and safety: crashes, contention, odd files, hostile input, bad requests, egress.

The CI tier runs here by default; the ``soak`` marker runs the same checks
longer and wider (``make soak``).  Oracles never count with Origin's own
code: see tests/reliability_tools.py.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import adapters
import origin
from corpus import write_claude_corpus
from reliability_tools import (
    CRASH_EXIT, LABELS, ROOT, Reference, age_tree, claude_oracle, grow_claude_files, kill_after,
    lay_mixed_corpus, origin_argv, origin_env, reference_sync, run_sync, store_problems, sync_proc,
    table_fingerprint,
)

TOOLS = Path(__file__).with_name("reliability_tools.py")


###############################################################################
# R1: crash sweep #############################################################
###############################################################################


def labelled_points(ref: Reference) -> list[str]:
    """Crash points: each label's first three hits, its first hit inside every source, its last."""
    by_label: dict[str, list[str]] = {}
    for label, source, _rel in ref.hits:
        by_label.setdefault(label, []).append(source)
    points = []
    for label in LABELS:
        sources = by_label.get(label, [])
        chosen = {1, 2, 3, len(sources)} | {sources.index(s) + 1 for s in set(sources)}
        points += [f"{label}:{n}" for n in sorted(chosen) if 1 <= n <= len(sources)]
    return points


def test_sync_killed_at_every_labelled_step_of_a_mixed_corpus_then_rerun_loses_and_duplicates_nothing(tmp_path):
    home = tmp_path / "home"
    extra, claude = lay_mixed_corpus(home, claude_files=4, claude_turns=8, seed=21)
    ref = reference_sync(home, extra, tmp_path / "reference")
    hit_labels = Counter(label for label, _, _ in ref.hits)
    assert set(hit_labels) == set(LABELS), f"labels never reached by a sync: {set(LABELS) - set(hit_labels)}"
    assert set(adapters.ADAPTERS) <= {s for _, s, _ in ref.hits}, "every source is crashed inside"
    points = labelled_points(ref)
    assert len(points) >= 5 * 4

    def one(i_point):
        i, point = i_point
        oh = tmp_path / f"o{i}"
        p = sync_proc(home, oh, extra, crash=point)
        _, err = p.communicate(timeout=120)
        if p.returncode != CRASH_EXIT:
            return point, [f"expected a crash, exited {p.returncode}: {err.decode(errors='replace')[-500:]}"]
        run_sync(home, oh, extra)
        problems = store_problems(oh, claude_files=claude, reference=ref)
        shutil.rmtree(oh)
        return point, problems

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = {point: problems for point, problems in pool.map(one, enumerate(points)) if problems}
    print(f"labelled crash points: {len(points)} ({dict(hit_labels)} hits in a clean sync)")
    assert failures == {}


def _random_kill_lane(lane: Path, kills: int, seed: int) -> dict:
    """Kill fresh syncs of a mixed corpus at spread-out moments; check each store after a rerun."""
    home = lane / "home"
    extra, claude = lay_mixed_corpus(home, claude_files=12, claude_turns=(20, 60), seed=seed)
    ref = reference_sync(home, extra, lane / "reference")
    times = []
    for k in range(2):
        t0 = time.monotonic()
        run_sync(home, lane / f"calibration{k}", extra)
        times.append(time.monotonic() - t0)
    full = min(times)
    rng = random.Random(seed)
    where: Counter = Counter()
    failures = []
    for i in range(kills):
        oh = lane / f"o{i}"
        p = sync_proc(home, oh, extra)
        at = kill_after(p, rng.uniform(0.05, 0.65) * full, oh)
        where[at] += 1
        if i % 3 == 1:
            grow_claude_files(claude, rng)  # the files grow between the kill and the rerun
        run_sync(home, oh, extra)
        problems = store_problems(oh, claude_files=claude, reference=ref)
        if problems:
            failures.append((i, at, problems))
        shutil.rmtree(oh)
    return {"where": where, "failures": failures, "full_sync_s": full}


def _random_kills(tmp_path: Path, kills: int) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        lanes = list(pool.map(lambda k: _random_kill_lane(tmp_path / f"lane{k}", kills // 2, 100 + k), (0, 1)))
    where = sum((lane["where"] for lane in lanes), Counter())
    print(f"random kills: {sum(where.values())} {dict(where)}; full sync "
          f"{[round(lane['full_sync_s'], 2) for lane in lanes]} s")
    assert [f for lane in lanes for f in lane["failures"]] == []
    assert sum(where.values()) == kills
    assert where["mid-sync"] > kills // 2, f"most kills must land mid-sync: {dict(where)}"


def test_sync_killed_with_sigkill_at_50_random_moments_then_rerun_loses_and_duplicates_nothing(tmp_path):
    _random_kills(tmp_path, 50)


@pytest.mark.soak
def test_soak_sync_killed_with_sigkill_at_200_random_moments_then_rerun_loses_and_duplicates_nothing(tmp_path):
    _random_kills(tmp_path, 200)


###############################################################################
# R5: contention ##############################################################
###############################################################################

ROLES = ("syncer", "syncer", "searcher", "rememberer", "forgetter", "cli")


def _appender(files: list[Path], stop: threading.Event, seed: int) -> int:
    """Append generated turns to several files, each line in two writes (a torn line for a moment)."""
    rng = random.Random(seed)
    written = 0
    while not stop.is_set():
        f = rng.choice(files)
        for line in claude_lines_for(f, rng):
            data = (line + "\n").encode()
            cut = rng.randrange(1, len(data))
            with open(f, "ab") as fh:
                fh.write(data[:cut])
                fh.flush()
                time.sleep(0.001)
                fh.write(data[cut:])
            written += 1
        time.sleep(0.01)
    return written


def claude_lines_for(f: Path, rng: random.Random) -> list[str]:
    from corpus import claude_session_lines
    from reliability_tools import origin_dt

    return claude_session_lines(rng, f.stem, "/home/dev/src/busy", origin_dt(), 1)


def _contention(tmp_path: Path, seconds: float, *, deferred: bool) -> tuple[list[str], dict]:
    """Run the six workers and the appender; return what the checks found wrong, and figures."""
    home = tmp_path / "home"
    oh = tmp_path / "origin"
    files = write_claude_corpus(home / ".claude", files=12, turns=(5, 15), seed=31)
    run_sync(home, oh)
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        appended = pool.submit(_appender, files[:6], stop, 32)
        procs = []
        for i, role in enumerate(ROLES):
            out = tmp_path / f"worker{i}.json"
            argv = [sys.executable, str(TOOLS), "worker", role, str(oh), str(home), str(seconds), str(out)]
            if deferred and role in ("rememberer", "forgetter"):
                argv.append("--deferred")
            procs.append((subprocess.Popen(argv, env=origin_env(home, oh), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE), out))
        try:
            outs = [(p.communicate(timeout=seconds + 120), out) for p, out in procs]
        finally:
            stop.set()
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
        lines = appended.result()
    bad: list[str] = []
    results = []
    for (stdout, stderr), out in outs:
        if not out.exists():
            bad.append(f"a worker died: {stderr.decode(errors='replace')[-1000:]}")
            continue
        results.append(json.loads(out.read_text()))
    locked = [msg for r in results for msg in r["locked"]]
    if locked:
        bad.append(f"{len(locked)} 'database is locked' errors, first: {locked[0]}")
    errors = [msg for r in results for msg in r["errors"]]
    if errors:
        bad.append(f"{len(errors)} unexpected errors, first: {errors[:3]}")
    run_sync(home, oh)
    with origin.open_store(oh) as s:
        ids = {r[0] for r in s.conn.execute("SELECT id FROM event")}
        if ids != claude_oracle(files):
            bad.append(f"events differ from the oracle: {len(claude_oracle(files) - ids)} lost, "
                       f"{len(ids - claude_oracle(files))} unexpected")
        tokens = {eid: token for r in results for eid, token in r["entries"]}
        forgotten = {e for r in results for e in r["forgotten_entries"]}
        excluded = {e for r in results for e in r["excluded_events"]}
        for eid in forgotten:
            try:
                origin.get_entry(s, eid)
                bad.append(f"forgotten entry {eid} is shown by get")
            except origin.Forgotten:
                pass
            token = tokens.get(eid)
            if token and any(e["id"] == eid for e in origin.search_entries(s, token, history=True, limit=200)):
                bad.append(f"forgotten entry {eid} is found by search")
        for evid in excluded:
            try:
                origin.get_event(s, evid)
                bad.append(f"excluded event {evid} is shown by get")
            except origin.Forgotten:
                pass
            text = s.conn.execute("SELECT text FROM event WHERE id = ?", (evid,)).fetchone()[0]
            words = " ".join([w for w in text.split() if len(w) >= 4 and w.isalnum()][:3])
            if words and any(h["id"] == evid for h in origin.search_events(s, words, limit=200, include_tools=True)):
                bad.append(f"excluded event {evid} is found by search")
        citing = s.conn.execute(
            "SELECT count(*) FROM entry_source es JOIN excluded_event x ON x.event_id = es.event_id "
            "WHERE NOT EXISTS (SELECT 1 FROM forgotten_entry f WHERE f.entry_id = es.entry_id)").fetchone()[0]
        if citing:
            bad.append(f"{citing} visible entries cite a forgotten event")
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    figures = {"ops": {f"{r['role']}": r["ops"] for r in results}, "appended_lines": lines,
               "refused": sum(r["refused"] for r in results), "forgotten": len(forgotten), "excluded": len(excluded),
               "locked": len(locked)}
    return bad, figures


def test_six_processes_sync_search_remember_and_forget_while_logs_grow_without_lock_errors_or_resurrection(tmp_path):
    bad, figures = _contention(tmp_path, 12, deferred=False)
    print(f"contention: {figures}")
    assert bad == []
    ops = figures["ops"]
    assert all(n > 0 for n in ops.values()), ops
    assert figures["forgotten"] > 0 and figures["excluded"] > 0 and figures["appended_lines"] > 50


def test_the_contention_check_sees_a_deferred_read_then_write_transaction_fail(tmp_path):
    bad, figures = _contention(tmp_path, 6, deferred=True)
    print(f"contention with deferred transactions: {figures}")
    assert any("database is locked" in b for b in bad), bad


@pytest.mark.soak
def test_soak_six_processes_for_three_minutes_without_lock_errors_or_resurrection(tmp_path):
    bad, figures = _contention(tmp_path, 180, deferred=False)
    print(f"contention: {figures}")
    assert bad == []
