"""Sticky forget (Invariant 2): tombstones, the cascade, exclusion, re-sync.

Forget hides: rows stay in their append-only tables and the raw mirror stays
on disk, but no query, read or later sync may show a forgotten entry or an
excluded event again.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import origin
from conftest import expected_rows, index_rows, read_line
from helpers import ClaudeLog, counts, ids

# ---------------------------------------------------------------------------
# A conversation with entries that share sources
# ---------------------------------------------------------------------------

CANARY = "quokkastore"


def index_hits(store, word: str) -> list[int]:
    """Return the event seqs any part of the event index holds for word."""
    return sorted(r[0] for part, (_f, fts, _k) in origin.EVENT_INDEXES.items()
                  for r in store.reader.execute(f"SELECT rowid FROM ix_{part}.{fts} WHERE {fts} MATCH ?", (f'"{word}"',)))


def check_index(store) -> None:
    """The index passes FTS5's integrity check and holds exactly the visible indexed events."""
    assert index_rows(store) == expected_rows(store)


@pytest.fixture
def plan(user_home, store):
    """Two sessions and five entries:

    E1 -> E2 (a correction adding a source) cite `decide` and `when`;
    G cites only `decide`; H cites `decide` and `other`; K cites only `other`.
    """
    log = ClaudeLog(user_home, session="sess-plan")
    ev = SimpleNamespace(
        first=log.user("u-first", "Plan the storage work for the spring release, wombatplanning first."),
        decide=log.assistant("a-decide", f"Decision: the archive migrates to {CANARY} because it is append-only."),
        ok=log.user("u-ok", "Fine. When?"),
        when=log.assistant("a-when", "The cutover is on Friday, after the freeze."),
        call=log.tool_call("c-note", "Bash", {"command": "ls docs"}),
        result=log.tool_result("r-note", "adr-007.md  adr-008.md"),
        other=log.assistant("a-other", "The raw mirror stays append-only on disk."),
    )
    ev.log = log
    ev.path = log.write()
    side = ClaudeLog(user_home, session="sess-side", cwd="/home/dev/src/side")
    ev.side = side.user("u-side", "Unrelated: bump the linter version.")
    side.assistant("a-side", "Bumped the linter.")
    ev.side_path = side.write()
    origin.sync(store)

    def rem(text, *sources, kind="memory"):
        return origin.remember(store, kind=kind, text=text, author="claude-code",
                               sources=[{"event": s} for s in sources])["id"]

    ev.E1 = rem(f"The archive moves to {CANARY}.", ev.decide)
    ev.E2 = origin.correct(store, ev.E1, text=f"The archive moves to {CANARY} on Friday.", author="user",
                           sources=[{"event": ev.when}])["id"]
    ev.G = rem("Append-only storage motivated the grebeswitch.", ev.decide, kind="knowledge")
    ev.H = rem("The person values append-only designs (heronnote).", ev.decide, ev.other, kind="cognition")
    ev.K = rem("Mirrors are never rewritten (kestrelfact).", ev.other, kind="knowledge")
    return ev


def shown(entry: dict) -> list[str]:
    """The sources an entry still shows (a forgotten one is only named, state "forgotten")."""
    return [s["event"] for s in entry["sources"] if s.get("state", "visible") == "visible"]


def session_of(store, sid: str) -> dict:
    return [s for s in origin.timeline(store, since=0)["sessions"] if s["session"] == sid][0]


def visible_entry_ids(store) -> set[str]:
    return set(ids(origin.list_entries(store, history=True, limit=200)))


def assert_gone(store, entries=(), events=(), words=()):
    """No forgotten entry or excluded event, nor their words, shows up anywhere."""
    for eid in entries:
        for call in (origin.get_item, origin.get_entry, origin.raw_sources):
            with pytest.raises(origin.Forgotten):
                call(store, eid)
        assert origin.entry_status(store.conn, eid) == "forgotten"
    for evid in events:
        for call in (origin.get_item, origin.get_event, origin.raw_sources):
            with pytest.raises(origin.Forgotten):
                call(store, evid)
    listed = visible_entry_ids(store) | set(ids(origin.list_entries(store, limit=200)))
    listed |= set(ids(origin.search(store, history=True, limit=200)["entries"]))
    assert not listed & set(entries)
    for w in words:
        res = origin.search(store, w, include_tools=True, history=True, limit=200)
        # Only the query itself may come back, as what was understood of it.
        assert {**res, "understood": None} == {"entries": [], "events": [], "understood": None}, w
    for s in origin.timeline(store, since=0, limit=200)["sessions"]:
        tl = origin.timeline(store, session=s["session"], include_tools=True)
        assert not set(ids(tl["events"])) & set(events)
        assert s["events"] == len(tl["events"])
        for w in words:
            assert w not in json.dumps(tl, ensure_ascii=False), w
    for e in origin.list_entries(store, history=True, limit=200):
        full = origin.get_entry(store, e["id"])
        # A forgotten source may still be named (state "forgotten"), never shown.
        assert not {s["event"] for s in full["sources"] if s.get("state", "visible") == "visible"} & set(events)
        assert all(s["state"] == "forgotten" and "quote" not in s for s in full["sources"] if s["event"] in events)
        assert not {s["event"] for s in origin.raw_sources(store, e["id"]) if s.get("raw") or s.get("text")} \
            & set(events)
        for w in words:
            assert w not in json.dumps([full, origin.raw_sources(store, e["id"])], ensure_ascii=False), w


# ---------------------------------------------------------------------------
# Invariant 2: forgetting an entry, forgetting an event
# ---------------------------------------------------------------------------


def test_invariant_2_forgotten_entry_and_its_cascade_vanish_everywhere(store, plan, run):
    sess = session_of(store, "sess-plan")
    status = origin.status(store)
    res = origin.forget(store, plan.E2, reason="wrong plan")
    assert res["kind"] == "entry" and res["target"] == plan.E2
    # All versions, plus G (its only source is now excluded); H keeps `other`.
    assert set(res["forgotten_entries"]) == {plan.E1, plan.E2, plan.G}
    assert set(res["excluded_events"]) == {plan.decide, plan.when}
    assert_gone(store, entries=[plan.E1, plan.E2, plan.G], events=[plan.decide, plan.when],
                words=[CANARY, "grebeswitch", "cutover is on Friday"])
    assert visible_entry_ids(store) == {plan.H, plan.K}
    h = origin.get_entry(store, plan.H)
    assert h["status"] == "active" and shown(h) == [plan.other]
    after = session_of(store, "sess-plan")
    assert (after["events"], after["messages"]) == (sess["events"] - 2, sess["messages"] - 2)
    st2 = origin.status(store)
    assert st2["events"] == status["events"] - 2
    assert st2["entries"] == status["entries"] - 2 and st2["tombstones"] == status["tombstones"] + 1
    for argv in (["show", plan.E2], ["show", plan.E1], ["show", plan.G], ["show", plan.decide]):
        code, _, err = run(*argv)
        assert code == origin.Forgotten.exit_code and "forgotten" in err
    code, out, _ = run("entries", "--history", "--json")
    assert set(ids(json.loads(out)["entries"])) == {plan.H, plan.K}
    code, out, _ = run("search", CANARY, "--all", "--history", "--json")
    assert code == 0 and json.loads(out) == {"entries": [], "events": []}
    code, out, _ = run("timeline", "--session", "sess-plan", "--all", "--json")
    assert code == 0 and CANARY not in out and plan.decide not in out


def test_invariant_2_forgotten_event_and_its_cascade_vanish_everywhere(store, plan, run):
    sess = session_of(store, "sess-plan")
    res = origin.forget(store, plan.decide)
    assert res["kind"] == "event" and res["excluded_events"] == [plan.decide]
    # Every entry citing the event, with all versions; their other events stay.
    assert set(res["forgotten_entries"]) == {plan.E1, plan.E2, plan.G, plan.H}
    assert_gone(store, entries=[plan.E1, plan.E2, plan.G, plan.H], events=[plan.decide],
                words=[CANARY, "grebeswitch", "heronnote"])
    assert visible_entry_ids(store) == {plan.K}
    for still in (plan.when, plan.other):
        assert origin.get_event(store, still)["id"] == still
    assert [e["id"] for e in origin.search(store, "cutover is on Friday")["events"]] == [plan.when]
    assert shown(origin.get_entry(store, plan.K)) == [plan.other]
    after = session_of(store, "sess-plan")
    assert (after["events"], after["messages"]) == (sess["events"] - 1, sess["messages"] - 1)
    before = counts(store)
    for argv in (["show", plan.decide], ["show", plan.H], ["correct", plan.H, "Revived text."],
                 ["remember", "Cite it again.", "--kind", "memory", "--event", plan.decide],
                 ["remember", "Cite it again.", "--kind", "memory", "--event", plan.decide, "--quote", CANARY],
                 ["forget", plan.decide, "--yes"], ["forget", plan.H, "--yes"]):
        code, _, err = run(*argv)
        assert code == origin.Forgotten.exit_code and "forgotten" in err, argv
    assert counts(store) == before


def test_invariant_2_forgotten_tool_result_vanishes_from_tool_searches(store, plan):
    assert [e["id"] for e in origin.search(store, "adr-008", include_tools=True)["events"]] == [plan.result]
    origin.forget(store, plan.result)
    assert_gone(store, events=[plan.result], words=["adr-008"])


