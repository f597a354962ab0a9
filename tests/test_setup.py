"""`origin setup`: registering `origin mcp` in each agent's own configuration."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

import origin

COMMAND = ["/opt/origin/bin/origin", "mcp"]

CLAUDE = {
    "numStartups": 12, "theme": "dark", "tipsHistory": {"memory-command": 3, "ratio": 1.5e3},
    "projects": {"/home/dev/app": {"allowedTools": [], "mcpServers": {"local": {"command": "./tool"}}}},
    "mcpServers": {"github": {"type": "stdio", "command": "npx", "args": ["-y", "gh-mcp"], "env": {"T": "x"}}},
    "oauthAccount": {"emailAddress": "someone@example.com"},
}
CURSOR = {"mcpServers": {"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/w"]}}}
ZCODE = {"model": {"main": "zai/glm-5"}, "permission": {"mode": "build"},
         "mcp": {"servers": {"docs": {"type": "stdio", "command": "docs-mcp", "args": []}}}}
CODEX = """\
# Codex settings, kept by hand
model = "gpt-5"   # the usual one
approval_policy = "on-request"

[mcp_servers.docs]
command = "npx"
args = [
  "-y",
  "docs-mcp",
]

[mcp_servers.docs.env]
KEY = "v"

[profiles.fast]
model = "gpt-5-mini"
"""
OPENCODE = {"$schema": "https://opencode.ai/config.json", "theme": "system",
            "mcp": {"docs": {"type": "local", "command": ["docs-mcp", "--stdio"], "enabled": True}}}
GEMINI = {"general": {"sessionRetention": {"enabled": False}}, "mcpServers": {"docs": {"command": "docs-mcp"}}}
COPILOT = {"mcpServers": {"playwright": {"type": "local", "command": "npx", "args": ["@playwright/mcp@latest"],
                                        "tools": ["*"]}}}
QWEN = {"mcpServers": {"context7": {"httpUrl": "https://mcp.context7.com/mcp"}}, "model": {"name": "qwen3-coder-plus"}}
GROK = """\
[models]
default = "grok-build"

[mcp_servers.linear]
url = "https://mcp.linear.app/mcp"
headers = { "x-mcp-session-id" = "{{session_id}}" }
"""


@pytest.fixture
def agents(user_home) -> dict[str, Path]:
    """Give the fake HOME a configured install of every agent."""
    files = {
        "claude-code": user_home / ".claude.json",
        "codex": user_home / ".codex" / "config.toml",
        "cursor": user_home / ".cursor" / "mcp.json",
        "grok": user_home / ".grok" / "config.toml",
        "zcode": user_home / ".zcode" / "cli" / "config.json",
        "opencode": user_home / ".config" / "opencode" / "opencode.json",
        "gemini": user_home / ".gemini" / "settings.json",
        "copilot-cli": user_home / ".copilot" / "mcp-config.json",
        "qwen": user_home / ".qwen" / "settings.json",
    }
    for f in files.values():
        f.parent.mkdir(parents=True, exist_ok=True)
    files["claude-code"].write_text(json.dumps(CLAUDE, indent=2))
    files["cursor"].write_text(json.dumps(CURSOR, indent=4))
    files["zcode"].write_text(json.dumps(ZCODE, indent=2))
    files["opencode"].write_text(json.dumps(OPENCODE, indent=2))
    files["gemini"].write_text(json.dumps(GEMINI, indent=2))
    files["copilot-cli"].write_text(json.dumps(COPILOT, indent=2))
    files["qwen"].write_text(json.dumps(QWEN, indent=2))
    files["codex"].write_text(CODEX)
    files["grok"].write_text(GROK)
    os.chmod(files["zcode"], 0o600)
    return files


def env_of(home: Path) -> dict:
    return {"HOME": str(home), "PATH": ""}


def snapshot(home: Path) -> dict:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def parsed(path: Path) -> dict:
    return tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())


def servers(agent: str, data: dict) -> dict:
    """Return the agent's servers table, each entry read as command, args and env."""
    target = origin.agent_targets()[agent]
    for key in target.keys:
        data = data[key]
    return {k: origin._standard_entry(target, v) for k, v in data.items()}


def statuses(out: str) -> list[str]:
    """Return the status column of setup's report, one per agent line."""
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    return [row[1] for row in rows if row[0] in origin.agent_targets() and row[1] != "not"]


