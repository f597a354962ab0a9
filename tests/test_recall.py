"""Finding what people ask in their own words: strict then partial matches,
stop words, word forms, metadata, replies, and `origin ask`."""

from __future__ import annotations

import datetime as dt

import pytest

import origin
from conftest import write_session

DECISION = ("Demo project: decision to drop `npm run type-check` from CLAUDE.md, because package.json defines "
            "no such script.")


@pytest.fixture
def talk(user_home, store):
    write_session(user_home, "s-demo", "/src/Demo", [
        ("d1", "2026-03-01T10:00:00Z", "user", "Should the importer keep retrying when the upstream feed times out?"),
        ("d2", "2026-03-01T10:01:00Z", "assistant", "No: after three timeouts it stops and parks the job in the "
                                                   "dead-letter table."),
        ("d3", "2026-03-02T09:00:00Z", "user", "We decided to migrate the settings to TOML because YAML parsing "
                                              "was failing on tabs."),
        ("d4", "2026-03-02T09:01:00Z", "assistant", "Done: the loader reads settings.toml now."),
    ])
    write_session(user_home, "s-web", "/src/web", [
        ("w1", "2026-03-03T08:00:00Z", "user", "The build failed: cannot resolve module chart.js"),
        ("w2", "2026-03-03T08:01:00Z", "assistant", "Installed chart.js; the build passes."),
        ("w3", "2026-03-04T08:00:00Z", "user", "the of and"),
        ("w4", "2026-03-05T08:00:00Z", "assistant", "数据库迁移完成了"),
        ("w5", "2026-03-06T08:00:00Z", "assistant", "The upstream mirror is down again."),
    ])
    origin.sync(store)
    return store


def ids(rows):
    return [r["id"].split(":", 1)[1] for r in rows]


def events(store, query, **kw):
    return origin.search(store, query, scope="events", **kw)["events"]


def test_strict_hits_come_before_partial_ones_and_say_what_they_lack(talk):
    found = events(talk, "importer feed zebra")
    assert found, "a partial match fills the page"
    assert all(e["missing"] == ["zebra"] for e in found if "reply_to" not in e)
    found = events(talk, "importer upstream")
    assert ids(found)[0] == "d1" and "missing" not in found[0] and "matched" not in found[0]  # strict: every word
    assert ids(found)[1] == "d2" and found[1]["reply_to"] == found[0]["id"]  # its reply
    assert ids(found)[2:] == ["w5"]  # then the partial match
    assert found[2]["matched"] == ["upstream"] and found[2]["missing"] == ["importer"]


def test_strict_keeps_todays_every_word_answers(talk):
    assert events(talk, "importer zebra", strict=True) == []
    assert ids(events(talk, "importer upstream", strict=True)) == ["d1"]
    assert "reply_to" not in str(events(talk, "importer", strict=True))  # no replies either
    assert ids(events(talk, "when importer", strict=True)) == ["d1"]  # stop words count with strict
    assert events(talk, "how importer", strict=True) == []


def test_quoted_phrases_never_relax(talk):
    found = events(talk, '"keep retrying" zebra')
    assert ids(found) == ["d1", "d2"] and found[0]["missing"] == ["zebra"]  # d2: the reply to d1
    assert events(talk, '"retrying keep"') == []
    assert events(talk, '"retrying keep" importer') == []  # the phrase stays required
    assert events(talk, '"migrating the settings"') == []  # no word forms inside a phrase
    assert ids(events(talk, '"migrate the settings"'))[0] == "d3"


def test_stop_words_do_not_count_unless_nothing_else_is_asked(talk):
    found = events(talk, "what did the importer do when it timed out?")
    assert ids(found)[0] == "d1" and "missing" not in found[0]  # only importer (and timed) must match
    assert origin.must_match(origin.parse_query("what did the importer do?")).terms == ("importer",)
    found = events(talk, "the of and")  # nothing else: the stop words are the query
    assert ids(found)[0] == "w3" and "missing" not in found[0]
    assert origin.must_match(origin.parse_query('"what did" importer')).terms == ("what did", "importer")


