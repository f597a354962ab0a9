"""The `origin` command: JSON shapes, help, errors, no-dependency start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import adapters
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


# Issue 13, items 15 and 16: one behaviour per operation, and the small things a user hit.

def test_abbreviated_long_options_are_refused(cli, capsys):
    with pytest.raises(SystemExit) as e:
        origin.main(["search", "--lim", "3", "word"])  # argparse would have taken --lim for --limit
    assert e.value.code == 2
    assert "--lim" in capsys.readouterr().err


def test_a_mistyped_option_names_the_closest_option_with_the_commands_own_usage(cli, capsys):
    for argv, wrong, right in ((["search", "foo", "--projet", "x"], "--projet", "--project"),
                               (["search", "--projet=x", "foo"], "--projet", "--project"),
                               (["timeline", "--sesion", "x"], "--sesion", "--session")):
        with pytest.raises(SystemExit) as e:
            origin.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: origin {argv[0]} ")
        assert f"unrecognized option {wrong}; did you mean {right}?" in err
    with pytest.raises(SystemExit):
        origin.main(["timeline", "stray"])
    err = capsys.readouterr().err
    assert err.startswith("usage: origin timeline ") and "unrecognized arguments: stray" in err


def test_json_errors_are_one_json_object_on_stderr(cli, capsys):
    code, out = cli("show", "claude-code:nope", "--json")
    assert code == 3 and out == ""
    err = json.loads(cli.err)
    assert err["code"] == 3 and "no event 'claude-code:nope'" in err["error"]
    with pytest.raises(SystemExit) as e:
        origin.main(["search", "word", "--limit", "0", "--json"])
    assert e.value.code == 2
    err = json.loads(capsys.readouterr().err)
    assert err["code"] == 2 and "limit is from 1 to" in err["error"]


def _subcommands():
    parser = origin.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return parser, sub.choices


def test_every_argument_has_help_and_help_shows_no_markup():
    parser, commands = _subcommands()
    assert "``" not in parser.format_help()
    for name, sp in commands.items():
        assert "``" not in sp.format_help(), name
        for action in sp._actions:
            if action.dest != "help":
                assert action.help, f"origin {name} {action.option_strings or action.dest} has no help"
    assert f"at most {origin.MAX_LIMIT})" in " ".join(commands["search"].format_help().split())


def test_correct_takes_kind_and_project_like_the_mcp_tool(claude_root, cli):
    cli("sync")
    code, first = cli("remember", "Demo keeps CLAUDE.md short.", "--kind", "memory", "--quote", "CLAUDE.md",
                      "--json")
    assert code == 0
    code, fixed = cli("correct", first["id"], "Demo keeps CLAUDE.md short and current.", "--kind", "cognition",
                      "--project", "demo-site", "--json")
    assert code == 0, cli.err
    assert fixed["kind"] == "cognition" and fixed["project"] == "demo-site" and fixed["supersedes"] == first["id"]


def test_counts_use_the_right_number(claude_root, cli):
    cli("sync")
    code, e = cli("remember", "Demo keeps CLAUDE.md short.", "--kind", "memory", "--quote", "CLAUDE.md", "--json")
    code, out = cli("forget", e["id"])
    assert code == 1 and "would forget 1 entry and hide 1 event:" in out
    code, out = cli("forget", e["id"], "--yes")
    assert code == 0 and out.startswith("forgot 1 entry and hid 1 event ")


def test_path_shows_each_agents_folders(cli, user_home):
    code, out = cli("path")
    assert code == 0
    for name in adapters.ADAPTERS:
        assert f"  {name}" in out
    assert str(user_home / ".codex") in out and "index" in out


def test_show_to_a_full_disk_says_so_without_a_traceback(claude_root, cli, origin_home, user_home):
    if not Path("/dev/full").exists():
        pytest.skip("this system has no /dev/full")
    cli("sync")
    code, res = cli("search", "CLAUDE.md", "--json")
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "HOME": str(user_home)}
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, str(ROOT / "origin.py"), "show", res["events"][0]["id"]], env=env,
                           stdout=full, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr
    assert p.stderr.startswith("origin: cannot write the output: No space left on device")


def test_status_shows_the_last_sync_run_not_a_files_change_time(claude_root, cli, monkeypatch):
    cli("sync")
    later = origin.now_ms() + 3 * 86400 * 1000
    monkeypatch.setattr(origin, "now_ms", lambda: later)
    code, res = cli("sync", "--json")
    assert res["events_added"] == 0  # nothing changed: no file was ingested in this run
    code, st = cli("status", "--json")
    assert st["sources"]["claude-code"]["last_sync"] == st["last_sync"] == origin.iso_local(later)


def test_status_after_a_sync_that_found_nothing_does_not_ask_for_a_sync(cli):
    code, out = cli("status")
    assert "run `origin sync`" in out
    cli("sync")
    code, out = cli("status")
    assert "run `origin sync`" not in out and "found no agent logs" in out and "origin path" in out


# Issue 13, items 12 to 15: the mission question, phrases, paging, context, listings.

DECISION = ("Demo project: `npm run type-check` was removed from CLAUDE.md because package.json "
            "defines no such script.")
QUOTE = "`npm run type-check`を削除（実際には存在しない）"


def test_mission_what_did_i_decide_in_project_x_and_why_in_three_commands(all_agents, cli):
    """On the fixture logs of four agents plus one remembered decision, with the project in the wrong case."""
    cli("sync")
    code, entry = cli("remember", DECISION, "--kind", "memory", "--quote", QUOTE, "--json")
    assert code == 0, cli.err
    commands = 0

    def run(*argv):
        nonlocal commands
        commands += 1
        code, out = cli(*argv)
        assert code == 0, cli.err
        return out

    listed = run("projects")
    assert "Demo" in listed and "claude-code" in listed
    found = run("search", "type-check", "--project", "demo")
    entry_id = found.split()[0]
    assert entry_id == entry["id"]
    shown = run("show", entry_id)
    assert commands <= 3
    assert "because package.json defines no such script" in shown  # the decision and its reason
    assert f"quote: {QUOTE}" in shown
    original = next(line for line in shown.splitlines() if line.startswith("  original line: "))
    assert QUOTE in original  # the cited original line, cut around the quote


def test_a_quoted_phrase_finds_adjacent_words(claude_root, cli, capsys):
    cli("sync")
    code, out = cli("search", '"update the CLAUDE.md"')
    assert code == 0 and "update the CLAUDE.md" in out and "no matches" not in out
    code, out = cli("search", '"the update CLAUDE.md"')
    assert "no matches" in out
    with pytest.raises(SystemExit):
        origin.main(["search", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the words of a phrase must appear next to each other" in out and "hits holding every word" in out
    assert "--strict" in out


def test_search_and_timeline_agree_on_an_unknown_session_and_source(claude_root, cli):
    cli("sync")
    for argv in (("search", "CLAUDE.md", "--session", "nope"), ("timeline", "--session", "nope")):
        code, _ = cli(*argv)
        assert code == 3 and "no session 'nope'" in cli.err
    for argv in (("search", "x", "--source", "nope"), ("timeline", "--source", "nope")):
        with pytest.raises(SystemExit) as e:
            origin.main(list(argv))
        assert e.value.code == 2


def test_session_listing_shows_event_ids_and_pages_after_the_last_one(all_agents, cli):
    from conftest import CURSOR_SAME_TS

    cli("sync")
    code, whole = cli("timeline", "--session", CURSOR_SAME_TS, "--json")
    every = [e["id"] for e in whole["events"]]
    code, out = cli("timeline", "--session", CURSOR_SAME_TS, "--limit", "5")
    shown = [line.strip() for line in out.splitlines() if line.startswith("      ")]
    assert shown == every[:5]
    assert out.splitlines()[-1] == f"more: run again with --after {every[4]}"
    seen, after = [], None
    while True:
        code, page = cli("timeline", "--session", CURSOR_SAME_TS, "--limit", "5",
                         *(("--after", after) if after else ()), "--json")
        seen += [e["id"] for e in page["events"]]
        if "next" not in page:
            break
        after = page["next"]["after"]
    assert seen == every and len(every) == 32


def test_timeline_says_when_more_sessions_than_shown_exist(claude_root, cli):
    cli("sync")
    code, out = cli("timeline", "--since", "2020-01-01", "--limit", "2")
    assert out.splitlines()[-1] == "more: run again with --offset 2"
    code, res = cli("timeline", "--since", "2020-01-01", "--limit", "2", "--offset", "2", "--json")
    assert len(res["sessions"]) == 2


def test_show_context_lists_the_messages_around_an_event(claude_root, cli):
    cli("sync")
    code, one = cli("timeline", "--session", "5c0375b4-57a5-4f26-b12d-d022ee4e51b7", "--json")
    middle = one["events"][3]["id"]
    code, res = cli("show", middle, "--context", "2", "--json")
    assert [e["id"] for e in res["context"]["before"]] == [e["id"] for e in one["events"][1:3]]
    assert [e["id"] for e in res["context"]["after"]] == [e["id"] for e in one["events"][4:6]]
    code, out = cli("show", middle, "--context", "2")
    marked = [line for line in out.splitlines() if line.startswith("> ")]
    assert len(marked) == 1 and one["events"][2]["id"] in out and one["events"][4]["id"] in out


def test_listings_print_one_json_object_per_line_with_nl(claude_root, cli):
    cli("sync")
    cli("remember", "Demo keeps CLAUDE.md short.", "--kind", "memory", "--quote", "CLAUDE.md")
    for argv, key in ((("search", "CLAUDE.md", "--limit", "3"), None), (("timeline", "--since", "600w"), "sessions"),
                      (("projects",), "projects"), (("entries",), "entries")):
        code, whole = cli(*argv, "--json")
        code, out = cli(*argv, "--nl")
        rows = [json.loads(line) for line in out.splitlines()]
        if key is None:  # a search lists entries, then events, each marked with its type
            assert [r.pop("type") for r in rows] == ["entry"] * len(whole["entries"]) + ["event"] * len(whole["events"])
            assert rows == whole["entries"] + whole["events"] and len(rows) == 4
        else:
            assert rows == whole[key] and rows, argv


def test_a_search_of_a_store_never_synced_says_to_sync_while_logs_are_on_disk(claude_root, cli):
    code, out = cli("search", "CLAUDE.md")
    assert code == 0 and out == "nothing archived yet: run `origin sync`\n"
    code, res = cli("search", "CLAUDE.md", "--json")
    assert res["note"] == "nothing archived yet: run `origin sync`" and not res["events"]
    code, out = cli("ask", "what did I decide in Demo?")
    assert out.splitlines()[-1] == "nothing archived yet: run `origin sync`"
    cli("sync")
    code, out = cli("search", "zqxjvw")
    assert out == "no matches\n"
    code, res = cli("search", "zqxjvw", "--json")
    assert "note" not in res


def test_a_search_of_an_empty_store_on_a_machine_without_logs_finds_no_matches(cli):
    code, out = cli("search", "CLAUDE.md")
    assert code == 0 and out == "no matches\n"


def test_show_of_a_session_id_points_to_its_timeline(claude_root, cli):
    cli("sync")
    sid = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
    code, _ = cli("show", sid)
    assert code == 3
    assert f"'{sid}' is a session, not an event or an entry" in cli.err
    assert f"`origin timeline --session {sid}`" in cli.err
    code, _ = cli("show", f"claude-code:{sid}")
    assert code == 3 and f"`origin timeline --session {sid} --source claude-code`" in cli.err
    code, res = cli("timeline", "--session", sid, "--source", "claude-code", "--json")
    assert code == 0 and res["events"]
    code, _ = cli("show", "claude-code:nope")
    assert code == 3 and "no event 'claude-code:nope'" in cli.err


def test_token_create_without_a_public_url_warns_that_its_lines_work_only_here(cli, monkeypatch):
    monkeypatch.delenv("ORIGIN_PUBLIC_URL", raising=False)
    code, out = cli("token", "create", "laptop")
    assert code == 0 and "origin hub connect http://127.0.0.1:7077 " in out
    assert "http://127.0.0.1:7077, which reaches the hub only from this machine" in cli.err
    assert "--url" in cli.err and "ORIGIN_PUBLIC_URL" in cli.err
    code, res = cli("token", "create", "phone", "--json")
    assert "only from this machine" in res["warning"] and cli.err == ""
    code, out = cli("token", "create", "desk", "--url", "https://hub.example.org")
    assert code == 0 and cli.err == "" and "origin hub connect https://hub.example.org " in out
    monkeypatch.setenv("ORIGIN_PUBLIC_URL", "https://hub.example.org")
    code, res = cli("token", "create", "tablet", "--json")
    assert "warning" not in res and cli.err == ""


def test_cursor_transcripts_of_a_folder_not_on_disk_are_filed_under_its_name(cli, user_home, tmp_path):
    slug = (tmp_path / "gone" / "shop").as_posix().lstrip("/").replace("/", "-")
    chats = user_home / ".cursor" / "projects" / slug / "agent-transcripts"
    chats.mkdir(parents=True)
    (chats / "6f9b1c2e-5555-4a4a-9b9b-000000000005.jsonl").write_bytes(
        (ROOT / "tests" / "fixtures" / "cursor" / "agent-sessions" / "small.jsonl").read_bytes())
    cli("sync")
    code, res = cli("projects", "--json")
    assert [p["project"] for p in res["projects"]] == ["shop"]
    code, res = cli("search", "files", "--project", "shop", "--json")
    assert code == 0 and {e["project"] for e in res["events"]} == {"shop"}


# -- fresh reads (issue 29 item 2) ----------------------------------------------------------------

def _claude_line(session: str, uid: str, text: str) -> str:
    return json.dumps({"type": "user", "uuid": uid, "sessionId": session, "cwd": "/path/to/Demo",
                       "timestamp": "2026-11-30T12:00:00.000Z", "message": {"role": "user", "content": text}})


def _cli_proc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "origin.py"), *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def test_a_line_written_a_moment_ago_is_found_by_a_read_without_origin_sync(claude_root, cli, origin_home):
    assert cli("sync")[0] == 0
    project = claude_root / "projects" / "-path-to-Demo"
    log = next(project.glob("*.jsonl"))
    session = log.stem
    with log.open("a") as fh:  # appended by hand, as the agent does
        fh.write(_claude_line(session, "99999999-0000-4000-8000-00000000aa01", "the okapi-fresh rule") + "\n")
    p = _cli_proc("search", "okapi-fresh", "--json")
    assert p.returncode == 0 and p.stderr == ""
    hit = json.loads(p.stdout)["events"][0]
    assert "okapi-fresh" in hit["snippet"]
    # A new session file in a project folder is found as well, by timeline and show too.
    (project / "0a0b0c0d-1111-4222-8333-444455556666.jsonl").write_text(
        _claude_line("0a0b0c0d-1111-4222-8333-444455556666", "99999999-0000-4000-8000-00000000aa02",
                     "the zebra-fresh rule") + "\n")
    p = _cli_proc("timeline", "--session", "0a0b0c0d-1111-4222-8333-444455556666", "--json")
    assert p.returncode == 0 and "zebra-fresh" in p.stdout, p.stderr
    assert "okapi-fresh" in _cli_proc("show", hit["id"]).stdout


def test_a_read_with_nothing_new_does_not_sync(claude_root, cli, origin_home):
    cli("sync")
    cli("sync")
    with origin.open_store(origin_home) as s:
        assert origin.fresh_changes(s) is False
        runs = s.conn.execute("SELECT count(*) FROM sync_log").fetchone()[0]
        settings = s.conn.execute("SELECT group_concat(key || value) FROM setting").fetchone()[0]
    for args in (("search", "CLAUDE.md"), ("timeline",), ("ask", "what", "about", "CLAUDE.md")):
        assert _cli_proc(*args).returncode == 0
    with origin.open_store(origin_home) as s:
        assert s.conn.execute("SELECT count(*) FROM sync_log").fetchone()[0] == runs
        assert s.conn.execute("SELECT group_concat(key || value) FROM setting").fetchone()[0] == settings


def test_the_catch_up_is_bounded_and_the_next_one_takes_the_rest(claude_root, cli, origin_home):
    cli("sync")
    cli("sync")
    project = claude_root / "projects" / "-path-to-Demo"
    n = origin.GROUP_FILES + 20  # two groups of files
    for i in range(n):
        sid = f"0a0b0c0d-1111-4222-8333-{i:012d}"
        (project / f"{sid}.jsonl").write_text(_claude_line(sid, f"99999999-0000-4000-8000-{i:012d}",
                                                           f"bulk line {i}") + "\n")
    with origin.open_store(origin_home) as s:
        first = origin.catch_up(s, seconds=0)  # past its deadline at once: one group, then it stops
        assert first.cut_short and 0 < first.sources["claude-code"]["files"] < n + 2
        assert origin.fresh_changes(s) is True  # what is left is still seen
        rest = origin.catch_up(s)
        assert not rest.cut_short
        total = s.conn.execute("SELECT count(*) FROM event WHERE text LIKE 'bulk line %'").fetchone()[0]
        assert total == n and origin.fresh_changes(s) is False


def test_every_command_is_listed_by_help_and_each_runs_with_its_own_parser(capsys):
    full = origin.build_parser()
    commands = full._subparsers._group_actions[0].choices
    assert {"sync", "status", "search", "timeline", "show", "remember", "forget", "mcp", "setup"} <= set(commands)
    with pytest.raises(SystemExit):
        origin.main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in commands)
    for name in commands:
        one = origin.build_parser([name])._subparsers._group_actions[0].choices
        assert list(one) == [name]
        # The command's own options are all there.
        assert {a.dest for a in one[name]._actions} == {a.dest for a in commands[name]._actions}


def test_a_mistyped_command_is_answered_with_the_closest_command_or_the_list_of_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        origin.main(["serch", "x"])
    assert exc.value.code == 2
    assert "unknown command 'serch'; did you mean `origin search`?" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        origin.main(["xyzzy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'xyzzy'" in err and "search" in err and "timeline" in err


def test_the_cli_knows_every_adapter_by_name():
    assert origin.SOURCES == tuple(sorted(adapters.ADAPTERS)), (
        "origin.SOURCES is the registry's names, sorted, kept so a search need not import the adapters")


@pytest.mark.parametrize("argv", [
    ["search", "--limit", "0"], ["search", "--limit", "x"], ["search", "--limit=201"], ["search", "--offset", "-1"],
    ["search", "--source", "nope"], ["search", "--scope", "some"], ["search", "--kind", "idea"], ["search", "--bogus"],
    ["search", "a", "--json", "b"], ["search", "--project"],
])
def test_a_search_with_a_bad_option_is_refused_with_usage(argv, capsys, origin_home):
    with pytest.raises(SystemExit) as exc:
        origin.main(argv)
    assert exc.value.code == 2
    assert "origin search" in capsys.readouterr().err  # argparse's usage, or the JSON error naming --help


def test_a_search_line_of_every_option_runs(claude_root, origin_home, cli):
    assert cli("sync")[0] == 0
    code, out = cli("search", "--project", "Demo", "--source", "claude-code", "--since", "3650d",
                    "--until=2100-01-01", "Demo", "--all", "--scope", "events", "--offset=0", "--limit", "3")
    assert code == 0 and "Demo" in out
    code, out = cli("search", "--limit", "3", "--", "Demo")
    assert code == 0 and "Demo" in out