def installed(res: dict) -> dict:
    """Return agent -> status for the agents setup found installed."""
    return {a["agent"]: a["status"] for a in res["agents"] if a["status"] != "not installed"}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    main = origin.main if hasattr(origin, "cmd_setup") else origin._dev_main
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dry_run_writes_nothing(agents, user_home):
    before = snapshot(user_home)
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND, dry_run=True)
    assert snapshot(user_home) == before
    assert installed(res) == dict.fromkeys(agents, "would be added")
    assert res["changed"] == len(agents)


def test_setup_adds_only_origin_and_keeps_everything_else(agents, user_home):
    before = {name: (f.read_bytes(), parsed(f)) for name, f in agents.items()}
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND)
    assert installed(res) == dict.fromkeys(agents, "added")
    for name, f in agents.items():
        raw, data = before[name]
        after = parsed(f)
        entry = servers(name, after)["origin"]
        assert (entry["command"], entry["args"]) == (COMMAND[0], COMMAND[1:])
        table = after
        for key in origin.agent_targets()[name].keys:
            table = table[key]
        del table["origin"]
        assert after == data  # every other entry, key and value as it was
        backup = Path(next(a["backup"] for a in res["agents"] if a["agent"] == name))
        assert backup.name.startswith(f.name + ".origin-backup-") and backup.read_bytes() == raw
        if f.suffix == ".toml":
            assert f.read_bytes().startswith(raw)  # comments and layout untouched: the table is appended
    assert json.loads(agents["claude-code"].read_text())["mcpServers"]["origin"]["type"] == "stdio"
    assert agents["cursor"].read_text().startswith('{\n    "mcpServers"')  # its own indentation kept
    assert agents["zcode"].stat().st_mode & 0o777 == 0o600  # a file holding keys stays private
    # OpenCode's own shape: the command and its arguments in one list, "type": "local".
    assert json.loads(agents["opencode"].read_text())["mcp"]["origin"] == {"type": "local", "command": COMMAND}
    assert origin.connected_agents(env_of(user_home), user_home)["codex"]["registered"] is True


def test_second_run_changes_nothing_and_says_so(agents, user_home, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "")
    code, out, _ = run_cli(capsys, "setup")
    assert code == 0 and statuses(out) == ["added"] * len(agents)
    after_first = snapshot(user_home)
    code, out, _ = run_cli(capsys, "setup")
    assert code == 0 and "nothing to change" in out and statuses(out) == ["unchanged"] * len(agents)
    assert snapshot(user_home) == after_first  # no rewrite, no new backup


def test_one_unparsable_config_refuses_only_that_file(agents, user_home, capsys, monkeypatch):
    """Repro: a broken ~/.cursor/mcp.json made setup (and --dry-run) exit 7 showing nothing for the others."""
    broken = '{"mcpServers": {"fs": {"command": "npx",}}}'
    agents["cursor"].write_text(broken)
    monkeypatch.setenv("PATH", "")
    before = snapshot(user_home)
    code, out, err = run_cli(capsys, "setup", "--dry-run")
    assert code == origin.AgentConfigError.exit_code
    order = [n for n in origin.agent_targets() if n in agents]
    assert statuses(out) == ["refused" if n == "cursor" else "would" for n in order]  # "would be added"
    assert "mcp.json: it is not valid JSON" in err and "1 configuration file(s) refused" in err
    assert snapshot(user_home) == before
    code, out, err = run_cli(capsys, "setup")
    assert code == origin.AgentConfigError.exit_code
    assert statuses(out) == ["refused" if n == "cursor" else "added" for n in order]
    assert "first sync" in out and "restart running agents" in out
    assert agents["cursor"].read_text() == broken  # never written
    for name in set(agents) - {"cursor"}:
        assert "origin" in servers(name, parsed(agents[name]))
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND)
    assert res["refused"] == 1
    refused = next(a for a in res["agents"] if a["status"] == "refused")
    assert refused["agent"] == "cursor" and "nothing was changed" in refused["error"]