def test_invariant_2_forgotten_first_prompt_does_not_live_on_as_session_title(store, plan, user_home):
    assert "wombatplanning" in session_of(store, "sess-plan")["title"]
    origin.forget(store, plan.first)
    assert_gone(store, events=[plan.first], words=["wombatplanning"])
    assert "wombatplanning" not in json.dumps(origin.timeline(store, since=0))
    assert "wombatplanning" not in json.dumps(origin.get_event(store, plan.ok))
    # Nor after the source is rewritten and parsed again.
    plan.log.write(compact=True)
    origin.sync(store)
    assert "wombatplanning" not in json.dumps(origin.timeline(store, since=0))


RESYNCS = ["unchanged", "rewritten", "copied to a new file", "appended to", "all of these"]


def _resync(store, plan, user_home, how: str) -> None:
    if how in ("unchanged", "all of these"):
        assert origin.sync(store).events_added == 0
    if how in ("rewritten", "all of these"):
        # The same lines, serialised differently: the source shrinks, a new generation opens.
        plan.log.write(compact=True)
        report = origin.sync(store)
        assert report.events_added == 0
        gens = [r[0] for r in store.conn.execute("SELECT generation FROM raw_file WHERE path = ? ORDER BY generation",
                                                 (str(plan.path),))]
        assert gens[-1] >= 1
    if how in ("copied to a new file", "all of these"):
        dest = user_home / ".claude" / "projects" / "-home-dev-src-atlas-copy" / "sess-plan-copy.jsonl"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(plan.path, dest)
        files = store.conn.execute("SELECT count(*) FROM raw_file").fetchone()[0]
        assert origin.sync(store).events_added == 0
        assert store.conn.execute("SELECT count(*) FROM raw_file").fetchone()[0] == files + 1
    if how in ("appended to", "all of these"):
        plan.log.user("u-later", "Later: any news on the storage plan?")
        with open(plan.path, "a", encoding="utf-8") as fh:
            fh.write(plan.log.lines()[-1] + "\n")
            fh.write(plan.log.lines()[1] + "\n")  # the forgotten line, written again
        origin.sync(store)


@pytest.mark.parametrize("how", RESYNCS)
@pytest.mark.parametrize("target", ["entry", "event"])
def test_invariant_2_resync_brings_nothing_back(store, plan, user_home, target, how):
    if target == "entry":
        origin.forget(store, plan.E2)
        entries, events = [plan.E1, plan.E2, plan.G], [plan.decide, plan.when]
    else:
        origin.forget(store, plan.decide)
        entries, events = [plan.E1, plan.E2, plan.G, plan.H], [plan.decide]
    visible = visible_entry_ids(store)
    sess = session_of(store, "sess-plan")
    n_events = store.conn.execute("SELECT count(*) FROM event").fetchone()[0]
    _resync(store, plan, user_home, how)
    assert_gone(store, entries=entries, events=events, words=[CANARY, "grebeswitch"])
    assert visible_entry_ids(store) == visible
    later = 1 if how in ("appended to", "all of these") else 0
    assert store.conn.execute("SELECT count(*) FROM event").fetchone()[0] == n_events + later
    assert session_of(store, "sess-plan")["events"] == sess["events"] + later
    for evid in events:
        with pytest.raises(origin.Forgotten):
            origin.remember(store, kind="memory", text="Cite it again.", author="x", sources=[{"event": evid}])


def test_sync_report_counts_only_new_events_when_a_forgotten_line_is_written_again(store, plan):
    origin.forget(store, plan.decide)
    n = store.conn.execute("SELECT count(*) FROM event").fetchone()[0]
    plan.log.user("u-later", "Later: any news on the storage plan?")
    with open(plan.path, "a", encoding="utf-8") as fh:
        fh.write(plan.log.lines()[-1] + "\n")
        fh.write(plan.log.lines()[1] + "\n")  # the forgotten line, written again
    report = origin.sync(store)
    assert store.conn.execute("SELECT count(*) FROM event").fetchone()[0] == n + 1
    assert report.events_added == 1
    assert_gone(store, events=[plan.decide], words=[CANARY])


def test_invariant_2_forget_hides_but_the_raw_mirror_stays_on_disk(store, plan, origin_home):
    row = store.conn.execute("SELECT e.line, r.mirror FROM event e JOIN raw_file r ON r.id = e.raw_file_id "
                             "WHERE e.id = ?", (plan.decide,)).fetchone()
    mirror = origin_home / row["mirror"]
    before = mirror.read_bytes()
    origin.forget(store, plan.decide)
    assert mirror.read_bytes() == before
    assert CANARY.encode() in read_line(mirror, row["line"])
    with pytest.raises(origin.Forgotten):
        origin.raw_sources(store, plan.decide)


# ---------------------------------------------------------------------------
# Excluded events can never be cited again
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sources, error", [
    ([{"event": "claude-code:a-decide"}], origin.Forgotten),
    ([{"event": "claude-code:a-decide", "quote": "migrates to"}], origin.Forgotten),
    ([{"quote": f"the archive migrates to {CANARY}"}], origin.NotFound),
    ([{"event": "claude-code:a-other"}, {"event": "claude-code:a-decide"}], origin.Forgotten),
], ids=["by id", "by id and quote", "by quote", "beside a good source"])
def test_remember_citing_an_excluded_event_is_refused_and_writes_nothing(store, plan, sources, error):
    origin.forget(store, plan.decide)
    before = counts(store)
    with pytest.raises(error):
        origin.remember(store, kind="memory", text="Cite the forgotten line.", author="x", sources=sources)
    assert counts(store) == before


def test_quote_only_skips_an_excluded_message_and_cites_the_newest_visible_one(user_home, store):
    log = ClaudeLog(user_home)
    older = log.user("u-older", "Policy: tokens rotate every ninety days.")
    newer = log.assistant("a-newer", "Yes — tokens rotate every ninety days, per policy.")
    log.write()
    origin.sync(store)
    origin.forget(store, newer)
    e = origin.remember(store, kind="knowledge", text="Tokens rotate every 90 days.", author="x",
                        sources=[{"quote": "tokens rotate every ninety days"}])
    assert [s["event"] for s in e["sources"]] == [older]


def test_correct_cannot_add_an_excluded_event_nor_correct_a_forgotten_entry(store, plan):
    origin.forget(store, plan.when)  # forgets E1 and E2
    before = counts(store)
    with pytest.raises(origin.Forgotten):
        origin.correct(store, plan.K, text="Mirrors are append-only.", author="user", sources=[{"event": plan.when}])
    with pytest.raises(origin.Forgotten):
        origin.correct(store, plan.E2, text="Revive it.", author="user")
    with pytest.raises(origin.Forgotten):
        origin.correct(store, plan.E1, text="Revive the old one.", author="user")
    assert counts(store) == before


def test_correct_after_a_source_was_excluded_inherits_only_visible_sources(store, plan):
    origin.forget(store, plan.G)  # excludes `decide`; H keeps `other`
    new = origin.correct(store, plan.H, text="The person values append-only designs, strongly.", author="user",
                         sources=[{"event": plan.ok}])
    assert [s["event"] for s in new["sources"]] == [plan.other, plan.ok]
    rows = store.conn.execute("SELECT event_id FROM entry_source WHERE entry_id = ?", (new["id"],)).fetchall()
    assert {r[0] for r in rows} == {plan.other, plan.ok}


# ---------------------------------------------------------------------------
# The cascade rules
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1, 2])
def test_forgetting_any_version_forgets_every_version_and_excludes_all_their_events(store, plan, which):
    e3 = origin.correct(store, plan.E2, text=f"The archive moves to {CANARY} on Friday the 13th.", author="user",
                        sources=[{"event": plan.ok}])["id"]
    chain = [plan.E1, plan.E2, e3]
    assert origin.version_chain(store.conn, chain[which]) == chain
    res = origin.forget(store, chain[which])
    assert set(chain) <= set(res["forgotten_entries"])
    assert set(res["excluded_events"]) == {plan.decide, plan.when, plan.ok}
    assert_gone(store, entries=chain, events=[plan.decide, plan.when, plan.ok])


def test_forgetting_an_event_cited_only_by_a_correction_forgets_the_whole_history(store, plan):
    res = origin.forget(store, plan.when)  # cited by E2 only, not by E1
    assert set(res["forgotten_entries"]) == {plan.E1, plan.E2}
    assert res["excluded_events"] == [plan.when]
    assert_gone(store, entries=[plan.E1, plan.E2], events=[plan.when])
    # E1's and E2's other source stays visible: forgetting an event excludes nothing else.
    assert origin.get_event(store, plan.decide)["id"] == plan.decide
    assert visible_entry_ids(store) == {plan.G, plan.H, plan.K}


def test_entry_left_without_a_visible_source_is_forgotten_and_the_cascade_stops_there(store, plan):
    def rem(*sources):
        return origin.remember(store, kind="memory", text="A statement.", author="x",
                               sources=[{"event": s} for s in sources])["id"]

    a, b, c, d = rem(plan.ok), rem(plan.ok), rem(plan.ok, plan.first), rem(plan.first)
    before = visible_entry_ids(store)
    res = origin.forget(store, a)
    # `ok` is excluded: B has no visible source left and goes too; C keeps `first`.
    assert set(res["forgotten_entries"]) == {a, b}
    assert res["excluded_events"] == [plan.ok]  # B's forgetting excluded nothing more
    assert visible_entry_ids(store) == before - {a, b}
    assert shown(origin.get_entry(store, c)) == [plan.first]
    assert origin.entry_status(store.conn, c) == origin.entry_status(store.conn, d) == "active"
    assert origin.get_event(store, plan.first)["id"] == plan.first
    t = store.conn.execute("SELECT entries, events FROM tombstone WHERE id = ?", (res["tombstone"],)).fetchone()
    assert (t["entries"], t["events"]) == (2, 1)
    assert_gone(store, entries=[a, b], events=[plan.ok])


