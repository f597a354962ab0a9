"""A hub on the open internet: who may do what, and pushes that prove their bytes.

Every test talks HTTP to a real `origin serve` on loopback (and runs real
`origin push` processes where a device is involved): a device name belongs
to one token, an agent token reaches /mcp only, the fingerprint keys go
only to a bound device token, and a push whose bytes differ from the hub's
is refused with a reason rather than losing events.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import resource
import select
import socket
import sqlite3
import subprocess
import threading
import time
import types
from pathlib import Path

import pytest

import origin
from conftest import write_session
from helpers import HubProcess, LINES
from reliability_tools import origin_argv, origin_env

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


@pytest.fixture
def hub(tmp_path):
    h = HubProcess(tmp_path / "hub")
    yield h
    assert h.stop() == 0, "".join(h.log)


def token(hub: HubProcess, name: str, *flags: str) -> str:
    code, out = hub.cli("token", "create", name, "--url", hub.url, "--json", *flags)
    assert code == 0, out
    return json.loads(out)["token"]


def call(hub: HubProcess, method: str, path: str, tok: str | None, body: dict | None = None,
         headers: dict | None = None) -> tuple[int, dict]:
    """One request on a connection of its own; return (status, JSON body)."""
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    h = {"Host": f"{host}:{port}", **({"Authorization": f"Bearer {tok}"} if tok else {}), **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        raw = r.read()
    finally:
        conn.close()
    return r.status, json.loads(raw) if raw else {}


def chunk(device: str = "laptop", data: bytes = LINES, **over) -> dict:
    body = {"device": device, "source": "claude-code", "path": "/home/dev/.claude/projects/-shop/s-hub-1.jsonl",
            "relPath": "projects/-shop/s-hub-1.jsonl", "generation": 0, "offset": 0, "mtimeMs": 1764669600000,
            "data": base64.b64encode(data).decode()}
    body.update(over)
    return body


def logged(hub: HubProcess, text: str) -> bool:
    """Whether the hub's log says text, waiting for the line to be read from its pipe."""
    deadline = time.monotonic() + 60
    while not any(text in line for line in hub.log):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def hub_events(hub: HubProcess) -> int:
    with sqlite3.connect(hub.home / "origin.db") as c:
        return c.execute("SELECT count(*) FROM event").fetchone()[0]


# -- who may do what -----------------------------------------------------------


def test_an_unbound_token_cannot_take_over_a_device_that_another_token_pushed(hub):
    laptop, intruder = token(hub, "laptop"), token(hub, "intruder")
    assert call(hub, "POST", "/v1/ingest", laptop, chunk())[0] == 200
    events = hub_events(hub)
    status, body = call(hub, "GET", "/v1/cursors?device=laptop", intruder)
    assert status == 403 and "already belongs to another token" in body["error"]
    assert "origin token create NAME --device laptop" in body["error"]
    more = b'{"type":"user","sessionId":"s-hub-1","uuid":"u9","timestamp":"2026-11-02T10:01:00Z","message":' \
           b'{"role":"user","content":"an injected line that must never reach search"}}\n'
    status, body = call(hub, "POST", "/v1/ingest", intruder, chunk(data=more, offset=len(LINES)))
    assert status == 403
    assert hub_events(hub) == events
    # Refused, the intruder is still unbound: it may take a name of its own.
    assert call(hub, "GET", "/v1/cursors?device=intruder-box", intruder)[0] == 200
    # The laptop's own token goes on working.
    status, body = call(hub, "GET", "/v1/cursors?device=laptop", laptop)
    assert status == 200 and body["files"][0]["bytes"] == len(LINES)


def test_a_second_token_for_a_device_needs_the_owner_after_a_revoke_or_a_rebind(hub):
    laptop = token(hub, "laptop")
    assert call(hub, "POST", "/v1/ingest", laptop, chunk())[0] == 200
    # While the device's token is live, no second token is made for it.
    code, out = hub.cli("token", "create", "laptop2", "--device", "laptop")
    assert code != 0 and "belongs to token 'laptop'" in out and "origin token revoke laptop" in out
    assert hub.cli("token", "revoke", "laptop")[0] == 0
    # A revoked token's device stays taken for tokens that bind themselves.
    stray = token(hub, "stray")
    assert call(hub, "GET", "/v1/cursors?device=laptop", stray)[0] == 403
    second = token(hub, "laptop2", "--device", "laptop")
    status, body = call(hub, "GET", "/v1/cursors?device=laptop", second)
    assert status == 200 and body["files"][0]["bytes"] == len(LINES)
    # The owner can also move the name explicitly; the old holder loses it.
    code, out = hub.cli("token", "rebind", "stray", "--device", "laptop", "--json")
    assert code == 0 and json.loads(out)["taken_from"] == "laptop2", out
    assert call(hub, "GET", "/v1/cursors?device=laptop", stray)[0] == 200
    assert call(hub, "GET", "/v1/cursors?device=laptop", second)[0] == 403
    code, out = hub.cli("token", "list", "--json")
    rows = {t["name"]: t for t in json.loads(out)["tokens"]}
    assert rows["stray"]["device"] == "laptop" and rows["laptop2"]["device"] is None


