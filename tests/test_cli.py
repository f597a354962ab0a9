"""The `origin` command: JSON shapes, help, errors, no-dependency start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import origin
from conftest import ROOT, read_line


def test_sync_and_status_json_shapes(claude_root, cli, origin_home):
    code, res = cli("sync", "--json")
    assert code == 0
    assert set(res) >= {"events_added", "sources"}
    s = res["sources"]["claude-code"]
    assert set(s) >= {"files", "bytes_added", "events_added", "parse_errors"}
    assert s["files"] == 6 and s["events_added"] == res["events_added"] > 0
    code, st = cli("status", "--json")
    assert code == 0
    assert set(st) >= {"home", "db_bytes", "events", "sessions", "sources"}
    assert st["home"] == str(origin_home) and st["db_bytes"] > 0
    cc = st["sources"]["claude-code"]
    assert set(cc) >= {"files", "sessions", "events", "parse_errors", "last_sync"}
    assert cc["events"] == st["events"] == res["events_added"]
    code, again = cli("sync", "--json")
    assert again["events_added"] == 0


def test_search_finds_a_phrase_and_show_expands_it_to_the_original_line(claude_root, cli):
    cli("sync")
    code, res = cli("search", "CLAUDE.md", "file", "--json")
    assert code == 0 and res["events"]
    hit = res["events"][0]
    assert set(hit) == {"id", "session", "time", "source", "project", "role", "kind", "snippet"}
    assert "entries" in res
    code, shown = cli("show", hit["id"], "--json")
    assert code == 0
    prov = shown["event"]["provenance"]
    raw = shown["sources"][0]["raw"]
    assert raw.encode() == read_line(Path(prov["file"]), prov["line"])
    code, text = cli("show", hit["id"])
    assert "original line:" in text and prov["mirror"] in text


def test_timeline_and_path_commands(claude_root, cli):
    cli("sync")
    code, res = cli("timeline", "--since", "2020-01-01", "--json")
    assert code == 0 and len(res["sessions"]) >= 4
    sid = res["sessions"][0]["session"]
    code, one = cli("timeline", "--session", sid, "--json")
    assert code == 0 and one["session"]["session"] == sid and one["events"]
    code, p = cli("path", "--json")
    assert p["home"] == os.environ["ORIGIN_HOME"] and "claude-code" in p["looked_in"]


def test_sync_on_a_machine_without_logs_says_where_it_looked(cli):
    code, out = cli("sync")
    assert code == 0
    assert "no agent logs found" in out and ".claude" in out and "CLAUDE_CONFIG_DIR" in out


@pytest.mark.parametrize("argv, code, message", [
    (["show", "claude-code:nope"], 3, "no event"),
    (["show", "ent_nope"], 3, "no entry"),
    (["search", "x", "--since", "yesterday-ish"], 2, "not a date"),
    (["timeline", "--session", "nope"], 3, "no session"),
])
def test_bad_requests_exit_non_zero_with_a_clear_message(cli, argv, code, message):
    got, _ = cli(*argv)
    assert got == code
    assert message in cli.err


@pytest.mark.parametrize("argv", [["search", "--limit", "0"], ["search", "--limit", "x"], ["nosuchcommand"]])
def test_argument_errors_exit_2(argv):
    with pytest.raises(SystemExit) as e:
        origin.main(argv)
    assert e.value.code == 2


def test_every_command_help_has_an_example():
    parser = origin.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) >= {"sync", "status", "search", "timeline", "show", "path"}
    for name, sp in sub.choices.items():
        assert "Example:" in sp.format_help(), name


def test_version_and_help_work_without_the_three_dependencies():
    block = "import sys\nfor m in ('mcp', 'zstandard', 'anyio'): sys.modules[m] = None\n"
    for argv in (["--version"], ["--help"], ["sync", "--help"]):
        code = block + f"import origin\nsys.exit(origin.main({argv!r}))"
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert "origin" in p.stdout


def test_piped_sync_prints_only_the_summary(claude_root, origin_home, user_home):
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "HOME": str(user_home)}
    p = subprocess.run([sys.executable, str(ROOT / "origin.py"), "sync"], env=env, capture_output=True, text=True)
    assert p.returncode == 0
    assert p.stdout.startswith("added ") and "\r" not in p.stdout + p.stderr
