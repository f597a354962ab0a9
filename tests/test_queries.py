"""Search and timeline over events."""

from __future__ import annotations

import pytest

import origin
from conftest import expected_rows, index_rows, write_session
from helpers import ClaudeLog


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
    assert set(ids(origin.search_events(corpus, '"trigram search"'))) == {"a1", "a2"}  # a phrase, in order
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


# Issue 13: phrases, the project filter, stable paging, context, projects, one validation.

def test_quoted_phrases_match_adjacent_words_in_order_beside_anded_words(corpus):
    assert set(ids(origin.search_events(corpus, '"trigram search"'))) == {"a1", "a2"}
    assert ids(origin.search_events(corpus, '"search trigram"')) == ["a5"]
    assert ids(origin.search_events(corpus, '"trigram  search"  CJK')) == ["a2"]  # spacing inside is squeezed
    assert ids(origin.search_events(corpus, '"use trigram" "the archive"')) == ["a1"]
    assert ids(origin.search_events(corpus, '"archive trigram"')) == []
    assert ids(origin.search_events(corpus, '"UI label" OK')) == ["a4"]
    assert origin.parse_query('say "the  CLAUDE.md" now').terms == ("say", "the CLAUDE.md", "now")
    assert origin.parse_query('"unclosed phrase').terms == ("unclosed phrase",)
    assert origin.parse_query('""  ').terms == ()


@pytest.fixture
def two_apis(corpus, user_home):
    write_session(user_home, "s-old", "/archive/api", [
        ("o1", "2026-02-01T10:00:00Z", "user", "the old trigram prototype"),
    ])
    write_session(user_home, "s-Web", "/src/Web-App", [
        ("x1", "2026-02-02T10:00:00Z", "user", "trigram in the web app"),
    ])
    origin.sync(corpus)
    return corpus


def test_project_filter_takes_a_name_in_any_case_or_the_end_of_a_path(two_apis):
    assert set(ids(origin.search_events(two_apis, "trigram", project="api"))) == {"a1", "a2", "a5", "o1"}
    assert set(ids(origin.search_events(two_apis, "trigram", project="API"))) == {"a1", "a2", "a5", "o1"}
    assert set(ids(origin.search_events(two_apis, "trigram", project="src/api"))) == {"a1", "a2", "a5"}
    assert set(ids(origin.search_events(two_apis, "trigram", project="/archive/api/"))) == {"o1"}
    assert set(ids(origin.search_events(two_apis, "trigram", project="web-app"))) == {"x1"}
    since = origin.parse_when("2020-01-01")
    assert [s["session"] for s in origin.timeline(two_apis, since=since, project="SRC/API")["sessions"]] == ["s-api"]


def test_an_unknown_project_is_refused_naming_the_close_matches(two_apis):
    with pytest.raises(origin.NotFound, match=r"no project 'wbe'; close matches: web.*origin projects"):
        origin.search(two_apis, "trigram", project="wbe")
    with pytest.raises(origin.NotFound, match="close matches: web, Web-App;"):
        origin.timeline(two_apis, project="we")
    with pytest.raises(origin.NotFound, match="no project 'zzz'; list projects"):
        origin.search_entries(two_apis, None, project="zzz")


def test_projects_list_agents_sessions_folders_and_activity(two_apis):
    res = origin.projects(two_apis)
    by = {p["project"]: p for p in res["projects"]}
    assert list(by) == ["web", "api", "Web-App"]  # most recently active first
    api = by["api"]
    assert api["agents"] == ["claude-code"] and api["sessions"] == 2 and api["folders"] == ["/archive/api", "/src/api"]
    assert api["first"].startswith("2026-02-01T") and api["last"].startswith("2026-03-06T")
    assert api["messages"] == 5 and api["entries"] == 0 and "next" not in res
    page = origin.projects(two_apis, limit=2)
    assert [p["project"] for p in page["projects"]] == ["web", "api"] and page["next"] == {"offset": 2}
    assert [p["project"] for p in origin.projects(two_apis, limit=2, offset=2)["projects"]] == ["Web-App"]


@pytest.mark.parametrize("strict, hits", [(True, 4), (False, 5)])  # 5: w1's reply, w2, follows it
def test_search_pages_by_offset_and_says_when_there_is_more(corpus, strict, hits):
    whole = ids(origin.search(corpus, "trigram", scope="events", recent=True, strict=strict)["events"])
    pages, offset = [], 0
    while True:
        res = origin.search(corpus, "trigram", scope="events", recent=True, limit=1, offset=offset, strict=strict)
        pages += ids(res["events"])
        if "next" not in res:
            break
        offset = res["next"]["offset"]
    assert pages == whole and len(whole) == hits
    assert "next" not in origin.search(corpus, "trigram", limit=hits, strict=strict)