def test_invariant_5_an_agent_token_reaches_mcp_and_gets_403_on_every_v1_route(hub):
    agent = token(hub, "cloud", "--agent")
    device = token(hub, "laptop")
    v1 = [(m, p) for (m, p) in origin.HUB_ROUTES if p.startswith("/v1/")]
    assert {p for _m, p in v1} >= {"/v1/cursors", "/v1/ingest", "/v1/tombstones"}
    for method, path in v1:
        target = path + ("?device=cloud" if path == "/v1/cursors" else "")
        status, body = call(hub, method, target, agent, chunk("cloud") if method == "POST" else None)
        assert status == 403, (method, path, body)
        assert "reaches /mcp only" in body["error"]
    assert hub_events(hub) == 0
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    mcp = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    for tok in (agent, device):
        status, body = call(hub, "POST", "/mcp", tok, listing, mcp)
        assert status == 200 and {t["name"] for t in body["result"]["tools"]} >= {"search", "remember"}
    code, out = hub.cli("token", "list", "--json")
    assert {t["name"]: t["scope"] for t in json.loads(out)["tokens"]} == {"cloud": "agent", "laptop": "device"}


def test_invariant_2_fingerprint_keys_go_only_to_a_device_token_bound_to_its_device(hub):
    laptop, unbound, agent = token(hub, "laptop"), token(hub, "fresh"), token(hub, "cloud", "--agent")
    assert call(hub, "POST", "/v1/ingest", laptop, chunk())[0] == 200
    with origin.open_store(hub.home) as store:
        eid = store.conn.execute("SELECT id FROM event WHERE text LIKE '%banker rounding%'").fetchone()[0]
        origin.forget(store, eid, reason="test")
    status, body = call(hub, "GET", "/v1/tombstones?after=0", laptop)
    assert status == 200 and body["keys"] and body["tombstones"][0]["fingerprints"]
    status, body = call(hub, "GET", "/v1/tombstones?after=0", unbound)
    assert status == 200 and body["keys"] == [] and body["tombstones"]
    assert call(hub, "GET", "/v1/tombstones?after=0", agent)[0] == 403


def test_tokens_of_a_store_from_before_scopes_are_device_tokens_and_keep_their_device(tmp_path):
    home = tmp_path / "hub"
    with origin.open_store(home) as store:
        old = origin.create_token(store, "laptop")
        with origin.transaction(store.conn) as conn:
            conn.execute("DROP TABLE token_scope")  # the store as an earlier version left it
    h = HubProcess(home)
    try:
        assert call(h, "POST", "/v1/ingest", old, chunk())[0] == 200
        code, out = h.cli("token", "list", "--json")
        assert json.loads(out)["tokens"][0]["scope"] == "device"
    finally:
        assert h.stop() == 0


# -- pushes that prove their bytes ---------------------------------------------


def test_a_chunk_whose_bytes_differ_from_its_hash_is_refused_with_409_and_writes_nothing(hub):
    laptop = token(hub, "laptop")
    body = chunk(sha256=hashlib.sha256(LINES.replace(b"banker", b"BANKER")).hexdigest())
    status, out = call(hub, "POST", "/v1/ingest", laptop, body)
    assert status == 409 and out["proof"] == "chunk" and "altered on the way" in out["error"]
    assert hub_events(hub) == 0 and not (hub.home / "raw" / "devices").exists()
    assert logged(hub, "refused /v1/ingest: chunk mismatch")
    body = chunk(sha256=hashlib.sha256(LINES).hexdigest(), before=hashlib.sha256(b"").hexdigest())
    assert call(hub, "POST", "/v1/ingest", laptop, body)[0] == 200


def machine(root: Path, name: str, shared: Path, hub: HubProcess, tok: str) -> dict:
    """The environment of one machine: its own store, the shared dotfiles, the hub."""
    (root / name).mkdir(parents=True, exist_ok=True)
    return origin_env(root / name, root / name / ".origin", {
        "CLAUDE_CONFIG_DIR": str(shared / ".claude"), "ORIGIN_HUB_URL": hub.url, "ORIGIN_HUB_TOKEN": tok,
        "ORIGIN_DEVICE": "laptop"})


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(origin_argv(*args), env=env, capture_output=True, text=True, timeout=300)


