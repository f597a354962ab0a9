"""Synthetic agent logs shaped like the real fixtures, for tests and the bench.

Every generator is deterministic for a seed: ids are unique, text mixes
English, CJK and code, and timestamps spread over months.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from pathlib import Path

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


_SYL = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "zu", "an", "el", "or", "us", "ix", "qu"]
_VOCAB: list[str] = []
_CUM: list[float] = []


def _vocab() -> tuple[list[str], list[float]]:
    """Return a 20,000-word vocabulary with Zipf weights (cumulative)."""
    if not _VOCAB:
        r = random.Random(1)
        seen = set(WORDS)
        words = list(WORDS)
        while len(words) < 20000:
            w = "".join(r.choice(_SYL) for _ in range(r.randint(2, 4)))
            if w not in seen:
                seen.add(w)
                words.append(w)
        total = 0.0
        for i, _ in enumerate(words):
            total += 1.0 / (i + 1)
            _CUM.append(total)
        _VOCAB.extend(words)
    return _VOCAB, _CUM


def _text(rng: random.Random, n_words: int) -> str:
    words, cum = _vocab()
    parts = []
    for w in rng.choices(words, cum_weights=cum, k=n_words):
        r = rng.random()
        if r < 0.04:
            parts.append(rng.choice(CJK))
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


def claude_session_lines(rng: random.Random, session: str, cwd: str, start: dt.datetime, turns: int) -> list[str]:
    """Return the JSONL lines of one Claude Code session.

    The shapes follow real Claude Code 2.1 transcripts: one line per content
    block, usage repeated on every assistant line, thinking with a signature,
    and tool output present twice (``toolUseResult`` and the result block).
    """
    lines = []
    t = start
    parent = None
    base = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session,
            "version": "2.1.80", "gitBranch": "main", "entrypoint": "cli"}

    def emit(rec: dict) -> None:
        nonlocal parent, t
        t += dt.timedelta(seconds=rng.randint(1, 90))
        u = _uuid(rng)
        rec = {"parentUuid": parent, **base, **rec, "uuid": u,
               "timestamp": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"}
        parent = u
        lines.append(json.dumps(rec, ensure_ascii=False))

    def assistant(content: list) -> dict:
        return {"type": "assistant", "requestId": "req_" + _blob(rng, 24), "message": {
            "id": "msg_" + _blob(rng, 24), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": content, "stop_reason": None, "stop_sequence": None, "usage": _usage(rng)}}

    for _ in range(turns):
        emit({"type": "user", "promptId": _uuid(rng), "permissionMode": "default",
              "message": {"role": "user", "content": _text(rng, rng.randint(5, 40))}})
        emit(assistant([{"type": "thinking", "thinking": _text(rng, rng.randint(20, 120)),
                         "signature": _blob(rng, rng.randint(400, 1600))}]))
        emit(assistant([{"type": "text", "text": _text(rng, rng.randint(10, 80))}]))
        for _ in range(rng.choice((0, 1, 1, 2))):
            tid = "toolu_" + _blob(rng, 24)
            cmd = rng.choice(CODE)
            emit(assistant([{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": cmd,
                                                                                       "description": _text(rng, 6)}}]))
            out = _text(rng, rng.choice((15, 40, 120, 600, 1500)))
            emit({"type": "user", "toolUseResult": {"stdout": out, "stderr": "", "interrupted": False,
                                                    "isImage": False},
                  "message": {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": tid, "content": out, "is_error": False}]}})
    return lines


def write_claude_corpus(root: Path, *, files: int, turns: int | tuple[int, int], seed: int = 7,
                        projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write files sessions under root/projects/<slug>/; return their paths.

    ``turns`` is the number of turns per session, or a (low, high) range.
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
        lines = claude_session_lines(rng, session, cwd, t0, n)
        p = folder / f"{session}.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(p)
    return out
