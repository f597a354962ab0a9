"""Pure tests of the Cursor and ZCode adapters: discovery, export, parsing.

Nothing here needs ``origin``: ``export_parse`` and ``parse_log`` below play
the ingest engine's part.  The real Cursor databases of
``tests/fixtures/cursor/`` are checked against what sqlite3 and json read
from them directly; the ZCode database, transcripts and cursor-agent store
are made here (no public sample exists).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

import adapters
from adapters import Context, Record, SessionInfo, SourceFile
from zcode_made_here import LIVE, MAIN, SUB, build_old_zcode_db, build_zcode_db, complete_live_answer

FIXTURES = Path(__file__).with_name("fixtures") / "cursor"
WORKSPACE_DB = FIXTURES / "slevin48-workspace" / "state.vscdb"
GLOBAL_DB = FIXTURES / "urpg-global" / "state.vscdb"
TRANSCRIPTS = FIXTURES / "agent-sessions"
#: Later than every fixture, so all their conversations are quiet.
NOW = 1_900_000_000_000
CHATDATA = "workbench.panel.aichat.view.aichat.chatdata"
HELLO_COMPOSER = "03ddeba4-e704-40e5-a8a3-19223801e5ae"
TOKEN = "tok-planted-4c1d9e7a2b"

###############################################################################
# A stand-in for the ingest engine ############################################
###############################################################################


def export_parse(adapter, f: SourceFile, known: dict | None = None, now: int = NOW):
    """Export like ingest does, then parse each line; return (tuples, records, infos, state)."""
    out = list(adapter.export(f, dict(known or {}), now))
    state: dict = {}
    records, infos = [], []
    for lineno, (_key, _digest, line) in enumerate(out, 1):
        assert "\n" not in line and line == line.strip()
        for item in adapter.parse(line, Context(f, state, lineno=lineno)):
            (infos if isinstance(item, SessionInfo) else records).append(item)
    return out, records, infos, state


def parse_log(adapter, f: SourceFile, mtime_ms: int = NOW, flush: bool = True):
    """Feed a log file's non-blank lines to parse as ingest does; return (records, infos, state)."""
    state: dict = {}
    items = []
    offset = 0
    ctx = Context(f, state, mtime_ms=mtime_ms)
    for lineno, raw in enumerate(Path(f.path).read_bytes().split(b"\n")[:-1], 1):
        ctx.lineno, ctx.offset = lineno, offset
        offset += len(raw) + 1
        if raw.strip():
            items += adapter.parse(raw.decode("utf-8"), ctx)
    if flush:
        items += adapter.flush(ctx)
    return ([i for i in items if isinstance(i, Record)], [i for i in items if isinstance(i, SessionInfo)], state)


def state_db(path: Path, store: str = "global", **meta) -> SourceFile:
    return SourceFile(str(path), path.name, kind="db", meta={"store": store, **meta})


def messages(records) -> Counter:
    return Counter((r.session, r.role, r.text) for r in records if r.kind == "message")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_db(src: Path, tmp_path: Path, name: str = "state.vscdb") -> Path:
    dst = tmp_path / "copy" / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


###############################################################################
# Cursor state.vscdb ##########################################################
###############################################################################


def expected_workspace_messages() -> Counter:
    """Read the legacy tabs and inline composers of the workspace fixture directly."""
    conn = sqlite3.connect(f"file:{WORKSPACE_DB}?mode=ro", uri=True)
    try:
        chat = json.loads(conn.execute("SELECT value FROM ItemTable WHERE key = ?", (CHATDATA,)).fetchone()[0])
        comps = json.loads(conn.execute("SELECT value FROM ItemTable WHERE key = 'composer.composerData'")
                           .fetchone()[0])
    finally:
        conn.close()
    want = Counter()
    for tab in chat["tabs"]:
        for b in tab["bubbles"]:
            if b["text"].strip():
                want[(tab["tabId"], {"user": "user", "ai": "assistant"}[b["type"]], b["text"])] += 1
    for comp in comps["allComposers"]:
        for b in comp.get("conversation", []):
            if b["text"].strip():
                want[(comp["composerId"], {1: "user", 2: "assistant"}[b["type"]], b["text"])] += 1
    return want


def global_bubbles(path: Path = GLOBAL_DB) -> dict[str, dict]:
    """Return the bubbleId rows of a global database, decoded, by key."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT key, value FROM cursorDiskKV WHERE key LIKE 'bubbleId:%'").fetchall()
    finally:
        conn.close()
    return {k: json.loads(v) for k, v in rows if v is not None}


def test_cursor_workspace_events_match_its_tabs_and_inline_composers():
    out, records, infos, state = export_parse(adapters.Cursor(), state_db(WORKSPACE_DB, "workspace", folder="/c/mobilechat"))
    assert messages(records) == expected_workspace_messages()
    assert sum(messages(records).values()) == 44 + 82  # 5 empty draft bubbles are not events
    assert all(r.cwd == "/c/mobilechat" for r in records)
    assert {r.model for r in records if r.role == "assistant" and r.session == "2aa483d1-573c-4039-ae4e-7415e28d2605"} \
        == {"claude-3.5-sonnet"}
    titles = {i.session: i.title for i in infos}
    assert titles["2aa483d1-573c-4039-ae4e-7415e28d2605"] == "Ionic App Sidebar Customization Guide"
    assert titles["484448da-b049-4d46-b17a-4a3eaf473ad0"] == "for the messages of the copilot:"
    assert len(titles) == 5 + 26
    assert all(r.ts is not None and r.ts_approx for r in records)  # these bubbles carry no time of their own
    assert state.get("unknown", 0) == 0


def ai_prompts(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [p["text"] for p in json.loads(conn.execute(
            "SELECT value FROM ItemTable WHERE key = 'aiService.prompts'").fetchone()[0]) if p.get("text")]
    finally:
        conn.close()


def test_cursor_prompt_history_is_archived_as_user_messages(tmp_path):
    """Repro: a workspace state.vscdb holding its prompts in aiService.prompts gave 0 events."""
    db = copy_db(WORKSPACE_DB, tmp_path)
    conn = sqlite3.connect(db)
    # The same era's database once its chat tabs and composers are gone: only the history is left.
    conn.execute("DELETE FROM ItemTable WHERE key IN (?, ?)", (CHATDATA, "composer.composerData"))
    conn.execute("INSERT INTO ItemTable VALUES ('aiService.generations', ?)", (json.dumps([
        {"unixMs": 1_700_000_123_000, "generationUUID": "g1", "type": "composer",
         "textDescription": ai_prompts(WORKSPACE_DB)[3]},
        {"unixMs": 1_700_000_456_000, "generationUUID": "g2", "type": "cmdk",
         "textDescription": "rename the sidebar component"}]),))
    conn.commit()
    conn.close()
    f = state_db(db, "workspace", folder="/c/mobilechat")
    out, records, infos, _ = export_parse(adapters.Cursor(), f)
    prompts = ai_prompts(WORKSPACE_DB)
    assert Counter(r.text for r in records) == Counter(prompts + ["rename the sidebar component"])
    assert all((r.kind, r.role, r.indexed, r.cwd) == ("message", "user", True, "/c/mobilechat") for r in records)
    session = f"prompts:{db.parent.name}"
    assert {r.session for r in records} == {session}
    assert [i.title for i in infos if i.session == session] == ["Cursor prompt history (mobilechat)"]
    timed = {r.text: (r.ts, r.ts_approx) for r in records if not r.ts_approx}
    assert timed == {prompts[3]: (1_700_000_123_000, False), "rename the sidebar component": (1_700_000_456_000, False)}
    assert len({r.id for r in records}) == len(records)
    # Nothing else of ItemTable: every line is a session line or a prompt.
    assert {json.loads(line)["t"] for _, _, line in out} == {"session", "prompt"}
    # Exported once: a second export with the known map yields nothing.
    assert list(adapters.Cursor().export(f, {k: d for k, d, _ in out}, NOW)) == []


def test_cursor_prompt_history_is_deduplicated_against_the_bubbles():
    """The fixture's 66 history prompts all have a chat bubble: no prompt is archived twice."""
    _, records, _, _ = export_parse(adapters.Cursor(), state_db(WORKSPACE_DB, "workspace", folder="/c/mobilechat"))
    assert len(ai_prompts(WORKSPACE_DB)) == 66
    assert not [r for r in records if r.session.startswith("prompts:")]
    users = Counter(r.text for r in records if r.role == "user")
    assert all(users[adapters._user_text(p)] or users[p] for p in ai_prompts(WORKSPACE_DB))