@pytest.mark.parametrize("family", [
    ("decide", "decided", "deciding", "decision", "decisions"),
    ("migrate", "migrated", "migrating", "migration", "migrations"),
    ("fail", "failed", "failing", "failure", "failures"),
    ("config", "configure", "configured", "configuration"),
    ("test", "tests", "tested", "testing"),
    ("retry", "retries", "retried", "retrying"),
    ("dependency", "dependencies", "deps"),
    ("cache", "caches", "cached", "caching"),
    ("parse", "parsed", "parser", "parsing"),
    ("stop", "stops", "stopped", "stopping"),
    ("deploy", "deployed", "deployment", "deployments"),
    ("prefer", "prefers", "preferred", "preference"),
    ("include", "included", "inclusion"),
])
def test_word_forms_of_one_family_find_each_other(family):
    for a in family:
        for b in family:
            assert any(f in b for f in origin.word_forms(a)), (a, b, origin.word_forms(a))


@pytest.mark.parametrize("word, forms", [
    ("parse_ts", ("parse_ts",)), ("type-check", ("type-check",)), ("v1.2", ("v1.2",)), ("数据库", ("数据库",)),
    ("status", ("status",)), ("class", ("class",)), ("compression", ("compress",)), ("use", ("use",)),
    ("Running", ("run",)), ("API", ("api",)),
])
def test_word_forms_leave_identifiers_and_short_words_alone(word, forms):
    assert origin.word_forms(word) == forms


def test_word_forms_reach_the_archive_but_a_phrase_matches_as_typed(talk):
    assert "d3" in ids(events(talk, "decide toml"))  # decided
    assert "d3" in ids(events(talk, "migration"))  # migrate
    assert {"d3", "w1"} <= set(ids(events(talk, "failure")))  # failing, failed
    assert ids(events(talk, "failure", strict=True)) == []


def test_a_word_naming_the_project_matches_its_events_and_entries(talk):
    found = events(talk, "demo toml")
    assert set(ids(found)[:2]) == {"d3", "d4"}  # demo is their project, not in their text
    assert found[0]["matched"] == found[1]["matched"] == ["demo", "toml"] and "missing" not in found[0]
    read = origin.search(talk, "Demo toml", scope="events")  # in the project's own capitals: read as the project
    assert read["understood"] == {"project": "Demo", "words": ["toml"]} and set(ids(read["events"])) == {"d3", "d4"}
    entry = origin.remember(talk, kind="memory", text="Settings moved to TOML.", sources=[{"event": found[0]["id"]}],
                            author="user")
    res = origin.search(talk, "demo settings")
    assert res["entries"][0]["id"] == entry["id"] and res["entries"][0]["matched"] == ["demo", "settings"]
    found = events(talk, "claude chart.js")  # an agent's name matches its events
    assert sorted(ids(found)[:2]) == ["w1", "w2"] and found[0]["matched"] == ["claude", "chart.js"]


def test_a_user_message_that_matches_brings_the_reply_after_it(talk):
    found = events(talk, "importer upstream")
    assert ids(found)[:2] == ["d1", "d2"] and found[1]["reply_to"] == found[0]["id"]
    found = events(talk, "chart.js")
    assert sorted(ids(found)) == ["w1", "w2"] and "reply_to" not in str(found)  # the reply matched: listed once


def test_a_cjk_word_of_two_characters_is_found_inside_a_longer_question(talk):
    assert ids(events(talk, "怎么迁移的")) == ["w4"]  # 迁移 (two characters), the question words cut away


def test_invariant_2_partial_matches_and_replies_never_show_a_forgotten_event(talk):
    d2 = "claude-code:d2"
    origin.forget(talk, d2, reason="test")
    found = events(talk, "importer upstream")
    assert ids(found) == ["d1", "w5"]  # its reply is forgotten: not shown
    assert "d2" not in ids(events(talk, "importer timeouts dead-letter"))  # nor as a partial match
    origin.forget(talk, "claude-code:d3", reason="test")
    assert "d3" not in ids(events(talk, "decide toml")) + ids(events(talk, "Demo settings"))


# -- origin ask: reading a question ---------------------------------------------------------------

#: Wednesday 2 December 2026, noon, in the local time zone.
NOW = dt.datetime(2026, 12, 2, 12, 0).astimezone()


def day(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).astimezone().timestamp() * 1000)