def test_forgetting_an_entry_leaves_other_entries_with_a_visible_source(store, plan):
    res = origin.forget(store, plan.K)  # excludes `other`; H still cites `decide`
    assert res["forgotten_entries"] == [plan.K]
    assert res["excluded_events"] == [plan.other]
    assert shown(origin.get_entry(store, plan.H)) == [plan.decide]
    assert visible_entry_ids(store) == {plan.E1, plan.E2, plan.G, plan.H}


def test_superseded_version_without_visible_sources_does_not_forget_the_active_one(store, plan):
    v1 = origin.remember(store, kind="memory", text="Backups run nightly.", author="x",
                         sources=[{"event": plan.ok}])["id"]
    v2 = origin.correct(store, v1, text="Backups run nightly at 02:00.", author="user",
                        sources=[{"event": plan.other}])["id"]
    other = origin.remember(store, kind="memory", text="Someone asked when.", author="x",
                            sources=[{"event": plan.ok}])["id"]
    # Excluding `ok` leaves v1 (superseded) with no visible source, but the
    # active version v2 still cites `other`, so the entry stays.
    plan_ = origin.plan_forget(store, other)
    assert plan_["entries"] == [other]
    res = origin.forget(store, other)
    assert res["forgotten_entries"] == [other]
    assert origin.entry_status(store.conn, v2) == "active"
    assert origin.entry_status(store.conn, v1) == "superseded"
    assert shown(origin.get_entry(store, v2)) == [plan.other]


def test_plan_forget_matches_what_forget_does_and_writes_nothing(store, plan):
    for target in (plan.E2, plan.other, plan.ok):
        before = counts(store)
        p = origin.plan_forget(store, target)
        assert counts(store) == before
        res = origin.forget(store, target)
        assert (res["forgotten_entries"], res["excluded_events"]) == (p["entries"], p["events"])


# ---------------------------------------------------------------------------
# Tombstones hold ids and counts only
# ---------------------------------------------------------------------------


def test_tombstone_records_target_reason_time_and_ids_never_the_text(store, plan):
    t0 = origin.now_ms()
    res = origin.forget(store, plan.E2, reason="superseded by the Q3 plan")
    t1 = origin.now_ms()
    assert CANARY not in json.dumps(res)
    forgotten, excluded = {plan.E1, plan.E2, plan.G}, {plan.decide, plan.when}
    t = store.conn.execute("SELECT * FROM tombstone WHERE id = ?", (res["tombstone"],)).fetchone()
    assert t["target"] == plan.E2 and t["reason"] == "superseded by the Q3 plan"
    assert t0 <= t["created_at"] <= t1
    assert (t["entries"], t["events"]) == (3, 2)
    fe = store.conn.execute("SELECT * FROM forgotten_entry WHERE tombstone_id = ?", (res["tombstone"],)).fetchall()
    xe = store.conn.execute("SELECT * FROM excluded_event WHERE tombstone_id = ?", (res["tombstone"],)).fetchall()
    assert {r["entry_id"] for r in fe} == forgotten
    assert {r["event_id"] for r in xe} == excluded
    allowed = forgotten | excluded | {plan.E2, "superseded by the Q3 plan", None, res["uid"], "entry"}
    fps = store.conn.execute("SELECT key_id, fp FROM tombstone_fingerprint").fetchall()
    assert fps, "the forgotten texts are fingerprinted"
    allowed |= {v for row in fps for v in row}
    assert all(re.fullmatch(r"[0-9a-f]{32}", r["fp"]) for r in fps)
    for table in ("tombstone", "forgotten_entry", "excluded_event", "tombstone_fingerprint"):
        for row in store.conn.execute(f"SELECT * FROM {table}"):
            for value in tuple(row):
                assert isinstance(value, int) or value in allowed, (table, value)
    # The tombstone log beside the database holds the same ids, never text.
    log = (store.home / origin.TOMBSTONE_LOG).read_text()
    assert res["uid"] in log and plan.decide in log
    for word in (CANARY, "grebeswitch", "cutover", "archive moves"):
        assert word not in log
    # The text left the full-text indexes at once.
    for word in (CANARY, "grebeswitch", "cutover"):
        hits = store.conn.execute("SELECT rowid FROM entry_fts WHERE entry_fts MATCH ?", (f'"{word}"',)).fetchall()
        assert hits == [], ("entry_fts", word)
        assert index_hits(store, word) == [], word
    # Superseded versions and cascaded entries too, not only the target.
    assert store.conn.execute("SELECT count(*) FROM entry_fts WHERE entry_fts MATCH '\"heronnote\"'").fetchone()[0] == 1


def test_tombstones_are_append_only(store, plan):
    res = origin.forget(store, plan.K)
    for sql in ("DELETE FROM tombstone", "DELETE FROM forgotten_entry", "DELETE FROM excluded_event",
                "UPDATE tombstone SET target = 'x'", "UPDATE excluded_event SET event_id = 'x'"):
        with pytest.raises(Exception, match="append-only"):
            store.conn.execute(sql)
    assert origin.entry_status(store.conn, plan.K) == "forgotten"
    assert store.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 1 == res["tombstone"]


# ---------------------------------------------------------------------------
# Bad requests to forget
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("target, reason, error", [
    ("ent_0000000000000000000000", None, origin.NotFound),
    ("claude-code:no-such-line", None, origin.NotFound),
    ("", None, origin.UsageError),
    ("   ", None, origin.UsageError),
    (None, None, origin.UsageError),
    (12, None, origin.UsageError),
    ("claude-code:a-other", 5, origin.UsageError),
], ids=["unknown entry", "unknown event", "empty", "blank", "None", "int", "reason int"])
def test_forget_bad_request_is_refused_and_writes_nothing(store, plan, target, reason, error):
    before = counts(store)
    with pytest.raises(error) as info:
        origin.forget(store, target, reason=reason)
    assert str(info.value)
    assert counts(store) == before


def test_forgetting_twice_is_refused_and_writes_nothing(store, plan):
    origin.forget(store, plan.E1)
    before = counts(store)
    for target in (plan.E1, plan.E2, plan.G, plan.decide, plan.when):
        with pytest.raises(origin.Forgotten):
            origin.forget(store, target)
    assert counts(store) == before


# ---------------------------------------------------------------------------
# CLI: preview, --yes, errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["E2", "decide"])
def test_cli_forget_previews_exactly_and_does_nothing_without_yes(store, plan, cli, run, target):
    target = getattr(plan, target)
    before = counts(store)
    code, preview = cli("forget", target, "--json")
    assert code != 0
    assert preview["done"] is False and preview["target"] == target
    assert counts(store) == before
    code, text, _ = run("forget", target)
    assert code != 0 and "--yes" in text
    assert counts(store) == before
    plan_ = origin.plan_forget(store, target)
    assert [e["id"] for e in preview["would_forget_entries"]] == plan_["entries"]
    assert [e["id"] for e in preview["would_exclude_events"]] == plan_["events"]
    for i in plan_["entries"] + plan_["events"]:
        assert i in text
    code, done = cli("forget", target, "--reason", "not true any more", "--yes", "--json")
    assert code == 0 and done["done"] is True
    assert done["forgotten_entries"] == plan_["entries"] and done["excluded_events"] == plan_["events"]
    assert CANARY not in json.dumps(done)
    assert_gone(store, entries=plan_["entries"], events=plan_["events"], words=[CANARY])
    code, _, err = run("forget", target, "--yes")
    assert code == origin.Forgotten.exit_code and "forgotten" in err


@pytest.mark.parametrize("argv, exit_code", [
    (["forget", "ent_0000000000000000000000", "--yes"], origin.NotFound.exit_code),
    (["forget", "claude-code:no-such-line", "--yes"], origin.NotFound.exit_code),
    (["forget", "ent_0000000000000000000000"], origin.NotFound.exit_code),
    (["forget", "", "--yes"], origin.UsageError.exit_code),
    (["forget", "--yes"], 2),
])
def test_cli_forget_unknown_or_missing_ids_fail_clearly(store, plan, run, argv, exit_code):
    before = counts(store)
    code, _, err = run(*argv)
    assert code == exit_code != 0 and err.strip()
    assert counts(store) == before


# ---------------------------------------------------------------------------
# Scenario on real Claude Code logs
# ---------------------------------------------------------------------------

FIXTURE_SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"


