"""Tombstones a device pulls from its hub, applied as one batch.

``apply_tombstones`` reads what the store already knows once per batch and
writes the rows together; the batch must leave exactly the state that
applying the same records one at a time leaves, whatever the batch holds:
duplicates, records applied before, ids this store never saw, records whose
exclusions overlap, and cascades where one record's exclusion leaves an
entry that a later record finishes off.
"""

from __future__ import annotations

import json
import shutil

import origin

TABLES = {
    "tombstone": "SELECT id, uid, kind, target, reason, created_at, entries, events, device FROM tombstone ORDER BY id",
    "excluded_event": "SELECT event_id, tombstone_id FROM excluded_event ORDER BY event_id",
    "forgotten_entry": "SELECT entry_id, tombstone_id FROM forgotten_entry ORDER BY entry_id",
    "tombstone_fingerprint": "SELECT key_id, fp, tombstone_id FROM tombstone_fingerprint ORDER BY key_id, fp",
    "session": "SELECT * FROM session ORDER BY source, id",
}


def visible_state(store) -> dict:
    """Every table a forget writes, what each read route shows, and the entry index."""
    conn = store.conn
    out = {name: [tuple(r) for r in conn.execute(sql)] for name, sql in TABLES.items()}
    out["visible_events"] = [r[0] for r in conn.execute(
        "SELECT id FROM event e WHERE NOT EXISTS (SELECT 1 FROM excluded_event x WHERE x.event_id = e.id) "
        "ORDER BY id")]
    out["entries"] = sorted(e["id"] for e in origin.list_entries(store, history=True, limit=200))
    out["entry_index"] = sorted(r[0] for r in conn.execute(
        "SELECT e.id FROM entry_fts JOIN entry e ON e.seq = entry_fts.rowid WHERE entry_fts MATCH 'cites'"))
    out["timeline"] = [(s["source"], s["session"], s["title"], s["events"])
                       for s in origin.timeline(store, since=0, limit=200)["sessions"]]
    out["search"] = sorted(e["id"] for e in origin.search_events(store, "the", include_tools=True, limit=200))
    out["log_uids"] = sorted(json.loads(line)["uid"] for line in
                             (store.home / origin.TOMBSTONE_LOG).read_text().splitlines()
                             if line.strip() and json.loads(line).get("type") == "tombstone")
    return out


def _rec(n: int, kind: str, target: str, *, events=(), entries=(), fingerprints=()) -> dict:
    return {"uid": f"tmb_{n:016x}", "target": target, "kind": kind, "reason": None, "created_at": 1764669600000 + n,
            "device": "hub", "entries": list(entries), "events": list(events), "fingerprints": list(fingerprints)}