@pytest.mark.parametrize("question, since, until", [
    ("what did I do today", "2026-12-02", None),
    ("what broke yesterday", "2026-12-01", "2026-12-02"),
    ("what did I decide last week", "2026-11-23", None),  # since the Monday before this week's
    ("decisions this week", "2026-11-30", None),
    ("what happened last month", "2026-11-01", None),
    ("the cache work in March", "2026-03-01", "2026-04-01"),
    ("the cache work in December", "2026-12-01", "2027-01-01"),
    ("the cache work in March 2025", "2025-03-01", "2025-04-01"),
    ("what changed since Monday", "2026-11-30", None),
    ("what changed since Wednesday", "2026-12-02", None),
    ("what did we ship on Friday", "2026-11-27", "2026-11-28"),
    ("errors in the last 3 days", None, None),  # "last 3 days": 72 hours back (checked below)
    ("what did I fix 2 days ago", "2026-11-30", "2026-12-01"),
    ("since 2026-11-02 what broke", "2026-11-02", None),
    ("since May what broke", "2026-05-01", None),
])
def test_ask_reads_each_time_phrase(store, question, since, until):
    q = origin.read_question(store, question, NOW)
    if question.endswith("3 days"):
        assert q.since == int((NOW - dt.timedelta(days=3)).timestamp() * 1000) and q.until is None
        return
    assert q.since == day(since) and q.until == (day(until) if until else None)
    assert q.when and q.when.casefold() in question.casefold()
    assert not any(w in q.words for w in q.when.split())  # the phrase is not searched for


@pytest.mark.parametrize("question", ["last ² days", "in march ²⁰²⁴", "last 99999999999 days",
                                      "9999999999999999999999 weeks ago", "in March 0001"])
def test_a_time_phrase_of_odd_digits_is_searched_as_words_not_a_crash(talk, question):
    q = origin.read_question(talk, question, NOW)
    assert q.since is None or q.since > 0
    origin.search(talk, question)  # no error


def test_ask_reads_a_project_named_after_a_cue_or_in_its_own_case(talk):
    assert origin.read_question(talk, "what did I decide in demo", NOW).project == "Demo"
    assert origin.read_question(talk, "Demo settings", NOW).project == "Demo"
    q = origin.read_question(talk, "a demo of the importer", NOW)  # no cue, not its case: just a word
    assert q.project is None and "demo" in q.words
    assert origin.read_question(talk, "cache in Atlantis", NOW).project is None  # no such project
    assert origin.read_question(talk, 'why "in demo" broke', NOW).project is None  # quoted: searched as typed


def test_ask_widens_when_the_project_and_time_leave_nothing_and_says_so(talk):
    res = origin.ask(talk, "when did the importer time out last week", now=NOW)
    assert res["understood"]["since"].startswith("2026-11-23") and res["widened"].startswith("nothing in that time")
    assert ids(res["events"])[0] == "d1"
    res = origin.ask(talk, "chart.js in demo", now=NOW)
    assert res["understood"]["project"] == "Demo" and "every project" in res["widened"]
    assert set(ids(res["events"])) == {"w1", "w2"}


# -- the mission question, end to end -------------------------------------------------------------

def test_what_did_i_decide_in_demo_last_week_finds_the_decision(all_agents, cli, origin_home):
    cli("sync")
    with origin.open_store(origin_home) as s:
        origin.update_index(s)  # caught up: a form no message holds fetches no event, only entries
    code, entry = cli("remember", DECISION, "--kind", "memory", "--quote", "`npm run type-check`を削除", "--json")
    assert code == 0, cli.err
    code, out = cli("search", "decide", "--project", "demo")
    assert code == 0 and out.split()[0] == entry["id"]
    code, out = cli("ask", "what did I decide in Demo last week")
    assert code == 0, cli.err
    lines = out.splitlines()
    assert lines[0].startswith("understood: project Demo, since ") and lines[0].endswith("words: decide (last week)")
    first = next(line for line in lines[1:] if line.strip())
    assert first.startswith(entry["id"]) and DECISION in first
    assert "quote: `npm run type-check`を削除" in out
    code, res = cli("ask", "what did I decide in Demo last week", "--json")
    assert res["entries"][0]["id"] == entry["id"] and res["entries"][0]["sources"][0]["quote"]
