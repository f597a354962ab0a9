"""True times: a session's own times over a file's mtime, and guessed times never passing for precise ones.

A Grok session copied or restored has files with the mtime of the copy; its
``summary.json`` still says when it happened.  Guessed times are marked in
JSON (``time_approximate``) and with "~" in text output, and a session's
place in the timeline comes from its precise times whenever it has any.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import adapters
import origin
from conftest import FIXTURES

GROK_CHAT = FIXTURES / "grok" / "agent-sessions"
GROK_CHAT_ID = "019f6851-7ec4-7ef0-97d3-03f3eee38755"
CREATED = adapters.parse_ts("2026-07-31T10:13:27.574131Z")
UPDATED = adapters.parse_ts("2026-07-31T10:15:02.118940Z")


def copied_grok(user_home: Path) -> Path:
    """Copy the real Grok session into ~/.grok as a restore would: every mtime is now."""
    dest = user_home / ".grok" / "sessions" / "%2Ftmp%2Fas-agent-lab" / GROK_CHAT_ID
    dest.mkdir(parents=True)
    for name in ("chat_history.jsonl", "summary.json"):
        shutil.copy(GROK_CHAT / name, dest / name)
    old = time.time() - 3600  # quiet, so the sync settles it; still months after the session
    for p in dest.iterdir():
        os.utime(p, (old, old))
    return dest


def test_grok_events_take_the_sessions_times_not_the_copys(user_home, store, cli):
    """Repro: every Grok event showed the moment the files were copied and landed in the 7-day timeline."""
    copied_grok(user_home)
    origin.sync(store, sources=["grok"])
    rows = store.conn.execute("SELECT ts, ts_approx FROM event WHERE session = ? ORDER BY seq",
                              (GROK_CHAT_ID,)).fetchall()
    assert rows and rows[0]["ts"] == CREATED and rows[-1]["ts"] == UPDATED
    assert all(r["ts_approx"] for r in rows)
    # The session sits where it happened in the timeline, not at the copy.
    after = origin.timeline(store, since=UPDATED + 1)
    assert GROK_CHAT_ID not in {s["session"] for s in after["sessions"]}
    around = origin.timeline(store, since=CREATED - 1, until=UPDATED + 1)
    (s,) = [s for s in around["sessions"] if s["session"] == GROK_CHAT_ID]
    assert s["time_approximate"] is True
    # Guessed times are marked in JSON and, visibly, in text output.
    code, res = cli("timeline", "--session", GROK_CHAT_ID, "--json")
    assert code == 0 and all(e["time_approximate"] for e in res["events"])
    code, out = cli("timeline", "--session", GROK_CHAT_ID)
    lines = [line for line in out.splitlines() if line.startswith("  ") and not line.strip().startswith("grok:")]
    assert lines and all(line.lstrip().startswith("~2026-07-31") for line in lines)
    code, out = cli("timeline", "--since", "2026-07-30", "--until", "2026-08-01")
    assert any(line.startswith("~2026-07-31") for line in out.splitlines())
    code, out = cli("search", "hello.py", "--source", "grok")
    assert code == 0 and "~2026-07-31" in out


def test_a_guessed_time_never_stretches_a_sessions_precise_window(user_home, store):
    """Precise times decide a session's window; a guessed one (later, here) is not taken for one."""
    folder = user_home / ".grok" / "sessions" / "%2Ftmp%2Fp" / "S1"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"info": {"id": "S1", "cwd": "/tmp/p"},
                                                     "created_at": "2026-09-01T00:00:00Z"}))

    def update(kind: str, text: str, event: str, ms: int | None) -> dict:
        meta = {"eventId": event, **({"agentTimestampMs": ms} if ms else {})}
        return {"method": "session/update", "params": {"sessionId": "S1", "update": {
            "sessionUpdate": kind, "content": {"type": "text", "text": text}}, "_meta": meta}}

    lines = [update("user_message_chunk", "a prompt without a time", "e1", None),
             update("agent_message_chunk", "an answer at a known time", "e2", 1_785_000_000_000),
             update("user_message_chunk", "a second prompt, timed", "e3", 1_785_000_100_000),
             update("agent_message_chunk", "done", "e4", 1_785_000_200_000)]
    (folder / "updates.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    old = time.time() - 3600
    for p in folder.iterdir():
        os.utime(p, (old, old))
    origin.sync(store, sources=["grok"])
    guessed = store.conn.execute("SELECT ts, ts_approx FROM event WHERE text = 'a prompt without a time'").fetchone()
    assert (guessed["ts"], guessed["ts_approx"]) == (adapters.parse_ts("2026-09-01T00:00:00Z"), 1)
    s = store.conn.execute("SELECT first_ts, last_ts FROM session WHERE id = 'S1'").fetchone()
    assert (s["first_ts"], s["last_ts"]) == (1_785_000_000_000, 1_785_000_200_000)
    listed = origin.timeline(store, since=1_785_000_000_000 - 1, until=1_785_000_300_000)["sessions"]
    assert [(d["session"], d["time_approximate"]) for d in listed] == [("S1", False)]
