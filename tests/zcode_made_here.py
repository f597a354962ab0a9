"""A ZCode session database made here, from the documented schema.

No real ZCode database is public, so the tests build one: the OpenCode-style
``session``/``message``/``part`` tables with JSON ``data`` columns, as
described for ZCode 3.10 (CLI database 0.14.8), plus the usage tables real
installs have and the adapter ignores.  Everything in it is invented.

What it holds (times relative to ``now_ms``):

* ``sess_main`` "Fix checkout total rounding", in /home/dev/shop:
  a user prompt, a hidden system reminder (transcriptVisibility "hidden"),
  an assistant answer with step-start, reasoning, text, a bash tool call,
  a task tool call that spawned the sub-agent, a read that failed,
  step-finish and a part type nobody knows yet; then a second prompt and a
  short completed answer.
* ``sess_sub``, a sub-agent of ``sess_main`` (``parent_id``), with its own
  prompt and answer.
* ``sess_live``, still running: a prompt sent two minutes ago and an answer
  streaming now, with no completed time.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

MAIN, SUB, LIVE = "sess_main", "sess_sub", "sess_live"

SCHEMA = """
CREATE TABLE session (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL, workspace_id TEXT, parent_id TEXT,
    slug TEXT, directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL,
    share_url TEXT, task_type TEXT, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL,
    time_archived INTEGER
);
CREATE TABLE message (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL
);
CREATE INDEX message_session_idx ON message (session_id);
CREATE TABLE part (
    id TEXT PRIMARY KEY, message_id TEXT NOT NULL REFERENCES message(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL, sequence INTEGER NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL, data TEXT NOT NULL
);
CREATE INDEX part_message_idx ON part (message_id);
CREATE TABLE todos (session_id TEXT NOT NULL, content TEXT NOT NULL, status TEXT NOT NULL, position INTEGER);
CREATE TABLE model_usage (
    id INTEGER PRIMARY KEY, session_id TEXT, model_id TEXT, input_tokens INTEGER, output_tokens INTEGER,
    cache_read_tokens INTEGER, cache_write_tokens INTEGER, time_created INTEGER
);
"""

#: The same tables as an older build might have them: no part sequence, no
#: message times, no session table at all.
OLD_SCHEMA = """
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, data TEXT NOT NULL);
"""

VISIBLE = {"origin": "user", "kind": "user_prompt", "uiVisibility": "visible",
           "providerVisibility": "visible", "transcriptVisibility": "visible"}
HIDDEN = {"origin": "system", "kind": "system_reminder", "uiVisibility": "hidden",
          "providerVisibility": "visible", "transcriptVisibility": "hidden"}
MODEL = {"providerID": "zai", "modelID": "glm-4.6"}


def _user(created: int, semantics: dict = VISIBLE) -> dict:
    return {"role": "user", "time": {"created": created}, "agent": "build", "model": MODEL,
            "semantics": semantics}


def _assistant(created: int, completed: int | None, parent: str) -> dict:
    time = {"created": created} | ({"completed": completed} if completed else {})
    return {"role": "assistant", "time": time, "parentID": parent, "modelID": "glm-4.6", "providerID": "zai",
            "model": MODEL, "mode": "build", "path": {"cwd": "/home/dev/shop", "root": "/home/dev/shop"},
            "cost": 0, "tokens": {"input": 5120, "output": 310, "reasoning": 42, "cache": {"read": 4096, "write": 0}},
            "finish": "stop" if completed else None, "semantics": {**VISIBLE, "origin": "model", "kind": "reply"}}


def _text(text: str, start: int, **extra) -> dict:
    return {"type": "text", "text": text, "time": {"start": start, "end": start + 800}, **extra}


def _tool(tool: str, call: str, state: dict) -> dict:
    return {"type": "tool", "callID": call, "tool": tool, "state": state}


def messages(now_ms: int) -> list[tuple[str, str, dict, list[tuple[str, dict]]]]:
    """Return (message id, session id, data, [(part id, part data)]) in order."""
    t = now_ms - 3_600_000  # the finished sessions ran an hour ago
    done = lambda s, e: {"start": s, "end": e}  # noqa: E731
    return [
        ("msg_01", MAIN, _user(t), [("prt_01a", _text("Why is the checkout total off by a cent?", t))]),
        ("msg_02", MAIN, _user(t + 10, HIDDEN),
         [("prt_02a", _text("<system-reminder>Plan mode is off.</system-reminder>", t + 10, synthetic=True))]),
        ("msg_03", MAIN, _assistant(t + 1000, t + 9000, "msg_01"), [
            ("prt_03a", {"type": "step-start", "snapshot": "4b825dc6"}),
            ("prt_03b", {"type": "reasoning", "text": "The total is summed from floats; look at the money helpers.",
                         "time": done(t + 1100, t + 1500)}),
            ("prt_03c", _text("Let me look at how totals are rounded.", t + 1600)),
            ("prt_03d", _tool("bash", "call_1", {
                "status": "completed", "input": {"command": "grep -rn round src/"},
                "output": "src/money.py:12:    return round(total, 2)", "title": "grep -rn round src/",
                "metadata": {"exit": 0}, "time": done(t + 2000, t + 2300)})),
            ("prt_03e", _tool("task", "call_2", {
                "status": "completed", "input": {"description": "Find rounding helpers", "prompt": "Find every "
                                                 "rounding helper in src/", "subagent_type": "explore"},
                "output": "Found round_money in src/money.py", "metadata": {"sessionId": SUB},
                "time": done(t + 2400, t + 6000)})),
            ("prt_03f", _tool("read", "call_3", {
                "status": "error", "input": {"filePath": "src/totals.py"}, "error": "File not found: src/totals.py",
                "time": done(t + 6100, t + 6150)})),
            ("prt_03g", _text("Totals are summed as floats; switching to Decimal fixes the cent.", t + 7000)),
            ("prt_03h", {"type": "step-finish", "reason": "stop", "cost": 0,
                         "tokens": {"input": 5120, "output": 310, "reasoning": 42}}),
            ("prt_03i", {"type": "hologram", "beam": 3}),
        ]),
        ("msg_04", MAIN, _user(t + 20_000), [("prt_04a", _text("Use Decimal everywhere in money.py.", t + 20_000))]),
        ("msg_05", MAIN, _assistant(t + 21_000, t + 30_000, "msg_04"),
         [("prt_05a", _text("Done: money.py now uses Decimal and the totals match.", t + 29_000))]),
        ("msg_06", SUB, _user(t + 2500), [("prt_06a", _text("Find every rounding helper in src/", t + 2500))]),
        ("msg_07", SUB, _assistant(t + 2600, t + 5900, "msg_06"),
         [("prt_07a", _text("Found round_money in src/money.py", t + 5800))]),
        ("msg_08", LIVE, _user(now_ms - 120_000), [("prt_08a", _text("Add a test for the rounding.", now_ms - 120_000))]),
        ("msg_09", LIVE, _assistant(now_ms - 110_000, None, "msg_08"),
         [("prt_09a", _text("Writing the te", now_ms - 5_000))]),
    ]


def build_zcode_db(path: Path, now_ms: int) -> Path:
    """Write the made-here database to path (WAL mode, cleanly closed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    t = now_ms - 3_600_000
    sessions = [
        (MAIN, "prj_shop", None, "/home/dev/shop", "Fix checkout total rounding", t, t + 30_000),
        (SUB, "prj_shop", MAIN, "/home/dev/shop", "Find rounding helpers (@explore subagent)", t + 2400, t + 6000),
        (LIVE, "prj_shop", None, "/home/dev/shop", "New session - 2026-11-02T10:00:00.000Z", now_ms - 120_000,
         now_ms - 5_000),
    ]
    for sid, project, parent, directory, title, created, updated in sessions:
        conn.execute("INSERT INTO session (id, project_id, parent_id, directory, title, version, time_created, "
                     "time_updated) VALUES (?, ?, ?, ?, ?, '0.14.8', ?, ?)",
                     (sid, project, parent, directory, title, created, updated))
    for mid, sid, data, parts in messages(now_ms):
        created = data["time"]["created"]
        conn.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (mid, sid, created, created, json.dumps(data)))
        for seq, (pid, pdata) in enumerate(parts):
            conn.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (pid, mid, sid, seq, created, created, json.dumps(pdata)))
    conn.execute("INSERT INTO todos VALUES (?, 'Switch totals to Decimal', 'completed', 0)", (MAIN,))
    conn.execute("INSERT INTO model_usage VALUES (1, ?, 'glm-4.6', 5120, 310, 4096, 0, ?)", (MAIN, t))
    conn.commit()
    conn.close()
    return path


