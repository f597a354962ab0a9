"""Pure tests of the Claude Code, Codex and Grok adapters: discovery and parsing.

Nothing here needs ``origin``: a small reader below plays the ingest engine's
part (split a mirror into lines, give each its number and byte offset, keep
the adapter's state), so the adapters are checked against real fixture files
on their own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adapters
from adapters import ADAPTERS, Context, ParseError, Record, SessionInfo, SourceFile
from helpers import JSON_LEAVES, JSON_VALUES, infos, json_lines, lines_of, records, run

FIXTURES = Path(__file__).with_name("fixtures")
CLAUDE = FIXTURES / "claude-code"
CLAUDE_INIT = CLAUDE / "claude-code-viewer/sample-project/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
CLAUDE_CUSTOM = CLAUDE / "claude-code-viewer/sample-project/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
CLAUDE_SMALL = CLAUDE / "agent-sessions/small.jsonl"
CLAUDE_DRIFT = CLAUDE / "agent-sessions/schema_drift.jsonl"
CLAUDE_PARENT_ID = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"
CLAUDE_SUBAGENT_DIR = CLAUDE / "agent-sessions/subagent"


###############################################################################
# A stand-in for the ingest engine ############################################
###############################################################################


def source(path: Path, **meta) -> SourceFile:
    """Return a SourceFile for a fixture, named relative to the fixtures."""
    return SourceFile(path=str(path), rel=path.relative_to(FIXTURES).as_posix(), meta=meta)


###############################################################################
# Registry ####################################################################
###############################################################################


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_registry_row_names_its_agent_and_its_kind(name):
    adapter = ADAPTERS[name]
    assert adapter.name == name and re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name)
    assert adapter.display and adapter.kind in ("log", "db")
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]+", v) for v in adapter.env_vars)
    if adapter.mcp is not None:
        assert adapter.mcp.fmt in ("json", "toml", "yaml") and adapter.mcp.keys


###############################################################################
# Claude Code #################################################################
###############################################################################

CLAUDE_FILES = sorted(CLAUDE.rglob("*.jsonl"))


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.relative_to(CLAUDE).as_posix())
def test_claude_every_fixture_line_parses(path):
    items, errors, state = run(ADAPTERS["claude-code"], source(path))
    assert errors == []
    assert records(items)
    assert state.get("unknown", 0) == 0


def test_claude_tool_blocks_become_events_with_block_ids():
    lines = json_lines(CLAUDE_INIT)
    expected = {}
    for obj in lines:
        content = obj.get("message", {}).get("content")
        for i, block in enumerate(content if isinstance(content, list) else []):
            if block.get("type") in ("tool_use", "tool_result"):
                expected[f"{obj['uuid']}#{i}"] = "tool_call" if block["type"] == "tool_use" else "tool_result"
    assert list(expected.values()).count("tool_call") == 12
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_INIT))
    got = {r.id: r.kind for r in records(items) if r.kind in ("tool_call", "tool_result")}
    assert got == expected
    for r in records(items, "tool_call"):
        assert len(r.text) <= adapters.TOOL_CALL_MAX and r.role == "assistant"
    for r in records(items, "tool_result"):
        assert len(r.text) <= adapters.TOOL_RESULT_MAX and r.role == "tool"


def test_claude_text_blocks_of_a_line_make_one_message_with_the_uuid():
    lines = json_lines(CLAUDE_CUSTOM)
    with_text = {
        o["uuid"] for o in lines
        if isinstance(o["message"]["content"], str)
        or any(b.get("type") == "text" for b in o["message"]["content"])
    }
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_CUSTOM))
    text_events = records(items, "message") + records(items, "meta")
    assert {r.id for r in text_events} == with_text
    assert len(text_events) == len(with_text)
    assert all(r.cwd == "/path/to/Demo" and r.session == CLAUDE_CUSTOM.stem for r in records(items))
    assert {r.branch for r in records(items)} == {"main"}
    assert all(r.model == "claude-sonnet-4-20250514" for r in records(items) if r.role == "assistant")


def test_claude_meta_lines_are_kept_but_not_indexed():
    meta_uuids = {o["uuid"] for o in json_lines(CLAUDE_INIT) if o.get("isMeta")}
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_INIT))
    meta = records(items, "meta")
    assert {r.id for r in meta} == meta_uuids
    assert all(not r.indexed for r in meta)


def test_claude_thinking_never_reaches_an_event_and_images_are_placeholders():
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_SMALL))
    texts = [r.text for r in records(items)]
    assert not any("Reasoning goes here." in t for t in texts)
    assert any("[image]" in t for t in texts)
    assert not any("base64" in t for t in texts)


def test_claude_titles_rank_custom_over_ai_over_summary_over_prompt():
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_SMALL))
    titles = [(i.title, i.title_rank) for i in infos(items) if i.title]
    assert ("Stage0 small fixture", 3) in titles
    assert ("Stage0 AI title", 2) in titles
    assert ("Claude Code: Context usage summary", 1) in titles
    # "Hello" is marked isSidechain in this curated file, so the first prompt
    # of the main conversation is a redacted one; only one is ever sent.
    assert [t for t in titles if t[1] == 0] == [("[trimmed for fixture]", 0)]


def test_claude_slash_command_prompt_titles_the_session():
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_INIT))
    assert [(i.title, i.title_rank) for i in infos(items) if i.title] == [("/init", 0)]


def test_claude_session_facts_carry_version_and_model():
    items, _, _ = run(ADAPTERS["claude-code"], source(CLAUDE_INIT))
    facts = infos(items)
    assert {i.agent_version for i in facts} >= {"1.0.98"}
    assert "claude-sonnet-4-20250514" in {i.model for i in facts}
    assert {i.session for i in facts} == {CLAUDE_INIT.stem}


def test_claude_drift_top_level_tool_lines_are_tool_events():
    items, errors, _ = run(ADAPTERS["claude-code"], source(CLAUDE_DRIFT))
    assert errors == []
    assert [(r.id, r.kind) for r in records(items) if r.kind.startswith("tool")] == [
        ("t1", "tool_call"), ("r1", "tool_result")]
    call = next(r for r in records(items) if r.id == "t1")
    assert call.text == 'bash {"command":"cat README.md"}'


def test_claude_ids_are_stable_and_unique_per_real_file():
    for path in (CLAUDE_INIT, CLAUDE_CUSTOM):
        a, _, _ = run(ADAPTERS["claude-code"], source(path))
        b, _, _ = run(ADAPTERS["claude-code"], source(path), roundtrip=True)
        assert [r.id for r in records(a)] == [r.id for r in records(b)]
        assert len({r.id for r in records(a)}) == len(records(a))
        assert a == b


def test_claude_line_without_uuid_gets_a_content_hash_id():
    line = json.dumps({"type": "system", "sessionId": "s1", "content": "hello"})
    f = SourceFile("/nowhere/a.jsonl", "a.jsonl")
    g = SourceFile("/elsewhere/b.jsonl", "b.jsonl")
    one = ADAPTERS["claude-code"].parse(line, Context(f, {}, 1, 0))
    two = ADAPTERS["claude-code"].parse(line, Context(g, {}, 7, 900))
    assert records(one)[0].id == records(two)[0].id == adapters.short_hash("s1", line)


def _claude_home(tmp_path: Path, root: str = ".claude") -> Path:
    """Lay out a Claude config dir with a parent session and its sub-agent."""
    project = tmp_path / root / "projects" / "-tmp"
    shutil.copytree(CLAUDE_SUBAGENT_DIR, project)
    shutil.copy(CLAUDE_INIT, project / CLAUDE_INIT.name)
    (project / "agent-1234abcd.jsonl").write_text("")
    session = project / CLAUDE_PARENT_ID
    (project / "memory").mkdir()
    (project / "memory" / "notes.jsonl").write_text("{}\n")
    (session / "tool-results").mkdir()
    (session / "tool-results" / "x.jsonl").write_text("{}\n")
    (session / "tool-results" / "big.txt").write_text("output")
    wf = session / "subagents" / "workflows" / "wf1"
    wf.mkdir(parents=True)
    (wf / "journal.jsonl").write_text("{}\n")
    (wf / "agent-b1.jsonl").write_text("")
    return tmp_path


def test_claude_discovers_sessions_and_subagents_in_both_default_roots(tmp_path):
    home = _claude_home(tmp_path)
    shutil.copytree(home / ".claude", home / ".config" / "claude")
    found = list(ADAPTERS["claude-code"].discover({}, home))
    rels = [f.rel for f in found]
    assert rels == sorted(rels)
    for prefix in (".claude/", ".config/claude/"):
        assert [r[len(prefix):] for r in rels if r.startswith(prefix)] == [
            f"projects/-tmp/{CLAUDE_PARENT_ID}.jsonl",
            f"projects/-tmp/{CLAUDE_PARENT_ID}/subagents/agent-a0ad4f44468bdf20d.jsonl",
            f"projects/-tmp/{CLAUDE_PARENT_ID}/subagents/workflows/wf1/agent-b1.jsonl",
            f"projects/-tmp/{CLAUDE_INIT.name}",
            "projects/-tmp/agent-1234abcd.jsonl",
        ]
    sub = next(f for f in found if f.rel.endswith("agent-a0ad4f44468bdf20d.jsonl"))
    assert sub.meta["parent"] == CLAUDE_PARENT_ID
    assert sub.meta["agentType"] == "general-purpose"
    assert all(Path(f.path).is_absolute() and f.compressed is None for f in found)


def test_claude_config_dir_overrides_the_defaults(tmp_path):
    home = _claude_home(tmp_path, "custom")
    _claude_home(tmp_path / "h2")
    env = {"CLAUDE_CONFIG_DIR": str(home / "custom")}
    rels = [f.rel for f in ADAPTERS["claude-code"].discover(env, tmp_path / "h2")]
    assert rels and all(r.startswith("projects/-tmp/") for r in rels)
    env = {"CLAUDE_CONFIG_DIR": f"{home / 'custom'},{tmp_path / 'h2' / '.claude'}"}
    both = [f.rel for f in ADAPTERS["claude-code"].discover(env, tmp_path / "h2")]
    assert len(both) == 2 * len(rels) and len(set(both)) == len(both)


def test_claude_subagent_reports_its_parent_session(tmp_path):
    home = _claude_home(tmp_path)
    sub = next(f for f in ADAPTERS["claude-code"].discover({}, home)
               if f.rel.endswith("agent-a0ad4f44468bdf20d.jsonl"))
    items, errors, _ = run(ADAPTERS["claude-code"], sub)
    assert errors == []
    assert {r.session for r in records(items)} == {"agent-a0ad4f44468bdf20d"}
    assert {i.parent for i in infos(items) if not i.title} == {CLAUDE_PARENT_ID}
    assert ("Search the repo for TODO comments", 0) in [(i.title, i.title_rank) for i in infos(items)]


def test_claude_cwd_is_carried_to_lines_without_one():
    lines = [
        {"type": "user", "sessionId": "s", "uuid": "u1", "cwd": "/w/proj", "message": {"content": "hi"}},
        {"type": "assistant", "sessionId": "s", "uuid": "a1", "message": {"content": [{"type": "text", "text": "yo"}]}},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    items, _, _ = run(ADAPTERS["claude-code"], SourceFile("/x", "x"), data)
    assert [r.cwd for r in records(items)] == ["/w/proj", "/w/proj"]


def test_claude_empty_file_and_huge_line():
    f = SourceFile("/x", "x")
    assert run(ADAPTERS["claude-code"], f, b"") == ([], [], {})
    big = "x" * (5 << 20)
    line = json.dumps({"type": "user", "sessionId": "s", "uuid": "u", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t", "content": big},
        {"type": "image", "source": {"type": "base64", "data": big}}]}})
    items, errors, _ = run(ADAPTERS["claude-code"], f, (line + "\n").encode())
    assert errors == []
    assert len(records(items, "tool_result")[0].text) == adapters.TOOL_RESULT_MAX
    assert records(items, "message")[0].text == "[image]"


###############################################################################
# Hostile input ###############################################################
###############################################################################

HOSTILE_LINES = [
    "", "   ", "null", "[]", "42", '"str"', "{", "{}", "NaN", '{"type": NaN}',
    '{"type": ["user"]}', '{"type": {"a": 1}}', '{"type": "user", "message": []}',
    '{"type": "user", "message": {"content": {"type": "text"}}}',
    '{"type": "user", "message": {"content": [null, 1, [], {"type": 5}]}}',
    '{"type": "assistant", "message": {"content": [{"type": "tool_use", "name": [], "input": NaN}]}}',
    '{"type": "user", "uuid": "\\ud83d", "sessionId": "\\udc00", "message": {"content": "a\\ud83db"}}',
    '{"type": "user", "timestamp": 1' + "0" * 400 + ', "message": {"content": "x"}}',
    '{"type": "user", "timestamp": 1' + "0" * 5000 + "}",
    '{"type": "user", "timestamp": -1e308, "message": {"content": "x"}}',
    "[" * 100_000 + "]" * 100_000,
    '{"type": "user", "message": {"content": ' + "[" * 900 + "]" * 900 + "}}",
    '{"type": "response_item", "payload": {"type": "message", "role": "user", "content": '
    + "[" * 900 + "]" * 900 + "}}",
    '{"timestamp": "x", "type": "session_meta", "payload": []}',
    '{"type": "session_meta", "payload": {"id": 5, "git": "main", "cwd": []}}',
    '{"type": "event_msg", "payload": {"type": "user_message", "message": {"a": 1}, "images": 3}}',
    '{"type": "response_item", "ordinal": 1e400, "payload": {"type": "function_call", "arguments": "{["}}',
    '{"type": "response_item", "ordinal": true, "payload": {"type": "function_call_output", "output": [{}]}}',
    '{"id": "t", "timestamp": "2025-01-01", "instructions": null, "git": null}',
    '{"record_type": "state"}',
    '{"method": "session/update", "params": {"update": {"sessionUpdate": "agent_message_chunk", "content": 5}}}',
    '{"method": "session/update", "params": {"update": {"sessionUpdate": "tool_call_update", "toolCallId": []}}}',
    '{"method": "session/update", "params": {"update": {"sessionUpdate": "tool_call", "toolCallId": {}}}}',
    '{"method": 7, "params": {"update": []}}',
    '{"timestamp": "9999-99-99", "method": "_x.ai/session/update", "params": {"_meta": [], "update": {}}}',
    '{"type": "user", "content": [{"type": "text", "text": 5}], "prompt_index": "0"}',
    '{"role": "assistant", "tool_calls": [{"function": []}, 7], "content": null}',
    '{"type": "tool_result", "tool_call_id": {}, "content": {"x": [1]}}',
]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_hostile_lines_raise_nothing_but_parse_error(name):
    adapter = ADAPTERS[name]
    files = [SourceFile("/x/updates.jsonl", "x/updates.jsonl", kind=adapter.kind, meta={"format": "updates"}),
             SourceFile("/x/chat_history.jsonl", "x/chat_history.jsonl", kind=adapter.kind, meta={"format": "chat"}),
             SourceFile("/x/store", "x/store", kind=adapter.kind)]
    for f in files:
        state = adapter.new_state(f)
        for lineno, line in enumerate(HOSTILE_LINES, 1):
            try:
                out = adapter.parse(line, Context(f, state, lineno, lineno * 10, None))
            except ParseError:
                continue
            assert isinstance(out, list)
            for item in out:
                assert isinstance(item, (Record, SessionInfo))
                for value in vars_of(item):
                    if isinstance(value, str):
                        value.encode("utf-8")  # no lone surrogates left
            json.dumps(state, ensure_ascii=False).encode("utf-8")  # storable as it is


def vars_of(item) -> list:
    """Return the field values of a slotted dataclass."""
    return [getattr(item, s) for s in type(item).__slots__]


KEYS = ["uuid", "sessionId", "message", "content", "timestamp", "cwd", "payload", "role",
        "ordinal", "id", "method", "params", "update", "sessionUpdate", "toolCallId", "tool_calls",
        "prompt_index", "isMeta", "name", "input", "arguments", "output", "status", "_meta", "text"]
TYPES = ["user", "assistant", "system", "summary", "tool_use", "tool_result", "session_meta",
         "turn_context", "response_item", "event_msg", "compacted", "message", "function_call",
         "function_call_output", "custom_tool_call", "local_shell_call", "user_message",
         "agent_message_chunk", "tool_call", "tool_call_update", "turn_completed", "reasoning",
         "text", "image", "tool_use"]


def hostile_objects():
    """Return a strategy for objects shaped like the logs but with junk inside."""
    shaped = st.fixed_dictionaries(
        {"type": st.sampled_from(TYPES) | JSON_LEAVES},
        optional={k: JSON_VALUES | st.sampled_from(TYPES) for k in KEYS},
    )
    nested = st.fixed_dictionaries({
        "type": st.sampled_from(TYPES),
        "method": st.sampled_from(["session/update", "_x.ai/session/update"]),
        "message": st.fixed_dictionaries({"content": st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(TYPES)}, optional={k: JSON_VALUES for k in KEYS}),
            max_size=3)}),
        "payload": st.fixed_dictionaries({"type": st.sampled_from(TYPES)}, optional={k: JSON_VALUES for k in KEYS}),
        "params": st.fixed_dictionaries({"update": st.fixed_dictionaries(
            {"sessionUpdate": st.sampled_from(TYPES)},
            optional={k: JSON_VALUES for k in KEYS if k != "sessionUpdate"})}),
    })
    return shaped | nested | JSON_VALUES


@pytest.mark.parametrize("name,fmt", [("claude-code", "log"), ("codex", "log"),
                                      ("grok", "updates"), ("grok", "chat")])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objs=st.lists(hostile_objects(), min_size=1, max_size=6))
def test_fuzzed_lines_raise_nothing_but_parse_error(name, fmt, objs):
    adapter = ADAPTERS[name]
    f = SourceFile(f"/x/{fmt}.jsonl", f"x/{fmt}.jsonl", meta={"format": fmt})
    state = adapter.new_state(f)
    for lineno, obj in enumerate(objs, 1):
        line = json.dumps(obj)
        try:
            adapter.parse(line, Context(f, state, lineno, lineno, None))
        except ParseError:
            pass
        state = json.loads(json.dumps(state))


###############################################################################
# Codex #######################################################################
###############################################################################

CODEX = FIXTURES / "codex"
CODEX_DAY = CODEX / "localpush/sessions/2026/02/23"
CODEX_LONG = CODEX_DAY / "rollout-2026-02-23T12-41-04-019c8a4d-8f45-7010-8b5d-7fad920aa6f9.jsonl"
CODEX_TURN = CODEX_DAY / "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl"
CODEX_SMALL = CODEX / "agent-sessions/small.jsonl"
CODEX_DRIFT = CODEX / "agent-sessions/schema_drift.jsonl"


@pytest.mark.parametrize("path", sorted(CODEX.rglob("*.jsonl")), ids=lambda p: p.name)
def test_codex_every_fixture_line_parses(path):
    items, errors, state = run(ADAPTERS["codex"], source(path))
    assert errors == []
    assert records(items)
    # The drift file has two role-keyed lines and a function_result line,
    # shapes no Codex release wrote: they are counted as unknown.
    assert state.get("unknown", 0) == (3 if path == CODEX_DRIFT else 0)


def position(rid: str) -> str:
    """Return a Codex event id without its line hash: <thread>:<position>[#k]."""
    return re.sub(r":[0-9a-f]{8}(?=#|$)", "", rid)


def one_redaction_label(path: Path, tmp_path: Path) -> SourceFile:
    """Copy a localpush rollout with its prompt events redacted like their items.

    The fixture's redactor wrote one prompt as ``[REDACTED_TEXT len=N sha=S]``
    in the user item and ``[REDACTED_MESSAGE len=N sha=S]`` in the event; the
    same length and hash say it was one text, as it is in a real rollout.
    """
    out = tmp_path / path.name
    out.write_text(path.read_text().replace("[REDACTED_MESSAGE ", "[REDACTED_TEXT "))
    return SourceFile(path=str(out), rel=source(path).rel)


def test_codex_long_rollout_counts_and_ids(tmp_path):
    lines = json_lines(CODEX_LONG)
    payloads = [(o["type"], o["payload"].get("type"), o["payload"].get("role")) for o in lines]
    thread = lines[0]["payload"]["id"]
    items, _, _ = run(ADAPTERS["codex"], one_redaction_label(CODEX_LONG, tmp_path))
    assert len(records(items, "tool_call")) == payloads.count(("response_item", "function_call", None)) == 118
    assert len(records(items, "tool_result")) == payloads.count(("response_item", "function_call_output", None))
    assistant = [r for r in records(items, "message") if r.role == "assistant"]
    assert len(assistant) == payloads.count(("response_item", "message", "assistant"))
    # The prompt is indexed once, from the user_message event.
    prompts = [r for r in records(items, "message") if r.role == "user"]
    assert len(prompts) == payloads.count(("event_msg", "user_message", None)) == 1
    assert position(prompts[0].id) == f"{thread}:{payloads.index(('event_msg', 'user_message', None)) + 1}"
    developer = [r for r in records(items, "meta") if r.role == "system"]
    assert len(developer) == payloads.count(("response_item", "message", "developer"))
    # The two user items before the first turn (instructions and environment,
    # redacted in the fixture) are the session's preamble: archived as meta.
    preamble = [r for r in records(items, "meta") if r.role == "user"]
    assert [position(r.id) for r in preamble] == [f"{thread}:4", f"{thread}:5"]
    assert not any(r.indexed for r in developer + preamble)
    assert {r.session for r in records(items)} == {thread}
    assert all(r.cwd == lines[0]["payload"]["cwd"] for r in records(items))
    assert {r.model for r in assistant} == {"gpt-5.3-codex"}


def test_codex_session_meta_gives_version_branch_and_title_fallback(tmp_path):
    items, _, _ = run(ADAPTERS["codex"], one_redaction_label(CODEX_TURN, tmp_path))
    first = infos(items)[0]
    assert (first.session, first.agent_version, first.branch) == (
        "019c8bfe-ec25-79e0-97d7-bda6a9c575ff", "0.104.0-alpha.1", "main")
    assert [(i.title_rank, i.title) for i in infos(items) if i.title] == [
        (0, "[REDACTED_TEXT len=98 sha=c002ff99]")]


def test_codex_later_session_meta_is_history_and_thread_name_is_title():
    items, _, state = run(ADAPTERS["codex"], source(CODEX_SMALL))
    assert state["thread"] == "019fc8be-3658-7ca3-9e29-000000000000"
    assert {r.session for r in records(items)} == {state["thread"]}
    assert ("[trimmed for fixture]", 2) in [(i.title, i.title_rank) for i in infos(items)]
    ids = [r.id for r in records(items)]
    assert len(ids) == len(set(ids))
    # Every curated line with an ordinal has 0: the first (a session_meta,
    # line 96) takes it, the repeats fall back to their line numbers.
    assert f"{state['thread']}:98" in [position(i) for i in ids]
    assert not any(":o" in i for i in ids)


def test_codex_tool_text_decodes_json_arguments_and_outputs():
    items, _, _ = run(ADAPTERS["codex"], source(CODEX_SMALL))
    calls = [r.text for r in records(items, "tool_call")]
    assert 'shell {"command":["ls"]}' in calls
    results = [r.text for r in records(items, "tool_result")]
    assert "a.txt\n" in results
    assert not any("image_url" in t for t in results + calls)


def _multi_frame_zstd(data: bytes) -> bytes:
    """Compress data as several concatenated zstd frames, as Codex may."""
    import zstandard

    c = zstandard.ZstdCompressor()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    return b"".join(c.compress(data[a:b]) for a, b in zip(cut, cut[1:]))


def _codex_ids_of(f: SourceFile) -> list[str]:
    items, errors, _ = run(ADAPTERS["codex"], f)
    assert errors == []
    return [r.id for r in records(items)]


def test_codex_plain_compressed_and_archived_give_the_same_ids(tmp_path):
    name = CODEX_LONG.name
    expected = _codex_ids_of(source(CODEX_LONG))
    seen = []
    for step in ("plain", "zst", "archived"):
        home = tmp_path / step
        day = home / ".codex/sessions/2026/02/23"
        day.mkdir(parents=True)
        if step == "plain":
            shutil.copy(CODEX_LONG, day / name)
        elif step == "zst":
            (day / (name + ".zst")).write_bytes(_multi_frame_zstd(CODEX_LONG.read_bytes()))
        else:
            (home / ".codex/archived_sessions").mkdir()
            (home / ".codex/archived_sessions" / (name + ".zst")).write_bytes(
                _multi_frame_zstd(CODEX_LONG.read_bytes()))
        (found,) = list(ADAPTERS["codex"].discover({}, home))
        seen.append((found.rel, found.compressed))
        assert _codex_ids_of(found) == expected
    assert seen == [
        (f"sessions/2026/02/23/{name}", None),
        (f"sessions/2026/02/23/{name}.zst", "zstd"),
        (f"archived_sessions/{name}.zst", "zstd"),
    ]


def test_codex_plain_wins_and_live_beats_archived(tmp_path):
    root = tmp_path / "ch"
    day = root / "sessions/2026/02/23"
    day.mkdir(parents=True)
    (root / "archived_sessions").mkdir()
    a, b = CODEX_LONG.name, CODEX_TURN.name
    shutil.copy(CODEX_LONG, day / a)
    (day / (a + ".zst")).write_bytes(_multi_frame_zstd(CODEX_LONG.read_bytes()))
    shutil.copy(CODEX_LONG, root / "archived_sessions" / a)
    (root / "archived_sessions" / (b + ".zst")).write_bytes(_multi_frame_zstd(CODEX_TURN.read_bytes()))
    (root / "archived_sessions" / b).write_bytes(CODEX_TURN.read_bytes())
    (day / "rollout-2026-02-23T00-00-00-partial.jsonl.zst").write_bytes(b"")  # being written
    flat = root / "sessions" / "rollout-2025-06-01T10-00-00-0197aaaa-0000-7000-8000-000000000000.jsonl"
    flat.write_text('{"id":"0197aaaa","timestamp":"2025-06-01T10:00:00Z","instructions":null,"git":null}\n')
    for secret in ("auth.json", "config.toml", "state_5.sqlite", "history.jsonl", "session_index.jsonl"):
        (root / secret).write_text("{}")
    found = list(ADAPTERS["codex"].discover({"CODEX_HOME": str(root)}, tmp_path / "nohome"))
    assert [(f.rel, f.compressed) for f in found] == [
        (f"archived_sessions/{b}", None),
        (f"sessions/2026/02/23/{a}", None),
        (f"sessions/{flat.name}", None),
    ]


def test_codex_zstd_is_recognised_by_magic_not_name(tmp_path):
    day = tmp_path / ".codex/sessions/2026/02/23"
    day.mkdir(parents=True)
    (day / CODEX_TURN.name).write_bytes(_multi_frame_zstd(CODEX_TURN.read_bytes()))
    (found,) = list(ADAPTERS["codex"].discover({}, tmp_path))
    assert found.compressed == "zstd"
    assert _codex_ids_of(found) == _codex_ids_of(source(CODEX_TURN))


LEGACY = [
    {"id": "0197b1c2-0000-7000-8000-00000000abcd", "timestamp": "2025-06-10T09:00:00.000Z",
     "instructions": "Be brief.", "git": {"commit_hash": "abc", "branch": "dev"}},
    {"record_type": "state"},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "<environment_context>\n<cwd>/w/app</cwd>\n</environment_context>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the build"}]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "secret thoughts"}]},
    {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"make\"]}", "call_id": "c1"},
    {"type": "function_call_output", "call_id": "c1",
     "output": "{\"output\":\"ok\\n\",\"metadata\":{\"exit_code\":0}}"},
    {"record_type": "state"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
]