def test_scenario_decision_remembered_corrected_shown_and_forgotten_on_real_logs(claude_root, store, cli, run,
                                                                                   origin_home):
    origin.sync(store)
    sess = session_of(store, FIXTURE_SESSION)
    # The decision to document Next.js 15.5.2 was stated in a reply message;
    # the same text also came back as a (newer) tool result, which must not be cited.
    code, first = cli("remember", "Demo's CLAUDE.md must document Next.js 15.5.2 (not v14); tapirdecision.",
                      "--kind", "memory", "--quote", "Next.js: 15.5.2 (upgraded from documented v14)", "--json")
    assert code == 0
    decided = first["sources"][0]["event"]
    assert origin.get_event(store, decided)["kind"] == "message"
    assert first["project"] == "Demo"
    code, second = cli("correct", first["id"], "Demo's CLAUDE.md was updated to Next.js 15.5.2 and React 19.1.0; "
                       "tapirdecision.", "--quote", "Next.js 15.5.2 (14から更新)", "--json")
    assert code == 0
    done = second["sources"][1]["event"]
    assert [s["event"] for s in second["sources"]] == [decided, done]
    # Search finds only the new version.
    code, found = cli("search", "tapirdecision", "--json")
    assert ids(found["entries"]) == [second["id"]]
    code, found = cli("search", "15.5.2", "--scope", "entries", "--json")
    assert ids(found["entries"]) == [second["id"]]
    # Show expands each source to its original log line.
    code, shown = cli("show", second["id"], "--json")
    assert code == 0 and [h["id"] for h in shown["entry"]["history"]] == [first["id"], second["id"]]
    for src in shown["sources"]:
        original = read_line(Path(src["file"]), src["line"])
        assert src["raw"].encode() == original
        assert read_line(origin_home / src["mirror"], src["line"]) == original
        assert Path(src["file"]).name == f"{FIXTURE_SESSION}.jsonl"
        assert json.loads(original)["uuid"] == src["event"].split(":", 1)[1]
    # Forget removes it everywhere.
    code, preview = cli("forget", second["id"], "--json")
    assert code != 0 and {e["id"] for e in preview["would_forget_entries"]} == {first["id"], second["id"]}
    code, res = cli("forget", second["id"], "--yes", "--json")
    assert code == 0 and set(res["excluded_events"]) == {decided, done}
    assert_gone(store, entries=[first["id"], second["id"]], events=[decided, done], words=["tapirdecision"])
    code, found = cli("search", "15.5.2", "--history", "--json")
    assert found["entries"] == [] and not {decided, done} & set(ids(found["events"]))
    after = session_of(store, FIXTURE_SESSION)
    assert (after["events"], after["messages"]) == (sess["events"] - 2, sess["messages"] - 2)
    code, _, _ = run("show", second["id"])
    assert code == origin.Forgotten.exit_code
    # A later sync of the same fixtures brings nothing back.
    assert origin.sync(store).events_added == 0
    assert_gone(store, entries=[first["id"], second["id"]], events=[decided, done], words=["tapirdecision"])


# ---------------------------------------------------------------------------
# State machine: no forgotten entry or excluded event is ever visible again
# ---------------------------------------------------------------------------


