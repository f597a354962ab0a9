"""The hub end to end with real processes on loopback.

A hub process (`origin serve`) and device homes with different real
fixture sets, pushed with `origin push`: the hub's event ids are the union
of the devices' for every source; killed pushes and a killed hub lose and
duplicate nothing; concurrent pushes resolve their 409s; the HTTP edge
keeps kept-alive sockets in step and shuts down cleanly.
"""

from __future__ import annotations

import http.client
import json
import random
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

import adapters
import origin
from helpers import _found_anywhere, appended_claude_line, connect, Device, HubProcess, mirrors_match
from reliability_tools import CRASH_EXIT, age_tree, origin_argv

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running

#: Which agents each device has: two different real fixture sets, sharing
#: Grok's sessions, so one file held by two devices is stored once.
DEVICES = {"laptop": ("claude-code", "codex", "grok", "claude-memory", "opencode", "goose", "copilot-cli", "pi"),
           "desktop": ("cursor", "zcode", "grok", "gemini", "qwen", "aider")}


def event_ids(store: Path, source: str | None = None) -> set[str]:
    with sqlite3.connect(store / "origin.db") as c:
        q = "SELECT id FROM event" + (" WHERE source = ?" if source else "")
        return {r[0] for r in c.execute(q, (source,) if source else ())}


@pytest.fixture
def hub(tmp_path):
    h = HubProcess(tmp_path / "hub")
    yield h
    assert h.stop() == 0, "".join(h.log)


@pytest.fixture
def devices(tmp_path, hub):
    devs = [Device(tmp_path / "devices", n, agents) for n, agents in DEVICES.items()]
    for d in devs:
        connect(hub, d)
    return devs


def test_two_devices_push_and_the_hub_holds_the_union_of_their_ids_for_every_source(hub, devices):
    for d in devices:
        report = d.push()
        assert report["files_sent"] > 0 and report["bytes_sent"] > 0
    for source in adapters.ADAPTERS:
        want = set().union(*(event_ids(d.store, source) for d in devices))
        assert want, source
        assert event_ids(hub.home, source) == want, source
    for d in devices:
        mirrors_match(hub.home, d)
        again = d.push()
        assert again["bytes_sent"] == 0 and again["files_sent"] == 0
    # The hub's own CLI finds text from both devices, with device provenance.
    for d, source in ((devices[0], "codex"), (devices[1], "zcode")):
        with sqlite3.connect(d.store / "origin.db") as c:
            eid, text = c.execute(
                "SELECT id, text FROM event WHERE source = ? AND kind = 'message' AND indexed = 1 "
                "AND length(text) > 30 ORDER BY seq LIMIT 1", (source,)).fetchone()
        words = [w for w in text.split() if len(w) >= 4][:4]
        code, out = hub.cli("search", *words, "--scope", "events", "--source", source, "--limit", "200", "--json")
        assert code == 0, out
        assert eid in {h["id"] for h in json.loads(out)["events"]}, words
        code, out = hub.cli("show", eid, "--json")
        text = json.dumps(json.loads(out))
        assert f"raw/devices/{d.name}/{source}/" in text and f"@{d.name}:" in text
    assert any("POST /v1/ingest 200" in line and line.rstrip().endswith("laptop") for line in hub.log)
    assert not any("ogn_" in line for line in hub.log), "a token reached the log"


def test_status_reports_what_is_behind_and_disconnect_forgets_the_hub(hub, devices):
    d = devices[0]
    p = d.run("hub", "status", "--json")
    st = json.loads(p.stdout)
    assert p.returncode == 0 and st["reachable"] and st["token_ok"] and st["files_behind"] == 0
    d.run("sync")
    st = json.loads(d.run("hub", "status", "--json").stdout)
    assert st["files_behind"] > 0 and st["bytes_behind"] > 0 and st["last_push"] is None
    d.push()
    st = json.loads(d.run("hub", "status", "--json").stdout)
    assert st["files_behind"] == 0 and st["last_push"]
    assert json.loads(d.run("hub", "disconnect", "--json").stdout) == {"disconnected": True}
    p = d.run("push")
    assert p.returncode != 0 and "hub connect" in p.stderr


def test_push_fails_clearly_when_the_hub_is_down_or_the_token_is_revoked(hub, devices, tmp_path):
    d = devices[0]
    code, out = hub.cli("token", "revoke", d.name)
    assert code == 0, out
    p = d.run("push")
    assert p.returncode == origin.Unauthorized.exit_code, "".join(hub.log)
    assert "token" in p.stderr and "Traceback" not in p.stderr
    events = event_ids(d.store)
    assert events, "the local sync still happened"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    env = {"ORIGIN_HUB_URL": f"http://127.0.0.1:{dead}"}
    p = subprocess.run(origin_argv("push"), env={**d.env(), **env}, capture_output=True, text=True, timeout=120)
    assert p.returncode == origin.HubUnavailable.exit_code and "cannot reach the hub" in p.stderr
    assert event_ids(d.store) == events


