"""Forget plans that hold still: preview, digest, confirm.

A person or an agent sees a preview with a digest; the forget that follows
runs only the plan that digest names.  A copy of the text that arrives in
between changes it; the agent's own logged calls of the forget tool do not.
"""

from __future__ import annotations

import json

import pytest

import origin
from helpers import ClaudeLog, HubDevice, OriginToolLog, Serve

SECRET = "The heron deploy key sits in the vault under ops/heron/deploy, rotated each March."


def tombstones(store) -> int:
    return store.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0]


def fingerprints(store) -> int:
    return store.conn.execute("SELECT count(*) FROM tombstone_fingerprint").fetchone()[0]


def test_invariant_2_a_copy_arriving_between_preview_and_yes_changes_the_plan(store, user_home, cli):
    log = ClaudeLog(user_home, session="sess-heron", cwd="/home/dev/heron")
    log.user("u-1", "Where does the heron deploy key live?")
    secret = log.assistant("a-2", SECRET)
    log.write()
    origin.sync(store)
    code, preview = cli("forget", secret, "--json")
    assert code == 1 and "same_text_events" not in preview
    # Between the preview and --yes, the same text is pasted in another project.
    other = ClaudeLog(user_home, session="sess-egret", cwd="/home/dev/egret")
    copy = other.user("u-9", SECRET)
    other.write()
    origin.sync(store)
    code, _ = cli("forget", secret, "--yes", "--json")
    # Before, this forgot at once, and silently without the text's fingerprint.
    assert code == origin.Conflict.exit_code and "preview it again" in cli.err
    assert tombstones(store) == 0
    code, again = cli("forget", secret, "--json")
    assert again["digest"] != preview["digest"]
    assert [e["id"] for e in again["same_text_events"]] == [copy]
    code, done = cli("forget", secret, "--yes", "--json")
    assert code == 0 and done["excluded_events"] == [secret]
    assert fingerprints(store) == 0  # the copy the person saw kept keeps the text unfingerprinted
    assert [e["id"] for e in origin.search_events(store, "heron deploy key sits")] == [copy]


def test_plan_digest_covers_copies_but_not_echoes(store, user_home):
    log = OriginToolLog(user_home, session="sess-heron", cwd="/home/dev/heron")
    secret = log.assistant("a-2", SECRET)
    log.write()
    origin.sync(store)
    first = origin.preview_forget(store, secret)["digest"]
    log.origin_call("c-get", "get", {"ids": [secret]})
    log.write()
    origin.sync(store)
    plan = origin.plan_forget(store, secret)
    assert plan["echoes"] == ["claude-code:c-get#0"] and origin.plan_digest(plan) == first
    log.user("u-3", SECRET)
    log.write()
    origin.sync(store)
    assert origin.preview_forget(store, secret)["digest"] != first


def test_invariant_2_an_agents_preview_and_confirm_hold_still_while_its_own_calls_arrive(store, user_home,
                                                                                         origin_home):
    log = OriginToolLog(user_home, session="sess-agent", cwd="/home/dev/heron")
    log.user("u-1", "Forget what I said about the heron key, please.")
    secret = log.assistant("a-2", SECRET)
    log.write()
    origin.sync(store)
    # A catch-up before every call: what an agent gets when its calls are more than 10 s apart.
    service = origin.McpService(origin_home, lambda st, **kw: origin.sync(st), sync_interval=0)
    try:
        digests, logged = [], []
        for attempt in range(3):
            text, is_error = service.call("forget", {"id": secret}, "claude-code")
            assert not is_error, text
            preview = json.loads(text)
            digests.append(preview["digest"])
            # The agent's log records its call and the preview it was shown; the next catch-up ingests them.
            logged.append(log.origin_call(f"c-prev{attempt}", "forget", {"id": secret}))
            logged.append(log.origin_result(f"r-prev{attempt}", text))
            log.write()
        logged.append(log.origin_call("c-yes", "forget", {"id": secret, "digest": digests[-1]}))
        log.write()  # the agent logs its confirm call before the tool answers
        text, is_error = service.call("forget", {"id": secret, "digest": digests[-1]}, "claude-code")
    finally:
        service.close()
    assert len(set(digests)) == 1  # before: 2, 4, 7 events and a new digest every time
    assert not is_error, text
    done = json.loads(text)
    assert done["done"] is True and set(done["excluded_events"]) == {secret, *logged}
    assert origin.search_events(store, "heron deploy key", include_tools=True) == []