class StickyForget(RuleBasedStateMachine):
    """Remember, correct, forget and ingest anything at random against a model of the rules.

    The model: a forgotten entry and an excluded event never show again, on
    any read route, whatever ingest does next — the same lines appended
    under new ids, copies in new files and projects, rewrites that drop or
    insert records, a deleted index, a deleted ``origin.db`` rebuilt from
    the agents' logs and the tombstone log, an old backup restored over the
    store — and nothing else is hidden.  A
    new copy of an excluded text is excluded on arrival when the forget
    fingerprinted it: when no visible copy of that text was left behind.
    """

    SESSIONS = ("sess-a", "sess-b")

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="sticky-"))
        self.home = self.tmp / "home"
        self.env = {"HOME": str(self.home)}
        self.store = origin.open_store(self.tmp / "origin")
        self.logs = {s: ClaudeLog(self.home, session=s, cwd=f"/home/dev/src/{s}") for s in self.SESSIONS}
        self.n = 0
        self.events: dict[str, dict] = {}  # id -> {"session", "kind", "word"}; copies share kind and word
        self.chains: list[list[str]] = []  # every entry's versions, oldest first
        self.sources: dict[str, set[str]] = {}  # entry id -> cited event ids
        self.words: dict[str, str] = {}  # entry id -> a word only it holds
        self.forgotten: set[str] = set()
        self.excluded: set[str] = set()
        self.fingerprinted: set[tuple] = set()  # (kind, word) of texts a forget fingerprinted
        self.copies = 0
        self.ops: list[tuple] = []  # every forget: (kind, events excluded, entries forgotten)
        self.backup: dict | None = None  # the model as the last backup copied it
        for s in self.SESSIONS:
            for kind in ("message", "message", "tool_call", "tool_result", "message"):
                self._add_event(s, kind)
        self._sync()

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model of the rules ---------------------------------------------

    def _word(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n:04d}q"

    def _write_event(self, log: ClaudeLog, uid: str, kind: str, w: str) -> str:
        if kind == "message":
            return (log.user if self.n % 2 else log.assistant)(uid, f"Line {w} of the conversation.")
        if kind == "tool_call":
            return log.tool_call(uid, "Bash", {"command": f"echo {w}"})
        return log.tool_result(uid, f"output {w} done")

    def _arrive(self, evid: str, session: str, kind: str, w: str) -> None:
        """Model a new event: excluded on arrival when its text was fingerprinted."""
        self.events[evid] = {"session": session, "kind": kind, "word": w}
        if (kind, w) in self.fingerprinted:
            self.excluded.add(evid)

    def _add_event(self, session: str, kind: str, word: str | None = None) -> str:
        log = self.logs[session]
        w = word or self._word("w")
        self.n += 0 if word is None else 1
        uid = f"{session}-{self.n}"
        log.compact = getattr(log, "compact", False)
        evid = self._write_event(log, uid, kind, w)
        self._arrive(evid, session, kind, w)
        log.write(compact=log.compact)
        return evid

    def _sync(self):
        origin.sync(self.store, env=self.env, home=self.home, sources=["claude-code"])

    def _chain_of(self, eid: str) -> list[str]:
        return next(c for c in self.chains if eid in c)

    def _status(self, eid: str) -> str:
        if eid in self.forgotten:
            return "forgotten"
        return "active" if self._chain_of(eid)[-1] == eid else "superseded"

    def _forget_chain(self, chain: list[str]) -> None:
        self.forgotten.update(chain)

    def _provenance_cascade(self) -> None:
        # An active entry left with no visible source is forgotten (all versions).
        for chain in self.chains:
            if chain[-1] not in self.forgotten and not self.sources[chain[-1]] - self.excluded:
                self._forget_chain(chain)

    def _exclude(self, planned: set[str]) -> None:
        """Exclude events; fingerprint each text no visible copy outside the plan keeps."""
        for evid in planned:
            key = (self.events[evid]["kind"], self.events[evid]["word"])
            kept = [e for e, ev in self.events.items() if (ev["kind"], ev["word"]) == key
                    and e not in planned and e not in self.excluded]
            if not kept:
                self.fingerprinted.add(key)
        self.excluded |= planned

    def _visible_with(self, word: str, kinds=("message", "tool_call", "tool_result")) -> set[str]:
        return {e for e, ev in self.events.items() if ev["word"] == word and ev["kind"] in kinds} - self.excluded

    # -- rules ---------------------------------------------------------------

    def _remember(self, data, how: str) -> None:
        evid = data.draw(st.sampled_from(sorted(self.events)), label="cite")
        word = self.events[evid]["word"]
        src = {"event": {"event": evid}, "quote": {"quote": word}, "both": {"event": evid, "quote": word}}[how]
        text = f"Entry {self._word('ent')}."
        before = counts(self.store)
        # A quote alone cites a visible message or tool result holding it (a copy will do).
        quotable = self._visible_with(word, ("message", "tool_result"))
        if (how != "quote" and evid in self.excluded) or (how == "quote" and not quotable):
            with pytest.raises((origin.Forgotten, origin.NotFound)):
                origin.remember(self.store, kind="memory", text=text, author="m", sources=[src])
            assert counts(self.store) == before
            return
        e = origin.remember(self.store, kind="memory", text=text, author="m", sources=[src])
        cited = [s["event"] for s in e["sources"]]
        assert cited == [evid] if how != "quote" else cited[0] in quotable and len(cited) == 1
        self.chains.append([e["id"]])
        self.sources[e["id"]] = set(cited)
        self.words[e["id"]] = text.split()[1].rstrip(".")

    def _correct(self, data, extra: str | None) -> None:
        eid = data.draw(st.sampled_from(sorted(self.sources)), label="entry")
        text = f"Corrected {self._word('ent')}."
        before = counts(self.store)
        kw = dict(text=text, author="user", sources=[{"event": extra}] if extra else None)
        status = self._status(eid)
        if status == "forgotten" or (status == "active" and extra in self.excluded):
            with pytest.raises(origin.Forgotten):
                origin.correct(self.store, eid, **kw)
            assert counts(self.store) == before
            return
        if status == "superseded":
            with pytest.raises(origin.Conflict):
                origin.correct(self.store, eid, **kw)
            assert counts(self.store) == before
            return
        new = origin.correct(self.store, eid, **kw)
        self._chain_of(eid).append(new["id"])
        self.sources[new["id"]] = (self.sources[eid] - self.excluded) | ({extra} if extra else set())
        self.words[new["id"]] = text.split()[1].rstrip(".")

    @rule(data=st.data())
    def remember_by_event(self, data):
        self._remember(data, "event")

    @rule(data=st.data())
    def remember_by_quote(self, data):
        self._remember(data, "quote")

    @rule(data=st.data())
    def remember_by_event_and_quote(self, data):
        self._remember(data, "both")

    @precondition(lambda self: self.chains)
    @rule(data=st.data())
    def correct(self, data):
        self._correct(data, None)

    @precondition(lambda self: self.chains)
    @rule(data=st.data())
    def correct_adding_a_source(self, data):
        self._correct(data, data.draw(st.sampled_from(sorted(self.events)), label="add"))

    @precondition(lambda self: self.chains)
    @rule(data=st.data())
    def forget_entry(self, data):
        eid = data.draw(st.sampled_from(sorted(self.sources)), label="entry")
        if eid in self.forgotten:
            with pytest.raises(origin.Forgotten):
                origin.forget(self.store, eid)
            return
        chain = self._chain_of(eid)
        cited = set().union(*(self.sources[v] for v in chain)) - self.excluded
        res = origin.forget(self.store, eid)
        before = set(self.forgotten)
        self._forget_chain(chain)
        self._exclude(cited)
        self._provenance_cascade()
        assert set(res["forgotten_entries"]) == self.forgotten - before
        assert set(res["excluded_events"]) == cited
        self.ops.append(("entry", set(cited), set(res["forgotten_entries"])))

    @rule(data=st.data(), same_text=st.booleans())
    def forget_event(self, data, same_text):
        evid = data.draw(st.sampled_from(sorted(self.events)), label="event")
        if evid in self.excluded:
            with pytest.raises(origin.Forgotten):
                origin.forget(self.store, evid)
            return
        ev = self.events[evid]
        copies = {e for e, x in self.events.items() if (x["kind"], x["word"]) == (ev["kind"], ev["word"])}
        planned = (copies - self.excluded) if same_text else {evid}
        res = origin.forget(self.store, evid, same_text=same_text)
        before = set(self.forgotten)
        self._exclude(planned)
        for chain in self.chains:
            if any(self.sources[v] & planned for v in chain) and chain[-1] not in self.forgotten:
                self._forget_chain(chain)
        self._provenance_cascade()
        assert set(res["excluded_events"]) == planned
        assert set(res["forgotten_entries"]) == self.forgotten - before
        self.ops.append(("event", set(planned), set(res["forgotten_entries"])))

    @rule(session=st.sampled_from(SESSIONS), kind=st.sampled_from(["message", "tool_result", "tool_call"]))
    def new_line(self, session, kind):
        self._add_event(session, kind)
        self._sync()

    @rule(data=st.data(), session=st.sampled_from(SESSIONS))
    def same_text_under_a_new_id(self, data, session):
        # The same text written again with a new id (an appended copy, a
        # re-keyed rewrite, a fork's copied history).
        evid = data.draw(st.sampled_from(sorted(self.events)), label="copy of")
        ev = self.events[evid]
        self._add_event(session, ev["kind"], word=ev["word"])
        self._sync()

    @rule(session=st.sampled_from(SESSIONS),
          how=st.sampled_from(["unchanged", "rewritten", "copied", "new project", "dropped and inserted"]))
    def resync(self, session, how):
        log = self.logs[session]
        added = set()
        if how == "rewritten":  # the same lines serialised differently: a new generation
            log.compact = not getattr(log, "compact", False)
            log.path.write_text("".join(line + "\n" for line in log.lines(log.compact)), encoding="utf-8")
        elif how == "copied":  # the same lines in a new file
            self.copies += 1
            dest = self.home / ".claude" / "projects" / f"-copy-{self.copies}" / f"{session}-copy.jsonl"
            dest.parent.mkdir(parents=True)
            shutil.copy(log.path, dest)
        elif how == "new project":  # every line copied under a new id, into another project
            self.copies += 1
            copy = ClaudeLog(self.home, session=f"{session}-p{self.copies}", cwd=f"/home/dev/fork{self.copies}")
            self.logs[copy.session] = copy
            for evid, ev in list(self.events.items()):
                if ev["session"] == session:
                    self.n += 1
                    new = self._write_event(copy, f"{copy.session}-{self.n}", ev["kind"], ev["word"])
                    self._arrive(new, copy.session, ev["kind"], ev["word"])
                    added.add(new)
            copy.write()
        elif how == "dropped and inserted":  # a rewrite that drops one record and inserts a new one
            if len(log.records) > 1:
                del log.records[len(log.records) // 2]
            self._add_event(session, "message")
            added = {e for e in self.events if e not in self._seen}
        report = origin.sync(self.store, env=self.env, home=self.home, sources=["claude-code"])
        assert report.events_added == len((added | set(self.events) - self._seen) - self.excluded)

    @rule()
    def delete_the_index(self):
        self.store.close()
        shutil.rmtree(self.store.home / origin.INDEX_DIR)
        self.store = origin.open_store(self.store.home)
        self._check(index=False)  # every read is right before the index is rebuilt
        self._sync()

    @rule()
    def rebuild_a_deleted_store(self):
        # origin.db goes; the agents' logs, raw/ and the journals stay.
        # `origin rebuild` reads the mirrors, forgets and entries back, and
        # a sync after it adds nothing twice.
        home = self.store.home
        self.store.close()
        for p in home.glob(origin.DB_NAME + "*"):
            p.unlink()
        origin.rebuild(home)
        self.store = origin.open_store(home)
        self._sync()

    @rule()
    def take_a_backup(self):
        dest = Path(tempfile.mkdtemp(prefix="backup-", dir=self.tmp))
        origin.backup(self.store, dest)
        self.backup = {"dest": dest, "chains": [list(c) for c in self.chains], "sources": dict(self.sources),
                       "words": dict(self.words), "forgotten": set(self.forgotten), "excluded": set(self.excluded),
                       "events": dict(self.events), "ops": len(self.ops)}

    @precondition(lambda self: self.backup is not None)
    @rule()
    def restore_the_last_backup_over_the_store(self):
        # The store is lost but for its tombstone log; the last backup,
        # perhaps older than some forgets, is restored into the same home.
        b, home = self.backup, self.store.home
        self.store.close()
        for p in home.iterdir():
            if p.name != origin.TOMBSTONE_LOG:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        origin.restore(b["dest"], home)
        self.store = origin.open_store(home)
        # Entries are the backup's; every forget since is applied to them
        # again, by the same rules, from the tombstone log.
        self.chains, self.words = [list(c) for c in b["chains"]], dict(b["words"])
        self.sources = dict(b["sources"])
        self.forgotten, excluded = set(b["forgotten"]), set(b["excluded"])
        versions = {v for c in self.chains for v in c}
        for kind, planned, listed in self.ops[b["ops"]:]:
            excluded |= planned
            self.forgotten |= listed & versions
            for chain in self.chains:
                if kind == "event" and chain[-1] not in self.forgotten \
                        and any(self.sources[v] & planned for v in chain):
                    self._forget_chain(chain)
                if chain[-1] not in self.forgotten and not self.sources[chain[-1]] - excluded:
                    self._forget_chain(chain)
        self._sync()
        # Events are the backup's and whatever the logs hold now; each is
        # excluded as it was in the backup, by any forget's ids, or on its
        # arrival since.
        uuids = {json.loads(line)["uuid"] for f in (self.home / ".claude" / "projects").rglob("*.jsonl")
                 for line in f.read_text(encoding="utf-8").splitlines() if line.strip()}
        self.events = {**b["events"], **{e: ev for e, ev in self.events.items()
                                         if e.split(":", 1)[1].split("#")[0] in uuids}}
        planned = set().union(*(p for _, p, _ in self.ops))
        self.excluded = {e for e in self.events if e in self.excluded | b["excluded"] | planned}

    # -- invariants ----------------------------------------------------------

    @property
    def _seen(self) -> set[str]:
        return {r[0] for r in self.store.conn.execute("SELECT id FROM event")}

    @invariant()
    def nothing_forgotten_is_visible(self):
        self._check(index=True)

    def _check(self, index: bool) -> None:
        s = self.store
        active = {c[-1] for c in self.chains if c[-1] not in self.forgotten}
        kept = {v for c in self.chains for v in c if v not in self.forgotten}
        assert set(ids(origin.list_entries(s, limit=200))) == active
        assert set(ids(origin.list_entries(s, history=True, limit=200))) == kept
        assert set(ids(origin.search(s, history=True, limit=200)["entries"])) == kept
        for eid, word in self.words.items():
            found = set(ids(origin.search_entries(s, word, history=True)))
            if eid in self.forgotten:
                assert found == set()
                with pytest.raises(origin.Forgotten):
                    origin.get_item(s, eid)
            else:
                assert found == {eid}
                e = origin.get_entry(s, eid)
                assert e["status"] == self._status(eid)
                assert set(shown(e)) == self.sources[eid] - self.excluded
        assert self._seen == set(self.events)
        visible = set(self.events) - self.excluded
        for word in {ev["word"] for ev in self.events.values()}:
            hits = set(ids(origin.search_events(s, word, include_tools=True, limit=200)))
            assert hits == self._visible_with(word), word
        for evid in self.excluded:
            with pytest.raises(origin.Forgotten):
                origin.get_item(s, evid)
        for evid in sorted(visible)[:12]:  # a sample of reads of what stays
            assert origin.get_event(s, evid)["id"] == evid
            assert all(r.get("raw") or r.get("text") for r in origin.raw_sources(s, evid))
        sessions = {x["session"]: x for x in origin.timeline(s, since=0, limit=200)["sessions"]}
        dump = json.dumps(sessions)
        for sess in {ev["session"] for ev in self.events.values()}:
            mine = {e for e, ev in self.events.items() if ev["session"] == sess} - self.excluded
            if not mine:
                assert sess not in sessions
                continue
            assert sessions[sess]["events"] == len(mine)
            in_timeline = set(ids(origin.timeline(s, session=sess, include_tools=True)["events"]))
            assert in_timeline == mine
        gone = {self.events[e]["word"] for e in self.excluded} - {ev["word"] for e, ev in self.events.items()
                                                                  if e not in self.excluded}
        for word in gone:
            assert word not in dump
        if index:
            check_index(s)


def test_invariant_2_forget_reaches_an_index_that_was_behind(store, plan, monkeypatch):
    # The forget's own index step is cut short, as by a crash right after its commit.
    monkeypatch.setattr(origin, "update_index", lambda store: None)
    origin.forget(store, plan.decide)
    monkeypatch.undo()
    assert index_hits(store, CANARY), "the index still holds the words"
    assert origin.search_events(store, CANARY, include_tools=True) == []
    assert origin.status(store)["index_behind"]
    origin.sync(store)  # any catch-up applies the tombstone before anything else
    assert index_hits(store, CANARY) == []
    assert not origin.status(store)["index_behind"]
    check_index(store)


def test_invariant_2_an_event_forgotten_before_it_was_indexed_never_enters_the_index(user_home, store, monkeypatch):
    log = ClaudeLog(user_home, session="sess-late")
    log.user("u-1", "Keep the okapiledger numbers out of the notes.")
    secret = log.assistant("a-1", f"The {CANARY} token is in the vault.")
    log.write()
    monkeypatch.setattr(origin, "IndexWriters", lambda home: None)  # events land, the index lags
    origin.sync(store)
    assert index_hits(store, "okapiledger") == []
    assert [e["id"] for e in origin.search_events(store, CANARY)] == [secret]  # found without the index
    origin.forget(store, secret)  # its catch-up takes in everything else
    monkeypatch.undo()
    assert index_hits(store, CANARY) == [] and index_hits(store, "okapiledger")
    assert origin.search_events(store, CANARY) == []
    origin.sync(store)
    check_index(store)


def _machine_settings(examples: int, steps: int, ci: bool = False) -> settings:
    """A state machine's settings: ci fixes the runs and reports a failing one as generated (not shrunk)."""
    fixed = dict(derandomize=True, database=None, phases=[Phase.explicit, Phase.generate]) if ci else {}
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, **fixed,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_invariant_2_sticky_forget_state_machine():
    # Small and fixed for CI.  A failing run is reported as generated (at most
    # 15 steps) rather than shrunk, so a failure stays quick; the soak tier shrinks.
    run_state_machine_as_test(StickyForget, settings=_machine_settings(25, 15, ci=True))


@pytest.mark.soak
def test_invariant_2_sticky_forget_state_machine_soak():
    run_state_machine_as_test(StickyForget, settings=_machine_settings(400, 40))


def test_invariant_2_forgetting_an_entry_hides_the_agents_own_remember_call(user_home, store):
    """The agent's remember call, logged as a tool call, must not keep the text searchable."""
    text = "We chose zebrafish-style canary rollouts because\nthe pager load halved."
    folder = user_home / ".claude" / "projects" / "-srv-app"
    folder.mkdir(parents=True)
    base = {"sessionId": "s-echo", "cwd": "/srv/app", "timestamp": "2026-04-01T10:00:00Z"}
    lines = [
        {**base, "type": "user", "uuid": "q1", "message": {"role": "user", "content":
            "Let us use zebrafish-style canary rollouts; the pager load halved."}},
        {**base, "type": "assistant", "uuid": "t1", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "mcp__origin__remember",
             "input": {"kind": "memory", "text": text, "sources": [{"quote": "zebrafish-style canary rollouts"}]}}]}},
    ]
    (folder / "s-echo.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    origin.sync(store)
    assert origin.search_events(store, "zebrafish-style pager", include_tools=True)
    entry = origin.remember(store, kind="memory", text=text, author="claude-code",
                            sources=[{"quote": "zebrafish-style canary rollouts"}])
    assert entry["sources"][0]["event"] == "claude-code:q1"
    done = origin.forget(store, entry["id"])
    assert "claude-code:t1#0" in done["excluded_events"]
    assert origin.search_events(store, "zebrafish", include_tools=True) == []
    origin.sync(store)
    assert origin.search_events(store, "zebrafish", include_tools=True) == []


# ---------------------------------------------------------------------------
# State machine: two devices and a hub, with backups, restores and purges
# ---------------------------------------------------------------------------


def _token_for(word: str) -> str:
    """A GitHub-shaped key that only the message holding word carries (the store masks it)."""
    return "ghp_" + hashlib.sha256(word.encode()).hexdigest()[:36]


def _holding(home: Path, needles: set[str]) -> dict[str, list[str]]:
    """Which needles the bytes of any file under home hold (a byte grep, JSON escapes included)."""
    found: dict[str, list[str]] = {}
    for p in sorted(home.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            for n in needles:
                if n.encode() in data:
                    found.setdefault(n, []).append(str(p.relative_to(home)))
    return found


#: How a read refuses an event a store hides: forgotten, or never held (a
#: device that purged before its first push sends placeholders, not the line).
GONE = (origin.Forgotten, origin.NotFound)


class ForgetAcrossStores(RuleBasedStateMachine):
    """Two devices and a hub on loopback: forgets, pushes, pulls, backups, restores and purges at random.

    The model is a set of forgets, each with the event and entry ids it
    must hide, and for every store the forgets it has learnt: its own, and
    through a push (both ways) or a pull the hub's.  A store must hide every
    event a forget it knows names, every entry a forget names, every entry
    citing an event an event's or a session's forget names, and every entry
    left with no visible source; on every read route, after every step.
    Events whose text no forget ever touched must stay readable, and the
    entries the model keeps must be exactly the ones listed.  Right after a
    purge, no file under that store's ORIGIN_HOME holds the text or the key
    of an event it hides, nor an entry's it hides, unless an event it shows
    still holds the same words.

    What the model leaves open: a copy of a forgotten text written under a
    new id may be hidden on arrival (the forget fingerprinted the text), so
    such copies are neither required to show nor to hide.
    """

    DEVICES = ("laptop", "desktop")

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="travels-"))
        self.port = 0
        self._start_hub()
        hs = self.hub.default_store()
        self.cfg = {d: origin.HubConfig(self.url, origin.create_token(hs, d), d) for d in self.DEVICES}
        self.dev: dict[str, origin.Store] = {}
        self.homes: dict[str, Path] = {}
        self.logs: dict[str, ClaudeLog] = {}
        self.connected: dict[str, bool] = {d: False for d in self.DEVICES}
        self.n = 0
        self.events: dict[str, dict] = {}  # id -> {"device", "session", "kind", "word"}
        self.held: dict[str, set[str]] = {s: set() for s in (*self.DEVICES, "hub")}
        self.entries: dict[str, dict] = {}  # id -> {"store", "sources", "word"}
        self.ops: list[dict] = []  # each forget: {"kind", "events" (hidden where made), "travel", "entries"}
        self.known: dict[str, set[int]] = {s: set() for s in (*self.DEVICES, "hub")}
        self.backup: dict | None = None
        for d in self.DEVICES:
            self.homes[d] = self.tmp / d / "home"
            self.dev[d] = origin.open_store(self.tmp / d / "origin")
            for s in ("a", "b"):
                sid = f"{d}-{s}"
                self.logs[sid] = ClaudeLog(self.homes[d], session=sid, cwd=f"/home/dev/src/{sid}")
                for kind in ("message", "message", "tool_result", "tool_call"):
                    self._add_event(sid, kind)
            self._sync(d)

    def _start_hub(self):
        self.hub = origin.Hub(self.tmp / "hub")
        self.server = origin.make_hub_server(self.hub, "127.0.0.1", self.port)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def _stop_hub(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(30)
        self.hub.close()

    def teardown(self):
        for s in self.dev.values():
            s.close()
        self._stop_hub()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def store(self, name: str) -> origin.Store:
        return self.hub.default_store() if name == "hub" else self.dev[name]

    # -- the model -----------------------------------------------------------

    def _add_event(self, sid: str, kind: str, word: str | None = None) -> None:
        self.n += 1
        w = word or f"t{self.n:04d}z"
        log, uid = self.logs[sid], f"{sid}-{self.n}"
        if kind == "message":
            evid = (log.user if self.n % 2 else log.assistant)(uid, f"Line {w} of the talk, key {_token_for(w)} here.")
        elif kind == "tool_call":
            evid = log.tool_call(uid, "Bash", {"command": f"echo {w}"})
        else:
            evid = log.tool_result(uid, f"output {w} done")
        log.write()
        self.events[evid] = {"device": sid.split("-")[0], "session": sid, "kind": kind, "word": w}

    def _sync(self, d: str) -> None:
        origin.sync(self.dev[d], env={"HOME": str(self.homes[d])}, home=self.homes[d], sources=["claude-code"])
        self.held[d] = {e for e, ev in self.events.items() if ev["device"] == d}

    def hidden_events(self, s: str) -> set[str]:
        own = set().union(*(self.ops[i]["events"] for i in self.known[s] if self.ops[i]["where"] == s))
        learnt = set().union(*(self.ops[i]["travel"] for i in self.known[s]))
        return (own | learnt) & self.held[s]

    def hidden_entries(self, s: str) -> set[str]:
        gone = self.hidden_events(s)
        direct = set().union(*(self.ops[i]["travel"] | (self.ops[i]["events"] if self.ops[i]["where"] == s else set())
                               for i in self.known[s] if self.ops[i]["kind"] != "entry"))
        named = set().union(*(self.ops[i]["entries"] for i in self.known[s]))
        return {e for e, x in self.entries.items() if x["store"] == s
                and (e in named or x["sources"] & direct or not x["sources"] - gone)}

    def touched(self, evid: str) -> bool:
        """Whether a forget ever named an event with this event's text (a copy may then hide on arrival)."""
        key = (self.events[evid]["kind"], self.events[evid]["word"])
        return any((self.events[e]["kind"], self.events[e]["word"]) == key for op in self.ops for e in op["events"])

    def _forgotten(self, s: str, planned: set[str], res: dict, kind: str, entries=frozenset()) -> None:
        excluded = set(res["excluded_events"])
        # The code may have hidden a planned copy before (on arrival): only
        # a copy of a text some forget touched.
        assert all(self.touched(e) for e in planned - excluded), planned - excluded
        self.ops.append({"kind": kind, "where": s, "events": planned, "travel": planned & excluded,
                         "entries": set(entries)})
        self.known[s].add(len(self.ops) - 1)

    # -- rules ---------------------------------------------------------------

    @rule(sid=st.sampled_from([f"{d}-{s}" for d in DEVICES for s in "ab"]),
          kind=st.sampled_from(["message", "tool_result", "tool_call"]))
    def new_line(self, sid, kind):
        self._add_event(sid, kind)
        self._sync(sid.split("-")[0])

    @rule(data=st.data(), sid=st.sampled_from([f"{d}-{s}" for d in DEVICES for s in "ab"]))
    def same_text_under_a_new_id(self, data, sid):
        evid = data.draw(st.sampled_from(sorted(self.events)), label="copy of")
        self._add_event(sid, self.events[evid]["kind"], self.events[evid]["word"])
        self._sync(sid.split("-")[0])

    @rule(data=st.data(), where=st.sampled_from([*DEVICES, "hub"]))
    def remember(self, data, where):
        held = sorted(self.held[where])
        if not held:
            return
        cited = set(data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=2, unique=True), label="cite"))
        self.n += 1
        word = f"n{self.n:04d}v"
        src = [{"event": e} for e in sorted(cited)]
        if cited & self.hidden_events(where):
            with pytest.raises(GONE):
                origin.remember(self.store(where), kind="memory", text=f"Entry {word}.", author="m", sources=src)
            return
        try:
            e = origin.remember(self.store(where), kind="memory", text=f"Entry {word}.", author="m", sources=src)
        except origin.Forgotten:
            assert any(self.touched(x) for x in cited)  # a copy hidden on arrival
            return
        self.entries[e["id"]] = {"store": where, "sources": cited, "word": word}

    @rule(data=st.data(), where=st.sampled_from([*DEVICES, "hub"]), same_text=st.booleans())
    def forget_event(self, data, where, same_text):
        held = sorted(self.held[where])
        if not held:
            return
        evid = data.draw(st.sampled_from(held), label="event")
        if evid in self.hidden_events(where):
            with pytest.raises(GONE):
                origin.forget(self.store(where), evid, same_text=same_text)
            return
        ev = self.events[evid]
        planned = {evid}
        if same_text:
            planned |= {e for e in self.held[where] - self.hidden_events(where)
                        if (self.events[e]["kind"], self.events[e]["word"]) == (ev["kind"], ev["word"])}
        try:
            res = origin.forget(self.store(where), evid, same_text=same_text)
        except origin.Forgotten:
            assert self.touched(evid)
            return
        self._forgotten(where, planned, res, "event")

    @rule(data=st.data(), where=st.sampled_from([*DEVICES, "hub"]))
    def forget_session(self, data, where):
        sessions = sorted({self.events[e]["session"] for e in self.held[where]})
        if not sessions:
            return
        sid = data.draw(st.sampled_from(sessions), label="session")
        planned = {e for e in self.held[where] - self.hidden_events(where) if self.events[e]["session"] == sid}
        if not planned:
            with pytest.raises(GONE):
                origin.forget(self.store(where), f"claude-code:{sid}")
            return
        try:
            res = origin.forget(self.store(where), f"claude-code:{sid}")
        except origin.Forgotten:
            assert all(self.touched(e) for e in planned)
            return
        self._forgotten(where, planned, res, "session")

    @rule(data=st.data(), where=st.sampled_from([*DEVICES, "hub"]))
    def forget_entry(self, data, where):
        mine = sorted(e for e, x in self.entries.items() if x["store"] == where)
        if not mine:
            return
        eid = data.draw(st.sampled_from(mine), label="entry")
        if eid in self.hidden_entries(where):
            with pytest.raises(origin.Forgotten):
                origin.forget(self.store(where), eid)
            return
        planned = self.entries[eid]["sources"] - self.hidden_events(where)
        res = origin.forget(self.store(where), eid)
        assert eid in res["forgotten_entries"]
        self._forgotten(where, planned, res, "entry", {eid})

    @precondition(lambda self: any(self.connected.values()))
    @rule(data=st.data())
    def disconnect(self, data):
        d = data.draw(st.sampled_from([d for d in self.DEVICES if self.connected[d]]), label="device")
        (self.dev[d].home / origin.HUB_FILE).unlink()
        self.connected[d] = False

    def _cfg(self, d: str) -> origin.HubConfig:
        """The device's saved connection; a device not connected connects first (`origin hub connect`)."""
        if not self.connected[d]:
            origin.save_hub_config(self.dev[d].home, self.cfg[d])
            self.connected[d] = True
        cfg = origin.load_hub_config(self.dev[d].home, env={})
        assert cfg is not None and (cfg.url, cfg.device) == (self.url, d)
        return cfg

    @rule(d=st.sampled_from(DEVICES))
    def push(self, d):
        report = origin.push(self.dev[d], self._cfg(d), discover=False)
        # A line purged on one side only never stops a file's next lines.
        assert report["refused"] == [], report["refused"]
        self.known["hub"] |= self.known[d]
        self.known[d] |= self.known["hub"]
        self.held["hub"] |= self.held[d]

    @rule(d=st.sampled_from(DEVICES))
    def pull_tombstones(self, d):
        client = origin.HubClient(self._cfg(d))
        try:
            origin.pull_tombstones(self.dev[d], client)
        finally:
            client.close()
        self.known[d] |= self.known["hub"]

    @rule()
    def back_up_the_hub(self):
        dest = Path(tempfile.mkdtemp(prefix="hub-backup-", dir=self.tmp))
        origin.backup(self.hub.default_store(), dest)
        self.backup = {"dest": dest, "held": set(self.held["hub"]), "known": set(self.known["hub"]),
                       "entries": {e for e, x in self.entries.items() if x["store"] == "hub"}}

    @precondition(lambda self: self.backup is not None)
    @rule(keep_log=st.booleans())
    def restore_the_hub(self, keep_log):
        # The hub's home is lost (but for its tombstone log, when kept) and
        # the last backup is restored into it; the hub starts on the same port.
        b, home = self.backup, self.hub.home
        self._stop_hub()
        for p in home.iterdir():
            if not (keep_log and p.name == origin.TOMBSTONE_LOG):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        origin.restore(b["dest"], home)
        self._start_hub()
        self.held["hub"] = set(b["held"])
        self.known["hub"] = set(b["known"]) | (self.known["hub"] if keep_log else set())
        self.entries = {e: x for e, x in self.entries.items() if x["store"] != "hub" or e in b["entries"]}

    @rule(where=st.sampled_from([*DEVICES, "hub"]))
    def purge(self, where):
        res = origin.purge(self.store(where))
        assert res["complete"], res
        shown = {self.events[e]["word"] for e in self.held[where] - self.hidden_events(where)}
        words = {self.events[e]["word"] for e in self.hidden_events(where)} - shown
        needles = words | {_token_for(w) for w in words}
        needles |= {x["word"] for e, x in self.entries.items() if e in self.hidden_entries(where)}
        assert _holding(self.store(where).home, needles) == {}

    # -- the invariant -------------------------------------------------------

    @invariant()
    def nothing_forgotten_is_visible_anywhere(self):
        for name in (*self.DEVICES, "hub"):
            self._check(name)

    def _check(self, name: str) -> None:
        s = self.store(name)
        gone, gone_entries = self.hidden_events(name), self.hidden_entries(name)
        mine = {e for e, x in self.entries.items() if x["store"] == name}
        assert set(ids(origin.list_entries(s, history=True, limit=200))) == mine - gone_entries, name
        assert set(ids(origin.search(s, history=True, limit=200)["entries"])) == mine - gone_entries, name
        for eid in mine:
            if eid in gone_entries:
                with pytest.raises(origin.Forgotten):
                    origin.get_item(s, eid)
                assert origin.search_entries(s, self.entries[eid]["word"], history=True) == []
            else:
                assert not set(shown(origin.get_entry(s, eid))) & gone, (name, eid)
        for evid in gone:
            with pytest.raises(GONE):
                origin.get_item(s, evid)
        shown_words = {self.events[e]["word"] for e in self.held[name] - gone}
        words = {self.events[e]["word"] for e in gone} - shown_words
        for w in sorted(words):
            res = origin.search(s, w, include_tools=True, history=True, limit=200)
            assert (res["entries"], res["events"]) == ([], []), (name, w)
        sessions = origin.timeline(s, since=0, limit=200)["sessions"]
        dump = json.dumps(sessions)
        for x in sessions:
            tl = origin.timeline(s, session=x["session"], include_tools=True, limit=200)
            assert not set(ids(tl["events"])) & gone, (name, x["session"])
            dump += json.dumps(tl)
        for w in words:
            assert w not in dump and _token_for(w) not in dump, (name, w)
        # What no forget touched stays: a sample of reads.
        for evid in sorted(e for e in self.held[name] if not self.touched(e))[:6]:
            assert origin.get_event(s, evid)["id"] == evid
            assert evid in ids(origin.search_events(s, self.events[evid]["word"], include_tools=True, limit=200))
        if name == "hub":
            self._check_hub_over_http(gone | gone_entries, words)

    def _check_hub_over_http(self, gone: set[str], words: set[str]) -> None:
        """The hub's tools over /mcp (what a device's reads and its agents get) show none of it either."""
        tools = origin.HubTools(self.cfg["laptop"], client="user")
        try:
            asked = sorted(gone)[:12]
            if asked:
                text, failed = tools.call("get", {"ids": asked})
                items = [] if failed else json.loads(text)["items"]
                assert not {(i.get("event") or i.get("entry"))["id"] for i in items} & gone, text
            for w in sorted(words)[:4]:
                text, failed = tools.call("search", {"query": w, "include_tools": True, "history": True})
                res = json.loads(text)
                assert not failed and (res["entries"], res["events"]) == ([], []), (w, text)
            text, failed = tools.call("timeline", {"include_tools": True, "limit": 200})
            assert not failed and not [w for w in words if w in text], text
        finally:
            tools.close()


