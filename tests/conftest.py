"""Shared fixtures: every test gets its own ORIGIN_HOME and HOME under tmp_path."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import adapters  # noqa: E402
import origin  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"

#: Variables that point discovery somewhere (every agent's, from the table
#: of agents); cleared so no test sees real logs.
AGENT_VARS = (*dict.fromkeys(v for a in adapters.ADAPTERS.values() for v in a.env_vars), "APPDATA", "ORIGIN_CRASH_AT")


def pytest_report_header(config):
    return f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}"


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch) -> Path:
    """Isolate HOME and ORIGIN_HOME for every test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ORIGIN_HOME", str(tmp_path / "origin"))
    for var in AGENT_VARS:
        monkeypatch.delenv(var, raising=False)
    origin._CRASH.clear()
    return home


@pytest.fixture
def origin_home(tmp_path) -> Path:
    return tmp_path / "origin"


@pytest.fixture
def store(origin_home):
    s = origin.open_store(origin_home)
    yield s
    s.close()


@pytest.fixture
def claude_root(user_home) -> Path:
    """Copy the real Claude Code fixtures to ~/.claude/projects/."""
    projects = user_home / ".claude" / "projects"
    shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project", projects / "-path-to-Demo")
    agent = FIXTURES / "claude-code" / "agent-sessions"
    shutil.copytree(agent / "subagent", projects / "-tmp")
    for name in ("small.jsonl", "schema_drift.jsonl"):
        shutil.copy(agent / name, projects / "-tmp" / name)
    return user_home / ".claude"


@pytest.fixture
def cli(capsys):
    """Run `origin ...` in-process; return (exit code, parsed JSON or text).

    The last run's stderr is kept in ``cli.err``.
    """

    def run(*argv: str):
        capsys.readouterr()
        code = origin.main(list(argv))
        captured = capsys.readouterr()
        run.err = captured.err
        out = captured.out
        if "--json" in argv:
            try:
                return code, json.loads(out)
            except ValueError:
                return code, out
        return code, out

    return run


def read_line(path: Path, lineno: int) -> bytes:
    """Return line number lineno (1-based) of a file, without its newline."""
    with open(path, "rb") as fh:
        for i, line in enumerate(fh, 1):
            if i == lineno:
                return line.rstrip(b"\n")
    raise AssertionError(f"{path} has no line {lineno}")


def index_rows(store) -> dict[str, set[int]]:
    """Return the event seqs each part of the index holds, after an integrity check."""
    out = {}
    for part, (_file, fts, _kinds) in origin.EVENT_INDEXES.items():
        store.reader.execute("PRAGMA query_only = OFF")
        store.reader.execute(f"INSERT INTO ix_{part}.{fts} ({fts}) VALUES ('integrity-check')")
        store.reader.execute("PRAGMA query_only = ON")
        out[part] = {r[0] for r in store.reader.execute(f"SELECT id FROM ix_{part}.{fts}_docsize")}
    return out


def expected_rows(store) -> dict[str, set[int]]:
    """Return the seqs each part should hold: indexed, visible events of its kinds."""
    from reliability_tools import index_should_hold

    return index_should_hold(store.conn)


#: The Cursor session of the workspace fixture whose 32 messages share one timestamp.
CURSOR_SAME_TS = "2aa483d1-573c-4039-ae4e-7415e28d2605"


@pytest.fixture
def all_agents(claude_root, user_home) -> Path:
    """Lay the real fixture logs of Claude Code, Codex, Cursor and Grok out under HOME."""
    shutil.copytree(FIXTURES / "codex" / "localpush" / "sessions", user_home / ".codex" / "sessions")
    user = user_home / ".config" / "Cursor" / "User"
    (user / "globalStorage").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "cursor" / "urpg-global" / "state.vscdb", user / "globalStorage" / "state.vscdb")
    (user / "workspaceStorage" / "ws1").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "cursor" / "slevin48-workspace" / "state.vscdb",
                    user / "workspaceStorage" / "ws1" / "state.vscdb")
    shutil.copytree(FIXTURES / "grok" / "made-here" / "sessions", user_home / ".grok" / "sessions")
    return user_home


def write_session(home: Path, session: str, cwd: str, records: list[tuple]) -> Path:
    """Write a Claude Code session: records are (uuid, iso time, role, content)."""
    folder = home / ".claude" / "projects" / cwd.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for uid, ts, role, content in records:
        lines.append(json.dumps({
            "type": role, "uuid": uid, "sessionId": session, "cwd": cwd, "timestamp": ts, "gitBranch": "main",
            "version": "2.1.0", "message": {"role": role, "content": content}}, ensure_ascii=False))
    p = folder / f"{session}.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def run_at_once(target, n: int, timeout: float) -> None:
    """Run target in n threads started together; wait up to timeout seconds for each."""
    threads = [threading.Thread(target=target) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
