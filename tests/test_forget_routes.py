"""Forget that holds on every route (issue 12).

Exclusion by content as well as by id, Origin's own echoes, titles, whole
sessions, the tombstone log that outlives the store, and the exchange of
tombstones between stores.  Each numbered reproduction of the issue has a
test here that failed on the code before it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import origin
from conftest import expected_rows, index_rows
from helpers import ClaudeLog, GROK_ID, OriginToolLog, _cursor, _grok, counts, grep

# ---------------------------------------------------------------------------
# Helpers: every read route, counted
# ---------------------------------------------------------------------------


def visible_ids(store) -> list[str]:
    return [r[0] for r in store.conn.execute(
        "SELECT id FROM event e WHERE NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)")]


def sightings(store, word: str) -> list[str]:
    """Where a word can still be read: search, timeline (titles and events), get, sources, entries."""
    out = []
    low = word.casefold()
    for e in origin.search_events(store, word, include_tools=True, limit=200):
        out.append(f"search:{e['id']}")
    res = origin.search(store, word, include_tools=True, history=True, limit=200)
    out += [f"search-entry:{e['id']}" for e in res["entries"]]
    for s in origin.timeline(store, since=0, limit=200)["sessions"]:
        if low in (s["title"] or "").casefold():
            out.append(f"title:{s['session']}")
        tl = origin.timeline(store, session=s["session"], source=s["source"], include_tools=True)
        if low in json.dumps(tl["session"], ensure_ascii=False).casefold():
            out.append(f"timeline:{s['session']}")
        out += [f"timeline:{e['id']}" for e in tl["events"] if low in json.dumps(e, ensure_ascii=False).casefold()]
    for evid in visible_ids(store):
        ev = origin.get_event(store, evid)
        if low in json.dumps(ev, ensure_ascii=False).casefold():
            out.append(f"get:{evid}")
        for src in origin.raw_sources(store, evid):
            if low in json.dumps(src, ensure_ascii=False).casefold():
                out.append(f"sources:{evid}")
    for e in origin.list_entries(store, history=True, limit=200):
        if low in json.dumps(origin.get_entry(store, e["id"]), ensure_ascii=False).casefold():
            out.append(f"entry:{e['id']}")
    return out


def event_id_with(store, word: str, kind: str = "message") -> str:
    rows = [r[0] for r in store.conn.execute(
        "SELECT id FROM event WHERE kind = ? AND text LIKE ?", (kind, f"%{word}%"))]
    assert len(rows) == 1, rows
    return rows[0]


# ---------------------------------------------------------------------------
# Codex rollouts, as Codex writes them
# ---------------------------------------------------------------------------

THREAD = "019c9aaa-1111-7000-8000-00000000c0de"
FORK = "019c9bbb-2222-7000-8000-00000000f0c5"
SECRET = "The otterbridge migration waits for the pelican review before it ships."


def codex_line(ts: str, kind: str, payload: dict) -> str:
    return json.dumps({"timestamp": ts, "type": kind, "payload": payload}, separators=(",", ":"))


def codex_message(ts: str, role: str, text: str) -> str:
    block = "input_text" if role == "user" else "output_text"
    return codex_line(ts, "response_item", {"type": "message", "role": role, "content": [{"type": block, "text": text}]})


def codex_meta(thread: str, **extra) -> str:
    return codex_line("2026-02-23T11:41:00.000Z", "session_meta",
                      {"id": thread, "timestamp": "2026-02-23T11:41:00.000Z", "cwd": "/home/dev/bridge",
                       "cli_version": "0.104.0", **extra})


def codex_prompt(ts: str, text: str) -> str:
    return codex_line(ts, "event_msg", {"type": "user_message", "message": text, "images": []})


HISTORY = [
    codex_prompt("2026-02-23T11:41:10.000Z", "When does the bridge migration ship, and what blocks it?"),
    codex_message("2026-02-23T11:41:20.000Z", "assistant", SECRET),
    codex_prompt("2026-02-23T11:41:30.000Z", "Fine, note the kingfisher checklist for the release."),
]


def append_secret_again(store, path: Path):
    """Append the forgotten line to the rollout once more (a new id: it carries the line number) and sync."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(HISTORY[1] + "\n")
    return origin.sync(store)