def test_the_forget_tool_forgets_only_with_the_digest_of_a_preview(store, user_home, origin_home):
    log = ClaudeLog(user_home, session="sess-heron", cwd="/home/dev/heron")
    secret = log.assistant("a-2", SECRET)
    log.write()
    origin.sync(store)
    service = origin.McpService(origin_home, lambda st, **kw: None)
    try:
        text, is_error = service.call("forget", {"id": secret, "reason": "asked to"}, "claude-code")
        shown = json.loads(text)
        # Before, this call forgot at once.
        assert not is_error and shown["done"] is False and len(shown["digest"]) == 32
        assert [e["id"] for e in shown["would_exclude_events"]] == [secret]
        assert "only if they confirm" in shown["note"] and "digest" in shown["note"]
        assert tombstones(store) == 0 and origin.search_events(store, "heron deploy key")
        text, is_error = service.call("forget", {"id": secret, "digest": "0" * 32}, "claude-code")
        assert is_error and text.startswith("conflict: ") and "preview it again" in text
        assert tombstones(store) == 0
        text, is_error = service.call("forget", {"id": secret, "digest": shown["digest"]}, "claude-code")
        assert not is_error and json.loads(text)["done"] is True
    finally:
        service.close()
    assert tombstones(store) == 1 and origin.search_events(store, "heron deploy key") == []


BOILERPLATE = "Let me look at the project structure first, then run the tests."


@pytest.fixture
def boilerplate(store, user_home):
    """The same assistant line in four sessions of three projects, once twice in one session."""
    heron = ClaudeLog(user_home, session="sess-heron", cwd="/home/dev/heron")
    target = heron.assistant("a-1", BOILERPLATE)
    heron.user("u-2", "Go on.")
    heron.assistant("a-3", BOILERPLATE)
    heron.write()
    for session, cwd, uuid in (("sess-heron2", "/home/dev/heron", "b-1"), ("sess-egret", "/home/dev/egret", "c-1"),
                               ("sess-kite", "/home/dev/kite", "d-1")):
        log = ClaudeLog(user_home, session=session, cwd=cwd)
        log.assistant(uuid, BOILERPLATE)
        log.write()
    origin.sync(store)
    return target


def test_a_same_text_forget_previews_the_sessions_and_projects_it_reaches(store, boilerplate, cli, origin_home):
    code, preview = cli("forget", boilerplate, "--json")
    # Before, the preview listed the copies but not how far they reach.
    assert preview["same_text_reach"] == {"events": 4, "sessions": 3, "projects": 2}
    assert "in 3 other sessions and 2 other projects" in preview["same_text_note"]
    code, preview = cli("forget", boilerplate, "--same-text", "--json")
    assert code == 1 and len(preview["would_exclude_events"]) == 5
    assert preview["same_text_reach"] == {"events": 4, "sessions": 3, "projects": 2}
    assert "every copy of that text that arrives later" in preview["same_text_note"]
    code, out = cli("forget", boilerplate)
    assert "4 other visible events with the same text, in 3 other sessions and 2 other projects" in out
    code, out = cli("forget", boilerplate, "--same-text")
    assert "--same-text: 4 events of these have the same text, in 3 other sessions and 2 other projects" in out
    service = origin.McpService(origin_home, lambda st, **kw: None)
    try:
        text, is_error = service.call("forget", {"id": boilerplate, "same_text": True}, "claude-code")
    finally:
        service.close()
    assert not is_error and json.loads(text)["same_text_reach"] == {"events": 4, "sessions": 3, "projects": 2}
    assert tombstones(store) == 0


def test_yes_without_a_kept_preview_forgets_on_the_hub_too(tmp_path, claude_root):
    with origin.open_store(tmp_path / "hub") as hub_store:
        origin.sync(hub_store)
    hub = Serve(tmp_path / "hub")
    try:
        dev = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
        assert dev.run("push").returncode == 0
        found = json.loads(dev.run("search", "type-check", "--scope", "events", "--json").stdout)["events"][0]
        # The hub's tool now previews when called without a digest; the CLI's --yes asks for it first.
        p = dev.run("forget", found["id"], "--yes", "--json")
    finally:
        hub.stop()
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["excluded_events"][0] == found["id"]