def test_dry_run_shows_the_exact_text_it_would_write(agents, user_home, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    before = {name: f.read_text() for name, f in agents.items()}
    code, res, _ = run_cli(capsys, "setup", "--dry-run", "--json")
    assert code == 0
    diffs = {a["agent"]: a["diff"] for a in json.loads(res)["agents"] if "diff" in a}
    # Gemini CLI and Qwen Code read their hooks from the same file: that diff comes on top.
    hook_diffs = {a["config"]: a["diff"] for a in json.loads(res)["hooks"] if "diff" in a}
    code, out, _ = run_cli(capsys, "setup", "--dry-run")
    assert diffs["codex"].splitlines()[0] in out  # the text output shows the same diff
    run_cli(capsys, "setup")
    for name, f in agents.items():
        old, new = before[name].splitlines(), f.read_text().splitlines()
        diff = diffs[name].splitlines()
        assert diff[0] == f"--- {f}" and diff[1] == f"+++ {f}"
        # Replaying the diffs in turn on the old text gives exactly what was written.
        replayed = apply_unified(old, diff[2:])
        if str(f) in hook_diffs:
            replayed = apply_unified(replayed, hook_diffs[str(f)].splitlines()[2:])
        assert replayed == new, name


def apply_unified(old: list[str], hunks: list[str]) -> list[str]:
    out, pos = [], 0
    for line in hunks:
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            start = start - 1 if start else 0
            out += old[pos:start]
            pos = start
        elif line.startswith("+"):
            out.append(line[1:])
        elif line.startswith("-"):
            pos += 1
        else:
            out.append(old[pos])
            pos += 1
    return out + old[pos:]


@pytest.mark.parametrize("content, why", [
    ('{"mcpServers": {"a": {}}, "mcpServers": {"b": {}}}', "duplicate key"),
    ('["not", "an", "object"]', "top level is not a JSON object"),
    ('{"mcpServers": ["x"]}', "mcpServers is not an object"),
])
def test_json_that_cannot_be_rewritten_faithfully_is_refused(agents, user_home, content, why):
    agents["claude-code"].write_text(content)
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND, agents=["claude-code"])
    assert res["refused"] == 1 and why in res["agents"][0]["error"]
    assert agents["claude-code"].read_text() == content


@pytest.mark.parametrize("content, why", [
    ('model = "x"\n[mcp_servers\n', "not valid TOML"),
    ('mcp_servers = { origin = { command = "old" } }\n', "is not written as a [mcp_servers.origin] table"),
    ('mcp_servers = { docs = { command = "d" } }\n', "would not give valid TOML"),
])
def test_toml_that_cannot_be_edited_safely_is_refused(agents, user_home, content, why):
    agents["codex"].write_text(content)
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND, agents=["codex"])
    assert res["refused"] == 1 and why in res["agents"][0]["error"]
    assert agents["codex"].read_text() == content


def test_an_outdated_registration_is_updated_in_place(agents, user_home):
    """Repro (TOML): rewriting an outdated [mcp_servers.origin] dropped the keys the user added."""
    claude = dict(CLAUDE, mcpServers={**CLAUDE["mcpServers"],
                                      "origin": {"type": "stdio", "command": "/old/origin", "args": ["mcp"],
                                                 "timeout": 30, "env": {"ORIGIN_HOME": "/data/origin"}}})
    agents["claude-code"].write_text(json.dumps(claude, indent=2))
    codex = CODEX.replace("[profiles.fast]", '[mcp_servers.origin]\ncommand = "/old/origin"\nargs = ["mcp"]\n'
                                             'startup_timeout_sec = 20\ntool_timeout_sec = 90.5\n'
                                             'enabled_tools = ["search", "get"]\n\n# env for Origin\n'
                                             '[mcp_servers.origin.env]\nORIGIN_HOME = "/data/origin"\n'
                                             'RUST_LOG = "warn"\n\n[profiles.fast]')
    agents["codex"].write_text(codex)
    env = {**env_of(user_home), "ORIGIN_HOME": "/data/origin"}
    res = origin.setup_agents(env, user_home, COMMAND, agents=["claude-code", "codex"])
    assert [a["status"] for a in res["agents"]] == ["updated", "updated"]
    entry = json.loads(agents["claude-code"].read_text())["mcpServers"]["origin"]
    assert entry == {"type": "stdio", "command": COMMAND[0], "args": ["mcp"], "timeout": 30,
                     "env": {"ORIGIN_HOME": "/data/origin"}}
    text = agents["codex"].read_text()
    assert text == codex.replace('command = "/old/origin"\n', f'command = "{COMMAND[0]}"\n')
    ours = tomllib.loads(text)["mcp_servers"]["origin"]
    assert ours == {"command": COMMAND[0], "args": ["mcp"], "startup_timeout_sec": 20, "tool_timeout_sec": 90.5,
                    "enabled_tools": ["search", "get"], "env": {"ORIGIN_HOME": "/data/origin", "RUST_LOG": "warn"}}
    again = origin.setup_agents(env, user_home, COMMAND, agents=["claude-code", "codex"])
    assert [a["status"] for a in again["agents"]] == ["unchanged", "unchanged"]


