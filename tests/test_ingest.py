"""Ingest: cursors, mirrors, generations, torn lines, crashes, concurrency."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import origin
from conftest import ROOT, read_line
from corpus import write_claude_corpus
from helpers import LOCALPUSH, age_all, appended_claude_line, oracle_ids


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def events(store) -> list:
    return store.conn.execute(
        "SELECT e.*, r.mirror, r.path AS src FROM event e JOIN raw_file r ON r.id = e.raw_file_id"
    ).fetchall()


def sync(home: Path, **kw):
    with origin.open_store(home) as s:
        return origin.sync(s, **kw)


def test_invariant_1_every_event_locator_reads_back_its_original_line(claude_root, origin_home):
    report = sync(origin_home)
    assert report.events_added > 50
    with origin.open_store(origin_home) as s:
        rows = events(s)
        assert len(rows) == report.events_added
        for r in rows:
            mirror = origin_home / r["mirror"]
            original = read_line(Path(r["src"]), r["line"])
            assert read_line(mirror, r["line"]) == original
            assert origin.read_raw(s, r["mirror"], r["offset"], r["span"]).encode() == original
            rec = json.loads(original)
            if "uuid" in rec:
                assert r["id"].split(":", 1)[1].split("#")[0] == rec["uuid"]


def test_invariant_3_mirror_equals_source_and_second_sync_adds_nothing(claude_root, origin_home):
    first = sync(origin_home)
    assert first.events_added > 0
    with origin.open_store(origin_home) as s:
        for r in s.conn.execute("SELECT * FROM raw_file"):
            assert sha(origin_home / r["mirror"]) == sha(Path(r["path"]))
            assert r["bytes_ingested"] == Path(r["path"]).stat().st_size
    second = sync(origin_home)
    assert second.events_added == 0
    assert all(v["bytes_added"] == 0 for v in second.sources.values())
    # Touching a file (new mtime, same bytes) reads it but adds nothing.
    for p in (claude_root / "projects").rglob("*.jsonl"):
        os.utime(p, None)
    third = sync(origin_home)
    assert third.events_added == 0


def test_invariant_3_rewritten_file_opens_new_generation_and_keeps_old_mirror(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=1, turns=5, seed=1)
    sync(origin_home)
    with origin.open_store(origin_home) as s:
        old = s.conn.execute("SELECT * FROM raw_file").fetchone()
        old_hash = sha(origin_home / old["mirror"])
        n_before = s.conn.execute("SELECT count(*) FROM event").fetchone()[0]
    # Rewrite: keep the first two lines, then different ones (e.g. a compaction).
    before_ids = oracle_ids(files)
    lines = files[0].read_text().splitlines()
    replacement = write_claude_corpus(user_home / "other", files=1, turns=2, seed=99)[0].read_text().splitlines()
    files[0].write_text("\n".join(lines[:2] + replacement) + "\n")
    report = sync(origin_home)
    with origin.open_store(origin_home) as s:
        rows = s.conn.execute("SELECT * FROM raw_file ORDER BY generation").fetchall()
        assert [r["generation"] for r in rows] == [0, 1]
        assert sha(origin_home / rows[0]["mirror"]) == old_hash
        assert sha(origin_home / rows[1]["mirror"]) == sha(files[0])
        ids = {r["id"] for r in events(s)}
    # The two kept lines are the same events; only the replacement lines are new,
    # and nothing of the first generation is lost.
    new_ids = oracle_ids(files) - before_ids
    assert len(new_ids) > 0
    assert report.events_added == len(new_ids)
    assert ids == before_ids | new_ids
    assert len(ids) == n_before + len(new_ids)


def test_shrunk_file_opens_new_generation(user_home, origin_home):
    f = write_claude_corpus(user_home / ".claude", files=1, turns=4, seed=2)[0]
    full_ids = oracle_ids([f])
    sync(origin_home)
    lines = f.read_text().splitlines()
    f.write_text("\n".join(lines[:3]) + "\n")
    sync(origin_home)
    with origin.open_store(origin_home) as s:
        gens = [r[0] for r in s.conn.execute("SELECT generation FROM raw_file ORDER BY generation")]
        assert gens == [0, 1]
        # Nothing is lost: the events of the longer first generation stay.
        assert {r["id"] for r in events(s)} == full_ids


def test_torn_last_line_is_held_back_until_complete(user_home, origin_home):
    f = write_claude_corpus(user_home / ".claude", files=1, turns=3, seed=3)[0]
    data = f.read_bytes()
    lines = data.split(b"\n")[:-1]
    head = b"\n".join(lines[:-1]) + b"\n"
    torn = lines[-1][: len(lines[-1]) // 2]
    f.write_bytes(head + torn)
    sync(origin_home)
    with origin.open_store(origin_home) as s:
        r = s.conn.execute("SELECT * FROM raw_file").fetchone()
        assert r["bytes_ingested"] == len(head)
        assert (origin_home / r["mirror"]).read_bytes() == head
        assert r["parse_errors"] == 0
    f.write_bytes(data)
    sync(origin_home)
    with origin.open_store(origin_home) as s:
        ids = {r["id"] for r in events(s)}
        assert ids == oracle_ids([f])
        r = s.conn.execute("SELECT * FROM raw_file").fetchone()
        assert (origin_home / r["mirror"]).read_bytes() == data
        assert r["parse_errors"] == 0


def test_parse_errors_are_counted_and_the_rest_of_the_file_lands(user_home, origin_home):
    f = write_claude_corpus(user_home / ".claude", files=1, turns=3, seed=4)[0]
    good = f.read_text().splitlines()
    bad = ['{"type": "user", "message": ', "not json at all", '{"a": ' * 5000 + "1" + "}" * 5000, "[1, 2, 3]"]
    f.write_text("\n".join(good[:3] + bad + good[3:]) + "\n")
    report = sync(origin_home)
    assert report.sources["claude-code"]["parse_errors"] >= 2
    with origin.open_store(origin_home) as s:
        ids = {r["id"] for r in events(s)}
        good_file = user_home / "good.jsonl"
        good_file.write_text("\n".join(good) + "\n")
        assert ids == oracle_ids([good_file])
        st = origin.status(s)
        assert st["sources"]["claude-code"]["parse_errors"] == report.sources["claude-code"]["parse_errors"]
        reasons = s.conn.execute("SELECT line, reason FROM parse_error").fetchall()
        assert {r["line"] for r in reasons} >= {4, 5}


def test_lone_surrogates_cjk_empty_and_huge_lines(user_home, origin_home, cli):
    folder = user_home / ".claude" / "projects" / "-w"
    folder.mkdir(parents=True)
    (folder / "empty.jsonl").write_bytes(b"")
    rec = lambda u, text: json.dumps({  # noqa: E731
        "type": "user", "uuid": u, "sessionId": "s1", "cwd": "/w", "timestamp": "2026-03-01T10:00:00Z",
        "message": {"role": "user", "content": text}})
    huge = "megabyte " * 700_000
    lines = [
        rec("u1", "broken emoji \ud83d here and 数据库迁移 done"),
        rec("u2", huge + " needle-in-a-huge-line"),
        rec("u3", "ok"),
    ]
    (folder / "s1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = sync(origin_home)
    assert report.sources["claude-code"]["parse_errors"] == 0
    assert report.events_added == 3
    code, res = cli("search", "broken", "emoji", "--json")
    assert code == 0 and [e["id"] for e in res["events"]] == ["claude-code:u1"]
    assert "\ufffd" in res["events"][0]["snippet"]
    code, res = cli("search", "数据库迁移", "--json")
    assert [e["id"] for e in res["events"]] == ["claude-code:u1"]
    code, res = cli("search", "needle-in-a-huge-line", "--json")
    assert [e["id"] for e in res["events"]] == ["claude-code:u2"]
    code, res = cli("show", "claude-code:u1", "--json")
    assert code == 0 and "\\ud83d" in res["sources"][0]["raw"]


def test_zstd_source_is_mirrored_decompressed_across_frames(user_home, origin_home, monkeypatch):
    zstd = pytest.importorskip("zstandard")
    import adapters

    class Plain(adapters.Adapter):
        name = "claude-code"

        def discover(self, env, home):
            for p in sorted((home / "z").glob("*.zst")):
                yield adapters.SourceFile(path=str(p), rel=p.name, compressed="zstd")

        def parse(self, line, ctx):
            d = adapters.load_json_line(line)
            return [adapters.Record(id=d["id"], session="z", kind="message", role="user", text=d["t"])]

    monkeypatch.setitem(adapters.ADAPTERS, "claude-code", Plain())
    (user_home / "z").mkdir()
    lines = [json.dumps({"id": f"r{i}", "t": f"frame text {i}"}) + "\n" for i in range(300)]
    c = zstd.ZstdCompressor()
    blob = b"".join(c.compress("".join(lines[i : i + 100]).encode()) for i in range(0, 300, 100))
    (user_home / "z" / "a.jsonl.zst").write_bytes(blob)
    report = sync(origin_home)
    assert report.events_added == 300
    with origin.open_store(origin_home) as s:
        r = s.conn.execute("SELECT * FROM raw_file").fetchone()
        assert (origin_home / r["mirror"]).read_text() == "".join(lines)
        assert r["compression"] == "zstd"
        row = s.conn.execute("SELECT * FROM event WHERE id = 'claude-code:r250'").fetchone()
        assert origin.read_raw(s, r["mirror"], row["offset"]) == lines[250].rstrip("\n")
    assert sync(origin_home).events_added == 0


def _sync_proc(origin_home: Path, home: Path, crash: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "HOME": str(home)}
    env.pop("ORIGIN_CRASH_AT", None)
    if crash:
        env["ORIGIN_CRASH_AT"] = crash
    return subprocess.Popen([sys.executable, str(ROOT / "origin.py"), "sync", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _check_store(origin_home: Path, files: list[Path]) -> None:
    with origin.open_store(origin_home) as s:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = [r["id"] for r in events(s)]
        assert len(ids) == len(set(ids))
        assert set(ids) == oracle_ids(files)
        for r in s.conn.execute("SELECT * FROM raw_file"):
            assert sha(origin_home / r["mirror"]) == sha(Path(r["path"]))
        for r in events(s)[::7]:
            assert read_line(origin_home / r["mirror"], r["line"]) == read_line(Path(r["src"]), r["line"])


@pytest.mark.parametrize("crash", [
    "registered:1", "registered:3", "mirror-appended:1", "mirror-appended:4",
    "events-inserted:2", "before-commit:1", "before-commit:5", "committed:3",
])
def test_sync_killed_at_a_labelled_step_then_rerun_loses_and_duplicates_nothing(user_home, origin_home, crash):
    files = write_claude_corpus(user_home / ".claude", files=8, turns=20, seed=5)
    p = _sync_proc(origin_home, user_home, crash)
    p.communicate(timeout=120)
    assert p.returncode == 137
    p = _sync_proc(origin_home, user_home)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    _check_store(origin_home, files)


def test_sync_killed_with_sigkill_at_random_moments_then_rerun(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=30, turns=40, seed=6)
    for delay in (0.15, 0.3, 0.45, 0.6, 0.8):
        p = _sync_proc(origin_home, user_home)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    p = _sync_proc(origin_home, user_home)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    _check_store(origin_home, files)


def test_four_processes_syncing_one_store_at_once(user_home, origin_home):
    files = write_claude_corpus(user_home / ".claude", files=24, turns=25, seed=8)
    origin.open_store(origin_home).close()  # schema first, so the race is about ingest
    procs = [_sync_proc(origin_home, user_home) for _ in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert b"locked" not in err
    added = sum(json.loads(out)["events_added"] for out, _ in outs)
    assert added == len(oracle_ids(files))
    _check_store(origin_home, files)


def test_a_sync_is_skipped_only_while_stat_shows_nothing_a_sync_would_take_in(store, claude_root, user_home,
                                                                              monkeypatch):
    """sync_if_changed trusts the last whole sync's listing while every path it
    looked at and every archived file stat the same; each change below makes
    it sync, and the sync takes the change in."""
    # Folders changed before a sync's start count as settled (no 2 s wait).
    margin = origin.LOOKED_MARGIN_NS
    monkeypatch.setattr(origin, "LOOKED_MARGIN_NS", 0)
    demo = claude_root / "projects" / "-path-to-Demo"
    log = sorted(demo.glob("*.jsonl"))[0]

    def settled() -> None:
        age_all(user_home, 7200)
        origin.sync(store)
        assert origin.unchanged_since_sync(store)
        assert origin.sync_if_changed(store).unchanged

    # Folders changed just before a sync are not trusted (coarse mtimes).
    monkeypatch.setattr(origin, "LOOKED_MARGIN_NS", margin)
    origin.sync(store)
    assert not origin.unchanged_since_sync(store)
    monkeypatch.setattr(origin, "LOOKED_MARGIN_NS", 0)

    # An appended line: its folder's mtime does not move, the file's size does.
    settled()
    folder_mtime = demo.stat().st_mtime_ns
    with open(log, "ab") as fh:
        fh.write(appended_claude_line(log, "appended where the folder says nothing"))
    assert demo.stat().st_mtime_ns == folder_mtime
    report = origin.sync_if_changed(store)
    assert not report.unchanged and report.events_added == 1

    # A new file in a known folder whose mtime is then set back (ctime moves).
    settled()
    st = demo.stat()
    shutil.copy(log, demo / "0f0f0f0f-new-session.jsonl")
    os.utime(demo, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = origin.sync_if_changed(store)
    assert not report.unchanged and report.sources["claude-code"]["files"] >= 1
    assert store.conn.execute("SELECT count(*) FROM raw_file WHERE path LIKE '%0f0f0f0f-new-session.jsonl'"
                              ).fetchone()[0] == 1

    # A new project folder, and an agent's folder that did not exist.
    settled()
    shutil.copytree(demo, claude_root / "projects" / "-path-to-Other")
    assert not origin.sync_if_changed(store).unchanged
    settled()
    day = user_home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    shutil.copy(sorted(LOCALPUSH.glob("rollout-*.jsonl"))[0], day)
    report = origin.sync_if_changed(store)
    assert not report.unchanged and report.sources["codex"]["events_added"] > 0

    # A rewrite: the file replaced by a shorter one under the same name.
    settled()
    data = log.read_bytes()
    log.unlink()
    log.write_bytes(data[: len(data) // 2].rsplit(b"\n", 1)[0] + b"\n")
    os.utime(demo, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not origin.unchanged_since_sync(store)
    origin.sync_if_changed(store)
    assert store.conn.execute("SELECT max(generation) FROM raw_file WHERE path = ?", (str(log),)).fetchone()[0] == 1

    # Discovery pointed elsewhere (an agent's folder variable): not trusted.
    settled()
    monkeypatch.setenv("CODEX_HOME", str(user_home / "elsewhere"))
    assert not origin.unchanged_since_sync(store)
    monkeypatch.delenv("CODEX_HOME")
    assert origin.unchanged_since_sync(store)

    # Another process's sync that took something in: the listing kept is not this store's state.
    settled()
    with open(log, "ab") as fh:
        fh.write(appended_claude_line(log, "taken in by a sync of one agent"))
    origin.sync(store, sources=["claude-code"])
    assert not origin.unchanged_since_sync(store)

    # A record older than LOOKED_MAX_AGE_MS vouches for nothing: a change stat
    # cannot see waits at most that long.
    settled()
    monkeypatch.setattr(origin, "now_ms", lambda real=origin.now_ms: real() + origin.LOOKED_MAX_AGE_MS + 1)
    assert not origin.unchanged_since_sync(store)
