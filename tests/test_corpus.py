"""The synthetic corpora parse cleanly: a drift between generator and adapter fails here.

The bench measures ingest on these generators, so a generated record that an
adapter rejects or does not know would bias its figures without a sound.
Each test writes a small corpus, syncs it through the engine and checks that
every file was taken, with no parse error and no unknown record.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import zstandard

import origin
from corpus import (write_codex_corpus, write_cursor_db, write_gemini_corpus, write_goose_db, write_grok_corpus,
                    write_opencode_db)


def _sync(origin_home: Path, home: Path, **env) -> origin.SyncReport:
    with origin.open_store(origin_home) as s:
        return origin.sync(s, env={"HOME": str(home), **env}, home=home)


def _query(origin_home: Path, sql: str, *args) -> list[tuple]:
    conn = sqlite3.connect(origin_home / origin.DB_NAME)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _clean(origin_home: Path, report: origin.SyncReport, source: str, files: int) -> None:
    """Assert every file of source was ingested without error or unknown record."""
    assert report.problems == []
    assert report.sources[source]["files"] == files
    assert report.sources[source]["parse_errors"] == 0
    assert report.sources[source]["events_added"] > 0
    rows = _query(origin_home, "SELECT count(*), sum(parse_errors), sum(unknown_records) FROM raw_file "
                               "WHERE source = ?", source)
    assert rows == [(files, 0, 0)]


def _lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.suffix == ".zst":
        data = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True).read()
    return [json.loads(line) for line in data.splitlines()]


def test_codex_corpus_ingests_plain_zstd_and_archived_rollouts_cleanly(user_home, origin_home):
    paths = write_codex_corpus(user_home / ".codex", files=12, turns=(1, 4), seed=5)
    zst = [p for p in paths if p.name.endswith(".jsonl.zst")]
    assert len(zst) == 4 and {p.parent.name for p in zst} >= {"archived_sessions"}
    assert any(p.read_bytes().count(b"\x28\xb5\x2f\xfd") > 1 for p in zst)  # several frames
    report = _sync(origin_home, user_home)
    _clean(origin_home, report, "codex", 12)
    records = [r for p in paths for r in _lines(p)]
    prompts = sum(1 for r in records if r["type"] == "event_msg" and r["payload"]["type"] == "user_message")
    calls = sum(1 for r in records if r["type"] == "response_item" and r["payload"]["type"].endswith("call"))
    assert _query(origin_home, "SELECT kind, role, indexed, count(*) FROM event WHERE kind != 'message' "
                               "OR role = 'user' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3") == [
        ("message", "user", 1, prompts),
        ("meta", "system", 0, 12),  # the permissions message
        ("meta", "user", 0, 24),  # AGENTS.md and <environment_context>
        ("tool_call", "assistant", 1, calls),
        ("tool_result", "tool", 1, calls),
    ]
    threads = {p.name.removesuffix(".zst").removesuffix(".jsonl")[-36:] for p in paths}
    sessions = _query(origin_home, "SELECT id, cwd, model, title FROM session WHERE source = 'codex'")
    assert {s[0] for s in sessions} == threads
    assert all(s[1] and s[2] and s[3] for s in sessions)


def test_grok_corpus_ingests_chunks_tool_updates_and_all_time_shapes_cleanly(user_home, origin_home):
    paths = write_grok_corpus(user_home / ".grok", sessions=12, turns=(1, 4), seed=5)
    records = [r for p in paths for r in _lines(p)]
    shapes = {type(r["timestamp"]).__name__ + ("ms" if isinstance(r["timestamp"], int)
                                               and r["timestamp"] > 1e11 else "") for r in records}
    assert shapes == {"int", "intms", "str"}
    report = _sync(origin_home, user_home)
    _clean(origin_home, report, "grok", 12)
    kinds = [r["params"]["update"]["sessionUpdate"] for r in records]
    counts = dict(_query(origin_home, "SELECT kind || '/' || role, count(*) FROM event GROUP BY 1"))
    assert counts["tool_call/assistant"] == counts["tool_result/tool"] == kinds.count("tool_call")
    assert counts["message/user"] == kinds.count("turn_completed")
    assert _query(origin_home, "SELECT count(*) FROM event WHERE ts_approx = 1") == [(0,)]
    sessions = _query(origin_home, "SELECT cwd, title, model, parent FROM session WHERE source = 'grok'")
    assert len(sessions) == 12 and all(s[0] and s[1] and s[2] for s in sessions)
    assert sum(1 for s in sessions if s[3]) == 1  # the tenth session is a sub-agent


def test_cursor_db_exports_every_conversation_and_never_the_access_token(user_home, origin_home, tmp_path):
    user = tmp_path / "Cursor" / "User"
    db = write_cursor_db(user / "globalStorage" / "state.vscdb", composers=20, bubbles_per_composer=(5, 30),
                         seed=5, projects=4)
    conn = sqlite3.connect(db.path)
    rows = [json.loads(v) for k, v in conn.execute("SELECT key, value FROM cursorDiskKV") if v is not None]
    assert conn.execute("SELECT count(*) FROM ItemTable WHERE key = 'cursorAuth/accessToken'").fetchone() == (1,)
    conn.close()
    composers = [r for r in rows if "composerId" in r]
    assert {"_v" in c for c in composers} == {True, False}
    report = _sync(origin_home, user_home, ORIGIN_CURSOR_USER_DIR=str(user))
    _clean(origin_home, report, "cursor", 1 + 4)  # the global database and one per workspace
    sessions = _query(origin_home, "SELECT id, cwd FROM session WHERE source = 'cursor'")
    assert {s[0] for s in sessions} == set(db.composers)
    assert all(s[1] and s[1].startswith("/home/dev/src/proj") for s in sessions)
    prompts = sum(1 for r in rows if r.get("type") == 1)
    tools = sum(1 for r in rows if r.get("toolFormerData"))
    counts = dict(_query(origin_home, "SELECT kind || '/' || role, count(*) FROM event GROUP BY 1"))
    assert counts["message/user"] == prompts
    assert counts["tool_call/assistant"] == counts["tool_result/tool"] == tools
    secret = db.secret.rsplit(".", 2)[1].encode()
    assert not [p for p in origin_home.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_opencode_gemini_and_goose_corpora_ingest_cleanly(user_home, origin_home, tmp_path):
    parts = write_opencode_db(tmp_path / "oc" / "opencode.db", sessions=12, turns=(1, 4), seed=5)
    files = write_gemini_corpus(user_home / ".gemini", sessions=12, turns=(1, 4), seed=6)
    messages = write_goose_db(tmp_path / "goose" / "sessions" / "sessions.db", sessions=12, turns=(1, 4), seed=7)
    report = _sync(origin_home, user_home, ORIGIN_OPENCODE_HOME=str(tmp_path / "oc"),
                   ORIGIN_GOOSE_HOME=str(tmp_path / "goose"))
    _clean(origin_home, report, "opencode", 1)
    _clean(origin_home, report, "gemini", len(files))
    _clean(origin_home, report, "goose", 1)
    counts = {(src, kind): n for src, kind, n in _query(
        origin_home, "SELECT source, kind, count(*) FROM event GROUP BY 1, 2")}
    for src in ("opencode", "gemini", "goose"):
        assert counts[(src, "tool_call")] == counts[(src, "tool_result")] > 0, src
    # Four messages a turn; five events (the reasoning of the one-word parts is one event).
    assert sum(n for (src, _), n in counts.items() if src == "goose") == messages // 4 * 5
    assert parts > counts[("opencode", "message")]  # step parts make no event
    sessions = _query(origin_home, "SELECT source, count(*), count(cwd), count(parent) FROM session GROUP BY 1")
    assert ("opencode", 12, 12, 1) in sessions and ("gemini", 12, 12, 0) in sessions and ("goose", 12, 12, 0) in sessions


def test_generators_are_deterministic_for_a_seed(tmp_path):
    def snapshot(root: Path) -> dict:
        out = {}
        for p in sorted(root.rglob("*")):
            if p.name == "state.vscdb":
                conn = sqlite3.connect(p)
                out[p.relative_to(root).as_posix()] = conn.execute(
                    "SELECT key, value FROM cursorDiskKV UNION ALL SELECT key, value FROM ItemTable "
                    "ORDER BY 1").fetchall()
                conn.close()
            elif p.is_file():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
        return out

    for run in ("a", "b"):
        write_codex_corpus(tmp_path / run / "codex", files=6, turns=2, seed=9)
        write_grok_corpus(tmp_path / run / "grok", sessions=3, turns=2, seed=9)
        write_cursor_db(tmp_path / run / "User" / "globalStorage" / "state.vscdb", composers=3,
                        bubbles_per_composer=6, seed=9)
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
