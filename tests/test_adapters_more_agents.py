"""The adapters of GitHub Copilot CLI, Qwen Code, Pi and Aider.

Each is checked on its own against the real fixture files (the stand-in
reader of ``test_adapters_parse`` plays the ingest engine), then through the
engine and the CLI: every fixture folder is archived with no parse error
(except a line the publisher wrote malformed on purpose), its phrases are
found with ``--source``, a second sync adds nothing, and a hub parses a
device's mirrors into the same events.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import corpus
import origin
from adapters import ADAPTERS, Context, ParseError, Record, SessionInfo, SourceFile
from conftest import FIXTURES
from helpers import JSON_VALUES, LAYOUTS, _rows, infos, json_lines, records, run

COPILOT = FIXTURES / "copilot-cli"
COPILOT_STATE = COPILOT / "lantern" / "session-state"
COPILOT_FIX = COPILOT_STATE / "049410b4-c1df-44ee-87a5-caa1c349091e" / "events.jsonl"
COPILOT_FLAT = COPILOT / "agent-sessions" / "flat-legacy"


def settle(root: Path) -> None:
    """Make every file under root quiet, so open blocks are emitted."""
    old = origin.time.time() - 2 * origin.QUIET_MS / 1000
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))


###############################################################################
# GitHub Copilot CLI ##########################################################
###############################################################################


def copilot_files(root: Path = COPILOT / "lantern") -> list[SourceFile]:
    return list(ADAPTERS["copilot-cli"].discover({"COPILOT_HOME": str(root)}, Path("/nonexistent")))


@pytest.mark.parametrize("path", sorted(COPILOT.rglob("*.jsonl")), ids=lambda p: p.relative_to(COPILOT).as_posix())
def test_copilot_every_fixture_line_parses(path):
    f = SourceFile(str(path), path.name, meta={"session": path.parent.name})
    items, errors, state = run(ADAPTERS["copilot-cli"], f)
    assert errors == []
    assert records(items)
    assert state.get("unknown", 0) == 0


def test_copilot_discovers_the_folder_and_the_flat_layout(tmp_path):
    state = tmp_path / "copilot" / "session-state"
    shutil.copytree(COPILOT_STATE, state)
    shutil.copy(COPILOT_FLAT / "small.jsonl", state / "0f0f0f0f-0000-4000-8000-000000000001.jsonl")
    (state / "0f0f0f0f-0000-4000-8000-000000000002").mkdir()  # a session folder without events yet
    found = copilot_files(tmp_path / "copilot")
    assert [f.rel for f in found] == [
        "session-state/049410b4-c1df-44ee-87a5-caa1c349091e/events.jsonl",
        "session-state/0f0f0f0f-0000-4000-8000-000000000001.jsonl",
        "session-state/8b23eac7-b9d0-4c24-8e3c-90f5f8a8d02b/events.jsonl",
    ]
    assert found[0].meta == {"session": "049410b4-c1df-44ee-87a5-caa1c349091e"}


def test_copilot_the_typed_prompt_is_archived_not_the_transformed_one():
    (f, _) = copilot_files()
    items, _, _ = run(ADAPTERS["copilot-cli"], f)
    (prompt,) = [r for r in records(items, "message") if r.role == "user"]
    typed = next(o for o in json_lines(COPILOT_FIX) if o["type"] == "user.message")["data"]
    assert prompt.text == typed["content"]
    assert "<current_datetime>" in typed["transformedContent"] and "<current_datetime>" not in prompt.text
    title = [i for i in infos(items) if i.title]
    assert [(i.title, i.title_rank) for i in title] == [(typed["content"], 0)]


def test_copilot_tool_requests_and_results_are_events_with_session_facts():
    (f, _) = copilot_files()
    items, _, _ = run(ADAPTERS["copilot-cli"], f)
    lines = json_lines(COPILOT_FIX)
    requests = [r for o in lines if o["type"] == "assistant.message" for r in o["data"]["toolRequests"]]
    results = [o for o in lines if o["type"] == "tool.execution_complete"]
    calls = records(items, "tool_call")
    assert len(calls) == len(requests) == 2
    assert calls[0].text == 'view {"file_path":"src/orders.py"}'
    assert [r.text for r in records(items, "tool_result")] == ['[error] "path": Required'] * len(results)
    (system,) = records(items, "meta")
    assert not system.indexed and system.role == "system"
    facts = infos(items)
    assert (facts[0].cwd, facts[0].branch, facts[0].agent_version) == ("/work", "master", "1.0.78")
    assert any(i.model == "qwen3:0.6b" for i in facts)
    assert all(r.session == "049410b4-c1df-44ee-87a5-caa1c349091e" and r.cwd == "/work" for r in records(items))
    ids = [r.id for r in records(items)]
    assert len(ids) == len(set(ids))


def test_copilot_redacted_ids_and_times_stay_distinct_and_are_marked_approximate():
    f = SourceFile(str(COPILOT_FLAT / "small.jsonl"), "small.jsonl", meta={"session": "small"})
    items, _, _ = run(ADAPTERS["copilot-cli"], f)
    recs = records(items)
    assert len({r.id for r in recs}) == len(recs)
    redacted = [r for r in recs if r.id.startswith("[trimmed for fixture]")]
    assert redacted and all(r.ts_approx for r in redacted)
    assert not any(r.ts_approx for r in recs if not r.id.startswith("[trimmed"))
    assert {r.session for r in recs} == {"copilot_stage0_small"}  # from session.start, not the file name


def test_copilot_snake_case_event_names_read_as_dot_notation():
    f = SourceFile("/x/s.jsonl", "s.jsonl", meta={"session": "s"})
    lines = [{"type": "session_start", "data": {"sessionId": "s1", "context": {"cwd": "/srv/app"}}},
             {"type": "user_message", "id": "a", "data": {"content": "rename the module"}},
             {"type": "tool_execution_complete", "id": "b", "data": {"success": True, "result": {"content": "ok"}}},
             {"type": "brand.new_event", "id": "c", "data": {}}]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    items, errors, state = run(ADAPTERS["copilot-cli"], f, data)
    assert errors == [] and state["unknown"] == 1
    assert [(r.kind, r.text, r.session, r.cwd) for r in records(items)] == [
        ("message", "rename the module", "s1", "/srv/app"), ("tool_result", "ok", "s1", "/srv/app")]


def test_copilot_a_flat_log_moved_into_its_session_folder_adds_nothing(user_home, origin_home):
    state = user_home / ".copilot" / "session-state"
    state.mkdir(parents=True)
    sid = "049410b4-c1df-44ee-87a5-caa1c349091e"
    shutil.copy(COPILOT_FIX, state / f"{sid}.jsonl")
    with origin.open_store(origin_home) as s:
        first = origin.sync(s).events_added
        assert first > 0
        (state / sid).mkdir()
        (state / f"{sid}.jsonl").rename(state / sid / "events.jsonl")
        assert origin.sync(s).events_added == 0
        assert s.conn.execute("SELECT count(*) FROM event WHERE source = 'copilot-cli'").fetchone()[0] == first


def test_setup_registers_origin_with_copilot_cli_beside_its_other_servers(user_home):
    config = user_home / ".copilot" / "mcp-config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"github": {"type": "http", "url": "https://example.test/mcp"}}}))
    env = {"HOME": str(user_home), "PATH": ""}
    res = origin.setup_agents(env, user_home, ["/opt/origin/bin/origin", "mcp"], agents=["copilot-cli"])
    assert [a["status"] for a in res["agents"]] == ["added"]
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["github"] == {"type": "http", "url": "https://example.test/mcp"}
    assert servers["origin"] == {"type": "stdio", "command": "/opt/origin/bin/origin", "args": ["mcp"], "tools": ["*"]}
    again = origin.setup_agents(env, user_home, ["/opt/origin/bin/origin", "mcp"], agents=["copilot-cli"])
    assert [a["status"] for a in again["agents"]] == ["unchanged"]


###############################################################################
# Qwen Code ###################################################################
###############################################################################

QWEN = FIXTURES / "qwen"
QWEN_EDIT = QWEN / "lantern" / "projects" / "-work" / "chats" / "85aa748a-9159-4a4f-9f9b-1b2cea32fd5b.jsonl"
QWEN_SHAPED = QWEN / "agent-sessions" / "019f0000-0000-7000-8000-000000000001.jsonl"


@pytest.mark.parametrize("path", sorted(QWEN.rglob("*.jsonl")), ids=lambda p: p.name)
def test_qwen_every_fixture_line_parses(path):
    items, errors, state = run(ADAPTERS["qwen"], SourceFile(str(path), path.name))
    assert errors == [] and records(items) and state.get("unknown", 0) == 0


def test_qwen_discovers_every_projects_chats_with_the_session_of_the_file_name(tmp_path):
    shutil.copytree(QWEN / "lantern" / "projects", tmp_path / "q" / "projects")
    found = list(ADAPTERS["qwen"].discover({"ORIGIN_QWEN_HOME": str(tmp_path / "q")}, Path("/nonexistent")))
    assert [f.rel for f in found] == [
        "projects/-work/chats/27d495d1-de2d-449d-af11-d42d4d6ef80d.jsonl",
        "projects/-work/chats/85aa748a-9159-4a4f-9f9b-1b2cea32fd5b.jsonl"]
    assert found[1].meta == {"session": "85aa748a-9159-4a4f-9f9b-1b2cea32fd5b"}


def test_qwen_gemini_parts_become_messages_calls_and_results_and_thoughts_stay_out():
    items, _, _ = run(ADAPTERS["qwen"], SourceFile(str(QWEN_EDIT), QWEN_EDIT.name))
    lines = json_lines(QWEN_EDIT)
    thoughts = [p["text"] for o in lines for p in o.get("message", {}).get("parts", []) if p.get("thought")]
    assert thoughts and not any(t[:60] in r.text for r in records(items) for t in thoughts)
    by_kind = {k: records(items, k) for k in ("message", "tool_call", "tool_result")}
    assert [r.role for r in by_kind["message"]] == ["user", "assistant"]
    assert by_kind["message"][1].text.startswith('The error "EACCES: permission denied')
    (call,) = by_kind["tool_call"]
    assert call.text.startswith("write_file {") and call.id == "e3e9190c-d9b0-4c32-9929-7cfaec9fbbd1#1"
    (result,) = by_kind["tool_result"]
    assert result.text == "[error] EACCES: permission denied, mkdir '/src'"
    assert all(r.cwd == "/work" and r.session == "85aa748a-9159-4a4f-9f9b-1b2cea32fd5b" for r in records(items))
    assert len(records(items)) == 4  # telemetry and attribution lines are bookkeeping
    facts = infos(items)
    assert facts[0].agent_version == "0.21.6" and any(i.model == "qwen3:0.6b" for i in facts)


def test_qwen_hook_context_and_notifications_are_kept_but_not_searched():
    items, _, _ = run(ADAPTERS["qwen"], SourceFile(str(QWEN_SHAPED), QWEN_SHAPED.name))
    prompt = next(r for r in records(items, "message") if r.role == "user")
    assert prompt.text == "Inspect the synthetic fixture." and prompt.branch == "fixture-branch"
    hidden = [r for r in records(items) if not r.indexed]
    assert [r.text.split("\n")[0] for r in hidden] == ["<qwen:user-prompt-submit-context>",
                                                       "Synthetic background notification."]
    assert [i.title for i in infos(items) if i.title] == ["Inspect the synthetic fixture."]


def test_setup_registers_origin_with_qwen_code_and_keeps_its_settings(user_home):
    settings = user_home / ".qwen" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"model": {"name": "qwen3-coder-plus"}, "mcpServers": {}}, indent=2))
    env = {"HOME": str(user_home), "PATH": ""}
    res = origin.setup_agents(env, user_home, ["/opt/origin/bin/origin", "mcp"], agents=["qwen"])
    assert [a["status"] for a in res["agents"]] == ["added"]
    data = json.loads(settings.read_text())
    assert data["model"] == {"name": "qwen3-coder-plus"}
    assert data["mcpServers"]["origin"] == {"command": "/opt/origin/bin/origin", "args": ["mcp"]}


def test_a_settings_file_with_comments_is_refused_untouched_and_the_lines_to_add_are_printed(user_home, cli,
                                                                                           monkeypatch):
    settings = user_home / ".qwen" / "settings.json"
    settings.parent.mkdir()
    text = '{\n  // Qwen Code reads comments here; Origin cannot keep them\n  "mcpServers": {}\n}\n'
    settings.write_text(text)
    monkeypatch.setenv("PATH", "")
    code, out = cli("setup", "--agent", "qwen")
    assert code == origin.AgentConfigError.exit_code and settings.read_text() == text
    assert "it is not valid JSON" in cli.err and "nothing was changed" in cli.err
    head, _, snippet = cli.err.partition(f"add to {settings} under \"mcpServers\":\n")
    lines = snippet.splitlines()
    lines = lines[:next((i for i, x in enumerate(lines) if not x.startswith("  ")), len(lines))]
    assert lines, cli.err
    member = json.loads("{" + "\n".join(lines) + "}")["origin"]
    assert [member["command"], *member["args"]] == origin.origin_command()


###############################################################################
# Pi ##########################################################################
###############################################################################

PI = FIXTURES / "pi"
PI_SMALL = PI / "agent-sessions" / "small.jsonl"
PI_TOOLS = PI / "agentsview" / "session.jsonl"
PI_SID = "019e19b4-eb48-746a-aa6b-8dfcfa37954b"


def pi_file(path: Path) -> SourceFile:
    return SourceFile(str(path), path.name, meta={"session": path.stem})


def test_pi_every_fixture_line_parses_but_the_one_written_malformed():
    items, errors, state = run(ADAPTERS["pi"], pi_file(PI_SMALL))
    assert errors == [] and records(items) and state.get("unknown", 0) == 0
    items, errors, state = run(ADAPTERS["pi"], pi_file(PI_TOOLS))
    lines = PI_TOOLS.read_text().splitlines()
    bad = "not valid json -- malformed line that should be skipped silently"
    assert [n for n, _ in errors] == [lines.index(bad) + 1]
    assert state["unknown"] == 1  # unknown_future_entry_type: counted, never fatal
    assert len(records(items)) == 7  # everything else landed


def test_pi_discovers_sessions_under_its_agent_dir_named_by_their_id(tmp_path):
    folder = tmp_path / "agent" / "sessions" / "--srv-app--"
    folder.mkdir(parents=True)
    shutil.copy(PI_SMALL, folder / f"2026-05-12T01-02-27-657Z_{PI_SID}.jsonl")
    (folder / "notes.txt").write_text("not a session")
    (found,) = ADAPTERS["pi"].discover({"PI_CODING_AGENT_DIR": str(tmp_path / "agent")}, Path("/nonexistent"))
    assert found.rel == f"sessions/--srv-app--/2026-05-12T01-02-27-657Z_{PI_SID}.jsonl"
    assert found.meta == {"session": PI_SID}


def test_pi_messages_tool_calls_results_and_summaries():
    items, _, _ = run(ADAPTERS["pi"], pi_file(PI_TOOLS))
    msgs = records(items, "message")
    assert [(r.role, r.text) for r in msgs] == [("user", "Fix the login bug"),
                                               ("assistant", "Looking at the auth module."),
                                               ("user", "Look good to you?"), ("assistant", "Looks good!")]
    assert not any("analyze this carefully" in r.text for r in records(items))  # thinking stays out
    (call,) = records(items, "tool_call")
    assert call.text == 'read {"file_path":"auth.go"}' and call.id == msgs[1].id + "#2"
    (result,) = records(items, "tool_result")
    assert result.text == "package auth\nfunc Login() {}"
    (summary,) = records(items, "meta")
    assert summary.text.startswith("# Context Checkpoint") and not summary.indexed
    assert all(r.session == "pi-test-session-uuid" and r.cwd == "/Users/alice/code/my-project"
               for r in records(items))
    assert infos(items)[0].parent == "parent-uuid"  # from the file the session was branched from
    assert [i.title for i in infos(items) if i.title] == ["Fix the login bug"]


def test_pi_a_session_name_outranks_the_first_prompt():
    data = PI_SMALL.read_bytes() + (json.dumps({"type": "session_info", "id": "a1", "parentId": "2c19d326",
                                                "timestamp": "2026-05-12T01:03:00.000Z",
                                                "name": "Summarise hello.py"}) + "\n").encode()
    items, _, _ = run(ADAPTERS["pi"], pi_file(PI_SMALL), data)
    titles = [(i.title, i.title_rank) for i in infos(items) if i.title]
    assert titles[-1] == ("Summarise hello.py", 3) and titles[0][1] < 3


def version_1(path: Path) -> str:
    """Return a version-3 Pi session as Pi 0.x wrote it before entries had ids."""
    out = []
    for obj in json_lines(path):
        if obj["type"] == "session":
            obj["version"] = 1
        else:
            obj.pop("id", None)
            obj.pop("parentId", None)
            if "firstKeptEntryId" in obj:
                del obj["firstKeptEntryId"]
                obj["firstKeptEntryIndex"] = 0
        out.append(json.dumps(obj, separators=(",", ":")))
    return "\n".join(out) + "\n"


def test_pi_rewriting_a_version_1_session_in_place_is_a_new_generation_that_adds_nothing(user_home, origin_home):
    folder = user_home / ".pi" / "agent" / "sessions" / "--tmp-as-agent-fixture-project--"
    folder.mkdir(parents=True)
    f = folder / f"2026-05-12T01-02-27-657Z_{PI_SID}.jsonl"
    f.write_text(version_1(PI_SMALL))
    with origin.open_store(origin_home) as s:
        first = origin.sync(s).events_added
        assert first == 6
        shutil.copy(PI_SMALL, f)  # Pi opened it: version 3, ids added, rewritten in place
        assert origin.sync(s).events_added == 0
        rows = s.conn.execute("SELECT generation FROM raw_file WHERE source = 'pi' ORDER BY generation").fetchall()
        assert [r[0] for r in rows] == [0, 1]
        assert s.conn.execute("SELECT count(*) FROM event WHERE source = 'pi'").fetchone()[0] == first


###############################################################################
# Aider #######################################################################
###############################################################################

AIDER = FIXTURES / "aider"
AIDER_RUNS = AIDER / "agentsview" / "myrepo" / ".aider.chat.history.md"


def aider_file(path: Path, offset: int = 0, cwd: str = "/home/dev/myrepo") -> SourceFile:
    return SourceFile(str(path), "home/dev/myrepo/.aider.chat.history.md", meta={"cwd": cwd, "utc_offset": offset})


@pytest.mark.parametrize("path", sorted(AIDER.rglob("*.md")), ids=lambda p: p.parent.name)
def test_aider_every_fixture_line_parses(path):
    items, errors, state = run(ADAPTERS["aider"], aider_file(path), flush=True)
    assert errors == [] and records(items) and "open" not in state


def test_aider_each_run_is_a_session_of_prompts_replies_and_output_at_its_start_marked_approximate():
    items, _, _ = run(ADAPTERS["aider"], aider_file(AIDER_RUNS, offset=120), flush=True)
    recs = records(items)
    runs = list(dict.fromkeys(r.session for r in recs))
    assert len(runs) == 2  # the third run was opened and left without a line
    first = [(r.kind, r.role, r.text.splitlines()[0]) for r in recs if r.session == runs[0]]
    assert first[:2] == [("message", "user", "add a retry to the webhook"),
                         ("message", "assistant", "I'll add exponential backoff to the webhook handler.")]
    assert first[-1] == ("tool_result", "tool", "Applied edit to src/webhook.py")
    # 14:01 local time two hours east of UTC is 12:01 UTC.
    assert {r.ts for r in recs if r.session == runs[0]} == {origin.adapters.parse_ts("2026-06-09T12:01:00Z")}
    assert all(r.ts_approx and r.cwd == "/home/dev/myrepo" for r in recs)
    assert [i.title for i in infos(items) if i.title] == ["add a retry to the webhook", "make the timeout configurable"]


def test_aider_blocks_point_at_their_lines():
    data = AIDER_RUNS.read_bytes()
    items, _, _ = run(ADAPTERS["aider"], aider_file(AIDER_RUNS), flush=True)
    lines = data.split(b"\n")
    reply = next(r for r in records(items) if r.text.startswith("I'll add"))
    assert (reply.line, reply.span) == (5, 3)
    assert lines[reply.line - 1: reply.line - 1 + reply.span] == [
        b"I'll add exponential backoff to the webhook handler.", b"", b"Here is the plan:"]
    assert data[reply.offset:].startswith(b"I'll add")


def test_aider_a_run_appended_later_keeps_every_earlier_id_and_same_second_runs_stay_apart():
    f = aider_file(AIDER_RUNS)
    data = AIDER_RUNS.read_bytes()
    before, _, _ = run(ADAPTERS["aider"], f, data, flush=True)
    more = b"\n# aider chat started at 2026-06-09 16:00:00\n\n#### and the backoff cap?\nCapped at 60 s.\n"
    after, _, _ = run(ADAPTERS["aider"], f, data + more, flush=True)
    assert {r.id for r in records(before)} < {r.id for r in records(after)}
    new = [r for r in records(after) if r.id not in {x.id for x in records(before)}]
    assert [r.text for r in new] == ["and the backoff cap?", "Capped at 60 s."]
    assert len({r.session for r in new}) == 1 and new[0].session not in {r.session for r in records(before)}


def test_aider_logs_are_found_beside_known_projects_and_under_its_roots_within_depth(user_home, tmp_path,
                                                                                    origin_home):
    from conftest import write_session

    repo = tmp_path / "work" / "shop"
    (repo / "api").mkdir(parents=True)
    shutil.copy(AIDER_RUNS, repo / ".aider.chat.history.md")
    write_session(user_home, "c1", str(repo / "api"), [("u1", "2026-06-09T10:00:00Z", "user", "hello")])
    roots = tmp_path / "roots"
    deep = roots / "a" / "b" / "c" / "d"
    for folder in (roots / "one", deep, deep / "e", roots / "node_modules" / "x", roots / ".cache"):
        folder.mkdir(parents=True)
        shutil.copy(AIDER / "deja-vu" / ".aider.chat.history.md", folder)
    env = {"HOME": str(user_home), "ORIGIN_AIDER_ROOTS": str(roots)}
    with origin.open_store(origin_home) as s:
        origin.sync(s, env=env, home=user_home)  # archives the Claude session, whose folder is then known
        origin.sync(s, env=env, home=user_home)
        paths = sorted(r[0] for r in s.conn.execute("SELECT path FROM raw_file WHERE source = 'aider'"))
        project = s.conn.execute("SELECT DISTINCT project FROM event WHERE source = 'aider' AND cwd = ?",
                                 (str(repo),)).fetchall()
    assert paths == sorted(str(p / ".aider.chat.history.md") for p in (repo, roots / "one", deep))
    assert [r[0] for r in project] == ["shop"]


def test_aider_search_of_its_roots_stops_at_its_folder_and_time_bounds(tmp_path, monkeypatch):
    roots = tmp_path / "roots"
    for name in ("a", "b", "c", "d"):
        (roots / name).mkdir(parents=True)
        shutil.copy(AIDER / "deja-vu" / ".aider.chat.history.md", roots / name)
    env = {"ORIGIN_AIDER_ROOTS": str(roots)}

    def found() -> list[str]:
        files, _ = origin.adapters.discover_guarded(ADAPTERS["aider"], env, tmp_path / "nohome")
        return [Path(f.path).parent.name for f in files]

    assert found() == ["a", "b", "c", "d"]
    monkeypatch.setattr(origin.adapters, "AIDER_WALK_DIRS", 3)  # the root, then a and b
    assert found() == ["a", "b"]
    monkeypatch.setattr(origin.adapters, "AIDER_WALK_DIRS", 20_000)
    assert found() == ["a", "b", "c", "d"]  # a tree this small is searched whole, whatever the time
    monkeypatch.setattr(origin.adapters, "AIDER_WALK_SURE", 1)
    monkeypatch.setattr(origin.adapters, "AIDER_WALK_SECONDS", -1.0)  # no time left at all: the root only
    assert found() == []


###############################################################################
# Hostile input ###############################################################
###############################################################################

FIELDS = ["type", "data", "id", "timestamp", "sessionId", "content", "transformedContent", "toolRequests",
          "result", "success", "error", "context", "uuid", "message", "parts", "functionCall",
          "functionResponse", "toolCallResult", "subtype", "role", "cwd", "version", "parentSession", "name",
          "summary", "arguments", "toolCallId", "isError", "command", "output", "exitCode", "thought", "text"]
KINDS = ["session.start", "session_start", "session.resume", "session.model_change", "user.message",
         "assistant.message", "tool.execution_complete", "system.message", "session.error", "abort", "user",
         "assistant", "tool_result", "system", "session", "message", "model_change", "session_info",
         "compaction", "branch_summary", "custom_message", "text", "toolCall", "toolResult", "bashExecution",
         "custom", "hookMessage"]


def shaped_objects():
    """Objects shaped like these agents' records, with junk at every field."""
    rest = [f for f in FIELDS if f not in ("type", "role")]
    block = st.fixed_dictionaries({"type": st.sampled_from(KINDS)}, optional={f: JSON_VALUES for f in rest})
    inner = st.fixed_dictionaries({"role": st.sampled_from(KINDS) | JSON_VALUES},
                                  optional={k: JSON_VALUES | st.lists(block, max_size=3) for k in rest})
    return st.fixed_dictionaries({"type": st.sampled_from(KINDS) | JSON_VALUES},
                                 optional={k: JSON_VALUES | inner for k in rest}) | JSON_VALUES


