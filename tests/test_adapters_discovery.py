"""One discovery guard for every adapter: an unreadable path is reported, the rest archived.

Tests run as root, where a folder of mode 700 does not stop reading, so the
in-process tests make the operating system's answer for one path a
PermissionError; the last test runs a real `origin sync` as an unprivileged
user over a folder it may not enter, where that is possible.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import adapters
import origin
from conftest import FIXTURES, ROOT

CODEX_ROLLOUT = next((FIXTURES / "codex" / "localpush").rglob("rollout-*.jsonl"))


def deny(monkeypatch, blocked: Path) -> None:
    """Make every look at blocked, or inside it, fail as it does for another user's folder."""
    blocked = str(blocked)

    def inside(p) -> bool:
        p = os.fspath(p)
        return p == blocked or p.startswith(blocked + os.sep)

    real_scandir, real_stat = os.scandir, pathlib.Path.stat

    def scandir(p="."):
        if inside(p):
            raise PermissionError(13, "Permission denied", os.fspath(p))
        return real_scandir(p)

    def stat(self, *a, **kw):
        if inside(self) and os.fspath(self) != blocked:
            raise PermissionError(13, "Permission denied", os.fspath(self))
        return real_stat(self, *a, **kw)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(pathlib.Path, "stat", stat)


def test_an_unreadable_claude_session_folder_costs_only_that_folder(claude_root, store, monkeypatch):
    """Repro: is_dir() of <session>/subagents raised PermissionError and the whole adapter was dropped."""
    projects = claude_root / "projects"
    blocked = projects / "-tmp" / "someone-elses-session"
    blocked.mkdir()
    deny(monkeypatch, blocked)
    report = origin.sync(store, sources=["claude-code"])
    assert report.sources["claude-code"]["files"] > 0 and report.events_added > 0
    assert [(p["source"], p["path"]) for p in report.problems] == [("claude-code", str(blocked / "subagents"))]
    assert "cannot be read" in report.problems[0]["error"]
    readable = {f.rel for f in adapters.ClaudeCode().discover({}, claude_root.parent)}
    assert readable and all("someone-elses-session" not in r for r in readable)


def test_an_unreadable_project_folder_is_reported_by_the_cli(claude_root, cli, monkeypatch):
    blocked = claude_root / "projects" / "-path-to-Demo"
    deny(monkeypatch, blocked)
    code, out = cli("sync")
    assert code == 0
    assert f"claude-code: {blocked}: cannot be read" in cli.err
    assert "no agent logs found" not in out  # the other project was archived
    code, st = cli("status", "--json")
    assert st["sources"]["claude-code"]["events"] > 0


def test_every_adapter_runs_under_the_same_guard(user_home, tmp_path, monkeypatch):
    """An unreadable folder inside each agent's tree: reported, the readable part found."""
    codex = user_home / ".codex" / "sessions" / "2025" / "09" / "01"
    codex.mkdir(parents=True)
    shutil.copy(CODEX_ROLLOUT, codex / CODEX_ROLLOUT.name)
    blocked_codex = user_home / ".codex" / "sessions" / "2025" / "10"
    blocked_codex.mkdir()
    cursor = user_home / ".cursor" / "projects"
    (cursor / "ok" / "agent-transcripts").mkdir(parents=True)
    (cursor / "ok" / "agent-transcripts" / "a.jsonl").write_text('{"role": "user", "message": "hi"}\n')
    blocked_cursor = cursor / "blocked"
    (blocked_cursor / "agent-transcripts").mkdir(parents=True)
    for blocked in (blocked_codex, blocked_cursor):
        deny(monkeypatch, blocked)
    codex_files, codex_problems = adapters.discover_guarded(adapters.Codex(), {}, user_home)
    assert [f.rel for f in codex_files] == [f"sessions/2025/09/01/{CODEX_ROLLOUT.name}"]
    assert [p for p, _ in codex_problems] == [str(blocked_codex)]
    cursor_files, cursor_problems = adapters.discover_guarded(adapters.Cursor(), {}, user_home)
    assert [f.rel for f in cursor_files] == ["projects/ok/agent-transcripts/a.jsonl"]
    assert [p for p, _ in cursor_problems] == [str(blocked_cursor / "agent-transcripts")]


def test_what_an_adapter_lets_escape_is_reported_not_swallowed(user_home, monkeypatch):
    class Leaky(adapters.Adapter):
        name, display = "leaky", "Leaky"

        def discover(self, env, home):
            yield adapters.SourceFile("/x/a.jsonl", "a.jsonl")
            raise PermissionError(13, "Permission denied", "/x/private")

    files, problems = adapters.discover_guarded(Leaky(), {}, user_home)
    assert [f.rel for f in files] == ["a.jsonl"]
    assert problems == [("/x/private", "cannot be read (Permission denied); everything else was archived")]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
def test_a_real_unprivileged_sync_skips_only_the_folder_it_may_not_enter():
    """The real case: `origin sync` as user nobody, one session folder owned by root with mode 700."""
    base = Path(tempfile.mkdtemp(prefix="origin-perm-"))
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        projects = home / ".claude" / "projects"
        shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project", projects / "-demo")
        private = projects / "-demo" / "another-users-session"
        private.mkdir()
        (private / "subagents").mkdir()
        for p in [home, *home.rglob("*")]:
            if p != private and not str(p).startswith(str(private) + os.sep):
                os.chown(p, 65534, 65534)
        os.chmod(private, 0o700)  # owned by root
        # The code runs from a copy nobody may read, by the interpreter's own
        # path: the checkout and its .venv may sit in a folder only root may
        # enter (a clone inside `mktemp -d`).  A sync of Claude Code logs
        # needs nothing but the standard library.
        app = base / "app"
        app.mkdir()
        for name in ("origin.py", "adapters.py"):
            shutil.copy(ROOT / name, app / name)
        env = {"HOME": str(home), "ORIGIN_HOME": str(home / "store"), "PATH": os.environ.get("PATH", "")}
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               os.path.realpath(sys.executable), str(app / "origin.py"), "sync", "--json"],
                              env=env, capture_output=True, text=True, timeout=300, cwd=str(base))
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["sources"]["claude-code"]["files"] > 0 and report["events_added"] > 0
        assert [p["path"] for p in report["problems"]] == [str(private / "subagents")]
    finally:
        shutil.rmtree(base, ignore_errors=True)