def _pushed_then_forgotten(served, user_home, text: str = "The hangar code is pelicanvault, keep it out of the notes.",
                           session: str = "sess-both"):
    """A device pushes a session, forgets its first line and pushes again (the hub learns the forget)."""
    hub, cfg, dev = served
    log = ClaudeLog(user_home, session=session)
    secret = log.user("u-1", text)
    log.assistant("a-1", "Understood, nothing written down.")
    log.write()
    origin.sync(dev)
    assert origin.push(dev, cfg, discover=False)["refused"] == []
    origin.forget(dev, secret)
    assert origin.push(dev, cfg, discover=False)["tombstones_sent"]["applied"] == 1
    return log, secret


def _push_a_new_line(served, log) -> tuple[str, dict]:
    hub, cfg, dev = served
    later = log.assistant("a-2", "Anything else before the freeze?")
    log.write()
    origin.sync(dev)
    return later, origin.push(dev, cfg, discover=False)


def test_invariant_2_a_hub_and_a_device_that_both_purged_a_file_take_its_next_lines(served, user_home):
    # Found by the machine below: the hub read the hashes of a purged copy
    # from the device's path, which it does not have, and closed the
    # connection without an answer at every later push of the file.
    hub, cfg, dev = served
    log, secret = _pushed_then_forgotten(served, user_home)
    for s in (dev, hub.default_store()):
        assert origin.purge(s)["complete"]
    later, report = _push_a_new_line(served, log)
    assert report["refused"] == [] and report["events_added_on_hub"] == 1
    hs = hub.default_store()
    assert origin.get_event(hs, later)["id"] == later
    with pytest.raises(GONE):
        origin.get_item(hs, secret)
    assert _holding(hub.home, {"pelicanvault"}) == {} and _holding(dev.home, {"pelicanvault"}) == {}