def test_session_events_page_by_a_stable_cursor_through_32_messages_sharing_one_timestamp(all_agents, store):
    from conftest import CURSOR_SAME_TS

    origin.sync(store)
    whole = origin.timeline(store, session=CURSOR_SAME_TS)
    assert len(whole["events"]) == 32 and len({e["time"] for e in whole["events"]}) == 1
    assert "next" not in whole
    seen, after, pages = [], None, 0
    while True:
        page = origin.timeline(store, session=CURSOR_SAME_TS, limit=5, after=after)
        seen += [e["id"] for e in page["events"]]
        pages += 1
        if "next" not in page:
            break
        after = page["next"]["after"]
        assert after == seen[-1]
    assert seen == [e["id"] for e in whole["events"]] and pages == 7
    with pytest.raises(origin.UsageError, match="after is the id of an event of session"):
        origin.timeline(store, session=CURSOR_SAME_TS, after="claude-code:nope")


def test_a_sessions_events_do_not_repeat_its_session_source_and_project(corpus):
    one = origin.timeline(corpus, session="s-api")
    assert one["session"]["project"] == "api" and one["session"]["source"] == "claude-code"
    assert all(set(e) == {"id", "time", "role", "kind", "snippet"} for e in one["events"])


def test_timeline_of_sessions_pages_by_offset(corpus):
    since = origin.parse_when("2020-01-01")
    first = origin.timeline(corpus, since=since, limit=1)
    assert [s["session"] for s in first["sessions"]] == ["s-web"] and first["next"] == {"offset": 1}
    second = origin.timeline(corpus, since=since, limit=1, offset=1)
    assert [s["session"] for s in second["sessions"]] == ["s-api"] and "next" not in second


def test_event_context_lists_the_messages_around_an_event_in_session_order(corpus):
    around = origin.event_context(corpus, "claude-code:a4", 1)
    assert ids(around["before"]) == ["a2"] and ids(around["after"]) == ["a5"]
    around = origin.event_context(corpus, "claude-code:a2", 5, include_tools=True)
    assert ids(around["before"]) == ["a1"] and ids(around["after"]) == ["a2#1", "a3#0", "a4", "a5"]
    assert origin.event_context(corpus, "claude-code:a1", 0) == {"before": [], "after": []}
    with pytest.raises(origin.UsageError, match="context is a whole number"):
        origin.event_context(corpus, "claude-code:a1", origin.MAX_CONTEXT + 1)
    origin.forget(corpus, "claude-code:a4")
    assert ids(origin.event_context(corpus, "claude-code:a5", 1)["before"]) == ["a2"]  # forgotten: skipped
    with pytest.raises(origin.Forgotten):
        origin.event_context(corpus, "claude-code:a4", 1)


def test_search_and_timeline_refuse_an_unknown_session_or_source_alike(corpus):
    for call in (lambda: origin.search(corpus, "trigram", session="nope"),
                 lambda: origin.timeline(corpus, session="nope")):
        with pytest.raises(origin.NotFound, match="no session 'nope'; list sessions with `origin timeline`"):
            call()
    for call in (lambda: origin.search(corpus, "trigram", source="nope"),
                 lambda: origin.timeline(corpus, source="nope")):
        with pytest.raises(origin.UsageError, match="source 'nope' is not an agent Origin knows: use one of"):
            call()


def _segments(store, part: str) -> int:
    fts = origin.EVENT_INDEXES[part][1]
    return store.reader.execute(f"SELECT count(DISTINCT segid) FROM ix_{part}.{fts}_idx").fetchone()[0]


def _synced_lines(user_home, store, session: str, lines: list[str]) -> None:
    """Log lines as user messages of one Claude Code session and sync them."""

    log = ClaudeLog(user_home, session=session)
    for i, line in enumerate(lines):
        log.user(f"u{i}", line)
    log.write()
    origin.sync(store)


def _tidy_until(store, monkeypatch, done) -> None:
    """Run an idle, tidying index writer until done() holds (two minutes at most)."""
    monkeypatch.setattr(origin, "INDEX_TIDY_IDLE", 0.05)
    writers = origin.IndexWriters(store.home, tidy=True)
    try:
        deadline = origin.time.monotonic() + 120
        while not done() and origin.time.monotonic() < deadline:
            origin.time.sleep(0.05)
    finally:
        assert writers.close() == []


