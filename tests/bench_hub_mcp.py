"""Benchmark MCP over HTTP on the hub, and the forwarding proxy.

Run with ``make bench`` (after the other hub figures) or
``python tests/bench_hub_mcp.py``.  The store is ``BENCH_STORE`` (an
existing ORIGIN_HOME, e.g. one `make bench` built) or else one synced from
the real fixtures in tests/fixtures; ``BENCH_LOAD_S`` sets the length of the
load phase (default 30 s).  Every figure is taken in this run:

- `search` p50 over HTTP (one kept-alive connection, one POST per call)
  against the same search in process (``origin.search``), and against the
  whole tool call in process (``run_tool``: checks, readout, JSON);
- `get` p50 over HTTP;
- the proxy's overhead: `get` through `origin mcp` on a device with a hub
  (the SDK's stdio client) against `get` with the SDK's HTTP client straight
  to the hub;
- load: 16 HTTP clients of mixed reads, 2 writers (`remember`) and one
  device appending to its log and pushing, all at once: errors, "database
  is locked", and the reads' p95; the CPU the hub used (its own process and
  its tool workers) and their memory at the end.

The writers quote the start of a real event's text, but the newest event
holding it is a line the device wrote and pushed just before the load (the
same start, then a tag of this run), so that is what their entries cite;
afterwards the bench forgets that line, which forgets every entry the run
wrote and leaves a kept store's real events as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx2
import psutil
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import origin  # noqa: E402
from bench_hub import ServedHub, _token  # noqa: E402
from helpers import LAYOUTS  # noqa: E402

#: The search of the figures: a word of the fixtures, or on a bench store
#: the 2-term AND query the stdio MCP figures of tests/bench.py use.
QUERY = "type-check"


def p(samples: list[float], q: float) -> float:
    """The q quantile of samples, in ms."""
    return statistics.quantiles(samples, n=100)[int(q * 100) - 1] * 1000 if len(samples) > 1 else samples[0] * 1000


def timed(fn, n: int) -> list[float]:
    return timed_turns([fn], n)[0]


def timed_turns(fns: list, n: int) -> list[list[float]]:
    """Time each of fns n times, taking them in turns, so a change in the
    machine's load between them cannot tilt their ratio."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        for fn, times in zip(fns, out):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return out


def fixture_store(work: Path) -> tuple[Path, Path]:
    """A HOME with every agent's fixtures and a store synced from it."""
    user, store = work / "user", work / "hub"
    user.mkdir()
    env = {}
    for lay in LAYOUTS.values():
        env.update(lay(user) or {})
    old = {k: os.environ.get(k) for k in ("HOME", *env)}
    os.environ.update(HOME=str(user), **env)
    try:
        with origin.open_store(store) as s:
            origin.sync(s)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return user, store


def call(tools: origin.HubTools, name: str, args: dict) -> dict:
    text, is_error = tools.call(name, args)
    if is_error:
        raise RuntimeError(text)
    return json.loads(text)


async def timed_gets(c, ids: list[str], n: int) -> list[float]:
    """Time n `get` calls of one client, after one untimed call (the proxy's first syncs and pushes)."""
    await c.call_tool("get", {"ids": ids})
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await c.call_tool("get", {"ids": ids})
        out.append(time.perf_counter() - t)
    return out


def sdk_get_times(url: str, token: str, ids: list[str], n: int) -> list[float]:
    async def main():
        hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with hc, Client(streamable_http_client(url, http_client=hc), mode="2026-07-28", cache=None) as c:
            return await timed_gets(c, ids, n)

    return anyio.run(main)