def test_concurrent_pushes_of_three_devices_and_two_of_one_device_give_exact_counts(hub, tmp_path):
    devs = [Device(tmp_path / "many", f"dev{i}", agents)
            for i, agents in enumerate((("claude-code", "codex"), ("cursor", "grok"), ("zcode", "claude-code")))]
    for d in devs:
        connect(hub, d)
        assert d.run("sync").returncode == 0
    procs = [d.popen("push", "--json") for d in devs] + [devs[0].popen("push", "--json")]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert "database is locked" not in err
    for source in adapters.ADAPTERS:
        want = set().union(*(event_ids(d.store, source) for d in devs))
        assert event_ids(hub.home, source) == want, source
    for d in devs:
        mirrors_match(hub.home, d)
    with sqlite3.connect(hub.home / "origin.db") as h:
        dup = h.execute("SELECT count(*) - count(DISTINCT id) FROM event").fetchone()[0]
        assert dup == 0


def test_killed_pushes_and_a_killed_hub_lose_and_duplicate_nothing(tmp_path):
    hub_home = tmp_path / "hub"
    hub = HubProcess(hub_home)
    dev = Device(tmp_path / "devices", "laptop", ("claude-code", "codex", "cursor", "grok"))
    connect(hub, dev)
    assert dev.run("sync").returncode == 0
    rng = random.Random(14)
    # The device killed after its n-th acknowledged chunk, then at random moments.
    for n in (1, 3, 6):
        p = dev.run("push", crash=f"push-sent:{n}")
        assert p.returncode in (CRASH_EXIT, 0), p.stderr
    for _ in range(3):
        p = dev.popen("push")
        time.sleep(rng.uniform(0.3, 1.5))
        p.kill()
        p.communicate()
    assert hub.stop() == 0
    # The hub killed mid-ingest (after the mirror write, before the commit)
    # while a second device pushes.
    other = Device(tmp_path / "devices", "desktop", ("cursor", "zcode", "grok", "claude-code"))
    hub = HubProcess(hub_home)
    connect(hub, other)
    assert other.run("sync").returncode == 0
    assert hub.stop() == 0
    for point in ("hub-mirror-appended:2", "hub-before-commit:2", "hub-mirror-appended:3", "hub-before-commit:1"):
        hub = HubProcess(hub_home, crash=point)
        other.hub_url = hub.url
        p = other.run("push", timeout=300)
        assert p.returncode == origin.HubUnavailable.exit_code, p.stderr
        assert hub.proc.wait(60) == CRASH_EXIT, "".join(hub.log)
    hub = HubProcess(hub_home)
    try:
        for d in (dev, other):
            d.hub_url = hub.url
            d.push()
            assert d.push()["bytes_sent"] == 0
            mirrors_match(hub_home, d)
        for source in adapters.ADAPTERS:
            want = event_ids(dev.store, source) | event_ids(other.store, source)
            assert event_ids(hub_home, source) == want, source
        with sqlite3.connect(hub_home / "origin.db") as h:
            assert h.execute("SELECT count(*) - count(DISTINCT id) FROM event").fetchone()[0] == 0
    finally:
        assert hub.stop() == 0


def _raw_exchange(url: str, payload: bytes) -> bytes:
    host, port = url.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            got = s.recv(65536)
            if not got:
                return out
            out += got