def test_an_idle_index_writer_merges_the_segments_and_searches_find_the_same(user_home, store, monkeypatch):
    _synced_lines(user_home, store, "sess-tidy",
                  [f"note {i}: the marmot colony {'grows' if i % 3 else 'sleeps'} near the ridge" for i in range(240)])
    # Build the message part again in many small commits, as a hub taking
    # pushes does: each commit is a segment of its own until FTS5 merges.
    part, fts = "message", origin.EVENT_INDEXES["message"][1]
    conn = origin._open_index(store.home, part)
    conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('delete-all')")
    conn.execute("UPDATE mark SET value = 0 WHERE name IN ('event', 'tombstone')")
    while origin.index_catch_up(conn, part, batch=2):
        pass
    conn.close()
    queries = ["marmot sleeps", "colony grows", "ridge", "note 17"]
    before = {q: [e["id"] for e in origin.search_events(store, q, limit=500)] for q in queries}
    many = _segments(store, part)
    assert many > 10 and len(before["marmot sleeps"]) == 80

    _tidy_until(store, monkeypatch, lambda: _segments(store, part) <= 4)
    assert _segments(store, part) <= 4 < many
    assert {q: [e["id"] for e in origin.search_events(store, q, limit=500)] for q in queries} == before
    assert index_rows(store) == expected_rows(store)
    conn = origin._open_index(store.home, part)
    try:
        assert origin.index_tidy_step(conn, part) is False  # nothing left to merge
    finally:
        conn.close()


def _entry_segments(store) -> int:
    return store.conn.execute("SELECT count(DISTINCT segid) FROM entry_fts_idx").fetchone()[0]


def test_an_idle_index_writer_merges_the_entry_index_into_one_segment(user_home, store, monkeypatch):
    _synced_lines(user_home, store, "sess-entry-tidy",
                  [f"decision {i}: the heron nests {'upstream' if i % 2 else 'downstream'} this year" for i in range(60)])
    # One entry per commit, as remembers reach a hub: a segment each, until
    # FTS5 merges.  Then a third of them forgotten: their postings are
    # deleted, which FTS5 records as more segments.
    made = [origin.remember(store, kind="memory", text=f"Heron note {i}: nests {'upstream' if i % 2 else 'downstream'}.",
                            sources=[{"quote": f"decision {i}: the heron"}], author="t@test")["id"] for i in range(60)]
    for eid in made[::3]:
        origin.forget(store, eid)
    queries = ["heron upstream", "nests downstream", "note 17"]
    before = {q: [e["id"] for e in origin.search_entries(store, q, limit=100)] for q in queries}
    many = _entry_segments(store)
    assert many > 4 and len(before["heron upstream"]) == 20

    _tidy_until(store, monkeypatch, lambda: _entry_segments(store) == 1)
    assert _entry_segments(store) == 1 < many
    assert {q: [e["id"] for e in origin.search_entries(store, q, limit=100)] for q in queries} == before
    assert origin.entry_index_tidy_step(store.conn) is False  # nothing left to merge
    # FTS5 raises if the merged index is not sound (rank 0: forgotten
    # entries stay in ``entry`` but not in its index, by design).
    store.conn.execute("INSERT INTO entry_fts (entry_fts, rank) VALUES ('integrity-check', 0)")


BM25_TEXTS = [
    "The Heron nests upstream; heron HERON heronry.",
    "heron watchers count the nests at dawn",
    "Nests, nests and more nests: no bird named here",
    "A heron and its nests by the weir, upstream of the mill, where the river bends twice",
    "aaaa heron aaaaa nests",  # overlapping instances: FTS5 counts "aaa" at each position
    "Été: le héron niche en amont. HÉRON nests",
    "upstream " * 40 + "heron nests",  # a long row: its length weighs against it
]


@pytest.mark.parametrize("terms", [["heron", "nests"], ["nests", "upstream"], ["heron", "nests", "upstream"],
                                   ["aaa", "heron"], ["héron", "nests"], ["river", "heron"]])