def said(n: int, who: str) -> list[tuple]:
    return [(f"{who}-{i}", f"2026-11-0{1 + i % 5}T10:00:0{i}Z", "user" if i % 2 == 0 else "assistant",
             f"{who} says thing number {i} about the checkout rounding rules") for i in range(n)]


def test_two_machines_on_one_device_name_and_a_pre_1970_file_never_lose_events_silently(hub, tmp_path):
    tok = token(hub, "laptop")
    shared = tmp_path / "dotfiles"
    first = write_session(shared, "s-shared", "/w/shop", said(3, "first"))
    a = machine(tmp_path, "a", shared, hub, tok)
    assert run(a, "sync", "--json").returncode == 0
    p = run(a, "push", "--json")
    assert p.returncode == 0, p.stderr
    with sqlite3.connect(hub.home / "origin.db") as c:
        held = {r[0] for r in c.execute("SELECT id FROM event")}
    assert len(held) == 3
    # The second machine shares the dotfiles (so the device name and token)
    # and holds another, longer log at the same path.
    write_session(shared, "s-shared", "/w/shop", said(5, "second"))
    b = machine(tmp_path, "b", shared, hub, tok)
    assert run(b, "sync", "--json").returncode == 0
    write_session(shared, "s-other", "/w/shop", said(2, "other"))
    old = write_session(shared, "s-old", "/w/shop", said(2, "old"))
    os.utime(old, (-86400 * 400, -86400 * 400))  # dated 1968
    assert run(b, "sync", "--json").returncode == 0
    p = run(b, "push", "--json")
    assert p.returncode == origin.PUSH_PARTIAL, p.stderr
    report = json.loads(p.stdout)
    assert [r["path"] for r in report["refused"]] == [str(first)]
    assert report["refused"][0]["status"] == 409 and "another machine pushes the same file" in \
        report["refused"][0]["error"]
    with sqlite3.connect(hub.home / "origin.db") as c:
        now = {r[0] for r in c.execute("SELECT id FROM event")}
        errors = c.execute("SELECT coalesce(sum(parse_errors), 0) FROM raw_file").fetchone()[0]
    assert held <= now and errors == 0  # the first machine's events are whole, no torn line
    assert len(now - held) == 4  # the other two files arrived, the pre-1970 one among them
    p = run(b, "push")
    assert p.returncode == origin.PUSH_PARTIAL
    assert f"not pushed: claude-code {first}" in p.stderr and "own device name" in p.stderr


# -- the hub says what went wrong ----------------------------------------------


def test_a_relpath_too_long_for_the_hubs_file_system_is_a_400_with_a_reason_and_a_log_line(hub):
    laptop = token(hub, "laptop")
    rel = "/".join(["\U0001f600" * 63] * 16)  # 1,023 characters, 4,047 bytes
    status, out = call(hub, "POST", "/v1/ingest", laptop, chunk(relPath=rel))
    assert status == 400 and "too long for the hub's file system" in out["error"]
    assert logged(hub, "refused /v1/ingest 400")
    assert call(hub, "POST", "/v1/ingest", laptop, chunk())[0] == 200  # the hub carries on