def test_an_early_401_drains_the_body_so_the_kept_alive_socket_stays_in_step(hub):
    body = b'{"device":"laptop","data":"' + b"A" * 5000 + b'"}'
    first = (b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ogn_wrong\r\n"
             b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    second = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    out = _raw_exchange(hub.url, first + second)
    assert out.count(b"HTTP/1.1 ") == 2, out[:500]
    assert b"HTTP/1.1 401" in out and b'"ok":true' in out
    assert b"Server: origin\r\n" in out and b"Python" not in out


def test_a_body_too_large_is_refused_and_the_connection_closed_unread(hub):
    req = (b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ogn_wrong\r\n"
           b"Content-Length: 999999999999\r\n\r\n")
    out = _raw_exchange(hub.url, req)
    assert b"HTTP/1.1 401" in out and b"Connection: close" in out
    code, out = hub.cli("token", "create", "big", "--json")
    token = json.loads(out)["token"].encode()
    req = (b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
           b"\r\nContent-Type: application/json\r\nContent-Length: 999999999999\r\n\r\n")
    out = _raw_exchange(hub.url, req)
    assert b"HTTP/1.1 413" in out and b"Connection: close" in out
    req = (b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
           b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert b"HTTP/1.1 411" in _raw_exchange(hub.url, req)
    assert b'"status":400' in _raw_exchange(hub.url, b"GARBAGE\r\n\r\n")


def _status(url: str, path: str, headers: dict) -> tuple[int, dict]:
    """GET path with headers on a connection of its own; return (status, headers)."""
    host, port = url.rsplit("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}


def test_behind_a_proxy_only_the_client_with_bad_tokens_is_limited(tmp_path):
    """ORIGIN_CLIENT_IP_HEADER set: bad tokens from A earn A a 429, and good tokens, A's own too, are served."""
    hub = HubProcess(tmp_path / "hub", env={"ORIGIN_CLIENT_IP_HEADER": "X-Forwarded-For"})
    code, out = hub.cli("token", "create", "laptop", "--json")
    assert code == 0, out
    good = json.loads(out)["token"]
    path = "/v1/cursors?device=laptop"

    def ask(token: str, client: str) -> tuple[int, dict]:
        # What a proxy sends: the client's own claim first, the address it saw last.
        return _status(hub.url, path, {"Authorization": f"Bearer {token}",
                                       "X-Forwarded-For": f"10.9.9.9, {client}"})

    for _ in range(origin.HUB_FAIL_MAX):
        assert ask("ogn_guessed", "203.0.113.7")[0] == 401
    status, headers = ask("ogn_guessed", "203.0.113.7")
    assert status == 429 and 1 <= int(headers["retry-after"]) <= 61
    assert ask(good, "198.51.100.4")[0] == 200  # another client behind the same proxy
    assert ask(good, "203.0.113.7")[0] == 200  # a token that verifies is never refused
    assert ask("ogn_guessed", "198.51.100.4")[0] == 401  # only the failing client is limited
    assert ask("ogn_guessed", "203.0.113.7")[0] == 429
    assert hub.stop() == 0


def test_a_content_length_or_number_of_other_digits_is_a_400_not_a_500(hub):
    """'²' (0xB2 in the Latin-1 a request line and headers are read as) passes str.isdigit, not int."""
    code, out = hub.cli("token", "create", "digits", "--json")
    token = json.loads(out)["token"].encode()
    for req in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n",
                b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
                b"\r\nContent-Type: application/json\r\nContent-Length: \xb2\r\n\r\n",
                b"GET /v1/tombstones?after=%C2%B2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
                b"\r\n\r\n",
                b"GET /v1/tombstones?limit=%C2%B2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
                b"\r\n\r\n"):
        out = _raw_exchange(hub.url, req)
        assert out.startswith(b"HTTP/1.1 400 "), (req, out[:300])
        assert b"ASCII digits" in out or b"a whole number" in out, out
    out = _raw_exchange(hub.url, b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ogn_wrong\r\n"
                                 b"Content-Length: \xb2\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 401 ") and b"Connection: close" in out
    assert "internal error" not in "".join(hub.log)


def test_two_host_headers_or_none_or_two_content_lengths_are_a_400(hub):
    for req, why in ((b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", b"one Host"),
                     (b"GET /healthz HTTP/1.1\r\n\r\n", b"Host header"),
                     (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 30\r\n\r\n"
                      b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"one Content-Length")):
        out = _raw_exchange(hub.url, req)
        assert out.startswith(b"HTTP/1.1 400 ") and why in out and b"Connection: close" in out, out[:300]
        assert b"HTTP/1.1 200" not in out  # nothing after it is read as a request
    # HTTP/1.0 needs no Host, and one Host is served.
    assert _raw_exchange(hub.url, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    assert _raw_exchange(hub.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                         ).startswith(b"HTTP/1.1 200 ")


def test_control_characters_of_a_request_reach_the_log_escaped(hub):
    """An escape sequence in a path or method would be run by the terminal showing the log."""
    _raw_exchange(hub.url, b"GET /\x1b[2J\x1b]0;owned\x07/\x9b31m HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    _raw_exchange(hub.url, b"G\x1b[31mET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    _raw_exchange(hub.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    deadline = time.monotonic() + 60
    while not any("/healthz 200" in line for line in hub.log) and time.monotonic() < deadline:
        time.sleep(0.05)  # the log is read by a thread; the last request's line ends the wait
    log = "".join(hub.log)
    assert not any(c in log for c in "\x1b\x07\x9b"), log
    assert "GET /\\x1b[2J\\x1b]0;owned\\x07/\\x9b31m 404 " in log, log
    assert "G\\x1b[31mET / 501 " in log, log


def test_a_client_that_stalls_mid_body_is_dropped_after_the_read_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(origin, "HUB_READ_TIMEOUT", 0.5)
    hub = origin.Hub(tmp_path / "h", index=False)
    token = origin.create_token(hub.default_store(), "slow")
    server = origin.make_hub_server(hub, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        with socket.create_connection(server.server_address, timeout=30) as s:
            s.sendall(b"POST /v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"dev")
            out = b""
            while True:
                got = s.recv(65536)
                if not got:
                    break
                out += got
        assert out == b"" or b"HTTP/1.1 4" in out
        assert hub.default_store().conn.execute("SELECT count(*) FROM raw_file").fetchone()[0] == 0
    finally:
        server.shutdown()
        server.server_close()
        hub.close()


def test_sigterm_stops_the_hub_cleanly_after_the_request_in_flight(tmp_path):
    hub = HubProcess(tmp_path / "hub")
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200" in s.recv(65536)
        # An idle kept-alive connection does not hold the shutdown up.
        assert hub.stop() == 0
    assert "hub stopped" in "".join(hub.log)


def _message(store: Path, source: str) -> tuple[str, str, str]:
    """Return (id, session, four words) of an indexed message of source."""
    with sqlite3.connect(store / "origin.db") as c:
        for eid, session, text in c.execute(
                "SELECT id, session, text FROM event WHERE source = ? AND kind = 'message' AND indexed = 1 "
                "AND length(text) > 40 ORDER BY seq", (source,)):
            words = [w for w in text.split() if len(w) >= 5 and w.isalpha()][:4]
            if len(words) >= 3:
                return eid, session, " ".join(words)
    raise AssertionError(f"no {source} message with words")


def test_invariant_2_a_forget_on_the_hub_reaches_every_device_and_a_re_push_stays_excluded(hub, devices, tmp_path):
    laptop, desktop = devices
    for d in devices:
        d.push()
    claude_id, claude_session, claude_words = _message(laptop.store, "claude-code")
    grok_id, grok_session, grok_words = _message(laptop.store, "grok")
    assert grok_id in event_ids(desktop.store), "both devices hold the Grok session"
    for d, eid, sess, words in ((laptop, claude_id, claude_session, claude_words),
                                (desktop, grok_id, grok_session, grok_words)):
        assert _found_anywhere(d, eid, sess, words) == ["search", "timeline", "show", "sources"]
    for eid in (claude_id, grok_id):
        code, out = hub.cli("forget", eid, "--yes", "--reason", "not for the archive", "--json")
        assert code == 0, out
    for d in devices:
        report = d.push()
        assert report["tombstones"]["fetched"] == 2
    assert _found_anywhere(laptop, claude_id, claude_session, claude_words) == []
    for d in devices:
        assert _found_anywhere(d, grok_id, grok_session, grok_words) == []
    # A second pull fetches nothing new: the last applied tombstone is recorded.
    assert laptop.push()["tombstones"]["fetched"] == 0
    # Pushed again: a rewritten file (a new generation) and a copy on a third device.
    with sqlite3.connect(laptop.store / "origin.db") as c:
        src = c.execute("SELECT r.path FROM event e JOIN raw_file r ON r.id = e.raw_file_id WHERE e.id = ?",
                        (claude_id,)).fetchone()[0]
    data = Path(src).read_bytes()
    Path(src).write_bytes(b'{"type":"summary","summary":"rewritten","leafUuid":"x"}\n' + data)
    age_tree(laptop.home, 7200)
    report = laptop.push()
    assert report["files_sent"] >= 1
    third = Device(tmp_path / "devices", "server", ("grok", "claude-code"))
    connect(hub, third)
    third.push()
    assert third.push()["tombstones"]["fetched"] == 0
    for eid, words in ((claude_id, claude_words), (grok_id, grok_words)):
        code, out = hub.cli("search", *words.split(), "--scope", "events", "--all", "--limit", "200", "--json")
        assert code == 0 and eid not in out
        code, out = hub.cli("show", eid, "--json")
        assert code != 0
    assert _found_anywhere(third, grok_id, grok_session, grok_words) == []
    with sqlite3.connect(hub.home / "origin.db") as h:
        gens = h.execute("SELECT count(*) FROM raw_file WHERE path = ?", (f"@laptop:{src}",)).fetchone()[0]
        assert gens == 2


def test_a_noop_push_asks_the_hub_for_no_cursors_until_something_here_changes(hub, devices):
    """Issue 29 item 4: once the hub has confirmed it holds every byte, a push with nothing new asks it
    only for its forgets; a new line here, or PUSH_RECHECK_MS passing, makes it compare cursors again."""
    laptop = devices[0]
    assert laptop.push()["bytes_sent"] > 0
    confirm = laptop.push()  # the digests agree: the hub's word is recorded
    assert confirm["checked_hub"] is True and confirm["files_sent"] == 0
    asked = sum("GET /v1/cursors" in line for line in hub.log)
    noop = laptop.push()
    assert noop["checked_hub"] is False and noop["files_sent"] == 0 and noop["files"] == confirm["files"]
    assert sum("GET /v1/cursors" in line for line in hub.log) == asked
    # The hub's forgets still come down on a no-op push.
    eid = _message(laptop.store, "claude-code")[0]
    code, out = hub.cli("forget", eid, "--yes", "--json")
    assert code == 0, out
    assert laptop.push()["tombstones"]["fetched"] == 1
    # A line written here is sent at the next push.
    log = next((laptop.home / ".claude" / "projects").rglob("*.jsonl"))
    last = json.loads(log.read_text().splitlines()[-1])
    last.update(uuid="99999999-0000-4000-8000-0000000000b1", message={"role": "user", "content": "one more"})
    with log.open("a") as fh:
        fh.write(json.dumps(last) + "\n")
    sent = laptop.push()
    assert sent["checked_hub"] is True and sent["files_sent"] == 1 and sent["bytes_sent"] > 0
    # Past PUSH_RECHECK_MS the hub is asked again even with nothing new.
    cfg = origin.load_hub_config(laptop.store, laptop.env())
    with origin.open_store(laptop.store) as s:
        assert origin.push(s, cfg)["checked_hub"] is True  # confirms the new state
        assert origin.push(s, cfg)["checked_hub"] is False
        key = origin._confirmed_key(cfg)
        stamp = json.loads(s.conn.execute("SELECT value FROM setting WHERE key = ?", (key,)).fetchone()[0])
        stamp["at"] -= origin.PUSH_RECHECK_MS + 1
        with origin.transaction(s.conn) as c:
            c.execute("UPDATE setting SET value = ? WHERE key = ?", (json.dumps(stamp), key))
        assert origin.push(s, cfg)["checked_hub"] is True


def test_invariant_2_a_noop_push_skips_its_sync_yet_sends_every_append_new_file_and_forget(tmp_path):
    """`origin push` with nothing new skips its sync (stat tells it); an appended
    line (its folder's mtime unmoved), a new file and a forget still reach the hub."""
    hub = HubProcess(tmp_path / "hub")
    dev = Device(tmp_path / "devices", "laptop", ("claude-code",))
    settled_at = time.monotonic() + origin.LOOKED_MARGIN_NS / 1e9 + 0.2
    try:
        connect(hub, dev)
        time.sleep(max(0.0, settled_at - time.monotonic()))  # folders older than the margin: trusted
        first = dev.push()
        assert not first["sync_skipped"] and first["files_sent"] > 0
        again = dev.push()
        assert again["sync_skipped"] and again["bytes_sent"] == 0
        demo = dev.home / ".claude" / "projects" / "-path-to-Demo"
        log = sorted(demo.glob("*.jsonl"))[0]
        folder_mtime = demo.stat().st_mtime_ns
        line = appended_claude_line(log, "a line appended between two pushes")
        with open(log, "ab") as fh:
            fh.write(line)
        assert demo.stat().st_mtime_ns == folder_mtime
        r = dev.push()
        assert not r["sync_skipped"] and r["synced_events"] == 1 and r["bytes_sent"] == len(line)
        assert dev.push()["sync_skipped"]
        # Invariant 2 (sticky forget): forgets travel whether or not the sync ran.
        with sqlite3.connect(dev.store / "origin.db") as c:
            eid = c.execute("SELECT id FROM event WHERE text LIKE '%appended between two pushes%'").fetchone()[0]
        p = dev.run("forget", eid, "--yes", "--json")  # made on the hub
        assert p.returncode == 0, p.stderr
        dev.push()
        shutil.copy(log, demo / "0f0f0f0f-new-session.jsonl")
        r = dev.push()
        assert not r["sync_skipped"] and r["files_sent"] == 1
        mirrors_match(hub.home, dev)
        for home in (hub.home, dev.store):
            with sqlite3.connect(home / "origin.db") as c:
                assert c.execute("SELECT count(*) FROM excluded_event e JOIN event v ON v.id = e.event_id "
                                 "WHERE v.text LIKE '%appended between two pushes%'").fetchone()[0] == 1
    finally:
        assert hub.stop() == 0