def test_setup_registers_the_environment_it_ran_with(agents, user_home, tmp_path):
    """Repro: with ORIGIN_HOME=/x the entry had only command/args, so the agent's server read ~/.origin."""
    store, codex_home = tmp_path / "elsewhere" / "store", tmp_path / "cx"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(CODEX)
    env = {**env_of(user_home), "ORIGIN_HOME": str(store), "CODEX_HOME": str(codex_home),
           "GROK_HOME": str(user_home / ".grok")}  # the default: nothing to register
    res = origin.setup_agents(env, user_home, COMMAND)
    want = {"ORIGIN_HOME": str(store), "CODEX_HOME": str(codex_home)}
    assert res["env"] == want
    for name, f in agents.items():
        f = codex_home / "config.toml" if name == "codex" else f
        assert servers(name, parsed(f))["origin"]["env"] == want, name
    assert origin.setup_agents(env, user_home, COMMAND)["changed"] == 0
    # Run again without them: the registration follows, a variable the user added stays.
    data = json.loads(agents["cursor"].read_text())
    data["mcpServers"]["origin"]["env"]["ORIGIN_LOG"] = "1"
    agents["cursor"].write_text(json.dumps(data))
    origin.setup_agents(env_of(user_home), user_home, COMMAND, agents=["cursor"])
    assert json.loads(agents["cursor"].read_text())["mcpServers"]["origin"]["env"] == {"ORIGIN_LOG": "1"}


def test_the_registered_command_uses_the_registered_store(agents, user_home, tmp_path, monkeypatch):
    """Start the registered program the way an agent does: its own minimal environment plus the entry's."""
    import subprocess
    import sys

    store = tmp_path / "custom-store"
    monkeypatch.setattr("sys.argv", ["pytest"])
    env = {**env_of(user_home), "ORIGIN_HOME": str(store)}
    command = origin.origin_command(env)
    origin.setup_agents(env, user_home, command, agents=["claude-code"])
    entry = servers("claude-code", parsed(agents["claude-code"]))["origin"]
    assert entry["args"][-1] == "mcp"
    argv = [entry["command"], *entry["args"][:-1], "path", "--json"]
    proc = subprocess.run(argv, env={"HOME": str(user_home), "PATH": os.environ["PATH"], **entry.get("env", {})},
                          capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["home"] == str(store)
    assert sys.executable == entry["command"]


def test_status_reports_a_registration_that_no_longer_works_as_stale(agents, user_home, tmp_path, cli,
                                                                      monkeypatch):
    """Repro: a registration whose command was gone or pointed elsewhere counted as "connected"."""
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr("sys.argv", ["pytest"])
    command = origin.origin_command(dict(os.environ))
    origin.setup_agents(dict(os.environ), user_home, command)
    code, st = cli("status", "--json")
    assert code == 0 and {n: a["state"] for n, a in st["agents"].items() if a["installed"]} == dict.fromkeys(
        agents, "connected")

    def edit(name, **changes):
        data = json.loads(agents[name].read_text())
        servers(name, data)["origin"].update(changes)
        agents[name].write_text(json.dumps(data))

    edit("claude-code", command=str(tmp_path / "uninstalled" / "origin"))
    other = tmp_path / "old-venv" / "bin" / "origin"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    edit("cursor", command=str(other), args=["mcp"])
    edit("zcode", env={"ORIGIN_HOME": str(tmp_path / "another-store")})
    code, st = cli("status", "--json")
    state = {n: a["state"] for n, a in st["agents"].items() if a["installed"]}
    assert state == {**dict.fromkeys(agents, "connected"), "claude-code": "stale", "cursor": "stale", "zcode": "stale"}
    assert "no longer exists" in st["agents"]["claude-code"]["stale"]
    assert "not this Origin" in st["agents"]["cursor"]["stale"]
    assert "another-store" in st["agents"]["zcode"]["stale"]
    code, out = cli("status")
    assert "claude-code (stale)" in out and "codex (connected)" in out and "run `origin setup`" in out


def test_missing_config_is_created_and_absent_agents_are_skipped(user_home):
    (user_home / ".codex").mkdir()
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND)
    status = {a["agent"]: a["status"] for a in res["agents"]}
    assert status == {**dict.fromkeys(origin.agent_targets(), "not installed"), "codex": "created"}
    config = user_home / ".codex" / "config.toml"
    assert config.read_text() == f'[mcp_servers.origin]\ncommand = "{COMMAND[0]}"\nargs = ["mcp"]\n'
    assert config.stat().st_mode & 0o777 == 0o600