def test_ranking_in_python_gives_fts5s_own_bm25_scores_and_order(user_home, store, terms):
    _synced_lines(user_home, store, "sess-bm25", BM25_TEXTS)
    fts = origin.EVENT_INDEXES["message"][1]
    match = " AND ".join(origin.fts_phrase(t) for t in terms)
    want = store.reader.execute(f"SELECT rowid, bm25({fts}) FROM ix_message.{fts} WHERE {fts} MATCH ? "
                                f"ORDER BY bm25({fts}), rowid", (match,)).fetchall()
    hits = store.reader.execute(
        f"SELECT e.id, e.seq AS _seq, e.ts AS _ts, e.text AS _text, d.sz AS _sz FROM ix_message.{fts} JOIN event e "
        f"ON e.seq = {fts}.rowid JOIN ix_message.{fts}_docsize d ON d.id = e.seq WHERE {fts} MATCH ?", (match,)).fetchall()
    got = sorted(origin.bm25_rows(store.reader, "message", terms, hits), key=lambda r: (r["_score"], r["_seq"]))
    assert want, terms
    # Fewer than RARITY_PROBE rows hold each term here, so its document
    # frequency is exact and the scores are FTS5's to the last digits.
    assert [r["_seq"] for r in got] == [w[0] for w in want]
    assert [round(r["_score"], 9) for r in got] == [round(w[1], 9) for w in want]
    assert all("_text" not in r and "_sz" not in r for r in got)


def test_a_search_with_more_hits_than_ranked_here_is_ranked_by_fts5_the_same(user_home, store, monkeypatch):
    _synced_lines(user_home, store, "sess-bm25", BM25_TEXTS)
    queries = ["heron nests", "nests upstream", "heron nests upstream"]
    here = {q: [e["id"] for e in origin.search_events(store, q)] for q in queries}
    monkeypatch.setattr(origin, "OWN_RANK_MAX", 1)
    by_fts5 = {q: [e["id"] for e in origin.search_events(store, q)] for q in queries}
    assert here == by_fts5 and all(len(v) >= 3 for v in here.values())


def test_a_term_in_nearly_every_message_is_ranked_without_failing(user_home, store):
    # Its document frequency is estimated from its newest matches, which lie
    # closer together than the part's rows do on average (tool events share
    # the seqs): the estimate passes the part's row count and must not break
    # the logarithm.

    log = ClaudeLog(user_home, session="sess-dense")
    for i in range(250):
        log.user(f"u{i}", f"the heron nests, note {i}" + (" upstream" if i % 5 == 0 else ""))
        if i < 150:  # the older messages each with a tool result beside them, the newest alone
            log.tool_result(f"r{i}", f"tool output {i}")
    log.write()
    origin.sync(store)
    assert origin.part_frequency(store.reader, "message", "heron") > 250  # past the row count
    found = origin.search_events(store, "heron upstream", limit=100)
    assert len(found) == 50 and all("upstream" in e["snippet"] for e in found)
    assert len(origin.search_events(store, "heron nests", limit=100)) == 100


def test_a_search_of_a_sound_store_opens_no_index_writer(claude_root, origin_home, monkeypatch):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    # Each part of the index is checked on the reader itself; a writer
    # (BEGIN IMMEDIATE on a part) is opened only to put a part right.
    monkeypatch.setattr(origin, "_open_index", lambda *a: pytest.fail("a sound index was opened for writing"))
    with origin.open_store(origin_home) as s:
        hits = origin.search_events(s, "Demo", limit=5)
        assert hits
        origin.readout(hits)


def test_a_damaged_index_part_is_still_reported_by_a_search(claude_root, origin_home):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    (origin_home / origin.INDEX_DIR / origin.EVENT_INDEXES["tool"][0]).write_bytes(b"not a database" * 512)
    with origin.open_store(origin_home) as s, pytest.raises(origin.StoreError, match="delete"):
        origin.search_events(s, "Demo", limit=5)


def test_index_uris_escape_what_sqlite_would_read_as_uri_syntax(tmp_path):
    home = tmp_path / "a dir?#%&=x"
    with origin.open_store(home) as s:
        assert s.reader.execute("SELECT count(*) FROM ix_message.mark").fetchone()[0] >= 1
    assert origin._uri("/x y/a?b#c%d", mode="ro") == "file:/x%20y/a%3Fb%23c%25d?mode=ro"


def test_equal_structs_hash_alike_so_a_set_keeps_one():
    a = origin.Concept("cache", ("cache", "caches"), weight=0.5)
    b = origin.Concept("cache", ("cache", "caches"), weight=0.5)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != origin.Concept("cache", ("cache",), weight=0.5)