@pytest.mark.parametrize("name", ["copilot-cli", "qwen", "pi"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(objs=st.lists(shaped_objects(), min_size=1, max_size=4))
def test_fuzzed_records_raise_nothing_but_parse_error(name, objs):
    adapter = ADAPTERS[name]
    f = SourceFile("/x/s.jsonl", "x/s.jsonl", meta={"session": "s"})
    state = adapter.new_state(f)
    for lineno, obj in enumerate(objs, 1):
        try:
            out = adapter.parse(json.dumps(obj), Context(f, state, lineno, lineno, None))
        except ParseError:
            continue
        assert all(isinstance(i, (Record, SessionInfo)) for i in out)
        state = json.loads(json.dumps(state))


AIDER_LINES = st.one_of(st.text(max_size=40), st.builds(lambda p, t: p + t, st.sampled_from(
    ["#### ", "####", "> ", ">", "# aider chat started at ", "# aider chat started at 2026-13-45 99:99:99", ""]),
    st.text(max_size=30)))


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(AIDER_LINES, min_size=1, max_size=12))
# Found by this test: two runs with one header, apart, gave the same ids (the second event lost).
@example(lines=["# aider chat started at 0", "0", "# aider chat started at ", "# aider chat started at 0", "0"])
def test_fuzzed_aider_lines_raise_nothing_and_every_block_becomes_one_event(lines):
    adapter = ADAPTERS["aider"]
    f = aider_file(AIDER_RUNS)
    state = adapter.new_state(f)
    items = []
    for lineno, line in enumerate(lines, 1):
        items += adapter.parse(line.replace("\n", " "), Context(f, state, lineno, lineno * 10, 1))
        state = json.loads(json.dumps(state))
    items += adapter.flush(Context(f, state, len(lines), len(lines) * 10, 1))
    recs = records(items)
    assert len({r.id for r in recs}) == len(recs)
    assert all(1 <= r.line <= len(lines) and r.line + r.span - 1 <= len(lines) for r in recs)


###############################################################################
# Made corpora (the bench and the secret scanner's tests use them) ###########
###############################################################################

CORPORA = {
    "copilot-cli": ("COPILOT_HOME", lambda p: corpus.write_copilot_corpus(p, sessions=4, turns=(1, 3), seed=5)),
    "qwen": ("ORIGIN_QWEN_HOME", lambda p: corpus.write_qwen_corpus(p, sessions=4, turns=(1, 3), seed=5)),
    "pi": ("PI_CODING_AGENT_DIR", lambda p: corpus.write_pi_corpus(p, sessions=4, turns=(1, 3), seed=5)),
    "aider": ("ORIGIN_AIDER_ROOTS", lambda p: corpus.write_aider_corpus(p, repos=4, runs=(1, 3), seed=5)),
}


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_made_corpora_sync_with_no_error_no_unknown_record_and_every_kind(name, tmp_path, origin_home):
    var, write = CORPORA[name]
    files = write(tmp_path / name)
    # The same seed writes the same bytes.
    assert [f.read_bytes() for f in files] == [f.read_bytes() for f in write(tmp_path / "again" / name)]
    with origin.open_store(origin_home) as s:
        report = origin.sync(s, env={"HOME": str(tmp_path / "nohome"), var: str(tmp_path / name)},
                             home=tmp_path / "nohome", sources=[name])
        assert report.problems == [] and report.sources[name]["files"] == len(files)
        rows = s.conn.execute("SELECT sum(parse_errors), sum(unknown_records) FROM raw_file WHERE source = ?",
                              (name,)).fetchone()
        kinds = {r[0] for r in s.conn.execute("SELECT DISTINCT kind FROM event WHERE source = ?", (name,))}
    assert tuple(rows) == (0, 0)
    assert kinds >= ({"message", "tool_result"} if name == "aider" else {"message", "tool_call", "tool_result"})


###############################################################################
# Every new agent through the engine, the CLI and a hub #######################
###############################################################################

#: A phrase of each fixture folder, and the folders the layout lays out.
PHRASES = {
    "copilot-cli": ["average_item_price return 0", "Read the file /work/src/orders.py", "Listing the files"],
    "qwen": ["Both functions are valid", "permission denied", "The synthetic fixture is valid"],
    "pi": ["prints a fixture greeting", "Fix the login bug", "Looks good"],
    "aider": ["exponential backoff to the webhook", "timeout configurable", "The history is readable"],
}


@pytest.mark.parametrize("name", sorted(PHRASES))
def test_every_fixture_folder_is_archived_without_errors_and_found_by_source(name, user_home, cli, monkeypatch):
    for k, v in (LAYOUTS[name](user_home) or {}).items():
        monkeypatch.setenv(k, v)
    if name in MORE_FOLDERS:
        MORE_FOLDERS[name](user_home)
    settle(user_home)
    code, report = cli("sync", "--json", "--source", name)
    assert code == 0, report
    src = report["sources"][name]
    assert src["events_added"] > 0 and src["files"] > 0
    assert src["parse_errors"] == EXPECTED_ERRORS.get(name, 0)
    for phrase in PHRASES[name]:
        code, hits = cli("search", phrase, "--source", name, "--json")
        assert code == 0 and hits["events"], (name, phrase)
        assert {h["source"] for h in hits["events"]} == {name}
        assert any(phrase.casefold() in h["snippet"].casefold() for h in hits["events"]), (name, phrase)
    code, again = cli("sync", "--json", "--source", name)
    assert again["sources"][name]["events_added"] == 0


#: Lines the publishers wrote malformed on purpose.
EXPECTED_ERRORS = {"pi": 1}


def _pi_tools_folder(home: Path) -> None:
    folder = home / ".pi" / "agent" / "sessions" / "--Users-alice-code-my-project--"
    folder.mkdir(parents=True)
    shutil.copy(PI_TOOLS, folder / "2025-01-01T10-00-00-000Z_pi-test-session-uuid.jsonl")


#: Fixture folders the shared layouts leave out (they must sync without errors).
MORE_FOLDERS = {"pi": _pi_tools_folder}


@pytest.mark.parametrize("name", sorted(PHRASES))
def test_a_hub_parses_the_devices_mirrors_into_the_same_events(name, served, user_home, monkeypatch):
    hub, cfg, dev = served
    for k, v in (LAYOUTS[name](user_home) or {}).items():
        monkeypatch.setenv(k, v)
    settle(user_home)
    origin.sync(dev)
    origin.push(dev, cfg)
    rows = _rows(dev, "SELECT id, session, kind, text, ts, ts_approx, line, span, project FROM event ORDER BY id")
    assert rows and _rows(hub.default_store(), "SELECT id, session, kind, text, ts, ts_approx, line, span, project "
                                                "FROM event ORDER BY id") == rows