#: A forgotten line shorter than the proof window, and one longer: then the
#: window before the next chunk starts inside it, and its first line is the
#: tail of a placeholder on one side only.
ONE_SIDED = {"short": ("The hangar code is pelicanvault, keep it out of the notes.", "sess-both"),
             "long": ("The hangar code is pelicanvault. " + "Keep it out of the notes. " * 250, "sess-long")}


@pytest.mark.parametrize("line", sorted(ONE_SIDED))
@pytest.mark.parametrize("side", ["hub", "device"])
def test_invariant_2_a_file_purged_on_one_side_only_still_pushes_its_next_lines(served, user_home, side, line):
    hub, cfg, dev = served
    log, _secret = _pushed_then_forgotten(served, user_home, *ONE_SIDED[line])
    if line == "long":
        size = dev.conn.execute("SELECT bytes_ingested FROM raw_file").fetchone()[0]
        first = len(log.path.read_bytes().split(b"\n")[0])
        assert origin.PROOF_WINDOW < size < first + origin.PROOF_WINDOW  # the window starts in the forgotten line
    assert origin.purge(hub.default_store() if side == "hub" else dev)["complete"]
    later, report = _push_a_new_line(served, log)
    assert report["refused"] == []
    assert origin.get_event(hub.default_store(), later)["id"] == later


