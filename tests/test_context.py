"""Memory at session start: `origin context` and the hook `origin setup` installs (issue 29, items 5 and 6).

Claude Code runs each SessionStart hook command of its settings.json through
a shell, with one JSON object on stdin, and what the command prints becomes
context for the model.  These tests run the command exactly so: the line
setup wrote, through `sh -c`, as a separate process, with the JSON Claude
Code sends.  How long it takes is measured by `make bench`, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import origin
from conftest import write_session
from helpers import claude_hook_input
from reliability_tools import ORIGIN_PY, origin_env

CWD = "/work/src/atlas"


def run_hook(command: str, stdin: str, env: dict) -> subprocess.CompletedProcess:
    """Run a hook command line as Claude Code does: a shell, JSON on stdin."""
    return subprocess.run(["sh", "-c", command], input=stdin, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def project(user_home, origin_home) -> dict:
    """A synced Claude Code session in CWD, and one entry of each kind citing it."""
    write_session(user_home, "s-atlas", CWD, [
        ("a1", "2026-11-20T10:00:00Z", "user", "Use WAL mode: many processes share the store."),
        ("a2", "2026-11-20T10:01:00Z", "assistant", "Agreed, WAL it is."),
        ("a3", "2026-11-20T10:02:00Z", "user", "I prefer small commits with honest messages."),
    ])
    write_session(user_home, "s-other", "/work/src/zephyr", [
        ("z1", "2026-11-21T10:00:00Z", "user", "Zephyr ships on Fridays only."),
    ])
    ids = {}
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        for kind, text, quote in (
                ("memory", "Chose SQLite WAL because many processes share the store", "Use WAL mode"),
                ("cognition", "The user prefers small commits with honest messages", "small commits"),
                ("knowledge", "The store is one SQLite file in WAL mode", "WAL it is")):
            ids[kind] = origin.remember(s, kind=kind, text=text, sources=[{"quote": quote}], author="t")["id"]
        ids["other"] = origin.remember(s, kind="memory", text="Zephyr ships on Fridays only",
                                       sources=[{"quote": "Fridays only"}], author="t")["id"]
    return ids


def test_the_hook_prints_the_projects_entries_with_ids_and_the_search_line(project, user_home, origin_home):
    env = origin_env(user_home, origin_home)
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook", claude_hook_input(CWD + "/lib"), env)
    assert p.returncode == 0 and p.stderr == ""
    lines = p.stdout.splitlines()
    assert "atlas" in lines[0]
    # Kinds take turns: a decision, a preference, a fact; each with its id.
    assert [line.split("]")[0] for line in lines[1:4]] == ["- [memory", "- [cognition", "- [knowledge"]
    for kind in ("memory", "cognition", "knowledge"):
        assert f"({project[kind]})" in p.stdout
    assert project["other"] not in p.stdout  # another project's entry stays out
    assert lines[-1] == origin.CONTEXT_SEARCH_LINE
    assert len(p.stdout.rstrip("\n")) <= origin.CONTEXT_BUDGET


def test_a_forgotten_or_corrected_entry_is_not_printed(project, user_home, origin_home, cli):
    code, _ = cli("forget", project["cognition"], "--yes")
    assert code == 0
    code, fixed = cli("correct", project["knowledge"], "The store is one SQLite file in WAL mode, plus raw/",
                      "--json")
    assert code == 0
    env = origin_env(user_home, origin_home)
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook", claude_hook_input(CWD), env)
    assert p.returncode == 0
    assert project["cognition"] not in p.stdout and "small commits" not in p.stdout
    assert project["knowledge"] not in p.stdout and fixed["id"] in p.stdout


def test_the_budget_holds_and_is_configurable(project, origin_home, cli, monkeypatch):
    with origin.open_store(origin_home) as s:
        for i in range(40):
            origin.remember(s, kind="knowledge", text=f"Fact number {i} about the atlas project, " + "x" * 80,
                            sources=[{"quote": "WAL it is"}], author="t")
    for argv, env, most in ((["--budget", "700"], None, 700), ([], "500", 500), ([], None, origin.CONTEXT_BUDGET)):
        if env:
            monkeypatch.setenv("ORIGIN_CONTEXT_BUDGET", env)
        else:
            monkeypatch.delenv("ORIGIN_CONTEXT_BUDGET", raising=False)
        code, out = cli("context", "--cwd", CWD, *argv)
        assert code == 0
        text = out.rstrip("\n")
        assert len(text) <= most and text.endswith(origin.CONTEXT_SEARCH_LINE)
        assert text.count("(ent_") >= 2  # still room for entries
    code, _ = cli("context", "--cwd", CWD, "--budget", "12")
    assert code == origin.UsageError.exit_code and "budget" in cli.err


@pytest.mark.parametrize("stdin", ["", "not json", "[]", '{"cwd": 5}', '{"cwd": "relative/path"}',
                                   claude_hook_input(CWD)[:40]])
def test_the_hook_never_fails_the_agents_start(project, user_home, origin_home, stdin):
    env = origin_env(user_home, origin_home)
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook", stdin, env)
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_the_hook_is_silent_on_a_broken_or_missing_store_and_creates_none(user_home, tmp_path):
    missing = tmp_path / "never-made"
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook", claude_hook_input(CWD),
                 origin_env(user_home, missing))
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "") and not missing.exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "origin.db").write_bytes(b"this is not a database" * 100)
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook --budget nonsense", claude_hook_input(CWD),
                 origin_env(user_home, broken))
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_a_folder_of_no_known_project_gets_the_search_line_only(project, cli):
    code, out = cli("context", "--cwd", "/somewhere/else")
    assert code == 0 and out == origin.CONTEXT_SEARCH_LINE + "\n"


# -- setup installs it, and --remove takes it back ----------------------------------------------

CLAUDE_SETTINGS = {
    "permissions": {"allow": ["Bash(make test)"]},
    "hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}],
              "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}]},
}


@pytest.fixture
def claude_home(user_home) -> Path:
    """Claude Code installed, with its own settings and user hooks."""
    (user_home / ".claude").mkdir()
    (user_home / ".claude.json").write_text(json.dumps({"numStartups": 3, "mcpServers": {}}, indent=2))
    (user_home / ".claude" / "settings.json").write_text(json.dumps(CLAUDE_SETTINGS, indent=2))
    return user_home


def env_of(home: Path) -> dict:
    return {"HOME": str(home), "PATH": "", "ORIGIN_HOME": os.environ["ORIGIN_HOME"]}


def test_setup_installs_a_hook_that_claude_code_runs_and_that_prints_the_context(
        claude_home, project, origin_home):
    command = [sys.executable, str(ORIGIN_PY), "mcp"]
    res = origin.setup_agents(env_of(claude_home), claude_home, command, hooks=True)
    assert [(h["agent"], h["status"]) for h in res["hooks"]] == [("claude-code", "added")]
    settings = json.loads((claude_home / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == CLAUDE_SETTINGS["permissions"]
    assert settings["hooks"]["PreToolUse"] == CLAUDE_SETTINGS["hooks"]["PreToolUse"]
    groups = settings["hooks"]["SessionStart"]
    assert groups[0] == CLAUDE_SETTINGS["hooks"]["SessionStart"][0]  # the user's hook is untouched
    ours = groups[1]["hooks"][0]
    assert ours["type"] == "command" and ours["command"].endswith("context --hook")
    # Run exactly what Claude Code would: the command line, by a shell, the JSON on stdin,
    # in an environment that does not name the store (the hook carries ORIGIN_HOME itself).
    env = {k: v for k, v in origin_env(claude_home, origin_home).items() if k != "ORIGIN_HOME"}
    p = run_hook(ours["command"], claude_hook_input(CWD), env)
    assert p.returncode == 0 and project["memory"] in p.stdout, p.stderr
    # Idempotent: a second run changes nothing.
    before = (claude_home / ".claude" / "settings.json").read_bytes()
    again = origin.setup_agents(env_of(claude_home), claude_home, command, hooks=True)
    assert [h["status"] for h in again["hooks"]] == ["unchanged"] and again["changed"] == 0
    assert (claude_home / ".claude" / "settings.json").read_bytes() == before
    # A moved install updates its own hook in place, and only it.
    moved = origin.setup_agents(env_of(claude_home), claude_home, ["/opt/origin/bin/origin", "mcp"], hooks=True)
    assert [h["status"] for h in moved["hooks"]] == ["updated"]
    groups = json.loads((claude_home / ".claude" / "settings.json").read_text())["hooks"]["SessionStart"]
    commands = [h["command"] for g in groups for h in g["hooks"]]
    assert commands[0] == "echo hi" and commands[1].endswith(" /opt/origin/bin/origin context --hook")
    assert len(commands) == 2


def test_setup_no_hook_leaves_the_settings_alone(claude_home, cli, monkeypatch):
    monkeypatch.setenv("PATH", "")
    before = (claude_home / ".claude" / "settings.json").read_bytes()
    code, res = cli("setup", "--no-hook", "--json")
    assert code == 0 and res["hooks"] == []
    assert (claude_home / ".claude" / "settings.json").read_bytes() == before
    assert "origin" in json.loads((claude_home / ".claude.json").read_text())["mcpServers"]


def snapshot(home: Path) -> dict:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file() and ".origin-backup-" not in p.name}


def test_setup_remove_takes_back_everything_setup_wrote(claude_home, cli, monkeypatch):
    monkeypatch.setenv("PATH", "")
    codex = claude_home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text('# mine\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n\n'
                     '[profiles.fast]\nmodel = "gpt-5-mini"\n')
    original = {k: json.loads(v) if k.endswith(".json") else v for k, v in snapshot(claude_home).items()}
    code, _ = cli("setup")
    assert code == 0
    installed = snapshot(claude_home)
    # Dry run: the diffs, and nothing written.
    code, res = cli("setup", "--remove", "--dry-run", "--json")
    assert code == 0 and snapshot(claude_home) == installed
    assert sorted(a["status"] for a in res["agents"] + res["hooks"] if "diff" in a) == ["would be removed"] * 3
    code, out = cli("setup", "--remove", "--dry-run")
    assert code == 0 and "context --hook" in out and "would be removed" in out
    # Remove: every file back to what it held before setup, each change backed up.
    code, res = cli("setup", "--remove", "--json")
    assert code == 0 and res["changed"] == 3 and res["refused"] == 0
    for a in res["agents"] + res["hooks"]:
        if a["status"] == "removed":
            assert Path(a["backup"]).read_bytes() == installed[str(Path(a["config"]).relative_to(claude_home))]
    after = snapshot(claude_home)
    assert after[".codex/config.toml"].decode() == original[".codex/config.toml"].decode()
    for name in (".claude.json", ".claude/settings.json"):
        assert json.loads(after[name]) == original[name], name
    code, out = cli("setup", "--remove")
    assert code == 0 and "nothing to remove" in out
    assert origin.connected_agents(env_of(claude_home), claude_home)["claude-code"]["registered"] is False
