"""A conversational corpus and its question set, for measuring search recall.

``write_recall_corpus`` writes about fifty developer conversations over six
projects as real agent logs: Claude Code transcripts and a few Codex
rollouts, with the record shapes of ``corpus.claude_session_lines`` and
``corpus.codex_rollout_lines`` but fixed, hand-written turns instead of
random words.  They hold what people later look for: decisions and their
reasons, preferences, errors and their fixes, commands and their output,
some of it in Chinese, and turns on similar topics with other facts, so
that ranking matters.  Every id is derived from a fixed seed and each
session's name, so event ids are the same on every run.

``tests/recall_questions.json`` holds the questions.  Each names its
answer by evidence keys ``{"session": id, "contains": text}``: the visible
message events of that session whose text contains that exact string.
``resolve_evidence`` turns them into event ids after a sync and fails
loudly on a key that matches nothing.  ``lay_out_fixtures`` adds the real
logs of tests/fixtures, which some questions are about.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shutil
import sqlite3
from pathlib import Path
from typing import NamedTuple

from corpus import ClaudeRecords, _age, _blob, _codex_rate_limits, _codex_usage, _iso_ms, _uuid, _uuid7

SEED = 20260301
HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "recall_questions.json"
FIXTURES = HERE / "fixtures"
#: The folder every project lives in; a project is named after its last part.
SRC = "/home/dev/src"
#: Turn roles: a prompt, a reply, hidden reasoning, and a shell command
#: with its output (``"$ command\\noutput"``, several ``$`` lines allowed).
U, A, K, B = "user", "assistant", "thinking", "bash"


class Session(NamedTuple):
    """One conversation: a stable name, its project folder, start time, turns."""

    slug: str
    project: str
    start: str
    turns: tuple[tuple[str, str], ...]
    agent: str = "claude-code"


###############################################################################
# Writers ######################################################################
###############################################################################


def _when(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _commands(text: str) -> list[tuple[str, str]]:
    """Split a bash turn into (command, output) pairs, one per ``$`` line."""
    out: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
        else:
            raise ValueError(f"a bash turn starts with '$ ': {text[:60]!r}")
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


def claude_turn_lines(rng: random.Random, session: str, cwd: str, start: dt.datetime,
                      turns: tuple[tuple[str, str], ...]) -> tuple[list[str], dt.datetime]:
    """Return the JSONL lines of a Claude Code session made of the given turns,
    and the time of the last line.

    The records are shaped as ``corpus.claude_session_lines`` writes them
    (one line per content block, usage on every assistant line, thinking
    with a signature, tool output both in ``toolUseResult`` and the result
    block); only the text is given instead of drawn at random.
    """
    w = ClaudeRecords(rng, session, cwd, start)
    assistant = w.assistant

    def emit(rec: dict, pause: tuple[int, int]) -> None:
        w.emit(rec, dt.timedelta(seconds=rng.randint(*pause), milliseconds=rng.randrange(1000)))

    for role, text in turns:
        if role == U:
            emit({"type": "user", "promptId": _uuid(rng), "permissionMode": "default",
                  "message": {"role": "user", "content": text}}, (40, 600))
        elif role == A:
            emit(assistant([{"type": "text", "text": text}]), (3, 45))
        elif role == K:
            emit(assistant([{"type": "thinking", "thinking": text, "signature": _blob(rng, rng.randint(400, 900))}]),
                 (2, 20))
        elif role == B:
            for cmd, out in _commands(text):
                tid = "toolu_" + _blob(rng, 24)
                emit(assistant([{"type": "tool_use", "id": tid, "name": "Bash",
                                 "input": {"command": cmd, "description": f"Run {cmd.split()[0]}"}}]), (2, 15))
                emit({"type": "user", "toolUseResult": {"stdout": out, "stderr": "", "interrupted": False,
                                                        "isImage": False},
                      "message": {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": tid, "content": out, "is_error": False}]}},
                     (1, 40))
        else:
            raise ValueError(f"unknown role {role!r}")
    return w.lines, w.t


def codex_turn_lines(rng: random.Random, thread: str, cwd: str, start: dt.datetime,
                     turns: tuple[tuple[str, str], ...]) -> tuple[list[str], dt.datetime]:
    """Return the JSONL lines of a Codex rollout made of the given turns, and
    the time of the last line.

    Shapes as in ``corpus.codex_rollout_lines`` (0.146 with ordinals):
    session_meta, injected developer and user context, then per prompt
    task_started, the prompt as item and ``user_message`` event,
    turn_context, reasoning, commentary, ``exec_command`` calls and their
    output, and the last reply of the exchange as the final answer.
    """
    lines: list[str] = []
    t = start
    model = "gpt-5.3-codex"

    def emit(kind: str, payload: dict, pause: tuple[int, int] = (0, 2)) -> None:
        nonlocal t
        t += dt.timedelta(seconds=rng.randint(*pause), milliseconds=rng.randrange(1000))
        lines.append(json.dumps({"timestamp": _iso_ms(t), "ordinal": len(lines), "type": kind, "payload": payload},
                                ensure_ascii=False))

    def message(role: str, text: str, **extra) -> dict:
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}], **extra}

    emit("session_meta", {
        "id": thread, "timestamp": _iso_ms(start), "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.146.0",
        "source": "cli", "model_provider": "openai", "base_instructions": {"text": "You are Codex, a coding agent."},
        "git": {"commit_hash": _blob(rng, 40).lower(), "branch": "main",
                "repository_url": f"git@github.com:acme/{cwd.rsplit('/', 1)[-1]}.git"}})
    emit("response_item", message("developer", "<permissions instructions>\nFilesystem sandboxing: workspace-write."
                                               "\n</permissions instructions>"))
    emit("response_item", message("user", f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <shell>bash</shell>\n"
                                          f"  <current_date>{start:%Y-%m-%d}</current_date>\n"
                                          "  <timezone>Etc/UTC</timezone>\n</environment_context>"))
    sandbox = {"type": "workspace-write", "writable_roots": [cwd], "network_access": False}
    exchanges: list[list[tuple[str, str]]] = []
    for role, text in turns:
        if role == U:
            exchanges.append([(role, text)])
        elif not exchanges:
            raise ValueError("a Codex rollout starts with a prompt")
        else:
            exchanges[-1].append((role, text))
    for n, ((_, prompt), *rest) in enumerate(exchanges):
        turn = _uuid7(rng, t)
        emit("event_msg", {"type": "task_started", "turn_id": turn, "model_context_window": 258400,
                           "collaboration_mode_kind": "default"}, (40, 600))
        emit("response_item", message("user", prompt))
        emit("event_msg", {"type": "user_message", "message": prompt, "images": [], "local_images": [],
                           "text_elements": []})
        emit("turn_context", {"turn_id": turn, "cwd": cwd, "approval_policy": "on-request", "sandbox_policy": sandbox,
                              "model": model, "effort": "high", "summary": "auto"})
        if n == 0:
            emit("event_msg", {"type": "token_count", "info": None, "rate_limits": _codex_rate_limits(rng)})
        last = max((i for i, (role, _) in enumerate(rest) if role == A), default=None)
        answer = None
        for i, (role, text) in enumerate(rest):
            if role == K:
                emit("event_msg", {"type": "agent_reasoning", "text": text}, (2, 12))
                emit("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
                                       "content": None, "encrypted_content": "gAAAAA" + _blob(rng, 600)})
            elif role == A:
                phase = "final_answer" if i == last else "commentary"
                emit("event_msg", {"type": "agent_message", "message": text}, (3, 40))
                emit("response_item", message("assistant", text, phase=phase))
                answer = text if i == last else answer
            elif role == B:
                for cmd, out in _commands(text):
                    call = "call_" + _blob(rng, 24)
                    emit("response_item", {"type": "function_call", "name": "exec_command", "call_id": call,
                                           "arguments": json.dumps({"cmd": cmd, "workdir": cwd,
                                                                    "yield_time_ms": 10000})})
                    usage = _codex_usage(rng)
                    emit("event_msg", {"type": "token_count", "info": {"total_token_usage": usage,
                                                                       "last_token_usage": usage,
                                                                       "model_context_window": 258400},
                                       "rate_limits": _codex_rate_limits(rng)})
                    emit("response_item", {"type": "function_call_output", "call_id": call, "output": (
                        f"Chunk ID: {_blob(rng, 6).lower()}\nWall time: {rng.random() * 3:.4f} seconds\n"
                        f"Process exited with code 0\nOriginal token count: {len(out) // 4}\nOutput:\n{out}")},
                        (1, 30))
            else:
                raise ValueError(f"unknown role {role!r}")
        usage = _codex_usage(rng)
        emit("event_msg", {"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage,
                                                           "model_context_window": 258400},
                           "rate_limits": _codex_rate_limits(rng)})
        emit("event_msg", {"type": "task_complete", "turn_id": turn, "last_agent_message": answer})
    return lines, t


def session_id(s: Session) -> str:
    """Return the session's id: a UUIDv4 for Claude Code, a UUIDv7 for Codex."""
    rng = random.Random(f"{SEED}:{s.slug}:id")
    return _uuid(rng) if s.agent == "claude-code" else _uuid7(rng, _when(s.start))


