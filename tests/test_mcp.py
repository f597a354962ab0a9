"""The MCP server: seven tools over stdio in both protocol eras, errors, freshness.

The SDK's own client drives the server as a separate process, as an agent
would; the MCP Inspector CLI (a client nobody here wrote) checks it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

import origin
from conftest import ROOT
from helpers import SERVER, failed, ok, run_client, write_cycle


TOOLS = ["search", "timeline", "get", "sources", "remember", "correct", "forget"]
ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
#: A decision taken in the Demo fixture session, and the words it rests on.
DECISION = ("Demo project: `npm run type-check` was removed from CLAUDE.md because package.json "
            "defines no such script.")
QUOTE = "`npm run type-check`を削除（実際には存在しない）"


@pytest.fixture
def archive(claude_root, origin_home) -> dict:
    """Sync the Claude Code fixtures and record the decision; return its entry."""
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        return origin.remember(store, kind="memory", text=DECISION, sources=[{"quote": QUOTE}], author="user")


def test_search_reads_a_plain_question_and_puts_the_decision_first(claude_root, origin_home):
    """The mission question as an agent asks it, through a real MCP client."""
    text = "Demo project: decision to drop `npm run type-check` from CLAUDE.md; package.json has no such script."
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        entry = origin.remember(store, kind="memory", text=text, sources=[{"quote": QUOTE}], author="user")

    async def body(c):
        return ok(await c.call_tool("search", {"query": "what did I decide in Demo last week"})), \
            ok(await c.call_tool("search", {"query": "decide", "strict": True}))

    res, strict = run_client("auto", body)
    assert res["entries"][0]["id"] == entry["id"]
    assert res["understood"] == {**res["understood"], "project": "Demo", "when": "last week", "words": ["decide"]}
    assert strict["entries"] == [] and strict["events"] == [] and "no matches" in strict["note"]


@pytest.mark.parametrize("mode", ERAS)
def test_both_eras_list_the_seven_tools_with_instructions(archive, mode):
    async def body(c):
        return c.protocol_version, c.instructions, (await c.list_tools()).tools

    version, instructions, tools = run_client(mode, body)
    assert version == ERAS[mode]
    assert [t.name for t in tools] == TOOLS
    for word in ("search", "remember", "decision", "quote", "explicitly"):
        assert word in instructions
    for t in tools:
        assert t.input_schema["additionalProperties"] is False
        assert len(t.description) > 150
    forget = next(t for t in tools if t.name == "forget")
    assert "ONLY when the user explicitly asks" in forget.description
    assert forget.annotations.destructive_hint is True
    assert next(t for t in tools if t.name == "get").input_schema["properties"]["ids"]["type"] == "array"
    assert "query" in next(t for t in tools if t.name == "search").input_schema["properties"]


@pytest.mark.parametrize("mode", ERAS)
def test_invariant_5_all_seven_tools_in_one_session(archive, mode):
    async def body(c):
        out = {}
        out["search"] = ok(await c.call_tool("search", {"query": "type-check", "project": "Demo"}))
        out["recent"] = ok(await c.call_tool("search", {}))
        out["sessions"] = ok(await c.call_tool("timeline", {"since": "2025-01-01"}))
        out["session"] = ok(await c.call_tool("timeline", {"session": SESSION, "limit": 5}))
        cited = archive["sources"][0]["event"]
        event_id = next(e["id"] for e in out["search"]["events"] if e["id"] != cited)
        out["get"] = ok(await c.call_tool("get", {"ids": [archive["id"], event_id, "claude-code:nope"]}))
        out["sources"] = ok(await c.call_tool("sources", {"id": archive["id"]}))
        return await write_cycle(c, out, event_id, confidence=0.8)

    out = run_client(mode, body)
    assert out["search"]["entries"][0]["id"] == archive["id"]
    assert all(len(e["snippet"]) <= origin.SNIPPET_CHARS + 2 for e in out["search"]["events"])
    assert out["recent"]["entries"][0]["id"] == archive["id"]
    assert any(s["session"] == SESSION for s in out["sessions"]["sessions"])
    assert len(out["session"]["events"]) == 5 and out["session"]["session"]["session"] == SESSION
    entry, event = (i.get("entry") or i.get("event") for i in out["get"]["items"])
    assert entry["text"] == DECISION and "history" not in entry  # one version: implied
    assert entry["sources"][0] == {"event": entry["sources"][0]["event"], "state": "visible", "quote": QUOTE,
                                   "time": entry["sources"][0]["time"], "line": 53}
    assert "type-check" in event["text"]
    assert out["get"]["errors"][0]["id"] == "claude-code:nope"
    src = out["sources"]["sources"][0]
    assert src["quote"] == QUOTE and QUOTE in src["raw"] and src["line"] == 53
    assert out["remember"]["author"] == "test-agent" and out["remember"]["confidence"] == 0.8
    assert out["correct"]["supersedes"] == out["remember"]["id"]
    assert out["preview"]["done"] is False and len(out["preview"]["would_forget_entries"]) == 2
    assert out["forget"]["done"] is True and len(out["forget"]["forgotten_entries"]) == 2
    assert out["after"].startswith("forgotten:")
    with origin.open_store() as store:  # the archive was really changed, through the core
        assert origin.entry_status(store.conn, out["remember"]["id"]) == "forgotten"


@pytest.mark.parametrize("mode", ERAS)
def test_every_error_is_a_tool_error_with_a_reason(archive, mode):
    cases = [
        ("nope", {}, "unknown tool 'nope'"),
        ("search", {"query": "x", "colour": "red"}, "unknown argument 'colour'"),
        ("search", {"limit": "ten"}, "'limit'"),
        ("search", {"limit": origin.MAX_LIMIT + 1}, "maximum"),
        ("search", {"since": "last tuesday"}, "is not a date"),
        ("get", {"id": "x"}, "unknown argument 'id'"),
        ("get", {"ids": "ent_x"}, "not of type 'array'"),
        ("get", {"ids": []}, "should be non-empty"),
        ("get", {"ids": ["ent_nope"]}, "not found: no entry 'ent_nope'"),
        ("sources", {"id": "claude-code:nope"}, "not found: no event"),
        ("remember", {"kind": "memory", "text": "x"}, "missing argument 'sources'"),
        ("remember", {"kind": "memory", "text": "x", "sources": [{"quote": "words nobody ever wrote"}]},
         "not found: no visible message"),
        ("remember", {"kind": "memory", "text": "x", "sources": [{"id": "e"}]}, "unknown argument 'id' in sources.0"),
        ("remember", {"kind": "mood", "text": "x", "sources": [{"quote": QUOTE}]}, "'kind'"),
        ("correct", {"id": "ent_nope", "text": "y"}, "not found: no entry"),
        ("forget", {"id": "ent_nope"}, "not found: no entry, event or session"),
        ("timeline", {"session": "no-such-session"}, "not found: no session"),
        ("search", {"query": "x", "source": "nope"}, "argument 'source': 'nope' is not one of"),
        ("search", {"query": "x", "session": "no-such-session"}, "not found: no session 'no-such-session'"),
        ("search", {"query": "x", "project": "no-such-project"}, "not found: no project 'no-such-project'"),
        ("timeline", {"session": SESSION, "after": "claude-code:nope"}, "invalid arguments: after is the id"),
        ("get", {"ids": [f"claude-code:{SESSION}"], "context": 99}, "maximum"),
    ]

    async def body(c):
        out = [(await c.call_tool(name, args)) for name, args, _ in cases]
        newer = ok(await c.call_tool("correct", {"id": archive["id"], "text": DECISION + " (checked)"}))["entry"]
        out.append(await c.call_tool("correct", {"id": archive["id"], "text": "again"}))
        shown = ok(await c.call_tool("forget", {"id": newer["id"]}))
        ok(await c.call_tool("forget", {"id": newer["id"], "digest": shown["digest"]}))
        out.append(await c.call_tool("get", {"ids": [newer["id"], archive["id"]]}))
        out.append(await c.call_tool("sources", {"id": newer["id"]}))
        out.append(await c.call_tool("correct", {"id": newer["id"], "text": "again"}))
        return out, newer["id"]

    results, newer = run_client(mode, body)
    expected = [want for _, _, want in cases] + [f"conflict: entry {archive['id']} was already superseded by {newer}",
                                                 "forgotten:", "forgotten:", "forgotten:"]
    for result, want in zip(results, expected, strict=True):
        assert want in failed(result)
        assert "Traceback" not in result.content[0].text


def test_a_forget_with_the_retired_preview_argument_is_refused_with_what_to_do(archive, origin_home):
    async def body(c):
        return await c.call_tool("forget", {"id": archive["id"], "preview": True})

    said = failed(run_client("auto", body))
    assert said.startswith("invalid arguments: forget no longer takes 'preview'")
    assert "without 'preview' and without 'digest' to get the plan and its digest" in said
    assert "upgrade Origin on that device" in said
    with origin.open_store(origin_home) as store:
        assert origin.entry_status(store.conn, archive["id"]) == "active"


def test_remember_cites_a_line_written_after_the_server_started(archive, claude_root):
    log = claude_root / "projects" / "-path-to-Demo" / f"{SESSION}.jsonl"
    said = "Let us keep port 3000 for the dev server, since every script already assumes it."
    line = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/path/to/Demo",
            "sessionId": SESSION, "version": "1.0.108", "gitBranch": "main", "type": "user",
            "message": {"role": "user", "content": said}, "uuid": str(uuid.uuid4()),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}

    async def body(c):
        ok(await c.call_tool("search", {"query": "type-check"}))  # server up, first sync done
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
        return ok(await c.call_tool("remember", {
            "kind": "memory", "text": "Demo keeps the dev server on port 3000 because every script assumes it.",
            "sources": [{"quote": "keep port 3000 for the dev server"}]}))["entry"]

    entry = run_client("auto", body)
    assert entry["sources"][0]["event"] == f"claude-code:{line['uuid']}"
    assert entry["sources"][0]["time"] is not None


def test_scenario_what_did_i_decide_and_why_in_three_calls(all_agents, archive, capsys):
    """Done means: asking what was decided in a project, and why, gets the answer and its original line.

    On the fixture logs of four agents plus one remembered decision, with the project named in the wrong case;
    the calls and the characters of tool output they cost are printed (not timed).
    """
    async def body(c):
        calls, chars = 0, 0

        async def call(name, args):
            nonlocal calls, chars
            result = await c.call_tool(name, args)
            calls += 1
            chars += sum(len(part.text) for part in result.content)
            return ok(result)

        found = await call("search", {"query": "type-check", "project": "demo"})
        entry_id = found["entries"][0]["id"]
        entry = (await call("get", {"ids": [entry_id]}))["items"][0]["entry"]
        raw = (await call("sources", {"id": entry_id}))["sources"][0]
        return calls, chars, entry, raw

    calls, chars, entry, raw = run_client("auto", body)
    with capsys.disabled():
        print(f"\nscenario search -> get -> sources: {calls} tool calls, {chars} characters of tool output")
    assert entry["id"] == archive["id"]
    assert "because package.json defines no such script" in entry["text"]  # the decision and its reason
    log = Path(raw["file"]).read_text(encoding="utf-8").splitlines()
    assert raw["raw"] == log[raw["line"] - 1]  # the original log line, verbatim
    assert QUOTE in raw["raw"]
    assert calls <= 3 and chars <= 3600


@pytest.mark.parametrize("mode", ERAS)
def test_tools_list_costs_at_most_6000_characters(archive, capsys, mode):
    async def body(c):
        return await c.list_tools()

    listed = run_client(mode, body)
    wire = listed.model_dump_json(by_alias=True, exclude_none=True)  # the whole result, envelope included
    with capsys.disabled():
        print(f"\ntools/list ({mode} era): {len(wire)} characters for {len(listed.tools)} tools")
    assert len(wire) <= 6000
    for t in listed.tools:  # still clear: each says what it does, and each argument is typed
        assert len(t.description) > 150 and t.input_schema["type"] == "object"
        assert all("type" in p for p in t.input_schema["properties"].values()), t.name


def test_published_schemas_leave_out_bounds_that_are_still_enforced(archive, origin_home):
    published = origin.published_schema(origin.MCP_TOOLS["search"].schema)
    assert "maxLength" not in published["properties"]["query"]
    # The agents' names grow with the table of agents: listed by `sources`, still checked.
    assert "enum" not in published["properties"]["source"] and "unlisted" not in published["properties"]["source"]
    assert origin.MCP_TOOLS["search"].schema["properties"]["source"]["enum"] == list(origin.SOURCES)
    service = origin.McpService(origin_home, FakeSync())
    text, is_error = service.call("search", {"query": "x" * (origin.MAX_QUERY + 1)}, "t")
    service.close()
    assert is_error and text == f"invalid arguments: argument 'query' is at most {origin.MAX_QUERY} characters"


def test_timeline_pages_a_session_with_next_through_32_messages_sharing_one_timestamp(all_agents, archive):
    from conftest import CURSOR_SAME_TS

    async def body(c):
        first = ok(await c.call_tool("timeline", {"session": CURSOR_SAME_TS, "limit": 5}))
        pages, seen, page = 1, [e["id"] for e in first["events"]], first
        while "next" in page:
            page = ok(await c.call_tool("timeline", {"session": CURSOR_SAME_TS, "limit": 5, **page["next"]}))
            seen += [e["id"] for e in page["events"]]
            pages += 1
        whole = ok(await c.call_tool("timeline", {"session": CURSOR_SAME_TS, "limit": 100}))
        return first, seen, pages, whole

    first, seen, pages, whole = run_client("auto", body)
    assert seen == [e["id"] for e in whole["events"]] and len(seen) == 32 and pages == 7
    assert "next" not in whole
    assert all(not {"session", "source", "project"} & set(e) and e["id"] and e["snippet"] for e in first["events"])
    assert "since" not in next(t for t in origin.MCP_TOOLS.values() if t.name == "timeline").description


def test_get_with_context_returns_the_messages_around_each_event(archive, origin_home):
    with origin.open_store(origin_home) as store:
        events = origin.timeline(store, session=SESSION)["events"]
        res = origin.mcp_get(store, {"ids": [events[3]["id"], archive["id"]], "context": 2}, "t")
    around = res["items"][0]["context"]
    assert [e["id"] for e in around["before"]] == [e["id"] for e in events[1:3]]
    assert [e["id"] for e in around["after"]] == [e["id"] for e in events[4:6]]
    assert "context" not in res["items"][1]  # an entry has sources instead


def test_sources_cut_a_long_line_at_the_message_not_the_envelope(archive, origin_home):
    with origin.open_store(origin_home) as store:
        long = next(e for e in origin.timeline(store, session=SESSION)["events"]
                    if len(origin.raw_sources(store, e["id"])[0]["raw"]) > 1000
                    and origin.raw_sources(store, e["id"])[0]["raw"].find(
                        origin.get_event(store, e["id"])["text"][:30]) > 300)
        text = origin.get_event(store, long["id"])["text"]
        res = origin.mcp_sources(store, {"id": long["id"], "max_chars": 300}, "t")
    raw = res["sources"][0]["raw"]
    assert res["sources"][0]["raw_truncated"] is True
    assert text[:30] in raw and raw.startswith("…") and len(raw) <= 302


def test_forget_shares_its_checks_and_plan_with_the_cli(archive, origin_home, cli):
    with origin.open_store(origin_home) as store:
        tool = origin.mcp_forget(store, {"id": archive["id"]}, "t")
    code, preview = cli("forget", archive["id"], "--json")
    assert code == 1 and preview == {k: v for k, v in tool.items() if k != "note"}
    code, _ = cli("forget", archive["id"], "--reason", "r" * (origin.MAX_REASON + 1), "--yes")
    with origin.open_store(origin_home) as store:
        with pytest.raises(origin.UsageError) as mcp_error:
            origin.mcp_forget(store, {"id": archive["id"], "reason": "r" * (origin.MAX_REASON + 1)}, "t")
    assert code == 2 and str(mcp_error.value) in cli.err


def test_long_raw_lines_are_cut_around_the_quote_and_marked(archive, origin_home):
    with origin.open_store(origin_home) as store:
        res = origin.mcp_sources(store, {"id": archive["id"], "max_chars": 200}, "t")
    src = res["sources"][0]
    assert src["raw_truncated"] is True and src["raw_chars"] > 200
    assert src["raw"].startswith("…") and QUOTE[:20] in src["raw"] and len(src["raw"]) <= 202


def test_get_opens_several_ids_and_fails_only_when_none_open(archive, origin_home):
    with origin.open_store(origin_home) as store:
        res = origin.mcp_get(store, {"ids": [archive["id"], archive["id"], "x:y"]}, "t")
        assert len(res["items"]) == 1 and res["errors"][0]["id"] == "x:y"
        with pytest.raises(origin.OriginError, match="no event 'x:y'.*no event 'x:z'"):
            origin.mcp_get(store, {"ids": ["x:y", "x:z"]}, "t")


def test_client_name_comes_from_either_era_else_a_fallback():
    def ctx(params=None, meta=None):
        return SimpleNamespace(session=SimpleNamespace(client_params=params), meta=meta)

    legacy = SimpleNamespace(client_info=SimpleNamespace(name="codex-mcp-client"))
    envelope = {"io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2"}}
    assert origin.mcp_client_name(ctx(legacy)) == "codex-mcp-client"
    assert origin.mcp_client_name(ctx(meta=envelope)) == "claude-code"
    assert origin.mcp_client_name(ctx()) == "mcp-client"
    assert origin.mcp_client_name(ctx(meta={"io.modelcontextprotocol/clientInfo": {"name": "  "}})) == "mcp-client"


class FakeSync:
    """A sync callback that records its calls; full syncs can be held."""

    def __init__(self, hold_full: bool = False, fail: bool = False):
        self.calls: list = []
        self.release = threading.Event()
        if not hold_full:
            self.release.set()
        self.fail = fail

    def __call__(self, store, changed_since=None, lazy=False, index=None):
        self.calls.append(changed_since)
        if changed_since is None:
            self.release.wait(10)
        if self.fail:
            raise OSError("disk on fire")

    def wait_for(self, n: int) -> list:
        deadline = time.monotonic() + 5
        while len(self.calls) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.calls)


def test_freshness_first_sync_runs_in_background_and_catch_ups_cover_recent_files(archive, origin_home):
    fake = FakeSync(hold_full=True)
    service = origin.McpService(origin_home, fake, sync_interval=60)
    service.start()
    t0 = time.monotonic()
    text, is_error = service.call("search", {"query": "type-check"}, "t")
    assert not is_error and time.monotonic() - t0 < 5  # answered while the full sync is held
    calls = fake.wait_for(2)
    assert calls.count(None) == 1  # the initial full sync, in its thread
    catch_up = next(c for c in calls if c is not None)
    assert catch_up <= origin.now_ms() - origin.MCP_CATCHUP_MS + 60_000  # only recently modified files
    service.call("get", {"ids": [archive["id"]]}, "t")
    assert len(fake.calls) == 2  # a read inside the interval does not sync
    fake.release.set()
    assert service._initial_done.wait(5)
    service.call("remember", {"kind": "memory", "text": "x y z", "sources": [{"quote": QUOTE}]}, "t")
    assert fake.calls[2:] == [None]  # writes always sync, fully once the first sync is done
    service.close()


def test_freshness_failed_sync_is_logged_and_tools_still_answer(archive, origin_home, capsys):
    service = origin.McpService(origin_home, FakeSync(fail=True), sync_interval=0)
    text, is_error = service.call("search", {"query": "type-check"}, "t")
    service.close()
    assert not is_error and json.loads(text)["entries"]
    assert "disk on fire" in capsys.readouterr().err


def test_unexpected_exception_becomes_a_logged_tool_error(archive, origin_home, monkeypatch, capsys):
    service = origin.McpService(origin_home, FakeSync())
    monkeypatch.setattr(origin, "search", lambda *a, **k: 1 / 0)
    text, is_error = service.call("search", {"query": "x"}, "t")
    service.close()
    assert is_error and "ZeroDivisionError" in text and "Traceback" not in text
    assert "Traceback" in capsys.readouterr().err


# Real clients ################################################################


def run_inspector(inspector, *args: str, era: str = "legacy") -> tuple[int, dict]:
    env = dict(os.environ, PATH=f"{Path(inspector[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [*inspector, "--cli", "--protocol-era", era, *SERVER,
           "-e", f"ORIGIN_HOME={os.environ['ORIGIN_HOME']}", "-e", f"HOME={os.environ['HOME']}",
           *args, "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    return done.returncode, json.loads(done.stdout or done.stderr or "{}")


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_lists_tools_strictly_and_sees_instructions(archive, inspector, era):
    code, listed = run_inspector(inspector, "--strict", "--method", "tools/list", era=era)
    assert code == 0, listed
    assert [t["name"] for t in listed["result"]["tools"]] == TOOLS
    code, init = run_inspector(inspector, "--method", "initialize", era=era)
    assert code == 0 and "Forget only when the user explicitly asks" in init["result"]["instructions"]


def test_inspector_calls_every_tool(archive, inspector):
    def call(tool, args, era="legacy"):
        return run_inspector(inspector, "--method", "tools/call", "--tool-name", tool,
                             "--tool-args-json", json.dumps(args), era=era)

    def text(res):
        return res[1]["result"]["content"][0]["text"]

    found = json.loads(text(call("search", {"query": "type-check"}, "modern")))
    event_id = found["events"][0]["id"]
    assert found["entries"][0]["id"] == archive["id"]
    assert SESSION in text(call("timeline", {"since": "2025-09-01"}))
    assert DECISION in text(call("get", {"ids": [archive["id"]]}))
    assert QUOTE in text(call("sources", {"id": event_id}, "modern"))
    new = json.loads(text(call("remember", {"kind": "knowledge", "text": "Demo uses Tailwind CSS v4.",
                                            "sources": [{"quote": "Tailwind CSS: ^4"}]})))["entry"]
    assert new["author"] == "inspector-cli"  # the name the Inspector gives in its client info
    fixed = json.loads(text(call("correct", {"id": new["id"], "text": "Demo uses Tailwind CSS v4 (PostCSS)."})))
    shown = json.loads(text(call("forget", {"id": fixed["entry"]["id"]}, "modern")))
    gone = json.loads(text(call("forget", {"id": fixed["entry"]["id"], "digest": shown["digest"]}, "modern")))
    assert gone["done"] is True
    code, err = call("get", {"ids": [fixed["entry"]["id"]]})
    assert code == 5  # the Inspector's exit code for isError


def test_the_server_answers_the_same_inside_a_network_namespace_without_interfaces(archive):
    """No egress (S14): the MCP server needs no network beyond its stdio."""
    from reliability_tools import empty_network_namespace_available

    usable, why = empty_network_namespace_available()
    if not usable:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must be able to run `unshare -n`: {why}")
        pytest.skip(f"no empty network namespace on this machine: {why}")

    async def session(client):
        found = ok(await client.call_tool("search", {"query": "type-check", "scope": "entries"}))
        got = ok(await client.call_tool("get", {"ids": [archive["id"]]}))
        lines = ok(await client.call_tool("sources", {"id": archive["id"]}))
        return found, got, lines

    inside = run_client("auto", session, prefix=("unshare", "-n", "--"))
    outside = run_client("auto", session)
    assert inside[0]["entries"] and inside == outside
