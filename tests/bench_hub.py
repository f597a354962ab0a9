"""Benchmark the hub: push rate against local ingest, a no-op push over
10,000 mirrors, the hub's peak RSS, and pulling 10,000 tombstones.

Run with ``make bench`` (after the store figures) or ``python tests/bench_hub.py``;
``BENCH_MB`` sets the corpus size as for tests/bench.py, whose cached
corpora it reuses.  Every figure is taken in this run, so each reads as a
ratio to a neighbour measured on the same machine at the same time.

- local ingest: a fresh hub home syncs the corpus itself (`origin sync`,
  index included);
- push: a device that synced the same corpus pushes it to a fresh hub
  (`origin serve` on loopback, a child process), timed until the hub's
  index has caught up too, so both sides do the same work;
- no-op push: `push()` when the hub holds everything, over the archive of
  10,000 small files, and the whole `origin push` command in a fresh
  process (which skips its sync when stat shows nothing new, beside what a
  no-op sync costs in process);
- tombstones: 10,000 tombstones on the hub, pulled and applied by a device.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import origin  # noqa: E402
from bench import (_PEAK_RSS, AGENT_VARS, agent_env, corpus_dir, corpus_sizes, origin_command, run_sync,  # noqa: E402
                   small_corpus_dir, startup_env, table)

TOMBSTONES = 10_000


class ServedHub:
    """`origin serve` in a child process that reports its peak RSS at exit."""

    def __init__(self, home: Path):
        env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
        env.update(ORIGIN_HOME=str(home), HOME=str(home))
        self.proc = subprocess.Popen([sys.executable, "-c", _PEAK_RSS, str(ROOT / "origin.py"), "serve", "--listen",
                                      "127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
        self.url = None
        self.lines: list[str] = []
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                if " ms " not in line and "/v1/" not in line:
                    self.lines.append(line)
                if " on http://" in line and self.url is None:
                    self.url = line.rsplit(" on ", 1)[1].strip()
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=drain, daemon=True)
        self.thread.start()
        ready.wait(120)
        if not self.url:
            raise SystemExit("the hub did not start:\n" + "".join(self.lines))

    def stop(self) -> int:
        """Stop the hub; return its peak RSS in KB."""
        self.proc.terminate()
        self.proc.wait(120)
        self.thread.join(30)
        rss = [int(x.split()[1]) for x in self.lines if x.startswith("peak-rss-kb ")]
        return rss[-1] if rss else 0


def _token(home: Path, name: str) -> str:
    with origin.open_store(home) as s:
        return origin.create_token(s, name)


def _wait_indexed(home: Path) -> None:
    with origin.open_store(home) as s:
        while origin.index_lagging(s):
            time.sleep(0.05)


def _device_and_hub(work: Path, env: dict, name: str) -> tuple[Path, Path, ServedHub, origin.HubConfig]:
    """Sync a device store from env, start an empty hub; return both and the connection."""
    device = work / f"{name}-device"
    run_sync(device, env)
    hub_home = work / f"{name}-hub"
    hub = ServedHub(hub_home)
    return device, hub_home, hub, origin.HubConfig(hub.url, _token(hub_home, name), name)


def bench_push(work: Path, user: Path, cursor: Path, raw: int) -> dict:
    env = agent_env(user, cursor)
    local_home = work / "local-hub"
    local_wall, _rss, local = run_sync(local_home, env)
    device, hub_home, hub, cfg = _device_and_hub(work, env, "bench")
    try:
        with origin.open_store(device) as dev:
            t = time.perf_counter()
            report = origin.push(dev, cfg, discover=False)
            push_only = time.perf_counter() - t
            _wait_indexed(hub_home)
            push_wall = time.perf_counter() - t
    finally:
        rss_kb = hub.stop()
    with sqlite3.connect(hub_home / "origin.db") as h, sqlite3.connect(local_home / "origin.db") as lo:
        same = {r[0] for r in h.execute("SELECT id FROM event")} == {r[0] for r in lo.execute("SELECT id FROM event")}
    return {"raw": raw, "local_wall": local_wall, "local_events": local["events_added"], "push_only": push_only,
            "push_wall": push_wall, "sent": report["bytes_sent"], "chunks": report["chunks"], "hub_rss_kb": rss_kb,
            "same_ids": same}


def bench_noop_push(work: Path, reps: int = 7) -> dict:
    src = small_corpus_dir()
    user = work / "small"
    shutil.copytree(src / "home", user)
    env = agent_env(user, user / "no-cursor")
    device, _hub_home, hub, cfg = _device_and_hub(work, env, "small")
    key = origin._confirmed_key(cfg)
    try:
        with origin.open_store(device) as dev:
            origin.push(dev, cfg, discover=False)
            files = len(origin.local_files(dev))
            checked, trusted = [], []
            client = origin.HubClient(cfg)
            for _ in range(reps):
                # The hub's last word forgotten: the push compares cursor digests.
                with origin.transaction(dev.conn) as c:
                    c.execute("DELETE FROM setting WHERE key = ?", (key,))
                t = time.perf_counter()
                r = origin.push(dev, cfg, client=client)
                checked.append((time.perf_counter() - t) * 1000)
                assert r["bytes_sent"] == 0 and r["checked_hub"]
                # Nothing changed since the hub's word: only its forgets are asked for.
                t = time.perf_counter()
                r = origin.push(dev, cfg, client=client)
                trusted.append((time.perf_counter() - t) * 1000)
                assert r["bytes_sent"] == 0 and not r["checked_hub"]
            client.close()
        origin.save_hub_config(device, cfg)
        # The whole command as a user runs it: the installed script, bytecode cached.
        cmd, how = origin_command()
        cli_env = {**startup_env(device), **env, "ORIGIN_HOME": str(device)}
        cli = []
        for i in range(reps + 1):
            t = time.perf_counter()
            p = subprocess.run(cmd + ["push", "--json"], env=cli_env, capture_output=True, text=True)
            if i:  # the first run writes the bytecode
                cli.append((time.perf_counter() - t) * 1000)
            if p.returncode:
                raise SystemExit(p.stderr)
        sync_ms = statistics.median(_noop_sync_ms(device, env) for _ in range(reps))
    finally:
        hub.stop()
    return {"files": files, "push_ms": statistics.median(trusted), "checked_ms": statistics.median(checked),
            "cli_ms": statistics.median(cli), "sync_ms": sync_ms, "how": how}


def _noop_sync_ms(home: Path, env: dict) -> float:
    """One no-op sync of the device in this process, in ms (what `origin push` does before pushing)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with origin.open_store(home) as s:
            t = time.perf_counter()
            origin.sync(s)
            return (time.perf_counter() - t) * 1000
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_tombstones(work: Path, n: int = TOMBSTONES) -> dict:
    """Put n tombstones on a hub (as if forgotten there), pull them on a device."""
    hub_home = work / "tomb-hub"
    with origin.open_store(hub_home) as hs:
        records = [{"seq": i + 1, "uid": f"tmb_{i + 1:016x}", "target": f"claude-code:bench-{i}", "kind": "event",
                    "reason": None, "created_at": origin.now_ms(), "entries": [], "events": [f"claude-code:bench-{i}"],
                    "fingerprints": []} for i in range(n)]
        origin.apply_tombstones(hs, records)
        token = origin.create_token(hs, "tomb")
    hub = ServedHub(hub_home)
    try:
        cfg = origin.HubConfig(hub.url, token, "tomb")
        with origin.open_store(work / "tomb-device") as dev:
            client = origin.HubClient(cfg)
            t = time.perf_counter()
            got = origin.pull_tombstones(dev, client)
            secs = time.perf_counter() - t
            client.close()
            held = dev.conn.execute("SELECT count(*) FROM excluded_event").fetchone()[0]
    finally:
        hub.stop()
    return {"n": got["fetched"], "applied": got["applied"], "excluded": held, "secs": secs}


