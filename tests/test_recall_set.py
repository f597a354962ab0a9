"""The recall question set stays answerable and honestly labelled.

tests/bench_recall.py measures search against tests/recall_questions.json;
these checks keep that measure meaningful whatever search does: every
evidence key names visible message events after a sync, the set keeps its
size and mix, each question labelled a paraphrase really shares no word
with one of its answers, and the corpus is the same on every run.
"""

from __future__ import annotations

import filecmp
import os
import re

import pytest

import origin
import recall_corpus as rc
from conftest import AGENT_VARS


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """Sync the recall corpus and the fixture logs into one store; return
    the questions and, per question, its evidence as {event id: text}."""
    root = tmp_path_factory.mktemp("recall")
    user = root / "user"
    cursor = rc.lay_out_fixtures(user)
    rc.write_recall_corpus(user)
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    env.update(HOME=str(user), ORIGIN_CURSOR_USER_DIR=str(cursor))
    with origin.open_store(root / "home") as store:
        origin.sync(store, env=env, home=user)
        questions = rc.load_questions()
        answers = rc.resolve_evidence(store.conn, questions)
    return questions, answers


def test_every_evidence_key_resolves_to_a_visible_message(synced):
    questions, answers = synced
    assert len(answers) == len(questions)
    assert all(answers), "resolve_evidence returned a question without evidence"


def test_resolver_fails_loudly_on_a_key_that_matches_nothing(store):
    bad = [{"q": "x", "kind": "fact", "paraphrase": False,
            "evidence": [{"session": "no-such-session", "contains": "nothing"}]}]
    with pytest.raises(rc.Unresolved, match="no-such-session"):
        rc.resolve_evidence(store.conn, bad)


def test_the_set_keeps_its_size_and_mix(synced):
    questions, _ = synced
    n = len(questions)
    assert n >= 220
    assert sum(q["paraphrase"] for q in questions) >= 0.3 * n
    assert sum(rc.has_cjk(q["q"]) for q in questions) >= 0.1 * n
    assert sum(q.get("set") == "fixtures" for q in questions) >= 20
    for q in questions:
        assert set(q) <= {"q", "evidence", "kind", "paraphrase", "set"}, q
        assert q["q"].strip() and q["evidence"] and isinstance(q["paraphrase"], bool), q
    assert len({q["q"] for q in questions}) == n, "a question is asked twice"


def test_each_paraphrase_shares_no_word_with_one_of_its_answers(synced):
    questions, answers = synced
    wrong = [q["q"] for q, ans in zip(questions, answers)
             if q["paraphrase"] and not rc.paraphrase_ok(q["q"], list(ans.values()))]
    assert not wrong, f"labelled paraphrase, yet share a word with every answer: {wrong}"


def test_some_questions_name_a_project_only_its_metadata_holds(synced):
    questions, answers = synced
    projects = {s.project for s in rc.SESSIONS} | {"demo"}
    named = [q["q"] for q, ans in zip(questions, answers)
             for p in projects & set(re.findall(r"\w+", q["q"].lower()))
             if not any(p in text.lower() for text in ans.values())]
    assert len(named) >= 10, named


def test_the_corpus_is_the_same_on_every_run(tmp_path):
    a, b = rc.write_recall_corpus(tmp_path / "a"), rc.write_recall_corpus(tmp_path / "b")
    assert [s["id"] for s in a["sessions"].values()] == [s["id"] for s in b["sessions"].values()]
    for slug, s in a["sessions"].items():
        assert filecmp.cmp(s["path"], b["sessions"][slug]["path"], shallow=False), slug
    assert len(a["sessions"]) >= 40 and len(a["projects"]) >= 6
    assert {s["source"] for s in a["sessions"].values()} == {"claude-code", "codex"}


def test_the_bench_writes_only_between_its_markers(tmp_path):
    import bench

    page = tmp_path / "performance.md"
    bench.write_docs("first\n", "recall", "Search recall", page)
    assert page.read_text().startswith("# Performance\n") and "## Search recall\n" in page.read_text()
    page.write_text(page.read_text().replace("first", "old") + "\nkept after\n")
    bench.write_docs("second\n", "recall", "Search recall", page)
    bench.write_docs("speed\n", "search", "Search speed", page)
    text = page.read_text()
    assert "second" in text and "old" not in text and "kept after\n" in text
    assert text.endswith("speed\n<!-- search:end -->\n")
    assert text.count("<!-- recall:begin -->") == 1 and text.count("<!-- recall:end -->") == 1
