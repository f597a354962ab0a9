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
from helpers import LAYOUTS, LOCALPUSH
from reliability_tools import (
    CRASH_EXIT, LABELS, ROOT, Reference, age_tree, claude_oracle, grow_claude_files, kill_mid_sync,
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


def _random_kill_lane(lane: Path, target: int, seed: int) -> dict:
    """Kill fresh syncs of a mixed corpus mid-sync until target kills landed there; check each store.

    The sweep adapts to the machine instead of assuming its speed: each kill
    waits for the sync to open the store, then a random part of a window
    that shrinks whenever a sync finished before its kill and grows back
    while kills land.  It stops at target mid-sync kills, or at three times
    that many attempts, or after KILL_LANE_BUDGET_S; every store is checked
    after its rerun whatever the kill hit.
    """
    home = lane / "home"
    extra, claude = lay_mixed_corpus(home, claude_files=12, claude_turns=(20, 60), seed=seed)
    ref = reference_sync(home, extra, lane / "reference")
    t0 = time.monotonic()
    run_sync(home, lane / "calibration", extra)
    window = time.monotonic() - t0  # a first guess; the sweep corrects it
    rng = random.Random(seed)
    where: Counter = Counter()
    failures = []
    started = time.monotonic()
    attempts = 0
    while where["mid-sync"] < target and attempts < 3 * target and time.monotonic() - started < KILL_LANE_BUDGET_S:
        oh = lane / f"o{attempts}"
        p = sync_proc(home, oh, extra)
        at = kill_mid_sync(p, rng.uniform(0.0, 0.9) * window, oh)
        where[at] += 1
        window = window / 2 if at == "finished" else min(window * 1.1, 60.0)
        if attempts % 3 == 1:
            grow_claude_files(claude, rng)  # the files grow between the kill and the rerun
        run_sync(home, oh, extra)
        problems = store_problems(oh, claude_files=claude, reference=ref)
        if problems:
            failures.append((attempts, at, problems))
        shutil.rmtree(oh)
        attempts += 1
    return {"where": where, "failures": failures, "attempts": attempts, "window_s": window}


#: Wall-clock bound of one lane of the kill sweep, a safety net only: the
#: sweep normally stops at its target number of mid-sync kills.
KILL_LANE_BUDGET_S = 900


def _random_kills(tmp_path: Path, kills: int) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        lanes = list(pool.map(lambda k: _random_kill_lane(tmp_path / f"lane{k}", kills // 2, 100 + k), (0, 1)))
    where = sum((lane["where"] for lane in lanes), Counter())
    print(f"random kills: {sum(where.values())} attempts {dict(where)}; final windows "
          f"{[round(lane['window_s'], 2) for lane in lanes]} s")
    # Invariant: whatever a kill hit, the rerun loses and duplicates nothing.
    assert [f for lane in lanes for f in lane["failures"]] == []
    assert sum(lane["attempts"] for lane in lanes) == sum(where.values()) <= 3 * kills
    # The sweep only counts as one if kills really landed inside syncs; it
    # keeps trying until they do, so this does not depend on the machine.
    assert where["mid-sync"] >= min(kills, max(2, sum(where.values()) // 3)), dict(where)


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
    figures = {"ops": {f"{i}-{r['role']}": r["ops"] for i, r in enumerate(results)}, "appended_lines": lines,
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


###############################################################################
# R4 and kin: rewrites and odd files ##########################################
###############################################################################


def _sync(home: Path, oh: Path, extra: dict | None = None) -> origin.SyncReport:
    with origin.open_store(oh) as s:
        return origin.sync(s, env={"HOME": str(home), **(extra or {})}, home=home)


def _rows(oh: Path) -> list[dict]:
    conn = sqlite3.connect(oh / origin.DB_NAME)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM raw_file ORDER BY path, generation")]
    finally:
        conn.close()


def _event_ids(oh: Path) -> set[str]:
    conn = sqlite3.connect(oh / origin.DB_NAME)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM event")}
    finally:
        conn.close()


def _bump_mtime(path: Path, seconds: float = 10) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + int(seconds * 1e9)))


def test_same_length_edits_are_detected_in_the_head_and_tail_windows_and_missed_between_them(user_home, tmp_path):
    """A same-length edit opens a new generation only within HASH_WINDOW of either end (measured limit)."""
    f = write_claude_corpus(user_home / ".claude", files=1, turns=12, seed=41)[0]
    original = f.read_bytes()
    w = origin.HASH_WINDOW
    assert len(original) > 6 * w
    letters = [i for i, b in enumerate(original) if 0x61 <= b <= 0x7a]
    rng = random.Random(41)
    zones = {
        "head": [i for i in letters if i < w],
        "middle": [i for i in letters if w <= i < len(original) - w],
        "tail": [i for i in letters if i >= len(original) - w],
    }
    detected: dict[str, list[bool]] = {}
    for zone, positions in zones.items():
        for k, pos in enumerate(rng.sample(positions, 6)):
            oh = tmp_path / f"{zone}{k}"
            f.write_bytes(original)
            _sync(user_home, oh)
            edited = bytearray(original)
            edited[pos] = ord("q") if edited[pos] != ord("q") else ord("z")
            f.write_bytes(bytes(edited))
            _bump_mtime(f)
            _sync(user_home, oh)
            rows = _rows(oh)
            detected.setdefault(zone, []).append(len(rows) == 2)
            if len(rows) == 2:
                assert (oh / rows[1]["mirror"]).read_bytes() == bytes(edited)
            else:
                # Not seen: the archive keeps the bytes it had, and they no longer match the source.
                assert (oh / rows[0]["mirror"]).read_bytes() == original != f.read_bytes()
            assert (oh / rows[0]["mirror"]).read_bytes() == original
    print(f"same-length edits detected: { {z: sum(d) for z, d in detected.items()} } of 6 each")
    assert detected == {"head": [True] * 6, "middle": [False] * 6, "tail": [True] * 6}


def _truncate_mid_line(f: Path, other: Path) -> bool:
    data = f.read_bytes()
    cut = data.index(b"\n", len(data) // 2) - 10
    f.write_bytes(data[:cut])
    return True


def _truncate_to_zero(f: Path, other: Path) -> bool:
    f.write_bytes(b"")
    return True


def _replace_with_another(f: Path, other: Path) -> bool:
    tmp = f.with_suffix(".new")
    tmp.write_bytes(other.read_bytes())
    os.replace(tmp, f)
    return True


def _replace_with_longer_copy(f: Path, other: Path) -> bool:
    tmp = f.with_suffix(".new")
    tmp.write_bytes(f.read_bytes() + other.read_bytes())
    os.replace(tmp, f)
    return False


def _recreate_same_bytes(f: Path, other: Path) -> bool:
    data = f.read_bytes()
    f.unlink()
    f.write_bytes(data)
    return False


@pytest.mark.parametrize("change", [_truncate_mid_line, _truncate_to_zero, _replace_with_another,
                                    _replace_with_longer_copy, _recreate_same_bytes], ids=lambda c: c.__name__[1:])
def test_truncated_or_replaced_logs_open_a_generation_only_when_bytes_changed_and_keep_every_old_event(
        change, user_home, origin_home):
    f = write_claude_corpus(user_home / ".claude", files=1, turns=6, seed=42)[0]
    other = write_claude_corpus(user_home / "elsewhere", files=1, turns=4, seed=43)[0]
    before = f.read_bytes()
    ids_before = claude_oracle([f])
    _sync(user_home, origin_home)
    _bump_mtime(f, 0)
    new_generation = change(f, other)
    _bump_mtime(f, 5)
    report = _sync(user_home, origin_home)
    assert report.problems == []
    rows = _rows(origin_home)
    assert [r["generation"] for r in rows] == ([0, 1] if new_generation else [0])
    data = f.read_bytes()
    assert (origin_home / rows[-1]["mirror"]).read_bytes() == data[: data.rfind(b"\n") + 1]
    assert _event_ids(origin_home) == ids_before | _oracle_of_json_lines(f, user_home / "now.jsonl")
    # The file grows again after the change: the new lines land in the current generation.
    with open(f, "ab") as fh:
        if data and not data.endswith(b"\n"):
            fh.write(b"\n")
        fh.write(other.read_bytes().replace(b'"uuid": "', b'"uuid": "again-'))
    _bump_mtime(f, 10)
    _sync(user_home, origin_home)
    rows = _rows(origin_home)
    assert [r["generation"] for r in rows] == ([0, 1] if new_generation else [0])
    assert (origin_home / rows[-1]["mirror"]).read_bytes() == f.read_bytes()
    first = (origin_home / rows[0]["mirror"]).read_bytes()
    assert first == before if new_generation else first.startswith(before)
    assert _event_ids(origin_home) == ids_before | _oracle_of_json_lines(f, user_home / "now.jsonl")


def _oracle_of_json_lines(f: Path, scratch: Path) -> set[str]:
    """Oracle ids of the complete, well-formed lines of f (a cut line is not one)."""
    data = f.read_bytes()
    good = []
    for line in data[: data.rfind(b"\n") + 1].split(b"\n"):
        try:
            if isinstance(json.loads(line), dict):
                good.append(line)
        except ValueError:
            pass
    scratch.write_bytes(b"".join(g + b"\n" for g in good))
    return claude_oracle([scratch])


def test_a_zero_byte_log_is_archived_once_it_has_lines_without_a_new_generation(user_home, origin_home):
    f = write_claude_corpus(user_home / ".claude", files=1, turns=3, seed=44)[0]
    data = f.read_bytes()
    f.write_bytes(b"")
    assert _sync(user_home, origin_home).problems == []
    assert [(r["generation"], r["bytes_ingested"]) for r in _rows(origin_home)] == [(0, 0)]
    f.write_bytes(data)
    _bump_mtime(f)
    _sync(user_home, origin_home)
    rows = _rows(origin_home)
    assert [(r["generation"], r["bytes_ingested"]) for r in rows] == [(0, len(data))]
    assert _event_ids(origin_home) == claude_oracle([f])


def test_deleted_logs_keep_their_events_mirrors_and_original_lines(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=4, turns=3, seed=45, projects=2)
    ids = claude_oracle(files)
    _sync(user_home, origin_home)
    mirrors = {r["mirror"]: (origin_home / r["mirror"]).read_bytes() for r in _rows(origin_home)}
    files[0].unlink()
    shutil.rmtree(files[1].parent)
    report = _sync(user_home, origin_home)
    assert report.problems == [] and report.events_added == 0
    assert _event_ids(origin_home) == ids
    assert {m: (origin_home / m).read_bytes() for m in mirrors} == mirrors
    with origin.open_store(origin_home) as s:
        for evid in sorted(ids)[::5]:
            raw = origin.raw_sources(s, evid)[0]
            assert raw["raw"] and json.loads(raw["raw"])["uuid"] == evid.split(":", 1)[1].split("#")[0]
    shutil.rmtree(user_home / ".claude")
    assert _sync(user_home, origin_home).problems == []
    assert _event_ids(origin_home) == ids


def test_a_log_reached_through_symlinks_is_archived_once_and_a_symlink_loop_ends(user_home, origin_home, tmp_path):
    """Decided behaviour: a symlinked file or directory is followed, each real file is mirrored once."""
    files = write_claude_corpus(user_home / ".claude", files=2, turns=3, seed=46)
    projects = user_home / ".claude" / "projects"
    (projects / "-other").mkdir()
    os.symlink(files[0], projects / "-other" / files[0].name)  # the same log under a second name
    os.symlink(files[0].parent, projects / "-alias")  # the same folder under a second name
    os.symlink(projects, files[0].parent / "loop")  # a loop back to an ancestor
    outside = write_claude_corpus(tmp_path / "moved", files=1, turns=2, seed=47)
    os.symlink(outside[0].parent, projects / "-moved")  # a project kept on another disk
    p = subprocess.run(origin_argv("sync", "--json"), env=origin_env(user_home, origin_home),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert _event_ids(origin_home) == claude_oracle(files + outside)
    rows = _rows(origin_home)
    real = sorted(os.path.realpath(r["path"]) for r in rows)
    assert real == sorted(str(f.resolve()) for f in files + outside), "each real log is mirrored exactly once"


def test_a_symlinked_codex_sessions_folder_is_archived(user_home, origin_home, tmp_path):
    moved = tmp_path / "other-disk" / "23"
    moved.mkdir(parents=True)
    rollout = sorted(LOCALPUSH.glob("rollout-*.jsonl"))[0]
    shutil.copy(rollout, moved / rollout.name)
    month = user_home / ".codex" / "sessions" / "2026" / "02"
    month.mkdir(parents=True)
    os.symlink(moved, month / "23")
    os.symlink(user_home / ".codex" / "sessions", month / "loop")
    reference = tmp_path / "plain-home"
    (reference / ".codex" / "sessions" / "2026" / "02" / "23").mkdir(parents=True)
    shutil.copy(rollout, reference / ".codex" / "sessions" / "2026" / "02" / "23" / rollout.name)
    want = _sync(reference, tmp_path / "reference").events_added
    assert want > 0
    report = _sync(user_home, origin_home)
    assert report.events_added == want


def _without_dac_override() -> list[str]:
    """Command prefix that makes root subject to file permissions (tests run as root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test unreadable files as root"
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


def test_an_unreadable_log_is_reported_not_fatal_and_opens_no_generation(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=3, turns=3, seed=48)
    prefix = _without_dac_override()
    run_sync(user_home, origin_home)
    newcomer = files[0].parent / "unreadable.jsonl"
    newcomer.write_bytes(write_claude_corpus(user_home / "x", files=1, turns=2, seed=49)[0].read_bytes())
    os.chmod(newcomer, 0)
    with open(files[1], "ab") as fh:  # a known log grows, then cannot be read
        fh.write(write_claude_corpus(user_home / "y", files=1, turns=1, seed=50)[0].read_bytes())
    os.chmod(files[1], 0)
    try:
        for _ in range(2):
            p = subprocess.run(prefix + origin_argv("sync", "--json"), env=origin_env(user_home, origin_home),
                               capture_output=True, timeout=120)
            assert p.returncode == 0, p.stderr
            report = json.loads(p.stdout)
            assert sorted(x["path"] for x in report["problems"]) == sorted([str(files[1]), str(newcomer)])
            assert all("permission denied" in x["error"] for x in report["problems"])
    finally:
        os.chmod(files[1], 0o644)
        os.chmod(newcomer, 0o644)
    run_sync(user_home, origin_home)
    assert _event_ids(origin_home) == claude_oracle(files + [newcomer])
    assert [r["generation"] for r in _rows(origin_home)] == [0] * 4, "an unreadable moment is not a rewrite"


def test_a_fifo_or_a_folder_named_like_a_log_neither_stops_nor_hangs_the_sync(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=2, turns=3, seed=51)
    os.mkfifo(files[0].parent / "pipe.jsonl")
    (files[0].parent / "folder.jsonl").mkdir()
    rollouts = user_home / ".codex" / "sessions" / "2026" / "01" / "01"
    rollouts.mkdir(parents=True)
    os.mkfifo(rollouts / "rollout-2026-01-01T00-00-00-019b0000-0000-7000-8000-00000000000f.jsonl")
    report = run_sync(user_home, origin_home, timeout=60)
    assert report["problems"] == []
    assert _event_ids(origin_home) == claude_oracle(files)


def test_a_log_folder_removed_after_discovery_does_not_stop_the_sync(user_home, origin_home, monkeypatch):
    files = write_claude_corpus(user_home / ".claude", files=8, turns=3, seed=52, projects=2)
    doomed = files[1].parent
    real = origin.discover_all

    def discover_then_remove(*a, **kw):
        found = list(real(*a, **kw))
        shutil.rmtree(doomed)
        yield from found

    monkeypatch.setattr(origin, "discover_all", discover_then_remove)
    report = _sync(user_home, origin_home)
    kept = [f for f in files if f.exists()]
    assert kept and len(kept) < len(files)
    assert _event_ids(origin_home) == claude_oracle(kept)
    assert all(p["path"].startswith(str(doomed)) for p in report.problems)
    monkeypatch.undo()
    assert _sync(user_home, origin_home).problems == []


def test_log_folders_removed_while_a_sync_is_writing_do_not_stop_it(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=40, turns=(10, 30), seed=53, projects=8)
    snapshot = {f: f.read_bytes() for f in files}
    every_id = claude_oracle(files)
    origin.open_store(origin_home).close()
    removed: list[Path] = []

    def remove_once_the_first_file_is_committed():
        conn = sqlite3.connect(origin_home / origin.DB_NAME)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if conn.execute("SELECT count(*) FROM sync_log").fetchone()[0]:
                break
            time.sleep(0.001)
        conn.close()
        for folder in sorted({f.parent for f in files})[3:]:
            shutil.rmtree(folder)
            removed.append(folder)

    t = threading.Thread(target=remove_once_the_first_file_is_committed)
    t.start()
    p = subprocess.run(origin_argv("sync", "--json"), env=origin_env(user_home, origin_home), capture_output=True,
                       timeout=120)
    t.join()
    assert p.returncode == 0, p.stderr
    assert removed
    rows = _rows(origin_home)
    for r in rows:
        data = (origin_home / r["mirror"]).read_bytes()
        assert data == snapshot[Path(r["path"])][: len(data)] and (not data or data.endswith(b"\n"))
    landed = [Path(r["path"]) for r in rows if r["bytes_ingested"] == len(snapshot[Path(r["path"])])]
    ids = _event_ids(origin_home)
    assert claude_oracle([f for f in landed if f.exists()]) <= ids <= every_id
    print(f"folders removed mid-sync: {len(removed)}; files fully archived: {len(landed)} of {len(files)}")
    assert run_sync(user_home, origin_home)["problems"] == []


###############################################################################
# F1 and R8: hostile input ####################################################
###############################################################################

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as hst  # noqa: E402

from adapters import Context, ParseError, Record, SessionInfo, SourceFile  # noqa: E402
from conftest import FIXTURES  # noqa: E402

FUZZ_LINES_CI = 5_000
FUZZ_LINES_SOAK = 100_000
BIG_LINE = 8 << 20
#: Values put where a field was: every JSON type, edge numbers, hostile strings.
WRONG_VALUES = [None, True, False, 0, -1, 2**63, -(2**64), 10**4000, 1.5, 1e308, -1e308, float("nan"),
                float("inf"), "", " ", "x", "\ud800", "a\udc00b", "\u2028\x85", "\x00", "9" * 40,
                "2026-13-45T99:99:99Z", "data:image/png;base64,AAAA", "{\"a\":", [], [None], [[[]]], {},
                {"type": []}, {"text": {"text": 5}}, [{"type": "text", "text": 7}]]


def _grok_chat_sf() -> SourceFile:
    return SourceFile("/x/chat_history.jsonl", "sessions/g/s1/chat_history.jsonl",
                      meta={"format": "chat", "session": "s1", "cwd": "/w"})


def _jsonl_lines(*paths: Path) -> list[str]:
    out = []
    for p in paths:
        out += [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return out


def _exported(adapter, sf: SourceFile) -> list[str]:
    return [line for _, _, line in adapter.export(sf, {}, origin.now_ms())]


_SHAPES: dict = {}


def shapes() -> dict:
    """name -> (adapter name, SourceFile, base lines, sentinel maker); built once."""
    if _SHAPES:
        return _SHAPES
    import tempfile

    from zcode_made_here import build_zcode_db

    work = Path(tempfile.mkdtemp(prefix="origin-fuzz-"))
    zdb = build_zcode_db(work / "db.sqlite", origin.now_ms() - 3 * 3600 * 1000)
    cursor_dbs = sorted((FIXTURES / "cursor").rglob("state.vscdb"))
    cursor = adapters.ADAPTERS["cursor"]
    cursor_lines = []
    for i, db in enumerate(cursor_dbs):
        copy = work / f"state{i}.vscdb"
        shutil.copy(db, copy)
        cursor_lines += _exported(cursor, SourceFile(str(copy), "state.vscdb", kind="db", meta={"store": "global"}))
    ts = "2026-03-01T10:00:00.000Z"
    _SHAPES.update({
        "claude-code": ("claude-code", SourceFile("/x/s1.jsonl", "projects/p/s1.jsonl", meta={"session": "s1"}),
                        _jsonl_lines(*sorted((FIXTURES / "claude-code").rglob("*.jsonl"))),
                        lambda n: json.dumps({"type": "user", "uuid": f"sentinel-{n}", "sessionId": "s1",
                                              "timestamp": ts, "message": {"role": "user",
                                                                           "content": f"sentinel{n:05d} holds"}})),
        "codex": ("codex", SourceFile("/x/rollout-a.jsonl", "sessions/rollout-a.jsonl"),
                  _jsonl_lines(*sorted((FIXTURES / "codex").rglob("*.jsonl"))),
                  lambda n: json.dumps({"timestamp": ts, "type": "event_msg", "payload": {
                      "type": "user_message", "message": f"sentinel{n:05d} holds"}})),
        "grok-updates": ("grok", SourceFile("/x/updates.jsonl", "sessions/g/s1/updates.jsonl",
                                            meta={"format": "updates", "session": "s1", "cwd": "/w"}),
                         _jsonl_lines(*sorted((FIXTURES / "grok").rglob("updates.jsonl"))),
                         lambda n: json.dumps({"timestamp": 1767225600 + n, "method": "session/update", "params": {
                             "sessionId": "s1", "update": {"sessionUpdate": "user_message_chunk", "messageId": f"m{n}",
                                                           "content": {"type": "text",
                                                                       "text": f"sentinel{n:05d} holds"}}}})),
        "grok-chat": ("grok", _grok_chat_sf(), _jsonl_lines(*sorted((FIXTURES / "grok").rglob("chat_history.jsonl"))),
                      lambda n: json.dumps({"type": "user", "prompt_index": n, "content": [
                          {"type": "text", "text": f"sentinel{n:05d} holds"}]})),
        "cursor-transcript": ("cursor", SourceFile("/x/t1.jsonl", "projects/p/agent-transcripts/t1.jsonl",
                                                   meta={"session": "t1", "format": "jsonl"}),
                              _jsonl_lines(*sorted((FIXTURES / "cursor").rglob("*.jsonl"))),
                              lambda n: json.dumps({"role": "user", "message": {"content": [
                                  {"type": "text", "text": f"sentinel{n:05d} holds"}]}})),
        "cursor-txt": ("cursor", SourceFile("/x/t2.txt", "projects/p/agent-transcripts/t2.txt",
                                            meta={"session": "t2", "format": "txt"}),
                       ["user: how do I list files?", "assistant: Use ls.", "[Thinking] the user wants ls",
                        "[Tool call] Shell", "  command: ls -la", "[Tool result] Shell", "total 0",
                        "A: done", "<timestamp>2026-03-01T10:00:00Z</timestamp>", "plain continuation"],
                       lambda n: f"user: sentinel{n:05d} holds"),
        "cursor-export": ("cursor", SourceFile("/x/state.vscdb", "globalStorage/state.vscdb", kind="db",
                                               meta={"store": "global"}), cursor_lines,
                          lambda n: json.dumps({"t": "bubble", "store": "kv", "session": "c1", "ts": 1767225600000,
                                                "occ": {}, "bubble": {"type": 1,
                                                                      "text": f"sentinel{n:05d} holds"}})),
        "zcode-export": ("zcode", SourceFile("/x/db.sqlite", "cli/db/db.sqlite", kind="db"),
                         _exported(adapters.ADAPTERS["zcode"], SourceFile(str(zdb), "db.sqlite", kind="db")),
                         lambda n: json.dumps({"t": "message", "id": f"msg_s{n}", "session": "z1",
                                               "data": {"role": "user", "time": {"created": 1767225600000}},
                                               "parts": [{"id": f"prt_s{n}", "data": {
                                                   "type": "text", "text": f"sentinel{n:05d} holds"}}]})),
        "copilot-cli": ("copilot-cli", SourceFile("/x/events.jsonl", "session-state/c1/events.jsonl",
                                                  meta={"session": "c1"}),
                        _jsonl_lines(*sorted((FIXTURES / "copilot-cli").rglob("*.jsonl"))),
                        lambda n: json.dumps({"type": "user.message", "id": f"sentinel-{n}", "timestamp": ts,
                                              "data": {"content": f"sentinel{n:05d} holds"}})),
        "qwen": ("qwen", SourceFile("/x/q1.jsonl", "projects/-w/chats/q1.jsonl", meta={"session": "q1"}),
                 _jsonl_lines(*sorted((FIXTURES / "qwen" / "agent-sessions").glob("*.jsonl"))),  # short lines
                 lambda n: json.dumps({"type": "user", "uuid": f"sentinel-{n}", "sessionId": "q1", "timestamp": ts,
                                       "message": {"role": "user", "parts": [{"text": f"sentinel{n:05d} holds"}]}})),
        "pi": ("pi", SourceFile("/x/p1.jsonl", "sessions/--w--/t_p1.jsonl", meta={"session": "p1"}),
               _jsonl_lines(*sorted((FIXTURES / "pi").rglob("*.jsonl"))),
               lambda n: json.dumps({"type": "message", "id": f"s{n}", "timestamp": ts, "message": {
                   "role": "user", "content": [{"type": "text", "text": f"sentinel{n:05d} holds"}]}})),
    })
    shutil.rmtree(work, ignore_errors=True)
    for name, (_, _, base, _) in _SHAPES.items():
        assert len(base) >= 5, name
    return _SHAPES


def _paths(value, prefix=(), depth=0):
    """Every path into a JSON value, parents before children."""
    if depth > 6:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,), depth + 1)


def _replaced(obj, path, new):
    """A deep copy of obj with the value at path replaced by new (or removed when new is _DROP)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        out = dict(obj)
        if not rest and new is _DROP:
            out.pop(head, None)
        else:
            out[head] = _replaced(obj[head], rest, new)
        return out
    out = list(obj)
    if not rest and new is _DROP:
        del out[head]
    else:
        out[head] = _replaced(obj[head], rest, new)
    return out


_DROP = object()


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=bool(random.getrandbits(1)))


def wrong_type_lines(base: list[str], limit: int, rng: random.Random) -> list[str]:
    """Each field of each base record replaced in turn by every wrong value, or dropped."""
    out = []
    records = [json.loads(line) for line in base if line.lstrip().startswith("{")] or [
        {"role": "user", "text": "x", "content": [{"type": "text", "text": "y"}]}]
    rng.shuffle(records)
    for rec in records:
        for path in list(_paths(rec))[:120]:
            for new in WRONG_VALUES + [_DROP]:
                out.append(json.dumps(_replaced(rec, path, new), ensure_ascii=rng.random() < 0.5))
                if len(out) >= limit:
                    return out
    return out


_TOKENS = [b"NaN", b"-Infinity", b'"\\ud800"', b"\\udfff", b"\x00", b"\xff\xfe", b"\xc3", b"{", b"}", b"[", b"]",
           b",", b":", b'"', b"\\", b"\r", b"1e999", b"9" * 5000, b"\xe2\x80\xa8", b"\x85", b"null", b"true"]


def byte_mutated_lines(base: list[str], count: int, rng: random.Random) -> list[str]:
    """Base lines with bytes flipped, cut, repeated or hostile tokens spliced in (malformed JSON)."""
    out = []
    encoded = [b.encode("utf-8", "surrogatepass") for b in base]
    while len(out) < count:
        data = bytearray(rng.choice(encoded))
        for _ in range(rng.randint(1, 4)):
            if not data:
                break
            op = rng.randrange(5)
            i = rng.randrange(len(data))
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                del data[i: i + rng.randint(1, 40)]
            elif op == 2:
                data[i:i] = rng.choice(_TOKENS)
            elif op == 3:
                data[i:i] = data[i: i + rng.randint(1, 200)] * rng.randint(2, 5)
            else:
                del data[i:]
        line = bytes(data).replace(b"\n", b" ").decode("utf-8", "replace")  # as the engine decodes a line
        out.append(line)
    return out


def special_lines(base: list[str], big: bool) -> list[str]:
    """Lone surrogates, NaN, deep nesting, huge integers and (when big) multi-megabyte lines."""
    rec = next((json.loads(line) for line in base if line.lstrip().startswith("{")), {"role": "user", "text": "x"})
    out = [
        "", "   ", "null", "[]", "42", '"s"', "{", "}", "NaN", "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000, '{"type": ' + "[" * 990 + "]" * 990 + "}",
        '{"type": 1' + "0" * 4299 + "}", '{"type": 1' + "0" * 5000 + "}", '{"\\ud800": "\\udc00\\ud800"}',
        json.dumps(rec).replace('"', '"\\ud83d', 1), json.dumps(rec).replace("}", ', "x": NaN}', 1),
        json.dumps(rec).replace("}", ', "x": -Infinity}', 1), json.dumps(rec) + " trailing", "\x00" * 100,
        json.dumps(rec)[: len(json.dumps(rec)) // 2],
    ]
    for path in list(_paths(rec))[:30]:
        out.append(json.dumps(_replaced(rec, path, [[[[[[[[[[[[{"deep": "\ud800"}]]]]]]]]]]]])))
        out.append(json.dumps(_replaced(rec, path, 10**4000)))
    if big:
        out.append(json.dumps(_replaced(rec, next(iter(_paths(rec))), "megabyte " * (BIG_LINE // 9))))
        out.append("{" + "x" * BIG_LINE)
    return out


def fuzz_lines(base: list[str], total: int, seed: int, big: bool = False) -> list[str]:
    rng = random.Random(seed)
    lines = special_lines(base, big)
    lines += wrong_type_lines(base, total // 2, rng)
    lines += byte_mutated_lines(base + lines[-200:], total - len(lines), rng)
    return lines


_STR_FIELDS = ("id", "session", "kind", "role", "text")


def storable_problem(item) -> str | None:
    """What would stop the engine from storing an item, if anything."""
    def bad_str(v, optional):
        if v is None:
            return not optional
        if not isinstance(v, str):
            return True
        try:
            adapters.clean_text(v).encode("utf-8")
        except Exception:  # noqa: BLE001
            return True
        return False

    if isinstance(item, Record):
        if any(bad_str(getattr(item, f), False) for f in _STR_FIELDS):
            return f"record field of a wrong type: {item!r}"[:300]
        if any(bad_str(getattr(item, f), True) for f in ("cwd", "branch", "model")):
            return f"record cwd/branch/model of a wrong type: {item!r}"[:300]
        for f in ("ts", "line", "offset"):
            v = getattr(item, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 1 << 63):
                return f"record {f} not a 64-bit integer: {v!r}"[:300]
        if isinstance(item.span, bool) or not isinstance(item.span, int) or not 0 <= item.span < 1 << 31:
            return f"record span {item.span!r}"
        return None
    if isinstance(item, SessionInfo):
        if bad_str(item.session, False) or bad_str(item.title, True):
            return f"session info of a wrong type: {item!r}"[:300]
        if isinstance(item.title_rank, bool) or not isinstance(item.title_rank, int):
            return f"session title_rank {item.title_rank!r}"
        return None
    return f"not a Record or SessionInfo: {type(item).__name__}"


def parse_problems(adapter, sf: SourceFile, lines: list[str]) -> tuple[list[str], int]:
    """Parse lines in order like the engine; return contract breaches and lines rejected."""
    state = adapter.new_state(sf)
    problems, rejected, offset = [], 0, 0
    for lineno, line in enumerate(lines, 1):
        # The engine reads lines as bytes and decodes them with "replace": no lone surrogate survives.
        line = line.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        if lineno % 50 == 0:
            state = json.loads(json.dumps(state))  # a sync that stopped here and resumed
        ctx = Context(file=sf, state=state, lineno=lineno, offset=offset, mtime_ms=1_767_225_600_000)
        offset += len(line.encode("utf-8", "surrogatepass")) + 1
        t0 = time.perf_counter()
        try:
            out = adapter.parse(line, ctx)
        except ParseError:
            rejected += 1
            continue
        except BaseException as e:  # noqa: BLE001 - the point of the test
            problems.append(f"line {lineno}: {type(e).__name__}: {str(e)[:150]} <- {line[:150]!r}")
            continue
        finally:
            elapsed = time.perf_counter() - t0
            if elapsed > max(1.0, len(line) / 65536):
                problems.append(f"line {lineno}: {elapsed:.1f} s for {len(line)} characters")
        if not isinstance(out, list):
            problems.append(f"line {lineno}: parse returned {type(out).__name__}")
            continue
        for item in out:
            p = storable_problem(item)
            if p:
                problems.append(f"line {lineno}: {p} <- {line[:150]!r}")
        if lineno % 25 == 0 or lineno == len(lines):
            try:
                json.dumps(state, ensure_ascii=False).encode("utf-8")
            except Exception as e:  # noqa: BLE001
                problems.append(f"lines {lineno - 24}-{lineno}: state cannot be stored: {type(e).__name__}: {e}"[:300])
                state = adapter.new_state(sf)
    return problems, rejected


@pytest.mark.parametrize("shape", ["grok-updates", "cursor-txt"])
def test_an_open_block_of_many_megabytes_keeps_the_parse_state_small(shape):
    """A message still being joined at the end of a sync is stored as parse state: it must stay bounded."""
    name, sf, _, make = shapes()[shape]
    adapter = adapters.ADAPTERS[name]
    chunk = "output " * 15_000
    if shape == "cursor-txt":
        lines = ["[Tool result] Shell"] + [chunk] * 80
    else:
        lines = [json.dumps({"timestamp": 1767225600, "method": "session/update", "params": {
            "sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk",
                                          "content": {"type": "text", "text": chunk}}}})] * 80
    state = adapter.new_state(sf)
    for lineno, line in enumerate(lines, 1):
        adapter.parse(line, Context(file=sf, state=state, lineno=lineno, offset=0))
    size = len(json.dumps(state))
    assert size <= 1 << 20, f"{size / 2**20:.1f} MiB of parse state after {len(lines) * len(chunk) / 2**20:.0f} MiB"


def _fuzz_adapter(shape: str, total: int, seed: int) -> int:
    name, sf, base, _ = shapes()[shape]
    lines = fuzz_lines(base, total, seed)
    problems, rejected = parse_problems(adapters.ADAPTERS[name], sf, lines)
    assert problems == [], f"{len(problems)} lines broke the contract: {problems[:8]}"
    assert rejected > 0 or sf.meta.get("format") == "txt"  # a TXT transcript has no malformed line
    return len(lines)


SHAPE_NAMES = ["claude-code", "codex", "grok-updates", "grok-chat", "cursor-transcript", "cursor-txt",
               "cursor-export", "zcode-export", "copilot-cli", "qwen", "pi"]


@pytest.mark.parametrize("shape", SHAPE_NAMES)
def test_fuzzed_lines_of_every_adapter_shape_raise_only_parse_errors_and_yield_storable_items(shape):
    n = _fuzz_adapter(shape, FUZZ_LINES_CI, seed=SHAPE_NAMES.index(shape))
    print(f"fuzzed {shape}: {n} lines")
    assert n >= FUZZ_LINES_CI


@pytest.mark.soak
@pytest.mark.parametrize("shape", SHAPE_NAMES)
def test_soak_100k_fuzzed_lines_of_every_adapter_shape_raise_only_parse_errors(shape):
    n = sum(_fuzz_adapter(shape, 25_000, seed=1000 * k + SHAPE_NAMES.index(shape)) for k in range(4))
    assert n >= FUZZ_LINES_SOAK


def _mutation(draw, rec):
    paths = list(_paths(rec))
    if not paths:
        return rec
    path = draw(hst.sampled_from(paths))
    leaves = hst.none() | hst.booleans() | hst.integers() | hst.floats() | hst.text(max_size=12)
    value = draw(hst.sampled_from(WRONG_VALUES) | leaves | hst.recursive(
        leaves, lambda inner: hst.lists(inner, max_size=3) | hst.dictionaries(hst.text(max_size=6), inner, max_size=3),
        max_leaves=8))
    return _replaced(rec, path, value)


@pytest.mark.parametrize("shape", SHAPE_NAMES)
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=hst.data())
def test_property_records_with_several_fields_of_wrong_types_never_break_the_parse_contract(shape, data):
    name, sf, base, _ = shapes()[shape]
    records = [json.loads(line) for line in base if line.lstrip().startswith("{")] or [{}]
    lines = []
    for _ in range(10):
        rec = data.draw(hst.sampled_from(records))
        for _ in range(data.draw(hst.integers(1, 4))):
            rec = _mutation(data.draw, rec)
        lines.append(json.dumps(rec))
    problems, _ = parse_problems(adapters.ADAPTERS[name], sf, lines)
    assert problems == []


def _with_sentinels(shape: str, lines: list[str], first: int = 0, every: int = 50) -> tuple[list[str], list[str]]:
    """Interleave well-formed lines carrying unique markers (numbered from first); return (lines, markers)."""
    make = shapes()[shape][3]
    out, markers = [], []
    for i, line in enumerate(lines + [None]):
        if i % every == 0 or line is None:
            n = first + len(markers)
            out.append(make(n))
            markers.append(f"sentinel{n:05d}")
        if line is not None:
            out.append(line)
    return out, markers


@pytest.mark.parametrize("shape", SHAPE_NAMES)
def test_a_file_of_hostile_lines_goes_through_the_engine_counted_and_skipped_while_the_rest_lands(
        shape, user_home, origin_home, monkeypatch):
    name, template, base, _ = shapes()[shape]
    adapter = adapters.ADAPTERS[name]
    good = write_claude_corpus(user_home / ".claude", files=2, turns=2, seed=61)
    cases = [("small", False), ("big", True)] if template.kind == "log" else [("db", True)]
    real_discover = adapter.discover
    for k, (label, big) in enumerate(cases):
        lines, markers = _with_sentinels(shape, fuzz_lines(base, 500 if big else 1500,
                                                           seed=7 + 10 * k + SHAPE_NAMES.index(shape), big=big), first=1000 * k)
        path = user_home / "fuzz" / label / Path(template.path).name
        path.parent.mkdir(parents=True)
        sf = SourceFile(str(path), f"fuzz/{label}/{Path(template.rel).name}", template.compressed, template.kind,
                        dict(template.meta))
        if sf.kind == "log":
            path.write_bytes(b"".join(ln.encode("utf-8", "surrogatepass") + b"\n" for ln in lines))
            assert (path.stat().st_size > origin.PREFETCH_MAX) == big
        else:
            path.write_bytes(b"not read: export is replaced")
        age_tree(path.parent, 7200)
        _, rejected = parse_problems(adapter, sf, lines)
        monkeypatch.setattr(adapter, "discover", lambda env, home, sf=sf: [sf] + list(real_discover(env, home)))
        if sf.kind == "db":
            monkeypatch.setattr(adapter, "export", lambda f, known, now, lines=lines: (
                (f"k{i}", "d", line) for i, line in enumerate(lines)))
        with origin.open_store(origin_home / label) as s:
            report = origin.sync(s, env={"HOME": str(user_home)}, home=user_home)
            assert report.problems == []
            row = s.conn.execute("SELECT * FROM raw_file WHERE path = ?", (sf.path,)).fetchone()
            texts = "\n".join(r[0] for r in s.conn.execute("SELECT text FROM event WHERE raw_file_id = ?", (row["id"],)))
            missing = [m for m in markers if m not in texts]
            assert missing == [], f"{len(missing)} of {len(markers)} good lines did not land"
            assert row["parse_errors"] == rejected > 0 or sf.meta.get("format") == "txt"
            ids = {r[0] for r in s.conn.execute("SELECT id FROM event WHERE source = 'claude-code'")}
            assert claude_oracle(good) <= ids


###############################################################################
# Corrupt compressed files and malformed agent databases ######################
###############################################################################


def _zst(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _rollout_name(n: int) -> str:
    return f"rollout-2026-03-0{n}T10-00-00-019c0000-0000-7000-8000-00000000000{n}.jsonl.zst"


def test_corrupt_and_truncated_zstd_rollouts_are_counted_and_every_other_file_lands(user_home, tmp_path):
    LAYOUTS["codex"](user_home)
    reference = reference_sync(user_home, {}, tmp_path / "reference")
    rollout = sorted(LOCALPUSH.glob("rollout-*.jsonl"))[1].read_bytes()
    head = rollout[: rollout.index(b"\n", len(rollout) // 2) + 1]
    archived = user_home / ".codex" / "archived_sessions"
    blobs = {
        "garbage": _zst(head)[:4] + random.Random(1).randbytes(4000),
        "truncated": _zst(rollout)[: len(_zst(rollout)) * 2 // 3],
        "second-frame-corrupt": _zst(head) + _zst(rollout[len(head):])[:4] + random.Random(2).randbytes(300),
        "binary": _zst(random.Random(3).randbytes(1 << 20).replace(b"\n", b"")),
    }
    paths = {}
    for n, (label, blob) in enumerate(blobs.items(), 1):
        paths[label] = archived / _rollout_name(n)
        paths[label].write_bytes(blob)
    # What the readable first frame alone gives, synced as a plain file elsewhere.
    plain_home = tmp_path / "plain"
    day = plain_home / ".codex" / "sessions" / "2026" / "03" / "03"
    day.mkdir(parents=True)
    (day / _rollout_name(3)[:-4]).write_bytes(head)
    first_frame = reference_sync(plain_home, {}, tmp_path / "first-frame").events["codex"]
    oh = tmp_path / "origin"
    report = run_sync(user_home, oh)
    assert report["problems"] == []
    with origin.open_store(oh) as s:
        ids = {r[0] for r in s.conn.execute("SELECT id FROM event")}
        assert reference.events["codex"] | first_frame <= ids
        errors = {Path(r["path"]).name: r["parse_errors"] for r in s.conn.execute("SELECT * FROM raw_file")}
    assert errors[paths["garbage"].name] >= 1 and errors[paths["second-frame-corrupt"].name] >= 1
    assert errors[paths["truncated"].name] == 0  # an archive still being written: its complete lines wait
    assert run_sync(user_home, oh)["events_added"] == 0
    paths["truncated"].write_bytes(_zst(rollout))  # the compressor finished
    _bump_mtime(paths["truncated"])
    assert run_sync(user_home, oh)["problems"] == []
    rows = _rows(oh)
    assert all(r["generation"] == 0 for r in rows)
    done = next(r for r in rows if r["path"] == str(paths["truncated"]))
    assert (oh / done["mirror"]).read_bytes() == rollout


def _garbage_db(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_garbage_and_truncated_agent_databases_are_reported_and_every_other_file_lands(user_home, tmp_path):
    env = LAYOUTS["cursor"](user_home)
    good = write_claude_corpus(user_home / ".claude", files=2, turns=2, seed=71)
    age_tree(user_home, 7200)
    reference = reference_sync(user_home, env, tmp_path / "reference")
    real = (FIXTURES / "cursor" / "urpg-global" / "state.vscdb").read_bytes()
    broken = {
        "garbage": random.Random(4).randbytes(16384),
        "truncated": real[: len(real) // 2],
        "header only": real[:100],
    }
    roots = [env["ORIGIN_CURSOR_USER_DIR"]]
    for label, data in broken.items():
        root = tmp_path / "cursor-roots" / label.replace(" ", "-")
        _garbage_db(root / "globalStorage" / "state.vscdb", data)
        roots.append(str(root))
    _garbage_db(user_home / ".zcode" / "cli" / "db" / "db.sqlite", random.Random(5).randbytes(8192))
    age_tree(tmp_path / "cursor-roots", 7200)
    age_tree(user_home / ".zcode", 7200)
    extra = {"ORIGIN_CURSOR_USER_DIR": ",".join(roots)}
    oh = tmp_path / "origin"
    report = run_sync(user_home, oh, extra)
    with origin.open_store(oh) as s:
        ids = {r[0] for r in s.conn.execute("SELECT id FROM event")}
    assert reference.events["cursor"] | claude_oracle(good) <= ids
    reported = {p["path"] for p in report["problems"]}
    unreported = [p for p in [str(Path(r) / "globalStorage" / "state.vscdb") for r in roots[1:]]
                  + [str(user_home / ".zcode" / "cli" / "db" / "db.sqlite")] if p not in reported]
    assert unreported == [], "an agent database that cannot be read must be named in the sync's problems"


BAD_CELLS = [None, 7, 2.5, "garbage", b"\xff\xfe\x00blob", "[]", '{"role": 5}', "NaN", "[" * 3000 + "]" * 3000]


def _typeless_copy(src: Path, dst: Path) -> None:
    """The same tables and rows with no declared column types, so any cell can hold any type."""
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    for (table,) in a.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        cols = [r[1] for r in a.execute(f"PRAGMA table_info({table})")]
        b.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
        rows = a.execute(f"SELECT * FROM {table}").fetchall()
        b.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols))})", rows)
    b.commit()
    a.close()
    b.close()


def _sessions_of(oh: Path) -> dict:
    conn = sqlite3.connect(oh / origin.DB_NAME)
    try:
        out: dict = {}
        for sid, eid in conn.execute("SELECT session, id FROM event"):
            out.setdefault(sid, set()).add(eid)
        return out
    finally:
        conn.close()


def test_zcode_cells_of_wrong_types_cost_their_own_rows_only(user_home, tmp_path):
    from zcode_made_here import MAIN, build_zcode_db

    made = build_zcode_db(tmp_path / "made.sqlite", origin.now_ms() - 3 * 3600 * 1000)
    db = user_home / ".zcode" / "cli" / "db" / "db.sqlite"
    db.parent.mkdir(parents=True)
    _typeless_copy(made, db)
    age_tree(user_home, 7200)
    _sync(user_home, tmp_path / "reference")
    reference = _sessions_of(tmp_path / "reference")
    others = set().union(*(ids for sid, ids in reference.items() if sid != MAIN))
    assert others and reference.get(MAIN)
    targets = [("session", "id = 'sess_main'"), ("message", "id = 'msg_03'"), ("part", "id = 'prt_03c'")]
    failures = []
    n = 0
    for table, where in targets:
        conn = sqlite3.connect(made)
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        conn.close()
        for col in cols:
            for value in BAD_CELLS:
                n += 1
                _typeless_copy(made, db.with_name("new.sqlite"))
                conn = sqlite3.connect(db.with_name("new.sqlite"))
                conn.execute(f"UPDATE {table} SET {col} = ? WHERE {where}", (value,))
                conn.commit()
                conn.close()
                os.replace(db.with_name("new.sqlite"), db)
                age_tree(db.parent, 7200)
                oh = tmp_path / f"o{n}"
                report = _sync(user_home, oh)
                got = set().union(*_sessions_of(oh).values()) if _sessions_of(oh) else set()
                if not others <= got:
                    failures.append((f"{table}.{col}={str(value)[:12]!r}", report.problems[:1]))
                shutil.rmtree(oh)
    print(f"zcode cells of wrong types: {n} tried, {len(failures)} lost other sessions")
    assert failures == [], "\n".join(map(str, failures))


def test_cursor_rows_of_wrong_types_cost_their_own_conversation_only(user_home, tmp_path):
    env = LAYOUTS["cursor"](user_home)
    age_tree(user_home, 7200)
    _sync(user_home, tmp_path / "reference", env)
    reference = _sessions_of(tmp_path / "reference")
    db = Path(env["ORIGIN_CURSOR_USER_DIR"]) / "globalStorage" / "state.vscdb"
    pristine = db.read_bytes()
    conn = sqlite3.connect(db)
    keys = [k for (k,) in conn.execute("SELECT key FROM cursorDiskKV WHERE value IS NOT NULL AND "
                                       "(key LIKE 'composerData:%' OR key LIKE 'bubbleId:%') ORDER BY key")]
    conn.close()
    by_composer: dict = {}
    for k in keys:
        by_composer.setdefault(k.split(":")[1], []).append(k)
    composer = next(c for c, ks in by_composer.items() if len(ks) > 1 and c in reference)
    others = set().union(*(ids for sid, ids in reference.items() if sid != composer))
    assert others
    failures = []
    n = 0
    for key in by_composer[composer][:3]:
        for value in BAD_CELLS:
            n += 1
            db.write_bytes(pristine)
            conn = sqlite3.connect(db)
            conn.execute("UPDATE cursorDiskKV SET value = ? WHERE key = ?", (value, key))
            conn.commit()
            conn.close()
            age_tree(db.parent, 7200)
            oh = tmp_path / f"o{n}"
            report = _sync(user_home, oh, env)
            got = set().union(*_sessions_of(oh).values())
            if not others <= got:
                failures.append((f"{key[:30]}={str(value)[:12]!r}", report.problems[:1]))
            shutil.rmtree(oh)
    print(f"cursor rows of wrong types: {n} tried, {len(failures)} lost other conversations")
    assert failures == []


###############################################################################
# Bad requests on the command line ############################################
###############################################################################


def _main(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = origin.main(argv)
    except SystemExit as e:  # argparse refusing an argument
        code = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - escaped main(): the user would see a traceback
        out = capsys.readouterr()
        return 1, out.out, out.err + f"Traceback (escaped main): {type(e).__name__}: {e}"
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def busy_store(user_home, origin_home):
    """A synced, quiet store with an active, a superseded and a forgotten entry and a forgotten event."""
    files = write_claude_corpus(user_home / ".claude", files=3, turns=4, seed=81)
    age_tree(user_home, 7200)
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        evs = [r[0] for r in s.conn.execute("SELECT id FROM event WHERE kind = 'message' ORDER BY seq LIMIT 6")]
        old = origin.remember(s, kind="memory", text="first version", sources=[{"event": evs[0]}], author="t")
        origin.correct(s, old["id"], text="second version", author="t")
        gone = origin.remember(s, kind="memory", text="to forget", sources=[{"event": evs[1]}], author="t")
        origin.forget(s, gone["id"])
        origin.forget(s, evs[2])
        active = origin.remember(s, kind="knowledge", text="kept", sources=[{"event": evs[3]}], author="t")
    return {"files": files, "superseded": old["id"], "active": active["id"], "forgotten": gone["id"],
            "excluded": evs[2], "event": evs[4]}


def bad_requests(ids: dict) -> list[list[str]]:
    big = "x" * 1_000_000
    active, excluded = ids["active"], ids["excluded"]
    remember = ["remember", "a statement", "--kind", "memory"]
    return [
        ["frobnicate"], ["sync", "--source", "nope"], ["sync", "--bogus"], ["sync", "extra"], ["status", "extra"],
        ["search", "x", "--limit", "0"], ["search", "x", "--limit", "abc"], ["search", "x", "--limit", "-5"],
        ["search", "x", "--limit", "9" * 40], ["search", "x", "--since", "yesterday-ish"],
        ["search", "x", "--since", "99999999999999999999d"], ["search", "x", "--until", "2026-13-01"],
        ["search", "x", "--scope", "nope"], ["search", "x", "--kind", "nope"], ["search", "x", "--source", ""],
        ["search", *(["word"] * 20_000)],
        ["timeline", "--session", "nope"], ["timeline", "--session", ""], ["timeline", "--session", big],
        ["timeline", "--since", "99999999999999999999d"], ["timeline", "--limit", "0"],
        ["timeline", "--until", "not a date"],
        ["show", "nope"], ["show", ""], ["show", "ent_nope"], ["show", big], ["show", ids["forgotten"]],
        ["show", excluded], ["path", "extra"],
        ["entries", "--kind", "nope"], ["entries", "--limit", "0"], ["entries", "--limit", "x"],
        ["remember", "a statement"], ["remember", "", "--kind", "memory", "--event", ids["event"]],
        ["remember", "   ", "--kind", "memory", "--event", ids["event"]], remember,
        [*remember, "--event", "nope"], [*remember, "--event", ""], [*remember, "--event", excluded],
        [*remember, "--event", big], [*remember, "--quote", "zz"], [*remember, "--quote", "q" * 3000],
        [*remember, "--quote", "no such words anywhere xyzzy plugh"], ["remember", "x" * 30_000, "--kind", "memory",
                                                                      "--event", ids["event"]],
        [*remember, "--event", ids["event"], "--confidence", "2"],
        [*remember, "--event", ids["event"], "--confidence", "nan"],
        [*remember, "--event", ids["event"], "--confidence", "abc"],
        [*remember, "--event", ids["event"], "--valid-from", "garbage"],
        [*remember, "--event", ids["event"], "--valid-from", "2026-02-01", "--valid-to", "2026-01-01"],
        [*remember, "--event", ids["event"], "--project", "p" * 100_000],
        ["correct", "ent_nope", "x"], ["correct", "", "x"], ["correct", ids["forgotten"], "x"],
        ["correct", ids["superseded"], "x"], ["correct", active, ""], ["correct", active, "x", "--confidence", "5"],
        ["correct", active, "x" * 30_000], ["correct", active, "x", "--event", excluded],
        ["correct", active, "x", "--valid-from", "2026-02-01", "--valid-to", "2026-01-01"],
        ["correct", big, "x"],
        ["forget", "nope", "--yes"], ["forget", "", "--yes"], ["forget", ids["forgotten"], "--yes"],
        ["forget", excluded, "--yes"], ["forget", big, "--yes"], ["forget", "nope"], ["forget", "nope", "--json"],
    ]


def test_every_cli_command_refuses_bad_ids_types_empty_and_oversized_values_clearly_and_writes_nothing(
        busy_store, origin_home, capsys):
    before = table_fingerprint(origin_home)
    failures = []
    for argv in bad_requests(busy_store):
        for json_flag in ([], ["--json"]) if argv[0] not in ("frobnicate",) else ([],):
            full = argv + json_flag if "--json" not in argv else argv
            code, out, err = _main(capsys, full)
            shown = " ".join(a if len(a) < 40 else a[:20] + f"…({len(a)})" for a in full)[:160]
            if code == 0:
                failures.append(f"{shown}: accepted (exit 0)")
            elif "Traceback" in err or not err.strip():
                failures.append(f"{shown}: exit {code} without a clear message: {err[-200:]!r}")
            elif json_flag and out.strip().startswith("{") and '"done": false' not in out:
                failures.append(f"{shown}: printed a result on failure")
            if table_fingerprint(origin_home) != before:
                failures.append(f"{shown}: changed the store")
                before = table_fingerprint(origin_home)
    assert failures == [], "\n".join(failures)


def test_a_refused_remember_or_correct_writes_nothing_even_with_new_log_lines_waiting(busy_store, origin_home,
                                                                                     capsys):
    with open(busy_store["files"][0], "ab") as fh:  # a line arrives after the last sync
        fh.write(write_claude_corpus(origin_home.parent / "more", files=1, turns=1, seed=82)[0].read_bytes())
    before = table_fingerprint(origin_home)
    ev, active = busy_store["event"], busy_store["active"]
    shape_errors = [
        ["remember", "", "--kind", "memory", "--event", ev],
        ["remember", "x" * 30_000, "--kind", "memory", "--event", ev],
        ["remember", "t", "--kind", "memory", "--quote", "zz"],
        ["remember", "t", "--kind", "memory", "--quote", "q" * 3000],
        ["remember", "t", "--kind", "memory", "--event", ev, "--valid-from", "garbage"],
        ["remember", "t", "--kind", "memory", "--event", ""],
        ["correct", active, ""],
        ["correct", active, "x", "--valid-from", "2026-02-01", "--valid-to", "2026-01-01"],
    ]
    changed = []
    for argv in shape_errors:
        code, _, err = _main(capsys, argv)
        assert code != 0 and err.strip()
        if table_fingerprint(origin_home) != before:
            changed.append(" ".join(a[:20] for a in argv))
            before = table_fingerprint(origin_home)
    assert changed == [], "a request refused for its own shape must not sync first"


###############################################################################
# S14: no egress ##############################################################
###############################################################################


def _normalised_entry(res: dict) -> dict:
    drop = {"id", "created", "history"}
    return {k: v for k, v in res.items() if k not in drop}


def _sync_search_remember(run, home: Path, oh: Path) -> dict:
    env = origin_env(home, oh)
    out = {}
    for key, argv in (("sync", ["sync", "--json"]), ("search", ["search", "schema", "migration", "--json"]),
                      ("remember", ["remember", "We keep the archive local.", "--kind", "memory", "--quote",
                                    "schema", "--json"]),
                      ("entries", ["search", "archive", "--scope", "entries", "--json"])):
        p = run(origin_argv(*argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, (key, stderr.decode(errors="replace")[-1000:])
        out[key] = json.loads(stdout)
    out["remember"] = _normalised_entry(out["remember"])
    out["entries"] = [_normalised_entry(e) for e in out["entries"]["entries"]]
    return out


def test_sync_search_and_remember_give_the_same_results_inside_a_network_namespace_without_interfaces(
        user_home, tmp_path):
    from reliability_tools import empty_network_namespace_available, popen_in_empty_network_namespace

    ok, why = empty_network_namespace_available()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must be able to run `unshare -n`: {why}")
        pytest.skip(f"no empty network namespace on this machine: {why}")
    write_claude_corpus(user_home / ".claude", files=4, turns=5, seed=91)
    age_tree(user_home, 7200)
    inside = _sync_search_remember(popen_in_empty_network_namespace, user_home, tmp_path / "inside")
    outside = _sync_search_remember(subprocess.Popen, user_home, tmp_path / "outside")
    assert inside["sync"]["events_added"] > 0 and inside["search"]["events"]
    assert inside == outside


AUDIT_SCRIPT = r"""
import json, socket, sys
sys.path.insert(0, sys.argv[1])
seen = []
phase = ["origin"]
def hook(event, args):
    if event.startswith("socket."):
        seen.append([phase[0], event, repr(args)[:200]])
sys.addaudithook(hook)
import origin
for argv in (["sync", "--json"], ["search", "schema", "--json"],
             ["remember", "Local only.", "--kind", "memory", "--quote", "schema", "--json"]):
    code = origin.main(argv)
    assert code == 0, (argv, code)
phase[0] = "control"
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    s.connect(("127.0.0.1", 9))
except OSError:
    pass
s.close()
with open(sys.argv[2], "w") as fh:
    json.dump(seen, fh)
"""


def test_sync_search_and_remember_open_no_network_socket(user_home, origin_home, tmp_path):
    write_claude_corpus(user_home / ".claude", files=3, turns=4, seed=92)

    extra = {}
    for name in sorted(set(LAYOUTS) - {"claude-code", "claude-memory"}):  # every other agent's real fixtures
        extra.update(LAYOUTS[name](user_home) or {})
    out = tmp_path / "audit.json"
    p = subprocess.run([sys.executable, "-c", AUDIT_SCRIPT, str(ROOT), str(out)],
                       env=origin_env(user_home, origin_home, extra), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    seen = json.loads(out.read_text())
    during = [e for e in seen if e[0] == "origin"]
    control = [e for e in seen if e[0] == "control"]
    assert any(e[1] == "socket.connect" for e in control), "the audit hook must see a socket opened on purpose"
    unix = str(int(__import__("socket").AF_UNIX))
    assert [e for e in during if not (e[1] == "socket.__new__" and f", {unix}," in e[2])] == []


###############################################################################
# Secrets inside log lines ####################################################
###############################################################################

LOG_TOKENS = {
    "anthropic": "sk-ant-api03-" + "Q" * 40 + "-planted0001",
    "openai": "sk-proj-" + "R" * 40 + "planted0002",
    "github": "ghp_" + "S" * 36,
    "aws-access-key": "AKIA" + "PLANTED000000003",
    "slack": "xoxb-1111-2222-planted0004",
}


def test_tokens_inside_log_lines_stay_in_the_mirror_and_are_masked_in_events_and_the_index(user_home, origin_home,
                                                                                           cli):
    """The raw mirror is a copy of the user's own log and keeps every byte
    (Invariant 3); event text, the search index and every read-out hold the
    masked form instead, so a search for a token finds nothing."""
    folder = user_home / ".claude" / "projects" / "-w"
    folder.mkdir(parents=True)
    lines = []
    for i, (family, token) in enumerate(LOG_TOKENS.items()):
        lines.append(json.dumps({"type": "user", "uuid": f"tok-{i}", "sessionId": "s1", "cwd": "/w",
                                 "timestamp": "2026-03-01T10:00:00Z",
                                 "message": {"role": "user", "content": f"my {family} key is {token} ok"}}))
        lines.append(json.dumps({"type": "user", "uuid": f"tool-{i}", "sessionId": "s1", "cwd": "/w",
                                 "timestamp": "2026-03-01T10:00:01Z", "message": {"role": "user", "content": [
                                     {"type": "tool_result", "tool_use_id": "t", "content": f"export KEY={token}"}]}}))
    (folder / "s1.jsonl").write_text("\n".join(lines) + "\n")
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mirror = (origin_home / s.conn.execute("SELECT mirror FROM raw_file").fetchone()[0]).read_bytes()
        texts = [r[0] for r in s.conn.execute("SELECT text FROM event ORDER BY seq")]
    for family, token in LOG_TOKENS.items():
        assert mirror.count(token.encode()) == 2, family
        assert not any(token in t for t in texts), family
        assert sum(f"[secret:{family}…{token[-4:]}]" in t for t in texts) == 2, family
        code, res = cli("search", token, "--all", "--json")
        assert code == 0 and res["events"] == [], family
    for part in origin.EVENT_INDEXES:
        with sqlite3.connect(origin_home / origin.INDEX_DIR / origin.EVENT_INDEXES[part][0]) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = b"".join(p.read_bytes() for p in origin_home.rglob("*.db*") if p.is_file())
    assert not any(token.encode() in stored for token in LOG_TOKENS.values())


###############################################################################
# R6: WAL growth ##############################################################
###############################################################################


def test_the_wal_stays_bounded_while_a_reader_pins_it_and_shrinks_after_release(user_home, origin_home):
    write_claude_corpus(user_home / ".claude", files=2, turns=3, seed=95)
    _sync(user_home, origin_home)
    wal = origin_home / (origin.DB_NAME + "-wal")
    reader = sqlite3.connect(origin_home / origin.DB_NAME, isolation_level=None)  # a long-lived server connection
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM event").fetchone()
    # Enough new logs to write well over 4 MiB to the store's WAL (the
    # search index is written to files of its own).
    write_claude_corpus(user_home / ".claude", files=40, turns=40, seed=96)
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], wal.stat().st_size if wal.exists() else 0)
            time.sleep(0.01)

    t = threading.Thread(target=sample)
    t.start()
    try:
        _sync(user_home, origin_home)
        pinned_peak = peak[0]
        reader.execute("COMMIT")  # the reader lets go but keeps its connection open
        f = next((user_home / ".claude").rglob("*.jsonl"))
        deadline = time.monotonic() + 10
        size = None
        while time.monotonic() < deadline:
            with open(f, "ab") as fh:
                fh.write(json.dumps({"type": "user", "uuid": f"w{time.monotonic_ns()}", "sessionId": "s",
                                     "message": {"content": "one more"}}).encode() + b"\n")
            _sync(user_home, origin_home)
            size = wal.stat().st_size if wal.exists() else 0
            if size <= 4 << 20:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        t.join()
        reader.close()
    print(f"WAL peak {pinned_peak / 2**20:.1f} MiB while pinned, {size / 2**20:.1f} MiB after release")
    assert pinned_peak > 4 << 20, "the pinned reader must make the WAL grow for this test to mean anything"
    # The plan's bounds: a peak under 64 MiB while pinned (checkpoints come
    # every ~40 MB of WAL), and back under 4 MiB once the reader lets go.
    assert peak[0] <= 64 << 20
    assert size <= max(4 << 20, origin.WAL_SIZE_LIMIT), f"WAL still {size / 2**20:.1f} MiB 10 s after release"