def test_a_full_disk_is_a_507_and_the_device_prints_what_the_hub_said(hub, tmp_path):
    tok = token(hub, "laptop")
    home = tmp_path / "dev"
    log = home / ".claude" / "projects" / "-w-shop" / "s-big.jsonl"
    log.parent.mkdir(parents=True)
    limit = max(p.stat().st_size for p in hub.home.rglob("*") if p.is_file()) + (2 << 20)
    pad = "x" * (60 << 10)
    with log.open("w") as fh:  # lines the adapter keeps no event for: the mirror is what grows
        for i in range((limit + (2 << 20)) // len(pad)):
            fh.write(json.dumps({"type": "progress", "sessionId": "s-big", "n": i, "data": pad}) + "\n")
    env = origin_env(home, home / ".origin", {"ORIGIN_HUB_URL": hub.url, "ORIGIN_HUB_TOKEN": tok,
                                              "ORIGIN_DEVICE": "laptop"})
    assert run(env, "sync", "--json").returncode == 0
    # The hub may write no file past `limit` bytes: to it, the disk is full.
    resource.prlimit(hub.proc.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    p = run(env, "push")
    assert p.returncode == origin.HubUnavailable.exit_code, p.stderr
    assert "507" in p.stderr and "disk is full" in p.stderr and "cannot reach" not in p.stderr
    assert logged(hub, "refused /v1/ingest 507")
    resource.prlimit(hub.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    p = run(env, "push", "--json")
    assert p.returncode == 0, p.stderr
    mirror = next((hub.home / "raw" / "devices" / "laptop").rglob("s-big.jsonl"))
    assert mirror.read_bytes() == log.read_bytes()


# -- resources -----------------------------------------------------------------


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_hold_no_store_and_the_hub_keeps_serving_at_its_descriptor_limit(hub):
    tok = token(hub, "laptop")
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    # The hub may hold 100 more descriptors than it does now.
    resource.prlimit(hub.proc.pid, resource.RLIMIT_NOFILE, (_fds(hub.proc.pid) + 100,
                                                            resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    idle = []
    try:
        for _ in range(150):  # each asks once, needing no token, then idles, kept alive
            s = socket.create_connection((host, int(port)), timeout=60)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200"), "no answer"
            idle.append(s)
        status, body = call(hub, "GET", "/v1/cursors?device=laptop", tok)
        assert status == 200, body
    finally:
        for s in idle:
            s.close()
    assert not logged_now(hub, "move it aside") and not logged_now(hub, "internal error")


def logged_now(hub: HubProcess, text: str) -> bool:
    return any(text in line for line in hub.log)


def test_a_store_that_cannot_be_opened_for_want_of_descriptors_is_not_called_damaged(tmp_path):
    home = tmp_path / "store"
    origin.open_store(home).close()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (_fds(os.getpid()) + 40, hard))
    try:
        while True:  # every descriptor the process may have, taken but one
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        os.close(held.pop())
        with pytest.raises(origin.StoreError) as e:
            origin.open_store(home).close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "too many open files" in str(e.value) and "move it aside" not in str(e.value)


def test_a_client_trickling_its_headers_is_dropped_at_the_request_deadline(hub):
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 60 + b"\r\n\r\n"
    sent = 0
    with socket.create_connection((host, int(port)), timeout=60) as s:
        # One byte every 1.5 s: each read is well within the 30 s timeout
        # per read, the request as a whole never is.
        while sent < len(request):
            try:
                s.sendall(request[sent:sent + 1])
            except OSError:
                break
            sent += 1
            ready, _, _ = select.select([s], [], [], 1.5)
            if ready:
                try:
                    got = s.recv(65536)
                except OSError:
                    got = b""
                if not got or b"HTTP/1.1 408" in got:
                    break
    assert sent < len(request), "the hub waited for the whole trickled request"


def test_a_large_body_with_a_bad_token_is_refused_unread_and_the_connection_closed(hub):
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    body = b"x" * (1 << 20)
    head = (b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ogn_wrong\r\n"
            b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(head)

        def send_body():
            try:
                s.sendall(body)
            except OSError:
                pass  # the hub closed: it never read the body

        sender = threading.Thread(target=send_body)
        sender.start()
        out = b""
        try:
            while b"\r\n\r\n" not in out:
                got = s.recv(65536)
                if not got:
                    break
                out += got
        finally:
            sender.join(60)
    assert out.startswith(b"HTTP/1.1 401") and b"Connection: close" in out, out[:300]


def test_repeated_key_words_cost_the_secret_scanner_one_check_per_distinct_value(monkeypatch):
    calls = []
    real = origin._entropy
    monkeypatch.setattr(origin, "_entropy", lambda v: calls.append(v) or real(v))
    spans = origin.find_secrets("password=" * 20000)
    assert spans == [] and len(calls) <= 30  # 20,000 values, all but the last few the same 200 characters
    calls.clear()
    text = "password=" * 200 + " password=Xk9#m2Lq8vZ1wR4t"
    assert [k for _a, _b, k in origin.find_secrets(text)] == ["password"]


def test_a_pathological_line_is_parsed_while_other_pushes_can_write(tmp_path, monkeypatch):
    hub = origin.Hub(tmp_path / "hubhome", index=False)
    server = origin.make_hub_server(hub, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    tok = origin.create_token(hub.default_store(), "laptop")
    locked = []
    real = origin.mask_secrets

    def spy(text):
        if text.startswith("password=password="):
            # What another device's push would meet now: is the write lock free?
            with sqlite3.connect(hub.home / "origin.db", timeout=0) as c:
                try:
                    c.execute("BEGIN IMMEDIATE")
                    c.execute("ROLLBACK")
                    locked.append(False)
                except sqlite3.OperationalError:
                    locked.append(True)
        return real(text)

    monkeypatch.setattr(origin, "mask_secrets", spy)
    line = json.dumps({"type": "user", "sessionId": "s-p", "uuid": "p1", "timestamp": "2026-11-02T10:00:00Z",
                       "message": {"role": "user", "content": "password=" * 20000}}).encode() + b"\n"
    try:
        at = types.SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}")  # all call() needs
        status, out = call(at, "POST", "/v1/ingest", tok, chunk(data=line))
        assert status == 200 and out["eventsAdded"] == 1, out
        assert locked == [False]
    finally:
        server.shutdown()
        server.server_close()
        hub.close()