def test_cursor_global_events_match_its_bubble_rows():
    out, records, infos, _ = export_parse(adapters.Cursor(), state_db(GLOBAL_DB))
    want_msgs, want_calls, want_results = Counter(), Counter(), Counter()
    for key, b in global_bubbles().items():
        session = key.split(":")[1]
        if b.get("text", "").strip():
            want_msgs[(session, {1: "user", 2: "assistant"}[b["type"]], b["text"])] += 1
        tool = b.get("toolFormerData") or {}
        if tool.get("name"):
            want_calls[(session, tool["name"])] += 1
            if tool.get("result"):
                want_results[session] += 1
    assert messages(records) == want_msgs
    assert Counter((r.session, r.text.split(" ", 1)[0]) for r in records if r.kind == "tool_call") == want_calls
    assert Counter(r.session for r in records if r.kind == "tool_result") == want_results
    assert sum(want_calls.values()) == 8 and len(records) == 31 + 8 + 8
    assert {i.session: i.title for i in infos if i.title} == {
        HELLO_COMPOSER: "Hello and greetings",
        "04fa7261-6802-4618-be42-7c4661b9821d": "Troubleshooting chat history access",
        "21bcf92c-5808-47db-8faa-d847cfad6512": "Issues with loading past chats",
    }
    # Assistant bubbles of this era carry wall-clock request times.
    exact = [r for r in records if not r.ts_approx]
    assert exact and all(1_757_000_000_000 < r.ts < 1_758_000_000_000 for r in exact)


@pytest.mark.parametrize("db, store", [(WORKSPACE_DB, "workspace"), (GLOBAL_DB, "global")])
def test_cursor_second_export_with_known_map_yields_nothing(db, store):
    adapter = adapters.Cursor()
    f = state_db(db, store)
    first = list(adapter.export(f, {}, NOW))
    assert first
    assert len({k for k, _, _ in first}) == len(first)
    assert list(adapter.export(f, {k: h for k, h, _ in first}, NOW)) == []


def touch_composer(conn: sqlite3.Connection, composer: str, updated: int) -> None:
    key = f"composerData:{composer}"
    comp = json.loads(conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (key,)).fetchone()[0])
    comp["lastUpdatedAt"] = updated
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (key, json.dumps(comp)))


def test_cursor_re_read_reads_no_bubble_value_of_an_unchanged_composer(tmp_path, monkeypatch):
    """Repro: a running Cursor's state.vscdb was fully re-hashed on every read (every bubble value)."""
    db = copy_db(GLOBAL_DB, tmp_path)
    adapter = adapters.Cursor()
    first = list(adapter.export(state_db(db), {}, NOW))
    known = {k: h for k, h, _ in first}
    read = []
    real = adapters._kv_range

    def counting(conn, prefix):
        for key, value in real(conn, prefix):
            read.append(key)
            yield key, value

    monkeypatch.setattr(adapters, "_kv_range", counting)
    assert list(adapter.export(state_db(db), known, NOW)) == []  # the file was touched, no chat changed
    assert not [k for k in read if k.startswith("bubbleId:")]
    # One composer moves on: only its bubbles are read again.
    read.clear()
    add_bubble(db, HELLO_COMPOSER, "b0000000-0000-4000-8000-00000000000a", "one more question", NOW - 600_000)
    out = list(adapter.export(state_db(db), known, NOW))
    assert [k for k, _, _ in out][0] == f"bubble:{HELLO_COMPOSER}:b0000000-0000-4000-8000-00000000000a"
    assert {k.split(":")[1] for k in read if k.startswith("bubbleId:")} == {HELLO_COMPOSER}


def add_bubble(db: Path, composer: str, bubble_id: str, text: str, updated: int) -> None:
    """Append a user bubble to a composer, as Cursor does when a chat goes on."""
    conn = sqlite3.connect(db)
    key = f"composerData:{composer}"
    comp = json.loads(conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (key,)).fetchone()[0])
    comp["fullConversationHeadersOnly"].append({"bubbleId": bubble_id, "type": 1})
    comp["lastUpdatedAt"] = updated
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (key, json.dumps(comp)))
    bubble = {"_v": 3, "type": 1, "bubbleId": bubble_id, "text": text, "richText": "", "codeBlocks": []}
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (f"bubbleId:{composer}:{bubble_id}", json.dumps(bubble)))
    conn.commit()
    conn.close()


def test_cursor_changed_composer_exports_only_its_new_bubbles(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    adapter = adapters.Cursor()
    first, before, _, _ = export_parse(adapter, state_db(db))
    known = {k: h for k, h, _ in first}
    add_bubble(db, HELLO_COMPOSER, "b0000000-0000-4000-8000-000000000001", "and what about tests?", NOW - 600_000)
    out, records, infos, _ = export_parse(adapter, state_db(db), known)
    # The new bubble, then the composer's session line: it marks what was read.
    assert [k for k, _, _ in out] == [f"bubble:{HELLO_COMPOSER}:b0000000-0000-4000-8000-000000000001",
                                      f"composer:{HELLO_COMPOSER}"]
    assert [(r.role, r.text) for r in records] == [("user", "and what about tests?")]
    assert records[0].id not in {r.id for r in before}


def test_cursor_rewritten_bubble_is_a_new_event_only_if_its_text_changed(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    adapter = adapters.Cursor()
    first, before, _, _ = export_parse(adapter, state_db(db))
    known = {k: h for k, h, _ in first}
    key = next(k for k, b in global_bubbles(db).items() if k.startswith(f"bubbleId:{HELLO_COMPOSER}:") and b["type"] == 2)
    conn = sqlite3.connect(db)
    bubble = json.loads(conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (key,)).fetchone()[0])
    bubble["tokenCount"] = {"inputTokens": 1, "outputTokens": 2}  # a change that says nothing new
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (key, json.dumps(bubble)))
    touch_composer(conn, HELLO_COMPOSER, NOW - 600_000)  # Cursor moves lastUpdatedAt with every change
    conn.commit()
    _, same, _, _ = export_parse(adapter, state_db(db), known)
    assert len(same) == 1 and same[0].id in {r.id for r in before}
    bubble["text"] = "Hello! (edited)"
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (key, json.dumps(bubble)))
    touch_composer(conn, HELLO_COMPOSER, NOW - 500_000)
    conn.commit()
    conn.close()
    _, changed, _, _ = export_parse(adapter, state_db(db), known)
    assert [r.text for r in changed] == ["Hello! (edited)"] and changed[0].id not in {r.id for r in before}


