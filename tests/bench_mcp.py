"""MCP figures: `get` round trips over stdio, and the freshness sync's cost.

``bench_mcp(origin_home, home)`` expects an archive already synced from the
agent logs under ``home``; run directly, it builds one from the fixtures.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import origin  # noqa: E402

SERVER = [sys.executable, str(ROOT / "origin.py"), "mcp"]


def _ms(samples: list[float], q: float) -> float:
    return round(statistics.quantiles(samples, n=100)[int(q * 100) - 1] * 1000, 3) if len(samples) > 1 \
        else round(samples[0] * 1000, 3)


def bench_mcp(origin_home: Path, home: Path, n: int = 200, query: str | None = None) -> dict:
    """Measure `get` (and `search` for query) over stdio, and a no-change sync (ms)."""
    with origin.open_store(Path(origin_home)) as store:
        origin.sync(store, env={**os.environ, "HOME": str(home)}, home=Path(home))
        row = store.conn.execute("SELECT id FROM event WHERE kind = 'message' ORDER BY seq LIMIT 1").fetchone()
        if row is None:
            raise RuntimeError(f"no events archived from {home}: nothing to get")
        syncs = []
        for _ in range(max(3, n // 20)):
            t0 = time.perf_counter()
            origin.sync(store, env={**os.environ, "HOME": str(home)}, home=Path(home))
            syncs.append(time.perf_counter() - t0)
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "HOME": str(home)}
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=env, cwd=str(ROOT))

    async def timed(client, tool: str, args: dict) -> list[float]:
        await client.call_tool(tool, args)  # warm-up (the first call also waits for a freshness sync)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            result = await client.call_tool(tool, args)
            times.append(time.perf_counter() - t0)
            assert not result.is_error, result.content[0].text
        return times

    async def run() -> tuple[list[float], list[float]]:
        async with Client(params) as client:
            gets = await timed(client, "get", {"ids": [row[0]]})
            searches = await timed(client, "search", {"query": query, "scope": "events"}) if query else []
            return gets, searches

    gets, searches = anyio.run(run)
    out = {"get_calls": n, "get_p50_ms": _ms(gets, 0.5), "get_p95_ms": _ms(gets, 0.95),
           "sync_nochange_p50_ms": _ms(syncs, 0.5), "sync_runs": len(syncs)}
    if searches:
        out.update(search_p50_ms=_ms(searches, 0.5), search_p95_ms=_ms(searches, 0.95))
    return out


if __name__ == "__main__":
    tmp = Path(tempfile.mkdtemp())
    try:
        projects = tmp / "home" / ".claude" / "projects"
        shutil.copytree(ROOT / "tests" / "fixtures" / "claude-code" / "claude-code-viewer" / "sample-project",
                        projects / "-path-to-Demo")
        print(bench_mcp(tmp / "origin", tmp / "home"))
    finally:
        shutil.rmtree(tmp)