@pytest.fixture
def rollout(user_home, store):
    day = user_home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    path = day / f"rollout-2026-02-23T12-41-00-{THREAD}.jsonl"
    path.write_text("\n".join([codex_meta(THREAD), *HISTORY]) + "\n", encoding="utf-8")
    origin.sync(store)
    secret = event_id_with(store, "otterbridge")
    assert sightings(store, "otterbridge")
    return path, secret


# ---------------------------------------------------------------------------
# Item 5: tombstones outlive the store; the index belongs to one store
# ---------------------------------------------------------------------------


def test_the_tombstone_log_holds_every_forget_before_it_commits_and_is_replayed_on_open(store, rollout, monkeypatch):
    _path, secret = rollout
    # The forget dies after its log record is on disk, before it commits.
    def die(conn, recs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(origin, "apply_tombstone_records", die)
    with pytest.raises(RuntimeError):
        origin.forget(store, secret)
    monkeypatch.undo()
    assert store.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0
    log = (store.home / origin.TOMBSTONE_LOG).read_text()
    assert secret in log and "otterbridge" not in log
    store.close()
    again = origin.open_store(store.home)
    try:
        assert again.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 1
        assert sightings(again, "otterbridge") == []
    finally:
        again.close()


def test_item_5_a_store_rebuilt_after_corruption_keeps_every_forget_and_a_fresh_index(user_home, origin_home, run):
    log = ClaudeLog(user_home, session="sess-rebuild")
    log.user("u-1", "Where do the deploy secrets live?")
    secret = log.assistant("a-1", "The quokka vault holds the deploy token for staging.")
    for i in range(5):
        log.user(f"u-t{i}", f"Rotate token number {i} before the audit.")
    log.write()
    store = origin.open_store(origin_home)
    origin.sync(store)
    origin.forget(store, secret)
    assert len(origin.search_events(store, "token", limit=50)) == 5
    store.close()
    db = origin_home / origin.DB_NAME
    with open(db, "r+b") as fh:  # the header is gone: not a database any more
        fh.write(b"\0" * 4096)
    code, _out, err = run("status")
    assert code != 0 and "origin rebuild" in err and origin.TOMBSTONE_LOG in err and origin.ENTRIES_LOG in err
    assert (origin_home / origin.INDEX_DIR).is_dir()  # the old index is kept: the new store empties it
    code, _out, _err = run("rebuild")
    assert code == 0
    assert [p.name for p in origin_home.glob(origin.DB_NAME + ".before-rebuild-*")]  # moved aside, not deleted
    code, _out, _err = run("sync")
    assert code == 0
    store = origin.open_store(origin_home)
    try:
        assert origin.status(store)["tombstones"] == 1
        assert sightings(store, "quokka") == []
        found = origin.search_events(store, "token", limit=50)
        assert sorted(e["id"] for e in found) == sorted(f"claude-code:u-t{i}" for i in range(5))
        hits = origin.search(store, "quokka", include_tools=True, history=True, limit=50)
        assert hits == {"entries": [], "events": []}
    finally:
        store.close()


def test_item_5_an_index_of_another_store_is_emptied_and_rebuilt(user_home, origin_home):
    first = ClaudeLog(user_home, session="sess-index")
    first.user("u-1", "The heron index must only hold this store's rows.")
    first.user("u-2", "A second line about nothing.")
    first.write()
    store = origin.open_store(origin_home)
    origin.sync(store)
    old_id = store.conn.execute("SELECT value FROM setting WHERE key = 'store_id'").fetchone()[0]
    store.close()
    for p in origin_home.glob(origin.DB_NAME + "*"):
        p.unlink()
    first.path.unlink()
    other = ClaudeLog(user_home, session="sess-other")
    other.user("u-9", "An unrelated zebra note takes row one now.")
    other.user("u-8", "Another heron sighting, the only one.")
    other.write()
    store = origin.open_store(origin_home)
    try:
        new_id = store.conn.execute("SELECT value FROM setting WHERE key = 'store_id'").fetchone()[0]
        assert new_id != old_id
        origin.sync(store)
        # The old index's row 1 ("heron") would now point at the zebra note.
        assert [e["id"] for e in origin.search_events(store, "heron")] == ["claude-code:u-8"]
        assert [e["id"] for e in origin.search_events(store, "zebra")] == ["claude-code:u-9"]
        assert index_rows(store) == expected_rows(store)
        for part in origin.EVENT_INDEXES:
            assert [tuple(r) for r in store.reader.execute(f"SELECT store FROM ix_{part}.owner")] == [(new_id,)]
    finally:
        store.close()


def test_a_store_rebuilt_from_the_log_adopts_the_old_fingerprint_key(store, rollout):
    path, secret = rollout
    origin.forget(store, secret)
    keys = origin.fingerprint_keys(store)
    store.close()
    for p in store.home.glob(origin.DB_NAME + "*"):
        p.unlink()
    again = origin.open_store(store.home)
    try:
        assert origin.fingerprint_keys(again) == keys
        origin.sync(again)
        # A copy under a new id arrives after the rebuild: the old fingerprint still holds.
        append_secret_again(again, path)
        assert sightings(again, "otterbridge") == []
    finally:
        again.close()


# ---------------------------------------------------------------------------
# The exchange of tombstones between stores (the hub's contract)
# ---------------------------------------------------------------------------


def test_tombstones_after_and_apply_tombstones_carry_a_forget_to_another_store(store, rollout, tmp_path):
    path, secret = rollout
    done = origin.forget(store, secret, reason="not for the archive")
    records = origin.tombstones_after(store, 0, 100)
    assert len(records) == 1
    rec = records[0]
    assert set(rec) >= {"seq", "uid", "target", "kind", "reason", "created_at", "entries", "events", "fingerprints"}
    assert rec["uid"] == done["uid"] and rec["events"] == [secret] and rec["kind"] == "event"
    assert "otterbridge" not in json.dumps(rec)
    assert json.loads(json.dumps(rec)) == rec
    assert origin.tombstones_after(store, rec["seq"], 100) == []
    other = origin.open_store(tmp_path / "other")
    try:
        origin.sync(other)
        assert sightings(other, "otterbridge")
        # The other store shares the key (a hub and its device), so the fingerprints match there too.
        for kid, key in origin.fingerprint_keys(store).items():
            assert origin.add_fingerprint_key(other, kid, key) is True
            assert origin.add_fingerprint_key(other, kid, key) is False
        assert origin.apply_tombstones(other, records) == 1
        assert origin.apply_tombstones(other, records) == 0  # idempotent by uid
        assert sightings(other, "otterbridge") == []
        assert origin.tombstones_after(other, 0, 10)[0]["uid"] == rec["uid"]
        assert rec["uid"] in (other.home / origin.TOMBSTONE_LOG).read_text()
        # A copy of the text reaching the other store later is excluded there.
        append_secret_again(other, path)
        assert sightings(other, "otterbridge") == []
    finally:
        other.close()


@pytest.mark.parametrize("bad", [
    "not a list", [{"uid": "nope"}], [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "planet"}],
    [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "event", "created_at": 1, "events": "x"}],
    [{"uid": "tmb_0123456789abcdef", "target": "x", "kind": "event", "created_at": 1, "fingerprints": [["k", "zz"]]}],
], ids=["not a list", "bad uid", "bad kind", "events not a list", "bad fingerprint"])
def test_apply_tombstones_refuses_a_bad_record_and_writes_nothing(store, rollout, bad):
    before = counts(store)
    log = (store.home / origin.TOMBSTONE_LOG).read_bytes()
    with pytest.raises(origin.UsageError):
        origin.apply_tombstones(store, bad)
    assert counts(store) == before
    assert (store.home / origin.TOMBSTONE_LOG).read_bytes() == log