def test_cursor_waits_for_a_conversation_to_go_quiet(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    adapter = adapters.Cursor()
    first = list(adapter.export(state_db(db), {}, NOW))
    known = {k: h for k, h, _ in first}
    add_bubble(db, HELLO_COMPOSER, "b0000000-0000-4000-8000-000000000002", "still typing", NOW - 10_000)
    assert list(adapter.export(state_db(db), known, NOW)) == []
    later = NOW - 10_000 + adapters.DB_QUIET_MS
    assert [k.rsplit(":", 1)[1] for k, _, _ in adapter.export(state_db(db), known, later)] == [
        "b0000000-0000-4000-8000-000000000002", HELLO_COMPOSER]


def test_cursor_trusts_a_generating_flag_until_it_is_stale(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    conn = sqlite3.connect(db)
    key = f"composerData:{HELLO_COMPOSER}"
    comp = json.loads(conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (key,)).fetchone()[0])
    comp.update(generatingBubbleIds=["x"], lastUpdatedAt=NOW - 5 * 60_000)
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (key, json.dumps(comp)))
    conn.commit()
    conn.close()
    adapter = adapters.Cursor()
    sessions = lambda now: {k.split(":")[1] for k, _, _ in adapter.export(state_db(db), {}, now)}  # noqa: E731
    assert HELLO_COMPOSER not in sessions(NOW)
    assert HELLO_COMPOSER in sessions(NOW + adapters.DB_STUCK_MS)


def test_cursor_orphan_and_empty_bubbles():
    """Tool bubbles no header lists are archived; checkpoint-only ones are not events."""
    out, records, _, _ = export_parse(adapters.Cursor(), state_db(GLOBAL_DB))
    exported = {k.split(":", 2)[2] for k, _, _ in out if k.startswith("bubble:")}
    assert "ed211766-3672-4b52-86d1-12399bba4e76" in exported  # a codebase_search call, not in the headers
    assert "4b153b94-7e0d-4e11-8cf3-4931fd95a9dd" not in exported  # an assistant bubble with nothing in it
    calls = [r.text for r in records if r.kind == "tool_call"]
    assert any(c.startswith('grep {"output_mode":"files_with_matches"') for c in calls)


###############################################################################
# Read-only access ############################################################
###############################################################################


