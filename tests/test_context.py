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
from helpers import agent_hook_input, claude_hook_input
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
    # Claude Code's and Codex's MCP entries and hooks (Codex's in the hooks.json setup created).
    assert sorted(a["status"] for a in res["agents"] + res["hooks"] if "diff" in a) == ["would be removed"] * 4
    code, out = cli("setup", "--remove", "--dry-run")
    assert code == 0 and "context --hook" in out and "would be removed" in out
    # Remove: every file back to what it held before setup, each change backed up.
    code, res = cli("setup", "--remove", "--json")
    assert code == 0 and res["changed"] == 4 and res["refused"] == 0
    for a in res["agents"] + res["hooks"]:
        if a["status"] == "removed":
            assert Path(a["backup"]).read_bytes() == installed[str(Path(a["config"]).relative_to(claude_home))]
    after = snapshot(claude_home)
    assert after[".codex/config.toml"].decode() == original[".codex/config.toml"].decode()
    assert json.loads(after[".codex/hooks.json"]) == {}  # the file setup created, with nothing in it
    for name in (".claude.json", ".claude/settings.json"):
        assert json.loads(after[name]) == original[name], name
    code, out = cli("setup", "--remove")
    assert code == 0 and "nothing to remove" in out
    assert origin.connected_agents(env_of(claude_home), claude_home)["claude-code"]["registered"] is False


# -- the other agents with a documented session-start hook -------------------------------------

#: Each agent's settings file under the fake HOME, what the user already has in it, and the
#: timeout setup writes, in the agent's unit (Gemini CLI and Qwen Code: milliseconds).
OTHER_HOOKS = {
    "gemini": (".gemini/settings.json", {"general": {"vimMode": True},
                                         "hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
                                             {"name": "mine", "type": "command", "command": "echo hi"}]}]}},
               10_000),
    "qwen": (".qwen/settings.json", {"mcpServers": {"fs": {"command": "fs-mcp"}},
                                     "hooks": {"PreToolUse": [{"matcher": "write_file", "hooks": [
                                         {"type": "command", "command": "./guard.sh"}]}]}}, 10_000),
    "codex": (".codex/hooks.json", {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify"}]}]}},
              10),
    "copilot-cli": (".copilot/settings.json", {"model": "gpt-5", "hooks": {"sessionStart": [
        {"type": "command", "bash": "echo hi", "timeoutSec": 5}]}}, 10),
}

#: Where the context sits in the JSON each agent reads from the hook.
REPLY = {"gemini": "hookSpecificOutput", "qwen": "hookSpecificOutput", "codex": "hookSpecificOutput",
         "copilot-cli": "additionalContext"}


@pytest.mark.parametrize("agent", sorted(OTHER_HOOKS))
def test_setup_installs_the_hook_each_agent_documents_and_it_replies_in_that_agents_shape(
        agent, user_home, project, origin_home, monkeypatch):
    name, mine, timeout = OTHER_HOOKS[agent]
    settings = user_home / name
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(mine, indent=2))
    if agent == "codex":
        (settings.parent / "config.toml").write_text('model = "gpt-5"\n')
    if agent == "copilot-cli":
        (settings.parent / "mcp-config.json").write_text('{"mcpServers": {}}\n')
    command = [sys.executable, str(ORIGIN_PY), "mcp"]
    res = origin.setup_agents(env_of(user_home), user_home, command, hooks=True, agents=[agent])
    assert [(h["agent"], h["status"]) for h in res["hooks"]] == [(agent, "added")] and res["refused"] == 0
    data = json.loads(settings.read_text())
    for key, value in mine.items():  # the user's settings and hooks stay as they were
        if key == "mcpServers":
            assert data[key]["fs"] == value["fs"] and "origin" in data[key]
        elif key != "hooks":
            assert data[key] == value
    for event, groups in mine["hooks"].items():
        assert data["hooks"][event][:len(groups)] == groups
    if agent == "copilot-cli":  # flat entries: the command under "bash", the timeout in seconds
        ours = data["hooks"]["sessionStart"][-1]
        assert set(ours) == {"type", "bash", "timeoutSec"} and ours["timeoutSec"] == timeout
        line = ours["bash"]
    else:  # Claude Code's groups: {"hooks": [{"type", "command", "timeout"}]}
        group = data["hooks"]["SessionStart"][-1]
        assert list(group) == ["hooks"] and len(group["hooks"]) == 1 and group["hooks"][0]["timeout"] == timeout
        line = group["hooks"][0]["command"]
    assert line.endswith(f"context --hook --agent {agent}")
    # Run it as the agent does: through a shell, its JSON on stdin, without ORIGIN_HOME.
    env = {k: v for k, v in origin_env(user_home, origin_home).items() if k != "ORIGIN_HOME"}
    p = run_hook(line, agent_hook_input(agent, CWD), env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    reply = json.loads(p.stdout)  # JSON, not text: plain text would not reach these agents' models
    if REPLY[agent] == "hookSpecificOutput":
        assert set(reply) == {"hookSpecificOutput"} and reply["hookSpecificOutput"]["hookEventName"] == "SessionStart"
        context = reply["hookSpecificOutput"]["additionalContext"]
    else:
        assert set(reply) == {"additionalContext"}
        context = reply["additionalContext"]
    assert project["memory"] in context and project["other"] not in context
    assert context.endswith(origin.CONTEXT_SEARCH_LINE) and len(context) <= origin.CONTEXT_BUDGET
    # Forgotten entries stay out; a broken stdin still prints nothing and exits 0.
    with origin.open_store(origin_home) as s:
        origin.forget(s, project["memory"], reason="test")
    p = run_hook(line, agent_hook_input(agent, CWD), env)
    assert p.returncode == 0 and project["memory"] not in p.stdout
    assert run_hook(line, "not json", env).stdout == ""
    # Idempotent, and --remove gives back the file as the user had it.
    assert [h["status"] for h in origin.setup_agents(env_of(user_home), user_home, command, hooks=True,
                                                     agents=[agent])["hooks"]] == ["unchanged"]
    gone = origin.setup_agents(env_of(user_home), user_home, command, remove=True, agents=[agent])
    assert [h["status"] for h in gone["hooks"]] == ["removed"]
    after = json.loads(settings.read_text())
    if agent == "gemini":  # the MCP servers table setup made stays, empty, as for every agent
        assert after.pop("mcpServers") == {}
    assert after == mine


def test_a_settings_file_with_comments_is_refused_and_the_hook_lines_are_printed(user_home, cli, monkeypatch):
    monkeypatch.setenv("PATH", "")
    settings = user_home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    text = '{\n  // mine\n  "general": {"vimMode": true}\n}\n'
    settings.write_text(text)
    code, _ = cli("setup", "--agent", "gemini", "--dry-run")
    assert code == origin.AgentConfigError.exit_code and settings.read_text() == text
    assert "not valid JSON" in cli.err and "to install the hook by hand" in cli.err
    assert '"hooks.SessionStart"' in cli.err and "--agent gemini" in cli.err


def test_the_hook_for_an_agent_without_one_prints_nothing(project, user_home, origin_home):
    env = origin_env(user_home, origin_home)
    p = run_hook(f"{sys.executable} {ORIGIN_PY} context --hook --agent aider", claude_hook_input(CWD), env)
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_every_agent_with_a_hook_in_the_adapters_table_is_tested_here():
    assert set(OTHER_HOOKS) | {"claude-code"} == set(origin.hook_targets())