def test_add_fingerprint_key_refuses_another_key_under_a_known_id(store):
    kid, key = next(iter(origin.fingerprint_keys(store).items()))
    with pytest.raises(origin.Conflict):
        origin.add_fingerprint_key(store, kid, b"x" * 32)
    for bad_id, bad_key in (("", b"k" * 32), ("a b", b"k" * 32), ("hub", b"short"), ("hub", "text" * 8)):
        with pytest.raises(origin.UsageError):
            origin.add_fingerprint_key(store, bad_id, bad_key)
    assert origin.fingerprint_keys(store) == {kid: key}


# ---------------------------------------------------------------------------
# Item 1: copies with a new id stay hidden (exclusion by content)
# ---------------------------------------------------------------------------


def test_item_1_an_identical_codex_line_appended_stays_hidden(store, rollout):
    path, secret = rollout
    origin.forget(store, secret)
    report = append_secret_again(store, path)
    assert report.events_added == 0  # was 1, and the text searchable again
    assert store.conn.execute("SELECT count(*) FROM event WHERE text = ?", (SECRET,)).fetchone()[0] == 2
    assert sightings(store, "otterbridge") == []
    assert sightings(store, "kingfisher")  # nothing else is hidden


def test_item_1_a_timestamp_byte_changed_in_place_stays_hidden(store, rollout):
    path, secret = rollout
    origin.forget(store, secret)
    data = path.read_text(encoding="utf-8")
    changed = HISTORY[1].replace("11:41:20.000Z", "11:41:21.000Z")
    path.write_text(data.replace(HISTORY[1], changed), encoding="utf-8")
    origin.sync(store)
    gens = store.conn.execute("SELECT count(*) FROM raw_file WHERE path = ?", (str(path),)).fetchone()[0]
    assert gens == 2  # a rewrite: the event came back under a new id before
    assert sightings(store, "otterbridge") == []
    assert sightings(store, "kingfisher") and sightings(store, "bridge migration ship")