def test_agent_homes_follow_their_environment_variables(user_home, tmp_path):
    codex_home, grok_home, claude_dir = tmp_path / "cx", tmp_path / "gk", tmp_path / "cl"
    for d in (codex_home, grok_home, claude_dir):
        d.mkdir()
    env = {**env_of(user_home), "CODEX_HOME": str(codex_home), "GROK_HOME": str(grok_home),
           "CLAUDE_CONFIG_DIR": str(claude_dir)}
    origin.setup_agents(env, user_home, COMMAND)
    assert "origin" in tomllib.loads((codex_home / "config.toml").read_text())["mcp_servers"]
    assert "origin" in tomllib.loads((grok_home / "config.toml").read_text())["mcp_servers"]
    assert "origin" in json.loads((claude_dir / ".claude.json").read_text())["mcpServers"]
    assert not (user_home / ".claude.json").exists()


def test_a_program_on_path_counts_as_installed(user_home, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cursor-agent").write_text("#!/bin/sh\n")
    (bin_dir / "cursor-agent").chmod(0o755)
    res = origin.setup_agents({"HOME": str(user_home), "PATH": str(bin_dir)}, user_home, COMMAND)
    assert {a["agent"]: a["status"] for a in res["agents"]}["cursor"] == "created"


def test_a_symlinked_config_is_written_through_the_link(agents, user_home, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude.json"
    agents["claude-code"].rename(target)
    agents["claude-code"].symlink_to(target)
    origin.setup_agents(env_of(user_home), user_home, COMMAND, agents=["claude-code"])
    assert agents["claude-code"].is_symlink()
    assert "origin" in json.loads(target.read_text())["mcpServers"]


def test_cli_setup_prints_what_it_did_and_runs_a_first_sync(agents, claude_root, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "")
    code, out, _ = run_cli(capsys, "setup", "--dry-run")
    assert code == 0 and "would register:" in out and "first sync" not in out
    code, res, _ = run_cli(capsys, "setup", "--json")
    res = json.loads(res)
    assert code == 0 and res["sync"]["events_added"] > 0 and res["changed"] == len(agents) + 5  # and the hooks
    assert sorted(h["agent"] for h in res["hooks"]) == sorted(origin.hook_targets())
    assert res["command"][-1] == "mcp" and all(os.path.isabs(p) for p in res["command"][:-1])
    zcode = next(a for a in res["agents"] if a["agent"] == "zcode")
    assert "not document" in zcode["note"]


def test_origin_command_is_absolute_and_runnable(monkeypatch, tmp_path):
    monkeypatch.setattr("sys.argv", ["pytest"])
    cmd = origin.origin_command({"PATH": ""})
    assert cmd[-1] == "mcp" and Path(cmd[0]).is_absolute() and Path(cmd[1]).name == "origin.py"
    script = tmp_path / "origin"
    script.write_text("#!/usr/bin/python3\nimport sys\nfrom origin import main\nsys.exit(main())\n")
    monkeypatch.setattr("sys.argv", [str(script), "setup"])
    assert origin.origin_command({"PATH": ""}) == [str(script), "mcp"]
    (tmp_path / "other").mkdir()
    impostor = tmp_path / "other" / "origin"
    impostor.write_text("#!/bin/sh\necho another program called origin\n")
    impostor.chmod(0o755)
    monkeypatch.setattr("sys.argv", ["pytest"])
    assert origin.origin_command({"PATH": str(impostor.parent)})[0] != str(impostor)


def test_a_quoted_table_header_and_crlf_line_ends_are_understood(agents, user_home):
    old = 'model = "gpt-5"\r\n\r\n[ mcp_servers . "origin" ]  # added by hand\r\nargs = ["mcp"]\r\n' \
          'command = "/old/origin"\r\n\r\n[profiles.fast]\r\nmodel = "m"\r\n'
    agents["codex"].write_bytes(old.encode())
    res = origin.setup_agents(env_of(user_home), user_home, COMMAND, agents=["codex"])
    assert res["agents"][0]["status"] == "updated"
    assert agents["codex"].read_bytes().decode() == old.replace(
        'args = ["mcp"]\r\ncommand = "/old/origin"', f'command = "{COMMAND[0]}"\r\nargs = ["mcp"]')


GOOSE = """\
# Goose settings
GOOSE_PROVIDER: ollama
extensions:
  developer:
    enabled: true
    type: builtin
"""


def test_goose_yaml_is_never_rewritten_and_setup_prints_the_lines_to_add(user_home, capsys, monkeypatch, tmp_path):
    config = user_home / ".config" / "goose" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(GOOSE)
    monkeypatch.setenv("PATH", "")
    env = {**env_of(user_home), "ORIGIN_HOME": str(tmp_path / "store")}
    res = origin.setup_agents(env, user_home, COMMAND)
    (goose,) = [a for a in res["agents"] if a["agent"] == "goose"]
    assert goose["status"] == "add by hand" and res["changed"] == 0 and res["refused"] == 0
    assert config.read_text() == GOOSE and not list(config.parent.glob("*.origin-backup-*"))
    lines = goose["lines"]
    assert lines.startswith("extensions:\n  origin:\n") and f'cmd: "{COMMAND[0]}"' in lines and 'args: ["mcp"]' in lines
    assert f'"ORIGIN_HOME": "{tmp_path / "store"}"' in lines
    assert origin.connected_agents(env, user_home, COMMAND)["goose"]["state"] == "not connected"
    # Once a person adds them, setup and status see the registration.
    config.write_text(GOOSE + lines.split("\n", 1)[1])
    again = origin.setup_agents(env, user_home, COMMAND)
    assert [a["status"] for a in again["agents"] if a["agent"] == "goose"] == ["unchanged"]
    assert origin.connected_agents(env, user_home, COMMAND)["goose"]["state"] == "connected"
    assert origin.connected_agents(env_of(user_home), user_home, COMMAND)["goose"]["state"] == "stale"
    config.write_text(GOOSE)
    code, out, _ = run_cli(capsys, "setup", "--agent", "goose")
    assert code == 0 and "add by hand" in out and "    cmd: " in out and "nothing to change" not in out
    assert config.read_text() == GOOSE


def test_an_agent_added_to_the_table_of_agents_is_set_up_with_its_variable(user_home, tmp_path, monkeypatch):
    """The adapter's row is all setup needs: its configuration file, and the variable that moves its folder."""
    import adapters

    class Fake(adapters.Adapter):
        name, display = "fake-agent", "Fake Agent"
        env_vars = ("ORIGIN_FAKE_HOME",)
        mcp = adapters.McpConfig("json", ("servers",), lambda env, home: [home / ".fake" / "mcp.json"], ("fake",))

        def roots(self, env, home):
            return adapters.env_dirs(env, "ORIGIN_FAKE_HOME", [home / ".fake"])

    monkeypatch.setitem(adapters.ADAPTERS, "fake-agent", Fake())
    elsewhere = tmp_path / "fake-logs"
    elsewhere.mkdir()
    (user_home / ".fake").mkdir()
    env = {**env_of(user_home), "ORIGIN_FAKE_HOME": str(elsewhere)}
    res = origin.setup_agents(env, user_home, COMMAND, agents=["fake-agent"])
    assert installed(res) == {"fake-agent": "created"} and res["env"] == {"ORIGIN_FAKE_HOME": str(elsewhere)}
    entry = json.loads((user_home / ".fake" / "mcp.json").read_text())["servers"]["origin"]
    assert entry == {"command": COMMAND[0], "args": COMMAND[1:], "env": {"ORIGIN_FAKE_HOME": str(elsewhere)}}
    assert "ORIGIN_FAKE_HOME" in origin.registered_vars()


def test_no_hook_leaves_every_agents_hooks_out(agents, user_home, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    code, res, _ = run_cli(capsys, "setup", "--no-hook", "--json")
    res = json.loads(res)
    assert code == 0 and res["hooks"] == []
    for name in ("gemini", "qwen"):  # their MCP entry and hooks share settings.json
        data = parsed(agents[name])
        assert "origin" in data["mcpServers"] and "SessionStart" not in data.get("hooks", {}), name
    assert not (user_home / ".codex" / "hooks.json").exists()
    assert not (user_home / ".copilot" / "settings.json").exists()