def test_a_batch_applies_exactly_what_the_records_applied_one_by_one_do(all_agents, tmp_path):
    home = tmp_path / "device"
    with origin.open_store(home) as s:
        origin.sync(s)
        conn = s.conn
        msgs = [tuple(r) for r in conn.execute(
            "SELECT id, source, session, text FROM event WHERE kind = 'message' AND length(text) > 60 "
            "ORDER BY source, session, seq")]
        by_session: dict = {}
        for m in msgs:
            by_session.setdefault((m[1], m[2]), []).append(m)
        sessions = [k for k, v in by_session.items() if len(v) >= 2]
        assert len(sessions) >= 4, sessions
        (a_src, a_sid), (b_src, b_sid), (c_src, c_sid), (d_src, d_sid) = sessions[:4]
        a, b, c, d = (by_session[k] for k in sessions[:4])

        def cite(text, *evids):
            return origin.remember(s, kind="memory", text=text, author="test",
                                   sources=[{"event": e} for e in evids])["id"]

        ent_a = cite("This note cites the first event of session a.", a[0][0])
        ent_two = cite("This note cites two events of session b and nothing else.", b[0][0], b[1][0])
        ent_c = cite("This note cites an event of session c.", c[0][0])
        ent_d = cite("This note cites an event of session d.", d[0][0])
        ring = origin.fingerprint_keys(s)
        fps_a1 = origin.text_fingerprints(ring, a[1][3])
        session_d = [r[0] for r in conn.execute("SELECT id FROM event WHERE source = ? AND session = ?",
                                                (d_src, d_sid))]
    earlier = _rec(1, "event", c[1][0], events=[c[1][0]])
    with origin.open_store(home) as s:
        assert origin.apply_tombstones(s, [earlier]) == 1
    twin = tmp_path / "twin"
    shutil.copytree(home, twin)

    batch = [
        earlier,  # applied before
        _rec(2, "event", a[0][0], events=[a[0][0]]),  # cited: ent_a goes with it (direct cascade)
        _rec(3, "event", a[1][0], events=[a[1][0]], fingerprints=fps_a1),
        _rec(2, "event", a[0][0], events=[a[0][0]]),  # a duplicate inside the batch
        # Two records each exclude one of ent_two's sources: the second leaves
        # it with none, so the second forgets it.
        _rec(4, "entry", "ent_elsewhere1", entries=["ent_elsewhere1"], events=[b[0][0]]),
        _rec(5, "entry", "ent_elsewhere2", entries=["ent_elsewhere2"], events=[b[1][0]]),
        _rec(6, "event", "claude-code:never-arrived", events=["claude-code:never-arrived", "codex:nor-this"],
             entries=["ent_unknown"], fingerprints=[["nokey", "00112233445566778899aabbccddeeff"]]),
        _rec(7, "entry", ent_c, entries=[ent_c], events=[c[0][0]]),
        _rec(8, "session", f"{d_src}:{d_sid}", events=session_d),
        _rec(9, "event", a[0][0], events=[a[0][0], session_d[0]]),  # only ids excluded already
        _rec(8, "session", f"{d_src}:{d_sid}", events=session_d),
    ]
    with origin.open_store(home) as s:
        applied = origin.apply_tombstones(s, batch)
        batch_state = visible_state(s)
    one_by_one = 0
    with origin.open_store(twin) as t:
        for r in batch:
            one_by_one += origin.apply_tombstones(t, [r])
        single_state = visible_state(t)
    assert applied == one_by_one == 8
    for name in batch_state:
        assert batch_state[name] == single_state[name], name
    # And what was applied is what the records say.
    forgotten = {e for e, _ in batch_state["forgotten_entry"]}
    assert {ent_a, ent_two, ent_c, ent_d, "ent_unknown"} <= forgotten
    assert set(session_d) | {a[0][0], a[1][0], b[0][0], b[1][0], c[0][0], c[1][0]} \
        <= {e for e, _ in batch_state["excluded_event"]}
    assert (a_src, a_sid) and (b_src, b_sid)
    assert not set(batch_state["visible_events"]) & set(session_d)
    assert batch_state["entry_index"] == []
    # Applying the whole batch again changes nothing.
    with origin.open_store(home) as s:
        assert origin.apply_tombstones(s, batch) == 0
        assert visible_state(s) == batch_state


def test_a_replayed_log_of_many_tombstones_rebuilds_the_same_exclusions(all_agents, tmp_path):
    home = tmp_path / "device"
    with origin.open_store(home) as s:
        origin.sync(s)
        ids = [r[0] for r in s.conn.execute("SELECT id FROM event ORDER BY seq LIMIT 40")]
        records = [_rec(100 + i, "event", evid, events=[evid]) for i, evid in enumerate(ids)]
        records.append(_rec(100, "event", ids[0], events=[ids[0]]))
        assert origin.apply_tombstones(s, records) == len(ids)
        before = visible_state(s)
    (home / "origin.db").unlink()
    for extra in home.glob("origin.db-*"):
        extra.unlink()
    with origin.open_store(home) as s:
        origin.sync(s)
        after = visible_state(s)
    assert after["visible_events"] == before["visible_events"]
    assert [r[1:] for r in after["tombstone"]] == [r[1:] for r in before["tombstone"]]
    assert after["excluded_event"] == before["excluded_event"]


def test_a_pull_over_many_pages_applies_every_tombstone_once(tmp_path, monkeypatch):
    """Pages are fetched one ahead while the one before is applied; none is lost or applied twice."""
    import threading

    hub = origin.Hub(tmp_path / "hubhome", index=False)
    server = origin.make_hub_server(hub, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setattr(origin, "TOMBSTONE_PAGE", 3)
    try:
        hs = hub.default_store()
        records = [_rec(500 + i, "event", f"claude-code:paged-{i}", events=[f"claude-code:paged-{i}"])
                   for i in range(10)]
        assert origin.apply_tombstones(hs, records) == 10
        cfg = origin.HubConfig(f"http://127.0.0.1:{server.server_address[1]}",
                               origin.create_token(hs, "laptop"), "laptop")
        with origin.open_store(tmp_path / "device") as dev:
            client = origin.HubClient(cfg)
            try:
                got = origin.pull_tombstones(dev, client)
                assert (got["fetched"], got["applied"]) == (10, 10)
                assert sorted(r[0] for r in dev.conn.execute("SELECT event_id FROM excluded_event")) == \
                    sorted(f"claude-code:paged-{i}" for i in range(10))
                more = _rec(600, "event", "claude-code:paged-late", events=["claude-code:paged-late"])
                assert origin.apply_tombstones(hs, [more]) == 1
                got = origin.pull_tombstones(dev, client)
                assert (got["fetched"], got["applied"]) == (1, 1)
                assert origin.pull_tombstones(dev, client)["fetched"] == 0
            finally:
                client.close()
    finally:
        server.shutdown()
        server.server_close()
        hub.close()