def test_item_1_a_codex_fork_with_copied_history_stays_hidden(store, rollout, user_home):
    path, secret = rollout
    origin.forget(store, secret)
    fork = path.with_name(f"rollout-2026-02-23T13-00-00-{FORK}.jsonl")
    later = codex_prompt("2026-02-23T13:00:10.000Z", "Forked: now plan the heronfield rollout.")
    fork.write_text("\n".join([codex_meta(FORK, forked_from_id=THREAD), codex_meta(THREAD), *HISTORY, later]) + "\n",
                    encoding="utf-8")
    origin.sync(store)
    assert sightings(store, "otterbridge") == []
    # The fork's own copies of the other messages, and its new line, are visible.
    assert {e["session"] for e in origin.search_events(store, "kingfisher")} == {THREAD, FORK}
    assert [e["session"] for e in origin.search_events(store, "heronfield")] == [FORK]


def test_item_1_a_grok_rewrite_and_a_copy_in_another_session_stay_hidden(store, user_home):
    _grok(user_home)
    origin.sync(store)
    path = next(user_home.glob(f".grok/sessions/*/{GROK_ID}/chat_history.jsonl"))
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    secret_id = event_id_with(store, "summarize what it prints")
    assert secret_id.startswith(f"grok:{GROK_ID}:")
    words = "summarize what it prints"
    assert sightings(store, words)
    origin.forget(store, secret_id)
    # A rewrite that drops a record inside the turn.
    k = next(i for i, x in enumerate(lines) if json.loads(x)["type"] == "reasoning")
    path.write_text("".join(lines[:k] + lines[k + 1:]), encoding="utf-8")
    origin.sync(store)
    assert sightings(store, words) == []
    # The whole history copied into another session: every id is new there.
    copy = path.parent.parent / "019f6851-0000-7000-8000-00000000c0b1"
    shutil.copytree(path.parent, copy)
    summary = json.loads((copy / "summary.json").read_text(encoding="utf-8"))
    summary["info"]["id"] = copy.name
    (copy / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    report = origin.sync(store)
    assert report.sources["grok"]["events_added"] > 0
    assert sightings(store, words) == []
    assert len(origin.search_events(store, "hello from the grok fixture", include_tools=True)) >= 2


def test_a_short_text_is_excluded_by_id_only(store, user_home):
    log = ClaudeLog(user_home, session="sess-short")
    log.user("u-1", "Shall I go ahead with the walrus plan?")
    ok = log.assistant("a-1", "ok")
    log.user("u-2", "Then the next step.")
    log.write()
    origin.sync(store)
    origin.forget(store, ok)
    assert store.conn.execute("SELECT count(*) FROM tombstone_fingerprint").fetchone()[0] == 0
    log.assistant("a-2", "ok")  # another "ok", later: not a copy of the forgotten one
    log.write()
    assert origin.sync(store).events_added == 1
    assert origin.get_event(store, "claude-code:a-2")["text"] == "ok"


# ---------------------------------------------------------------------------
# Items 3 and 6: Origin's own echoes, exactly
# ---------------------------------------------------------------------------

STATEMENT = "The gannet service keeps its queue in SQLite because one file is easy to back up."


@pytest.fixture
def echo(user_home, store):
    log = OriginToolLog(user_home, session="sess-echo", cwd="/home/dev/gannet")
    said = log.user("u-1", "Keep the gannet queue in SQLite: one file is easy to back up.")
    log.tool_call("c-todo", "TodoWrite", {"todos": [{"content": f"Write down: {STATEMENT}", "status": "pending"}]})
    log.tool_call("c-bash", "Bash", {"command": "grep -r 'gannet service keeps its queue in SQLite' docs"})
    log.write()
    origin.sync(store)
    entry = origin.remember(store, kind="knowledge", text=STATEMENT, author="claude-code",
                            sources=[{"event": said}])
    call = log.origin_call("c-rem", "remember", {"kind": "knowledge", "text": STATEMENT,
                                                 "sources": [{"event": said}]})
    result = log.origin_result("r-rem", {"entry": entry})
    get_call = log.origin_call("c-get", "get", {"ids": [entry["id"]]})
    get_result = log.origin_result("r-get", origin.mcp_get(store, {"ids": [entry["id"]]}, "claude-code"))
    preview = log.origin_result("r-prev", {"done": False, **origin.preview_forget(store, entry["id"])})
    log.write()
    origin.sync(store)
    for evid in (call, result, get_call, get_result, preview):
        assert origin.get_event(store, evid)
    return log, said, entry, [call, result, get_call, get_result, preview]


def test_item_3_the_logged_calls_and_results_of_origins_tools_go_with_the_entry(store, echo):
    log, said, entry, echoes = echo
    done = origin.forget(store, entry["id"])
    assert set(done["excluded_events"]) == {said, *echoes}
    # Only the other tools' events still show the words; nothing shows the entry.
    assert sightings(store, "gannet service")
    assert all("c-todo" in x or "c-bash" in x for x in sightings(store, "gannet service"))
    assert sightings(store, entry["id"]) == []
    # Other tools sharing the words are untouched.
    for evid in ("claude-code:c-todo#0", "claude-code:c-bash#0"):
        assert origin.get_event(store, evid)["kind"] == "tool_call"


def test_item_3_echoes_logged_after_the_forget_are_excluded_when_they_arrive(store, echo):
    log, said, entry, _echoes = echo
    done = origin.forget(store, entry["id"])
    # The agent's own forget call and its result, and a repeated remember, arrive later.
    later = [
        log.origin_call("c-forget", "forget", {"id": entry["id"]}),
        log.origin_result("r-forget", {"done": True, **{k: v for k, v in done.items() if k != "index_pending"}}),
        log.origin_call("c-again", "remember", {"kind": "knowledge", "text": STATEMENT.upper(),
                                                "sources": [{"quote": "gannet queue"}]}),
        log.origin_call("c-search", "search", {"query": "gannet"}),
    ]
    log.user("u-2", "Unrelated: the gannet logo needs a new colour.")
    log.write()
    report = origin.sync(store)
    assert report.events_added == 2  # the new prompt and the search call (it names no forgotten id or text)
    hidden = {r[0] for r in store.conn.execute("SELECT event_id FROM excluded_event")}
    assert set(later[:3]) <= hidden and later[3] not in hidden
    assert all("c-todo" in x or "c-bash" in x for x in sightings(store, "gannet service"))
    assert sightings(store, entry["id"]) == []
    assert [e["id"] for e in origin.search_events(store, "gannet logo")] == ["claude-code:u-2"]


def test_item_6_an_entry_typed_in_the_cli_hides_exactly_its_one_event(store, user_home, cli):
    log = ClaudeLog(user_home, session="sess-todo")
    cited = log.assistant("a-1", "Discovering available commands in the project")
    for i in range(5):
        log.tool_call(f"c-todo{i}", "TodoWrite", {"todos": [
            {"content": "Discovering available commands in the project", "status": "in_progress",
             "activeForm": f"Discovering available commands in the project, step {i}"}]})
    log.write()
    origin.sync(store)
    code, entry = cli("remember", "Discovering available commands in the project", "--kind", "memory",
                      "--event", cited, "--json")
    assert code == 0
    code, preview = cli("forget", entry["id"], "--json")
    assert [e["id"] for e in preview["would_exclude_events"]] == [cited]  # was 6: five TodoWrite calls
    code, done = cli("forget", entry["id"], "--yes", "--json")
    assert code == 0 and done["excluded_events"] == [cited]
    assert len(origin.search_events(store, "Discovering available commands", include_tools=True)) == 5


# ---------------------------------------------------------------------------
# Item 4: titles, whole sessions, the same text in other sessions
# ---------------------------------------------------------------------------

CURSOR_TITLE = "create settings page that enables to enter OpenAI API key,"


@pytest.fixture
def cursor(user_home, store, monkeypatch):
    for k, v in _cursor(user_home).items():
        monkeypatch.setenv(k, v)
    origin.sync(store)


def titles(store) -> dict[str, str]:
    return {s["session"]: s["title"] for s in origin.timeline(store, since=0, limit=200)["sessions"]}


def test_item_4_forgetting_a_cursor_chats_first_prompt_drops_its_title(store, cursor, cli):
    chats = [sid for sid, t in titles(store).items() if t == CURSOR_TITLE]
    assert len(chats) == 2  # the same first prompt in two composers
    first = store.conn.execute("SELECT id FROM event WHERE session = ? AND role = 'user' ORDER BY ts, seq LIMIT 1",
                               (chats[0],)).fetchone()[0]
    code, preview = cli("forget", first, "--json")
    others = [e["id"] for e in preview["same_text_events"]]
    assert any(o.startswith(f"cursor:{chats[1]}:") for o in others)
    origin.forget(store, first)
    after = titles(store)
    assert CURSOR_TITLE not in (after[chats[0]] or "") and after[chats[0]]
    assert after[chats[1]] == CURSOR_TITLE  # a copy the person kept
    for other in others:
        origin.forget(store, other)
    assert CURSOR_TITLE not in json.dumps(titles(store))
    assert sightings(store, "enables to enter OpenAI API key") == []


def test_item_4_the_same_message_in_four_composers_is_listed_and_hidden_with_same_text(store, cursor, cli, run):
    text = store.conn.execute(
        "SELECT text FROM event WHERE source = 'cursor' AND role = 'assistant' AND text LIKE "
        "'I''ll help you create a Copilot page%' GROUP BY text HAVING count(DISTINCT session) = 4").fetchone()[0]
    copies = [r[0] for r in store.conn.execute("SELECT id FROM event WHERE text = ? ORDER BY id", (text,))]
    assert len(copies) == 4
    code, preview = cli("forget", copies[0], "--json")
    assert code != 0 and [e["id"] for e in preview["would_exclude_events"]] == [copies[0]]
    assert sorted(e["id"] for e in preview["same_text_events"]) == copies[1:]
    assert "same_text" in preview["same_text_note"]
    code, out, _ = run("forget", copies[0])
    assert "3 other visible events with the same text" in out and "--same-text" in out
    code, preview = cli("forget", copies[0], "--same-text", "--json")
    assert sorted(e["id"] for e in preview["would_exclude_events"]) == copies
    code, done = cli("forget", copies[0], "--same-text", "--yes", "--json")
    assert code == 0 and sorted(done["excluded_events"]) == copies
    assert sightings(store, text[:60]) == []


def test_item_4_a_summary_title_goes_when_a_message_it_summarises_is_forgotten(store, user_home):
    log = ClaudeLog(user_home, session="sess-sum")
    log.user("u-1", "Walk me through the cutover for the billing service.")
    secret = log.assistant("a-2", "The pelican cutover happens at 02:00 with a rollback script ready.")
    log.user("u-3", "And who signs off on it?")
    log.records.append({"type": "summary", "summary": "Pelican cutover plan and rollback", "leafUuid": "a-2"})
    log.write()
    origin.sync(store)
    assert titles(store)["sess-sum"] == "Pelican cutover plan and rollback"
    origin.forget(store, secret)
    assert titles(store)["sess-sum"] == "Walk me through the cutover for the billing service."
    assert sightings(store, "pelican") == []
    log.path.write_text(log.path.read_text() + "\n", encoding="utf-8")  # read again: the summary comes back
    origin.sync(store)
    assert sightings(store, "pelican") == []


def test_item_4_forget_session_hides_its_events_and_title_with_the_same_preview(store, user_home, cli):
    log = ClaudeLog(user_home, session="sess-gone")
    log.user("u-1", "Draft the albatross vendor email.")
    log.assistant("a-2", "Here is the albatross draft with the price cap.")
    log.tool_call("c-3", "Bash", {"command": "echo albatross > note.txt"})
    log.records.append({"type": "summary", "summary": "Albatross vendor negotiation", "leafUuid": "a-2"})
    log.write()
    keep = ClaudeLog(user_home, session="sess-keep", cwd="/home/dev/other")
    keep.user("u-9", "Unrelated: update the readme.")
    keep.write()
    origin.sync(store)
    entry = origin.remember(store, kind="memory", text="The albatross vendor caps the price.", author="x",
                            sources=[{"event": "claude-code:a-2"}])
    code, preview = cli("forget", "sess-gone", "--json")
    assert code != 0 and preview["kind"] == "session"
    assert sorted(e["id"] for e in preview["would_exclude_events"]) == [
        "claude-code:a-2", "claude-code:c-3#0", "claude-code:u-1"]
    assert [e["id"] for e in preview["would_forget_entries"]] == [entry["id"]]
    code, done = cli("forget", "claude-code:sess-gone", "--yes", "--json")
    assert code == 0 and done["kind"] == "session"
    assert "sess-gone" not in titles(store) and titles(store)["sess-keep"]
    assert sightings(store, "albatross") == []
    with pytest.raises(origin.Forgotten):
        origin.forget(store, "sess-gone")
    t = store.conn.execute("SELECT kind, target FROM tombstone").fetchone()
    assert tuple(t) == ("session", "claude-code:sess-gone")


def test_item_1_a_rollout_compressed_and_moved_to_the_archive_stays_hidden(store, rollout, user_home):
    zstd = pytest.importorskip("zstandard")
    path, secret = rollout
    origin.forget(store, secret)
    archived = user_home / ".codex" / "archived_sessions"
    archived.mkdir()
    (archived / (path.name + ".zst")).write_bytes(zstd.ZstdCompressor().compress(path.read_bytes()))
    path.unlink()
    origin.sync(store)
    assert sightings(store, "otterbridge") == []
    assert sightings(store, "kingfisher")


def test_the_mcp_forget_tool_takes_sessions_and_same_text(store, cursor):
    tool = origin.MCP_TOOLS["forget"]
    text = store.conn.execute(
        "SELECT text FROM event WHERE source = 'cursor' AND role = 'assistant' AND text LIKE "
        "'I''ll help you create a Copilot page%' GROUP BY text HAVING count(DISTINCT session) = 4").fetchone()[0]
    copies = [r[0] for r in store.conn.execute("SELECT id FROM event WHERE text = ? ORDER BY id", (text,))]
    args = origin.check_tool_args(tool, {"id": copies[0]})
    preview = origin.mcp_forget(store, args, "test-agent")
    assert preview["done"] is False and preview["same_text_count"] == 3
    with pytest.raises(origin.OriginError):
        origin.check_tool_args(tool, {"id": copies[0], "same_text": "yes"})
    shown = origin.mcp_forget(store, origin.check_tool_args(tool, {"id": copies[0], "same_text": True}), "test-agent")
    done = origin.mcp_forget(store, origin.check_tool_args(
        tool, {"id": copies[0], "same_text": True, "digest": shown["digest"]}), "test-agent")
    assert done["done"] is True and sorted(done["excluded_events"]) == copies
    session = store.conn.execute("SELECT session FROM event WHERE id = ?", (copies[1],)).fetchone()[0]
    shown = origin.mcp_forget(store, origin.check_tool_args(tool, {"id": f"cursor:{session}"}), "test-agent")
    gone = origin.mcp_forget(store, origin.check_tool_args(
        tool, {"id": f"cursor:{session}", "digest": shown["digest"]}), "test-agent")
    assert gone["kind"] == "session" and session not in titles(store)


def test_invariant_2_a_summary_in_another_sessions_file_goes_with_the_conversation_it_sums_up(
        store, user_home, cli, origin_home):
    # Claude writes a continued conversation's summary at the top of the new
    # session's file, its leafUuid pointing into the earlier session.
    first = ClaudeLog(user_home, session="sess-first")
    first.user("u-1", "Plan the osprey migration of the ledger database.")
    secret = first.assistant("a-2", "The osprey migration runs on Sunday with the replica promoted first.")
    first.write()
    later = ClaudeLog(user_home, session="sess-later")
    later.user("u-3", "Carry on from yesterday.")
    later.assistant("a-4", "Picking up where we stopped.")
    later.records.insert(0, {"type": "summary", "summary": "Osprey ledger migration plan", "leafUuid": "a-2"})
    later.write()
    origin.sync(store)
    assert titles(store)["sess-later"] == "Osprey ledger migration plan"
    origin.forget(store, secret)
    assert titles(store)["sess-later"] == "Carry on from yesterday."
    # The earlier session's prompt stays visible; nothing of the later one
    # (its title in the timeline, show and MCP) says osprey any more.
    assert [s for s in sightings(store, "osprey") if "sess-later" in s or s.endswith(("u-3", "a-4"))] == []
    assert origin.get_event(store, "claude-code:u-3")["session_title"] == "Carry on from yesterday."
    later.path.write_text(later.path.read_text() + "\n", encoding="utf-8")  # read again: the summary comes back
    origin.sync(store)
    assert titles(store)["sess-later"] == "Carry on from yesterday."
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    assert grep_home(origin_home, "Osprey ledger") == []


def grep_home(home: Path, text: str) -> list[str]:
    return grep(home, text)


def test_invariant_2_a_long_origin_result_cut_in_the_store_is_an_echo_of_an_event_past_the_cut(
        store, user_home, cli, origin_home):
    log = ClaudeLog(user_home, session="sess-cut")
    secret = log.assistant("a-1", "The kestrel alarm code is 7741, changed every spring.")
    log.user("u-2", "Search my history for the alarm.")
    log.tool_call("c-3", "mcp__origin__search", {"query": "alarm"})
    # The agent logged Origin's whole answer; the adapter keeps its first
    # 4,000 characters, and the forgotten event is listed after them.
    hits = [{"id": f"claude-code:other-{i}", "source": "claude-code", "snippet": f"unrelated note {i} " * 6}
            for i in range(60)]
    hits.append({"id": secret, "source": "claude-code", "snippet": "The kestrel alarm code is 7741"})
    answer = json.dumps({"events": hits, "next": None}, separators=(",", ":"))
    assert len(answer) > 5000 and answer.index(secret) > 4000
    result = log.tool_result("r-4", answer)
    log.write()
    origin.sync(store)
    assert origin.get_event(store, result)["text"].endswith("…")
    done = origin.forget(store, secret)
    assert sightings(store, "kestrel") == []  # `show` and MCP `sources` printed the result's raw line
    assert result in done["excluded_events"]
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    assert grep_home(origin_home, "kestrel") == []
