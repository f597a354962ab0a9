"""Helpers of the shipping tests: a bare user environment, fixture homes, an MCP handshake."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The tools every `origin mcp` offers.
MCP_TOOLS = {"search", "timeline", "get", "sources", "remember", "correct", "forget"}


def bare_env(tmp_path: Path, **extra: str) -> dict:
    """The environment of a fresh login: PATH, HOME, nothing of ours."""
    home = tmp_path / "user"
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **extra}


def fixture_home(tmp_path: Path, **extra: str) -> dict:
    """Every agent's fixtures (a zstd rollout among them) under a fresh HOME; return its environment."""
    from helpers import LAYOUTS

    env = bare_env(tmp_path, ORIGIN_HOME=str(tmp_path / "store"), **extra)
    for lay in LAYOUTS.values():
        env.update(lay(Path(env["HOME"])) or {})
    return env


def mcp_session(argv: list[str], env: dict, calls: list[tuple[str, dict]]) -> tuple[subprocess.Popen, list[dict]]:
    """Start an MCP server on stdio, initialize, send calls; return it (still open) and the answers."""
    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    send = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "ship-test", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    send += [{"jsonrpc": "2.0", "id": i, "method": m, "params": params} for i, (m, params) in enumerate(calls, 1)]
    for msg in send:
        p.stdin.write(json.dumps(msg) + "\n")
    p.stdin.flush()
    answers: dict[int, dict] = {}
    while len(answers) < len(calls) + 1:
        line = p.stdout.readline()
        if not line:
            p.kill()
            raise AssertionError(f"the MCP server closed its output: {p.stderr.read()[-2000:]}")
        msg = json.loads(line)
        if "id" in msg and ("result" in msg or "error" in msg):  # not a notification
            answers[msg["id"]] = msg
    return p, [answers[i] for i in range(1, len(calls) + 1)]


def close(p: subprocess.Popen) -> int:
    """End an MCP session the way a client does: close its input."""
    p.stdin.close()
    return p.wait(timeout=120)


#: A writer process: grows Claude files, syncs and remembers in rounds until
#: the stop file appears; writes the number of finished rounds to a file.
LOADER = r"""
import json, os, random, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
import origin
from reliability_tools import grow_claude_files, origin_env
home, store_home, files, rounds, stop = Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4]), \
    Path(sys.argv[5]), Path(sys.argv[6])
rng = random.Random(5)
env = origin_env(home, store_home)
n = 0
with origin.open_store(store_home) as store:
    while not stop.exists():
        grow_claude_files([Path(f) for f in files], rng, turns=3)
        origin.sync(store, env=env, home=home)
        hit = origin.search_events(store, "schema", limit=1)
        if hit:
            origin.remember(store, kind="memory", text=f"round {n} note", sources=[{"event": hit[0]["id"]}],
                            author="loader")
        n += 1
        # Written aside and renamed, so a reader never sees the file empty.
        rounds.with_suffix(".new").write_text(str(n))
        os.replace(rounds.with_suffix(".new"), rounds)
"""


def start_loader(home: Path, origin_home: Path, env: dict, files: list[Path], rounds: Path,
                 stop: Path) -> subprocess.Popen:
    """Start LOADER on a store; it counts its rounds in the file rounds and stops when stop exists."""
    from reliability_tools import origin_env

    return subprocess.Popen([sys.executable, "-c", LOADER, str(ROOT), str(home), str(origin_home),
                             json.dumps([str(f) for f in files]), str(rounds), str(stop)],
                            env=origin_env(home, origin_home, env), stderr=subprocess.PIPE)


def read_rounds(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def rows(db: Path, sql: str) -> list:
    """Rows of one query on an SQLite file, opened read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def wait_for(predicate, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)
