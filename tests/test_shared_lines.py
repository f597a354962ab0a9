"""A raw line shared by a forgotten event and a visible neighbour (issue 12, item 2).

One line of an agent's log can give several events: a Claude Code text block
and its ``tool_use`` (``X`` and ``X#1``), a Grok chat record with assistant
text and ``tool_calls``, a Cursor bubble holding a tool call and its result.
After one of them is forgotten, no read-out of the other may show the line
whole: ``origin show``, ``get``/``sources`` (core, CLI and a real MCP client)
give the neighbour's own text and say why the line is withheld.
"""

from __future__ import annotations

import json

import pytest

import origin
from conftest import read_line
from helpers import LAYOUTS, ok, run_client

#: Per adapter: the kinds of the two events that share one line in its fixtures.
PAIRS = {
    "claude-code": ("message", "tool_call"),
    "grok": ("message", "tool_call"),
    "cursor": ("tool_call", "tool_result"),
}


def _leaks(blob: str, forgotten: str) -> bool:
    """True when blob holds the start of a forgotten text, as written or JSON-escaped."""
    return forgotten[:40] in blob or json.dumps(forgotten, ensure_ascii=False)[1:-1][:40] in blob


def shared_pair(store, home, source: str) -> tuple[dict, dict]:
    """Return (to forget, neighbour): two events of one mirror line, the first's text in the line."""
    kinds = PAIRS[source]
    rows = store.conn.execute(
        "SELECT a.id AS a, a.text AS a_text, b.id AS b, b.text AS b_text, r.mirror, a.line FROM event a "
        "JOIN event b ON b.raw_file_id = a.raw_file_id AND b.line = a.line AND b.id <> a.id "
        "JOIN raw_file r ON r.id = a.raw_file_id WHERE a.source = ? AND a.kind IN (?, ?) AND b.kind IN (?, ?) "
        "AND a.kind <> b.kind AND length(a.text) >= 12 ORDER BY a.seq", (source, *kinds, *kinds)).fetchall()
    for r in rows:
        line = read_line(home / r["mirror"], r["line"]).decode()
        if _leaks(line, r["a_text"]) and not _leaks(r["b_text"], r["a_text"]):
            return dict(r, raw=line), {"id": r["b"], "text": r["b_text"]}
    raise AssertionError(f"no {source} line with a {kinds[0]} and a {kinds[1]} in the fixtures")


@pytest.fixture
def shared(user_home, origin_home, monkeypatch):
    """Lay out the three agents' fixtures, sync, forget one event of a shared line each."""
    for name in PAIRS:
        for k, v in (LAYOUTS[name](user_home) or {}).items():
            monkeypatch.setenv(k, v)
    out = {}
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        for name in PAIRS:
            gone, neighbour = shared_pair(s, origin_home, name)
            # Without the fix the neighbour's read-out is this line, whole.
            assert origin.raw_sources(s, neighbour["id"])[0]["raw"] == gone["raw"]
            origin.forget(s, gone["a"], reason="shared line test")
            out[name] = (gone, neighbour)
    return out


@pytest.mark.parametrize("source", sorted(PAIRS))
def test_invariant_2_a_neighbour_never_shows_the_line_it_shares_with_a_forgotten_event(shared, origin_home,
                                                                                      source):
    gone, neighbour = shared[source]
    with origin.open_store(origin_home) as s:
        ev = origin.get_event(s, neighbour["id"])
        assert ev["text"] == neighbour["text"]
        assert ev["provenance"]["raw_withheld"] == origin.WITHHELD_NOTE
        (src,) = origin.raw_sources(s, neighbour["id"])
        assert src["raw"] is None and src["text"] == neighbour["text"]
        assert "forgotten" in src["withheld"]
        assert not _leaks(json.dumps(src, ensure_ascii=False), gone["a_text"])
        with pytest.raises(origin.Forgotten):
            origin.raw_sources(s, gone["a"])


@pytest.mark.parametrize("source", sorted(PAIRS))
def test_origin_show_of_a_neighbour_prints_its_own_text_and_says_the_line_is_withheld(shared, cli, source):
    gone, neighbour = shared[source]
    code, out = cli("show", neighbour["id"])
    assert code == 0
    assert "original line withheld: it also holds forgotten text" in out
    assert neighbour["text"][:60] in out
    assert not _leaks(out, gone["a_text"])
    code, shown = cli("show", neighbour["id"], "--json")
    assert code == 0 and shown["sources"][0]["raw"] is None
    assert not _leaks(json.dumps(shown, ensure_ascii=False), gone["a_text"])


def test_an_entry_citing_a_neighbour_shows_its_source_withheld_too(shared, origin_home):
    gone, neighbour = shared["claude-code"]
    with origin.open_store(origin_home) as s:
        ent = origin.remember(s, kind="memory", text="A subagent was spawned for the file search.",
                              sources=[{"event": neighbour["id"]}], author="user")
        (src,) = origin.raw_sources(s, ent["id"])
        assert src["raw"] is None and src["text"] == neighbour["text"] and src["withheld"]


def test_a_line_with_no_forgotten_event_is_still_shown_whole(shared, origin_home):
    with origin.open_store(origin_home) as s:
        row = s.conn.execute(
            "SELECT e.id, e.line, r.mirror FROM event e JOIN raw_file r ON r.id = e.raw_file_id "
            "WHERE e.source = 'claude-code' AND NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id) "
            "AND NOT EXISTS (SELECT 1 FROM event o JOIN excluded_event x ON x.event_id = o.id "
            "WHERE o.raw_file_id = e.raw_file_id AND o.line = e.line) LIMIT 1").fetchone()
        (src,) = origin.raw_sources(s, row["id"])
        assert src["raw"] == read_line(origin_home / row["mirror"], row["line"]).decode()
        assert "withheld" not in src and "raw_withheld" not in origin.get_event(s, row["id"])["provenance"]


def test_mcp_get_and_sources_of_neighbours_withhold_the_shared_lines(shared):
    async def body(c):
        out = {}
        for name, (_gone, neighbour) in shared.items():
            out[name] = (ok(await c.call_tool("get", {"ids": [neighbour["id"]]})),
                         ok(await c.call_tool("sources", {"id": neighbour["id"], "max_chars": 20_000})))
        return out

    for name, (got, sources) in run_client("auto", body).items():
        gone, neighbour = shared[name]
        event = got["items"][0]["event"]
        assert event["text"] == neighbour["text"] and event["provenance"]["raw_withheld"]
        (src,) = sources["sources"]
        assert "raw" not in src or src["raw"] is None
        assert src["text"] == neighbour["text"] and "forgotten" in src["withheld"]
        assert not _leaks(json.dumps(got) + json.dumps(sources), gone["a_text"]), name
