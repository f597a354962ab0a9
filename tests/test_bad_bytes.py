"""Bad bytes: arguments that are not UTF-8, NULs, lone surrogates, a damaged index.

Each gets a clear answer and never a traceback, a hang or an "internal error".
"""

from __future__ import annotations

import json
import os
import select
import sqlite3
import subprocess
import sys

import pytest

import origin
from conftest import ROOT


def run_origin(*argv: bytes | str, timeout: int = 120) -> subprocess.CompletedProcess:
    args = [a if isinstance(a, bytes) else a.encode() for a in argv]
    return subprocess.run([sys.executable.encode(), str(ROOT / "origin.py").encode(), *args],
                          capture_output=True, timeout=timeout)


@pytest.mark.parametrize("argv", [
    (b"search", b"\xffabc"),
    (b"show", b"claude-code:\xfe"),
    (b"forget", b"ent_\xff"),
    (b"timeline", b"--session", b"\xff"),
    (b"search", b"x", b"--project", b"caf\xe9"),
    (b"search", b"--json", b"\xff"),
])
def test_an_argument_that_is_not_utf8_is_refused_clearly(argv):
    """Repro: `origin search $'\\xffabc'` (and show, forget, --session, --project) printed a UnicodeEncodeError."""
    proc = run_origin(*argv)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert "is not valid UTF-8" in err and "\\x" in err
    if b"--json" in argv:
        assert json.loads(err)["code"] == 2


def test_a_query_holding_a_nul_is_answered(store):
    """Repro: an MCP query with a NUL gave "internal error in Origin (OperationalError)"."""
    service = origin.McpService(store.home, lambda *a, **kw: None)
    try:
        for query in ("ab\x00cdef", "hello\x00", "\x00"):
            text, is_error = service.call("search", {"query": query}, "test")
            assert "internal error" not in text
            assert not is_error, text
    finally:
        service.store.close()
    assert origin.search(store, "ab\x00cdef") == {"entries": [], "events": []}


def claude_line(text: str) -> str:
    return json.dumps({"type": "user", "uuid": "u-nul-1", "sessionId": "s-nul", "timestamp": "2026-01-02T03:04:05Z",
                       "cwd": "/w/p", "message": {"role": "user", "content": text}}) + "\n"


def test_text_after_a_nul_in_a_message_is_searchable(user_home, store):
    """Repro: the words after a NUL were stored but no search found them."""
    folder = user_home / ".claude" / "projects" / "-w-p"
    folder.mkdir(parents=True)
    (folder / "s-nul.jsonl").write_text(claude_line("before\x00after zanzibarword"))
    origin.sync(store)
    hits = origin.search(store, "zanzibarword")["events"]
    assert [h["id"] for h in hits] == ["claude-code:u-nul-1"]
    assert origin.search(store, "before after")["events"]
    raw = origin.raw_sources(store, "claude-code:u-nul-1")[0]["raw"]
    assert "\\u0000" in raw  # the mirror keeps the line as written


def test_a_request_with_a_lone_surrogate_gets_a_reply(tmp_path):
    """Repro: such a request got no reply at all and the client hung.

    The MCP SDK (2.3.0) parses request lines with pydantic, which refuses a
    lone surrogate escape and then sends nothing; Origin repairs the line.
    """
    env = {**os.environ, "ORIGIN_HOME": str(tmp_path / "store"), "HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "origin.py"), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def send(obj_or_raw) -> None:
        raw = obj_or_raw if isinstance(obj_or_raw, str) else json.dumps(obj_or_raw)
        proc.stdin.write(raw.encode() + b"\n")
        proc.stdin.flush()

    def reply(timeout: float = 120) -> dict | None:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        return json.loads(proc.stdout.readline()) if ready else None

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert reply()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # Written by hand: json.dumps would not write a lone surrogate escape.
        send('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search",'
             '"arguments":{"query":"abc\\ud800def"}}}')
        answer = reply()
        assert answer is not None, "no reply to a request holding a lone surrogate"
        # Refused as the hub refuses it, naming the argument; never stored as U+FFFD.
        assert answer["id"] == 2 and answer["result"]["isError"] is True
        assert "'query'" in answer["result"]["content"][0]["text"]
        assert "lone UTF-16 surrogate" in answer["result"]["content"][0]["text"]
        send('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"remember",'
             '"arguments":{"kind":"memory","text":"tabs, not spaces\\ud800"}}}')
        answer = reply()
        assert answer["id"] == 4 and answer["result"]["isError"] is True
        assert "'text'" in answer["result"]["content"][0]["text"]
        send('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"search",'
             '"arguments":{"query":"smile \\ud83d\\ude00"}}}')  # a valid pair passes untouched
        assert reply()["id"] == 3
        with sqlite3.connect(tmp_path / "store" / "origin.db") as c:
            assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == 0
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_the_request_repair_touches_only_lone_surrogates():
    assert origin.mcp_request_line('{"a":"x"}\n') == '{"a":"x"}\n'
    assert origin.mcp_request_line('{"a":"\\ud83d\\ude00"}\n') == '{"a":"\\ud83d\\ude00"}\n'
    assert json.loads(origin.mcp_request_line('{"a":["\\udc00", {"\\ud800k": 1}]}')) == {"a": ["\ufffe", {"\ufffek": 1}]}
    assert origin.mcp_request_line('{"a":"\\ud800"') == '{"a":"\\ud800"'  # not JSON: left for the SDK to report


def test_a_damaged_index_makes_search_say_how_to_fix_it(user_home, origin_home, claude_root):
    """Repro: a damaged index/messages.db made every search fail without saying that deleting index/ fixes it."""
    env = {**os.environ, "HOME": str(user_home), "ORIGIN_HOME": str(origin_home)}
    assert subprocess.run([sys.executable, str(ROOT / "origin.py"), "sync"], env=env, capture_output=True).returncode == 0
    part = origin_home / "index" / "messages.db"
    with open(part, "r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xde\xad" * 4096)  # pages after the header: the file still opens
    proc = subprocess.run([sys.executable, str(ROOT / "origin.py"), "search", "hello"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == origin.StoreError.exit_code and "Traceback" not in proc.stderr
    assert "search index" in proc.stderr and "delete that folder" in proc.stderr and "origin sync" in proc.stderr
    # So does a remember whose quote is looked up in the index.
    quoted = subprocess.run([sys.executable, str(ROOT / "origin.py"), "remember", "A note.", "--kind", "memory",
                             "--quote", "hello there friend"], env=env, capture_output=True, text=True, timeout=120)
    assert quoted.returncode == origin.StoreError.exit_code and "Traceback" not in quoted.stderr, quoted.stderr
    assert "search index" in quoted.stderr and "delete that folder" in quoted.stderr
    # Following the advice works.
    import shutil

    shutil.rmtree(origin_home / "index")
    assert subprocess.run([sys.executable, str(ROOT / "origin.py"), "sync"], env=env, capture_output=True).returncode == 0
    again = subprocess.run([sys.executable, str(ROOT / "origin.py"), "search", "hello", "--json"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
