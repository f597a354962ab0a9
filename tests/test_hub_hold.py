"""A hub on the open internet: who may do what, and pushes that prove their bytes.

Every test talks HTTP to a real `origin serve` on loopback (and runs real
`origin push` processes where a device is involved): a device name belongs
to one token, an agent token reaches /mcp only, the fingerprint keys go
only to a bound device token, and a push whose bytes differ from the hub's
is refused with a reason rather than losing events.
"""

from __future__ import annotations

import base64
import http.client
import json
import sqlite3

import pytest

import origin
from test_hub import LINES
from test_hub_processes import HubProcess, _no_hub_left_running  # noqa: F401 (a fixture)


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
