"""Search and timeline over events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import origin


def write_session(home: Path, session: str, cwd: str, records: list[tuple]) -> Path:
    """Write a Claude Code session: records are (uuid, iso time, role, content)."""
    folder = home / ".claude" / "projects" / cwd.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for uid, ts, role, content in records:
        lines.append(json.dumps({
            "type": role, "uuid": uid, "sessionId": session, "cwd": cwd, "timestamp": ts, "gitBranch": "main",
            "version": "2.1.0", "message": {"role": role, "content": content}}, ensure_ascii=False))
    p = folder / f"{session}.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.fixture
def corpus(user_home, store):
    write_session(user_home, "s-api", "/src/api", [
        ("a1", "2026-03-01T10:00:00Z", "user", "Should we use trigram search for the archive?"),
        ("a2", "2026-03-01T10:01:00Z", "assistant", [
            {"type": "text", "text": "Trigram search handles CJK and code identifiers like parse_ts."},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "grep trigram"}}]),
        ("a3", "2026-03-01T10:02:00Z", "user", [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "trigram tokenizer found in fts5"}]),
        ("a4", "2026-03-05T09:00:00Z", "user", "数据库迁移 is done; the UI label says OK"),
        ("a5", "2026-03-06T09:00:00Z", "assistant", "search search search trigram trigram ranking test"),
    ])
    write_session(user_home, "s-web", "/src/web", [
        ("w1", "2026-03-02T08:00:00Z", "user", "web uses trigram too, see 数据 in go"),
        ("w2", "2026-03-07T08:00:00Z", "assistant", "Done with the go port"),
    ])
    origin.sync(store)
    return store


def ids(rows):
    return [r["id"].split(":", 1)[1] for r in rows]


def test_terms_are_anded_phrases_and_tool_events_need_include_tools(corpus):
    assert set(ids(origin.search_events(corpus, "trigram"))) == {"a1", "a2", "a5", "w1"}
    assert ids(origin.search_events(corpus, "trigram CJK")) == ["a2"]
    assert ids(origin.search_events(corpus, '"trigram search"')) == []  # quotes are part of the term
    assert ids(origin.search_events(corpus, "tokenizer")) == []
    assert set(ids(origin.search_events(corpus, "tokenizer", include_tools=True))) == {"a3#0"}
    assert set(ids(origin.search_events(corpus, "grep", include_tools=True))) == {"a2#1"}


def test_search_is_case_insensitive_substring_search(corpus):
    assert ids(origin.search_events(corpus, "PARSE_TS")) == ["a2"]
    assert ids(origin.search_events(corpus, "rigra hand")) == ["a2"]


def test_cjk_search_of_three_characters_and_two_character_fallback(corpus):
    assert ids(origin.search_events(corpus, "数据库")) == ["a4"]
    assert set(ids(origin.search_events(corpus, "数据"))) == {"a4", "w1"}
    assert ids(origin.search_events(corpus, "数据 web")) == ["w1"]
    assert ids(origin.search_events(corpus, "UI OK")) == ["a4"]
    assert set(ids(origin.search_events(corpus, "go"))) == {"w1", "w2"}


def test_bm25_ranks_by_relevance_and_recent_by_time(corpus):
    ranked = ids(origin.search_events(corpus, "trigram"))
    assert ranked[0] == "a5"  # the densest match wins on relevance
    recent = ids(origin.search_events(corpus, "trigram", recent=True))
    assert recent == ["a5", "w1", "a2", "a1"]
    # Short terms fall back to LIKE, always newest first.
    assert ids(origin.search_events(corpus, "go")) == ["w2", "w1"]


def test_filters_source_project_session_and_time(corpus):
    assert set(ids(origin.search_events(corpus, "trigram", project="web"))) == {"w1"}
    assert set(ids(origin.search_events(corpus, "trigram", session="s-api"))) == {"a1", "a2", "a5"}
    assert ids(origin.search_events(corpus, "trigram", source="codex")) == []
    since = origin.parse_when("2026-03-02T00:00:00+00:00")
    until = origin.parse_when("2026-03-06T23:00:00+00:00")
    assert set(ids(origin.search_events(corpus, "trigram", since=since, until=until))) == {"w1", "a5"}


def test_results_carry_the_documented_fields(corpus):
    r = origin.search_events(corpus, "parse_ts")[0]
    assert set(r) == {"id", "session", "time", "source", "project", "role", "kind", "snippet"}
    assert r["source"] == "claude-code" and r["project"] == "api" and r["role"] == "assistant"
    assert r["time"].startswith("2026-03-01T") and r["time"][-6] in "+-"


def test_limit_is_validated_and_capped(corpus):
    with pytest.raises(origin.UsageError):
        origin.search_events(corpus, "trigram", limit=0)
    with pytest.raises(origin.UsageError):
        origin.search_events(corpus, "trigram", limit="5")
    assert len(origin.search_events(corpus, "trigram", limit=10_000)) == 4


def test_timeline_lists_sessions_in_a_window_and_one_sessions_events(corpus):
    since = origin.parse_when("2026-03-01")
    t = origin.timeline(corpus, since=since)
    assert [s["session"] for s in t["sessions"]] == ["s-web", "s-api"]
    api = next(s for s in t["sessions"] if s["session"] == "s-api")
    assert api["project"] == "api" and api["messages"] == 4 and api["events"] == 6
    assert api["title"].startswith("Should we use trigram")
    # The default window is the last 7 days: these sessions are older.
    assert origin.timeline(corpus)["sessions"] == []
    one = origin.timeline(corpus, session="s-api")
    assert ids(one["events"]) == ["a1", "a2", "a4", "a5"]
    with_tools = origin.timeline(corpus, session="s-api", include_tools=True)
    assert ids(with_tools["events"]) == ["a1", "a2", "a2#1", "a3#0", "a4", "a5"]
    with pytest.raises(origin.NotFound):
        origin.timeline(corpus, session="nope")


def test_bad_time_filters_are_refused_with_a_hint():
    with pytest.raises(origin.UsageError, match="7d"):
        origin.parse_when("last tuesday")
    assert origin.parse_when("2d") < origin.parse_when("1d")


def test_ranked_search_reads_the_index_first_and_still_skips_forgotten_events(user_home, store, monkeypatch):
    from test_entries import ClaudeLog

    log = ClaudeLog(user_home, session="sess-rank")
    ids = []
    for i in range(30):
        # Event i says "marmot" i + 1 times in a text of the same length, so BM25 ranks them in reverse.
        words = ["marmot"] * (i + 1) + ["filler"] * (40 - i)
        ids.append(log.user(f"u{i}", " ".join(words)))
    log.write()
    origin.sync(store)

    def both(limit):
        fast = [e["id"] for e in origin.search_events(store, "marmot", limit=limit)]
        monkeypatch.setattr(origin, "RANK_FIRST_MAX", -1)  # the join of every match, as a reference
        slow = [e["id"] for e in origin.search_events(store, "marmot", limit=limit)]
        monkeypatch.undo()
        return fast, slow

    fast, slow = both(5)
    assert fast == slow == ids[::-1][:5]
    for eid in ids[::-1][:4]:  # forget the four best matches
        origin.forget(store, eid)
    fast, slow = both(5)
    assert fast == slow == ids[::-1][4:9]
    fast, slow = both(200)
    assert fast == slow and len(fast) == 26