def main() -> None:
    mb = int(os.environ.get("BENCH_MB", "200"))
    src = corpus_dir(mb)
    work = Path(tempfile.mkdtemp(prefix="origin-bench-hub-"))
    try:
        for var in AGENT_VARS:
            os.environ.pop(var, None)
        user, cursor = work / "user", work / "cursor" / "User"
        shutil.copytree(src / "home", user)
        shutil.copytree(src / "cursor", work / "cursor")
        raw = sum(v["raw"] for v in corpus_sizes(user, cursor).values())
        p = bench_push(work, user, cursor, raw)
        noop = bench_noop_push(work)
        tomb = bench_tombstones(work)
        local_rate = raw / 1e6 / p["local_wall"]
        push_rate = raw / 1e6 / p["push_wall"]
        rows = [
            ("machine", f"{os.cpu_count()} cores, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"),
            ("corpus", f"{raw / 1e6:.0f} MB raw (tests/bench.py's mixed corpus), {p['local_events']:,} events"),
            ("hub ingests the corpus locally (origin sync)", f"{local_rate:.1f} MB/s ({p['local_wall']:.1f} s)"),
            ("push to a loopback hub, until its index caught up",
             f"{push_rate:.1f} MB/s ({p['push_wall']:.1f} s; the push itself {p['push_only']:.1f} s, "
             f"{p['chunks']} chunks, {p['sent'] / 1e6:.0f} MB of mirrors) = {push_rate / local_rate:.2f} x local"),
            ("hub event ids equal the local ingest's", "yes" if p["same_ids"] else "NO"),
            ("peak RSS of the hub during the push", f"{p['hub_rss_kb'] / 1024:.0f} MB"),
            (f"no-op push ({noop['files']:,} mirrors), push() in process",
             f"{noop['push_ms']:.0f} ms with nothing changed since the hub's last word; {noop['checked_ms']:.0f} ms "
             "comparing cursor digests with the hub"),
            (f"no-op `origin push` ({noop['files']:,} mirrors), whole command",
             f"{noop['cli_ms']:.0f} ms, its sync skipped (a no-op sync in process: {noop['sync_ms']:.0f} ms; "
             f"run as {noop['how']}; "
             f"load average {os.getloadavg()[0]:.1f})"),
            (f"pull and apply {tomb['n']:,} tombstones", f"{tomb['secs'] * 1000:.0f} ms ({tomb['excluded']:,} "
                                                         "events excluded on the device)"),
        ]
        table(rows)
        print(json.dumps({"push_vs_local": push_rate / local_rate, "noop_push_ms": noop["push_ms"],
                          "hub_rss_mb": p["hub_rss_kb"] / 1024, "tombstones_s": tomb["secs"]}), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