def proxy_get_times(device: Path, user: Path, ids: list[str], n: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GROK_HOME")}
    env.update(ORIGIN_HOME=str(device), HOME=str(user))
    params = StdioServerParameters(command=sys.executable, args=[str(ROOT / "origin.py"), "mcp"], env=env)

    async def main():
        async with Client(params, mode="auto") as c:
            return await timed_gets(c, ids, n)

    return anyio.run(main)


def _worker(role: str, i: int, job: dict) -> dict:
    """One load client, in a process of its own (see ``load``); return what it saw."""
    cfg = origin.HubConfig(job["url"], job["token"], "benchdev")
    print("ready", flush=True)
    start = float(sys.stdin.readline())  # all clients begin together, once every process has started
    while time.time() < start:
        time.sleep(0.01)
    stop = start + job["seconds"]
    out = {"reads": [], "errors": [], "writes": 0, "pushes": 0, "cpu": -cpu_seconds()}
    ids = job["ids"]
    if role == "reader":
        tools = origin.HubTools(cfg)
        mix = [("search", {"query": QUERY}), ("get", {"ids": ids[:2]}), ("timeline", {}),
               ("search", {"scope": "entries"}), ("sources", {"id": ids[0]})]
        k = i
        while time.time() < stop:
            name, args = mix[k % len(mix)]
            k += 1
            t = time.perf_counter()
            try:
                call(tools, name, args)
                out["reads"].append((name if name != "search" or "query" in args else "entries", time.perf_counter() - t))
            except Exception as e:  # counted, never fatal
                out["errors"].append(f"{name}: {e}")
        tools.close()
    elif role == "writer":
        tools = origin.HubTools(cfg, client=f"bench-writer-{i}")
        cited = set()
        while time.time() < stop:
            try:
                entry = call(tools, "remember", {"kind": "memory", "text": f"Bench note {uuid.uuid4()} on {QUERY}.",
                                                 "sources": [{"quote": job["quote"]}]})
                cited.update(src["event"] for src in entry["entry"]["sources"])
                out["writes"] += 1
            except Exception as e:
                out["errors"].append(f"remember: {e}")
        out["cited"] = sorted(cited)
        tools.close()
    else:  # the device: append a line to its Claude Code log, sync, push
        log, last = claude_log(Path(job["user"]))
        with origin.open_store(Path(job["device"])) as store:
            while time.time() < stop:
                append_claude_line(log, last, f"bench line {uuid.uuid4()}")
                try:
                    origin.sync(store)
                    origin.push(store, cfg, discover=False)
                    out["pushes"] += 1
                except Exception as e:
                    out["errors"].append(f"push: {e}")
    out["cpu"] += cpu_seconds()
    return out


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def hub_processes(pid: int) -> list[psutil.Process]:
    """The hub's process and its tool workers."""
    hub = psutil.Process(pid)
    return [hub, *hub.children()]


def hub_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) used so far by the hub and each of its workers, by pid."""
    out = {}
    for proc in hub_processes(pid):
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except psutil.Error:
            pass  # a worker that has just gone
    return out


def claude_log(user: Path) -> tuple[Path, dict]:
    """The device's Claude Code log and its last line."""
    log = next((user / ".claude" / "projects").rglob("*.jsonl"))
    return log, json.loads(log.read_text(encoding="utf-8").splitlines()[-1])