def test_codex_legacy_jsonl_parses_with_header_identity():
    data = "".join(json.dumps(x) + "\n" for x in LEGACY).encode()
    items, errors, state = run(ADAPTERS["codex"], SourceFile("/x", "sessions/rollout-x.jsonl"), data)
    assert errors == [] and state.get("unknown", 0) == 0
    thread = LEGACY[0]["id"]
    assert [(position(r.id), r.kind, r.role, r.indexed) for r in records(items)] == [
        (f"{thread}:3", "meta", "user", False),
        (f"{thread}:4", "message", "user", True),
        (f"{thread}:6", "tool_call", "assistant", True),
        (f"{thread}:7", "tool_result", "tool", True),
        (f"{thread}:9", "message", "assistant", True),
    ]
    assert records(items, "tool_result")[0].text == "ok\n"
    assert all(r.ts == adapters.parse_ts(LEGACY[0]["timestamp"]) and r.ts_approx for r in records(items))
    assert infos(items)[0].branch == "dev"
    assert ("fix the build", 0) in [(i.title, i.title_rank) for i in infos(items)]
    assert not any("secret" in r.text for r in records(items))


def test_codex_ordinals_name_events_when_present():
    lines = [
        {"type": "session_meta", "ordinal": 0, "payload": {"id": "T", "cwd": "/w/p"}},
        {"type": "event_msg", "ordinal": 1, "payload": {"type": "user_message", "message": "hi"}},
        {"type": "response_item", "ordinal": 2, "payload": {"type": "message", "role": "assistant",
                                                           "content": [{"type": "output_text", "text": "a"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "f", "arguments": "{}"}},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    items, _, _ = run(ADAPTERS["codex"], SourceFile("/x", "x"), data)
    assert [position(r.id) for r in records(items)] == ["T:o1", "T:o2", "T:4"]
    assert {r.cwd for r in records(items)} == {"/w/p"}


def codex_turn(*payloads, ts="2026-02-01T10:00:00Z") -> bytes:
    """Return a rollout: session_meta, then one turn holding the given items and events."""
    lines = [{"type": "session_meta", "payload": {"id": "T", "cwd": "/w/p"}},
             {"type": "event_msg", "payload": {"type": "task_started"}}]
    for p in payloads:
        lines.append({"type": "event_msg" if p["type"] == "user_message" else "response_item", "payload": p})
    lines.append({"type": "event_msg", "payload": {"type": "task_complete"}})
    return "".join(json.dumps({"timestamp": ts, **x}) + "\n" for x in lines).encode()


def user_item(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def user_event(text: str) -> dict:
    return {"type": "user_message", "message": text}


def prompts_of(items) -> list[tuple[str, str, bool]]:
    return [(position(r.id), r.kind, r.indexed, r.text) for r in records(items) if r.role == "user"]


def test_codex_a_prompt_item_and_its_event_give_one_prompt_in_either_order():
    for order in ((user_item("fix  the\nbuild"), user_event("fix the build")),
                  (user_event("fix the build"), user_item("fix the build "))):
        items, _, state = run(ADAPTERS["codex"], SourceFile("/x", "x"), codex_turn(*order), roundtrip=True)
        event_line = 3 if order[0]["type"] == "user_message" else 4
        assert prompts_of(items) == [(f"T:{event_line}", "message", True, "fix the build")]  # the event's id
        assert "pending" not in state


def test_codex_a_prompt_item_no_event_repeats_is_archived():
    """Repro: the item was dropped whenever the file was not legacy, so this prompt was in no event."""
    data = codex_turn(user_item("deploy to staging"), user_event("something else entirely"))
    items, _, _ = run(ADAPTERS["codex"], SourceFile("/x", "x"), data, roundtrip=True)
    assert prompts_of(items) == [("T:4", "message", True, "something else entirely"),
                                 ("T:3", "message", True, "deploy to staging")]
    kept = next(r for r in records(items) if r.text == "deploy to staging")
    assert (kept.line, kept.offset) == (3, len(data.split(b"\n")[0]) + len(data.split(b"\n")[1]) + 2)
    # No event at all, and the turn never ended: the quiet file's flush keeps it.
    data = b"\n".join(codex_turn(user_item("only an item")).split(b"\n")[:3]) + b"\n"
    items, _, _ = run(ADAPTERS["codex"], SourceFile("/x", "x"), data)
    assert prompts_of(items) == []
    items, _, state = run(ADAPTERS["codex"], SourceFile("/x", "x"), data, flush=True)
    assert prompts_of(items) == [("T:3", "message", True, "only an item")] and "pending" not in state


def test_codex_injected_context_under_an_unknown_marker_is_archived_as_meta():
    """Repro: a user item under a marker not in the list vanished; now it is meta, not searched."""
    text = "<workspace_digest>\nrepo: origin\n</workspace_digest>"
    items, _, _ = run(ADAPTERS["codex"], SourceFile("/x", "x"), codex_turn(user_item(text), user_event("go")))
    assert prompts_of(items) == [("T:4", "message", True, "go"), ("T:3", "meta", False, text)]


###############################################################################
# Grok Build ##################################################################
###############################################################################

GROK = FIXTURES / "grok"
GROK_MADE = GROK / "made-here"
GROK_SID = "019f7000-0000-7000-8000-0000000000a1"
GROK_UPDATES = GROK_MADE / "sessions/%2Ftmp%2Fproj" / GROK_SID / "updates.jsonl"
GROK_CHAT = GROK / "agent-sessions/chat_history.jsonl"
GROK_CHAT_ID = "019f6851-7ec4-7ef0-97d3-03f3eee38755"
GROK_CHILD_ID = "019f6851-7ec4-7ef0-97d3-03f3eee38756"
GROK_GROUP = "%2Ftmp%2Fas-agent-lab%2Fgrok%2Fproject"


def _grok_home(tmp_path: Path) -> Path:
    """Lay out a GROK_HOME with the made-here session and the real ones."""
    root = tmp_path / "grok-home"
    shutil.copytree(GROK_MADE / "sessions", root / "sessions")
    for folder, sid in ((GROK / "agent-sessions", GROK_CHAT_ID),
                        (GROK / "agent-sessions/subagent", GROK_CHILD_ID)):
        dest = root / "sessions" / GROK_GROUP / sid
        dest.mkdir(parents=True)
        for name in ("chat_history.jsonl", "summary.json"):
            shutil.copy(folder / name, dest / name)
    long_group = root / "sessions" / "very-long-project-name-3f9a1c"
    (long_group / "019f7000-0000-7000-8000-0000000000b2").mkdir(parents=True)
    (long_group / ".cwd").write_text("/home/a/" + "deep/" * 60 + "project\n")
    (long_group / "019f7000-0000-7000-8000-0000000000b2" / "updates.jsonl").write_text("")
    (long_group / "prompt_history.jsonl").write_text("{}\n")
    (root / "sessions" / "session_search.sqlite").write_bytes(b"SQLite format 3\x00")
    nested = root / "sessions" / "%2Ftmp%2Fproj" / GROK_SID / "compaction_checkpoints" / "c1"
    nested.mkdir(parents=True)
    (nested / "updates.jsonl").write_text("{}\n")
    for secret in ("auth.json", "config.toml"):
        (root / secret).write_text("{}")
    return root


def test_grok_discovers_one_log_per_session_with_summary_facts(tmp_path):
    root = _grok_home(tmp_path)
    found = list(ADAPTERS["grok"].discover({"GROK_HOME": str(root)}, tmp_path / "nohome"))
    assert [(f.rel, f.meta["format"]) for f in found] == [
        (f"sessions/{GROK_GROUP}/{GROK_CHAT_ID}/chat_history.jsonl", "chat"),
        (f"sessions/{GROK_GROUP}/{GROK_CHILD_ID}/chat_history.jsonl", "chat"),
        (f"sessions/%2Ftmp%2Fproj/{GROK_SID}/updates.jsonl", "updates"),
        ("sessions/very-long-project-name-3f9a1c/019f7000-0000-7000-8000-0000000000b2/updates.jsonl",
         "updates"),
    ]
    chat, child, updates, long = (f.meta for f in found)
    assert chat == {"format": "chat", "session": GROK_CHAT_ID, "cwd": "/tmp/as-agent-lab/grok/project",
                    "branch": "main", "model": "grok-4.5", "title": "Read hello.py and summarize what it prints",
                    "title_rank": 2, "created_ms": adapters.parse_ts("2026-07-31T10:13:27.574131Z"),
                    "updated_ms": adapters.parse_ts("2026-07-31T10:15:02.118940Z"), "records": 11}
    assert child["parent"] == GROK_SID and "parent" not in chat
    assert updates["cwd"] == "/tmp/proj" and updates["branch"] == "feature/x"
    assert long["cwd"].startswith("/home/a/deep/") and long["session"].endswith("b2")


def _grok_updates() -> SourceFile:
    (f,) = [f for f in ADAPTERS["grok"].discover({"GROK_HOME": str(GROK_MADE)}, Path("/nonexistent"))]
    return f


def test_grok_updates_join_chunks_and_merge_tool_updates():
    items, errors, state = run(ADAPTERS["grok"], _grok_updates())
    assert errors == []
    s = GROK_SID
    got = [(r.id, r.kind, r.role, r.line, r.span, r.indexed) for r in records(items)]
    assert got == [
        (f"{s}:ev-001", "message", "user", 1, 2, True),
        (f"{s}:ev-003", "meta", "assistant", 3, 2, False),
        (f"{s}:ev-005", "message", "assistant", 5, 2, True),
        (f"{s}:call-1", "tool_call", "assistant", 7, 1, True),
        (f"{s}:call-1#result", "tool_result", "tool", 9, 1, True),
        (f"{s}:ev-010", "message", "assistant", 10, 1, True),
        (f"{s}:call-2", "tool_call", "assistant", 11, 1, True),
        (f"{s}:call-2#result", "tool_result", "tool", 12, 1, True),
        (f"{s}:ev-016", "message", "user", 16, 1, True),
        (f"{s}:ev-017", "message", "assistant", 17, 1, True),
        (f"{s}:ev-018", "meta", "system", 18, 1, False),
        (f"{s}:ev-019", "message", "user", 19, 1, True),
        (f"{s}:ev-020", "message", "assistant", 20, 1, True),
    ]
    texts = {r.id.split(":", 1)[1]: r.text for r in records(items)}
    assert texts["ev-001"] == "Read hello.py and summarize it"
    assert texts["call-1"] == 'Read hello.py {"path":"hello.py"}'
    assert texts["call-1#result"] == "print('hi')\n"  # the last update, not every one
    assert texts["call-2#result"] == "hi\n"
    assert texts["ev-016"] == "now make it say hello"
    assert state["unknown"] == 1  # the future kind
    assert all(r.cwd == "/tmp/proj" and r.branch == "feature/x" for r in records(items))


def test_grok_joined_message_locator_points_at_its_lines():
    f = _grok_updates()
    data = GROK_UPDATES.read_bytes()
    offsets = {n: off for n, off, _ in lines_of(data)}
    items, _, _ = run(ADAPTERS["grok"], f)
    for r in records(items):
        assert r.offset == offsets[r.line]
        for text in data[r.offset:].splitlines()[: r.span]:
            assert json.loads(text)["params"]["sessionId"] == GROK_SID


def test_grok_times_take_every_documented_shape():
    items, _, _ = run(ADAPTERS["grok"], _grok_updates())
    ts = {r.id.split(":", 1)[1]: r.ts for r in records(items)}
    assert ts["ev-001"] == 1_785_000_000_000  # epoch seconds
    assert ts["ev-003"] == 1_785_000_001_200  # agentTimestampMs beats epoch ms
    assert ts["ev-005"] == adapters.parse_ts("2026-07-25T17:20:02Z")  # ISO with nanoseconds


def test_grok_state_survives_a_stop_after_any_line():
    f = _grok_updates()
    straight = run(ADAPTERS["grok"], f)
    resumed = run(ADAPTERS["grok"], f, roundtrip=True)
    assert straight == resumed
    data = GROK_UPDATES.read_bytes()
    cut_points = [off for _, off, _ in lines_of(data)][1:]
    for cut in cut_points:  # two syncs: up to the cut, then the rest
        first = run(ADAPTERS["grok"], f, data[:cut])
        state = json.loads(json.dumps(first[2]))
        rest, lineno = [], data[:cut].count(b"\n")
        for n, off, text in lines_of(data[cut:]):
            ctx = Context(f, state, lineno + n, cut + off, 1_700_000_000_000)
            rest.extend(ADAPTERS["grok"].parse(text, ctx))
        assert first[0] + rest == straight[0]


def test_grok_titles_from_summary_then_first_prompt():
    items, _, _ = run(ADAPTERS["grok"], _grok_updates())
    assert [(i.title, i.title_rank) for i in infos(items) if i.title] == [
        ("Summarize hello.py and change it", 2), ("Read hello.py and summarize it", 0)]
    first = infos(items)[0]
    assert (first.session, first.model, first.cwd) == (GROK_SID, "grok-4.5", "/tmp/proj")


def _grok_chat(tmp_path: Path, sid: str = GROK_CHAT_ID) -> SourceFile:
    root = _grok_home(tmp_path)
    return next(f for f in ADAPTERS["grok"].discover({"GROK_HOME": str(root)}, tmp_path)
                if f.meta["session"] == sid)


def test_grok_chat_history_v1_counts(tmp_path):
    lines = json_lines(GROK_CHAT)
    items, errors, state = run(ADAPTERS["grok"], _grok_chat(tmp_path))
    assert errors == [] and state.get("unknown", 0) == 0
    prompts = [o for o in lines if o["type"] == "user" and "synthetic_reason" not in o]
    calls = sum(len(o.get("tool_calls", [])) for o in lines) + sum(o["type"] == "backend_tool_call" for o in lines)
    assert len([r for r in records(items, "message") if r.role == "user"]) == len(prompts) == 2
    assert len([r for r in records(items, "message") if r.role == "assistant"]) == sum(
        o["type"] == "assistant" and bool(o["content"]) for o in lines)
    assert len(records(items, "tool_call")) == calls == 3
    assert len(records(items, "tool_result")) == sum(o["type"] == "tool_result" for o in lines)
    meta = records(items, "meta")
    assert [r.role for r in meta] == ["system", "user"] and not any(r.indexed for r in meta)
    texts = " ".join(r.text for r in records(items))
    assert "summary of hello.py without edits" not in texts  # reasoning stays out
    assert "[image]" in texts and "base64" not in texts
    ids = [r.id for r in records(items)]
    assert len(ids) == len(set(ids)) and all(i.startswith(GROK_CHAT_ID + ":") for i in ids)


def test_grok_times_come_from_the_session_not_the_file(tmp_path):
    """Repro: every Grok event had the file's mtime (the moment the files were copied)."""
    items, _, _ = run(ADAPTERS["grok"], _grok_chat(tmp_path), mtime_ms=1_900_000_000_000)
    times = [r.ts for r in records(items)]
    created, updated = adapters.parse_ts("2026-07-31T10:13:27.574131Z"), adapters.parse_ts("2026-07-31T10:15:02.118940Z")
    assert times[0] == created and times[-1] == updated  # the first and last of the 11 records
    assert times == sorted(times) and len(set(times)) > 2
    assert all(r.ts_approx for r in records(items))  # guessed from the summary: approximate
    # A record with a time of its own keeps it, precisely.
    f = _grok_chat(tmp_path / "again")
    line = json.dumps({"type": "user", "content": "timed", "prompt_index": 5, "timestamp": "2026-08-01T00:00:00Z"})
    items, _, _ = run(ADAPTERS["grok"], f, (line + "\n").encode(), mtime_ms=1_900_000_000_000)
    (r,) = [r for r in records(items) if r.text == "timed"]
    assert (r.ts, r.ts_approx) == (adapters.parse_ts("2026-08-01T00:00:00Z"), False)


def test_grok_updates_without_times_start_at_the_session_start(tmp_path):
    f = adapters.SourceFile("/x", "x", meta={"format": "updates", "session": "S",
                                              "created_ms": 1_780_000_000_000})
    line = {"method": "session/update", "params": {"sessionId": "S", "update": {
        "sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hello"}}}}
    data = (json.dumps(line) + "\n").encode()
    items, _, state = run(ADAPTERS["grok"], f, data, mtime_ms=1_900_000_000_000)
    items += ADAPTERS["grok"].flush(Context(file=f, state=state, lineno=1, mtime_ms=1_900_000_000_000))
    (r,) = records(items)
    assert (r.ts, r.ts_approx) == (1_780_000_000_000, True)


def test_grok_chat_history_rewrite_keeps_ids_of_kept_records(tmp_path):
    f = _grok_chat(tmp_path)
    before, _, _ = run(ADAPTERS["grok"], f)
    lines = GROK_CHAT.read_text(encoding="utf-8").splitlines()
    # A compaction replaces the first turn with a summary and keeps the rest.
    summary = json.dumps({"type": "user", "content": [{"type": "text", "text": "Summary of turn 0."}],
                          "synthetic_reason": "compaction_summary"})
    rewritten = "\n".join([lines[0], summary, lines[-1]]) + "\n"
    after, errors, _ = run(ADAPTERS["grok"], f, rewritten.encode(), mtime_ms=1_800_000_000_000)
    assert errors == []
    last_before = [r.id for r in records(before) if r.role == "user" and r.kind == "message"][-1]
    assert last_before in [r.id for r in records(after)]
    assert run(ADAPTERS["grok"], f)[0] == before  # same bytes, same ids


def test_grok_chat_history_v0_by_role():
    lines = [
        {"role": "system", "content": "You are Grok."},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": "", "reasoning_content": "hidden",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "One file."},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    f = SourceFile("/g/chat_history.jsonl", "sessions/g/s1/chat_history.jsonl",
                   meta={"format": "chat", "session": "s1"})
    items, errors, state = run(ADAPTERS["grok"], f, data)
    assert errors == [] and state.get("unknown", 0) == 0
    assert [(r.kind, r.role, r.text) for r in records(items)] == [
        ("meta", "system", "You are Grok."),
        ("message", "user", "list files"),
        ("tool_call", "assistant", 'ls {"path":"."}'),
        ("tool_result", "tool", "a.py"),
        ("message", "assistant", "One file."),
    ]


def test_grok_subagent_session_reports_its_parent(tmp_path):
    items, errors, _ = run(ADAPTERS["grok"], _grok_chat(tmp_path, GROK_CHILD_ID))
    assert errors == []
    assert infos(items)[0].parent == GROK_SID
    assert infos(items)[0].title == "Count the Python files under the project root"


###############################################################################
# Gemini CLI ##################################################################
###############################################################################

GEMINI = FIXTURES / "gemini"
GEMINI_JSONL = GEMINI / "agent-sessions/jsonl_v040.jsonl"
GEMINI_SMALL = GEMINI / "agent-sessions/small.json"
GEMINI_TOOLS = GEMINI / "agentsview-json/tool_calls_with_results.json"
LATER = 1_900_000_000_000


def gemini_export(f: SourceFile, known: dict | None = None, now: int = LATER):
    """Export a first-era document as ingest does; return (tuples, parsed items, errors)."""
    out = list(ADAPTERS["gemini"].export(f, dict(known or {}), now))
    data = "".join(line + "\n" for _, _, line in out).encode()
    items, errors, _ = run(ADAPTERS["gemini"], f, data)
    return out, items, errors


def gemini_doc(path: Path, **meta) -> SourceFile:
    return SourceFile(str(path), path.name, kind="db", meta=meta)


def test_gemini_discovers_both_eras_with_each_project_folder_path(tmp_path):
    g = tmp_path / ".gemini"
    slug, hashed, rooted = g / "tmp" / "shop" / "chats", g / "tmp" / ("a" * 64) / "chats", g / "tmp" / "api" / "chats"
    for d in (slug, hashed, rooted / "parent-id"):
        d.mkdir(parents=True)
    import hashlib
    (g / "projects.json").write_text(json.dumps({"projects": {"/home/dev/shop": "shop"}}))
    hashed.parent.rename(g / "tmp" / hashlib.sha256(b"/home/dev/shop").hexdigest())
    (rooted.parent / ".project_root").write_text("/home/dev/api\n")
    shutil.copy(GEMINI_SMALL, slug / "session-2026-01-16T18-34-3739ef95.json")
    shutil.copy(GEMINI_JSONL, rooted / "session-2026-04-29T21-39-gemini_s.jsonl")
    shutil.copy(GEMINI_JSONL, rooted / "parent-id" / "child.jsonl")
    (slug / "notes.txt").write_text("not a session")
    (slug / "checkpoint-x.json").write_text("{}")  # only session-* files are sessions
    found = {f.rel: f for f in ADAPTERS["gemini"].discover({}, tmp_path)}
    assert sorted(found) == ["tmp/api/chats/parent-id/child.jsonl", "tmp/api/chats/session-2026-04-29T21-39-gemini_s.jsonl",
                             "tmp/shop/chats/session-2026-01-16T18-34-3739ef95.json"]
    assert found["tmp/shop/chats/session-2026-01-16T18-34-3739ef95.json"].kind == "db"
    assert found["tmp/shop/chats/session-2026-01-16T18-34-3739ef95.json"].meta == {"cwd": "/home/dev/shop"}
    assert found["tmp/api/chats/session-2026-04-29T21-39-gemini_s.jsonl"].meta == {"cwd": "/home/dev/api"}
    assert found["tmp/api/chats/parent-id/child.jsonl"].meta == {"cwd": "/home/dev/api", "parent": "parent-id"}
    env = {"ORIGIN_GEMINI_HOME": str(g)}
    assert len(list(ADAPTERS["gemini"].discover(env, tmp_path / "elsewhere"))) == 3


def test_gemini_document_messages_thoughts_tool_calls_and_results():
    _, items, errors = gemini_export(gemini_doc(GEMINI_TOOLS, cwd="/home/dev/shop"))
    assert errors == []
    recs = records(items)
    assert [(r.kind, r.role) for r in recs] == [("message", "user"), ("message", "assistant"), ("tool_call", "assistant"),
                                              ("tool_result", "tool"), ("tool_call", "assistant"),
                                              ("tool_result", "tool"), ("message", "assistant")]
    assert recs[1].text == "Planning: I need to read the planning document." and not recs[1].indexed
    assert recs[2].text == 'read_file {"file_path":".planning/ONE-PAGER.md"}'
    assert recs[3].text.startswith("# Agentstrove -- One-Pager")
    assert all(r.cwd == "/home/dev/shop" and r.session == "sess-uuid-tool-results" for r in recs)
    assert [i.title for i in infos(items) if i.title] == ["Read the planning doc"]


def test_gemini_rewritten_document_archives_each_version_and_adds_only_what_changed(tmp_path):
    doc = json.loads(GEMINI_SMALL.read_text())
    path = tmp_path / "session-2026-01-16T18-34-3739ef95.json"
    path.write_text(json.dumps(doc))
    first, items, _ = gemini_export(gemini_doc(path))
    ids = {r.id for r in records(items)}
    known = {k: h for k, h, _ in first}
    assert list(ADAPTERS["gemini"].export(gemini_doc(path), known, LATER)) == []  # unchanged: nothing
    # Gemini CLI rewrites the whole file: one message answered again, one added, a summary.
    doc["messages"][1]["content"] = "Hi! How can I help?"
    doc["messages"].append({"id": "m3", "timestamp": "2026-01-16T18:35:00.000Z", "type": "user", "content": "Bye"})
    doc["summary"] = "Greetings"
    path.write_text(json.dumps(doc, indent=2))
    second, items, errors = gemini_export(gemini_doc(path), known)
    assert errors == [] and sorted(k for k, _, _ in second) == ["msg:m2", "msg:m3", "session"]
    new = {r.id for r in records(items)} - ids
    assert sorted(r.text for r in records(items) if r.id in new) == ["Bye", "Hi! How can I help?"]
    assert [i.title for i in infos(items) if i.title_rank == adapters.RANK_SUMMARY] == ["Greetings"]


def test_gemini_newest_message_of_a_document_waits_until_the_file_is_quiet(tmp_path):
    path = tmp_path / "session-x.json"
    shutil.copy(GEMINI_TOOLS, path)
    now = int(path.stat().st_mtime * 1000)
    keys = [k for k, _, _ in ADAPTERS["gemini"].export(gemini_doc(path), {}, now)]
    assert keys == ["session", "msg:u1"]  # the answer may still gain tool results
    keys = [k for k, _, _ in ADAPTERS["gemini"].export(gemini_doc(path), {}, now + adapters.DB_QUIET_MS)]
    assert keys == ["session", "msg:u1", "msg:a1"]
    path.write_text('{"sessionId": "x", "messages": [')  # caught mid-rewrite
    assert list(ADAPTERS["gemini"].export(gemini_doc(path), {}, LATER)) == []


def test_gemini_jsonl_set_rewind_and_a_repeated_id(tmp_path):
    lines = GEMINI_JSONL.read_text().splitlines() + [
        json.dumps({"$set": {"summary": "List the files"}}),
        json.dumps({"id": "g-user-2", "timestamp": "2026-04-29T21:40:00Z", "type": "user", "content": "Delete them"}),
        json.dumps({"$rewindTo": "g-user-2"}),
        json.dumps({"id": "g-user-2", "timestamp": "2026-04-29T21:40:09Z", "type": "user", "content": "Keep them"}),
        json.dumps({"$set": {"messages": [{"id": "g-user-1", "timestamp": "2026-04-29T21:39:33.155Z", "type": "user",
                                           "content": [{"text": "Say hello and list files."}]}]}}),
        json.dumps({"type": "mystery"}),
    ]
    path = tmp_path / "session-2026-04-29T21-39-gemini_s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    items, errors, state = run(ADAPTERS["gemini"], SourceFile(str(path), path.name, meta={"cwd": "/w"}), roundtrip=True)
    assert errors == [] and state["unknown"] == 1
    texts = [r.text for r in records(items, "message") if r.role == "user"]
    # The checkpoint repeats the first prompt with the same id; the rewound prompt stays archived.
    assert texts == ["Say hello and list files.", "Delete them", "Keep them", "Say hello and list files."]
    assert len({r.id for r in records(items)}) == len(records(items)) - 1
    (result,) = records(items, "tool_result")
    assert "README.md" in result.text and result.session == "gemini_stage0_jsonl"
    assert [i.title for i in infos(items) if i.title_rank == adapters.RANK_SUMMARY] == ["List the files"]


def test_gemini_session_resumed_and_rewritten_as_jsonl_keeps_its_event_ids(tmp_path):
    doc = json.loads(GEMINI_SMALL.read_text())
    _, items, _ = gemini_export(gemini_doc(GEMINI_SMALL))
    as_json = {r.id for r in records(items)}
    path = tmp_path / "session-2026-01-16T18-34-3739ef95.jsonl"
    meta = {k: v for k, v in doc.items() if k != "messages"}
    path.write_text("".join(json.dumps(x) + "\n" for x in [meta, *doc["messages"]]))
    items, errors, _ = run(ADAPTERS["gemini"], SourceFile(str(path), path.name))
    assert errors == [] and {r.id for r in records(items)} == as_json
