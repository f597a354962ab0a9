"""The hub's replication API through ``Hub.dispatch`` (no socket), and the
device side's pure pieces: plan, chunking, config.

Hostile input is refused with its status and writes nothing; a fuzz of JSON
bodies never yields a 500.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import origin
from helpers import LINES, GrokOpenBlock, _rows


@pytest.fixture
def hub(tmp_path):
    h = origin.Hub(tmp_path / "hubhome", index=False)
    yield h
    h.close()


@pytest.fixture
def token(hub):
    return origin.create_token(hub.default_store(), "laptop")


def chunk(**over) -> dict:
    body = {"device": "laptop", "source": "claude-code", "path": "/home/dev/.claude/projects/-shop/s-hub-1.jsonl",
            "relPath": "projects/-shop/s-hub-1.jsonl", "generation": 0, "offset": 0, "mtimeMs": 1764669600000,
            "agentVersion": "2.1.3", "data": base64.b64encode(LINES).decode()}
    body.update(over)
    return {k: v for k, v in body.items() if v is not _DROP}


_DROP = object()


def post(hub, token, body, *, raw: bytes | None = None, headers: dict | None = None):
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    h.update(headers or {})
    data = raw if raw is not None else json.dumps(body).encode()
    h.setdefault("Content-Length", str(len(data)))
    return hub.dispatch("POST", "/v1/ingest", h, data)


def get(hub, token, target):
    return hub.dispatch("GET", target, {"Authorization": f"Bearer {token}"} if token else {})


def written(hub) -> tuple:
    """What a refusal must leave unchanged: rows, events and mirror files."""
    conn = hub.default_store().conn
    files = sorted(str(p) for p in (hub.home / "raw").rglob("*")) if (hub.home / "raw").exists() else []
    return (conn.execute("SELECT count(*) FROM raw_file").fetchone()[0],
            conn.execute("SELECT count(*) FROM event").fetchone()[0], files)


def test_healthz_needs_no_token_and_names_the_version(hub):
    r = hub.dispatch("GET", "/healthz", {})
    assert (r.status, r.body) == (200, {"ok": True, "version": origin.__version__})


def test_ingest_mirrors_under_the_device_folder_and_keys_the_file_by_device(hub, token):
    r = post(hub, token, chunk())
    assert r.status == 200, r.body
    assert r.body["bytes"] == len(LINES) and r.body["eventsAdded"] == 2 and r.body["parseErrors"] == 0
    row = hub.default_store().conn.execute("SELECT * FROM raw_file").fetchone()
    assert row["path"] == "@laptop:/home/dev/.claude/projects/-shop/s-hub-1.jsonl"
    assert row["mirror"] == "raw/devices/laptop/claude-code/projects/-shop/s-hub-1.jsonl"
    assert (hub.home / row["mirror"]).read_bytes() == LINES
    ids = {r[0] for r in hub.default_store().conn.execute("SELECT id FROM event")}
    assert ids == {"claude-code:u1", "claude-code:u2"}
    cur = get(hub, token, "/v1/cursors?device=laptop")
    assert cur.status == 200
    assert cur.body["files"] == [{"source": "claude-code", "path": "/home/dev/.claude/projects/-shop/s-hub-1.jsonl",
                                  "generation": 0, "bytes": len(LINES)}]


def test_a_generation_gets_its_own_suffixed_mirror(hub, token):
    assert post(hub, token, chunk()).status == 200
    assert post(hub, token, chunk(generation=1)).status == 200
    mirrors = [r[0] for r in hub.default_store().conn.execute("SELECT mirror FROM raw_file ORDER BY id")]
    assert mirrors[1] == "raw/devices/laptop/claude-code/projects/-shop/s-hub-1.jsonl.g1"
    # Same lines, same ids: the second generation adds no event.
    assert hub.default_store().conn.execute("SELECT count(*) FROM event").fetchone()[0] == 2


def test_wrong_offset_is_refused_with_the_cursor_and_writes_nothing(hub, token):
    assert post(hub, token, chunk()).status == 200
    before = written(hub)
    size = (hub.home / "raw/devices/laptop/claude-code/projects/-shop/s-hub-1.jsonl").stat().st_size
    for off in (0, 5, len(LINES) + 1):
        r = post(hub, token, chunk(offset=off))
        assert r.status == 409 and r.body["bytes"] == len(LINES) and r.body["ok"] is False
    r = post(hub, token, chunk(path="/other.jsonl", offset=10))
    assert r.status == 409 and r.body["bytes"] == 0
    assert written(hub) == before
    assert (hub.home / "raw/devices/laptop/claude-code/projects/-shop/s-hub-1.jsonl").stat().st_size == size


BAD_FIELDS = [
    ({"device": "Laptop"}, 400), ({"device": "../x"}, 400), ({"device": ""}, 400), ({"device": "a" * 64}, 400),
    ({"device": 7}, 400), ({"source": "vim"}, 400), ({"source": None}, 400),
    ({"path": ""}, 400), ({"path": "@laptop:/x"}, 400), ({"path": "a\x00b"}, 400), ({"path": 3}, 400),
    ({"relPath": "../../etc/passwd"}, 400), ({"relPath": "/etc/passwd"}, 400), ({"relPath": "a/../../b"}, 400),
    ({"relPath": "a\\..\\..\\b"}, 400), ({"relPath": "C:/x"}, 400), ({"relPath": "a//b"}, 400),
    ({"relPath": "a/./b"}, 400), ({"relPath": "a\x00b"}, 400), ({"relPath": ""}, 400), ({"relPath": "x/"}, 400),
    ({"relPath": "a" * 2000}, 400),
    ({"generation": -1}, 400), ({"generation": 1.5}, 400), ({"generation": True}, 400), ({"generation": "0"}, 400),
    ({"generation": 10**12}, 400), ({"offset": -1}, 400), ({"offset": 2**60}, 400), ({"offset": None}, 400),
    ({"mtimeMs": "now"}, 400), ({"mtimeMs": 1.5}, 400), ({"agentVersion": "x" * 500}, 400),
    ({"agentVersion": 3}, 400), ({"data": "not base64!!"}, 400), ({"data": 12}, 400),
    ({"data": base64.b64encode(b"no newline at the end").decode()}, 400), ({"data": ""}, 400),
    ({"kind": "pipe"}, 400), ({"flush": "yes"}, 400), ({"meta": [1]}, 400), ({"meta": {"k": {"nested": 1}}}, 400),
    ({"surprise": 1}, 400), ({"device": _DROP}, 400), ({"data": _DROP}, 400), ({"offset": _DROP}, 400),
]


@pytest.mark.parametrize("over,status", BAD_FIELDS, ids=[repr(o)[:40] for o, _ in BAD_FIELDS])
def test_every_wrong_field_is_refused_with_its_status_and_writes_nothing(hub, token, over, status):
    before = written(hub)
    r = post(hub, token, chunk(**over))
    assert r.status == status, r.body
    assert r.body["ok"] is False and r.body["status"] == status and r.body["error"]
    assert written(hub) == before


def test_percent_encoded_traversal_stays_a_literal_name_inside_the_device_folder(hub, token):
    r = post(hub, token, chunk(relPath="%2e%2e/%2e%2e/escape.jsonl"))
    assert r.status == 200
    m = hub.default_store().conn.execute("SELECT mirror FROM raw_file").fetchone()[0]
    assert (hub.home / m).resolve().is_relative_to((hub.home / "raw" / "devices" / "laptop").resolve())
    r = get(hub, token, "/v1/cursors?device=..%2F..%2Flaptop")
    assert r.status == 400


def test_a_symlinked_folder_on_the_hub_is_never_written_through(hub, token, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = hub.home / "raw" / "devices" / "laptop" / "claude-code"
    root.mkdir(parents=True)
    (root / "projects").symlink_to(outside)
    before = written(hub)
    r = post(hub, token, chunk())
    assert r.status == 400 and "leave the mirror folder" in r.body["error"]
    assert list(outside.iterdir()) == []
    assert written(hub)[:2] == before[:2]
    # A mirror file swapped for a symlink is never written through either.
    (root / "projects").unlink()
    assert post(hub, token, chunk()).status == 200
    mirror = hub.home / hub.default_store().conn.execute("SELECT mirror FROM raw_file").fetchone()[0]
    target = outside / "victim"
    target.write_bytes(LINES)
    mirror.unlink()
    mirror.symlink_to(target)
    r = post(hub, token, chunk(offset=len(LINES)))
    assert r.status == 400
    assert target.read_bytes() == LINES


def test_oversized_and_bomb_bodies_are_refused_before_they_are_inflated(hub, token):
    before = written(hub)
    big = b"x" * (origin.BODY_MAX + 1)
    r = post(hub, token, None, raw=big)
    assert r.status == 413
    # 1 GiB of zeros gzip to ~1 MB: refused once the inflated size passes the cap.
    bomb = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    r = post(hub, token, None, raw=bomb, headers={"Content-Encoding": "gzip"})
    assert r.status == 413 and "inflates" in r.body["error"]
    r = post(hub, token, None, raw=b"\x1f\x8bnot gzip", headers={"Content-Encoding": "gzip"})
    assert r.status == 400
    r = post(hub, token, None, raw=b"{}", headers={"Content-Encoding": "br"})
    assert r.status == 415
    r = post(hub, token, chunk(), headers={"Content-Type": "text/plain"})
    assert r.status == 415
    r = post(hub, token, None, raw=b"{not json")
    assert r.status == 400
    r = post(hub, token, None, raw=b"[" * 100000)
    assert r.status == 400
    many = b"".join(b'{"n":%d}\n' % i for i in range(200_000))
    r = post(hub, token, chunk(data=base64.b64encode(many).decode()))
    assert r.status == 413
    assert written(hub) == before


def test_a_gzip_body_is_accepted(hub, token):
    r = post(hub, token, None, raw=gzip.compress(json.dumps(chunk()).encode()), headers={"Content-Encoding": "gzip"})
    assert r.status == 200 and r.body["eventsAdded"] == 2


def test_one_line_longer_than_a_chunk_is_taken_alone(hub, token):
    text = "x" * (origin.CHUNK_MAX + 10)
    line = json.dumps({"type": "user", "sessionId": "s-long", "uuid": "long1", "timestamp": "2026-11-02T10:00:00Z",
                       "message": {"role": "user", "content": text}}).encode() + b"\n"
    r = post(hub, token, chunk(data=base64.b64encode(line).decode()))
    assert r.status == 200 and r.body["eventsAdded"] == 1


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer ogn_wrong", "Basic dXNlcjpwYXNz", "bearer x"])
def test_missing_or_wrong_token_is_refused_with_401_and_writes_nothing(hub, token, auth):
    before = written(hub)
    h = {"Content-Type": "application/json"}
    if auth is not None:
        h["Authorization"] = auth
    data = json.dumps(chunk()).encode()
    r = hub.dispatch("POST", "/v1/ingest", {**h, "Content-Length": str(len(data))}, data)
    assert r.status == 401 and ("WWW-Authenticate", 'Bearer realm="origin"') in r.headers
    for target in ("/v1/cursors?device=laptop", "/v1/tombstones?after=0"):
        assert hub.dispatch("GET", target, h).status == 401
    assert written(hub) == before


def test_a_revoked_token_is_refused_at_its_next_request(hub, token):
    assert post(hub, token, chunk()).status == 200
    origin.revoke_token(hub.default_store(), "laptop")
    assert get(hub, token, "/v1/cursors?device=laptop").status == 401
    with pytest.raises(origin.NotFound):
        origin.revoke_token(hub.default_store(), "nobody")


def test_only_the_tokens_hash_is_stored_and_listing_never_shows_it(hub, token):
    assert token.startswith("ogn_") and len(token) >= 4 + 32
    conn = hub.default_store().conn
    row = conn.execute("SELECT * FROM api_token").fetchone()
    assert token not in json.dumps([list(r) for r in conn.execute("SELECT * FROM api_token")])
    assert row["hash"] == origin.hashlib.sha256(token.encode()).hexdigest()
    listed = origin.list_tokens(hub.default_store())
    assert listed[0]["name"] == "laptop" and token not in json.dumps(listed)
    with pytest.raises(origin.Conflict):
        origin.create_token(hub.default_store(), "laptop")
    with pytest.raises(origin.UsageError):
        origin.create_token(hub.default_store(), "Bad Name")


def test_a_token_is_bound_to_the_first_device_name_it_pushed_with(hub, token):
    assert post(hub, token, chunk()).status == 200
    before = written(hub)
    r = post(hub, token, chunk(device="desktop"))
    assert r.status == 403 and "belongs to device 'laptop'" in r.body["error"]
    assert get(hub, token, "/v1/cursors?device=desktop").status == 403
    assert written(hub) == before
    other = origin.create_token(hub.default_store(), "desktop")
    assert post(hub, other, chunk(device="desktop")).status == 200
    assert get(hub, other, "/v1/cursors?device=laptop").status == 403


def test_repeated_failed_authentication_is_rate_limited(hub, token):
    def ask(tok, client, **headers):
        return hub.dispatch("GET", "/v1/cursors?device=laptop", {"Authorization": f"Bearer {tok}", **headers},
                            client=client)

    for _ in range(origin.HUB_FAIL_MAX):
        assert ask("nope", "10.0.0.9").status == 401
    r = ask("nope", "10.0.0.9")
    assert r.status == 429 and any(k == "Retry-After" for k, _ in r.headers)
    assert ask(token, "10.0.0.9").status == 200  # the token is checked first: a good one is served
    assert ask("nope", "10.0.0.8").status == 401
    # Unset, the header is not read: a client cannot dodge its limit by naming another address.
    assert ask("nope", "10.0.0.9", **{"X-Forwarded-For": "203.0.113.1"}).status == 429


def test_with_a_client_ip_header_failures_count_per_forwarded_client(tmp_path):
    hub = origin.Hub(tmp_path / "hubhome", index=False, client_ip_header="X-Forwarded-For")
    token = origin.create_token(hub.default_store(), "laptop")

    def ask(tok, forwarded):
        return hub.dispatch("GET", "/v1/cursors?device=laptop",
                            {"Authorization": f"Bearer {tok}", "X-Forwarded-For": forwarded}, client="127.0.0.1")

    for _ in range(origin.HUB_FAIL_MAX):
        assert ask("nope", "203.0.113.1").status == 401
    assert ask("nope", "1.2.3.4, 203.0.113.1").status == 429  # the last value is the proxy's word
    assert ask("nope", "203.0.113.1, 203.0.113.2").status == 401
    assert ask(token, "203.0.113.1").status == 200
    hub.close()


def test_unknown_routes_methods_and_query_parameters_are_refused(hub, token):
    assert get(hub, token, "/v1/nothing").status == 404
    assert get(hub, token, "/v1/../v1/ingest").status == 404
    r = get(hub, token, "/v1/ingest")
    assert r.status == 405 and ("Allow", "POST") in r.headers
    assert get(hub, token, "/v1/cursors").status == 400
    assert get(hub, token, "/v1/cursors?device=laptop&device=x").status == 400
    assert get(hub, token, "/v1/cursors?device=laptop&extra=1").status == 400
    assert get(hub, token, "/v1/tombstones?after=-1").status == 400
    assert get(hub, token, "/v1/tombstones?after=abc").status == 400
    r = hub.dispatch("POST", "/v1/ingest", {"Authorization": f"Bearer {token}", "Transfer-Encoding": "chunked"}, b"")
    assert r.status == 411


def test_the_routes_table_mounts_a_prefix_handler(hub, token):
    hub.mount("/mcp", lambda h, req: origin.Response(200, {"ok": True, "path": req.path}))
    assert get(hub, token, "/mcp").body == {"ok": True, "path": "/mcp"}
    assert get(hub, None, "/mcp").status == 401
    assert get(hub, token, "/mcpx").status == 404


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
_fields = st.fixed_dictionaries({}, optional={k: _json for k in sorted(origin._CHUNK_FIELDS)})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(_json, _fields, _fields.map(lambda d: {**chunk(), **d})))
def test_a_fuzz_of_json_bodies_never_yields_a_500(hub, token, body):
    r = post(hub, token, body)
    assert r.status in (200, 400, 403, 409, 413, 415), r.body
    if r.status != 200:
        assert r.body["ok"] is False and isinstance(r.body["error"], str)


# -- device side: pure pieces ----------------------------------------------------------


def lf(fid, size, source="claude-code", path="/p/a.jsonl", gen=0):
    return origin.LocalFile(fid, source, path, "a.jsonl", gen, "log", f"raw/{source}/a.jsonl", size)


def test_plan_sends_what_the_hub_lacks_and_nothing_it_holds():
    files = [lf(1, 100), lf(2, 50, path="/p/b.jsonl"), lf(3, 70, path="/p/c.jsonl"), lf(4, 10, gen=1)]
    cursors = [{"source": "claude-code", "path": "/p/a.jsonl", "generation": 0, "bytes": 40, "flushed": None},
               {"source": "claude-code", "path": "/p/b.jsonl", "generation": 0, "bytes": 50, "flushed": None},
               {"source": "claude-code", "path": "/p/c.jsonl", "generation": 0, "bytes": 90, "flushed": None}]
    plan = origin.plan_push(files, cursors, {})
    assert [(i.file.id, i.start, i.end) for i in plan] == [(1, 40, 100), (4, 0, 10)]


def test_plan_sends_a_flush_the_hub_has_not_made_even_with_no_new_bytes():
    files = [lf(1, 100), lf(2, 100, path="/p/b.jsonl")]
    cursors = [{"source": "claude-code", "path": "/p/a.jsonl", "generation": 0, "bytes": 100, "flushed": None},
               {"source": "claude-code", "path": "/p/b.jsonl", "generation": 0, "bytes": 100, "flushed": 100}]
    plan = origin.plan_push(files, cursors, {1: [60, 100], 2: [100]})
    assert [(i.file.id, i.start, i.end, i.flushes) for i in plan] == [(1, 100, 100, (100,))]


def test_chunks_are_whole_lines_capped_and_cut_at_flush_points(tmp_path, monkeypatch):
    monkeypatch.setattr(origin, "CHUNK_MAX", 64)
    lines = [b"a" * 20 + b"\n", b"b" * 30 + b"\n", b"c" * 150 + b"\n", b"d" * 10 + b"\n", b"e\n"]
    data = b"".join(lines)
    p = tmp_path / "m"
    p.write_bytes(data)
    flush_at = len(lines[0]) + len(lines[1]) + len(lines[2]) + len(lines[3])
    out = list(origin._chunks(p, 0, len(data), (flush_at, len(data))))
    assert b"".join(d for _, d, _ in out) == data
    assert [(o, len(d), f) for o, d, f in out] == [
        (0, 52, False), (52, 151, False), (203, 11, True), (214, 2, True)]
    assert all(d.endswith(b"\n") for _, d, _ in out)
    assert list(origin._chunks(p, len(data), len(data), (len(data),))) == [(len(data), b"", True)]


def test_device_name_defaults_to_a_normalised_host_name():
    assert origin.normalise_device("Dev-Laptop.local") == "dev-laptop.local"
    assert origin.normalise_device("My Mac (2)") == "my-mac-2"
    assert origin.normalise_device("---") == "device"
    assert origin.DEVICE_NAME.match(origin.normalise_device("X" * 200))


def test_hub_json_is_owner_only_and_the_environment_overrides_it(tmp_path):
    cfg = origin.HubConfig("http://127.0.0.1:7077", "ogn_abc", "laptop")
    path = origin.save_hub_config(tmp_path, cfg)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert origin.load_hub_config(tmp_path, {}) == cfg
    env = {"ORIGIN_HUB_URL": "https://hub.example:8443/", "ORIGIN_HUB_TOKEN": "ogn_env", "ORIGIN_DEVICE": "desk"}
    assert origin.load_hub_config(tmp_path, env) == origin.HubConfig("https://hub.example:8443", "ogn_env", "desk")
    with pytest.raises(origin.UsageError):
        origin.load_hub_config(tmp_path, {"ORIGIN_DEVICE": "Bad Name"})
    os.unlink(path)
    assert origin.load_hub_config(tmp_path, {}) is None
    with pytest.raises(origin.UsageError):
        origin.load_hub_config(tmp_path, {"ORIGIN_HUB_URL": "http://x:1"})
    with pytest.raises(origin.UsageError):
        origin.check_hub_url("ftp://hub")


def test_opening_another_store_in_the_same_process_never_reopens_the_database_file(tmp_path, monkeypatch):
    # Closing any descriptor of a database drops every POSIX lock the
    # process holds on it: the hub's request threads each open a store, and
    # a re-open of the file there ended in "disk I/O error" on another thread.
    first = origin.open_store(tmp_path / "h")
    opened = []
    real = os.open
    monkeypatch.setattr(origin.os, "open", lambda p, *a, **k: (opened.append(str(p)), real(p, *a, **k))[1])
    second = origin.open_store(tmp_path / "h")
    assert str(tmp_path / "h" / origin.DB_NAME) not in opened
    origin.create_token(second, "a")
    assert origin.list_tokens(first)[0]["name"] == "a"
    first.close()
    second.close()


def test_an_open_block_is_closed_on_the_hub_exactly_where_the_device_closed_it(served, user_home):
    hub, cfg, dev = served
    grok = GrokOpenBlock(user_home)
    f, update, settle = grok.path, grok.update, grok.settle

    f.write_text(update("user_message_chunk", "how are open blocks replicated?", 1767225600) + "\n"
                 + update("agent_message_chunk", "The hub closes them ", 1767225601) + "\n")
    origin.sync(dev)
    origin.push(dev, cfg)  # pushed while the block is still open
    settle()
    origin.sync(dev)  # the device closes it now, with no new byte
    assert origin.push(dev, cfg)["chunks"] == 1
    with f.open("a") as fh:
        fh.write(update("agent_message_chunk", "where the device did.", 1767225602) + "\n")
        fh.write(update("user_message_chunk", "and then?", 1767225603) + "\n")
        fh.write(update("agent_message_chunk", "Nothing else.", 1767225604) + "\n")
    settle()
    origin.sync(dev)
    origin.push(dev, cfg)
    hs = hub.default_store()
    assert _rows(hs) == _rows(dev) and len(_rows(dev)) >= 4
    assert any("The hub closes them" in r[1] for r in _rows(dev))
    assert origin.push(dev, cfg)["chunks"] == 0


def test_watch_syncs_and_pushes_when_a_log_changes_and_only_then(served, user_home):
    import queue
    import threading

    hub, cfg, dev = served
    origin.save_hub_config(dev.home, cfg)
    project = user_home / ".claude" / "projects" / "-srv-w"
    project.mkdir(parents=True)
    (project / "s-w1.jsonl").write_bytes(LINES)
    rounds: queue.Queue = queue.Queue()
    stop = threading.Event()
    t = threading.Thread(target=origin.watch, args=(dev.home,), daemon=True,
                         kwargs={"poll": 0.05, "full": 3600, "on_round": rounds.put, "stop": stop})
    t.start()
    try:
        first = rounds.get(timeout=120)
        assert first["synced"]["events_added"] == 2 and first["pushed"]["bytes_sent"] == len(LINES)
        with pytest.raises(queue.Empty):
            rounds.get(timeout=1.0)  # nothing changed: no round at all
        line = LINES.split(b"\n")[0].replace(b'"u1"', b'"u3"').replace(b"banker", b"watched") + b"\n"
        with (project / "s-w1.jsonl").open("ab") as fh:
            fh.write(line)
        nxt = rounds.get(timeout=120)
        assert nxt["reason"] == "change" and nxt["synced"]["events_added"] == 1
        assert nxt["pushed"]["bytes_sent"] == len(line)
    finally:
        stop.set()
        t.join(60)
    ids = {r[0] for r in hub.default_store().conn.execute("SELECT id FROM event")}
    assert ids == {"claude-code:u1", "claude-code:u2", "claude-code:u3"}


def test_a_purge_on_the_hub_is_offered_on_the_device_and_never_run_there(served, user_home):
    hub, cfg, dev = served
    project = user_home / ".claude" / "projects" / "-srv-p"
    project.mkdir(parents=True)
    (project / "s-p1.jsonl").write_bytes(LINES)
    origin.sync(dev)
    origin.push(dev, cfg)
    hs = hub.default_store()
    origin.forget(hs, "claude-code:u1", reason="purge test")
    origin.purge(hs)
    mirror = dev.home / dev.conn.execute("SELECT mirror FROM raw_file").fetchone()[0]
    before = mirror.read_bytes()
    t = origin.push(dev, cfg)["tombstones"]
    assert t["fetched"] == 1 and t["purge_offered"] == {"events": 1, "entries": 0}
    assert mirror.read_bytes() == before  # offered, not run
    assert origin.search_events(dev, "banker rounding") == []
    assert origin.push(dev, cfg)["tombstones"]["purge_offered"] is None  # offered once per hub purge


def test_no_top_level_name_of_origin_py_is_defined_twice():
    # A second definition silently replaces the first for every section
    # above it too (a helper or a limit of the same name in another section).
    import ast

    tree = ast.parse((Path(origin.__file__)).read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    twice = []
    for node in tree.body:
        names = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        for n in names:
            if n in seen:
                twice.append(f"{n} (lines {seen[n]} and {node.lineno})")
            seen[n] = node.lineno
    assert twice == []


def test_a_no_op_push_asks_with_its_digest_and_gets_no_cursor_list(served, all_agents):
    hub, cfg, dev = served
    origin.sync(dev)
    first = origin.push(dev, cfg)
    assert first["chunks"] > 0
    hs = hub.default_store()
    digest = origin.local_cursor_digest(dev)
    assert digest == origin.hub_cursor_digest(hs, "laptop")
    assert int(digest.split(":")[0]) == first["files"] == len(origin.local_files(dev))
    r = get(hub, cfg.token, f"/v1/cursors?device=laptop&digest={digest}")
    assert r.status == 200 and r.body["same"] is True and "files" not in r.body
    r = get(hub, cfg.token, "/v1/cursors?device=laptop&digest=1:00")
    assert r.status == 200 and "same" not in r.body and len(r.body["files"]) == first["files"]

    client = origin.HubClient(cfg)
    seen = []
    real = client.request
    client.request = lambda method, path, *a, **k: (seen.append(path), real(method, path, *a, **k))[1]
    try:
        again = origin.push(dev, cfg, client=client)
        assert again["chunks"] == 0 and again["files"] == first["files"] and again["files_sent"] == 0
        # Forgets up, forgets down, then the cursors (which need no list).
        assert [p.split("?")[0] for p in seen] == ["/v1/tombstones", "/v1/tombstones", "/v1/cursors"]
        # One new line: the digests differ, and the push sends exactly it.
        log = next(all_agents.glob(".claude/projects/*/*.jsonl"))
        with log.open("a") as fh:
            fh.write(log.read_text().splitlines()[-1] + "\n")
        origin.sync(dev)
        assert origin.local_cursor_digest(dev) != origin.hub_cursor_digest(hs, "laptop")
        seen.clear()
        third = origin.push(dev, cfg, client=client)
        assert third["files_sent"] == 1 and third["chunks"] == 1
        assert origin.local_cursor_digest(dev) == origin.hub_cursor_digest(hs, "laptop")
    finally:
        client.close()
    assert _rows(hs, "SELECT id FROM event ORDER BY id") == _rows(dev, "SELECT id FROM event ORDER BY id")


def test_hub_status_of_a_device_in_step_asks_with_its_digest_and_plans_nothing(served, all_agents, monkeypatch):
    hub, cfg, dev = served
    origin.sync(dev)
    origin.push(dev, cfg)
    answers = []
    real = origin.HubClient.get
    monkeypatch.setattr(origin.HubClient, "get",
                        lambda self, path, **q: answers.append((path, q, r := real(self, path, **q))) or r)
    st = origin.hub_status(dev, cfg)
    assert st["token_ok"] and st["files_behind"] == 0 and st["bytes_behind"] == 0
    [(path, query, body)] = answers
    assert path == "/v1/cursors" and query["digest"] == origin.local_cursor_digest(dev)
    assert body["same"] is True and "files" not in body  # no cursor list crossed the wire
    log = next(all_agents.glob(".claude/projects/*/*.jsonl"))  # one new line: behind by exactly it
    with log.open("a") as fh:
        fh.write(log.read_text().splitlines()[-1] + "\n")
    origin.sync(dev)
    answers.clear()
    st = origin.hub_status(dev, cfg)
    assert st["files_behind"] == 1 and st["bytes_behind"] > 0 and "files" in answers[0][2]


def test_a_device_pushes_to_a_hub_from_before_the_cursor_digest(served, user_home):
    hub, cfg, dev = served

    def old_cursors(h, req):  # what a hub of the previous version answered
        if set(req.query) != {"device"}:
            raise origin.UsageError(f"unknown query parameter {sorted(set(req.query) - {'device'})[0]!r}")
        return origin.Response(200, {"device": "laptop", "files": origin.hub_cursors(req.store, "laptop")})

    hub.routes[("GET", "/v1/cursors")] = origin.Route(old_cursors)
    folder = user_home / ".claude" / "projects" / "-shop"
    folder.mkdir(parents=True)
    (folder / "s-hub-1.jsonl").write_bytes(LINES)
    origin.sync(dev)
    assert origin.push(dev, cfg)["chunks"] == 1
    assert origin.push(dev, cfg)["chunks"] == 0
    assert _rows(hub.default_store()) == _rows(dev)


def test_a_device_pushes_to_a_hub_from_before_the_chunk_proofs(served, user_home):
    hub, cfg, dev = served
    real = origin.api_post_ingest

    def old_ingest(h, req):  # what a hub of the previous version answered
        extra = sorted(set(req.json()) & {"before", "sha256"})
        if extra:
            raise origin.UsageError(f"unknown field {extra[0]!r}; fields are …")
        return real(h, req)

    hub.routes[("POST", "/v1/ingest")] = origin.Route(old_ingest, body_max=origin.BODY_MAX)
    folder = user_home / ".claude" / "projects" / "-shop"
    folder.mkdir(parents=True)
    (folder / "s-hub-1.jsonl").write_bytes(LINES)
    origin.sync(dev)
    report = origin.push(dev, cfg)
    assert report["chunks"] == 1 and report["refused"] == []
    assert _rows(hub.default_store()) == _rows(dev)


def _until(predicate, what: str, timeout: float = 60) -> None:
    deadline = origin.time.monotonic() + timeout
    while not predicate():
        assert origin.time.monotonic() < deadline, f"gave up waiting for {what}"
        origin.time.sleep(0.01)


def test_slots_admit_waiting_threads_in_the_order_they_came():
    import threading

    slots, order = origin.Slots(1), []
    slots.__enter__()  # the slot is taken
    threads = []
    for name in "abcd":
        def enter(name=name):
            with slots:
                order.append(name)
        t = threading.Thread(target=enter)
        t.start()
        threads.append(t)
        _until(lambda: len(slots._queue) == len(threads), f"{name} to queue")
    slots.__exit__(None, None, None)
    for t in threads:
        t.join(30)
    assert order == list("abcd")
    assert (slots._free, slots._queue) == (1, [])


def test_the_hub_runs_no_more_tool_calls_at_once_than_its_slots(served, monkeypatch):
    import threading

    hub, cfg, _dev = served
    hub.tool_slots = origin.Slots(2)
    lock, inside, peak, go = threading.Lock(), [0], [0], threading.Event()
    tool = origin.MCP_TOOLS["timeline"]
    real = tool.run

    def slow(store, args, author):
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        go.wait(60)
        with lock:
            inside[0] -= 1
        return real(store, args, author)

    monkeypatch.setattr(tool, "run", slow)
    answers = []

    def call():
        tools = origin.HubTools(cfg)
        try:
            answers.append(tools.call("timeline", {}))
        finally:
            tools.close()

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    try:
        _until(lambda: inside[0] == 2 and len(hub.tool_slots._queue) == 3, "two calls inside and three waiting")
    finally:
        go.set()
        for t in threads:
            t.join(60)
    assert peak[0] == 2
    assert len(answers) == 5 and not any(is_error for _text, is_error in answers)