def write_session(root: Path, s: Session) -> Path:
    """Write one session's log under root (a HOME) where its agent keeps it."""
    rng = random.Random(f"{SEED}:{s.slug}")
    cwd = f"{SRC}/{s.project}"
    sid, start = session_id(s), _when(s.start)
    if s.agent == "claude-code":
        lines, end = claude_turn_lines(rng, sid, cwd, start, s.turns)
        path = root / ".claude" / "projects" / cwd.replace("/", "-") / f"{sid}.jsonl"
    elif s.agent == "codex":
        lines, end = codex_turn_lines(rng, sid, cwd, start, s.turns)
        path = root / ".codex" / "sessions" / f"{start:%Y/%m/%d}" / f"rollout-{start:%Y-%m-%dT%H-%M-%S}-{sid}.jsonl"
    else:
        raise ValueError(f"unknown agent {s.agent!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _age(path, end)
    return path


def write_recall_corpus(root: Path) -> dict:
    """Write every session of the recall corpus under root, a HOME of the agents.

    Claude Code transcripts go to ``root/.claude/projects/<slug>/``, Codex
    rollouts to ``root/.codex/sessions/YYYY/MM/DD/``.  Returns
    ``{"sessions": {slug: {"id", "source", "project", "path"}}, "projects":
    [...], "turns": n}``.
    """
    sessions = {}
    for s in SESSIONS:
        path = write_session(root, s)
        sessions[s.slug] = {"id": session_id(s), "source": s.agent, "project": s.project, "path": str(path)}
    return {"sessions": sessions, "projects": sorted({s.project for s in SESSIONS}),
            "turns": sum(len(s.turns) for s in SESSIONS)}


#: When the copied fixture logs were last written: long settled.
FIXTURE_MTIME = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def lay_out_fixtures(root: Path) -> Path:
    """Copy the real logs of tests/fixtures under root (a HOME) where each
    agent keeps them, as the tests' ``all_agents`` fixture does; return the
    Cursor User folder (``root/.config/Cursor/User``)."""
    projects = root / ".claude" / "projects"
    agent = FIXTURES / "claude-code" / "agent-sessions"
    copies = [(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project", projects / "-path-to-Demo"),
              (agent / "subagent", projects / "-tmp"),
              (agent / "small.jsonl", projects / "-tmp" / "small.jsonl"),
              (agent / "schema_drift.jsonl", projects / "-tmp" / "schema_drift.jsonl"),
              (FIXTURES / "codex" / "localpush" / "sessions", root / ".codex" / "sessions"),
              (FIXTURES / "grok" / "made-here" / "sessions", root / ".grok" / "sessions")]
    user = root / ".config" / "Cursor" / "User"
    copies += [(FIXTURES / "cursor" / "urpg-global" / "state.vscdb", user / "globalStorage" / "state.vscdb"),
               (FIXTURES / "cursor" / "slevin48-workspace" / "state.vscdb",
                user / "workspaceStorage" / "ws1" / "state.vscdb")]
    for src, dst in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)
    for d in (projects / "-path-to-Demo", projects / "-tmp", root / ".codex", root / ".grok", user):
        for p in d.rglob("*"):
            if p.is_file():
                _age(p, FIXTURE_MTIME)
    return user


###############################################################################
# Questions ####################################################################
###############################################################################

#: Words too common to carry meaning in a question: dropped before the
#: floor's query is built and before a paraphrase label is checked.  The
#: Chinese ones are character pairs of question words ("what", "why", "how").
STOP_WORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below between both but by
can could did didn do does doing don done down during each else ever few for from further get got had has
have having he her here hers him his how i if in into is isn it its itself just let me more most my no nor
not now of off on once only or other our ours out over own s same she should so some such t than that the
their them then there these they this those through to too under until up us very was wasn we were what
when where which while who whom why will with would you your yours
""".split()) | frozenset("我们 什么 为什 怎么 时候 一个 这个 那个 之前 上次 哪个 多少 是不 不是".split())

_WORD = re.compile(r"[^\W_]+")
#: Kana and Han characters: Japanese and Chinese write words without spaces.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_LATIN_RUN = re.compile(f"[^{_CJK}]+")


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


def query_terms(question: str) -> list[str]:
    """Return the question's content words, in order and without repeats:
    its lowercase letter-and-digit runs (as SQLite's unicode61 splits
    text) minus STOP_WORDS."""
    out: list[str] = []
    for w in _WORD.findall(question.lower()):
        if w not in STOP_WORDS and w not in out:
            out.append(w)
    return out


def content_words(text: str) -> set[str]:
    """Return the words a paraphrase must avoid: lowercase Latin letter-and-
    digit words minus STOP_WORDS, and for Chinese and Japanese, which have no
    spaces, every pair of adjacent characters (a lone character alone)."""
    out: set[str] = set()
    for w in _WORD.findall(text.lower()):
        out.update(_LATIN_RUN.findall(w))
        for run in _CJK_RUN.findall(w):
            out.update({run} if len(run) == 1 else {run[i:i + 2] for i in range(len(run) - 1)})
    return out - STOP_WORDS


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    """Return the question set: items with q, evidence, kind, paraphrase."""
    return json.loads(path.read_text(encoding="utf-8"))


class Unresolved(AssertionError):
    """An evidence key matched no visible message event."""


#: Visible message events of a session whose text contains a string.
_EVIDENCE_SQL = ("SELECT e.id, e.text FROM event e WHERE e.session = ? AND e.kind = 'message' "
                 "AND instr(e.text, ?) > 0 "
                 "AND NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id) ORDER BY e.seq")


def resolve_evidence(conn: sqlite3.Connection, questions: list[dict]) -> list[dict[str, str]]:
    """Return, per question, its evidence events as {event id: text}.

    Raises Unresolved listing every key that matched no visible message
    event, so a changed corpus or adapter cannot silently empty the set.
    """
    out, missing = [], []
    for n, item in enumerate(questions):
        found: dict[str, str] = {}
        for key in item["evidence"]:
            rows = conn.execute(_EVIDENCE_SQL, (key["session"], key["contains"])).fetchall()
            if not rows:
                missing.append(f"question {n} ({item['q']!r}): no visible message of session "
                               f"{key['session']} contains {key['contains']!r}")
            found.update((r[0], r[1]) for r in rows)
        out.append(found)
    if missing:
        raise Unresolved(f"{len(missing)} evidence keys resolve to no event:\n" + "\n".join(missing))
    return out


def paraphrase_ok(question: str, evidence_texts: list[str]) -> bool:
    """True when the question shares no content word with at least one of its
    evidence texts: a keyword match alone cannot find that one."""
    words = content_words(question)
    return any(not (words & content_words(text)) for text in evidence_texts)


def open_db(home: Path) -> sqlite3.Connection:
    """Open a synced store's database read-only."""
    return sqlite3.connect(f"file:{os.path.join(home, 'origin.db')}?mode=ro", uri=True)


###############################################################################
# Sessions #####################################################################
###############################################################################

ATLAS = (
    Session("atlas-postgres-plan", "atlas", "2026-02-09T09:14:00Z", (
        (U, "The booking API keeps throwing `sqlite3.OperationalError: database is locked` whenever the reminder "
            "worker runs at the same time as the checkout endpoint. I think we've outgrown SQLite. Can you look at "
            "what it would take to move to Postgres?"),
        (K, "Check how the engine is created and whether any SQLite-specific SQL or column types are used."),
        (B, "$ grep -rn sqlite app/ alembic/ | head\n"
            "app/db.py:12:engine = create_async_engine(\"sqlite+aiosqlite:///./booking.db\")\n"
            "alembic/env.py:31:    render_as_batch=True,  # needed for SQLite ALTER TABLE\n"
            "app/models/booking.py:40:    created_at = Column(String)  # ISO text"),
        (A, "There are only three SQLite-specific spots: the engine URL in app/db.py, `render_as_batch=True` in "
            "alembic/env.py, and `created_at` in the Booking model, which is stored as ISO text. The lock errors come "
            "from SQLite allowing a single writer: the reminder worker holds a write transaction while it sends "
            "emails, so checkout waits and gives up after 5 seconds. Postgres removes that limit. The `created_at` "
            "text column will need a cast when we copy the data."),
        (U, "Ok. Which driver, asyncpg or psycopg 3?"),
        (A, "Both work with SQLAlchemy 2.0's async engine. asyncpg is faster in most benchmarks and is what the "
            "ledger team already runs; psycopg 3 has nicer COPY support and a sync mode. For an async FastAPI app "
            "asyncpg is the usual choice."),
        (U, "Let's go with Postgres 16 and asyncpg. Write it down: we're moving because SQLite only allows one "
            "writer and the worker and the API write at the same time."),
        (A, "Written to docs/adr/0004-postgres.md. Decision: move the booking store from SQLite to Postgres 16 with "
            "the asyncpg driver. Reason: SQLite allows a single writer, and the reminder worker and the checkout "
            "endpoint write concurrently, which caused `database is locked` errors under load. Consequences: a "
            "Postgres service in docker-compose, a data migration for the existing bookings, and `created_at` "
            "becomes timestamptz."),
        (U, "Did we ever consider MySQL?"),
        (A, "Not seriously. Two other services here already run on Postgres, so backups, monitoring and the people "
            "on call know it; MySQL would be a second database engine to operate for no gain."),
    )),
    Session("atlas-migration-failure", "atlas", "2026-02-12T07:41:00Z", (
        (U, "The migration to Postgres failed on staging last night. Here's the log:\n"
            "INFO  [alembic.runtime.migration] Running upgrade 3f9c2a1b7d10 -> 8e41d0c5a2f3, bookings to timestamptz\n"
            "sqlalchemy.exc.ProgrammingError: (sqlalchemy.dialects.postgresql.asyncpg.ProgrammingError) <class "
            "'asyncpg.exceptions.DatatypeMismatchError'>: column \"created_at\" is of type timestamp with time zone "
            "but expression is of type text"),
        (A, "The copy step inserts the old ISO strings into the new timestamptz column as text, and Postgres does "
            "not cast text to timestamptz implicitly in an INSERT ... SELECT. The fix is to alter the column with an "
            "explicit USING clause: `op.alter_column('bookings', 'created_at', type_=sa.DateTime(timezone=True), "
            "postgresql_using='created_at::timestamptz')`."),
        (B, "$ uv run alembic upgrade head\n"
            "INFO  [alembic.runtime.migration] Running upgrade 3f9c2a1b7d10 -> 8e41d0c5a2f3, bookings to timestamptz\n"
            "INFO  [alembic.runtime.migration] Running upgrade 8e41d0c5a2f3 -> b7aa19e2c4d8, add reminder_sent_at"),
        (A, "It now runs cleanly against a copy of the staging dump: 41,208 bookings converted, none left with a "
            "NULL created_at."),
        (U, "Some of the old rows had dates like '2025-11-03 14:00' without an offset. What did they become?"),
        (A, "Postgres read them in the session time zone, which is UTC on staging, so '2025-11-03 14:00' became "
            "2025-11-03 14:00:00+00. That matches how they were written: the old code always used UTC."),
        (U, "Good. We rerun it on staging tonight and keep the old SQLite file for a week as a fallback."),
    )),
    Session("atlas-cache", "atlas", "2026-03-03T13:20:00Z", (
        (U, "Availability lookups are our slowest endpoint, p95 around 480 ms. Let's add a cache. I'm torn between "
            "Redis and just an in-process TTLCache from cachetools."),
        (A, "An in-process cache is simpler, but we run four uvicorn workers per pod and three pods, so each of the "
            "twelve processes would hold its own copy. After a booking, one worker would drop its entry and the "
            "other eleven would keep serving the stale slot until the TTL runs out. A shared Redis gives one view "
            "and one place to invalidate."),
        (U, "How stale can it get with Redis?"),
        (A, "With a 30 second TTL and an explicit delete on every booking write, only a read racing the delete can "
            "see an old slot, and the booking itself is still checked against Postgres inside the transaction, so "
            "the worst case is showing a slot that then fails to book."),
        (U, "OK, we decided: Redis for the availability cache, 30 second TTL, and we delete the key when a booking "
            "is created or cancelled. The in-process cache stays only for the tenant configuration, which changes "
            "maybe once a week."),
        (A, "Done. app/cache.py has `availability_key(resource_id, day)` and the booking service calls "
            "`cache.delete` after commit. Tenant settings keep their `TTLCache(maxsize=1024, ttl=600)`."),
        (B, "$ uv run pytest tests/test_availability.py -q\n........\n8 passed in 1.92s"),
        (U, "What's the p95 now on the load test?"),
        (A, "The k6 run against staging shows availability p95 at 62 ms, down from 480 ms, with a 91% hit rate."),
    )),
    Session("atlas-uv-switch", "atlas", "2026-03-18T10:05:00Z", (
        (U, "CI spends almost four minutes in `poetry lock` and `poetry install` on every run. I want to try uv."),
        (B, "$ time poetry lock --no-update\nResolving dependencies... (212.4s)\nreal\t3m34.118s\n"
            "$ time uv lock\nResolved 84 packages in 1.41s\nreal\t0m1.52s"),
        (A, "uv resolves the same 84 packages in 1.4 s instead of 3.5 minutes, and `uv sync --frozen` in CI took "
            "9 s with a warm cache. It reads the PEP 621 [project] table, so the [tool.poetry] sections have to be "
            "converted; the dev dependencies become a `dev` dependency group."),
        (U, "Let's switch then. Main reasons for the record: the lock takes seconds instead of minutes, CI gets "
            "faster, and the lockfile is cross-platform so the Mac and Linux people stop fighting over it."),
        (A, "Switched: pyproject.toml uses [project] and [dependency-groups], poetry.lock is replaced by uv.lock, "
            "and the Makefile and CI call `uv sync --frozen` and `uv run`. I left a note in CONTRIBUTING.md."),
        (U, "One more thing: I always want ruff run before committing. Add a pre-commit hook for `ruff check --fix` "
            "and `ruff format`."),
        (A, "Added .pre-commit-config.yaml with the ruff-pre-commit hooks (ruff check --fix, then ruff format). "
            "`uv run pre-commit install` sets it up in a fresh clone."),
        (U, "And I prefer `uv run pytest` over activating the virtualenv by hand, so use that in the docs."),
        (A, "Updated README and CONTRIBUTING.md: every command is spelled `uv run ...`, nothing tells you to "
            "source .venv/bin/activate any more."),
    )),
    Session("atlas-flaky-tests", "atlas", "2026-04-07T15:32:00Z", (
        (U, "Tests pass locally but fail randomly in CI since we turned on pytest-xdist with -n 4:\n"
            "asyncpg.exceptions.UniqueViolationError: duplicate key value violates unique constraint "
            "\"bookings_pkey\"\nDETAIL:  Key (id)=(1001) already exists."),
        (A, "All four xdist workers share one test database, and the fixtures insert bookings with fixed ids "
            "starting at 1001, so two workers collide. Either give each worker its own database or stop using "
            "fixed ids in the fixtures."),
        (U, "Per-worker database please, I don't want to touch every fixture."),
        (A, "conftest.py now creates `booking_test_{worker}` from the PYTEST_XDIST_WORKER variable (gw0 to gw3, or "
            "`main` without xdist) and drops it at the end of the test session."),
        (B, "$ uv run pytest -n 4 -q\n" + "." * 60 + "\n312 passed in 24.87s"),
        (U, "Nice, it was 71 seconds without xdist. Keep -n 4 in CI."),
        (A, "CI runs `uv run pytest -n 4` now; the suite takes about 25 seconds there as well."),
    )),
    Session("atlas-timezone", "atlas", "2026-05-05T08:47:00Z", (
        (U, "Customers in Lisbon say their reminders arrive one hour late since the clocks changed. Look at "
            "app/services/reminders.py."),
        (A, "reminders.py builds the reminder time with `datetime.now()`, which is naive and uses the server's "
            "local time, and then compares it with aware UTC timestamps from Postgres after stripping tzinfo. "
            "Since Portugal moved to summer time on 29 March, the naive value is an hour off."),
        (U, "Fix it, and let's make this a rule: never use naive datetimes here. Always `datetime.now(timezone.utc)`, "
            "and convert to the customer's zone only for display, with zoneinfo."),
        (A, "Fixed: reminders use `datetime.now(timezone.utc)`; display goes through `to_local(dt, customer.tz)`, "
            "which uses `zoneinfo.ZoneInfo`. I also enabled ruff's DTZ rules (flake8-datetimez), which flag "
            "`datetime.now()` without a tz, and fixed the 7 places they found."),
        (B, "$ uv run ruff check --select DTZ app/\nAll checks passed!"),
        (U, "Do the emails show the right local time now?"),
        (A, "Yes: a booking at 15:00 Lisbon time is stored as 14:00 UTC and the email says 15:00 (WEST)."),
    )),
    Session("atlas-rate-limit", "atlas", "2026-06-16T11:02:00Z", (
        (U, "We got scraped over the weekend: 40k requests to /availability from a handful of IPs. Add rate "
            "limiting."),
        (A, "I'll look at how the app is deployed first: the ingress config and whether a limiter exists already."),
        (B, "$ grep -rn limit deploy/ingress.yaml || echo none\nnone"),
        (A, "Two options: slowapi inside FastAPI, or nginx `limit_req` at the ingress. slowapi keeps its counters "
            "per process unless it is backed by Redis; with twelve workers a 60/min limit becomes 720/min in "
            "practice. nginx counts in shared memory per ingress pod and rejects before the request reaches "
            "Python. I suggest 10 requests per second per client IP with a burst of 20 at the ingress."),
        (U, "Go with nginx at the ingress, 10 requests per second per IP with a burst of 20. Return 429 with a "
            "Retry-After header."),
        (B, "$ kubectl apply -f deploy/ingress.yaml\ningress.networking.k8s.io/booking-api configured"),
        (A, "Added the annotations to deploy/ingress.yaml: nginx.ingress.kubernetes.io/limit-rps: \"10\" and "
            "limit-burst-multiplier: \"2\", plus a custom 429 response that sets Retry-After: 1. A quick test with "
            "hey at 50 requests per second gets 429 for everything over the limit."),
    ), agent="codex"),
    Session("atlas-cjk-logging", "atlas", "2026-07-08T02:15:00Z", (
        (U, "现在 API 的日志是纯文本，在 Loki 里很难按 booking_id 过滤。我们改成结构化日志吧。"),
        (A, "可以用 structlog 输出 JSON，每条日志带上 request_id、booking_id 和 tenant。标准库 logging 也能配一个 JSON "
            "formatter，但 structlog 的上下文绑定更方便：在中间件里 bind 一次，后面所有日志都会带上这些字段。"),
        (U, "那就决定用 structlog，原因是上下文绑定方便，而且 Loki 可以直接解析 JSON 字段。生产环境日志级别用 INFO。"),
        (A, "已经改好：app/logging.py 配置了 structlog，生产环境 INFO，开发环境用彩色的控制台输出。请求中间件会绑定 "
            "request_id。"),
        (B, "$ uv run python -c \"import app.logging\"\n"
            "{\"event\": \"logging configured\", \"level\": \"info\", \"timestamp\": \"2026-07-08T02:31:07Z\"}"),
        (U, "另外，密码和 token 千万不要写进日志。"),
        (A, "加了一个 processor，把 password、token、authorization 这几个字段的值替换成 ***，并写了单元测试。"),
    )),
    Session("atlas-cache-review", "atlas", "2026-09-02T14:40:00Z", (
        (U, "Should we also cache the search results page? It's the second slowest endpoint."),
        (A, "I looked at the access logs: search queries are almost all unique (free text plus filters), so the hit "
            "rate would be under 5% by my estimate. The time goes into an unindexed ILIKE on resources.name; a "
            "trigram index would help far more than a cache."),
        (B, "$ psql \"$DATABASE_URL\" -c \"CREATE INDEX CONCURRENTLY resources_name_trgm ON resources USING gin "
            "(name gin_trgm_ops)\"\nCREATE INDEX"),
        (A, "With the pg_trgm index, search p95 went from 390 ms to 45 ms. No cache needed there."),
        (U, "Fine, no cache for search then. Leave the Redis availability cache as it is."),
    )),
)

BEACON = (
    Session("beacon-state", "beacon", "2026-02-20T14:10:00Z", (
        (U, "The dashboard's Redux setup is getting heavy: slices, thunks and selectors for what is mostly server "
            "data. Should we move to something lighter?"),
        (A, "Most of what lives in the store is server data: revenue series, accounts, invoices. TanStack Query "
            "handles that better than hand-written thunks (caching, refetching, stale times). What remains is UI "
            "state: the selected date range, whether the sidebar is open, the theme. That fits in a small "
            "Zustand store."),
        (U, "What about Redux Toolkit with RTK Query? That would be less churn."),
        (A, "RTK Query would work too, but it keeps the Redux provider, the slices and the middleware setup. With "
            "TanStack Query plus Zustand the client store is about 40 lines and components use hooks directly, "
            "without connect or a typed dispatch."),
        (U, "Let's do it: TanStack Query for server state and Zustand for the little UI state we have. The reason "
            "is less boilerplate; Redux is overkill for three pieces of UI state."),
        (A, "Migrated: src/store/ui.ts is a Zustand store (dateRange, sidebarOpen, theme); the revenue, accounts "
            "and invoice slices are replaced by useQuery hooks in src/api/. Removed @reduxjs/toolkit and "
            "react-redux from package.json."),
        (B, "$ npm run build\nvite v5.4.1 building for production...\n1284 modules transformed.\n"
            "dist/assets/index-3f9a1c.js   1,812.40 kB | gzip: 251.33 kB\nbuilt in 6.21s"),
    )),
    Session("beacon-vitest", "beacon", "2026-03-10T09:30:00Z", (
        (U, "Jest fails after I added the date range picker:\n"
            "SyntaxError: Cannot use import statement outside a module\n"
            "    at node_modules/@internationalized/date/dist/import.mjs:1"),
        (A, "The picker ships ES modules only, and Jest runs CommonJS through babel-jest, which does not transform "
            "node_modules by default. You could add it to transformIgnorePatterns, but we already build with Vite, "
            "and Vitest reuses that config and handles ESM natively."),
        (U, "How much work is switching to Vitest?"),
        (A, "Mostly mechanical: jest.fn becomes vi.fn, jest.mock becomes vi.mock, the test environment is set to "
            "jsdom in vite.config.ts, and babel.config.js and jest.config.js go away. The Testing Library code "
            "stays the same."),
        (U, "Switch. Rationale for later: one config for build and tests, native ESM, and it's faster."),
        (B, "$ npx vitest run\n src/components/RevenueChart.test.tsx (6)\n src/components/DateRangePicker.test.tsx (4)"
            "\n Test Files  23 passed (23)\n      Tests  141 passed (141)\n   Duration  4.82s"),
        (A, "All 141 tests pass under Vitest in 4.8 s; Jest took 19 s for the same suite."),
    )),
    Session("beacon-pnpm", "beacon", "2026-03-25T16:45:00Z", (
        (U, "Let's move this repo from npm to pnpm. Installs take forever and node_modules is 900 MB."),
        (A, "pnpm keeps one content-addressed store per machine and hard-links packages into node_modules, so a "
            "second install of the same versions is nearly free. `pnpm import` converts package-lock.json into "
            "pnpm-lock.yaml with the same versions."),
        (B, "$ pnpm import && rm package-lock.json\nProgress: resolved 1102, reused 0, downloaded 1102, added 0, done"),
        (U, "CI broke after the switch:\n ERR_PNPM_OUTDATED_LOCKFILE  Cannot install with \"frozen-lockfile\" "
            "because pnpm-lock.yaml is not up to date with package.json"),
        (A, "package.json changed in the same commit (vite went from 5.4.1 to 5.4.2) after the lockfile was "
            "generated. Run pnpm install locally and commit the updated pnpm-lock.yaml; CI uses --frozen-lockfile "
            "on purpose so that it never rewrites the lockfile itself."),
        (B, "$ pnpm install\nLockfile is up to date, resolution step is skipped\nPackages: +1102\nDone in 3.8s"),
        (U, "While we're at it, style preferences: I prefer named exports over default exports, and single quotes. "
            "Put that in the eslint and prettier config."),
        (A, "Added `import/no-default-export` to .eslintrc (with an override for vite.config.ts and the route "
            "files, which need default exports) and `singleQuote: true` in .prettierrc."),
    )),
    Session("beacon-i18n", "beacon", "2026-04-28T11:00:00Z", (
        (U, "We need translations: English, German and Chinese. react-i18next or FormatJS?"),
        (A, "react-i18next loads namespaces lazily and has a simple t() hook; FormatJS (react-intl) is stronger on "
            "ICU message syntax, plurals and dates, but expects all messages of a locale up front unless you build "
            "the code splitting yourself."),
        (U, "Go with react-i18next, mainly because of lazy-loaded namespaces: the admin pages have hundreds of "
            "strings most users never see."),
        (A, "Set up i18next with i18next-http-backend: namespaces common, dashboard and admin live in "
            "public/locales/{lng}/{ns}.json. Language detection reads the user's profile first, then the browser."),
        (U, "How should I name the keys?"),
        (A, "Nest them by feature, like dashboard.revenue.title, and never use the English sentence as the key: "
            "when the copy changes, the key would change with it and every translation would be lost."),
    )),
    Session("beacon-chart-crash", "beacon", "2026-05-19T13:25:00Z", (
        (U, "The revenue page is blank for new accounts. Console says:\n"
            "TypeError: Cannot read properties of undefined (reading 'map')\n"
            "    at RevenueChart (RevenueChart.tsx:42:31)"),
        (A, "For an account with no invoices the API returns `{\"series\": null}` instead of an empty list, and "
            "RevenueChart calls data.series.map. Two fixes: the component should default to an empty array, and "
            "the API should return []."),
        (U, "Do both. And show an empty state, 'No revenue yet', instead of an empty chart."),
        (A, "RevenueChart now uses `const points = data?.series ?? []` and renders <EmptyState title=\"No revenue "
            "yet\" /> when there are no points. I opened ticket API-412 for the backend to return []."),
        (B, "$ pnpm vitest run src/components/RevenueChart.test.tsx\n Test Files  1 passed (1)\n"
            "      Tests  7 passed (7)"),
    )),
    Session("beacon-bundle", "beacon", "2026-06-30T10:12:00Z", (
        (U, "Lighthouse says our JS bundle is huge. What's in it?"),
        (B, "$ pnpm dlx vite-bundle-visualizer --template list | head -4\n@mui/icons-material  402 kB\n"
            "moment  289 kB\nlodash  71 kB"),
        (A, "Three things dominate: @mui/icons-material imported through its barrel file, which pulls in every "
            "icon (402 kB), moment with all its locales (289 kB), and the full lodash (71 kB)."),
        (U, "Replace moment with date-fns, use lodash-es, and import icons by path."),
        (A, "Done. The main bundle went from 1.8 MB to 740 kB, and from 251 kB to 118 kB gzipped."),
        (U, "Why date-fns and not dayjs?"),
        (A, "Either would shrink the bundle. date-fns is tree-shakeable function by function and works on native "
            "Date objects, so no wrapper type leaks into our props; dayjs is smaller as a whole but needs plugins "
            "for time zones."),
        (U, "OK, date-fns it is. We picked it for tree-shaking and native Date objects."),
    )),
    Session("beacon-auth", "beacon", "2026-08-12T09:40:00Z", (
        (U, "Security review flagged that we keep the access token in localStorage. What should we do?"),
        (A, "Let me look at how the token is stored and sent."),
        (B, "$ grep -rn localStorage src/ | head -3\n"
            "src/api/client.ts:8:  const token = localStorage.getItem('access_token')\n"
            "src/auth/login.ts:21:  localStorage.setItem('access_token', res.token)"),
        (A, "Anything in localStorage is readable by every script on the page, so a single XSS bug leaks the token. "
            "The usual fix is an httpOnly, Secure, SameSite=Lax cookie set by the API, which JavaScript cannot "
            "read; the client then sends requests with credentials: 'include' and the API checks a CSRF token on "
            "unsafe methods."),
        (U, "Move it to an httpOnly cookie. Access tokens live 15 minutes, refresh tokens rotate on every use."),
        (A, "Changed: login no longer returns the token in the response body; the API sets the httpOnly cookie "
            "beacon_session (15 minutes) and a refresh cookie scoped to /auth/refresh that is replaced on every "
            "use. The client sends an X-CSRF-Token header read from a non-httpOnly csrf cookie."),
    ), agent="codex"),
    Session("beacon-cjk-i18n", "beacon", "2026-05-02T03:30:00Z", (
        (U, "繁体中文的用户看到的是简体字。我们现在只有 zh-CN 的翻译文件。"),
        (A, "i18next 的 fallbackLng 现在是 ['zh-CN', 'en']，所以 zh-TW 的用户找不到 zh-TW 文件时就回退到了简体。可以加一套 "
            "zh-Hant 的翻译，再把 zh-TW 和 zh-HK 的回退设成 zh-Hant。"),
        (U, "决定：zh-TW 和 zh-HK 回退到 zh-Hant，不要回退到 zh-CN。繁体翻译先用 OpenCC 从简体转换，再请台湾的同事校对。"),
        (A, "已配置 fallbackLng: { 'zh-TW': ['zh-Hant', 'en'], 'zh-HK': ['zh-Hant', 'en'], default: ['en'] }，并用 "
            "opencc-js 生成了 public/locales/zh-Hant/ 下的三个命名空间文件。"),
        (B, "$ pnpm tsx scripts/convert-hant.ts\nconverted common.json (412 keys)\n"
            "converted dashboard.json (287 keys)\n"
            "converted admin.json (655 keys)"),
        (U, "日期格式呢？台湾习惯写成 2026/05/02。"),
        (A, "日期统一用 Intl.DateTimeFormat 按语言区域格式化，zh-TW 默认输出就是 2026/5/2，不需要自己写格式字符串。"),
    )),
    Session("beacon-dark-mode", "beacon", "2026-07-15T12:05:00Z", (
        (U, "Users want a dark theme. How do we add it without rewriting every component?"),
        (A, "The components already take colours from the MUI theme, so a second palette covers most of it. The "
            "few hard-coded hex colours in the charts need to move to theme tokens first."),
        (U, "I prefer CSS variables over passing theme objects around in JS, so the charts can read them too."),
        (A, "Then MUI's CssVarsProvider fits: it emits the palette as CSS variables (--mui-palette-...), and the "
            "chart colours read var(--mui-palette-primary-main). The toggle stores the mode in the Zustand UI "
            "store and defaults to the system setting."),
        (B, "$ grep -rn \"#[0-9a-fA-F]\\{6\\}\" src/components/charts | wc -l\n14"),
        (A, "Replaced the 14 hard-coded colours in the charts with CSS variables; both themes pass the contrast "
            "check in Storybook."),
    )),
)

CARTOGRAPHER = (
    Session("carto-errors", "cartographer", "2026-02-05T17:00:00Z", (
        (U, "Error handling is a mess: half the crate returns Box<dyn Error>, the other half returns String. What "
            "should we standardise on?"),
        (A, "The common split: thiserror in the library crate (tiles-core), so callers can match on concrete "
            "variants such as TileError::OutOfBounds, and anyhow in the CLI binary, where errors are only "
            "reported, with context."),
        (U, "Agreed. thiserror for the library, anyhow for the binary, because library users need to match on the "
            "error variants while the CLI only prints them."),
        (A, "Converted: tiles-core/src/error.rs defines TileError with OutOfBounds { z, x, y }, Io(#[from] "
            "std::io::Error), Decode(String) and Projection(ProjError); the CLI returns anyhow::Result and adds "
            ".context(\"rendering tile 12/2048/1361\")-style messages."),
        (B, "$ cargo build --workspace\n   Compiling tiles-core v0.3.0\n   Compiling tiles-cli v0.3.0\n"
            "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 14.62s"),
    )),
    Session("carto-parallel", "cartographer", "2026-03-14T12:40:00Z", (
        (U, "Rendering zoom 0-14 for the Alps extract takes 38 seconds on one core. Should we make the renderer "
            "async with tokio?"),
        (A, "Rendering is CPU-bound: projection, rasterising, PNG encoding. Async helps with waiting on I/O, not "
            "with computation. rayon's par_iter over the tiles would spread the work over all cores with almost "
            "no code change; tokio only makes sense for the upload to S3."),
        (U, "Try rayon."),
        (B, "$ hyperfine 'target/release/tiles render alps.pbf -z 0-14'\n"
            "Benchmark 1: target/release/tiles render alps.pbf -z 0-14\n  Time (mean ± σ):      9.214 s ±  0.187 s"),
        (A, "With rayon the same render takes 9.2 s on 8 cores instead of 38 s. Peak memory went from 310 MB to "
            "540 MB, because eight tiles are in flight at once."),
        (U, "Good. Decision: rayon for rendering, tokio only in the uploader, and we don't mix them: the uploader "
            "receives rendered tiles over a channel."),
    )),
    Session("carto-cross-compile", "cartographer", "2026-04-02T08:55:00Z", (
        (U, "Building for the Graviton boxes fails:\nerror: linker `aarch64-linux-gnu-gcc` not found\n"
            "  = note: No such file or directory (os error 2)\n"
            "error: could not compile `tiles-cli` (bin \"tiles\") due to 1 previous error"),
        (A, "Rust can target aarch64-unknown-linux-gnu, but it needs a C linker for that target and this machine "
            "has none. Options: install gcc-aarch64-linux-gnu and set the linker in .cargo/config.toml, use cross "
            "(which runs the build in Docker), or use cargo-zigbuild, which uses zig as the linker and can pin the "
            "glibc version."),
        (U, "Docker in CI is slow for us. Let's try zigbuild."),
        (B, "$ cargo zigbuild --release --target aarch64-unknown-linux-gnu.2.28\n   Compiling tiles-core v0.3.0\n"
            "   Compiling tiles-cli v0.3.0\n    Finished `release` profile [optimized] target(s) in 1m 52s"),
        (A, "It builds, linked against glibc 2.28, so the binary also runs on the older Amazon Linux 2 hosts."),
        (U, "We'll use cargo-zigbuild for the ARM builds then, because it needs no Docker and lets us pin glibc "
            "2.28."),
    )),
    Session("carto-msrv", "cartographer", "2026-05-12T19:20:00Z", (
        (U, "Someone opened an issue that it doesn't build on Rust 1.74. What's our minimum supported Rust version?"),
        (A, "None is declared. The code uses std::sync::LazyLock, stable since 1.80, so 1.80 is the real floor "
            "today."),
        (U, "Then set rust-version = \"1.80\" in Cargo.toml and add a CI job that builds with 1.80. I'd rather "
            "raise the MSRV than keep the once_cell dependency."),
        (A, "Set `rust-version = \"1.80\"` in the workspace Cargo.toml and added an msrv job to "
            ".github/workflows/ci.yml using dtolnay/rust-toolchain@1.80."),
        (U, "And a standing rule: always run `cargo clippy --all-targets -- -D warnings` and `cargo fmt --check` "
            "before pushing. CI rejects warnings anyway."),
        (B, "$ cargo clippy --all-targets -- -D warnings\n"
            "error: the following explicit lifetimes could be elided: 'a\n  --> tiles-core/src/style.rs:57:13\n"
            "   = note: `-D clippy::needless-lifetimes` implied by `-D warnings`"),
        (A, "Clippy found one needless lifetime in style.rs; fixed, and clippy is clean now."),
    )),
    Session("carto-overflow", "cartographer", "2026-06-22T10:30:00Z", (
        (U, "A user rendering with `-z 0-31` got this:\nthread 'main' panicked at tiles-core/src/projection.rs:88:14:\n"
            "attempt to multiply with overflow\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"),
        (A, "At zoom 31, `1u32 << z` times 256 pixels overflows u32. Debug builds panic on overflow; a release "
            "build would silently wrap and write garbage tiles. No real tile source goes beyond zoom 24 anyway."),
        (U, "Clamp the zoom and use u64 for the pixel math."),
        (A, "projection.rs now computes world pixels in u64, and the CLI rejects zoom levels above 24 with "
            "`error: zoom 31 is out of range (0..=24)`. Added a proptest that projects random coordinates at "
            "every zoom from 0 to 24."),
        (B, "$ cargo test -p tiles-core projection\nrunning 5 tests\ntest projection::tests::prop_roundtrip ... ok\n"
            "test result: ok. 5 passed; 0 failed"),
    )),
    Session("carto-release", "cartographer", "2026-07-27T14:00:00Z", (
        (U, "How do we cut a release? Last time I did it by hand and forgot the ARM binary."),
        (A, "I'll look at the existing workflows and the changelog first."),
        (B, "$ ls .github/workflows\nci.yml\nmsrv.yml"),
        (A, "There is no release workflow yet. I propose cargo-dist: `cargo dist init` generates a release.yml that "
            "builds binaries for x86_64 and aarch64 Linux and macOS when a vX.Y.Z tag is pushed, and attaches them "
            "to a GitHub release with checksums. The changelog can come from the conventional commits via "
            "git-cliff."),
        (U, "Set it up. The first release made with it will be 0.4.0."),
        (A, "Added the cargo-dist config ([workspace.metadata.dist]), .github/workflows/release.yml and cliff.toml. "
            "To release: bump the version to 0.4.0, run `git cliff -o CHANGELOG.md`, commit, tag v0.4.0 and push "
            "the tag."),
    ), agent="codex"),
    Session("carto-cjk-font", "cartographer", "2026-08-05T06:10:00Z", (
        (U, "渲染出来的中文地名全是方块（豆腐块），北京、上海都显示不出来。"),
        (A, "现在打包的字体只有 DejaVu Sans，不包含汉字，渲染器找不到字形就画了方块。需要加一个 CJK 字体，比如 Noto Sans "
            "CJK SC。完整字体有 16 MB，可以做子集，只保留常用的 7000 个汉字。"),
        (U, "用子集吧。字体渲染库我们现在用 rusttype，要换吗？"),
        (A, "rusttype 已经不维护了，建议换成 fontdue：更快，还在维护，API 也差不多。"),
        (U, "决定：换成 fontdue，字体用 Noto Sans CJK SC 的子集。原因是 rusttype 不再维护，而且完整字体太大。"),
        (B, "$ pyftsubset NotoSansCJKsc-Regular.otf --text-file=common-7000.txt "
            "--output-file=assets/noto-sc-subset.otf\n$ ls -lh assets/noto-sc-subset.otf\n"
            "-rw-r--r-- 1 dev dev 2.3M Aug  5 06:31 assets/noto-sc-subset.otf"),
        (A, "子集字体只有 2.3 MB。重新渲染了北京的 12 级瓦片，中文地名显示正常。"),
    )),
    Session("carto-ci-cache", "cartographer", "2026-09-10T16:20:00Z", (
        (U, "CI takes 11 minutes, mostly compiling dependencies from scratch. Can we cache them?"),
        (A, "Swatinem/rust-cache caches ~/.cargo and the target directory keyed on Cargo.lock and the toolchain, "
            "and prunes the workspace's own crates so the cache stays small."),
        (B, "$ gh run list --workflow ci.yml --limit 2\ncompleted  success  ci  main  push  3m02s\n"
            "completed  success  ci  main  push  11m17s"),
        (A, "With rust-cache the second run took 3 minutes instead of 11."),
        (U, "Keep it. And use sccache? I've heard mixed things."),
        (A, "Not needed for now: rust-cache already gives most of the gain, and sccache would need a storage "
            "bucket and credentials in CI."),
    )),
)

DYNAMO = (
    Session("dynamo-duckdb", "dynamo", "2026-02-25T07:05:00Z", (
        (U, "The daily_revenue job got killed again overnight. Airflow only shows:\n"
            "[2026-02-25, 02:14:09 UTC] {local_task_job_runner.py:234} INFO - Task exited with return code -9"),
        (A, "Return code -9 is SIGKILL, almost always the kernel's OOM killer. The job loads 30 million order rows "
            "into a pandas DataFrame and then groups them; peak memory in the last successful run was about "
            "14 GB, and the worker has 16 GB."),
        (U, "What are the options besides a bigger box?"),
        (A, "Chunk it in pandas, move to Polars, or let DuckDB run the aggregation directly over the Parquet "
            "files. DuckDB streams the scan and its hash aggregate spills to disk when needed, so memory stays "
            "bounded, and the job becomes one SQL query."),
        (U, "Try DuckDB."),
        (B, "$ /usr/bin/time -v python jobs/daily_revenue.py --date 2026-02-24 2>&1 "
            "| grep -E 'Maximum resident|Elapsed'"
            "\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:41.37\n\tMaximum resident set size (kbytes): 2204712"),
        (A, "With DuckDB the job finishes in 41 s with a peak of 2.1 GB, against about 6 minutes and 14 GB with "
            "pandas. The results match the pandas output to the cent for the last 30 days."),
        (U, "Great, we're replacing pandas with DuckDB for the aggregation jobs: the memory use is what kept "
            "killing us."),
    )),
    Session("dynamo-partitioning", "dynamo", "2026-03-30T13:15:00Z", (
        (U, "The orders Parquet dataset is partitioned by customer_id and we have 180,000 tiny files. Queries are "
            "slow. How should we lay it out?"),
        (A, "Almost every query filters on a date range, so partitioning by event_date lets DuckDB and Athena skip "
            "whole folders. Partitioning by customer creates one folder per customer, most customers have a few "
            "orders a day, so the files are tiny and listing them dominates the query time."),
        (U, "Repartition by event_date then. Hive style, event_date=2026-03-30."),
        (A, "Rewrote the dataset as orders/event_date=YYYY-MM-DD/part-*.parquet, with files targeted at 256 MB and "
            "row groups of 128 MB. It went from 180,000 files to 1,412."),
        (B, "$ duckdb -c \"SELECT count(*) FROM read_parquet('s3://acme-lake/orders/*/*.parquet', "
            "hive_partitioning=true) WHERE event_date >= '2026-03-01'\"\n count_star() \n 31882214 \n"
            "Run Time (s): real 3.914"),
        (U, "A March scan in under 4 seconds, it used to take over a minute. Keep the 256 MB target."),
    )),
    Session("dynamo-timezone", "dynamo", "2026-04-20T15:50:00Z", (
        (U, "Finance says our daily totals don't match theirs; we're off by a few thousand dollars every day, worst "
            "on Mondays."),
        (A, "The job uses Airflow's logical date, which is a UTC day, so it sums orders from 00:00 to 24:00 UTC. "
            "Finance closes its days in New York time, UTC-4 at the moment, so orders placed between 8 pm and "
            "midnight in New York land in the next day for us."),
        (U, "So we compute the day in America/New_York?"),
        (A, "Yes: the window becomes [midnight New York, next midnight New York) converted to UTC, which also "
            "handles the 23 and 25 hour days around DST changes. Timestamps stay stored in UTC; only the window "
            "changes."),
        (U, "Do it. Day boundaries in New York time for anything finance reads; everything else stays UTC."),
        (B, "$ python jobs/daily_revenue.py --date 2026-04-13 --compare finance_export_0413.csv\n"
            "diff: 0 rows differ (was 1,208 before)"),
        (A, "The 13 April totals now match the finance export exactly; before the change 1,208 orders fell on the "
            "wrong day."),
    )),
    Session("dynamo-orchestrator", "dynamo", "2026-05-27T09:00:00Z", (
        (U, "Ana keeps saying we should move from Airflow to Dagster. Thoughts?"),
        (A, "Dagster's asset model fits this pipeline well: date partitions, lineage and local testing are better "
            "than in Airflow. The cost is rewriting 37 DAGs, a new deployment, and retraining the analysts who "
            "write DAGs today."),
        (U, "We decided to stay on Airflow and upgrade to 2.9 for now. The data team knows it, and the move would "
            "take at least a quarter with no feature work. We'll revisit in Q1 next year."),
        (A, "Wrote it up in docs/decisions/2026-05-orchestrator.md. Airflow 2.9 also brings dataset-triggered "
            "scheduling, which covers the main thing we wanted from Dagster."),
        (B, "$ airflow version\n2.9.3"),
    )),
    Session("dynamo-s3-throttle", "dynamo", "2026-06-09T04:22:00Z", (
        (U, "The backfill for March keeps failing:\nbotocore.exceptions.ClientError: An error occurred (SlowDown) "
            "when calling the PutObject operation (reached max retries: 4): Please reduce your request rate."),
        (A, "S3 throttles at about 3,500 PUT requests per second per prefix. The backfill writes one small file per "
            "customer per hour into the same event_date prefix, so it hits that limit. The daily job already "
            "writes large files since the repartitioning, but the backfill script still uses the old writer."),
        (U, "Fix the backfill writer, and make the retries less fragile."),
        (A, "The backfill now writes through the same DuckDB COPY ... (FORMAT parquet, PARTITION_BY (event_date)) "
            "as the daily job, one file per day, and boto3 is configured with retries={'mode': 'adaptive', "
            "'max_attempts': 10}, which slows down when throttled instead of failing after 4 tries."),
        (B, "$ python scripts/backfill.py --from 2026-03-01 --to 2026-03-31\n"
            "wrote 31 partitions, 44 files, 11.2 GB in 6m12s"),
    )),
    Session("dynamo-uv", "dynamo", "2026-07-14T10:30:00Z", (
        (U, "The Atlas repo moved to uv and its CI got much faster. Can we do the same here?"),
        (A, "I'll check how the dependencies are pinned and whether anything relies on poetry."),
        (B, "$ grep -n constraint Makefile\n18:\tpip install \"apache-airflow==2.9.3\" --constraint "
            "https://raw.githubusercontent.com/apache/airflow/constraints-2.9.3/constraints-3.11.txt"),
        (A, "Airflow is installed against its official constraints file, and the scheduler image is built from "
            "those pins. uv can apply a constraints file (`uv pip install -c`), but `uv lock` would resolve its "
            "own set of versions, so the lockfile and the image would disagree."),
        (U, "So not worth it right now?"),
        (A, "Not now: keep poetry in this repo, because the Airflow constraints file decides the versions and a uv "
            "lockfile would drift from it. Worth another look when Airflow 3 is out."),
        (U, "OK, staying on poetry here."),
    ), agent="codex"),
    Session("dynamo-cjk-dedup", "dynamo", "2026-08-18T01:40:00Z", (
        (U, "orders 表里有重复的订单，同一个 order_id 出现了两三次，导致营收多算了。"),
        (A, "上游的 Kafka 消费者重启后会重新投递最后一批消息（at-least-once），所以同一个订单会被写入多次，而且 "
            "updated_at 可能不一样。"),
        (U, "怎么去重？"),
        (A, "在 DuckDB 里用窗口函数，每个 order_id 只保留 updated_at 最新的一行：SELECT * FROM orders QUALIFY "
            "row_number() OVER (PARTITION BY order_id ORDER BY updated_at DESC) = 1。"),
        (U, "就这么定了：按 order_id 去重，保留 updated_at 最新的那条。原因是上游只保证至少一次投递，重复不可避免。"),
        (B, "$ duckdb lake.db -c \"SELECT count(*) - count(DISTINCT order_id) AS dupes FROM orders_clean\"\n"
            " dupes \n     0 "),
        (A, "清洗之后没有重复了。八月的营收从 412 万美元修正为 398 万美元。"),
    )),
    Session("dynamo-cjk-schedule", "dynamo", "2026-09-08T06:05:00Z", (
        (U, "每天早上的报表经常是空的，好像上游的导出还没完成我们就开始跑了。"),
        (A, "daily_revenue 现在的调度时间是每天 UTC 02:00，但是上游 ERP 的导出最近经常到 03:50 才写出 _SUCCESS 文件。"),
        (U, "把调度时间改到 UTC 04:30，另外加一个传感器等 _SUCCESS 文件，最多等两个小时。"),
        (A, "已修改：schedule 改为 \"30 4 * * *\"，并加了 S3KeySensor 等待 _SUCCESS，超时两小时，mode=reschedule，"
            "等待期间不占用 worker 槽位。"),
        (U, "如果等超时了，通知谁？"),
        (A, "超时会触发 on_failure_callback，消息发到 Slack 的 #data-alerts 频道。"),
    )),
    Session("dynamo-replica-export", "dynamo", "2026-10-13T05:30:00Z", (
        (U, "The nightly export from the booking Postgres replica failed again:\n"
            "psycopg.errors.SerializationFailure: canceling statement due to conflict with recovery\n"
            "DETAIL:  User query might have needed to see row versions that must be removed."),
        (A, "The export runs one long SELECT on the hot standby. While it runs, vacuum on the primary removes row "
            "versions the query still needs, and the standby cancels the query after max_standby_streaming_delay "
            "(30 s by default) instead of falling behind."),
        (U, "Options?"),
        (A, "Turn on hot_standby_feedback on the replica, so the primary keeps those rows while the query runs "
            "(at the price of some bloat), or raise max_standby_streaming_delay, or split the export into smaller "
            "queries by day. Splitting by day is the least invasive and makes retries cheap."),
        (U, "Split it by day, and ask the database owners about hot_standby_feedback."),
        (B, "$ python jobs/export_bookings.py --since 2026-10-01\nexported 13 days, 402,118 rows in 2m41s"),
    )),
)

EMBER = (
    Session("ember-idempotency", "ember", "2026-03-05T10:00:00Z", (
        (U, "The payment provider sometimes delivers the same webhook twice, and last week we credited an account "
            "twice. We need idempotency."),
        (A, "Each webhook carries an event id (evt_...). Record it before processing and skip duplicates. The "
            "question is where: Redis SETNX with a TTL is fast, but if Redis restarts the keys are gone and we can "
            "process an event twice; a Postgres table with a unique constraint on event_id is durable and can be "
            "written in the same transaction as the ledger entry."),
        (U, "Postgres. It has to be in the same transaction as the credit, otherwise a crash can still "
            "double-credit."),
        (A, "Added table processed_events(event_id text primary key, received_at timestamptz). The handler runs "
            "INSERT ... ON CONFLICT DO NOTHING inside the ledger transaction; when no row was inserted it returns "
            "200 without processing. A nightly job deletes rows older than 30 days."),
        (B, "$ go test ./internal/webhook/...\nok  \tgithub.com/acme/payhooks/internal/webhook\t0.412s"),
        (U, "For the record: we chose Postgres over Redis for the idempotency keys because they must survive a "
            "restart and commit atomically with the ledger write."),
    )),
    Session("ember-retries", "ember", "2026-04-14T15:10:00Z", (
        (U, "When the ledger service is down, webhooks fail and the provider gives up after 3 attempts. How should "
            "our own retries work?"),
        (A, "Accept the webhook quickly (store it, return 200), then process it from a queue with our own retry "
            "policy: exponential backoff with full jitter starting at 1 s, capped at 5 minutes, 8 attempts, then a "
            "dead-letter queue for manual review."),
        (U, "Use SQS for the queue and the DLQ. 8 attempts is fine."),
        (A, "Implemented: the handler enqueues to payhooks-webhooks; the worker retries with exponential backoff "
            "(1 s, cap 5 min, full jitter), and after 8 receives SQS moves the message to payhooks-webhooks-dlq "
            "(maxReceiveCount 8)."),
        (U, "Why full jitter and not equal jitter?"),
        (A, "When many messages fail at the same moment, as when the ledger is down, full jitter spreads the "
            "retries most evenly, so they don't all hit the ledger at once when it comes back."),
    )),
    Session("ember-lint", "ember", "2026-05-08T09:15:00Z", (
        (U, "Let's set up golangci-lint properly. Which linters?"),
        (A, "A solid default: errcheck, govet, staticcheck, ineffassign, unused, gosec and revive, with gofumpt as "
            "the formatter."),
        (B, "$ golangci-lint run ./...\ninternal/ledger/client.go:58:2: ineffectual assignment to err (ineffassign)\n"
            "internal/webhook/verify.go:31:9: G505: Blocklisted import crypto/sha1: weak cryptographic primitive "
            "(gosec)"),
        (A, "Two findings: in ledger/client.go the error from http.Do is overwritten before it is checked, so a "
            "failed request could be treated as a success; and verify.go imports crypto/sha1 for the legacy "
            "signature scheme."),
        (U, "Fix the ineffassign one, it's a real bug. The sha1 is for the old provider signature, add a nolint "
            "with a reason. Also: I prefer tabs, which gofmt does anyway, and always run golangci-lint before "
            "committing; put it in the pre-commit hook."),
        (A, "Fixed the error check, added `//nolint:gosec // legacy provider signature uses HMAC-SHA1`, and a "
            "pre-commit hook that runs `golangci-lint run --fix` on the staged packages."),
    )),
    Session("ember-deadlock", "ember", "2026-06-03T21:05:00Z", (
        (U, "The reconciliation worker hangs and then dies with:\n"
            "fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [semacquire]:\n"
            "sync.runtime_Semacquire(0xc0000a4018)\nsync.(*WaitGroup).Wait(0xc0000a4010)\nmain.reconcile(...)\n"
            "\tcmd/reconcile/main.go:74 +0x1c5"),
        (A, "reconcile() sends results on an unbuffered channel that is only read after wg.Wait() returns. The "
            "workers block on the send, so they never call wg.Done, and main waits forever. Close the channel "
            "from a separate goroutine after wg.Wait() and range over it in main."),
        (U, "Fix it."),
        (A, "main.go now starts `go func() { wg.Wait(); close(results) }()` and then ranges over results. I also "
            "added a test under -race that reconciles 10,000 transactions."),
        (B, "$ go test -race ./cmd/reconcile/\nok  \tgithub.com/acme/payhooks/cmd/reconcile\t2.871s"),
    )),
    Session("ember-grpc", "ember", "2026-07-01T11:30:00Z", (
        (U, "The ledger team asks whether our calls to them should stay REST/JSON or move to gRPC."),
        (A, "For internal service-to-service calls gRPC gives typed contracts generated from .proto files, "
            "deadlines and cancellation carried through the context, and much smaller payloads. The downside is "
            "tooling: you need protoc or buf, and curl no longer works for debugging (grpcurl does)."),
        (U, "Let's use gRPC for the internal ledger calls, with buf to manage the protos. The public webhook "
            "endpoint obviously stays plain HTTP with JSON, because the provider calls it."),
        (A, "Added proto/ledger/v1/ledger.proto, buf.yaml and buf.gen.yaml; `buf generate` writes the Go stubs to "
            "gen/. The ledger client now uses the generated LedgerServiceClient with a 3 second deadline per call."),
        (B, "$ buf lint && buf generate && go build ./...\n"),
    )),
    Session("ember-fx-cache", "ember", "2026-07-22T08:20:00Z", (
        (U, "We call the FX rates API on every webhook to convert amounts. It's slow and we pay per call. Cache it?"),
        (A, "Rates change at most once a minute on that plan. An in-process cache is enough here: the service runs "
            "as a single replica per region, and a miss only costs one API call. ristretto, or a map with a mutex "
            "and an expiry, would do."),
        (U, "Use ristretto with a 5 minute TTL. No Redis for this: one replica, and a rate a few minutes old is "
            "acceptable for display conversions; settlement uses the rate in the provider's payload anyway."),
        (A, "Added internal/fx/cache.go: ristretto with a 5 minute TTL keyed by currency pair. Calls to the FX API "
            "dropped from about 90,000 a day to 600."),
    )),
    Session("ember-cjk-timeout", "ember", "2026-08-26T03:00:00Z", (
        (U, "支付网关最近经常超时，日志里全是 context deadline exceeded。"),
        (A, "我们调用网关的超时是 5 秒，但网关的 p99 延迟最近升到了 7 秒左右，尤其是在北京时间晚上的高峰期。"),
        (U, "把超时改成 15 秒？会不会太长？"),
        (A, "15 秒可以接受，因为这是异步的 webhook 处理，不影响用户。但如果网关完全挂掉，每个请求都要等 15 秒，建议同时加熔断器："
            "连续失败 20 次后熔断 30 秒。"),
        (U, "好，决定：超时改成 15 秒，用 sony/gobreaker 加熔断，连续失败 20 次就断开 30 秒。"),
        (A, "已修改 internal/gateway/client.go：超时 15 秒；gobreaker 在连续失败超过 20 次时打开，30 秒后进入半开状态。"),
        (B, "$ go test ./internal/gateway/\nok  \tgithub.com/acme/payhooks/internal/gateway\t1.204s"),
    )),
    Session("ember-docker", "ember", "2026-09-15T13:45:00Z", (
        (U, "Our Docker image is 900 MB. Can we slim it down?"),
        (A, "Let me check the Dockerfile and the current image."),
        (B, "$ docker images payhooks\nREPOSITORY   TAG      IMAGE ID       CREATED      SIZE\n"
            "payhooks     latest   3c1f0a9b2e77   2 days ago   912MB"),
        (A, "The image is built FROM golang:1.23 and ships the whole toolchain. A multi-stage build that compiles in "
            "golang:1.23 and copies only the binary into gcr.io/distroless/static should land around 20 to 30 MB."),
        (U, "Did it, but the container now fails at start with `exec /app/server: no such file or directory`."),
        (A, "That message means the dynamic loader is missing, not the binary: it was built with cgo enabled (the "
            "default when a C compiler is present) and links against glibc, which distroless/static does not "
            "have. Build with CGO_ENABLED=0 to get a static binary."),
        (U, "CGO_ENABLED=0 worked. How big is it now?"),
        (A, "24 MB, down from 912 MB, and the container starts in under a second."),
    ), agent="codex"),
)

FJORD = (
    Session("fjord-tf-lock", "fjord", "2026-02-17T11:45:00Z", (
        (U, "terraform plan fails for everyone:\nError: Error acquiring the state lock\n\n"
            "Error message: ConditionalCheckFailedException: The conditional request failed\nLock Info:\n"
            "  ID:        6c1e2f7a-93d4-4b8e-a5c2-0f8e1d9b3a47\n  Path:      acme-tfstate/prod/terraform.tfstate\n"
            "  Operation: OperationTypeApply\n  Who:       runner@gha-4f2c\n  Created:   2026-02-17 09:02:11 UTC"),
        (A, "A GitHub Actions apply took the lock at 09:02 and never released it, most likely because the job was "
            "cancelled in the middle of the apply. Check that no apply is still running, then release the lock with "
            "terraform force-unlock and the lock ID."),
        (U, "The run was cancelled when I pushed a new commit. Nothing is running now."),
        (B, "$ terraform force-unlock -force 6c1e2f7a-93d4-4b8e-a5c2-0f8e1d9b3a47\n"
            "Terraform state has been successfully unlocked!"),
        (A, "Unlocked. To stop it happening again, give the workflow a concurrency group with cancel-in-progress: "
            "false for apply jobs, so a new push waits instead of killing an apply that holds the lock."),
        (U, "Yes, do that. Applies must never be cancelled."),
    )),
    Session("fjord-ci-runners", "fjord", "2026-03-20T10:20:00Z", (
        (U, "Our CI queue times are bad. Should we run self-hosted runners on our EKS cluster with "
            "actions-runner-controller?"),
        (A, "Self-hosted runners are cheaper per minute at our volume, but we'd own the autoscaling, image updates, "
            "isolation for untrusted pull requests and disk cleanup. GitHub's larger hosted runners (8 or 16 "
            "cores) cost more per minute but need no upkeep and finish faster."),
        (U, "Let's stay on GitHub-hosted runners, with the 8-core larger runners for the heavy jobs. Nobody here "
            "wants to maintain runner infrastructure; that's the main reason."),
        (A, "Moved the test and build jobs to the ubuntu-latest-8-cores runner group, and added actions/cache "
            "keyed on hashFiles('**/uv.lock', '**/pnpm-lock.yaml') so dependency installs hit the cache."),
        (U, "How did the queue time look after a week?"),
        (A, "Median queue time went from 4 min 10 s to 12 s, and the whole pipeline from 23 to 11 minutes."),
    )),
    Session("fjord-oom", "fjord", "2026-04-24T02:50:00Z", (
        (U, "The API pods keep restarting. kubectl says:\nLast State:     Terminated\n  Reason:       OOMKilled\n"
            "  Exit Code:    137"),
        (B, "$ kubectl top pod -n booking -l app=booking-api\n"
            "NAME                          CPU(cores)   MEMORY(bytes)\n"
            "booking-api-6d5f8c7b9-2xkqp   212m         498Mi\nbooking-api-6d5f8c7b9-8vltn   188m         507Mi"),
        (A, "The pods sit right under their 512Mi limit, and warming the new availability cache at start pushes "
            "them over. The request is only 256Mi, so the scheduler also packs them too densely."),
        (U, "Raise the memory limit to 1Gi and set the request equal to the limit. I want memory requests equal to "
            "limits for every service, so nothing gets OOM-killed because a neighbour grew."),
        (A, "Set resources.requests.memory and resources.limits.memory to 1Gi in charts/booking-api/values.yaml, "
            "and added a conftest policy that rejects any deployment whose memory request differs from its limit."),
    )),
    Session("fjord-secrets", "fjord", "2026-05-29T14:35:00Z", (
        (U, "We need a better way to handle secrets in the cluster than the sealed-secrets we commit to git. "
            "Rotation is painful: every rotation is a pull request per environment."),
        (A, "External Secrets Operator syncs Kubernetes secrets from AWS Secrets Manager. Rotation happens in "
            "Secrets Manager and the operator refreshes the Kubernetes secret on an interval, so no pull requests; "
            "git only holds the ExternalSecret reference."),
        (U, "Go with External Secrets Operator and AWS Secrets Manager, because of rotation. Refresh every hour."),
        (A, "Installed external-secrets with Helm, added a ClusterSecretStore that authenticates with IRSA, and "
            "converted the booking-api and webhook secrets to ExternalSecret resources with refreshInterval: 1h. "
            "The sealed-secrets controller stays until every service has moved."),
    )),
    Session("fjord-helm", "fjord", "2026-06-25T17:05:00Z", (
        (U, "The deploy pipeline is stuck:\n"
            "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress"),
        (A, "A previous helm upgrade was interrupted and left the release in pending-upgrade. Rolling back to the "
            "last deployed revision clears that state."),
        (B, "$ helm history booking-api -n booking | tail -2\n"
            "41  Tue Jun 23 10:12:09 2026  deployed         booking-api-1.8.2  Upgrade complete\n"
            "42  Thu Jun 25 16:48:51 2026  pending-upgrade  booking-api-1.8.3  Preparing upgrade\n"
            "$ helm rollback booking-api 41 -n booking\nRollback was a success! Happy Helming!"),
        (A, "Rolled back to revision 41; the pipeline's upgrade to 1.8.3 went through on retry. I also added "
            "--atomic --timeout 10m to the helm upgrade in the pipeline, so a failed upgrade rolls itself back "
            "instead of staying pending."),
    )),
    Session("fjord-graviton", "fjord", "2026-08-03T09:25:00Z", (
        (U, "Can we move the EKS node groups to Graviton? Finance wants the bill down."),
        (A, "Checking which of our images are multi-arch first."),
        (B, "$ for i in booking-api payhooks tiles; do echo \"$i: $(docker manifest inspect registry.acme.dev/$i:latest"
            " | jq -r '.manifests[].platform.architecture' | paste -sd,)\"; done\n"
            "booking-api: amd64,arm64\npayhooks: amd64\ntiles: amd64,arm64"),
        (A, "booking-api and tiles already publish arm64 images; payhooks is amd64 only. m7g instances cost about "
            "20% less than m6i of the same size. Plan: build payhooks for arm64 too, add an m7g node group, move "
            "the workloads over with node affinity, then drain the m6i group."),
        (U, "Do it in that order. Target: every node group on Graviton by the end of August."),
        (A, "Added the m7g.large node group (min 3, max 12) in terraform/eks/nodegroups.tf and a multi-arch build "
            "for payhooks with docker buildx --platform linux/amd64,linux/arm64."),
    ), agent="codex"),
    Session("fjord-cjk-alerts", "fjord", "2026-09-22T07:30:00Z", (
        (U, "值班的同事说告警太多了，半夜被 CPU 告警叫醒好几次，但其实都没问题。"),
        (A, "现在的规则是 CPU 超过 80% 持续 2 分钟就报警。批处理任务每天凌晨都会让 CPU 短时间超过 80%，所以几乎全是误报。"),
        (U, "决定：CPU 告警阈值改成 90%，持续 10 分钟才报警。非工作时间只有 critical 级别的告警才打电话，其他的发到 Slack。"),
        (A, "已修改 Prometheus 规则：expr 改为 > 0.9，for: 10m。Alertmanager 加了路由：severity=critical 走 Grafana "
            "OnCall 电话通知，其余发到 #infra-alerts。"),
        (U, "上个月一共有多少次误报？"),
        (A, "八月一共 46 次 CPU 告警，其中 41 次是批处理引起的误报。"),
    )),
    Session("fjord-cert", "fjord", "2026-10-06T08:00:00Z", (
        (U, "Yesterday's outage: the TLS certificate for api.acme.dev expired at 03:12 UTC and every client failed "
            "with certificate errors for 47 minutes. Why didn't cert-manager renew it?"),
        (B, "$ kubectl describe challenge -n booking | grep Reason\n  Reason:  Error presenting challenge: "
            "AccessDenied: not authorized to perform: route53:ChangeResourceRecordSets on resource: "
            "hostedzone/Z0ABC123"),
        (A, "cert-manager tried to renew 30 days before expiry, but the DNS-01 challenge failed every time: its IAM "
            "role lost route53:ChangeResourceRecordSets when the hosted zone was recreated in August with a new "
            "ID, and the policy still named the old zone."),
        (U, "Fix the policy, and make sure we hear about it next time before it expires."),
        (A, "The IAM policy now references the zone through Terraform (aws_route53_zone.api.arn) instead of a "
            "hard-coded ID, so recreating the zone updates it. I added a Prometheus alert on "
            "certmanager_certificate_expiration_timestamp_seconds that fires when a certificate has less than "
            "14 days left."),
        (U, "Write the postmortem: root cause is the stale zone ID in the IAM policy, 47 minutes of impact."),
    )),
)

SESSIONS: tuple[Session, ...] = ATLAS + BEACON + CARTOGRAPHER + DYNAMO + EMBER + FJORD
