"""MCP over HTTP on the hub, and the forwarding proxy, with real processes.

A real `origin serve` on loopback answers the SDK's own streamable HTTP
client in both protocol eras with the seven tools; every refusal at the
door (token, Host, Origin, body, method, media types) is checked on the
wire.  `origin mcp` on a device with a hub is driven by the SDK's stdio
client: it pushes what the agent just wrote before `remember`, starts and
lists its tools while the hub is down, and recovers when it comes back.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import anyio
import pytest

import origin
from helpers import DECISION, failed, http_client, HubDevice, ok, proxy_client, QUOTE, Serve, TOOLS, write_cycle
from reliability_tools import origin_argv, origin_env

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running

ERAS = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def token(hub) -> str:
    return hub.token("laptop")


def entry_row(home: Path, entry_id: str) -> sqlite3.Row:
    with sqlite3.connect(home / "origin.db") as c:
        c.row_factory = sqlite3.Row
        return c.execute("SELECT * FROM entry WHERE id = ?", (entry_id,)).fetchone()


# -- POST /mcp with the SDK's client ------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_invariant_5_the_sdk_http_client_calls_all_seven_tools_on_the_hub(hub, token, mode):
    async def body(c):
        out = {"version": c.protocol_version, "instructions": c.instructions,
               "tools": [t.name for t in (await c.list_tools()).tools]}
        out["search"] = ok(await c.call_tool("search", {"query": "type-check", "project": "Demo"}))
        out["timeline"] = ok(await c.call_tool("timeline", {"since": "2025-01-01"}))
        entry = out["search"]["entries"][0]
        event_id = next(e["id"] for e in out["search"]["events"])
        out["get"] = ok(await c.call_tool("get", {"ids": [entry["id"], event_id]}))
        out["sources"] = ok(await c.call_tool("sources", {"id": entry["id"]}))
        return await write_cycle(c, out, event_id)

    out = http_client(hub.mcp, token, mode, body)
    assert out["version"] == ERAS[mode]
    assert out["tools"] == TOOLS
    assert "remember" in out["instructions"] and "explicitly" in out["instructions"]
    assert out["timeline"]["sessions"]
    entry, event = (i.get("entry") or i.get("event") for i in out["get"]["items"])
    assert entry["text"] == DECISION and entry["id"] == out["search"]["entries"][0]["id"]
    assert "type-check" in event["text"]
    assert QUOTE in out["sources"]["sources"][0]["raw"]
    # The author is the MCP client (2026 era: its client info on every
    # request; the legacy era names none) at the token's name.
    assert out["remember"]["author"] == ("test-agent@laptop" if mode == "auto" else "mcp-client@laptop")
    assert out["correct"]["supersedes"] == out["remember"]["id"]
    assert out["preview"]["done"] is False and out["forget"]["done"] is True
    assert "forgotten" in out["after"]
    # What the tools did is in the hub's own store.
    with origin.open_store(hub.home) as store:
        assert origin.entry_status(store.conn, out["remember"]["id"]) == "forgotten"


def test_the_x_origin_client_header_names_the_author(hub, token):
    async def body(c):
        event = ok(await c.call_tool("search", {"query": "type-check", "scope": "events"}))["events"][0]
        return ok(await c.call_tool("remember", {"kind": "memory", "text": "Demo: type-check noted over HTTP.",
                                                 "sources": [{"event": event["id"]}]}))["entry"]

    entry = http_client(hub.mcp, token, "legacy", body, headers={"X-Origin-Client": "claude-code"})
    assert entry["author"] == "claude-code@laptop"


@pytest.mark.parametrize("mode", ERAS)
def test_bad_and_revoked_tokens_are_refused_before_any_tool(hub, token, mode):
    async def body(c):
        return await c.list_tools()

    for bad in (None, "ogn_not-a-token", token + "x"):
        with pytest.raises(BaseException) as e:
            http_client(hub.mcp, bad, mode, body)
        assert "401" in repr(e.value) or "nauthorized" in repr(e.value) or "token" in repr(e.value)
    assert hub.run("token", "revoke", "laptop").returncode == 0
    with pytest.raises(BaseException):
        http_client(hub.mcp, token, mode, body)


@pytest.mark.parametrize("mode", ERAS)
def test_bad_arguments_unknown_and_forgotten_ids_are_tool_errors(hub, token, mode):
    async def body(c):
        out = {}
        out["unknown_arg"] = failed(await c.call_tool("search", {"query": "x", "colour": "red"}))
        out["bad_type"] = failed(await c.call_tool("search", {"limit": "ten"}))
        out["missing"] = failed(await c.call_tool("get", {}))
        out["no_tool"] = failed(await c.call_tool("delete_everything", {}))
        out["unknown_id"] = failed(await c.call_tool("get", {"ids": ["claude-code:nope"]}))
        out["unknown_entry"] = failed(await c.call_tool("correct", {"id": "mem_nope", "text": "x"}))
        entry = ok(await c.call_tool("search", {"scope": "entries"}))["entries"][0]
        shown = ok(await c.call_tool("forget", {"id": entry["id"]}))
        ok(await c.call_tool("forget", {"id": entry["id"], "digest": shown["digest"]}))
        out["forgotten"] = failed(await c.call_tool("get", {"ids": [entry["id"]]}))
        out["forgotten_again"] = failed(await c.call_tool("forget", {"id": entry["id"]}))
        return out

    out = http_client(hub.mcp, token, mode, body)
    assert out["unknown_arg"].startswith("invalid arguments") and "'colour'" in out["unknown_arg"]
    assert "limit" in out["bad_type"]
    assert "missing argument" in out["missing"]
    assert "unknown tool" in out["no_tool"] and "search" in out["no_tool"]
    assert out["unknown_id"].startswith("not found")
    assert "not found" in out["unknown_entry"]
    assert "forgotten" in out["forgotten"] and "forgotten" in out["forgotten_again"]
    for text in out.values():
        assert str(hub.home) not in text and "Traceback" not in text


# -- the wire: every refusal at the door ---------------------------------------


def raw(hub: Serve, method: str, body: bytes | None = None, headers: dict | None = None,
        conn: http.client.HTTPConnection | None = None, path: str = "/mcp"):
    """Send one request; return (status, headers, decoded body or None)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", hub.port, timeout=60)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, dict(r.getheaders()), (json.loads(data) if data else None)


