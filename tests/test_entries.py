"""Entries: remember, correct, derived status, quote matching, queries and the CLI.

Source logs are hand-written Claude Code transcripts under
~/.claude/projects/<slug>/<session>.jsonl, archived with origin.sync.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

import origin
from conftest import read_line
from helpers import ClaudeLog, counts, ids


@pytest.fixture
def talk(user_home, store):
    """One archived conversation in which a decision is made, with a tool call and result."""
    log = ClaudeLog(user_home)
    ev = SimpleNamespace(
        ask=log.user("u-ask", "Which database should the archive use, and why?"),
        decide=log.assistant("a-decide", "We keep SQLite for the archive:\none file, no server, WAL mode for readers."),
        agree=log.user("u-agree", "Agreed. Also the trigram tokenizer for search, please."),
        call=log.tool_call("c-read", "Read", {"file_path": "docs/adr-007.md", "note": "tokenizer choice zebra"}),
        result=log.tool_result("r-read", "ADR 7: search uses the trigram tokenizer; CJK works as substrings."),
        wrap=log.assistant("a-wrap", "Recorded: SQLite with WAL, trigram search."),
    )
    ev.path = log.write()
    origin.sync(store)
    return ev


def remember(store, text="The archive is one SQLite file.", kind="memory", sources=None, **kw):
    kw.setdefault("author", "claude-code")
    return origin.remember(store, kind=kind, text=text, sources=sources, **kw)


# ---------------------------------------------------------------------------
# remember
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", origin.ENTRY_KINDS)
def test_remember_cites_an_event_by_id_and_returns_an_active_entry(store, talk, kind):
    e = remember(store, "The archive keeps SQLite: one file, no server.", kind=kind,
                 sources=[{"event": talk.decide}], confidence=0.8)
    assert e["id"].startswith("ent_")
    assert (e["kind"], e["status"], e["confidence"], e["author"]) == (kind, "active", 0.8, "claude-code")
    assert e["text"] == "The archive keeps SQLite: one file, no server."
    assert e["project"] == "atlas"  # the project of the first cited event
    assert [s["event"] for s in e["sources"]] == [talk.decide]
    assert e["sources"][0]["quote"] is None
    assert e["history"] == [{"id": e["id"], "status": "active"}]
    assert origin.get_entry(store, e["id"]) == e


def test_remember_with_an_explicit_project_and_several_sources(store, talk):
    e = remember(store, sources=[{"event": talk.decide, "quote": "keep SQLite"}, {"quote": "trigram tokenizer for search"},
                                 {"event": talk.decide}], project="atlas-docs")
    assert e["project"] == "atlas-docs"
    # Two sources naming one event count once, keeping the first quote.
    assert [(s["event"], s["quote"]) for s in e["sources"]] == [
        (talk.decide, "keep SQLite"), (talk.agree, "trigram tokenizer for search")]


@pytest.mark.parametrize("quote", [
    "keep sqlite for the archive",
    "KEEP   SQLite\n\tfor THE Archive",
    "archive: one file",
    "archive:one file",
    "keepSQLite",
])
@pytest.mark.parametrize("by", ["event and quote", "quote only"])
def test_quote_matching_ignores_whitespace_and_case(store, talk, quote, by):
    src = {"event": talk.decide, "quote": quote} if by == "event and quote" else {"quote": quote}
    e = remember(store, sources=[src])
    assert [s["event"] for s in e["sources"]] == [talk.decide]
    assert e["sources"][0]["quote"] == quote.strip()


@pytest.mark.parametrize("few", [origin.QUOTE_FEW, 0])  # by the rarest words, or by six at once
def test_quote_only_cites_the_newest_message_before_any_tool_event(user_home, store, monkeypatch, few):
    monkeypatch.setattr(origin, "QUOTE_FEW", few)
    log = ClaudeLog(user_home)
    old = log.user("u-old", "Rule: releases are cut on Tuesdays.")
    new = log.assistant("a-new", "Confirmed again — releases are CUT ON   tuesdays, never Fridays.")
    log.tool_result("r-newer", "CONTRIBUTING.md: releases are cut on Tuesdays.")
    log.tool_call("c-newest", "mcp__origin__remember", {"text": "Release day", "quote": "releases are cut on Tuesdays"})
    log.write()
    origin.sync(store)
    e = remember(store, sources=[{"quote": "releases are cut on Tuesdays"}])
    assert [s["event"] for s in e["sources"]] == [new]
    assert old != new


def test_quote_only_falls_back_to_a_tool_result_and_never_cites_a_tool_call(user_home, store):
    log = ClaudeLog(user_home)
    log.user("u-ask", "What does the config say about retries?")
    result = log.tool_result("r-cfg", "config.toml: max_retries = 7 for the hub client")
    log.tool_call("c-remember", "mcp__origin__remember", {"text": "Hub retries", "quote": "max_retries = 7 for the hub"})
    log.write()
    origin.sync(store)
    e = remember(store, sources=[{"quote": "max_retries = 7 for the hub"}])
    assert [s["event"] for s in e["sources"]] == [result]
    assert origin.get_event(store, result)["kind"] == "tool_result"


def test_quote_only_finds_an_older_message_behind_many_near_misses(user_home, store):
    log = ClaudeLog(user_home)
    said = log.user("u-said", "Fine: we will use the new one for that.")
    for i in range(2100):  # newer messages holding every word of the quote, never the quote itself
        log.assistant(f"a-near-{i}", f"For that one we will not use the new plan (note {i}).")
    log.write()
    origin.sync(store)
    e = remember(store, sources=[{"quote": "we will use the new one for that"}])
    assert [s["event"] for s in e["sources"]] == [said]


def test_remember_may_cite_a_tool_call_by_its_id(store, talk):
    e = remember(store, sources=[{"event": talk.call, "quote": "tokenizer choice zebra"}])
    assert [s["event"] for s in e["sources"]] == [talk.call]


# ---------------------------------------------------------------------------
# Invariant 1: no entry without a valid, visible source
# ---------------------------------------------------------------------------

BAD_SOURCES = [
    ("no list", None, origin.UsageError),
    ("empty list", [], origin.UsageError),
    ("a bare string", "claude-code:a-decide", origin.UsageError),
    ("a list of strings", ["claude-code:a-decide"], origin.UsageError),
    ("an empty source", [{}], origin.UsageError),
    ("an empty event id", [{"event": ""}], origin.UsageError),
    ("an event id of the wrong type", [{"event": 42}], origin.UsageError),
    ("a quote of the wrong type", [{"quote": ["keep", "SQLite"]}], origin.UsageError),
    ("an unknown event", [{"event": "claude-code:no-such-line"}], origin.NotFound),
    ("an entry id as event", [{"event": "ent_0000000000000000000000"}], origin.NotFound),
    ("a quote nobody wrote", [{"quote": "we chose Postgres for the archive"}], origin.NotFound),
    ("a quote too short", [{"quote": " a b "}], origin.UsageError),
    ("a blank quote", [{"quote": "   "}], origin.UsageError),
    ("an oversized quote", [{"quote": "keep SQLite " * 200}], origin.UsageError),
    ("a quote not in the cited event", [{"event": "claude-code:a-decide", "quote": "Postgres"}], origin.UsageError),
    ("a quote only in a tool call", [{"quote": "tokenizer choice zebra"}], origin.NotFound),
    ("one good source and one bad", [{"event": "claude-code:a-decide"}, {"event": "claude-code:nope"}],
     origin.NotFound),
]


@pytest.mark.parametrize("sources, error", [c[1:] for c in BAD_SOURCES], ids=[c[0] for c in BAD_SOURCES])
def test_invariant_1_remember_without_a_valid_source_is_refused_and_writes_nothing(store, talk, sources, error):
    before = counts(store)
    with pytest.raises(error) as info:
        remember(store, sources=sources)
    assert str(info.value)
    assert counts(store) == before


def test_invariant_1_every_entry_source_reads_back_its_original_line(store, talk, origin_home):
    a = remember(store, sources=[{"event": talk.decide}])
    b = remember(store, sources=[{"quote": "trigram tokenizer for search"}, {"event": talk.call}])
    c = remember(store, sources=[{"quote": "CJK works as substrings"}], kind="knowledge")
    d = origin.correct(store, a["id"], text="The archive is one SQLite file in WAL mode.", author="user",
                       sources=[{"quote": "Recorded: SQLite with WAL"}])
    checked = 0
    for eid in (a["id"], b["id"], c["id"], d["id"]):
        entry = origin.get_entry(store, eid)
        raws = origin.raw_sources(store, eid)
        assert entry["sources"] and len(raws) == len(entry["sources"])
        for s, raw in zip(entry["sources"], raws):
            assert raw["event"] == s["event"]
            assert (s["file"], s["line"], s["mirror"]) == (raw["file"], raw["line"], raw["mirror"])
            original = read_line(Path(raw["file"]), raw["line"])
            assert read_line(origin_home / raw["mirror"], raw["line"]) == original
            assert raw["raw"].encode() == original
            assert json.loads(original)["uuid"] == s["event"].split(":", 1)[1].split("#")[0]
            if s["quote"]:
                assert origin.squash(s["quote"]) in origin.squash(origin.get_event(store, s["event"])["text"])
            checked += 1
    assert checked == 6
    # Every stored entry cites at least one existing event.
    orphans = store.conn.execute(
        "SELECT e.id FROM entry e WHERE NOT EXISTS (SELECT 1 FROM entry_source s JOIN event v ON v.id = s.event_id "
        "WHERE s.entry_id = e.id)").fetchall()
    assert orphans == []


# ---------------------------------------------------------------------------
# Bad requests to the core: clear errors, nothing written
# ---------------------------------------------------------------------------

GOOD = {"kind": "memory", "text": "The archive is one SQLite file.", "author": "claude-code",
        "sources": [{"event": "claude-code:a-decide"}]}

BAD_FIELDS = [
    ("unknown kind", {"kind": "fact"}),
    ("kind in capitals", {"kind": "Memory"}),
    ("empty kind", {"kind": ""}),
    ("kind of the wrong type", {"kind": 3}),
    ("empty text", {"text": ""}),
    ("blank text", {"text": " \n\t "}),
    ("text of the wrong type", {"text": 12}),
    ("no text", {"text": None}),
    ("oversized text", {"text": "x" * (origin.MAX_ENTRY_TEXT + 1)}),
    ("confidence below 0", {"confidence": -0.01}),
    ("confidence above 1", {"confidence": 1.5}),
    ("confidence as text", {"confidence": "0.5"}),
    ("confidence as bool", {"confidence": True}),
    ("confidence NaN", {"confidence": math.nan}),
    ("confidence infinite", {"confidence": math.inf}),
    ("empty author", {"author": ""}),
    ("blank author", {"author": "   "}),
    ("author of the wrong type", {"author": 7}),
    ("project of the wrong type", {"project": 5}),
    ("oversized project", {"project": "p" * 1_000_000}),
    ("valid_from not a date", {"valid_from": "yesterday"}),
    ("valid_from impossible date", {"valid_from": "2026-02-30"}),
    ("valid_from of the wrong type", {"valid_from": 20260101}),
    ("valid_to before valid_from", {"valid_from": "2026-06-01", "valid_to": "2026-05-01"}),
]


@pytest.mark.parametrize("change", [c[1] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS])
def test_remember_with_a_bad_field_is_refused_and_writes_nothing(store, talk, change):
    before = counts(store)
    with pytest.raises(origin.UsageError) as info:
        origin.remember(store, **{**GOOD, **change})
    assert str(info.value)
    assert counts(store) == before


BAD_CORRECTIONS = [
    ("entry id of the wrong type", {"entry_id": 5}, origin.UsageError),
    ("unknown entry id", {"entry_id": "ent_0000000000000000000000"}, origin.NotFound),
    ("an event id", {"entry_id": "claude-code:a-decide"}, origin.NotFound),
    ("empty text", {"text": ""}, origin.UsageError),
    ("no text", {"text": None}, origin.UsageError),
    ("oversized text", {"text": "y" * (origin.MAX_ENTRY_TEXT + 1)}, origin.UsageError),
    ("unknown kind", {"kind": "fact"}, origin.UsageError),
    ("confidence above 1", {"confidence": 2}, origin.UsageError),
    ("author of the wrong type", {"author": None}, origin.UsageError),
    ("project of the wrong type", {"project": 5}, origin.UsageError),
    ("valid_to not a date", {"valid_to": "soon"}, origin.UsageError),
    ("an unknown added source", {"sources": [{"event": "claude-code:nope"}]}, origin.NotFound),
    ("an added quote nobody wrote", {"sources": [{"quote": "we chose Postgres"}]}, origin.NotFound),
    ("sources not a list", {"sources": {"event": "claude-code:u-agree"}}, origin.UsageError),
]


@pytest.mark.parametrize("change, error", [c[1:] for c in BAD_CORRECTIONS], ids=[c[0] for c in BAD_CORRECTIONS])
def test_correct_with_a_bad_request_is_refused_and_writes_nothing(store, talk, change, error):
    e = remember(store, sources=[{"event": talk.decide}])
    args = {"entry_id": e["id"], "text": "The archive is one SQLite file with WAL.", "author": "user", **change}
    before = counts(store)
    with pytest.raises(error) as info:
        origin.correct(store, args.pop("entry_id"), **args)
    assert str(info.value)
    assert counts(store) == before
    assert origin.entry_status(store.conn, e["id"]) == "active"


@pytest.mark.parametrize("call", [
    lambda s: origin.get_entry(s, 5),
    lambda s: origin.get_item(s, None),
    lambda s: origin.raw_sources(s, 3.5),
    lambda s: origin.list_entries(s, kind="fact"),
    lambda s: origin.list_entries(s, limit=0),
    lambda s: origin.list_entries(s, limit="10"),
    lambda s: origin.search(s, "sqlite", scope="everything"),
    lambda s: origin.search_entries(s, 42),
    lambda s: origin.search_entries(s, "sqlite", kind="fact"),
], ids=["get_entry int", "get_item None", "raw_sources float", "entries bad kind", "entries limit 0",
        "entries limit text", "search bad scope", "entry search int query", "entry search bad kind"])
def test_entry_reads_with_wrong_types_give_usage_errors(store, talk, call):
    with pytest.raises(origin.UsageError):
        call(store)


@pytest.mark.parametrize("item", ["ent_0000000000000000000000", "claude-code:no-such-line", "ent_", ""])
def test_unknown_ids_are_reported_as_such(store, talk, item):
    with pytest.raises((origin.NotFound, origin.UsageError)) as info:
        origin.get_item(store, item)
    assert str(info.value)
    with pytest.raises((origin.NotFound, origin.UsageError)):
        origin.raw_sources(store, item)


# ---------------------------------------------------------------------------
# Validity windows
# ---------------------------------------------------------------------------


def test_validity_window_is_stored_and_shown(store, talk, run):
    e = remember(store, sources=[{"event": talk.decide}], valid_from="2026-05-01", valid_to="2026-12-31T18:00:00+02:00")
    assert e["valid_from"].startswith("2026-05-01")
    assert e["valid_to"].startswith("2026-12-31T18:00:00")
    row = store.conn.execute("SELECT valid_from, valid_to FROM entry WHERE id = ?", (e["id"],)).fetchone()
    assert (row[0], row[1]) == (e["valid_from"], e["valid_to"])
    listed = origin.list_entries(store)[0]
    assert (listed["valid_from"], listed["valid_to"]) == (e["valid_from"], e["valid_to"])
    code, out, _ = run("show", e["id"])
    assert code == 0
    assert f"valid     {e['valid_from']} to {e['valid_to']}" in out
    # A correction keeps the window unless it is given a new one.
    c = origin.correct(store, e["id"], text="The archive is one SQLite file (WAL).", author="user")
    assert (c["valid_from"], c["valid_to"]) == (e["valid_from"], e["valid_to"])
    c2 = origin.correct(store, c["id"], text="The archive is one SQLite file, WAL mode.", author="user",
                        valid_to="2027-06-30")
    assert c2["valid_from"] == e["valid_from"] and c2["valid_to"].startswith("2027-06-30")


def test_validity_window_is_optional(store, talk):
    e = remember(store, sources=[{"event": talk.decide}])
    assert (e["valid_from"], e["valid_to"]) == (None, None)


@pytest.mark.parametrize("valid_from, valid_to, accepted", [
    ("2026-03-01", "2026-03-31", True),
    ("2026-03-01", "2026-03-01", True),
    ("2026-03-31", "2026-03-01", False),
    ("2026-03-01T10:00:00+05:00", "2026-03-01T08:00:00+00:00", True),  # 05:00Z starts before 08:00Z
    ("2026-03-01T08:00:00Z", "2026-03-01T10:00:00+05:00", False),  # 08:00Z starts after 05:00Z ends
])
def test_validity_window_order_is_checked_in_time_not_as_text(store, talk, valid_from, valid_to, accepted):
    args = dict(sources=[{"event": talk.decide}], valid_from=valid_from, valid_to=valid_to)
    if accepted:
        assert remember(store, **args)["status"] == "active"
    else:
        with pytest.raises(origin.UsageError):
            remember(store, **args)


# ---------------------------------------------------------------------------
# correct, linear history, derived status
# ---------------------------------------------------------------------------


def test_correct_supersedes_inherits_sources_and_adds_new_ones(store, talk):
    old = remember(store, "The archive uses SQLite.", sources=[{"event": talk.decide, "quote": "keep SQLite"}],
                   confidence=0.6, kind="knowledge")
    new = origin.correct(store, old["id"], text="The archive uses SQLite with the trigram tokenizer.", author="user",
                         sources=[{"quote": "trigram tokenizer for search"}])
    assert new["id"] != old["id"] and new["id"].startswith("ent_")
    assert new["supersedes"] == old["id"]
    assert (new["kind"], new["confidence"], new["project"], new["author"]) == ("knowledge", 0.6, "atlas", "user")
    assert [(s["event"], s["quote"]) for s in new["sources"]] == [
        (talk.decide, "keep SQLite"), (talk.agree, "trigram tokenizer for search")]
    assert origin.entry_status(store.conn, old["id"]) == "superseded"
    assert origin.get_entry(store, old["id"])["status"] == "superseded"
    assert origin.get_entry(store, old["id"])["text"] == "The archive uses SQLite."  # never rewritten
    history = [{"id": old["id"], "status": "superseded"}, {"id": new["id"], "status": "active"}]
    assert new["history"] == history == origin.get_entry(store, old["id"])["history"]
    assert ids(origin.list_entries(store)) == [new["id"]]


def test_correct_without_new_sources_keeps_the_old_ones_and_may_change_fields(store, talk):
    old = remember(store, sources=[{"event": talk.decide}], project="atlas", confidence=0.9)
    new = origin.correct(store, old["id"], text="The archive is SQLite, decided in May.", author="user",
                         confidence=0.4, kind="memory", project="atlas-core")
    assert [s["event"] for s in new["sources"]] == [talk.decide]
    assert (new["confidence"], new["project"]) == (0.4, "atlas-core")


def test_correct_of_a_superseded_version_is_refused_and_history_stays_linear(store, talk):
    v1 = remember(store, "v1: the archive is SQLite.", sources=[{"event": talk.decide}])
    v2 = origin.correct(store, v1["id"], text="v2: the archive is SQLite in WAL mode.", author="user")
    before = counts(store)
    with pytest.raises(origin.Conflict) as info:
        origin.correct(store, v1["id"], text="v2b: a fork of the history.", author="user")
    assert v2["id"] in str(info.value)  # the message names the version to correct instead
    assert counts(store) == before
    v3 = origin.correct(store, v2["id"], text="v3: the archive is SQLite in WAL mode with trigram FTS.", author="user")
    chain = [v1["id"], v2["id"], v3["id"]]
    for v in chain:
        assert origin.version_chain(store.conn, v) == chain
    assert [origin.entry_status(store.conn, v) for v in chain] == ["superseded", "superseded", "active"]
    assert ids(origin.list_entries(store)) == [v3["id"]]
    assert ids(origin.list_entries(store, history=True)) == chain[::-1]
    # Each version is superseded at most once.
    dup = store.conn.execute("SELECT supersedes, count(*) FROM entry WHERE supersedes IS NOT NULL "
                             "GROUP BY supersedes HAVING count(*) > 1").fetchall()
    assert dup == []


def test_status_is_derived_and_never_stored(store, talk):
    cols = {r["name"] for r in store.conn.execute("PRAGMA table_info(entry)")}
    assert "status" not in cols
    e = remember(store, sources=[{"event": talk.decide}])
    assert origin.entry_status(store.conn, e["id"]) == "active"
    c = origin.correct(store, e["id"], text="Corrected statement about SQLite.", author="user")
    assert origin.entry_status(store.conn, e["id"]) == "superseded"
    origin.forget(store, c["id"])
    assert origin.entry_status(store.conn, e["id"]) == "forgotten"  # forgotten wins over superseded
    assert origin.entry_status(store.conn, c["id"]) == "forgotten"
    assert origin.entry_status(store.conn, "ent_unknown") is None


def test_entries_are_append_only(store, talk):
    e = remember(store, sources=[{"event": talk.decide}])
    for sql in ("UPDATE entry SET text = 'rewritten' WHERE id = ?", "DELETE FROM entry WHERE id = ?",
                "DELETE FROM entry_source WHERE entry_id = ?"):
        with pytest.raises(Exception, match="append-only"):
            store.conn.execute(sql, (e["id"],))
    assert origin.get_entry(store, e["id"])["text"] == e["text"]


# ---------------------------------------------------------------------------
# Queries: entries, search
# ---------------------------------------------------------------------------


def test_entries_lists_active_ones_newest_first_with_kind_project_and_history(store, talk):
    a = remember(store, "Archive: SQLite.", kind="knowledge", sources=[{"event": talk.decide}])
    b = remember(store, "Prefers trigram search over word search.", kind="cognition",
                 sources=[{"event": talk.agree}], project="search")
    c = remember(store, "Decided on SQLite in May.", kind="memory", sources=[{"event": talk.decide}])
    a2 = origin.correct(store, a["id"], text="Archive: SQLite with WAL.", author="user")
    assert ids(origin.list_entries(store)) == [a2["id"], c["id"], b["id"]]
    assert ids(origin.list_entries(store, kind="knowledge")) == [a2["id"]]
    assert ids(origin.list_entries(store, kind="cognition")) == [b["id"]]
    assert ids(origin.list_entries(store, project="atlas")) == [a2["id"], c["id"]]
    assert ids(origin.list_entries(store, project="search")) == [b["id"]]
    assert ids(origin.list_entries(store, project="nowhere")) == []
    hist = origin.list_entries(store, history=True)
    assert ids(hist) == [a2["id"], c["id"], b["id"], a["id"]]
    assert {r["id"]: r["status"] for r in hist}[a["id"]] == "superseded"
    assert ids(origin.list_entries(store, kind="knowledge", history=True)) == [a2["id"], a["id"]]
    assert ids(origin.list_entries(store, limit=1)) == [a2["id"]]


def test_search_returns_entries_beside_events(store, talk):
    e = remember(store, "The archive keeps SQLite in WAL mode.", kind="knowledge", sources=[{"event": talk.decide}],
                 confidence=0.7)
    res = origin.search(store, "sqlite")
    assert ids(res["entries"]) == [e["id"]]
    hit = res["entries"][0]
    for key in ("id", "kind", "snippet", "confidence", "project", "status", "created"):
        assert key in hit
    assert (hit["kind"], hit["confidence"], hit["project"], hit["status"]) == ("knowledge", 0.7, "atlas", "active")
    assert "SQLite" in hit["snippet"]
    assert set(ids(res["events"])) == {talk.decide, talk.wrap}
    assert origin.search(store, "sqlite", scope="events")["entries"] == []
    assert origin.search(store, "sqlite", scope="entries")["events"] == []


def test_search_without_a_query_lists_the_most_recent_entries(store, talk):
    made = [remember(store, f"Entry number {i} about the archive.", sources=[{"event": talk.decide}])["id"]
            for i in range(3)]
    res = origin.search(store)
    assert ids(res["entries"]) == made[::-1]
    assert res["events"] == []
    assert ids(origin.search(store, "   ")["entries"]) == made[::-1]
    assert ids(origin.search(store, limit=2)["entries"]) == made[:0:-1]


@pytest.mark.parametrize("query, expected", [
    ("sqlite", {"a", "b"}),
    ("SQLITE wal", {"a"}),
    ("wal sqlite", {"a"}),
    ("sqlite postgres", set()),
    ("qlit", {"a", "b"}),  # trigram: any substring of three or more characters
    ("db", {"c"}),  # a short term falls back to a substring match
    ("db 数据库", {"c"}),
    ("数据库", {"c"}),
    ("数据", {"c"}),
    ('"wal', {"a"}),  # an unclosed quote's phrase runs to the end; never FTS syntax
    ('"with wal"', {"a"}),  # a phrase: adjacent words, in order
    ('"wal with"', set()),
    ("wal OR server", set()),
    ("a%b", set()),
])
def test_entry_search_uses_the_same_query_rules_as_events(store, talk, query, expected):
    made = {
        "a": remember(store, "SQLite with WAL mode for readers.", sources=[{"event": talk.decide}])["id"],
        "b": remember(store, "SQLite, one file and no server.", sources=[{"event": talk.decide}])["id"],
        "c": remember(store, "The db index: 数据库 uses trigram search.", sources=[{"event": talk.agree}])["id"],
    }
    got = set(ids(origin.search_entries(store, query)))
    assert got == {made[k] for k in expected}


def test_ranked_entry_search_reads_the_index_first_and_skips_superseded_and_forgotten(store, talk, monkeypatch):
    made = []
    for i in range(12):
        # Entry i says "marmot" i + 1 times in a text of the same length: BM25 ranks them in reverse.
        text = " ".join(["marmot"] * (i + 1) + ["filler"] * (20 - i)) + f" (entry {i})"
        made.append(remember(store, text, sources=[{"event": talk.agree if i == 10 else talk.decide}])["id"])
    fixed = origin.correct(store, made[11], text="marmot, corrected once", author="user")["id"]
    origin.forget(store, made[10])  # (and the event it cites, which no other entry cites)

    def both(**kw):
        fast = ids(origin.search_entries(store, "marmot", **kw))
        monkeypatch.setattr(origin, "RANK_FIRST_MAX", -1)  # the join of every match, as a reference
        slow = ids(origin.search_entries(store, "marmot", **kw))
        monkeypatch.undo()
        return fast, slow

    fast, slow = both(limit=50)
    assert fast == slow and set(fast) == {*made[:10], fixed}
    assert [e for e in fast if e != fixed] == made[9::-1]
    for limit, offset in ((4, 0), (3, 6), (5, 9)):
        page, ref = both(limit=limit, offset=offset)
        assert page == ref == fast[offset:offset + limit]


def test_entry_search_covers_active_entries_unless_history_is_asked(store, talk):
    old = remember(store, "The archive keeps Postgres.", sources=[{"event": talk.decide}])
    new = origin.correct(store, old["id"], text="The archive keeps SQLite after all.", author="user")
    assert ids(origin.search_entries(store, "archive keeps")) == [new["id"]]
    assert ids(origin.search_entries(store, "postgres")) == []
    hist = origin.search_entries(store, "postgres", history=True)
    assert ids(hist) == [old["id"]] and hist[0]["status"] == "superseded"
    assert set(ids(origin.search_entries(store, "archive keeps", history=True))) == {old["id"], new["id"]}


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def test_cli_remember_correct_entries_and_show(store, talk, cli, origin_home):
    code, e = cli("remember", "The archive keeps SQLite.", "--kind", "knowledge", "--quote", "keep SQLite for the archive",
                  "--confidence", "0.9", "--project", "atlas", "--json")
    assert code == 0 and e["id"].startswith("ent_")
    assert (e["kind"], e["status"], e["confidence"], e["author"], e["project"]) == (
        "knowledge", "active", 0.9, "user", "atlas")
    assert [(s["event"], s["quote"]) for s in e["sources"]] == [(talk.decide, "keep SQLite for the archive")]
    code, c = cli("correct", e["id"], "The archive keeps SQLite with WAL.", "--event", talk.wrap, "--quote",
                  "SQLite with WAL", "--json")
    assert code == 0 and c["id"].startswith("ent_") and c["supersedes"] == e["id"]
    assert [s["event"] for s in c["sources"]] == [talk.decide, talk.wrap]
    code, listed = cli("entries", "--json")
    assert code == 0 and ids(listed["entries"]) == [c["id"]]
    code, listed = cli("entries", "--history", "--json")
    assert ids(listed["entries"]) == [c["id"], e["id"]]
    code, listed = cli("entries", "--kind", "memory", "--json")
    assert listed["entries"] == []
    code, listed = cli("entries", "--project", "atlas", "--json")
    assert ids(listed["entries"]) == [c["id"]]
    code, shown = cli("show", c["id"], "--json")
    assert code == 0
    assert shown["entry"]["text"] == "The archive keeps SQLite with WAL."
    assert [h["id"] for h in shown["entry"]["history"]] == [e["id"], c["id"]]
    assert [s["event"] for s in shown["sources"]] == [talk.decide, talk.wrap]
    for s in shown["sources"]:
        assert s["raw"].encode() == read_line(origin_home / s["mirror"], s["line"])
        assert s["raw"].encode() == read_line(talk.path, s["line"])
    code, found = cli("search", "--json")
    assert ids(found["entries"]) == [c["id"]]


def test_cli_show_entry_lists_text_quotes_locators_and_history(store, talk, run):
    e = remember(store, "Archive decision: SQLite.", sources=[{"event": talk.decide, "quote": "no server"}])
    c = origin.correct(store, e["id"], text="Archive decision: SQLite, trigram search.", author="user",
                       sources=[{"quote": "trigram tokenizer for search"}])
    code, out, _ = run("show", c["id"])
    assert code == 0
    assert "Archive decision: SQLite, trigram search." in out
    assert "quote: no server" in out and "quote: trigram tokenizer for search" in out
    for src in origin.get_entry(store, c["id"])["sources"]:
        assert f"source {src['event']}" in out
        assert f"{src['file']}  line {src['line']}" in out
        assert src["mirror"] in out
    assert f"{e['id']} (superseded) -> {c['id']} (active)" in out


def test_cli_remember_prints_the_new_id(store, talk, run):
    code, out, _ = run("remember", "Search uses trigram.", "--kind", "knowledge", "--event", talk.agree)
    assert code == 0
    eid = out.split()[0]
    assert eid.startswith("ent_") and origin.entry_status(store.conn, eid) == "active"
    assert talk.agree in out


def test_cli_remember_with_validity_window(store, talk, cli):
    code, e = cli("remember", "Freeze on schema changes.", "--kind", "memory", "--event", talk.decide,
                  "--valid-from", "2026-05-01", "--valid-to", "2026-05-31", "--json")
    assert code == 0
    assert e["valid_from"].startswith("2026-05-01") and e["valid_to"].startswith("2026-05-31")


CLI_BAD = [
    ("remember without a source", ["remember", "A statement.", "--kind", "memory"], 2),
    ("remember empty text", ["remember", "", "--kind", "memory", "--event", "claude-code:a-decide"], 2),
    ("remember oversized text", ["remember", "z" * (origin.MAX_ENTRY_TEXT + 1), "--kind", "memory", "--event",
                                 "claude-code:a-decide"], 2),
    ("remember unknown kind", ["remember", "A statement.", "--kind", "fact", "--event", "claude-code:a-decide"], 2),
    ("remember without kind", ["remember", "A statement.", "--event", "claude-code:a-decide"], 2),
    ("remember unknown event", ["remember", "A statement.", "--kind", "memory", "--event", "claude-code:nope"], 3),
    ("remember quote nobody wrote", ["remember", "A statement.", "--kind", "memory", "--quote", "we chose Postgres"], 3),
    ("remember quote only in a tool call", ["remember", "A statement.", "--kind", "memory", "--quote",
                                            "tokenizer choice zebra"], 3),
    ("remember quote not in the event", ["remember", "A statement.", "--kind", "memory", "--event",
                                         "claude-code:a-decide", "--quote", "Postgres"], 2),
    ("remember empty quote", ["remember", "A statement.", "--kind", "memory", "--quote", ""], 2),
    ("remember confidence above 1", ["remember", "A statement.", "--kind", "memory", "--event",
                                     "claude-code:a-decide", "--confidence", "1.5"], 2),
    ("remember confidence not a number", ["remember", "A statement.", "--kind", "memory", "--event",
                                          "claude-code:a-decide", "--confidence", "high"], 2),
    ("remember validity not a date", ["remember", "A statement.", "--kind", "memory", "--event",
                                      "claude-code:a-decide", "--valid-from", "next week"], 2),
    ("correct unknown entry", ["correct", "ent_0000000000000000000000", "New text."], 3),
    ("correct an event id", ["correct", "claude-code:a-decide", "New text."], 3),
    ("show unknown entry", ["show", "ent_0000000000000000000000"], 3),
    ("show unknown event", ["show", "claude-code:nope"], 3),
    ("entries unknown kind", ["entries", "--kind", "fact"], 2),
    ("entries limit zero", ["entries", "--limit", "0"], 2),
    ("entries limit not a number", ["entries", "--limit", "many"], 2),
]


@pytest.mark.parametrize("argv, exit_code", [c[1:] for c in CLI_BAD], ids=[c[0] for c in CLI_BAD])
def test_cli_bad_requests_exit_non_zero_with_a_message_and_write_nothing(store, talk, run, argv, exit_code):
    before = counts(store)
    code, out, err = run(*argv, "--json")
    assert code == exit_code
    assert err.strip()  # a readable reason on stderr
    assert counts(store) == before


def test_cli_correct_errors_for_superseded_entries(store, talk, run):
    e = remember(store, sources=[{"event": talk.decide}])
    c = origin.correct(store, e["id"], text="Second version.", author="user")
    before = counts(store)
    code, _, err = run("correct", e["id"], "A fork.", "--json")
    assert code == origin.Conflict.exit_code != 0
    assert c["id"] in err
    assert counts(store) == before