def listing(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("db, store", [(WORKSPACE_DB, "workspace"), (GLOBAL_DB, "global")])
def test_export_leaves_fixture_databases_byte_identical(db, store):
    before = listing(db.parent)
    assert list(adapters.Cursor().export(state_db(db, store), {}, NOW))
    assert listing(db.parent) == before  # same bytes, and no -wal, -shm or -journal left


def to_wal(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def test_wal_database_without_side_files_is_read_without_creating_any(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    to_wal(db)
    before = listing(db.parent)
    assert before.keys() == {"state.vscdb"}
    assert len(list(adapters.Cursor().export(state_db(db), {}, NOW))) == 42
    assert listing(db.parent) == before


def test_wal_database_of_a_running_agent_is_read_through_its_index(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    to_wal(db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO cursorDiskKV VALUES ('bubbleId:" + HELLO_COMPOSER
                   + ":b0000000-0000-4000-8000-000000000003', '{\"type\": 1, \"text\": \"from the WAL\"}')")
    writer.commit()
    try:
        before = listing(db.parent)
        assert {"state.vscdb-wal", "state.vscdb-shm"} <= before.keys()
        _, records, _, _ = export_parse(adapters.Cursor(), state_db(db))
        assert "from the WAL" in {r.text for r in records}
        after = listing(db.parent)
        assert after.keys() == before.keys()
        assert after["state.vscdb"] == before["state.vscdb"] and after["state.vscdb-wal"] == before["state.vscdb-wal"]
    finally:
        writer.close()


def test_wal_without_its_index_is_recovered_in_a_private_copy(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    to_wal(db)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO cursorDiskKV VALUES ('bubbleId:" + HELLO_COMPOSER
                   + ":b0000000-0000-4000-8000-000000000004', '{\"type\": 1, \"text\": \"only in the WAL\"}')")
    writer.commit()
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    shutil.copyfile(db, crashed / "state.vscdb")
    shutil.copyfile(db.with_name("state.vscdb-wal"), crashed / "state.vscdb-wal")  # the -shm is gone
    writer.close()
    before = listing(crashed)
    _, records, _, _ = export_parse(adapters.Cursor(), state_db(crashed / "state.vscdb"))
    assert "only in the WAL" in {r.text for r in records}
    assert listing(crashed) == before


def test_database_in_the_middle_of_a_write_is_read_as_before_it(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA cache_size=1")  # spill to the file before commit, as a big write does
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("UPDATE cursorDiskKV SET value = replace(value, 'hello', 'HALF-WRITTEN') "
                   "WHERE key LIKE 'bubbleId:%'")
    try:
        assert db.with_name("state.vscdb-journal").exists()
        _, records, _, _ = export_parse(adapters.Cursor(), state_db(db))
        texts = {r.text for r in records}
        assert "hello" in texts and not any("HALF-WRITTEN" in t for t in texts)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_unreadable_database_is_reported_and_a_missing_one_yields_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(adapters, "DB_RETRY_S", 0)
    junk = tmp_path / "state.vscdb"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(adapters.UnreadableSource, match="cannot read .*state.vscdb"):
        list(adapters.Cursor().export(state_db(junk), {}, NOW))
    assert list(adapters.ZCode().export(SourceFile(str(tmp_path / "gone.sqlite"), "x", kind="db"), {}, NOW)) == []


def test_busy_database_is_retried_then_reported(monkeypatch):
    monkeypatch.setattr(adapters, "DB_RETRY_S", 0)
    calls = []

    def busy_twice(db, reader):
        calls.append(db)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return "read"

    monkeypatch.setattr(adapters, "_read_db_once", busy_twice)
    monkeypatch.setattr(adapters, "DB_ATTEMPTS", 3)
    assert adapters.read_agent_db(str(GLOBAL_DB), lambda c: None) == "read"
    calls.clear()
    monkeypatch.setattr(adapters, "DB_ATTEMPTS", 2)
    with pytest.raises(adapters.UnreadableSource, match="database is locked"):
        adapters.read_agent_db(str(GLOBAL_DB), lambda c: None)
    assert len(calls) == 2


def test_cursor_never_reads_auth_tokens(tmp_path):
    global_db = copy_db(GLOBAL_DB, tmp_path, "global.vscdb")
    workspace_db = copy_db(WORKSPACE_DB, tmp_path, "workspace.vscdb")
    for db in (global_db, workspace_db):
        conn = sqlite3.connect(db)
        conn.executemany("INSERT INTO ItemTable VALUES (?, ?)", [
            ("cursorAuth/accessToken", TOKEN), ("cursorAuth/refreshToken", TOKEN + "-refresh"),
            ("cursorAuth/cachedEmail", "planted@example.invalid")])
        conn.commit()
        conn.close()
    lines = [line for db, store in ((global_db, "global"), (workspace_db, "workspace"))
             for _, _, line in adapters.Cursor().export(state_db(db, store), {}, NOW)]
    assert len(lines) > 100
    assert not any(TOKEN in line or "planted@example" in line or "cursorAuth" in line for line in lines)


###############################################################################
# Cursor discovery ############################################################
###############################################################################


def slug_of(path: Path) -> str:
    return path.as_posix().lstrip("/").replace("/", "-")


@pytest.fixture
def cursor_layout(tmp_path, user_home):
    """A User folder, a ~/.cursor with transcripts and a cursor-agent store."""
    project = tmp_path / "work" / "my-app"
    project.mkdir(parents=True)
    user = tmp_path / "Cursor" / "User"
    (user / "globalStorage").mkdir(parents=True)
    shutil.copyfile(GLOBAL_DB, user / "globalStorage" / "state.vscdb")
    shutil.copyfile(GLOBAL_DB, user / "globalStorage" / "state.vscdb.backup")
    ws = user / "workspaceStorage" / "5f1e0c"
    ws.mkdir(parents=True)
    (ws / "workspace.json").write_text(json.dumps({"folder": project.as_uri()}))
    conn = sqlite3.connect(ws / "state.vscdb")  # a 2025 workspace: it only lists its composers
    conn.execute("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    conn.execute("INSERT INTO ItemTable VALUES ('composer.composerData', ?)", (json.dumps(
        {"allComposers": [{"composerId": HELLO_COMPOSER, "name": "Hello and greetings"}]}),))
    conn.commit()
    conn.close()
    home = user_home / ".cursor"
    chats = home / "projects" / slug_of(project) / "agent-transcripts"
    parent = "6f9b1c2e-1111-4a4a-9b9b-000000000001"
    (chats / parent / "subagents").mkdir(parents=True)
    shutil.copyfile(TRANSCRIPTS / "subagent" / "parent.jsonl", chats / parent / f"{parent}.jsonl")
    shutil.copyfile(TRANSCRIPTS / "subagent" / "subagents" / "child.jsonl",
                    chats / parent / "subagents" / "6f9b1c2e-2222-4a4a-9b9b-000000000002.jsonl")
    shutil.copyfile(TRANSCRIPTS / "small.jsonl", chats / "6f9b1c2e-3333-4a4a-9b9b-000000000003.jsonl")
    (chats / "6f9b1c2e-4444-4a4a-9b9b-000000000004.txt").write_text(TXT_TRANSCRIPT)
    store = home / "chats" / hashlib.md5(project.as_posix().encode()).hexdigest() / "a9d1" / "store.db"
    make_agent_store(store)
    env = {"ORIGIN_CURSOR_USER_DIR": str(user)}
    return env, user_home, project, user


def test_cursor_discovers_every_store_and_skips_backups(cursor_layout):
    env, home, project, user = cursor_layout
    found = {f.rel: f for f in adapters.Cursor().discover(env, home)}
    assert set(found) == {
        "globalStorage/state.vscdb",
        "workspaceStorage/5f1e0c/state.vscdb",
        "projects/" + slug_of(project) + "/agent-transcripts/6f9b1c2e-1111-4a4a-9b9b-000000000001/"
        "6f9b1c2e-1111-4a4a-9b9b-000000000001.jsonl",
        "projects/" + slug_of(project) + "/agent-transcripts/6f9b1c2e-1111-4a4a-9b9b-000000000001/subagents/"
        "6f9b1c2e-2222-4a4a-9b9b-000000000002.jsonl",
        "projects/" + slug_of(project) + "/agent-transcripts/6f9b1c2e-3333-4a4a-9b9b-000000000003.jsonl",
        "projects/" + slug_of(project) + "/agent-transcripts/6f9b1c2e-4444-4a4a-9b9b-000000000004.txt",
        "chats/" + hashlib.md5(project.as_posix().encode()).hexdigest() + "/a9d1/store.db",
    }
    kinds = {rel.rsplit("/", 1)[1].rsplit(".", 1)[1]: f.kind for rel, f in found.items()}
    assert kinds == {"vscdb": "db", "jsonl": "log", "txt": "log", "db": "db"}
    ws = found["workspaceStorage/5f1e0c/state.vscdb"]
    assert ws.meta == {"store": "workspace", "folder": project.as_posix()}
    store = next(f for f in found.values() if f.rel.startswith("chats/"))
    assert store.meta["cwd"] == project.as_posix()
    child = next(f for f in found.values() if "subagents" in f.rel)
    assert child.meta == {"session": "6f9b1c2e-2222-4a4a-9b9b-000000000002", "cwd": project.as_posix(),
                          "parent": "6f9b1c2e-1111-4a4a-9b9b-000000000001", "format": "jsonl"}
    assert all(Path(f.path).is_absolute() for f in found.values())


def test_cursor_global_composer_takes_the_folder_of_the_workspace_listing_it(cursor_layout):
    env, home, project, _ = cursor_layout
    files = {f.rel: f for f in adapters.Cursor().discover(env, home)}
    _, records, infos, _ = export_parse(adapters.Cursor(), files["globalStorage/state.vscdb"])
    assert {r.cwd for r in records if r.session == HELLO_COMPOSER} == {project.as_posix()}
    assert {r.cwd for r in records if r.session != HELLO_COMPOSER} == {None}
    _, _, ws_infos, _ = export_parse(adapters.Cursor(), files["workspaceStorage/5f1e0c/state.vscdb"])
    assert [(i.session, i.cwd) for i in ws_infos] == [(HELLO_COMPOSER, project.as_posix())]


def test_cursor_default_roots_follow_the_platform(tmp_path):
    home = tmp_path / "h"
    roots = adapters.Cursor().roots({"APPDATA": str(tmp_path / "Roaming")}, home)
    assert home / ".config" / "Cursor" / "User" in roots
    assert home / "Library" / "Application Support" / "Cursor" / "User" in roots
    assert tmp_path / "Roaming" / "Cursor" / "User" in roots
    assert home / ".cursor" in roots
    custom = adapters.Cursor().roots({"ORIGIN_CURSOR_USER_DIR": "/a,/b", "ORIGIN_CURSOR_HOME": "/c"}, home)
    assert custom == [Path("/a"), Path("/b"), Path("/c")]


###############################################################################
# Cursor agent transcripts ####################################################
###############################################################################

TXT_TRANSCRIPT = """user:
<user_query>
Why does the build fail?
</user_query>

assistant:
[Thinking] The error names a missing module.
The build fails because left-pad is missing.
[Tool call] Shell
  command: npm install left-pad
  working_directory: /home/dev/app
[Tool result] Shell
added 1 package in 2s

assistant:
Installed it; the build passes now.
user:
<timestamp>2026-01-10T09:30:00Z</timestamp>
<user_query>
Thanks!
</user_query>
A:
You're welcome.
"""


def transcript(path: Path, fmt: str, **meta) -> SourceFile:
    return SourceFile(str(path), path.name, meta={"session": meta.pop("session", "s-1"), "format": fmt, **meta})


def test_cursor_jsonl_transcript_events_with_approximate_times():
    f = transcript(TRANSCRIPTS / "small.jsonl", "jsonl", cwd="/w/app")
    records, infos, state = parse_log(adapters.Cursor(), f, mtime_ms=1_771_000_000_000)
    assert [(r.kind, r.role, r.text, r.indexed) for r in records] == [
        ("message", "user", "List the files.", True),
        ("message", "assistant", "Here are the files.", True),
        ("message", "user", "Run ls.", True),
        ("message", "assistant", "Running ls.", True),
        ("tool_call", "assistant", 'Bash {"command":"ls"}', True),
        ("meta", "system", "turn ended: success", False),
    ]
    assert all(r.ts == 1_771_000_000_000 and r.ts_approx and r.cwd == "/w/app" for r in records)
    assert len({r.id for r in records}) == len(records)
    assert [(i.session, i.cwd) for i in infos] == [("s-1", "/w/app")]
    assert state.get("unknown", 0) == 0


def test_cursor_transcripts_of_a_folder_not_on_disk_take_the_project_from_the_slug(tmp_path, user_home):
    gone = tmp_path / "elsewhere" / "src" / "shop"  # never made: moved, deleted, or of another machine
    chats = user_home / ".cursor" / "projects" / slug_of(gone) / "agent-transcripts"
    chats.mkdir(parents=True)
    shutil.copyfile(TRANSCRIPTS / "small.jsonl", chats / "6f9b1c2e-5555-4a4a-9b9b-000000000005.jsonl")
    (chats / "6f9b1c2e-6666-4a4a-9b9b-000000000006.txt").write_text(TXT_TRANSCRIPT)
    found = sorted(adapters.Cursor().discover({}, user_home), key=lambda f: f.path)
    assert [f.meta for f in found] == [
        {"session": "6f9b1c2e-5555-4a4a-9b9b-000000000005", "project": "shop", "format": "jsonl"},
        {"session": "6f9b1c2e-6666-4a4a-9b9b-000000000006", "project": "shop", "format": "txt"},
    ]
    for f in found:
        records, _, _ = parse_log(adapters.Cursor(), f)
        assert records and {(r.project, r.cwd) for r in records} == {("shop", None)}
    assert adapters._cursor_slug_name("home-me-src-app") == "app"
    assert adapters._cursor_slug_name("--") is None


def test_cursor_subagent_transcript_names_its_parent():
    f = transcript(TRANSCRIPTS / "subagent" / "subagents" / "child.jsonl", "jsonl", session="child-1",
                   parent="parent-1")
    records, infos, _ = parse_log(adapters.Cursor(), f)
    assert [r.text for r in records] == ["List files", "file1.txt\nfile2.txt"]
    assert [(i.session, i.parent) for i in infos] == [("child-1", "parent-1")]
    parent, _, _ = parse_log(adapters.Cursor(), transcript(TRANSCRIPTS / "subagent" / "parent.jsonl", "jsonl"))
    assert parent[-1].kind == "tool_call" and parent[-1].text == 'Agent {"prompt":"List files"}'


def test_cursor_jsonl_timestamp_tag_wins_and_query_tags_are_dropped(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"role": "user", "message": {"content": [{"type": "text", "text":
              "<timestamp>2026-02-16T15:04:05Z</timestamp>\n<user_query>\nFix the flaky test\n</user_query>"}]}},
             {"role": "assistant", "message": {"content": [{"type": "thinking", "thinking": "[REDACTED]"},
                                                           {"type": "text", "text": "Fixed."}]}},
             {"role": "narrator", "message": {"content": "?"}}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    records, _, state = parse_log(adapters.Cursor(), transcript(path, "jsonl"), mtime_ms=NOW)
    user, thinking, answer = records  # in the order of the content blocks
    assert (user.text, user.ts, user.ts_approx) == ("Fix the flaky test", 1_771_254_245_000, False)
    assert (thinking.indexed, thinking.role, thinking.ts_approx) == (False, "assistant", True)
    assert answer.ts == 1_771_254_245_000 and answer.ts_approx  # the last known time, not the mtime
    assert state["unknown"] == 1


def test_cursor_txt_transcript_blocks(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TXT_TRANSCRIPT)
    records, infos, state = parse_log(adapters.Cursor(), transcript(path, "txt"), mtime_ms=1_767_000_000_000)
    assert [(r.kind, r.role, r.text, r.indexed, r.line, r.span) for r in records] == [
        ("message", "user", "Why does the build fail?", True, 1, 4),
        ("message", "assistant", "The error names a missing module.", False, 7, 1),
        ("message", "assistant", "The build fails because left-pad is missing.", True, 8, 1),
        ("tool_call", "assistant", "Shell command: npm install left-pad\n  working_directory: /home/dev/app",
         True, 9, 3),
        ("tool_result", "tool", "added 1 package in 2s", True, 12, 2),
        ("message", "assistant", "Installed it; the build passes now.", True, 15, 2),
        ("message", "user", "Thanks!", True, 17, 5),
        ("message", "assistant", "You're welcome.", True, 22, 2),
    ]
    offsets = [len("".join(TXT_TRANSCRIPT.splitlines(keepends=True)[: r.line - 1]).encode()) for r in records]
    assert [r.offset for r in records] == offsets
    assert [r.ts_approx for r in records] == [True] * 6 + [False, True]
    assert records[6].ts == records[7].ts == 1_768_037_400_000
    assert records[0].ts == 1_767_000_000_000


def test_cursor_txt_last_block_waits_for_flush(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TXT_TRANSCRIPT)
    records, _, state = parse_log(adapters.Cursor(), transcript(path, "txt"), flush=False)
    assert records[-1].text == "Thanks!"
    assert state["block"]["lines"] == ["You're welcome."]
    json.dumps(state)  # the open block persists with the cursor


def test_same_message_in_transcript_and_state_db_gets_the_same_id(tmp_path):
    _, db_records, _, _ = export_parse(adapters.Cursor(), state_db(GLOBAL_DB))
    hello = [r for r in db_records if r.session == HELLO_COMPOSER]
    path = tmp_path / f"{HELLO_COMPOSER}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [
        {"role": "user", "message": {"content": [{"type": "text", "text": "<user_query>\nhello\n</user_query>"}]}},
        {"role": "assistant", "message": {"content": [{"type": "text", "text": hello[1].text}]}},
    ]))
    records, _, _ = parse_log(adapters.Cursor(), transcript(path, "jsonl", session=HELLO_COMPOSER))
    assert [r.id for r in records] == [r.id for r in hello]


def test_repeated_text_in_one_session_gets_distinct_ids(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(('{"role": "user", "message": {"content": "continue"}}\n') * 3)
    records, _, _ = parse_log(adapters.Cursor(), transcript(path, "jsonl"))
    assert len({r.id for r in records}) == 3


###############################################################################
# cursor-agent store.db (made here) ###########################################
###############################################################################

AGENT_ID = "a9d1c3e5-0000-4000-8000-00000000a9d1"


def agent_messages() -> list[dict]:
    return [
        {"id": "1", "role": "system", "content": "You are a coding agent."},
        {"id": "2", "role": "user", "content": [{"type": "text", "text":
                                                  "<user_info>OS linux</user_info>\n<user_query>rename foo to bar</user_query>"}]},
        {"id": "3", "role": "assistant", "content": [
            {"type": "reasoning", "text": "A plain rename."}, {"type": "text", "text": "Renaming."},
            {"type": "tool-call", "toolCallId": "t1", "toolName": "edit", "args": {"path": "a.py"}}]},
        {"id": "4", "role": "tool", "content": [
            {"type": "tool-result", "toolCallId": "t1", "toolName": "edit", "result": "1 file changed"}]},
        {"id": "5", "role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]


def make_agent_store(path: Path, mtime_ms: int = NOW - 3_600_000) -> Path:
    """Write a cursor-agent store.db as the CLI lays it out: hex meta, JSON and protobuf blobs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("CREATE TABLE blobs (id TEXT PRIMARY KEY, data BLOB)")
    meta = {"agentId": AGENT_ID, "latestRootBlobId": "f" * 64, "name": "Rename foo", "mode": "default",
            "createdAt": NOW - 7_200_000, "lastUsedModel": "gpt-5"}
    conn.execute("INSERT INTO meta VALUES ('0', ?)", (json.dumps(meta).encode().hex(),))
    blobs = [json.dumps(m).encode() for m in agent_messages()] + [b"\x0a\x20" + bytes(range(32))]
    for data in blobs:
        conn.execute("INSERT INTO blobs VALUES (?, ?)", (hashlib.sha256(data).hexdigest(), data))
    conn.commit()
    conn.close()
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return path


def agent_file(path: Path) -> SourceFile:
    return SourceFile(str(path), "store.db", kind="db", meta={"store": "agent", "agent": "a9d1", "cwd": "/w/app"})


def test_cursor_agent_store_messages_become_events(tmp_path):
    f = agent_file(make_agent_store(tmp_path / "store.db"))
    out, records, infos, state = export_parse(adapters.Cursor(), f)
    assert [(r.kind, r.role, r.text, r.indexed) for r in records] == [
        ("message", "system", "You are a coding agent.", False),
        ("message", "user", "rename foo to bar", True),
        ("message", "assistant", "A plain rename.", False),
        ("message", "assistant", "Renaming.", True),
        ("tool_call", "assistant", 'edit {"path":"a.py"}', True),
        ("tool_result", "tool", "1 file changed", True),
        ("message", "assistant", "Done.", True),
    ]
    assert all(r.session == AGENT_ID and r.cwd == "/w/app" and r.ts_approx for r in records)
    assert [(i.session, i.title, i.model) for i in infos] == [(AGENT_ID, "Rename foo", "gpt-5")]
    assert state["unknown"] == 1  # the protobuf blob, kept raw in its line
    raw = json.loads(out[-1][2])
    assert base64.b64decode(raw["raw"]) == b"\x0a\x20" + bytes(range(32))
    assert list(adapters.Cursor().export(f, {k: h for k, h, _ in out}, NOW)) == []


def test_cursor_agent_store_waits_until_the_chat_is_quiet(tmp_path):
    f = agent_file(make_agent_store(tmp_path / "store.db", mtime_ms=NOW - 5_000))
    assert list(adapters.Cursor().export(f, {}, NOW)) == []
    assert list(adapters.Cursor().export(f, {}, NOW + adapters.DB_QUIET_MS))


###############################################################################
# ZCode (database made here) ##################################################
###############################################################################


@pytest.fixture
def zcode_home(user_home):
    """~/.zcode with the made-here database and planted secrets beside it."""
    root = user_home / ".zcode"
    build_zcode_db(root / "cli" / "db" / "db.sqlite", NOW)
    (root / "cli" / "config.json").write_text(json.dumps(
        {"provider": {"zai": {"options": {"apiKey": TOKEN}}}, "hooks": {}}))
    (root / "v2").mkdir()
    (root / "v2" / "credentials.json").write_text(json.dumps({"zai": {"apiKey": TOKEN + "-v2"}}))
    return root


def zcode_file(zcode_home: Path) -> SourceFile:
    files = list(adapters.ZCode().discover({}, zcode_home.parent))
    assert [f.rel for f in files] == ["cli/db/db.sqlite"]
    return files[0]


def test_zcode_events_hidden_reasoning_and_tools(zcode_home):
    out, records, infos, state = export_parse(adapters.ZCode(), zcode_file(zcode_home))
    by_id = {r.id.split(":")[0] + ":" + r.kind: r for r in records}
    assert by_id["prt_01a:message"].text == "Why is the checkout total off by a cent?"
    assert not by_id["prt_02a:message"].indexed  # hidden system reminder: archived only
    assert not by_id["prt_03b:message"].indexed  # reasoning
    assert by_id["prt_03d:tool_call"].text == 'bash {"command":"grep -rn round src/"}'
    assert by_id["prt_03d:tool_result"].text == "src/money.py:12:    return round(total, 2)"
    assert by_id["prt_03f:tool_result"].text == "File not found: src/totals.py"
    assert by_id["prt_03g:message"].model == "glm-4.6" and by_id["prt_01a:message"].model is None
    assert all(r.cwd == "/home/dev/shop" and not r.ts_approx for r in records)
    assert Counter(r.kind for r in records) == {"message": 10, "tool_call": 3, "tool_result": 3}
    assert state["unknown"] == 1  # the hologram part
    assert len({r.id for r in records}) == len(records)


def test_zcode_sub_agent_session_names_its_parent(zcode_home):
    _, records, infos, _ = export_parse(adapters.ZCode(), zcode_file(zcode_home))
    info = {i.session: i for i in infos}
    assert info[SUB].parent == MAIN and info[MAIN].parent is None
    assert (info[MAIN].title, info[MAIN].agent_version, info[MAIN].cwd) == (
        "Fix checkout total rounding", "0.14.8", "/home/dev/shop")
    assert info[LIVE].title_rank < info[MAIN].title_rank  # a placeholder title yields to a real one
    assert {r.text for r in records if r.session == SUB} == {"Find every rounding helper in src/",
                                                            "Found round_money in src/money.py"}


def test_zcode_streaming_message_waits_until_completed(zcode_home):
    f = zcode_file(zcode_home)
    out, records, _, _ = export_parse(adapters.ZCode(), f)
    keys = {k for k, _, _ in out}
    assert "msg:msg_08" in keys and "msg:msg_09" not in keys  # the prompt is final, the answer streams
    known = {k: h for k, h, _ in out}
    assert list(adapters.ZCode().export(f, known, NOW)) == []
    complete_live_answer(Path(f.path), NOW)
    again, new, infos, _ = export_parse(adapters.ZCode(), f, known)
    assert [k for k, _, _ in again] == [f"session:{LIVE}", "msg:msg_09"]
    assert [r.text for r in new] == ["Writing the test now: tests/test_money.py checks 0.1 + 0.2."]
    assert infos[0].title == "Add a rounding test"


def test_zcode_aborted_answer_is_exported_once_the_session_is_quiet(zcode_home):
    f = zcode_file(zcode_home)
    keys = {k for k, _, _ in adapters.ZCode().export(f, {}, NOW + adapters.DB_QUIET_MS)}
    assert "msg:msg_09" in keys


def test_zcode_older_schema_without_sequence_times_or_sessions(tmp_path):
    db = build_old_zcode_db(tmp_path / "db.sqlite", NOW)
    out, records, infos, _ = export_parse(adapters.ZCode(), SourceFile(str(db), "db.sqlite", kind="db"))
    assert infos == [] and {k.split(":")[0] for k, _, _ in out} == {"msg"}
    assert "msg:msg_09" not in {k for k, _, _ in out}
    texts = [r.text for r in records if r.session == MAIN and r.kind == "message" and r.indexed]
    assert texts == ["Why is the checkout total off by a cent?", "Let me look at how totals are rounded.",
                     "Totals are summed as floats; switching to Decimal fixes the cent.",
                     "Use Decimal everywhere in money.py.", "Done: money.py now uses Decimal and the totals match."]


def test_zcode_never_reads_its_api_keys(zcode_home):
    files = list(adapters.ZCode().discover({}, zcode_home.parent))
    lines = [line for f in files for _, _, line in adapters.ZCode().export(f, {}, NOW)]
    assert lines and not any(TOKEN in line for line in lines)
    assert not any("config.json" in f.path or "credentials.json" in f.path for f in files)


def test_zcode_database_is_left_untouched(zcode_home):
    folder = zcode_home / "cli" / "db"
    before = listing(folder)
    assert list(adapters.ZCode().export(zcode_file(zcode_home), {}, NOW))
    assert listing(folder) == before


def test_zcode_override_dir(tmp_path):
    root = tmp_path / "elsewhere"
    build_zcode_db(root / "cli" / "db" / "db.sqlite", NOW)
    files = list(adapters.ZCode().discover({"ORIGIN_ZCODE_HOME": str(root)}, tmp_path / "nohome"))
    assert [(f.path, f.kind) for f in files] == [(str(root / "cli" / "db" / "db.sqlite"), "db")]


###############################################################################
# Hostile input ###############################################################
###############################################################################

HOSTILE = ["[]", "42", '"text"', "{", '{"t": "bubble"}', '{"t": "bubble", "session": "s", "bubble": []}',
           '{"t": "bubble", "session": "s", "bubble": {"type": 2, "toolFormerData": {"name": 5, "tool": true}}}',
           '{"t": "blob", "session": "s", "message": {"role": "user", "content": {"x": 1}}}',
           '{"t": "message", "session": "s", "data": [], "parts": [1, null, {"id": 3}]}',
           '{"t": "message", "session": "s", "data": {"role": "assistant"}, "parts": [{"id": "p", "data": '
           '{"type": "tool", "state": {"status": "completed", "output": {"deep": [[[]]]}}}}]}',
           '{"role": "user", "message": {"content": [{"type": "text", "text": 7}, "x", null]}}',
           '{"ts": ' + "9" * 500 + ', "t": "bubble", "session": "s", "bubble": {"type": 1, "text": "x"}}',
           "[" * 5000 + "]" * 5000]


@pytest.mark.parametrize("line", HOSTILE)
@pytest.mark.parametrize("adapter, f", [
    (adapters.Cursor(), SourceFile("/x/state.vscdb", "state.vscdb", kind="db", meta={"store": "global"})),
    (adapters.Cursor(), SourceFile("/x/t.jsonl", "t.jsonl", meta={"session": "s", "format": "jsonl"})),
    (adapters.Cursor(), SourceFile("/x/t.txt", "t.txt", meta={"session": "s", "format": "txt"})),
    (adapters.ZCode(), SourceFile("/x/db.sqlite", "db.sqlite", kind="db")),
])
def test_hostile_lines_raise_only_parse_errors(adapter, f, line):
    state: dict = {}
    try:
        out = adapter.parse(line, Context(f, state, lineno=1))
    except adapters.ParseError:
        return
    assert all(isinstance(i, (Record, SessionInfo)) for i in out)
    assert all(i.ts is None or abs(i.ts) < 1 << 63 for i in out if isinstance(i, Record))  # fits SQLite
    json.dumps(state)


def test_lone_surrogates_and_line_separators_survive_export(tmp_path):
    db = copy_db(GLOBAL_DB, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO cursorDiskKV VALUES (?, ?)", (
        f"bubbleId:{HELLO_COMPOSER}:b0000000-0000-4000-8000-000000000005",
        '{"type": 1, "text": "half \\ud800 pair\\u2028next\\u0085line"}'))
    conn.commit()
    conn.close()
    out, records, _, _ = export_parse(adapters.Cursor(), state_db(db))
    line = next(line for key, _, line in out if key.endswith("000000000005"))
    line.encode("utf-8")
    assert line.splitlines() == [line]
    assert "half \ufffd pair\u2028next\x85line" in {r.text for r in records}


def test_rels_stay_unique_across_default_user_dirs(user_home):
    for base in (".config/Cursor/User", "Library/Application Support/Cursor/User"):
        (user_home / base / "globalStorage").mkdir(parents=True)
        shutil.copyfile(GLOBAL_DB, user_home / base / "globalStorage" / "state.vscdb")
    rels = sorted(f.rel for f in adapters.Cursor().discover({}, user_home))
    assert rels == [".config/Cursor/User/globalStorage/state.vscdb",
                    "Library/Application Support/Cursor/User/globalStorage/state.vscdb"]


###############################################################################
# OpenCode ####################################################################
###############################################################################

OPENCODE = Path(__file__).with_name("fixtures") / "opencode"
OPENCODE_DB = OPENCODE / "lantern-sqlite" / "opencode.db"
OPENCODE_LEGACY = OPENCODE / "lantern-legacy-json"
OPENCODE_V2 = OPENCODE / "agent-sessions-v2"


def opencode_files(*roots: Path) -> list[SourceFile]:
    return list(adapters.OpenCode().discover({"ORIGIN_OPENCODE_HOME": ",".join(map(str, roots))}, Path("/nonexistent")))


def test_opencode_database_sessions_messages_reasoning_and_tools():
    (f,) = opencode_files(OPENCODE_DB.parent)
    out, recs, infos, state = export_parse(adapters.OpenCode(), f)
    conn = sqlite3.connect(f"file:{OPENCODE_DB}?mode=ro&immutable=1", uri=True)
    sessions = dict(conn.execute("SELECT id, title FROM session"))
    conn.close()
    assert {i.session: i.title for i in infos} == sessions
    assert all(i.cwd == "/work" and i.agent_version == "1.18.13" for i in infos)
    assert state == {}  # nothing unknown
    users = [r.text for r in recs if r.role == "user"]
    assert users[0] == '"What does average_item_price do? One sentence."'
    assert len(users) == 3
    (call,) = [r for r in recs if r.kind == "tool_call"]
    (result,) = [r for r in recs if r.kind == "tool_result"]
    assert call.text.startswith("write ") and "average_item_price" in call.text and call.id.startswith("prt_")
    assert result.text == "Wrote file successfully." and result.ts >= call.ts
    thinking = [r for r in recs if r.kind == "message" and not r.indexed]
    assert len(thinking) == 4 and all(t.role == "assistant" and t.model == "qwen3:0.6b" for t in thinking)
    # The second read of an unchanged database exports nothing.
    assert list(adapters.OpenCode().export(f, {k: d for k, d, _ in out}, NOW)) == []


def test_opencode_database_is_left_untouched_and_channel_databases_are_found(tmp_path):
    root = tmp_path / "opencode"
    root.mkdir()
    shutil.copyfile(OPENCODE_DB, root / "opencode.db")
    shutil.copyfile(OPENCODE_DB, root / "opencode-beta.db")
    (root / "other.db").write_bytes(b"")
    before = listing(root)
    files = opencode_files(root)
    assert [f.rel for f in files] == ["opencode-beta.db", "opencode.db"]
    for f in files:
        assert list(adapters.OpenCode().export(f, {}, NOW))
    assert listing(root) == before


def test_opencode_legacy_tree_reads_every_message_shape():
    files = {f.rel: f for f in opencode_files(OPENCODE_LEGACY)}
    assert sorted(files) == ["storage/session/prj_infra/ses_02.json", "storage/session/prj_legacy/ses_03.json",
                             "storage/session/prj_orders/ses_01.json"]
    _, recs, infos, state = export_parse(adapters.OpenCode(), files["storage/session/prj_orders/ses_01.json"])
    assert [(i.title, i.cwd) for i in infos] == [("Empty carts 500", "/home/demo/orders-api")]
    texts = [(r.kind, r.role, r.text) for r in recs]
    assert ("message", "user", "The orders endpoint 500s on empty carts") in texts
    assert ("tool_call", "assistant", 'grep {"pattern":"def create_order"}') in texts
    assert ("tool_result", "tool", "app/orders.py:42:def create_order(cart):") in texts
    assert ("tool_call", "assistant", 'shell {"command":"pytest -k empty_cart"}') in texts  # a `!` command
    assert not any("cut off" in r.text for r in recs)  # the half-written file waits
    _, recs, _, state = export_parse(adapters.OpenCode(), files["storage/session/prj_infra/ses_02.json"])
    assert [r.text for r in recs] == ["Why did the nightly deploy stall?", "The lock file was held by a cancelled job."]
    assert state == {"unknown": 1}  # the part type no version knows is counted
    _, recs, _, _ = export_parse(adapters.OpenCode(), files["storage/session/prj_legacy/ses_03.json"])
    (call,) = [r for r in recs if r.kind == "tool_call"]
    assert call.ts == 1784100001000  # the part's duration counter is no time


def test_opencode_legacy_sub_agent_and_synthetic_text(tmp_path):
    files = {f.rel: f for f in opencode_files(OPENCODE_V2)}
    _, recs, infos, _ = export_parse(adapters.OpenCode(), files["storage/session/proj_test/ses_s_stage0_large.json"])
    assert infos[0].cwd == "/tmp/large" and infos[0].agent_version == "1.3.17"
    synthetic = next(r for r in recs if r.text == "Command failed with exit code 1.")
    assert not synthetic.indexed
    # A sub-agent session names its parent.
    storage = tmp_path / "oc" / "storage"
    shutil.copytree(OPENCODE_V2 / "storage", storage)
    small = storage / "session" / "proj_test" / "ses_s_stage0_small.json"
    small.write_text(json.dumps({**json.loads(small.read_text()), "parentID": "s_stage0_large"}))
    f = next(f for f in opencode_files(tmp_path / "oc") if f.path == str(small))
    _, _, infos, _ = export_parse(adapters.OpenCode(), f)
    assert infos[0].parent == "s_stage0_large"


###############################################################################
# Goose #######################################################################
###############################################################################

GOOSE = Path(__file__).with_name("fixtures") / "goose"
GOOSE_DB = GOOSE / "lantern" / "sessions.db"
GOOSE_LEGACY = GOOSE / "deja-vu-legacy" / "20250724_1.jsonl"


@pytest.fixture
def goose_root(tmp_path) -> Path:
    root = tmp_path / "goose"
    (root / "sessions").mkdir(parents=True)
    shutil.copyfile(GOOSE_DB, root / "sessions" / "sessions.db")
    shutil.copyfile(GOOSE_LEGACY, root / "sessions" / GOOSE_LEGACY.name)
    return root


def goose_files(root: Path) -> dict[str, SourceFile]:
    return {f.rel: f for f in adapters.Goose().discover({"ORIGIN_GOOSE_HOME": str(root)}, Path("/nonexistent"))}


def test_goose_discovers_the_database_and_the_legacy_sessions(goose_root, tmp_path):
    files = goose_files(goose_root)
    assert sorted(files) == ["sessions/20250724_1.jsonl", "sessions/sessions.db"]
    assert files["sessions/sessions.db"].kind == "db" and files["sessions/20250724_1.jsonl"].kind == "log"
    home = tmp_path / "home"
    (home / ".local" / "share" / "goose" / "sessions").mkdir(parents=True)
    shutil.copyfile(GOOSE_DB, home / ".local" / "share" / "goose" / "sessions" / "sessions.db")
    assert [f.rel for f in adapters.Goose().discover({}, home)] == ["sessions/sessions.db"]
    assert [f.rel for f in adapters.Goose().discover({"GOOSE_PATH_ROOT": str(tmp_path / "gp")}, home)] == []


def test_goose_database_sessions_messages_joined_reasoning_and_tools(goose_root):
    before = listing(goose_root / "sessions")
    out, recs, infos, state = export_parse(adapters.Goose(), goose_files(goose_root)["sessions/sessions.db"])
    assert listing(goose_root / "sessions") == before  # read from a snapshot, nothing written beside it
    assert state == {}
    assert [(i.session, i.title, i.cwd, i.model) for i in infos] == [
        ("20260805_1", "What does average_item_price do?", "/work", "qwen3:0.6b"),
        ("20260805_2", "Division by Zero on Empty Cart", "/work", "qwen3:0.6b"),
        ("20260805_3", "Cart Empty Average Price", "/work", "qwen3:0.6b"),
        ("20260805_4", "Read file with absolute path", "/work", "qwen3:0.6b")]
    conn = sqlite3.connect(f"file:{GOOSE_DB}?mode=ro&immutable=1", uri=True)
    rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    conn.close()
    assert len([k for k, _, _ in out if k.startswith("msg:")]) == rows == 22
    first = next(r for r in recs if r.kind == "message" and not r.indexed)
    assert first.text.startswith("Okay, the user is asking what average_item_price does.")  # one part per token, joined
    calls = [r for r in recs if r.kind == "tool_call"]
    results = [r for r in recs if r.kind == "tool_result"]
    assert len(calls) == len(results) == 8
    assert {c.id[:-2] for c in calls} == {r.id[:-2] for r in results}  # each result joins its call
    assert results[0].text.startswith("error: -32002: Tool 'average_item_price' not found")
    assert [r.text for r in recs if r.role == "user"][0] == "What does average_item_price do? One sentence."
    assert all(r.ts and r.cwd == "/work" for r in recs)
    assert list(adapters.Goose().export(goose_files(goose_root)["sessions/sessions.db"],
                                        {k: d for k, d, _ in out}, NOW)) == []


def test_goose_newest_message_of_a_live_session_waits(goose_root):
    f = goose_files(goose_root)["sessions/sessions.db"]
    updated = 1785965633000  # the last session's updated_at, 2026-08-05 21:33:53 UTC
    keys = [k for k, _, _ in adapters.Goose().export(f, {}, updated + 1000)]
    assert "msg:22" not in keys and "msg:21" in keys
    keys = [k for k, _, _ in adapters.Goose().export(f, {}, updated + adapters.DB_QUIET_MS)]
    assert "msg:22" in keys


def test_goose_rewritten_conversation_adds_only_what_is_new(goose_root):
    f = goose_files(goose_root)["sessions/sessions.db"]
    out, recs, _, _ = export_parse(adapters.Goose(), f)
    ids = {r.id for r in recs}
    # Compaction replaces a session's rows: the same messages come back under new row ids.
    conn = sqlite3.connect(goose_root / "sessions" / "sessions.db")
    conn.execute("INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, metadata_json) "
                 "SELECT message_id, session_id, role, content_json, created_timestamp, metadata_json FROM messages "
                 "WHERE session_id = '20260805_1'")
    conn.execute("DELETE FROM messages WHERE session_id = '20260805_1' AND id <= 4")
    conn.commit()
    conn.close()
    again, recs2, _, _ = export_parse(adapters.Goose(), f, {k: d for k, d, _ in out})
    assert len(again) == 4 and {r.id for r in recs2} <= ids


def test_goose_legacy_jsonl_session(goose_root):
    recs, infos, state = parse_log(adapters.Goose(), goose_files(goose_root)["sessions/20250724_1.jsonl"], flush=False)
    assert [(i.session, i.title, i.cwd) for i in infos] == [("20250724_1", "Synthetic Goose session", "/workspace/demo")]
    assert [(r.role, r.text, r.ts) for r in recs] == [("user", "Say hello", 1784278801000),
                                                      ("assistant", "Hello from Goose!", 1784278802000)]
    assert all(r.cwd == "/workspace/demo" for r in recs)
