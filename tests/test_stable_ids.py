"""Event ids that survive a rewrite of the log (issue 12).

Grok rewrites ``chat_history.jsonl`` whole (on compaction, on a rewind), so
a record that stays must keep its id when a neighbouring record is dropped
or inserted: otherwise the new generation of the file adds every later
record of the turn again, and a forgotten message comes back under a new id.
"""

from __future__ import annotations

import json

import pytest

import adapters
import origin
from helpers import GROK_ID, _grok


@pytest.fixture
def grok_chat(user_home, store):
    """The real Grok chat history fixture, archived once; return its path and lines."""
    _grok(user_home)
    path = next(user_home.glob(f".grok/sessions/*/{GROK_ID}/chat_history.jsonl"))
    assert origin.sync(store).sources["grok"]["events_added"] > 0
    return path, path.read_text(encoding="utf-8").splitlines(keepends=True)


def chat_ids(store) -> set[str]:
    return {r[0] for r in store.conn.execute("SELECT id FROM event WHERE id LIKE ?", (f"grok:{GROK_ID}:%",))}


def test_dropping_a_record_inside_a_turn_adds_no_event(store, grok_chat):
    path, lines = grok_chat
    before = chat_ids(store)
    assert json.loads(lines[3])["type"] == "reasoning"  # inside turn 0, before its answer and tools
    path.write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")
    report = origin.sync(store)
    assert report.sources["grok"]["events_added"] == 0  # was 6: every later record of the turn re-keyed
    assert chat_ids(store) == before
    gens = store.conn.execute("SELECT count(*) FROM raw_file WHERE path = ?", (str(path),)).fetchone()[0]
    assert gens == 2  # the rewrite was seen as one, and read again in full


def test_dropping_a_tool_result_adds_nothing_and_inserting_one_adds_exactly_it(store, grok_chat):
    path, lines = grok_chat
    before = chat_ids(store)
    k = next(i for i, x in enumerate(lines) if json.loads(x)["type"] == "tool_result")
    path.write_text("".join(lines[:k] + lines[k + 1:]), encoding="utf-8")
    assert origin.sync(store).sources["grok"]["events_added"] == 0
    new = json.dumps({"type": "tool_result", "tool_call_id": "call-inserted", "content": "inserted result 4471"})
    path.write_text("".join(lines[:k] + [new + "\n"] + lines[k:]), encoding="utf-8")
    assert origin.sync(store).sources["grok"]["events_added"] == 1
    added = chat_ids(store) - before
    assert len(added) == 1
    text = store.conn.execute("SELECT text FROM event WHERE id = ?", (added.pop(),)).fetchone()[0]
    assert text == "inserted result 4471"


def test_identical_records_of_one_turn_keep_distinct_ids_that_survive_a_rewrite():
    f = adapters.SourceFile("/g/chat_history.jsonl", "sessions/g/s1/chat_history.jsonl",
                            meta={"format": "chat", "session": "s1"})
    recs = [{"type": "user", "content": "run the tests twice", "prompt_index": 0},
            {"type": "tool_result", "content": "ok"},
            {"type": "assistant", "content": "Again."},
            {"type": "tool_result", "content": "ok"},
            {"type": "user", "content": "thanks", "prompt_index": 1},
            {"type": "tool_result", "content": "ok"}]

    def parse(records):
        ctx = adapters.Context(file=f, state=adapters.ADAPTERS["grok"].new_state(f), mtime_ms=1)
        out = []
        for n, r in enumerate(records, 1):
            ctx.lineno = n
            out += [x for x in adapters.ADAPTERS["grok"].parse(json.dumps(r), ctx)
                    if isinstance(x, adapters.Record)]
        return {x.id: x.text for x in out}, ctx.state

    ids, state = parse(recs)
    assert len(ids) == 6 and list(ids.values()).count("ok") == 3
    # Dropping the answer between the two "ok" of turn 0 keeps every id.
    kept, _ = parse(recs[:2] + recs[3:])
    assert set(kept) <= set(ids) and len(kept) == 5
    assert len(json.dumps(state)) < 400  # the state holds one short hash per distinct record of the turn


def test_a_turn_longer_than_the_state_remembers_still_gives_unique_ids(monkeypatch):
    monkeypatch.setattr(adapters, "GROK_TURN_SEEN_MAX", 3)
    f = adapters.SourceFile("/g/chat_history.jsonl", "sessions/g/s1/chat_history.jsonl",
                            meta={"format": "chat", "session": "s1"})
    ctx = adapters.Context(file=f, state={}, mtime_ms=1)
    ids = []
    recs = [{"type": "user", "content": "go", "prompt_index": 0}] + [
        {"type": "tool_result", "content": f"out {i % 4}"} for i in range(12)]
    for n, r in enumerate(recs, 1):
        ctx.lineno = n
        ids += [x.id for x in adapters.ADAPTERS["grok"].parse(json.dumps(r), ctx) if isinstance(x, adapters.Record)]
    assert len(ids) == len(set(ids)) == 13
    assert len(ctx.state["seen"]) == 3