def build_old_zcode_db(path: Path, now_ms: int) -> Path:
    """Write the same messages in the older shape: no sequence, no times, no sessions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    for mid, sid, data, parts in messages(now_ms):
        conn.execute("INSERT INTO message VALUES (?, ?, ?)", (mid, sid, json.dumps(data)))
        for pid, pdata in parts:
            conn.execute("INSERT INTO part VALUES (?, ?, ?)", (pid, mid, json.dumps(pdata)))
    conn.commit()
    conn.close()
    return path


def complete_live_answer(path: Path, now_ms: int) -> None:
    """Finish the streaming answer of sess_live, as ZCode would."""
    conn = sqlite3.connect(path)
    data = _assistant(now_ms - 110_000, now_ms - 1_000, "msg_08")
    conn.execute("UPDATE message SET data = ?, time_updated = ? WHERE id = 'msg_09'", (json.dumps(data), now_ms))
    part = _text("Writing the test now: tests/test_money.py checks 0.1 + 0.2.", now_ms - 5_000)
    conn.execute("UPDATE part SET data = ?, time_updated = ? WHERE id = 'prt_09a'", (json.dumps(part), now_ms))
    conn.execute("UPDATE session SET title = 'Add a rounding test', time_updated = ? WHERE id = ?", (now_ms, LIVE))
    conn.commit()
    conn.close()