@pytest.mark.parametrize("change", ["a byte", "a placeholder"])
def test_invariant_2_a_window_that_differs_by_a_line_nobody_forgot_is_still_refused(served, user_home, change):
    # The proof lets through only lines purged on one side: a line of the
    # window that no forget covers, changed (another machine's file) or
    # made to look purged, still refuses the chunk after it.
    hub, cfg, dev = served
    log, _secret = _pushed_then_forgotten(served, user_home)
    hs = hub.default_store()
    assert origin.purge(hs)["complete"]  # the window differs by a purged line too
    later = log.assistant("a-2", "Anything else before the freeze?")
    log.write()
    origin.sync(dev)
    mirror = dev.home / dev.conn.execute("SELECT mirror FROM raw_file").fetchone()[0]
    lines = mirror.read_bytes().split(b"\n")
    kept = lines[1]  # the assistant's answer, which nobody forgot
    assert b"nothing written down" in kept
    lines[1] = kept.replace(b"nothing", b"NOTHING") if change == "a byte" else origin._placeholder(len(kept))
    assert len(lines[1]) == len(kept)
    mirror.write_bytes(b"\n".join(lines))
    report = origin.push(dev, cfg, discover=False)
    (refused,) = report["refused"]
    assert refused["status"] == 409 and "another machine pushes the same file" in refused["error"]
    with pytest.raises(origin.NotFound):
        origin.get_event(hs, later)


def test_invariant_2_a_hub_from_before_line_proofs_refuses_a_file_purged_on_one_side_with_its_reason(
        served, user_home):
    hub, cfg, dev = served
    real = origin.api_post_ingest

    def old_ingest(h, req):  # what a hub of the previous version answered
        if "beforeLines" in req.json():
            raise origin.UsageError("unknown field 'beforeLines'; fields are …")
        return real(h, req)

    hub.routes[("POST", "/v1/ingest")] = origin.Route(old_ingest, body_max=origin.BODY_MAX)
    log, _secret = _pushed_then_forgotten(served, user_home)
    assert origin.purge(dev)["complete"]
    _later, report = _push_a_new_line(served, log)
    (refused,) = report["refused"]
    assert refused["status"] == 409 and "another machine pushes the same file" in refused["error"]


class _Picks:
    """Stands in for ``st.data()`` in a scripted run: each draw returns the next value given."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, strategy, label=None):
        return self.values.pop(0)


def test_invariant_2_forgets_travel_between_devices_and_a_hub_scripted():
    """The machine's steps in one fixed order that every run takes, the invariant checked after each.

    A forget made before the hub was connected and one made while
    disconnected go up; the hub's forgets come down; the hub is restored
    from a backup older than some of them with none of its own log, and
    learns them again from the devices; its forget after the restore
    reaches a device; then every store is purged.
    """
    m = ForgetAcrossStores()

    def step(name, *args, **kw):
        getattr(m, name)(*args, **kw)
        m.nothing_forgotten_is_visible_anywhere()

    try:
        m.nothing_forgotten_is_visible_anywhere()
        step("forget_event", _Picks("claude-code:laptop-a-1"), "laptop", False)  # before any hub
        step("remember", _Picks(["claude-code:laptop-a-3#0"]), "laptop")
        step("same_text_under_a_new_id", _Picks("claude-code:desktop-a-9"), "laptop-b")
        step("push", "laptop")
        assert "claude-code:laptop-a-1" in m.hidden_events("hub")
        step("remember", _Picks(["claude-code:laptop-b-5"]), "hub")
        step("push", "desktop")
        step("forget_event", _Picks("claude-code:desktop-a-9"), "desktop", True)
        step("disconnect", _Picks("laptop"))
        step("forget_event", _Picks("claude-code:laptop-a-4#0"), "laptop", False)  # while disconnected
        step("back_up_the_hub")
        step("forget_session", _Picks("laptop-b"), "hub")
        step("forget_event", _Picks("claude-code:desktop-b-13"), "hub", True)
        step("pull_tombstones", "laptop")  # reconnects
        step("restore_the_hub", False)  # the hub's own log is lost too
        assert "claude-code:laptop-b-5" not in m.hidden_events("hub")
        step("push", "laptop")
        assert {"claude-code:laptop-b-5", "claude-code:laptop-a-4#0"} <= m.hidden_events("hub")
        step("push", "desktop")
        step("forget_event", _Picks("claude-code:laptop-a-2"), "hub", False)
        step("pull_tombstones", "laptop")
        assert "claude-code:laptop-a-2" in m.hidden_events("laptop")
        (mine,) = [e for e, x in m.entries.items() if x["store"] == "laptop"]
        step("forget_entry", _Picks(mine), "laptop")
        step("push", "laptop")
        for where in ("hub", "laptop", "desktop"):
            step("purge", where)
        step("push", "desktop")
        step("push", "laptop")
    finally:
        m.teardown()


def test_invariant_2_forgets_travel_between_devices_and_a_hub_state_machine():
    # Small and fixed for CI, as the machine above; the soak tier runs more.
    run_state_machine_as_test(ForgetAcrossStores, settings=_machine_settings(10, 15, ci=True))


@pytest.mark.soak
def test_invariant_2_forgets_travel_between_devices_and_a_hub_state_machine_soak():
    run_state_machine_as_test(ForgetAcrossStores, settings=_machine_settings(200, 30))


def test_a_hub_answers_an_error_of_its_store_instead_of_dropping_the_connection(served, user_home, monkeypatch):
    # The machine above found a hub store's FileNotFoundError ending the
    # request with no answer and nothing in the hub's log.
    hub, cfg, dev = served
    hub.log = io.StringIO()
    log = ClaudeLog(user_home, session="sess-err")
    log.user("u-1", "A line the hub cannot take just now.")
    log.write()
    origin.sync(dev)

    def broken(*a, **k):
        raise FileNotFoundError(2, "No such file or directory", "/nowhere")

    monkeypatch.setattr(origin, "accept_chunk", broken)
    with pytest.raises(origin.HubUnavailable, match="internal error"):
        origin.push(dev, cfg, discover=False)
    assert "FileNotFoundError" in hub.log.getvalue(), hub.log.getvalue()
