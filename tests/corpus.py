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


def _text(rng: random.Random, n_words: int) -> str:
    parts = []
    for _ in range(n_words):
        r = rng.random()
        if r < 0.08:
            parts.append(rng.choice(CJK))
        elif r < 0.12:
            parts.append(rng.choice(CODE))
        elif r < 0.14:
            parts.append(f"id{rng.randrange(10**6):06d}")
        else:
            parts.append(rng.choice(WORDS))
    return " ".join(parts)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def claude_session_lines(rng: random.Random, session: str, cwd: str, start: dt.datetime, turns: int) -> list[str]:
    """Return the JSONL lines of one Claude Code session."""
    lines = []
    t = start
    parent = None
    base = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session,
            "version": "2.1.80", "gitBranch": "main"}

    def emit(rec: dict) -> None:
        nonlocal parent, t
        t += dt.timedelta(seconds=rng.randint(1, 90))
        u = _uuid(rng)
        rec = {"parentUuid": parent, **base, **rec, "uuid": u,
               "timestamp": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"}
        parent = u
        lines.append(json.dumps(rec, ensure_ascii=False))

    for _ in range(turns):
        emit({"type": "user", "message": {"role": "user", "content": _text(rng, rng.randint(5, 40))}})
        emit({"type": "assistant", "requestId": "req_" + _uuid(rng)[:8], "message": {
            "id": "msg_" + _uuid(rng)[:12], "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "thinking", "thinking": _text(rng, 30), "signature": "c2ln" * 20}]}})
        emit({"type": "assistant", "requestId": "req_" + _uuid(rng)[:8], "message": {
            "id": "msg_" + _uuid(rng)[:12], "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": _text(rng, rng.randint(20, 120))}]}})
        if rng.random() < 0.5:
            tid = "toolu_" + _uuid(rng).replace("-", "")[:20]
            emit({"type": "assistant", "message": {"id": "msg_" + _uuid(rng)[:12], "role": "assistant",
                                                   "model": "claude-sonnet-4-5", "content": [
                {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": rng.choice(CODE)}}]}})
            emit({"type": "user", "toolUseResult": {"stdout": _text(rng, 40)}, "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tid, "content": _text(rng, rng.randint(20, 200))}]}})
    return lines


def write_claude_corpus(root: Path, *, files: int, turns: int, seed: int = 7,
                        projects: int = 5, start: dt.datetime | None = None) -> list[Path]:
    """Write files sessions under root/projects/<slug>/; return their paths."""
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
        lines = claude_session_lines(rng, session, cwd, t0, turns)
        p = folder / f"{session}.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(p)
    return out
