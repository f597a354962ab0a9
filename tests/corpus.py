"""Synthetic agent logs shaped like the real fixtures, for tests and the bench.

Claude Code transcripts, Codex rollouts (plain, zstd-compressed, archived),
Grok Build update streams and a Cursor global state.vscdb.  Every generator
is deterministic for a seed: ids are unique, text mixes English, CJK and
code, and timestamps spread over months, all in the past.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import itertools
import json
import os
import random
import sqlite3
import urllib.parse
import uuid
from pathlib import Path
from typing import NamedTuple

WORDS = (
    "schema migration index cursor mirror ingest search timeline entry forget provenance "
    "refactor parser adapter session project branch commit review deploy cache latency "
    "database sqlite trigram tokenizer generation rollout compression archive append "
    "decision reason because therefore benchmark memory pressure thread process lock "
    "function module import export config token secret hub device replica retry"
).split()
CJK = "数据库 索引 迁移 会话 项目 搜索 遗忘 记忆 知识 认知 决定 原因 性能 内存 文件 镜像 游标 压缩 归档".split()
CODE = [
    "def ingest_file(store, adapter, sf):",
    "SELECT count(*) FROM event WHERE session = ?",
    "for line in reader: parse(line)",
    "const x = await fetch(url);",
    "git rebase -i HEAD~3",
    "CREATE VIRTUAL TABLE t USING fts5(text, tokenize='trigram')",
]


#: English letter frequencies (per mille), so generated words share
#: trigrams the way real words do: a few very common, most rare.
_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_LETTER_WEIGHTS = [127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 24, 22, 20, 20, 19, 15, 10, 8, 2, 2, 1, 1]


def _zipf(first: list[str], make, size: int, seed: int) -> tuple[list[str], list[float]]:
    """Return size distinct words (first, then make(rng) ones) and their
    cumulative Zipf weights: the word of rank r is drawn with weight 1/r."""
    rng = random.Random(seed)
    seen, words = set(first), list(first)
    while len(words) < size:
        w = make(rng)
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words, list(itertools.accumulate(1.0 / (i + 1) for i in range(len(words))))


@functools.lru_cache(maxsize=None)
def _vocab() -> tuple[list[str], list[float]]:
    """Return a 20,000-word vocabulary with Zipf weights (cumulative)."""
    return _zipf(list(WORDS), lambda r: "".join(r.choices(_LETTERS, weights=_LETTER_WEIGHTS, k=r.randint(3, 10))),
                 20000, 1)


#: Common characters from which CJK words are made.
_HANZI = ("数据库索引迁移会话项目搜索遗忘记忆知识认知决定原因性能内存文件镜像游标压缩归档"
          "用户服务接口测试部署配置日志错误修复版本分支合并提交代码模块函数变量类型结构"
          "网络请求响应缓存队列线程进程时间任务计划设计方案问题需求功能页面组件样式")


@functools.lru_cache(maxsize=None)
def _cjk_vocab() -> tuple[list[str], list[float]]:
    """Return 5,000 CJK words with Zipf weights: the list above first, then
    generated two- to four-character words, so a rare one is really rare."""
    return _zipf(list(CJK), lambda r: "".join(r.choices(_HANZI, k=r.choice((2, 3, 3, 4)))), 5000, 2)


def _text(rng: random.Random, n_words: int) -> str:
    words, cum = _vocab()
    cjk, cjk_cum = _cjk_vocab()
    parts = []
    for w in rng.choices(words, cum_weights=cum, k=n_words):
        r = rng.random()
        if r < 0.04:
            parts.append(rng.choices(cjk, cum_weights=cjk_cum)[0])
        elif r < 0.06:
            parts.append(rng.choice(CODE))
        elif r < 0.07:
            parts.append(f"id{rng.randrange(10**6):06d}")
        else:
            parts.append(w)
    return " ".join(parts)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _blob(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(_B64, k=n))


def _usage(rng: random.Random) -> dict:
    return {"input_tokens": rng.randint(1, 40), "cache_creation_input_tokens": rng.randint(0, 9000),
            "cache_read_input_tokens": rng.randint(0, 90000), "output_tokens": rng.randint(1, 2000),
            "service_tier": "standard", "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                                           "ephemeral_1h_input_tokens": rng.randint(0, 9000)}}


class ClaudeRecords:
    """The lines of one Claude Code session, written record by record: each
    gets the previous one's uuid as its parent, the session's fields, a new
    uuid and its time (``step`` after the previous record's)."""

    def __init__(self, rng: random.Random, session: str, cwd: str, start: dt.datetime) -> None:
        self.rng, self.t, self.parent, self.lines = rng, start, None, []
        self.base = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session,
                     "version": "2.1.80", "gitBranch": "main", "entrypoint": "cli"}

    def emit(self, rec: dict, step: dt.timedelta) -> None:
        self.t += step
        u = _uuid(self.rng)
        self.lines.append(json.dumps({"parentUuid": self.parent, **self.base, **rec, "uuid": u,
                                      "timestamp": _iso_ms(self.t)}, ensure_ascii=False))
        self.parent = u

    def assistant(self, content: list) -> dict:
        """An assistant record holding content, with its request, message id and usage."""
        rng = self.rng
        return {"type": "assistant", "requestId": "req_" + _blob(rng, 24), "message": {
            "id": "msg_" + _blob(rng, 24), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": None, "stop_sequence": None, "usage": _usage(rng)}}


def claude_session_lines(rng: random.Random, session: str, cwd: str, start: dt.datetime, turns: int,
                         outputs: tuple[int, ...] = (15, 40, 120, 600, 1500), edits: float = 0.0,
                         talk: float = 1.0) -> list[str]:
    """Return the JSONL lines of one Claude Code session.

    The shapes follow real Claude Code 2.1 transcripts: one line per content
    block, usage repeated on every assistant line, thinking with a signature,
    and tool output present twice (``toolUseResult`` and the result block).
    ``outputs`` are the tool output sizes (in words) to pick from; ``edits``
    is the share of tool uses that edit a file (see ``_claude_edit``);
    ``talk`` scales the longest thinking and reply.
    """
    w = ClaudeRecords(rng, session, cwd, start)
    assistant = w.assistant

    def emit(rec: dict) -> None:
        w.emit(rec, dt.timedelta(seconds=rng.randint(1, 90)))

    for _ in range(turns):
        emit({"type": "user", "promptId": _uuid(rng), "permissionMode": "default",
              "message": {"role": "user", "content": _text(rng, rng.randint(5, 40))}})
        emit(assistant([{"type": "thinking", "thinking": _text(rng, rng.randint(20, max(20, round(120 * talk)))),
                         "signature": _blob(rng, rng.randint(400, 1600))}]))
        emit(assistant([{"type": "text", "text": _text(rng, rng.randint(10, max(10, round(80 * talk))))}]))
        for _ in range(rng.choice((0, 1, 1, 2))):
            tid = "toolu_" + _blob(rng, 24)
            if edits and rng.random() < edits:
                use, result = _claude_edit(rng, tid, cwd)
                emit(assistant([use]))
                emit(result)
                continue
            cmd = rng.choice(CODE)
            emit(assistant([{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": cmd,
                                                                                       "description": _text(rng, 6)}}]))
            out = _text(rng, rng.choice(outputs))
            emit({"type": "user", "toolUseResult": {"stdout": out, "stderr": "", "interrupted": False,
                                                    "isImage": False},
                  "message": {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": tid, "content": out, "is_error": False}]}})
    return w.lines


def _claude_edit(rng: random.Random, tid: str, cwd: str) -> tuple[dict, dict]:
    """Return an Edit tool use and its result line, as Claude Code writes them.

    The edit's old and new text are in the call; the result block is one
    short sentence, while ``toolUseResult`` repeats the edit and carries the
    whole file before it and a structured patch, none of which is indexed.
    """
    path = f"{cwd}/src/{rng.choice(WORDS)}.py"
    old, new = _text(rng, rng.randint(10, 120)), _text(rng, rng.randint(10, 160))
    original = _text(rng, rng.choice((150, 400, 1000)))
    use = {"type": "tool_use", "id": tid, "name": "Edit",
           "input": {"file_path": path, "old_string": old, "new_string": new, "replace_all": False}}
    start = rng.randint(1, 400)
    patch = [{"oldStart": start, "oldLines": old.count(" ") // 8 + 1, "newStart": start,
              "newLines": new.count(" ") // 8 + 1,
              "lines": [" " + _text(rng, 8), *("-" + w for w in old.split(" ")[::8]),
                        *("+" + w for w in new.split(" ")[::8]), " " + _text(rng, 8)]}]
    result = {"type": "user", "toolUseResult": {"filePath": path, "oldString": old, "newString": new,
                                                 "originalFile": original, "structuredPatch": patch,
                                                 "userModified": False, "replaceAll": False},
              "message": {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": tid, "content": f"The file {path} has been updated."}]}}
    return use, result


def write_claude_corpus(root: Path, *, files: int, turns: int | tuple[int, int], seed: int = 7,
                        projects: int = 5, start: dt.datetime | None = None,
                        outputs: tuple[int, ...] = (15, 40, 120, 600, 1500), edits: float = 0.0,
                        talk: float = 1.0) -> list[Path]:
    """Write files sessions under root/projects/<slug>/; return their paths.

    ``turns`` is the number of turns per session, or a (low, high) range;
    ``outputs`` the tool output sizes in words, ``edits`` the share of tool
    uses that edit a file, ``talk`` scales the longest thinking and reply.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(files):
        proj = f"proj{i % projects}"
        cwd = f"/home/dev/src/{proj}"
        folder = root / "projects" / cwd.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        session = _uuid(rng)
        t0 = start + dt.timedelta(hours=rng.randint(0, 24 * 150))
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        lines = claude_session_lines(rng, session, cwd, t0, n, outputs, edits, talk)
        p = folder / f"{session}.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(p)
    return out


###############################################################################
# Shared by the other agents' generators #######################################
###############################################################################

#: Spread of session start times, as for Claude Code: 150 days from start.
SPAN_HOURS = 24 * 150


def _uuid7(rng: random.Random, t: dt.datetime) -> str:
    """Return a UUIDv7 for time t: the id shape Codex and Grok use since 2025."""
    ms = int(t.timestamp() * 1000)
    n = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    return str(uuid.UUID(int=n))


def _iso_ms(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _iso_ns(rng: random.Random, t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}{rng.randrange(1000):03d}Z"


def _epoch_ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def _age(path: Path, t: dt.datetime) -> None:
    """Set path's mtime to t: a log was last written when its last line was.

    Sources written less than a minute ago count as still being written,
    so a freshly generated corpus would otherwise ingest differently from a
    cached one.
    """
    ts = t.timestamp()
    os.utime(path, (ts, ts))


#: Tool output sizes in words: mostly short, sometimes long (as Claude's).
OUTPUT_WORDS = (15, 40, 120, 600, 1500)


def _tool_output(rng: random.Random) -> str:
    """Return a tool's output: mostly short, sometimes long (as Claude's)."""
    return _text(rng, rng.choice(OUTPUT_WORDS))


def _chunks(rng: random.Random, text: str, low: int = 3, high: int = 12) -> list[str]:
    """Split text into streamed pieces of a few words; joined they give text back."""
    words = text.split(" ")
    out, i = [], 0
    while i < len(words):
        n = rng.randint(low, high)
        piece = " ".join(words[i:i + n])
        out.append(piece if i == 0 else " " + piece)
        i += n
    return out


###############################################################################
# Codex CLI ####################################################################
###############################################################################

#: (cli_version, originator, writes ordinals): a 0.10x build without
#: ordinals and a 0.14x build with them, as the fixtures show.
CODEX_BUILDS = (("0.104.0", "codex_cli_rs", False), ("0.146.0", "codex_cli_rs", True),
                ("0.104.0-alpha.1", "Codex Desktop", False))


def _codex_rate_limits(rng: random.Random) -> dict:
    return {"limit_id": "codex", "limit_name": None,
            "primary": {"used_percent": float(rng.randint(0, 60)), "window_minutes": 300,
                        "resets_at": 1771864834 + rng.randrange(10**6)},
            "secondary": {"used_percent": float(rng.randint(0, 30)), "window_minutes": 10080,
                          "resets_at": 1772355702 + rng.randrange(10**6)},
            "credits": {"has_credits": False, "unlimited": False, "balance": None}, "plan_type": None}


def _codex_usage(rng: random.Random) -> dict:
    inp, cached, out, reasoning = (rng.randint(9000, 90000), rng.randint(0, 80000), rng.randint(20, 2000),
                                   rng.randint(0, 600))
    return {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
            "reasoning_output_tokens": reasoning, "total_tokens": inp + out}


def _codex_call(rng: random.Random, cwd: str, outputs: tuple[int, ...] = OUTPUT_WORDS) -> tuple[dict, dict]:
    """Return a (call, output) pair of response items, as one tool run."""
    call_id = "call_" + _blob(rng, 24)
    out = _text(rng, rng.choice(outputs))
    cmd = rng.choice(CODE)
    kind = rng.random()
    if kind < 0.45:  # 0.10x: exec_command, output as the shell prints it
        args = {"cmd": cmd, "workdir": cwd, "yield_time_ms": 10000, "max_output_tokens": 12000}
        output = (f"Chunk ID: {_blob(rng, 6).lower()}\nWall time: {rng.random():.4f} seconds\n"
                  f"Process exited with code 0\nOriginal token count: {len(out) // 4}\nOutput:\n{out}")
    elif kind < 0.9:  # the older shell tool: the output is JSON in a string
        args = {"command": ["bash", "-lc", cmd], "workdir": cwd, "timeout_ms": 120000}
        output = json.dumps({"output": out, "metadata": {"exit_code": 0,
                                                        "duration_seconds": round(rng.random() * 3, 1)}})
    else:  # apply_patch: a custom tool whose input is the patch itself
        patch = (f"*** Begin Patch\n*** Update File: src/{rng.choice(WORDS)}.py\n@@\n-{cmd}\n"
                 f"+{_text(rng, 12)}\n*** End Patch\n")
        return ({"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "apply_patch",
                 "input": patch},
                {"type": "custom_tool_call_output", "call_id": call_id,
                 "output": json.dumps({"output": f"Success. Updated the following files:\nM {out[:80]}\n",
                                       "metadata": {"exit_code": 0, "duration_seconds": 0.0}})})
    name = "exec_command" if "cmd" in args else "shell"
    return ({"type": "function_call", "name": name, "arguments": json.dumps(args), "call_id": call_id},
            {"type": "function_call_output", "call_id": call_id, "output": output})


def codex_rollout_lines(rng: random.Random, thread: str, cwd: str, start: dt.datetime, turns: int,
                        instructions: str, outputs: tuple[int, ...] = OUTPUT_WORDS,
                        talk: float = 1.0) -> tuple[list[str], dt.datetime]:
    """Return the JSONL lines of one Codex rollout, and the time of the last.

    The shapes follow real 0.104 and 0.146 rollouts: envelope lines with an
    optional rising ``ordinal``, developer and injected user context first,
    then per turn task_started, the prompt twice (item and ``user_message``
    event), ``turn_context``, reasoning with ``encrypted_content``,
    commentary, tool calls with JSON-in-a-string arguments and outputs,
    token counts, and the final answer.
    """
    version, originator, ordinals = rng.choice(CODEX_BUILDS)
    model = rng.choice(("gpt-5.3-codex", "gpt-5.2-codex", "gpt-5.5"))
    lines: list[str] = []
    t = start

    def emit(kind: str, payload: dict, step: float = 0.5) -> None:
        nonlocal t
        t += dt.timedelta(seconds=rng.random() * step)
        rec: dict = {"timestamp": _iso_ms(t)}
        if ordinals:
            rec["ordinal"] = len(lines)
        rec.update(type=kind, payload=payload)
        lines.append(json.dumps(rec, ensure_ascii=False))

    def item(payload: dict, step: float = 0.5) -> None:
        emit("response_item", payload, step)

    def event(payload: dict, step: float = 0.5) -> None:
        emit("event_msg", payload, step)

    def message(role: str, text: str, **extra) -> dict:
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}], **extra}

    branch = rng.choice(("main", "main", "dev", f"feature/{rng.choice(WORDS)}"))
    emit("session_meta", {
        "id": thread, "timestamp": _iso_ms(start), "cwd": cwd, "originator": originator, "cli_version": version,
        "source": "cli" if originator == "codex_cli_rs" else "vscode", "model_provider": "openai",
        "base_instructions": {"text": instructions},
        "git": {"commit_hash": _blob(rng, 40).lower(), "branch": branch,
                "repository_url": f"git@github.com:dev/{cwd.rsplit('/', 1)[-1]}.git"}})
    item(message("developer", "<permissions instructions>\n" + _text(rng, rng.randint(300, 600))
                 + "\n</permissions instructions>"))
    item(message("user", f"# AGENTS.md instructions for {cwd}\n\n<INSTRUCTIONS>\n" + _text(rng, rng.randint(80, 300))
                 + "\n</INSTRUCTIONS>"))
    item(message("user", f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <shell>bash</shell>\n"
                          f"  <current_date>{start:%Y-%m-%d}</current_date>\n  <timezone>Etc/UTC</timezone>\n"
                          "</environment_context>"))
    sandbox = {"type": "workspace-write", "writable_roots": [cwd], "network_access": False,
               "exclude_tmpdir_env_var": False, "exclude_slash_tmp": False}
    for n in range(turns):
        turn = _uuid7(rng, t)
        event({"type": "task_started", "turn_id": turn, "model_context_window": 258400,
               "collaboration_mode_kind": "default"}, step=600)
        prompt = _text(rng, rng.randint(5, 60))
        item(message("user", prompt))
        event({"type": "user_message", "message": prompt, "images": [], "local_images": [], "text_elements": []})
        context = {"turn_id": turn, "cwd": cwd, "approval_policy": "on-request", "sandbox_policy": sandbox,
                   "model": model, "personality": "pragmatic", "effort": "high", "summary": "auto",
                   "collaboration_mode": {"mode": "default", "settings": {
                       "model": model, "reasoning_effort": "high", "developer_instructions": None}}}
        emit("turn_context", context)
        if n == 0:
            event({"type": "token_count", "info": None, "rate_limits": _codex_rate_limits(rng)})
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            summary = f"**{_text(rng, 4)}**\n\n{_text(rng, rng.randint(10, 40))}"
            event({"type": "agent_reasoning", "text": summary}, step=8)
            item({"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}], "content": None,
                  "encrypted_content": "gAAAAA" + _blob(rng, rng.randint(800, 2400))})
            if rng.random() < 0.7:
                note = _text(rng, rng.randint(10, max(10, round(60 * talk))))
                event({"type": "agent_message", "message": note})
                item(message("assistant", note, phase="commentary"))
            pairs = [_codex_call(rng, cwd, outputs) for _ in range(rng.randint(1, 3))]
            for call, _ in pairs:
                item(call)
            usage = _codex_usage(rng)
            info = {"total_token_usage": usage, "last_token_usage": usage, "model_context_window": 258400}
            event({"type": "token_count", "info": info, "rate_limits": _codex_rate_limits(rng)})
            for _, output in pairs:
                item(output, step=4)
            emit("turn_context", context)
        answer = _text(rng, rng.randint(30, max(30, round(200 * talk))))
        event({"type": "agent_message", "message": answer}, step=10)
        item(message("assistant", answer, phase="final_answer"))
        usage = _codex_usage(rng)
        event({"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage,
                                               "model_context_window": 258400},
               "rate_limits": _codex_rate_limits(rng)})
        event({"type": "task_complete", "turn_id": turn, "last_agent_message": answer})
        if n == 0 and ordinals:
            event({"type": "thread_name_updated", "thread_id": thread, "thread_name": _text(rng, 5)})
    return lines, t


def _zstd(data: bytes, frames: int) -> bytes:
    """Compress data as frames zstd frames, split at line ends (as Codex does)."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=3)
    lines = data.splitlines(keepends=True)
    step = max(1, -(-len(lines) // frames))
    return b"".join(cctx.compress(b"".join(lines[i:i + step])) for i in range(0, len(lines), step))


def write_codex_corpus(root: Path, *, files: int, turns: int | tuple[int, int], seed: int = 7,
                       projects: int = 5, start: dt.datetime | None = None, outputs: tuple[int, ...] = OUTPUT_WORDS,
                       talk: float = 1.0) -> list[Path]:
    """Write files rollouts under root (a CODEX_HOME); return their paths.

    Live rollouts go to ``sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl``.
    Every third one is compressed to ``.jsonl.zst`` the way Codex's idle
    compressor leaves it (every other of those in several frames), and
    every other compressed one is moved to ``archived_sessions/``.  ``outputs``
    are the tool output sizes in words; ``talk`` scales the longest
    commentary and answer.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    instructions = _text(random.Random(seed + 1), 1800)  # one build's prompt, shared by its sessions
    out = []
    for i in range(files):
        cwd = f"/home/dev/src/proj{i % projects}"
        t0 = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        thread = _uuid7(rng, t0)
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        lines, t_end = codex_rollout_lines(rng, thread, cwd, t0, n, instructions, outputs, talk)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        name = f"rollout-{t0:%Y-%m-%dT%H-%M-%S}-{thread}.jsonl"
        folder = root / "sessions" / f"{t0:%Y}" / f"{t0:%m}" / f"{t0:%d}"
        if i % 3 == 2:
            archived = i % 6 == 5
            folder = root / "archived_sessions" if archived else folder
            data, name = _zstd(data, frames=1 if i % 12 < 6 else rng.randint(2, 4)), name + ".zst"
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / name
        p.write_bytes(data)
        _age(p, t_end)
        out.append(p)
    return out


###############################################################################
# Grok Build ###################################################################
###############################################################################

_GROK_TOOLS = ("read", "execute", "edit", "search")


def _grok_tool(rng: random.Random, cwd: str) -> tuple[dict, list[dict]]:
    """Return a tool_call update and its tool_call_updates.

    Every update repeats the whole output so far, as Grok Build writes it;
    a shell command's output comes as ``rawOutput`` beside a terminal block.
    Some calls end without a final status and are closed by turn_completed.
    """
    tid = "call_" + _blob(rng, 24)
    kind = rng.choice(_GROK_TOOLS)
    path = f"{cwd}/src/{rng.choice(WORDS)}.py"
    raw_input = {"read": {"path": path}, "execute": {"command": rng.choice(CODE), "cwd": cwd},
                 "edit": {"path": path, "old_string": rng.choice(CODE), "new_string": _text(rng, 12)},
                 "search": {"pattern": rng.choice(WORDS), "path": cwd}}[kind]
    title = {"read": f"Read {path}", "execute": raw_input.get("command", ""), "edit": f"Edit {path}",
             "search": f"Search {raw_input.get('pattern', '')}"}[kind]
    call = {"sessionUpdate": "tool_call", "toolCallId": tid, "title": title, "kind": kind, "status": "pending",
            "rawInput": raw_input, "locations": [{"path": path}]}
    if kind == "edit":
        diff = {"type": "diff", "path": path, "oldText": raw_input["old_string"], "newText": raw_input["new_string"]}
        return call, [{"sessionUpdate": "tool_call_update", "toolCallId": tid, "status": "completed",
                       "content": [diff]}]
    words = _tool_output(rng).split(" ")
    cuts = sorted(rng.sample(range(1, len(words)), min(len(words) - 1, rng.randint(0, 4)))) + [len(words)]
    terminal = "term-" + _blob(rng, 8)
    updates = []
    for j, cut in enumerate(cuts):
        so_far = " ".join(words[:cut])
        update: dict = {"sessionUpdate": "tool_call_update", "toolCallId": tid}
        if j == len(cuts) - 1:
            status = rng.choices(("completed", "failed", None), weights=(85, 5, 10))[0]
            if status:
                update["status"] = status
        elif j == 0:
            update["status"] = "in_progress"
        if kind == "execute":
            update["content"] = [{"type": "terminal", "terminalId": terminal}]
            update["rawOutput"] = {"output": so_far, "exit_code": 0 if j == len(cuts) - 1 else None}
        else:
            update["content"] = [{"type": "content", "content": {"type": "text", "text": so_far}}]
        updates.append(update)
    return call, updates


def grok_update_lines(rng: random.Random, session: str, cwd: str, start: dt.datetime,
                      turns: int) -> tuple[list[str], dt.datetime]:
    """Return the lines of one Grok Build ``updates.jsonl``, and the time of the last.

    Streamed user, thought and agent chunks of a few words each; tool calls
    with several updates; quiet kinds (commands, mode, plan); one
    ``turn_completed`` per prompt.  A session writes its envelope time as
    epoch seconds, epoch ms or ISO with nanoseconds (some mix them), and
    its ``_meta`` in params or in the update.
    """
    shape = rng.choice(("s", "ms", "iso", "mixed"))
    meta_in_update = rng.random() < 0.25
    agent_times = rng.random() < 0.5
    lines: list[str] = []
    t = start

    def stamp() -> int | str:
        s = shape if shape != "mixed" else rng.choice(("s", "ms", "iso"))
        return int(t.timestamp()) if s == "s" else _epoch_ms(t) if s == "ms" else _iso_ns(rng, t)

    def emit(update: dict, *, step: float = 0.05, prompt: str | None = None, xai: bool = False) -> None:
        nonlocal t
        t += dt.timedelta(seconds=rng.random() * step)
        meta: dict = {"eventId": _uuid7(rng, t)}
        if prompt:
            meta["promptId"] = prompt
        if agent_times:
            meta["agentTimestampMs"] = _epoch_ms(t)
        params: dict = {"sessionId": session, "update": update}
        if meta_in_update:
            update["_meta"] = meta
        else:
            params["_meta"] = meta
        method = "_x.ai/session/update" if xai else "session/update"
        lines.append(json.dumps({"timestamp": stamp(), "method": method, "params": params}, ensure_ascii=False))

    def say(kind: str, text: str, prompt: str | None = None, low: int = 3, high: int = 12) -> None:
        for piece in _chunks(rng, text, low, high):
            emit({"sessionUpdate": kind, "content": {"type": "text", "text": piece}}, prompt=prompt)

    emit({"sessionUpdate": "available_commands_update", "availableCommands": [
        {"name": name, "description": _text(rng, 6)} for name in ("compact", "init", "review", "resume")]})
    emit({"sessionUpdate": "current_mode_update", "currentModeId": "default"})
    for n in range(turns):
        t += dt.timedelta(seconds=rng.randint(5, 900))
        prompt_id = _uuid7(rng, t)
        text = _text(rng, rng.randint(5, 60))
        if rng.random() < 0.3:
            text = f"<user_query>{text}</user_query>"
        say("user_message_chunk", text, prompt_id, 20, 60)
        say("agent_thought_chunk", _text(rng, rng.randint(20, 120)))
        say("agent_message_chunk", _text(rng, rng.randint(10, 80)))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            call, updates = _grok_tool(rng, cwd)
            emit(call, step=2)
            for update in updates:
                emit(update, step=3)
            if rng.random() < 0.5:
                say("agent_thought_chunk", _text(rng, rng.randint(10, 60)))
            say("agent_message_chunk", _text(rng, rng.randint(10, 120)))
        if rng.random() < 0.2:
            emit({"sessionUpdate": "plan", "entries": [
                {"content": _text(rng, 6), "status": "completed", "priority": "medium"} for _ in range(3)]})
        emit({"sessionUpdate": "turn_completed", "prompt_id": prompt_id, "stop_reason": "end_turn",
              "usage": {"inputTokens": rng.randint(1000, 90000), "cachedReadTokens": rng.randint(0, 80000),
                        "outputTokens": rng.randint(20, 2000), "reasoningTokens": rng.randint(0, 900),
                        "totalTokens": rng.randint(1000, 99000)}}, xai=True)
        if n >= 2 and rng.random() < 0.03:
            emit({"sessionUpdate": "rewind_marker", "target_prompt_index": n - 1}, xai=True)
    return lines, t


def _grok_summary(rng: random.Random, session: str, cwd: str, start: dt.datetime, end: dt.datetime,
                  messages: int, subagent: bool) -> dict:
    """Return a session's summary.json, in the shape of Grok Build 1.0."""
    title = _text(rng, rng.randint(3, 8))
    out = {"info": {"id": session, "cwd": cwd}, "session_summary": title, "generated_title": title,
           "title_is_manual": False, "created_at": _iso_ns(rng, start), "updated_at": _iso_ns(rng, end),
           "last_active_at": _iso_ns(rng, end), "num_messages": messages, "num_chat_messages": messages // 3,
           "current_model_id": rng.choice(("grok-4.5", "grok-code-fast-1")), "chat_format_version": 1,
           "git_root_dir": cwd + "/", "git_remotes": [f"git@github.com:dev/{cwd.rsplit('/', 1)[-1]}.git"],
           "head_commit": _blob(rng, 40).lower(), "head_branch": rng.choice(("main", "dev")),
           "grok_home": "/home/dev/.grok", "agent_name": "grok", "reasoning_effort": "high",
           "sandbox_profile": "off"}
    if subagent:
        out["session_kind"] = "subagent"
    return out


def write_grok_corpus(root: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                      projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write sessions under root (a GROK_HOME); return their updates.jsonl paths.

    Layout: ``sessions/<percent-encoded cwd>/<session uuid>/updates.jsonl``
    and ``summary.json``.  Every tenth session is a sub-agent of the one
    before it, which records it in ``subagents/<child>/meta.json``.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out: list[Path] = []
    parent: tuple[Path, str] | None = None
    for i in range(sessions):
        child = parent is not None and i % 10 == 9
        cwd = f"/home/dev/src/proj{i % projects}"
        t0 = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        session = _uuid7(rng, t0)
        folder = root / "sessions" / urllib.parse.quote(cwd, safe="") / session
        folder.mkdir(parents=True, exist_ok=True)
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        lines, t_end = grok_update_lines(rng, session, cwd, t0, n)
        p = folder / "updates.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        summary = folder / "summary.json"
        summary.write_text(json.dumps(_grok_summary(rng, session, cwd, t0, t_end, len(lines), child), indent=2))
        if child and parent:
            meta = parent[0] / "subagents" / session / "meta.json"
            meta.parent.mkdir(parents=True)
            meta.write_text(json.dumps({"parent_session_id": parent[1], "subagent_type": "explore",
                                        "description": _text(rng, 5)}, indent=2))
        for f in (p, summary):
            _age(f, t_end)
        out.append(p)
        parent = None if child else (folder, session)
    return out


###############################################################################
# Cursor #######################################################################
###############################################################################

#: Fields every 2025 bubble row carries, nearly always empty.
_BUBBLE_LISTS = (
    "approximateLintErrors", "lints", "codebaseContextChunks", "commits", "pullRequests", "attachedCodeChunks",
    "assistantSuggestedDiffs", "gitDiffs", "interpreterResults", "images", "attachedFolders", "attachedFoldersNew",
    "userResponsesToSuggestedCodeBlocks", "suggestedCodeBlocks", "diffsForCompressingFiles", "relevantFiles",
    "toolResults", "notepads", "capabilities", "multiFileLinterErrors", "diffHistories", "recentLocationsHistory",
    "recentlyViewedFiles", "fileDiffTrajectories", "docsReferences", "webReferences", "aiWebSearchResults",
    "attachedFoldersListDirResults", "humanChanges", "summarizedComposers", "cursorRules", "contextPieces",
    "editTrailContexts", "allThinkingBlocks", "diffsSinceLastApply", "deletedFiles",
    "attachedFileCodeChunksMetadataOnly", "consoleLogs", "uiElementPicked", "knowledgeItems",
    "documentationSelections", "externalLinks", "projectLayouts", "capabilityContexts", "todos",
)
_CAPABILITY_STATUSES = {k: [] for k in ("mutate-request", "start-submit-chat", "before-submit-chat",
                                        "chat-stream-finished", "before-apply", "after-apply", "accept-all-edits",
                                        "composer-done", "process-stream", "add-pending-action")}
_CONTEXT_KEYS = ("notepads", "composers", "quotes", "selectedCommits", "selectedPullRequests", "selectedImages",
                 "folderSelections", "fileSelections", "terminalFiles", "selections", "terminalSelections",
                 "selectedDocs", "externalLinks", "cursorRules", "cursorCommands", "uiElementSelections")
_CONTEXT = {**{k: [] for k in _CONTEXT_KEYS}, "mentions": {k: {} for k in _CONTEXT_KEYS}}
_SUPPORTED_TOOLS = [1, 3, 41, 5, 6, 7, 38, 8, 9, 11, 12, 15, 18, 19, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 34, 35,
                    39, 40, 42]
_CURSOR_MODELS = ("claude-4-sonnet", "gpt-5", "default", "claude-4.5-sonnet-thinking")


class CursorDb(NamedTuple):
    """What write_cursor_db wrote: the database, its conversations, the planted token."""

    path: Path
    composers: list[str]
    bubbles: int
    secret: str


def _rich_text(text: str) -> str:
    """Return Cursor's Lexical editor state for a typed text (a JSON string)."""
    node = {"detail": 0, "format": 0, "mode": "normal", "style": "", "text": text, "type": "text", "version": 1}
    para = {"children": [node], "direction": "ltr", "format": "", "indent": 0, "type": "paragraph", "version": 1}
    return json.dumps({"root": {"children": [para], "direction": "ltr", "format": "", "indent": 0, "type": "root",
                                "version": 1}})


def _cursor_tool(rng: random.Random, cwd: str) -> dict:
    """Return a bubble's toolFormerData: arguments and result as JSON strings."""
    path = f"{cwd}/src/{rng.choice(WORDS)}.py"
    out = _tool_output(rng)
    name, number, args, result = rng.choice((
        ("read_file", 40, {"target_file": path}, {"contents": out}),
        ("run_terminal_cmd", 15, {"command": rng.choice(CODE), "is_background": False},
         {"output": out, "exitCodeV2": 0}),
        ("codebase_search", 1, {"query": _text(rng, 8), "target_directories": []},
         {"codeResults": [{"codeBlock": {"relativeWorkspacePath": path, "contents": out}, "score": rng.random()}]}),
        ("grep", 41, {"pattern": rng.choice(WORDS), "output_mode": "content"}, {"success": {"matches": out}}),
        ("edit_file", 38, {"target_file": path, "instructions": _text(rng, 10), "code_edit": rng.choice(CODE)},
         {"diff": {"chunks": [{"diffString": out, "linesAdded": 3, "linesRemoved": 1}]}}),
    ))
    return {"tool": number, "toolIndex": rng.randint(1, 3), "modelCallId": _uuid(rng),
            "toolCallId": "tool_" + _uuid(rng), "status": "completed", "rawArgs": json.dumps(args), "name": name,
            "params": json.dumps(args), "additionalData": {}, "result": json.dumps(result)}


def _cursor_bubble(rng: random.Random, kind: int, text: str, versioned: bool, **fields) -> dict:
    """Return one bubble row: type 1 user or 2 assistant, in the 2025 shape."""
    b: dict = {"_v": 3} if versioned else {}
    b["type"] = kind
    b.update({k: [] for k in _BUBBLE_LISTS})
    b.update(bubbleId=_uuid(rng), capabilityStatuses=_CAPABILITY_STATUSES, isAgentic=kind == 1,
             existedSubsequentTerminalCommand=False, existedPreviousTerminalCommand=False,
             requestId=_uuid(rng) if kind == 1 else "", attachedHumanChanges=False,
             supportedTools=_SUPPORTED_TOOLS if kind == 1 else [],
             tokenCount={"inputTokens": 0 if kind == 1 else rng.randint(2000, 90000),
                         "outputTokens": 0 if kind == 1 else rng.randint(50, 2000)},
             isRefunded=False, useWeb=False, unifiedMode=2, text=text)
    b.update(fields)
    return b


def _cursor_turn(rng: random.Random, t: dt.datetime, cwd: str, versioned: bool,
                 model: str) -> tuple[list[dict], dt.datetime]:
    """Return one prompt's bubbles (the user's, then the assistant's steps)."""
    prompt = _text(rng, rng.randint(5, 60))
    user = {"richText": _rich_text(prompt), "editToolSupportsSearchAndReplace": True, "isNudge": False,
            "context": _CONTEXT, "checkpointId": _uuid(rng)}
    if versioned and rng.random() < 0.5:
        user["createdAt"] = _iso_ms(t)
    bubbles = [_cursor_bubble(rng, 1, prompt, versioned, **user)]
    steps = rng.choice((1, 2, 2, 3, 4))
    for step in range(steps):
        t += dt.timedelta(seconds=rng.randint(2, 60))
        rpc = _epoch_ms(t)
        fields: dict = {"codeBlocks": [], "serverBubbleId": _uuid(rng), "usageUuid": _uuid(rng),
                        "timingInfo": {"clientStartTime": rng.random() * 900000, "clientRpcSendTime": rpc,
                                       "clientSettleTime": rpc + rng.randint(500, 9000),
                                       "clientEndTime": rpc + rng.randint(500, 9000)}}
        if rng.random() < 0.5:
            fields["modelInfo"] = {"modelName": model}
        if step < steps - 1 and rng.random() < 0.7:  # a tool step: no text of its own
            fields["toolFormerData"] = _cursor_tool(rng, cwd)
            bubbles.append(_cursor_bubble(rng, 2, "", versioned, **fields))
            continue
        if rng.random() < 0.4:
            fields["thinking"] = {"text": _text(rng, rng.randint(20, 120)), "signature": _blob(rng, 400)}
        text = _text(rng, rng.randint(10, 120))
        if rng.random() < 0.3:
            code = rng.choice(CODE)
            text += f"\n\n```python\n{code}\n```"
            fields["codeBlocks"] = [{"unregistered": True, "content": code, "languageId": "python",
                                     "isGenerating": False, "isClickable": False, "codeBlockIdx": 0}]
        bubbles.append(_cursor_bubble(rng, 2, text, versioned, **fields))
    return bubbles, t


def _cursor_composer(rng: random.Random, cid: str, bubbles: list[dict], created: dt.datetime,
                     updated: dt.datetime, versioned: bool, model: str) -> dict:
    """Return a composerData row: headers in order, conversation kept in bubble rows."""
    comp: dict = {"_v": rng.choice((9, 10))} if versioned else {}
    headers = [{"bubbleId": b["bubbleId"], "type": b["type"], **({"serverBubbleId": b["serverBubbleId"]}
                                                                   if "serverBubbleId" in b else {})}
               for b in bubbles]
    comp.update(composerId=cid, richText="", hasLoaded=True, text="", fullConversationHeadersOnly=headers,
                conversationMap={}, status="completed", context=_CONTEXT, gitGraphFileSuggestions=[],
                generatingBubbleIds=[], isReadingLongFile=False, codeBlockData={}, originalFileStates={},
                newlyCreatedFiles=[], newlyCreatedFolders=[], lastUpdatedAt=_epoch_ms(updated),
                createdAt=_epoch_ms(created), hasChangedContext=False, name=_text(rng, rng.randint(2, 6)),
                unifiedMode=rng.choice(("agent", "agent", "chat")), forceMode="edit", usageData={},
                contextUsagePercent=rng.randint(1, 90), allAttachedFileCodeChunksUris=[],
                modelConfig={"modelName": model, "maxMode": False}, subComposerIds=[], capabilityContexts=[],
                todos=[], isTodoListExpanded=False, isQueueExpanded=True, hasUnreadMessages=False,
                gitHubPromptDismissed=False, latestChatGenerationUUID=_uuid(rng), isAgentic=True)
    return comp


def _cursor_side_rows(rng: random.Random, cid: str, user: dict) -> list[tuple[str, str]]:
    """Return the rows Cursor keeps beside a prompt that are no conversation."""
    status = "On branch main\nChanges not staged for commit:\n" + "\n".join(
        f"\tmodified:   src/{rng.choice(WORDS)}.py" for _ in range(rng.randint(1, 30)))
    return [(f"checkpointId:{cid}:{user['checkpointId']}", json.dumps(
                {"files": [], "nonExistentFiles": [], "newlyCreatedFolders": [], "activeInlineDiffs": [],
                 "inlineDiffNewlyCreatedResources": {"files": [], "folders": []}})),
            (f"messageRequestContext:{cid}:{user['bubbleId']}", json.dumps(
                {"multiFileLinterErrors": [], "terminalFiles": [], "cursorRules": [], "gitStatusRaw": status,
                 "deletedFiles": [], "diffsSinceLastApply": []}))]


def _cursor_item_table(rng: random.Random) -> tuple[list[tuple[str, str]], str]:
    """Return the global ItemTable rows, credentials included, and the access token."""
    token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + _blob(rng, 160) + "." + _blob(rng, 43)
    rows = [("cursorAuth/accessToken", token),
            ("cursorAuth/refreshToken", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + _blob(rng, 160)),
            ("cursorAuth/cachedEmail", "dev@example.invalid"),
            ("cursorAuth/cachedSignUpType", "Auth_0"),
            ("workbench.view.extensions.state.hidden", json.dumps([{"id": w, "isHidden": False} for w in WORDS])),
            ("src.vs.platform.reactivestorage.browser.reactiveStorageServiceImpl.persistentStorage.applicationUser",
             json.dumps({"composerState": {"defaultModel": "claude-4-sonnet", "modes4": [
                 {"id": m, "name": m, "autoRun": False} for m in ("agent", "chat", "background")]},
                 "aiSettings": {"openAIModel": "gpt-5"}, "notes": _text(rng, 300)}))]
    return rows, token


def _create_vscdb(path: Path) -> sqlite3.Connection:
    """Create an empty state.vscdb with VS Code's two tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")  # as Cursor keeps it
    for table in ("ItemTable", "cursorDiskKV"):
        conn.execute(f"CREATE TABLE {table} (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
    return conn


def _write_workspaces(user_dir: Path, listing: dict[str, list[dict]], t: dt.datetime) -> None:
    """Write one workspaceStorage entry per folder, listing its composers (2025)."""
    for cwd, comps in sorted(listing.items()):
        ws = user_dir / "workspaceStorage" / hashlib.md5(cwd.encode()).hexdigest()
        conn = _create_vscdb(ws / "state.vscdb")
        data = {"allComposers": comps, "selectedComposerIds": [c["composerId"] for c in comps[:1]],
                "hasMigratedComposerData": True}
        conn.execute("INSERT INTO ItemTable VALUES ('composer.composerData', ?)", (json.dumps(data),))
        conn.commit()
        conn.close()
        (ws / "workspace.json").write_text(json.dumps({"folder": "file://" + urllib.parse.quote(cwd)}))
        for f in ws.iterdir():
            _age(f, t)


def write_cursor_db(path: Path, *, composers: int, bubbles_per_composer: int | tuple[int, int], seed: int = 7,
                    projects: int = 5, start: dt.datetime | None = None) -> CursorDb:
    """Write a global Cursor state.vscdb at path, 2025 shape; return what it holds.

    ``cursorDiskKV`` gets a ``composerData:<id>`` row per conversation (``_v``
    9 or 10, or none for one in four) and a ``bubbleId:<id>:<bubble>`` row
    per bubble (``_v`` 3, or none with the composer), plus checkpoint and
    request-context rows the adapter skips and a few NULL composers.
    ``ItemTable`` holds login tokens, ``cursorAuth/accessToken`` among them,
    which must never reach the archive.  Every conversation ended long ago,
    so all of it is ready to export.  When path is
    ``<User>/globalStorage/state.vscdb``, each project also gets a workspace
    database listing its composers, which gives them their folder.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    conn = _create_vscdb(path)
    items, secret = _cursor_item_table(rng)
    conn.executemany("INSERT INTO ItemTable VALUES (?, ?)", items)
    ids, total, newest = [], 0, start
    listing: dict[str, list[dict]] = {}
    rows: list[tuple[str, str | None]] = []
    for i in range(composers):
        cid = _uuid(rng)
        cwd = f"/home/dev/src/proj{i % projects}"
        versioned = rng.random() >= 0.25
        model = rng.choice(_CURSOR_MODELS)
        t0 = t = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        want = bubbles_per_composer if isinstance(bubbles_per_composer, int) else rng.randint(*bubbles_per_composer)
        bubbles: list[dict] = []
        while len(bubbles) < want:
            t += dt.timedelta(seconds=rng.randint(5, 900))
            turn, t = _cursor_turn(rng, t, cwd, versioned, model)
            rows += _cursor_side_rows(rng, cid, turn[0])
            bubbles += turn
        comp = _cursor_composer(rng, cid, bubbles, t0, t, versioned, model)
        if ids and rng.random() < 0.05:
            comp["subComposerIds"] = [ids[-1]]
        rows.append((f"composerData:{cid}", json.dumps(comp)))
        rows += [(f"bubbleId:{cid}:{b['bubbleId']}", json.dumps(b, ensure_ascii=False)) for b in bubbles]
        if rng.random() < 0.02:
            rows.append((f"composerData:{_uuid(rng)}", None))  # Cursor leaves these behind
        listing.setdefault(cwd, []).append({"type": "head", "composerId": cid, "name": comp["name"],
                                            "lastUpdatedAt": comp["lastUpdatedAt"], "createdAt": comp["createdAt"],
                                            "unifiedMode": comp["unifiedMode"], "forceMode": "edit"})
        ids.append(cid)
        total += len(bubbles)
        newest = max(newest, t)
        if len(rows) > 2000:
            conn.executemany("INSERT INTO cursorDiskKV VALUES (?, ?)", rows)
            rows = []
    conn.executemany("INSERT INTO cursorDiskKV VALUES (?, ?)", rows)
    conn.commit()
    conn.close()
    _age(path, newest)
    if path.parent.name == "globalStorage":
        _write_workspaces(path.parent.parent, listing, newest)
    return CursorDb(path, ids, total, secret)


###############################################################################
# OpenCode #####################################################################
###############################################################################

def _new_db(path: Path, schema: tuple[str, ...]) -> sqlite3.Connection:
    """Create a database at path (and its folder) with the statements of schema; return the connection."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    for stmt in schema:
        conn.execute(stmt)
    return conn


#: The columns of OpenCode 1.18's tables that the adapter reads (the real
#: database has more; see tests/fixtures/opencode/lantern-sqlite).
_OPENCODE_SCHEMA = (
    "CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT, slug TEXT NOT NULL,"
    " directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL, time_created INTEGER NOT NULL,"
    " time_updated INTEGER NOT NULL, time_archived INTEGER)",
    "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL,"
    " time_updated INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,"
    " time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX part_message_id_id_idx ON part (message_id, id)",
)


def _oc_id(prefix: str, rng: random.Random) -> str:
    return f"{prefix}_{rng.getrandbits(48):012x}{_blob(rng, 14).replace('+', 'a').replace('/', 'b')}"


def write_opencode_db(path: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                      projects: int = 5, start: dt.datetime | None = None) -> int:
    """Write an OpenCode database of sessions at path; return the number of parts.

    Each turn: a user message with its text part, then an assistant message
    with step-start, reasoning, one or two tool parts (input, output, times),
    an answer and step-finish.  Every tenth session is a sub-agent of the one
    before it (``parent_id``).
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    conn = _new_db(path, _OPENCODE_SCHEMA)
    parts_total, newest, parent = 0, start, None
    for i in range(sessions):
        cwd = f"/home/dev/src/proj{i % projects}"
        t = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        sid = _oc_id("ses", rng)
        child = parent if i % 10 == 9 else None
        first = _text(rng, rng.randint(6, 30))
        conn.execute("INSERT INTO session VALUES (?, 'global', ?, ?, ?, ?, '1.18.13', ?, ?, NULL)",
                     (sid, child, f"slug-{i}", cwd, first[:60], _epoch_ms(t), _epoch_ms(t)))
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        for turn in range(n):
            user = _oc_id("msg", rng)
            t += dt.timedelta(seconds=rng.randint(5, 600))
            conn.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (user, sid, _epoch_ms(t), _epoch_ms(t), json.dumps(
                {"role": "user", "time": {"created": _epoch_ms(t)}, "agent": "build",
                 "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-5"}})))
            parts = [{"type": "text", "text": first if turn == 0 else _text(rng, rng.randint(6, 60))}]
            rows = [(user, parts)]
            answer = _oc_id("msg", rng)
            a0 = t + dt.timedelta(seconds=1)
            parts = [{"type": "step-start", "snapshot": _blob(rng, 40)},
                     {"type": "reasoning", "text": _text(rng, rng.randint(20, 120)),
                      "time": {"start": _epoch_ms(a0), "end": _epoch_ms(a0) + 900}}]
            for _ in range(rng.randint(1, 2)):
                t += dt.timedelta(seconds=rng.randint(2, 60))
                tool = rng.choice(("bash", "read", "edit", "grep"))
                parts.append({"type": "tool", "tool": tool, "callID": "call_" + _blob(rng, 10), "state": {
                    "status": "completed", "input": {"command": rng.choice(CODE)} if tool == "bash"
                    else {"filePath": f"{cwd}/src/{_text(rng, 1)}.py"},
                    "output": _tool_output(rng), "title": tool, "metadata": {},
                    "time": {"start": _epoch_ms(t), "end": _epoch_ms(t) + 1500}}})
            t += dt.timedelta(seconds=rng.randint(2, 60))
            parts += [{"type": "text", "text": _text(rng, rng.randint(10, 150)),
                       "time": {"start": _epoch_ms(t), "end": _epoch_ms(t) + 500}},
                      {"type": "step-finish", "reason": "stop", "tokens": {"input": rng.randint(100, 9000)}}]
            conn.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (answer, sid, _epoch_ms(a0), _epoch_ms(t), json.dumps(
                {"role": "assistant", "parentID": user, "modelID": "claude-sonnet-4-5", "providerID": "anthropic",
                 "path": {"cwd": cwd, "root": cwd}, "time": {"created": _epoch_ms(a0), "completed": _epoch_ms(t)},
                 "finish": "stop"})))
            rows.append((answer, parts))
            for mid, ps in rows:
                for p in ps:
                    conn.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                                 (_oc_id("prt", rng), mid, sid, _epoch_ms(t), _epoch_ms(t), json.dumps(p, ensure_ascii=False)))
                    parts_total += 1
        conn.execute("UPDATE session SET time_updated = ? WHERE id = ?", (_epoch_ms(t), sid))
        parent = None if child else sid
        newest = max(newest, t)
    conn.commit()
    conn.close()
    _age(path, newest)
    return parts_total


###############################################################################
# Gemini CLI ###################################################################
###############################################################################


def _gemini_messages(rng: random.Random, t: dt.datetime, turns: int) -> tuple[list[dict], dt.datetime]:
    """Return a Gemini CLI session's messages: prompts, thoughts, tool calls with results, answers."""
    out = []
    for _ in range(turns):
        t += dt.timedelta(seconds=rng.randint(5, 600))
        out.append({"id": _uuid(rng), "timestamp": _iso_ms(t), "type": "user",
                    "content": [{"text": _text(rng, rng.randint(6, 60))}]})
        calls = []
        for _ in range(rng.randint(0, 2)):
            t += dt.timedelta(seconds=rng.randint(2, 60))
            name = rng.choice(("run_shell_command", "read_file", "replace"))
            cid = f"{name}_{_epoch_ms(t)}_{len(calls)}"
            calls.append({"id": cid, "name": name, "args": {"command": rng.choice(CODE)}, "status": "success",
                          "timestamp": _iso_ms(t), "result": [{"functionResponse": {
                              "id": cid, "name": name, "response": {"output": _tool_output(rng)}}}]})
        t += dt.timedelta(seconds=rng.randint(2, 60))
        out.append({"id": _uuid(rng), "timestamp": _iso_ms(t), "type": "gemini", "content": _text(rng, rng.randint(10, 150)),
                    "thoughts": [{"subject": _text(rng, 3), "description": _text(rng, rng.randint(10, 60)),
                                  "timestamp": _iso_ms(t)}],
                    "model": "gemini-2.5-pro", "toolCalls": calls,
                    "tokens": {"input": rng.randint(100, 9000), "output": rng.randint(10, 900)}})
    return out, t


def write_gemini_corpus(root: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                        projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write Gemini CLI sessions under root (a ~/.gemini); return their files.

    Half are whole JSON documents (the first era), half JSONL (a metadata
    line, the messages, a ``$set`` of ``lastUpdated`` after each prompt);
    ``projects.json`` names each project folder's path.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    root.mkdir(parents=True, exist_ok=True)
    (root / "projects.json").write_text(json.dumps(
        {"projects": {f"/home/dev/src/proj{i}": f"proj{i}" for i in range(projects)}}))
    out: list[Path] = []
    for i in range(sessions):
        chats = root / "tmp" / f"proj{i % projects}" / "chats"
        chats.mkdir(parents=True, exist_ok=True)
        t0 = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        sid = _uuid(rng)
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        messages, t = _gemini_messages(rng, t0, n)
        meta = {"sessionId": sid, "projectHash": hashlib.sha256(f"proj{i % projects}".encode()).hexdigest(),
                "startTime": _iso_ms(t0), "lastUpdated": _iso_ms(t), "kind": "main"}
        name = f"session-{t0:%Y-%m-%dT%H-%M}-{sid[:8]}"
        if i % 2:
            p = chats / f"{name}.jsonl"
            lines = [meta]
            for m in messages:
                lines.append(m)
                if m["type"] == "user":
                    lines.append({"$set": {"lastUpdated": m["timestamp"]}})
            p.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        else:
            p = chats / f"{name}.json"
            p.write_text(json.dumps({**meta, "messages": messages}, ensure_ascii=False, indent=2), encoding="utf-8")
        _age(p, t)
        out.append(p)
    return out


###############################################################################
# Goose ########################################################################
###############################################################################

#: The columns of Goose's schema 15 that the adapter reads (see
#: tests/fixtures/goose/lantern/sessions.db for the whole schema).
_GOOSE_SCHEMA = (
    "CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',"
    " user_set_name BOOLEAN DEFAULT FALSE, session_type TEXT NOT NULL DEFAULT 'user', working_dir TEXT NOT NULL,"
    " created_at TIMESTAMP, updated_at TIMESTAMP, model_config_json TEXT, parent_session_id TEXT)",
    "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT, session_id TEXT NOT NULL,"
    " role TEXT NOT NULL, content_json TEXT NOT NULL, created_timestamp INTEGER NOT NULL, timestamp TIMESTAMP,"
    " tokens INTEGER, metadata_json TEXT)",
    "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP)",
)


def write_goose_db(path: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                   projects: int = 5, start: dt.datetime | None = None) -> int:
    """Write a Goose ``sessions.db`` at path; return the number of messages.

    Each turn: a prompt, an assistant message whose reasoning is stored one
    word per ``thinking`` part (as Goose stores a streamed answer) with a
    tool request, the tool's response in a user message, and an answer.
    """
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    conn = _new_db(path, _GOOSE_SCHEMA)
    conn.execute("INSERT INTO schema_version VALUES (15, '2026-06-01 00:00:00')")
    visible = json.dumps({"userVisible": True, "agentVisible": True})
    total, newest = 0, start
    for i in range(sessions):
        t = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
        sid = f"{t:%Y%m%d}_{i}"
        t0 = t
        rows = []
        n = turns if isinstance(turns, int) else rng.randint(*turns)
        for _ in range(n):
            t += dt.timedelta(seconds=rng.randint(5, 600))
            rows.append(("msg_" + _uuid(rng), "user", [{"type": "text", "text": _text(rng, rng.randint(6, 60))}], t))
            t += dt.timedelta(seconds=rng.randint(2, 60))
            tid = _uuid(rng)
            words = _text(rng, rng.randint(20, 120)).split(" ")
            thinking = [{"type": "thinking", "thinking": w if k == 0 else " " + w, "signature": ""}
                        for k, w in enumerate(words)]
            rows.append((f"chatcmpl-{rng.randrange(1000)}", "assistant", thinking + [{"type": "toolRequest", "id": tid,
                         "toolCall": {"status": "success", "value": {"name": "developer__shell",
                                                                     "arguments": {"command": rng.choice(CODE)}}}}], t))
            rows.append(("msg_" + _uuid(rng), "user", [{"type": "toolResponse", "id": tid, "toolResult": {
                "status": "success", "value": {"content": [{"type": "text", "text": _tool_output(rng)}],
                                               "isError": False}}}], t))
            t += dt.timedelta(seconds=rng.randint(2, 60))
            rows.append((f"chatcmpl-{rng.randrange(1000)}", "assistant",
                         [{"type": "text", "text": _text(rng, rng.randint(10, 150))}], t))
        conn.execute("INSERT INTO sessions VALUES (?, ?, '', 0, 'user', ?, ?, ?, ?, NULL)",
                     (sid, _text(rng, 4), f"/home/dev/src/proj{i % projects}", f"{t0:%Y-%m-%d %H:%M:%S}",
                      f"{t:%Y-%m-%d %H:%M:%S}", json.dumps({"model_name": "qwen3:0.6b"})))
        conn.executemany("INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, timestamp,"
                         " metadata_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(mid, sid, role, json.dumps(content, ensure_ascii=False), int(when.timestamp()),
                           f"{when:%Y-%m-%d %H:%M:%S}", visible) for mid, role, content, when in rows])
        total += len(rows)
        newest = max(newest, t)
    conn.commit()
    conn.close()
    _age(path, newest)
    return total


###############################################################################
# GitHub Copilot CLI, Qwen Code, Pi, Aider #####################################
###############################################################################
#
# Made in the shapes the real fixtures show (Copilot CLI 1.0.78 and Qwen Code
# 0.21.6 written by the CLIs themselves, Pi's version 3, Aider's Markdown):
# each turn is a prompt, a tool call with its result, and a reply.


def _turn_texts(rng: random.Random, cwd: str) -> tuple[str, dict, str, str]:
    """Return (prompt, tool arguments, tool output, reply) of one turn."""
    args = {"command": rng.choice(CODE) + " " + _text(rng, 6), "cwd": cwd}
    return _text(rng, rng.randint(8, 40)), args, _tool_output(rng), _text(rng, rng.randint(20, 120))


def _session_start(rng: random.Random, start: dt.datetime, i: int, projects: int) -> tuple[str, dt.datetime, str]:
    """Session i's folder, first time and id, drawn from rng in the order the generators always drew them."""
    cwd = f"/home/dev/src/proj{i % projects}"
    t = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS), seconds=rng.randrange(3600))
    return cwd, t, _uuid(rng)


def _write_log(p: Path, lines: list[str], t: dt.datetime) -> Path:
    """Write a JSONL log's lines to p (folders made), last written at t; return p."""
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _age(p, t)
    return p


def write_copilot_corpus(root: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                         projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write sessions under root (a COPILOT_HOME): ``session-state/<id>/events.jsonl``."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(sessions):
        cwd, t, sid = _session_start(rng, start, i, projects)
        lines = []

        def event(kind: str, data: dict) -> None:
            nonlocal t
            t += dt.timedelta(milliseconds=rng.randint(5, 9000))
            lines.append(json.dumps({"type": kind, "data": data, "id": _uuid(rng), "timestamp": _iso_ms(t),
                                     "parentId": None}, ensure_ascii=False))

        event("session.start", {"sessionId": sid, "version": 1, "producer": "copilot-agent",
                                "copilotVersion": "1.0.78", "startTime": _iso_ms(t),
                                "context": {"cwd": cwd, "gitRoot": cwd, "branch": "main"}})
        event("session.model_change", {"newModel": "gpt-5-mini"})
        for n in range(turns if isinstance(turns, int) else rng.randint(*turns)):
            prompt, args, output, reply = _turn_texts(rng, cwd)
            event("user.message", {"content": prompt, "transformedContent": f"<current_datetime>{_iso_ms(t)}"
                                   f"</current_datetime>\n\n{prompt}", "attachments": []})
            call = f"call_{_blob(rng, 8)}"
            event("assistant.turn_start", {"turnId": str(n)})
            event("assistant.message", {"messageId": _uuid(rng), "model": "gpt-5-mini", "content": "",
                                        "toolRequests": [{"toolCallId": call, "name": "bash", "arguments": args,
                                                          "type": "function"}]})
            event("tool.execution_start", {"toolCallId": call, "toolName": "bash", "arguments": args})
            event("tool.execution_complete", {"toolCallId": call, "success": True,
                                              "result": {"content": output, "detailedContent": output}})
            event("assistant.message", {"messageId": _uuid(rng), "model": "gpt-5-mini", "content": reply,
                                        "toolRequests": []})
            event("assistant.turn_end", {"turnId": str(n)})
        event("session.shutdown", {"shutdownType": "routine"})
        out.append(_write_log(root / "session-state" / sid / "events.jsonl", lines, t))
    return out


def write_qwen_corpus(root: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                      projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write chats under root (a ~/.qwen): ``projects/<folder>/chats/<id>.jsonl``."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(sessions):
        cwd, t, sid = _session_start(rng, start, i, projects)
        lines, parent = [], None

        def record(kind: str, **fields) -> None:
            nonlocal t, parent
            t += dt.timedelta(milliseconds=rng.randint(5, 9000))
            uid = _uuid(rng)
            lines.append(json.dumps({"uuid": uid, "parentUuid": parent, "sessionId": sid, "timestamp": _iso_ms(t),
                                     "type": kind, "cwd": cwd, "version": "0.21.6", "gitBranch": "main", **fields},
                                    ensure_ascii=False))
            parent = uid

        for _ in range(turns if isinstance(turns, int) else rng.randint(*turns)):
            prompt, args, output, reply = _turn_texts(rng, cwd)
            call = f"call_{_blob(rng, 8)}"
            record("user", message={"role": "user", "parts": [{"text": prompt}]})
            record("system", subtype="ui_telemetry", systemPayload={"uiEvent": {"event.name": "qwen-code.api_response",
                                                                                "duration_ms": rng.randint(9, 9999)}})
            record("assistant", model="qwen3-coder-plus", message={"role": "model", "parts": [
                {"text": _text(rng, 12), "thought": True},
                {"functionCall": {"id": call, "name": "run_shell_command", "args": args}}]})
            record("tool_result", message={"role": "user", "parts": [
                {"functionResponse": {"id": call, "name": "run_shell_command", "response": {"output": output}}}]},
                toolCallResult={"callId": call, "status": "success", "resultDisplay": output})
            record("assistant", model="qwen3-coder-plus", message={"role": "model", "parts": [{"text": reply}]})
        out.append(_write_log(root / "projects" / cwd.replace("/", "-") / "chats" / f"{sid}.jsonl", lines, t))
    return out


def write_pi_corpus(root: Path, *, sessions: int, turns: int | tuple[int, int], seed: int = 7,
                    projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write sessions under root (a PI_CODING_AGENT_DIR): ``sessions/--<cwd>--/<time>_<id>.jsonl``."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(sessions):
        cwd, t, sid = _session_start(rng, start, i, projects)
        lines = [json.dumps({"type": "session", "version": 3, "id": sid, "timestamp": _iso_ms(t), "cwd": cwd})]
        name = f"{t.strftime('%Y-%m-%dT%H-%M-%S-')}{t.microsecond // 1000:03d}Z_{sid}.jsonl"
        parent = None

        def entry(kind: str, **fields) -> None:
            nonlocal t, parent
            t += dt.timedelta(milliseconds=rng.randint(5, 9000))
            eid = _blob(rng, 8)
            lines.append(json.dumps({"type": kind, "id": eid, "parentId": parent, "timestamp": _iso_ms(t), **fields},
                                    ensure_ascii=False))
            parent = eid

        entry("model_change", provider="anthropic", modelId="claude-sonnet-4-5")
        for _ in range(turns if isinstance(turns, int) else rng.randint(*turns)):
            prompt, args, output, reply = _turn_texts(rng, cwd)
            call = f"toolu_{_blob(rng, 12)}"
            entry("message", message={"role": "user", "content": [{"type": "text", "text": prompt}],
                                      "timestamp": _epoch_ms(t)})
            entry("message", message={"role": "assistant", "content": [
                {"type": "thinking", "thinking": _text(rng, 10)},
                {"type": "toolCall", "id": call, "name": "bash", "arguments": args}],
                "model": "claude-sonnet-4-5", "stopReason": "toolUse", "timestamp": _epoch_ms(t)})
            entry("message", message={"role": "toolResult", "toolCallId": call, "toolName": "bash",
                                      "content": [{"type": "text", "text": output}], "isError": False,
                                      "timestamp": _epoch_ms(t)})
            entry("message", message={"role": "assistant", "content": [{"type": "text", "text": reply}],
                                      "model": "claude-sonnet-4-5", "stopReason": "stop", "timestamp": _epoch_ms(t)})
        out.append(_write_log(root / "sessions" / f"-{cwd.replace('/', '-')}--" / name, lines, t))
    return out


def write_aider_corpus(root: Path, *, repos: int, runs: int | tuple[int, int], turns: int = 3, seed: int = 7,
                       start: dt.datetime | None = None) -> list[Path]:
    """Write ``<root>/repo<i>/.aider.chat.history.md`` logs of several runs each."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    out = []
    for i in range(repos):
        t = start + dt.timedelta(hours=rng.randint(0, SPAN_HOURS))
        text = []
        for _ in range(runs if isinstance(runs, int) else rng.randint(*runs)):
            t += dt.timedelta(minutes=rng.randint(1, 600), seconds=rng.randrange(60))
            text += [f"\n# aider chat started at {t.strftime('%Y-%m-%d %H:%M:%S')}\n",
                     "> Aider v0.86.1", "> Main model: anthropic/claude-sonnet-4-5 with diff edit format",
                     "> Git repo: .git with 120 files\n"]
            for _ in range(turns):
                prompt, args, output, reply = _turn_texts(rng, f"/home/dev/src/repo{i}")
                # Aider prefixes every line of a prompt and of its own output.
                text += ["\n".join(f"#### {x}" for x in prompt.split("\n")) + "\n", reply + "\n",
                         "\n".join(f"> {x}" for x in f"Running {args['command']}\n{output}".split("\n")), ""]
        p = root / f"repo{i}" / ".aider.chat.history.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(text) + "\n", encoding="utf-8")
        _age(p, t)
        out.append(p)
    return out