def rpc(method: str, params: dict | None = None, rid: int | None = 1) -> bytes:
    msg = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    if rid is not None:
        msg["id"] = rid
    return json.dumps(msg).encode()


def wire_headers(token: str, **extra: str) -> dict:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", **extra}


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def test_get_and_other_methods_answer_405_with_allow_post(hub, token):
    for method in ("GET", "DELETE", "PUT", "OPTIONS", "HEAD"):
        status, headers, _ = raw(hub, method, headers={"Authorization": f"Bearer {token}"})
        assert status == 405, method
        assert headers["Allow"] == "POST"


def test_each_malformed_request_gets_its_status_and_a_json_rpc_error(hub, token):
    h = wire_headers(token)
    cases = [
        (rpc("tools/list"), {**h, "Accept": "text/html"}, 406, -32600),
        (rpc("tools/list"), {**h, "Content-Type": "text/plain"}, 415, -32600),
        (b"{not json", h, 400, -32700),
        (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', h, 400, -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', h, 400, -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', h, 400, -32600),
        (rpc("nope/nothing"), {**h, "MCP-Protocol-Version": "2025-11-25"}, 404, -32601),
        # 2026 era: the routing headers must match the body
        (rpc("tools/call", {"name": "search", "arguments": {}, "_meta": MODERN_META}),
         {**h, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "get"}, 400, -32020),
        (rpc("tools/list", {}), {**h, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}, 400, None),
        (rpc("tools/list"), {**h, "MCP-Protocol-Version": "1999-01-01"}, 400, None),
    ]
    for body, headers, status, code in cases:
        got, _, reply = raw(hub, "POST", body, headers)
        assert got == status, (body, headers, reply)
        assert reply["jsonrpc"] == "2.0" and "error" in reply, reply
        if code is not None:
            assert reply["error"]["code"] == code, reply
        assert str(hub.home) not in json.dumps(reply)


def test_a_lone_surrogate_in_an_argument_is_a_tool_error_naming_it_and_stores_nothing(hub, token):
    """A JSON \\ud800 escape without its pair is valid JSON, but no text: refused, never U+FFFD."""
    with sqlite3.connect(hub.home / "origin.db") as c:
        entries = c.execute("SELECT count(*) FROM entry").fetchone()[0]
    cases = [("remember", {"kind": "memory", "text": "tabs, not spaces\ud800", "sources": [{"quote": QUOTE}]},
              "'text'"),
             ("remember", {"kind": "memory", "text": DECISION, "sources": [{"quote": "npm run\udfff"}]},
              "'sources[0].quote'"),
             ("search", {"query": "type-check \udc80"}, "'query'")]
    for name, arguments, where in cases:
        body = rpc("tools/call", {"name": name, "arguments": arguments})
        assert b"\\ud" in body  # sent as the escape itself
        status, _, reply = raw(hub, "POST", body, wire_headers(token))
        assert status == 200, reply
        result = reply["result"]
        text = result["content"][0]["text"]
        assert result["isError"] is True and where in text and "lone UTF-16 surrogate" in text, text
        assert "internal error" not in text
    with sqlite3.connect(hub.home / "origin.db") as c:
        assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == entries
        assert c.execute("SELECT count(*) FROM entry WHERE text LIKE ?", ("%\ufffd%",)).fetchone()[0] == 0
    assert "Traceback" not in "".join(hub.log)


def test_notifications_are_accepted_with_202_and_no_body(hub, token):
    status, headers, reply = raw(hub, "POST", rpc("notifications/initialized", rid=None), wire_headers(token))
    assert (status, reply) == (202, None)
    assert headers["Content-Length"] == "0"


def test_a_legacy_request_needs_no_initialize_and_initialize_counter_offers(hub, token):
    status, _, reply = raw(hub, "POST", rpc("tools/list"), wire_headers(token))
    assert status == 200 and [t["name"] for t in reply["result"]["tools"]] == TOOLS
    status, _, reply = raw(hub, "POST", rpc("initialize", {
        "protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        wire_headers(token))
    assert status == 200 and reply["result"]["protocolVersion"] == "2025-11-25"
    assert "Origin" in reply["result"]["instructions"]
    assert "mcp-session-id" not in {k.lower() for k in _}


def test_a_401_is_a_json_rpc_error_with_www_authenticate_and_the_socket_stays_in_step(hub, token):
    c = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=60)
    big = rpc("tools/call", {"name": "search", "arguments": {"query": "x" * 5000}})
    status, headers, reply = raw(hub, "POST", big, wire_headers("ogn_wrong"), conn=c)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert reply["error"]["code"] == -32001 and "token" in reply["error"]["message"]
    # The unread body was drained: the next request on the same socket is sound.
    status, _, reply = raw(hub, "POST", rpc("tools/list"), wire_headers(token), conn=c)
    assert status == 200 and len(reply["result"]["tools"]) == 7
    c.close()


def _loop_descriptors(pid: int) -> int:
    """How many epoll descriptors (one per asyncio event loop) a process holds."""
    fd = Path(f"/proc/{pid}/fd")
    out = 0
    for f in fd.iterdir():
        try:
            out += os.readlink(f) == "anon_inode:[eventpoll]"
        except OSError:
            pass  # closed while listed
    return out


def _settles(value, want: int) -> bool:
    """Whether value() comes to want within a minute (a connection's thread ends a moment after its close)."""
    deadline = time.monotonic() + 60
    while value() != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return value() == want


def test_each_connection_keeps_one_event_loop_and_gives_it_back_when_it_closes(hub, token):
    """A kept-alive connection's /mcp calls share its thread's loop; closing it closes the loop."""
    loops = lambda: _loop_descriptors(hub.proc.pid)  # noqa: E731
    before = loops()
    call = rpc("tools/call", {"name": "search", "arguments": {"query": "type-check"}})
    c = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=60)
    for _ in range(6):
        status, _, reply = raw(hub, "POST", call, wire_headers(token), conn=c)
        assert status == 200 and not reply["result"]["isError"]
        assert loops() == before + 1  # one loop for the connection, not one per call
    c.close()
    assert _settles(loops, before), "closing the connection left its event loop open"
    for _ in range(20):  # twenty more connections, each closed: no loop left behind
        status, _, reply = raw(hub, "POST", call, wire_headers(token))
        assert status == 200 and not reply["result"]["isError"]
    assert _settles(loops, before)


def test_a_body_over_the_cap_is_refused_with_413_unread(hub, token):
    body = rpc("tools/call", {"name": "search", "arguments": {"query": "x" * (origin.MCP_BODY_MAX + 10)}})
    c = http.client.HTTPConnection("127.0.0.1", hub.port, timeout=60)
    c.putrequest("POST", "/mcp")
    for k, v in {**wire_headers(token), "Content-Length": str(len(body))}.items():
        c.putheader(k, v)
    c.endheaders()
    r = c.getresponse()  # answered from the headers alone, before any body byte
    assert r.status == 413 and json.loads(r.read())["error"]["code"] == -32600
    assert r.getheader("Connection") == "close"
    c.close()


def test_dns_rebinding_a_foreign_host_or_origin_is_refused_before_any_tool_runs(hub, token):
    remember = rpc("tools/call", {"name": "remember", "arguments": {
        "kind": "memory", "text": "planted by a web page", "sources": [{"quote": QUOTE}]}})
    for extra in ({"Host": "evil.example"}, {"Host": f"evil.example:{hub.port}"},
                  {"Origin": "http://evil.example"}, {"Origin": "null"},
                  {"Origin": f"http://localhost:{hub.port + 1}"}):
        status, _, reply = raw(hub, "POST", remember, wire_headers(token, **extra))
        assert status == 403, extra
        assert "error" in reply
    with sqlite3.connect(hub.home / "origin.db") as c:
        assert c.execute("SELECT count(*) FROM entry WHERE text LIKE 'planted%'").fetchone()[0] == 0
    # The hub's own names and its own page's Origin are served.
    for extra in ({"Host": f"localhost:{hub.port}"}, {"Host": f"127.0.0.1:{hub.port}",
                                                      "Origin": f"http://127.0.0.1:{hub.port}"}):
        status, _, reply = raw(hub, "POST", rpc("tools/list"), wire_headers(token, **extra))
        assert status == 200, (extra, reply)


def test_the_public_url_host_is_served_and_others_still_refused(hub_home):
    h = Serve(hub_home, "--public-url", "https://hub.example.net")
    try:
        token = h.token("cloud")
        status, _, _ = raw(h, "POST", rpc("tools/list"), wire_headers(token, Host="hub.example.net",
                                                                    Origin="https://hub.example.net"))
        assert status == 200
        status, _, reply = raw(h, "POST", rpc("tools/list"), wire_headers(token, Host="other.example.net"))
        assert status == 403 and "--public-url" in reply["error"]["message"]
    finally:
        h.stop()


# -- the forwarding proxy ------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_the_proxy_pushes_before_remember_so_the_line_just_written_is_cited_on_the_hub(hub, tmp_path, mode):
    dev = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
    said = f"Let's pin the Demo linter to eslint 9 because the flat config is final ({mode})."

    async def body(c):
        tools = [t.name for t in (await c.list_tools()).tools]
        dev.say(said)  # the agent's log gets the line a moment before the call
        entry = ok(await c.call_tool("remember", {
            "kind": "memory", "text": "Demo: the linter is pinned to eslint 9 (flat config is final).",
            "sources": [{"quote": "pin the Demo linter to eslint 9"}]}))["entry"]
        # No caching: a search right after sees the new entry.
        found = ok(await c.call_tool("search", {"query": "eslint 9", "scope": "entries"}))
        sources = ok(await c.call_tool("sources", {"id": entry["id"]}))
        return tools, entry, found, sources

    tools, entry, found, sources = proxy_client(dev, body, mode)
    assert tools == TOOLS
    assert entry["author"] == "claude-code@laptop"
    assert [e["id"] for e in found["entries"]] == [entry["id"]]
    # The hub's entry cites the device's line, which the hub holds verbatim.
    assert "pin the Demo linter to eslint 9" in sources["sources"][0]["raw"]
    assert sources["sources"][0]["file"].startswith("@laptop:")
    row = entry_row(hub.home, entry["id"])
    assert row is not None and row["author"] == "claude-code@laptop"
    with sqlite3.connect(dev.store / "origin.db") as c:  # the device's staging store got no entry
        assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == 0


def test_the_proxy_starts_with_the_hub_down_names_it_and_recovers_without_restart(hub_home, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = Serve(hub_home)
    token = first.token("laptop")
    first.stop()
    dev = HubDevice(tmp_path, "laptop", url, token)
    started: list = []

    async def body(c):
        tools = [t.name for t in (await c.list_tools()).tools]
        down = ok(await c.call_tool("search", {"query": "type-check"}))
        down_write = failed(await c.call_tool("remember", {"kind": "memory", "text": "x y z",
                                                           "sources": [{"quote": "type-check"}]}))
        started.append(await anyio.to_thread.run_sync(lambda: Serve(hub_home, port=port)))
        up = ok(await c.call_tool("search", {"query": "type-check", "scope": "entries"}))
        return tools, down, down_write, up

    tools, down, down_write, up = proxy_client(dev, body)
    try:
        assert tools == TOOLS
        assert down["served_by"] == "local, hub unreachable" and down["events"]  # the device's own archive
        assert url in down_write and "origin serve" in down_write and "nothing was written" in down_write
        assert "served_by" not in up
        assert len(up["entries"]) == 1 and "type-check" in json.dumps(up["entries"][0], ensure_ascii=False)
    finally:
        for h in started:
            h.stop()


def test_a_hub_killed_mid_session_leaves_the_proxy_answering_from_the_device_until_it_is_back(hub_home, tmp_path):
    """Issue 29 item 1: reads fall back to the device's store and say so; writes are refused; the hub is
    asked again at each call."""
    first = Serve(hub_home)
    dev = HubDevice(tmp_path, "laptop", first.url, first.token("laptop"))
    said = "The Demo release train leaves on Thursdays, the okapi rule."
    seen: dict = {}

    async def body(c):
        dev.say(said)  # the agent writes its log; the proxy syncs and pushes before the next call
        seen["up"] = ok(await c.call_tool("search", {"query": "type-check"}))
        first.proc.kill()  # the hub dies mid-session, without a goodbye
        first.proc.wait(30)
        seen["search"] = ok(await c.call_tool("search", {"query": "okapi rule"}))
        hit = seen["search"]["events"][0]["id"]
        seen["get"] = ok(await c.call_tool("get", {"ids": [hit]}))
        seen["timeline"] = ok(await c.call_tool("timeline", {"since": "2020-01-01"}))
        seen["sources"] = ok(await c.call_tool("sources", {"id": hit}))
        seen["remember"] = failed(await c.call_tool("remember", {
            "kind": "memory", "text": "Demo releases leave on Thursdays.", "sources": [{"quote": "okapi rule"}]}))
        seen["forget"] = failed(await c.call_tool("forget", {"id": hit}))
        back = await anyio.to_thread.run_sync(lambda: Serve(hub_home, port=first.port))
        seen["back"] = back
        seen["again"] = ok(await c.call_tool("search", {"query": "okapi rule"}))

    proxy_client(dev, body)
    try:
        assert "served_by" not in seen["up"] and seen["up"]["entries"]
        for tool in ("search", "get", "timeline", "sources"):
            assert seen[tool]["served_by"] == "local, hub unreachable", tool
        assert "okapi rule" in seen["search"]["events"][0]["snippet"]
        for tool in ("remember", "forget"):
            assert "hub unreachable" in seen[tool] and "nothing was written" in seen[tool], seen[tool]
        with sqlite3.connect(dev.store / "origin.db") as c:  # nothing queued, nothing forgotten here
            assert c.execute("SELECT count(*) FROM entry").fetchone()[0] == 0
            assert c.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0
        # Back on the hub at the first call after it answers.
        assert "served_by" not in seen["again"] and "okapi rule" in json.dumps(seen["again"], ensure_ascii=False)
    finally:
        seen["back"].stop()


@pytest.mark.parametrize("public", [None, "https://hub.example.org"])
def test_a_hub_on_every_address_says_when_mcp_cannot_know_its_name(tmp_path, public):
    home = tmp_path / "hub"
    env = origin_env(tmp_path / "hostenv", home)
    argv = origin_argv("serve", "--listen", f"0.0.0.0:{free_port()}", *(["--public-url", public] if public else []))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if " hub serving " in line:
                break
        assert any(" hub serving " in line for line in lines), "".join(lines)
    finally:
        proc.terminate()
        # Read on through the same file: lines it has buffered are not in the pipe any more.
        lines += list(proc.stderr)
        proc.wait(60)
    log = "".join(lines)
    noted = "/mcp answers only for loopback names" in log
    assert noted is (public is None), log
    if public is None:
        assert "--public-url" in log and "ORIGIN_PUBLIC_URL" in log
