"""`origin purge`: forgotten text physically gone from ORIGIN_HOME (issue 12).

Forget hides; purge deletes.  Every adapter's real fixture shapes get one
distinctive sentence planted (a Claude text block beside a ``tool_use``, a
Codex prompt in a two-frame ``.zst`` whose ``response_item`` repeats it, a
Cursor bubble in ``state.vscdb``, a ZCode part, a Grok chunk and a Grok chat
record with ``tool_calls``, a Claude Code memory note), the events holding it are forgotten, copies
arrive afterwards (a transcript copied to another project, a chat history
rewritten), and after ``origin purge --yes`` a real ``grep -r`` under
ORIGIN_HOME — database, WAL, index, every mirror generation — finds it 0
times, while everything else still reads back its line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import origin
from conftest import FIXTURES, read_line
from helpers import (CANARY, replace_in_db, ClaudeLog, DEMO, GROK_ID, LAYOUTS, _claude_line, decompressed,
                     forget_every_event_holding, grep)

ZST = "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl.zst"


def files_digest(home: Path) -> dict[str, str]:
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file()}


def _replace_in(path: Path, old: str, new: str) -> None:
    data = path.read_bytes()
    assert old.encode() in data, (path, old)
    path.write_bytes(data.replace(old.encode(), new.encode()))


def _replace_in_db(path: Path, table: str, column: str, old: str) -> None:
    """Put CANARY in place of old in the one row of an agent database holding it."""
    replace_in_db(path, table, column, old, CANARY)


def plant(home: Path, monkeypatch) -> dict[str, Path]:
    """Lay out every adapter's fixtures with CANARY planted in each; return the planted files."""
    for name, layout in LAYOUTS.items():
        for k, v in (layout(home) or {}).items():
            monkeypatch.setenv(k, v)
    demo = home / ".claude" / "projects" / "-path-to-Demo" / DEMO
    _replace_in(demo.parent / "memory" / "feedback_reviews.md", "Point out missing tests before style nits", CANARY)
    _replace_in(demo, "I'll analyze the codebase and ", CANARY + " ")
    with open(demo, "a", encoding="utf-8") as fh:
        fh.write(_claude_line("purge-shared", f"{CANARY}: noting it before listing the docs."))
    # Codex: the archived two-frame .zst repeats the prompt in a response_item
    # the adapter skips (the user_message event carries it).
    import zstandard

    zst = home / ".codex" / "archived_sessions" / ZST
    data = decompressed(str(zst), "zstd")
    for old in ("[REDACTED_TEXT len=98 sha=c002ff99]", "[REDACTED_MESSAGE len=98 sha=c002ff99]"):
        assert old.encode() in data
        data = data.replace(old.encode(), CANARY.encode())
    cut = data.index(b"\n", len(data) // 2) + 1
    c = zstandard.ZstdCompressor()
    zst.write_bytes(c.compress(data[:cut]) + c.compress(data[cut:]))
    _replace_in_db(home / "Cursor" / "User" / "globalStorage" / "state.vscdb", "cursorDiskKV", "value",
                   "Hello! I can see you")
    _replace_in_db(home / ".zcode" / "cli" / "db" / "db.sqlite", "part", "data",
                   "Let me look at how totals are rounded.")
    updates = next((home / ".grok" / "sessions").glob("*/019f7000-0000-7000-8000-0000000000a1/updates.jsonl"))
    _replace_in(updates, '"text":"I\'ll read"', f'"text":"{CANARY}"')
    chat = next((home / ".grok" / "sessions").glob(f"*/{GROK_ID}/chat_history.jsonl"))
    _replace_in(chat, "I'll read the file first.", CANARY)
    _replace_in_db(home / ".local" / "share" / "opencode" / "opencode.db", "part", "data",
                   "The file has been successfully written")
    gemini = next((home / ".gemini" / "tmp").glob("*/chats/session-*-standard_session.json"))
    _replace_in(gemini, "Fix the login bug", CANARY)
    os.utime(gemini, (time.time() - 86400,) * 2)  # a session finished a day ago
    _replace_in_db(home / ".local" / "share" / "goose" / "sessions" / "sessions.db", "messages", "content_json",
                   "Read the file /work/src/orders.py using an absolute path")
    _replace_in(home / ".copilot" / "session-state" / "8b23eac7-b9d0-4c24-8e3c-90f5f8a8d02b" / "events.jsonl",
                "I cannot read the content of files directly", CANARY)
    _replace_in(home / ".qwen" / "projects" / "-work" / "chats" / "85aa748a-9159-4a4f-9f9b-1b2cea32fd5b.jsonl",
                "suggests the current user", CANARY)
    _replace_in(next((home / ".pi" / "agent" / "sessions").glob("*/*.jsonl")),
                "Add one concise follow-up sentence.", CANARY)
    _replace_in(home / "code" / "myrepo" / ".aider.chat.history.md", "The timeout now reads from", CANARY)
    return {"demo": demo, "zst": zst, "chat": chat, "updates": updates}


@pytest.fixture
def planted(user_home, origin_home, monkeypatch):
    """Every adapter's fixtures with CANARY, archived, forgotten, then copied and rewritten."""
    paths = plant(user_home, monkeypatch)
    with origin.open_store(origin_home) as s:
        report = origin.sync(s)
        assert not report.problems
        gone = forget_every_event_holding(s, CANARY)
        sources = {s.conn.execute("SELECT source FROM event WHERE id = ?", (e,)).fetchone()[0] for e in gone}
        assert sources == set(LAYOUTS), sources  # the text reached the store through every adapter
        # Copies after the forget: the transcript under another project (same
        # uuids), and a chat history rewrite that opens a new generation.
        other = user_home / ".claude" / "projects" / "-path-to-Copy"
        other.mkdir()
        shutil.copy(paths["demo"], other / DEMO)
        lines = paths["chat"].read_text(encoding="utf-8").splitlines(keepends=True)
        paths["chat"].write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")
        origin.sync(s)
        paths["gone"] = gone
    return paths


def test_grep_finds_a_purged_text_nowhere_under_origin_home(planted, origin_home, cli):
    found = grep(origin_home)
    # Before the purge the forgotten text is on disk: mirrors of every kind,
    # the generation a rewrite left behind, the store (or its WAL).
    mirrors = [f for f in found if "/raw/" in f]
    for part in ("claude-code/", "-path-to-Copy", "codex/", ZST[:-4], "cursor/", "zcode/", "grok/", "claude-memory/"):
        assert any(part in f for f in mirrors), (part, mirrors)
    assert any(".g1" in f for f in mirrors)  # the chat history's second generation
    assert any(Path(f).name.startswith(origin.DB_NAME) for f in found)

    code, res = cli("purge", "--yes", "--json")
    assert code == 0, res
    assert res["done"] and res["complete"] and res["events"] >= len(planted["gone"])
    assert grep(origin_home) == []
    assert not grep(origin_home, "I'll analyze the codebase")  # the line it shared with other words went too


def test_invariant_2_purge_leaves_no_forgotten_events_id_of_any_agent(planted, origin_home, cli):
    # Cursor's, ZCode's, Grok chat histories' and Claude memory notes' ids are
    # hashes of the text, Codex's of the whole line: none may stay in any file.
    gone = planted["gone"]
    made_of_text = [e for e in gone if e.split(":", 1)[0] in ("cursor", "zcode", "grok", "claude-memory", "codex")]
    assert {e.split(":", 1)[0] for e in made_of_text} == {"cursor", "zcode", "grok", "claude-memory", "codex"}
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    data = b"\0".join(p.read_bytes() for p in sorted(origin_home.rglob("*")) if p.is_file())
    assert [e for e in gone if e.encode() in data] == []
    # A record's other events stay visible; their ids `<id>#<n>` begin
    # with the forgotten one's (a Grok record's hash covers its every text),
    # so they are keyed alike and still read back by the ids they had.
    assert b"claude-code:purge-shared#1" not in data
    with origin.open_store(origin_home) as s:
        for e in gone:  # still forgotten, by the keyed id that stands for it
            assert origin.excluded_by(s.conn, e) is not None
            with pytest.raises(origin.Forgotten):
                origin.get_event(s, e)
        assert origin.get_event(s, "claude-code:purge-shared#1")["provenance"]["raw_withheld"]
        assert origin.plan_forget(s, "claude-code:purge-shared#1")["events"]  # it can still be forgotten by it
        assert origin.sync(s).events_added == 0


def test_purge_preview_counts_and_changes_no_byte(planted, origin_home, cli):
    before = files_digest(origin_home)
    code, out = cli("purge")
    assert code == 1
    assert "forgotten event" in out and "run again with --yes" in out
    code, res = cli("purge", "--json")
    assert code == 1 and res["done"] is False and res["events"] >= len(planted["gone"])
    assert res["mirrors_to_read"] > 0 and not res["nothing_to_do"]
    assert files_digest(origin_home) == before


def test_after_a_purge_later_syncs_bring_nothing_back_and_appends_keep_their_generation(planted, origin_home, cli):
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    with origin.open_store(origin_home) as s:
        gens = s.conn.execute("SELECT count(*) FROM raw_file").fetchone()[0]
        assert origin.sync(s).events_added == 0
        # A small append: the tail window of the rewritten mirror holds the
        # placeholder, the source still holds the forgotten line.  The
        # cursor's hashes come from the source, so no new generation opens
        # and the forgotten bytes are not mirrored again.
        with open(planted["demo"], "a", encoding="utf-8") as fh:
            fh.write(_claude_line("after-purge", "A later note about the docs folder."))
        report = origin.sync(s)
        assert report.sources["claude-code"]["events_added"] == 2
        assert s.conn.execute("SELECT count(*) FROM raw_file").fetchone()[0] == gens
        assert origin.get_event(s, "claude-code:after-purge")["text"] == "A later note about the docs folder."
        # The next sync checks the file against those hashes.
        with open(planted["demo"], "a", encoding="utf-8") as fh:
            fh.write(_claude_line("after-purge-2", "One more note."))
        assert origin.sync(s).sources["claude-code"]["events_added"] == 2
        assert s.conn.execute("SELECT count(*) FROM raw_file").fetchone()[0] == gens
    assert grep(origin_home) == []


def test_every_event_left_still_reads_back_its_line_after_a_purge(planted, origin_home, cli):
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    with origin.open_store(origin_home) as s:
        rows = s.conn.execute(
            "SELECT e.id, e.line, e.span, e.offset, r.mirror, r.path, r.kind, r.compression, r.generation "
            "FROM event e JOIN raw_file r ON r.id = e.raw_file_id "
            "WHERE NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)").fetchall()
        assert len(rows) > 500
        withheld = 0
        for r in rows:
            ev = origin.get_event(s, r["id"])
            if ev["provenance"].get("raw_withheld"):
                withheld += 1
                (src,) = origin.raw_sources(s, r["id"])
                assert src["raw"] is None and src["text"] == ev["text"]
                continue
            lines = [read_line(origin_home / r["mirror"], r["line"] + k) for k in range(r["span"])]
            assert origin.read_raw(s, r["mirror"], r["offset"], r["span"]).encode() == b"\n".join(lines)
            newest = s.conn.execute("SELECT max(generation) FROM raw_file WHERE path = ?", (r["path"],)).fetchone()[0]
            if r["kind"] == "log" and r["generation"] == newest:  # an older generation's source was rewritten
                source = decompressed(r["path"], r["compression"]).split(b"\n")
                assert lines == source[r["line"] - 1: r["line"] - 1 + r["span"]]
        # The neighbours of the purged lines only (the OpenCode message whose
        # answer held the canary also holds its reasoning, on the same line).
        assert 1 <= withheld <= 11
        neighbour = origin.get_event(s, "claude-code:purge-shared#1")
        assert neighbour["kind"] == "tool_call" and neighbour["provenance"]["raw_withheld"]
        assert origin.search(s, CANARY.split()[2], include_tools=True) == {"entries": [], "events": []}


def test_purge_is_audited_counts_only_and_a_second_run_has_nothing_to_do(planted, origin_home, cli):
    log = (origin_home / origin.TOMBSTONE_LOG).read_bytes()
    code, res = cli("purge", "--yes", "--json")
    assert code == 0
    with origin.open_store(origin_home) as s:
        # The log never held text: only the events' ids change, to their keyed ids.
        ring = origin.key_ring(s.conn)
        own = ring[origin._setting(s.conn, origin._OWN_KEY)]
        keyed = {e: origin.keyed_event_id(origin._setting(s.conn, origin._OWN_KEY), own, e) for e in planted["gone"]}
        before = [json.loads(line) for line in log.splitlines()]
        after = [json.loads(line) for line in (origin_home / origin.TOMBSTONE_LOG).read_bytes().splitlines()]
        assert after == [{**r, "events": [keyed[e] for e in r["events"]], "target": keyed[r["target"]]}
                         if r.get("type") == "tombstone" else r for r in before]
        (row,) = s.conn.execute("SELECT actor, action, channel, details FROM audit_log WHERE action = 'purge'")
        details = json.loads(row["details"])
        assert (row["actor"], row["channel"]) == ("user", "cli")
        assert details["events"] == res["events"] and details["lines"] == res["lines"] > 0
        assert CANARY not in row["details"]
        # Purge empties text: the one exception to append-only; the guards
        # are back afterwards.
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("UPDATE event SET text = 'x' WHERE id = ?", (keyed[planted["gone"][0]],))
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("DELETE FROM event WHERE id = ?", (keyed[planted["gone"][0]],))
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("DELETE FROM excluded_event WHERE event_id = ?", (keyed[planted["gone"][0]],))
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert s.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    code, out = cli("purge")
    assert code == 0 and "nothing to purge" in out
    code, res2 = cli("purge", "--yes", "--json")
    assert code == 0 and res2["events"] == 0 and res2["lines"] == 0


def test_a_reader_holding_the_store_open_leaves_the_purge_unfinished_until_run_again(planted, origin_home, cli):
    other = sqlite3.connect(origin_home / origin.DB_NAME, isolation_level=None)
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM event").fetchone()  # pins a snapshot of the old pages
    code, res = cli("purge", "--yes", "--json")
    assert code == 1 and res["complete"] is False
    assert any("another process" in p for p in res["problems"])
    other.execute("COMMIT")
    other.close()
    code, preview = cli("purge", "--json")
    assert preview["compaction_pending"] is True and preview["events"] == 0
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"] is True
    assert grep(origin_home) == []


def test_copies_that_arrive_after_a_purge_are_found_by_the_next_one(planted, user_home, origin_home, cli):
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"]
    # Codex moves the archived rollout, and the transcript is copied once
    # more: the text is back in new mirrors (still hidden from every read),
    # including a line no event comes from (the response_item Codex repeats
    # the prompt in), while the store no longer holds the text to look for.
    moved = user_home / ".codex" / "archived_sessions" / "2026"
    moved.mkdir()
    planted["zst"].rename(moved / planted["zst"].name)
    third = user_home / ".claude" / "projects" / "-path-to-Third"
    third.mkdir()
    shutil.copy(planted["demo"], third / DEMO)
    with origin.open_store(origin_home) as s:
        assert origin.sync(s).events_added == 0
        assert origin.search(s, "zq4471", include_tools=True)["events"] == []
    back = grep(origin_home)
    assert any(ZST[:-4] in f for f in back) and any("-path-to-Third" in f for f in back)
    code, preview = cli("purge", "--json")
    assert code == 1 and preview["events"] == 0 and preview["mirrors_to_read"] >= 2
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"] and res["lines"] >= 3
    assert grep(origin_home) == []


def test_a_purge_killed_before_its_commit_is_finished_by_the_next_run(planted, origin_home, cli, monkeypatch):
    leftover = origin_home / "raw" / "claude-code" / "left.jsonl.purging"
    leftover.write_bytes(b'{"origin":"purged"}\n')

    def killed(*a, **k):
        raise KeyboardInterrupt  # after the mirrors were swapped, before the commit

    with origin.open_store(origin_home) as s:
        with monkeypatch.context() as m:
            m.setattr(origin, "refresh_sessions", killed)
            with pytest.raises(KeyboardInterrupt):
                origin.purge(s)
        # The store rolled back: the texts are still there (hidden), the
        # mirrors already hold placeholders, every locator still reads back.
        assert s.conn.execute("SELECT count(*) FROM event WHERE instr(text, ?) > 0", (CANARY,)).fetchone()[0] > 0
        assert s.conn.execute("SELECT count(*) FROM purged_line").fetchone()[0] == 0
        assert not [f for f in grep(origin_home) if "/raw/" in f]
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"] and res["events"] >= len(planted["gone"])
    assert grep(origin_home) == []
    assert not leftover.exists()


def test_a_forgotten_entry_its_quote_and_its_index_leave_the_store(claude_root, origin_home, cli):
    statement = "Teal heron 5512: the archive keeps every session"
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        cited = s.conn.execute("SELECT id, text FROM event WHERE kind = 'message' AND role = 'assistant' "
                               "AND length(text) > 60 ORDER BY seq LIMIT 1").fetchone()
        quote = cited["text"][:40]
        ent = origin.remember(s, kind="memory", text=statement, author="user",
                              sources=[{"event": cited["id"], "quote": quote}])
        origin.forget(s, ent["id"], reason="purge test")
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert grep(origin_home, statement)  # the entry's text is still in the store's pages
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"] and res["entries"] == 1 and res["events"] == 1
    assert grep(origin_home, statement) == [] and grep(origin_home, quote) == []
    with origin.open_store(origin_home) as s:
        assert origin.search(s, "heron", history=True)["entries"] == []
        assert s.conn.execute("SELECT text FROM entry WHERE id = ?", (ent["id"],)).fetchone()[0] == ""
        assert s.conn.execute("SELECT quote FROM entry_source WHERE entry_id = ?", (ent["id"],)).fetchone()[0] is None
        with pytest.raises(origin.Forgotten):
            origin.get_entry(s, ent["id"])


# ---------------------------------------------------------------------------
# Issue 26: purge leaves nothing (each test failed on the code before it)
# ---------------------------------------------------------------------------

#: A fake GitHub token (the secret table masks it in every event).
KEY = "ghp_Q7vLx2Rk9TzW4mNc8Hb1Yd6Pf3Js5Ga0Ue2K"
PROMPT = f"Deploy the staging build with the token {KEY} and report back"


def _purge(cli) -> dict:
    code, res = cli("purge", "--yes", "--json")
    assert code == 0 and res["complete"], res
    return res


def test_invariant_2_a_secret_in_a_forgotten_prompt_leaves_every_copy_of_the_line(user_home, origin_home, cli):
    # Claude Code logs the prompt again in a queue-operation and a last-prompt
    # line; Codex repeats it in a response_item beside its user_message.  The
    # store keeps the prompt masked, so its masked text is in none of them.
    log = ClaudeLog(user_home, session="sess-key")
    log.user("u-1", PROMPT)
    log.records.insert(0, {"type": "queue-operation", "operation": "enqueue", "content": PROMPT,
                           "sessionId": "sess-key", "timestamp": "2026-01-05T09:00:00.000Z"})
    log.assistant("a-2", "Deploying the staging build now.")
    log.records.append({"type": "last-prompt", "sessionId": "sess-key", "lastPrompt": PROMPT, "leafUuid": "a-2"})
    log.write()
    src = FIXTURES / "codex" / "localpush" / "sessions" / "2026" / "02" / "23"
    name = "rollout-2026-02-23T12-41-04-019c8a4d-8f45-7010-8b5d-7fad920aa6f9.jsonl"
    rollout = user_home / ".codex" / "sessions" / "2026" / "02" / "23" / name
    rollout.parent.mkdir(parents=True)
    shutil.copy(src / name, rollout)
    for old in ("[REDACTED_TEXT len=115 sha=a83ebe6f]", "[REDACTED_MESSAGE len=115 sha=a83ebe6f]"):
        _replace_in(rollout, old, PROMPT)
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        gone = [r[0] for r in s.conn.execute("SELECT id FROM event WHERE instr(text, 'Deploy the staging') > 0")]
        assert sorted(g.split(":")[0] for g in gone) == ["claude-code", "codex"]
        assert s.conn.execute("SELECT count(*) FROM event WHERE instr(text, ?) > 0", (KEY,)).fetchone()[0] == 0
        for evid in gone:
            origin.forget(s, evid, reason="a token in the prompt")
    assert len([f for f in grep(origin_home, KEY) if "/raw/" in f]) == 2
    _purge(cli)
    assert grep(origin_home, KEY) == []
    assert grep(origin_home, "Deploy the staging build") == []
    with origin.open_store(origin_home) as s:  # the reply stays, and reads back its line
        (src_line,) = origin.raw_sources(s, "claude-code:a-2")
        assert "Deploying the staging build now." in src_line["raw"]


def test_invariant_2_a_torn_copy_of_a_forgotten_line_is_purged_too(user_home, origin_home, cli):
    # A crash mid-write left the first part of the line; the agent wrote the
    # whole line after it, and the next record glued to another torn part.
    text = "Marigold courier 6620 takes the east gate keys on Friday"
    log = ClaudeLog(user_home, session="sess-torn")
    log.user("u-1", "Who collects the keys?")
    log.assistant("a-2", text)
    log.assistant("a-3", "Anything else for the courier?")
    lines = log.lines(compact=True)
    cut = lines[1].index("east gate")
    body = [lines[0], lines[1][:cut], lines[1], lines[1][:cut - 20] + lines[2], lines[2]]
    log.path.parent.mkdir(parents=True, exist_ok=True)
    log.path.write_text("".join(x + "\n" for x in body), encoding="utf-8")
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        assert s.conn.execute("SELECT count(*) FROM parse_error").fetchone()[0] == 2
        origin.forget(s, "claude-code:a-2")
    assert grep(origin_home, "Marigold courier")
    _purge(cli)
    assert grep(origin_home, "Marigold courier") == []
    assert grep(origin_home, "Anything else for the courier?")  # the next reply's own line stays


def test_invariant_2_purge_drops_a_standing_entrys_quote_meta_titles_and_title_lines(user_home, origin_home, cli):
    log = ClaudeLog(user_home, session="sess-quote")
    log.user("u-1", "Where does the heron ledger live?")
    log.assistant("a-2", "The heron ledger lives in the cobalt vault under row 8812.")
    log.records.append({"type": "ai-title", "sessionId": "sess-quote", "aiTitle": "Cobalt vault heron ledger"})
    log.records.append({"type": "custom-title", "sessionId": "sess-quote",
                        "customTitle": "heron ledger lives in the cobalt vault under row 8812"})
    log.write()
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        keep = origin.remember(s, kind="knowledge", text="Ledgers are kept in vaults.", author="user",
                               sources=[{"event": "claude-code:a-2", "quote": "lives in the cobalt vault"},
                                        {"event": "claude-code:u-1"}])
        other = origin.remember(s, kind="memory", text="The heron ledger location was asked about.",
                                author="user", sources=[{"event": "claude-code:a-2"}])
        origin.forget(s, other["id"])
        assert origin.get_entry(s, keep["id"])["status"] == "active"
        # Grok keeps the title summary.json gave (often the first prompt
        # word for word) with the file's facts, for pushes.
        rid = s.conn.execute("SELECT raw_file_id FROM event WHERE id = 'claude-code:a-2'").fetchone()[0]
        with origin.transaction(s.conn):
            s.conn.execute("INSERT OR REPLACE INTO raw_meta (raw_file_id, meta) VALUES (?, ?)",
                           (rid, json.dumps({"title": "Cobalt vault heron ledger", "title_rank": 2})))
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert grep(origin_home, "cobalt vault")
    res = _purge(cli)
    assert grep(origin_home, "cobalt vault") == [] and grep(origin_home, "Cobalt vault") == []
    assert res["quotes"] == 1
    with origin.open_store(origin_home) as s:
        assert origin.get_entry(s, keep["id"])["status"] == "active"
        assert json.loads(s.conn.execute("SELECT meta FROM raw_meta").fetchone()[0]) == {}
        assert origin.sync(s).events_added == 0
        assert "cobalt" not in json.dumps(origin.timeline(s, since=0)).casefold()


def test_invariant_2_purge_reads_mirrors_no_store_row_owns(user_home, origin_home, cli):
    # origin.db was lost while raw/ was kept: the next sync mirrored the
    # transcript again beside the old mirror, which no row owns any more.
    log = ClaudeLog(user_home, session="sess-orphan")
    log.user("u-1", "Note the saffron hinge code 3391 for the shed.")
    log.assistant("a-2", "Noted.")
    log.write()
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    for p in origin_home.glob(origin.DB_NAME + "*"):
        p.unlink()
    # A hub keeps a device's mirrors under raw/devices/<device>/<source>/.
    (old,) = (origin_home / "raw" / "claude-code").rglob("sess-orphan.jsonl")
    hub_copy = origin_home / "raw" / "devices" / "laptop" / old.relative_to(origin_home / "raw")
    hub_copy.parent.mkdir(parents=True)
    shutil.copy(old, hub_copy)
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        mirrors = [r[0] for r in s.conn.execute("SELECT mirror FROM raw_file WHERE source = 'claude-code'")]
        assert mirrors and all(m.endswith("~2") for m in mirrors)
        origin.forget(s, "claude-code:u-1")
    assert len([f for f in grep(origin_home, "saffron hinge") if "/raw/" in f]) == 3
    code, preview = cli("purge", "--json")
    assert preview["mirrors_to_read"] == 3
    _purge(cli)
    assert grep(origin_home, "saffron hinge") == []
    assert len([f for f in grep(origin_home, "Noted.") if "/raw/" in f]) == 3  # the rest of each stays