def append_claude_line(log: Path, last: dict, text: str, *, now: bool = False) -> None:
    """Append a user line holding text, shaped as last (and stamped now, if asked)."""
    line = {**last, "uuid": str(uuid.uuid4()), "type": "user", "message": {"role": "user", "content": text}}
    if now:
        line["timestamp"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    with log.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def push_line(device: Path, user: Path, cfg: origin.HubConfig, text: str) -> None:
    """Write text as a new line of the device's log, stamped now, then sync and push it to the hub."""
    append_claude_line(*claude_log(user), text, now=True)
    old = os.environ.get("HOME")
    os.environ["HOME"] = str(user)
    try:
        with origin.open_store(device) as store:
            origin.sync(store)
            origin.push(store, cfg, discover=False)
    finally:
        os.environ.pop("HOME") if old is None else os.environ.__setitem__("HOME", old)


def forget_run(home: Path, cited: set[str], tag: str) -> tuple[int, list[str]]:
    """Forget the run's own line (and so every entry citing it); return (entries forgotten, foreign ids)."""
    forgotten, foreign = 0, []
    with origin.open_store(home) as s:
        for event_id in sorted(cited):
            if tag in origin.get_event(s, event_id)["text"]:
                forgotten += len(origin.forget(s, event_id, reason="bench cleanup")["forgotten_entries"])
            else:
                foreign.append(event_id)  # a real event: never forgotten by the bench
    return forgotten, foreign


def load(cfg: origin.HubConfig, device: Path, user: Path, seconds: float, ids: list[str], quote: str,
         hub_pid: int) -> dict:
    """16 readers, 2 writers and a pushing device against the hub, all at once.

    Each client is a process of its own, as agents on a machine are: threads
    of one process would also measure that process's own lock (one client's
    sync holding it stalls the others' clocks), which a hub never sees.
    """
    job = {"url": cfg.url, "token": cfg.token, "seconds": seconds, "ids": ids, "quote": quote,
           "user": str(user), "device": str(device)}
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GROK_HOME")}
    env.update(HOME=str(user), ORIGIN_HOME=str(device), BENCH_QUERY=QUERY)
    roles = [("reader", i) for i in range(16)] + [("writer", i) for i in range(2)] + [("device", 0)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", role, str(i), json.dumps(job)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for role, i in roles]
    for pr in procs:
        assert pr.stdout.readline().strip() == "ready", "a load client did not start"
    start = time.time() + 0.5
    for pr in procs:
        pr.stdin.write(f"{start}\n")
        pr.stdin.close()
    while time.time() < start:
        time.sleep(0.01)
    before = hub_cpu(hub_pid)
    time.sleep(seconds)
    after = hub_cpu(hub_pid)
    used = sum(t - before.get(pid, 0.0) for pid, t in after.items())
    rss = [proc.memory_info().rss / 1e6 for proc in hub_processes(hub_pid)]
    seen = [json.loads(pr.stdout.read()) for pr in procs]
    for pr in procs:
        pr.wait()
    reads = [x for w in seen for _name, x in w["reads"]]
    kinds: dict[str, list[float]] = {}
    for w in seen:
        for name, x in w["reads"]:
            kinds.setdefault(name, []).append(x)
    errors = [e for w in seen for e in w["errors"]]
    return {"reads": len(reads), "read_p50": p(reads, 0.5), "read_p95": p(reads, 0.95),
            "cited": {c for w in seen for c in w.get("cited", [])},
            "by_tool": ", ".join(f"{k} {p(v, 0.5):.0f}/{p(v, 0.95):.0f}" for k, v in sorted(kinds.items())),
            "writes": sum(w["writes"] for w in seen), "pushes": sum(w["pushes"] for w in seen), "errors": errors,
            "locked": sum("locked" in e for e in errors), "hub_cpu": used, "hub_rss": rss,
            "client_cpu": sum(w["cpu"] for w in seen), "cores": os.cpu_count() or 1}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="origin-bench-hub-mcp-"))
    try:
        user, store_home = fixture_store(work)
        if os.environ.get("BENCH_STORE"):
            global QUERY
            from bench import query_set

            store_home = Path(os.environ["BENCH_STORE"])
            QUERY = query_set()[3][1]
        # The hub merges its index's segments once idle: measure that state
        # (it also stays so through the load, whose pushes keep it busy).
        origin.tidy_index(store_home)
        with origin.open_store(store_home) as s:
            events = s.conn.execute("SELECT count(*) FROM event").fetchone()[0]
            res = origin.search(s, QUERY, scope="events", limit=10)
            hits = len(res["events"])
            ids = [e["id"] for e in res["events"]][:3] or [r[0] for r in s.conn.execute(
                "SELECT id FROM event WHERE kind = 'message' LIMIT 3")]
            quoted = origin.get_event(s, ids[0])["text"]
            quote = quoted[:40]
        tag = f"bench run {uuid.uuid4().hex}"
        hub = ServedHub(store_home)
        tokens = [f"bench-{uuid.uuid4().hex[:8]}", f"dev-{uuid.uuid4().hex[:8]}"]
        try:
            token = _token(store_home, tokens[0])
            cfg = origin.HubConfig(hub.url, token, "bench")
            tools = origin.HubTools(cfg)
            call(tools, "search", {"query": QUERY})
            with origin.open_store(store_home) as s:
                # The same search in process, as the core call and as the tool
                # call /mcp runs (argument checks, readout with secrets masked,
                # the JSON), in turns with the one over HTTP.
                inproc, tool_call, http_search = timed_turns([
                    lambda: origin.search(s, QUERY, limit=10),
                    lambda: origin.run_tool("search", {"query": QUERY, "limit": 10}, "bench@bench",
                                            lambda tool, args: tool.run(s, args, "bench@bench"),
                                            serialise=origin.mcp_json),
                    lambda: call(tools, "search", {"query": QUERY, "limit": 10})], 50)
            http_get = timed(lambda: call(tools, "get", {"ids": ids[:1]}), 100)
            tools.close()
            direct = sdk_get_times(hub.url + "/mcp", token, ids[:1], 50)
            device = work / "device"
            dev_token = _token(store_home, tokens[1])
            origin.save_hub_config(device, origin.HubConfig(hub.url, dev_token, "benchdev"))
            proxied = proxy_get_times(device, user, ids[:1], 50)
            seconds = float(os.environ.get("BENCH_LOAD_S", "30"))
            dev_cfg = origin.HubConfig(hub.url, dev_token, "benchdev")
            push_line(device, user, dev_cfg, f"{quoted[:200]} ({tag})")
            loaded = load(dev_cfg, device, user, seconds, ids, quote, hub.proc.pid)
        finally:
            hub.stop()
            with origin.open_store(store_home) as s:  # a kept store keeps no bench tokens alive
                for name in tokens:
                    if any(t["name"] == name and not t["revoked"] for t in origin.list_tokens(s)):
                        origin.revoke_token(s, name)
        cleaned, foreign = forget_run(store_home, loaded["cited"], tag)
        rows = [
            ("store", f"{events:,} events ({'BENCH_STORE' if os.environ.get('BENCH_STORE') else 'the fixtures'}); "
                      f"search {QUERY!r}, {hits} hits"),
            ("search in process, p50", f"{p(inproc, 0.5):.2f} ms"),
            ("search tool call in process (checks, readout, JSON), p50", f"{p(tool_call, 0.5):.2f} ms"),
            ("search over HTTP /mcp, p50", f"{p(http_search, 0.5):.2f} ms = "
                                           f"{p(http_search, 0.5) / p(inproc, 0.5):.2f} x the search in process, "
                                           f"{p(http_search, 0.5) / p(tool_call, 0.5):.2f} x the tool call"),
            ("get over HTTP /mcp, p50", f"{p(http_get, 0.5):.2f} ms"),
            ("get with the SDK's HTTP client, p50", f"{p(direct, 0.5):.2f} ms"),
            ("get through the stdio proxy, p50", f"{p(proxied, 0.5):.2f} ms ({p(proxied, 0.5) - p(direct, 0.5):+.2f} ms)"),
            (f"load {seconds:.0f} s: 16 readers, 2 writers, 1 pushing device",
             f"{loaded['reads']:,} reads (p50 {loaded['read_p50']:.1f} ms, p95 {loaded['read_p95']:.1f} ms), "
             f"{loaded['writes']} remembers, {loaded['pushes']} pushes, {len(loaded['errors'])} errors, "
             f"{loaded['locked']} 'database is locked'"),
            ("  reads by tool, p50/p95 ms", loaded["by_tool"]),
            ("  CPU used in the load", f"hub {loaded['hub_cpu']:.1f} s (its process and its tool workers), "
                                       f"the 19 clients {loaded['client_cpu']:.1f} s, "
                                       f"of {loaded['cores'] * seconds:.0f} core-seconds"),
            ("  hub memory at the end of the load", f"{sum(loaded['hub_rss']):.0f} MB resident: its process "
                                                    f"{loaded['hub_rss'][0]:.0f} MB and {len(loaded['hub_rss']) - 1} "
                                                    f"tool workers of {', '.join(f'{m:.0f}' for m in loaded['hub_rss'][1:]) or '-'} MB"),
        ]
        width = max(len(r[0]) for r in rows)
        for k, v in rows:
            print(f"{k:<{width}}  {v}")
        print(f"  the run's {cleaned} entries forgotten with the line they cite"
              + (f"; the writers also cited real events, left alone: {', '.join(foreign)}" if foreign else ""))
        for e in loaded["errors"][:5]:
            print(f"  error: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        QUERY = os.environ.get("BENCH_QUERY", QUERY)
        print(json.dumps(_worker(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))))
    else:
        main()
