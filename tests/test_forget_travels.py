"""Forgets that travel between stores: device to hub, through backups and restores.

Real `origin serve` hubs on loopback and real device homes driven through
the `origin` command: a device's own forgets reach the hub before any of
its bytes; a backup taken before a forget and restored after it keeps the
forget; a hub restored from a backup is told every forget again by its
devices, and its new forgets reach them although its tombstone numbers
started again.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

import origin
from conftest import write_session
from helpers import Device, HubProcess, _found_anywhere, connect
from reliability_tools import origin_argv, origin_env
from shiptools import wait_for

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def _run(home: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `origin ARGS` on the store home (a hub's, or a restored one)."""
    return subprocess.run(origin_argv(*args), env=origin_env(home / "hostenv", home), capture_output=True,
                          text=True, timeout=300)


def _excluded(store: Path, eid: str) -> bool:
    with sqlite3.connect(store / origin.DB_NAME) as c:
        return c.execute("SELECT 1 FROM excluded_event WHERE event_id = ?", (eid,)).fetchone() is not None


def _hub_shows(home: Path, eid: str, words: str) -> list[str]:
    """The hub's own read routes that still show eid."""
    seen = []
    p = _run(home, "search", *words.split(), "--scope", "events", "--all", "--limit", "200", "--json")
    assert p.returncode in (0, 1), p.stderr
    if eid in p.stdout:
        seen.append("search")
    if _run(home, "show", eid, "--json").returncode == 0:
        seen.append("show")
    return seen


def _forget_here(dev: Device, eid: str) -> None:
    p = dev.run("forget", eid, "--yes", "--reason", "not for the hub", "--json")
    assert p.returncode == 0, p.stderr


def _messages(store: Path, source: str, n: int) -> list[tuple[str, str, str]]:
    """n indexed messages of source, each (id, session, words), from different texts."""
    out, texts = [], set()
    with sqlite3.connect(store / origin.DB_NAME) as c:
        for eid, session, text in c.execute(
                "SELECT id, session, text FROM event WHERE source = ? AND kind = 'message' AND indexed = 1 "
                "AND length(text) > 40 ORDER BY seq", (source,)):
            words = [w for w in text.split() if len(w) >= 5 and w.isalpha()][:4]
            if len(words) >= 3 and text not in texts:
                texts.add(text)
                out.append((eid, session, " ".join(words)))
            if len(out) == n:
                return out
    raise AssertionError(f"fewer than {n} {source} messages with words")


def _text(store: Path, eid: str) -> str:
    with sqlite3.connect(store / origin.DB_NAME) as c:
        return c.execute("SELECT text FROM event WHERE id = ?", (eid,)).fetchone()[0]


def test_invariant_2_a_devices_own_forgets_reach_the_hub_before_its_bytes(tmp_path):
    hub = HubProcess(tmp_path / "hub")
    laptop = Device(tmp_path / "devices", "laptop", ("claude-code",))
    p = laptop.run("sync", "--json")
    assert p.returncode == 0, p.stderr
    (eid, session, words), (later, later_session, later_words) = _messages(laptop.store, "claude-code", 2)
    text = _text(laptop.store, eid)
    # Forgotten on the device before it ever knew a hub.
    _forget_here(laptop, eid)
    connect(hub, laptop)
    report = laptop.push()
    assert report["bytes_sent"] > 0
    assert _excluded(hub.home, eid)
    assert _hub_shows(hub.home, eid, words) == []
    # The device's reads now go to the hub: nothing there either.
    assert _found_anywhere(laptop, eid, session, words) == []
    assert report["tombstones_sent"]["sent"] == 1 and report["tombstones_sent"]["applied"] == 1
    # Another device pushes the same text under another id: the laptop's
    # fingerprint key went up with the tombstone, so the hub excludes it.
    desktop = Device(tmp_path / "devices", "desktop", ())
    write_session(desktop.home, "0c0c0c0c-0000-4000-8000-000000000001", "/work/elsewhere", [
        ("0c0c0c0c-0000-4000-8000-0000000000a1", "2026-11-30T10:00:00Z", "user", text),
        ("0c0c0c0c-0000-4000-8000-0000000000a2", "2026-11-30T10:00:05Z", "assistant",
         "A reply that nobody forgot, long enough to be indexed."),
    ])
    connect(hub, desktop)
    desktop.push()
    copy = "claude-code:0c0c0c0c-0000-4000-8000-0000000000a1"
    assert _excluded(hub.home, copy)
    # The desktop archived its copy before it knew the forget, so its own
    # store keeps it as it was (what `sources` reads here); its search,
    # timeline and show go to the hub, which hides it.
    assert _found_anywhere(desktop, copy, "0c0c0c0c-0000-4000-8000-000000000001", words) == ["sources"]
    assert _excluded(hub.home, "claude-code:0c0c0c0c-0000-4000-8000-0000000000a2") is False

    # The same after a disconnect: a forget made while no hub is configured
    # goes up at the next push after reconnecting.
    saved = json.loads((laptop.store / origin.HUB_FILE).read_text())
    assert laptop.run("hub", "disconnect").returncode == 0
    assert _hub_shows(hub.home, later, later_words) == ["search", "show"]
    _forget_here(laptop, later)
    p = laptop.run("hub", "connect", saved["url"], "--token", saved["token"], "--device", "laptop")
    assert p.returncode == 0, p.stderr
    again = laptop.push()
    assert again["tombstones_sent"]["applied"] == 1
    assert _hub_shows(hub.home, later, later_words) == []
    assert _found_anywhere(laptop, later, later_session, later_words) == []
    # Nothing new: the hub acknowledged everything, and nothing is sent twice.
    assert laptop.push()["tombstones_sent"]["sent"] == 0
    assert hub.stop() == 0, "".join(hub.log)
    wait_for(lambda: "hub stopped" in "".join(hub.log), "the hub's last log line")
    # The hub learnt the laptop's first forget before the first byte of it arrived.
    requests = [line.split()[1:3] for line in hub.log if " /v1/" in line]
    first_ingest = requests.index(["POST", "/v1/ingest"])
    assert ["POST", "/v1/tombstones"] in requests[:first_ingest], requests


def test_invariant_2_the_hub_refuses_a_batch_with_one_bad_tombstone_and_applies_nothing(tmp_path):
    import http.client

    hub = HubProcess(tmp_path / "hub")
    code, out = hub.cli("token", "create", "laptop", "--json")
    assert code == 0, out
    token = json.loads(out)["token"]
    good = {"uid": "tmb_00000000000000a1", "target": "claude-code:x", "kind": "event", "reason": None,
            "created_at": 1764669600000, "device": "laptop", "entries": [], "events": ["claude-code:x"],
            "fingerprints": []}
    bad = {**good, "uid": "tmb_00000000000000a2", "events": "claude-code:y"}
    host, port = hub.url.rsplit("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        def post(body: dict, auth: str = token) -> tuple[int, dict]:
            data = json.dumps(body).encode()
            conn.request("POST", "/v1/tombstones", body=data, headers={
                "Authorization": f"Bearer {auth}", "Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())

        status, answer = post({"device": "laptop", "epoch": None, "keys": [], "tombstones": [good, bad]})
        assert status == 400 and "tmb_00000000000000a2" in answer["error"], answer
        status, answer = post({"device": "laptop", "keys": [["k1", "zz"]], "tombstones": [good]})
        assert status == 400 and "key" in answer["error"]
        assert post({"device": "laptop", "tombstones": [good]}, auth="ogn_wrong")[0] == 401
        assert not _excluded(hub.home, "claude-code:x")
        status, answer = post({"device": "laptop", "epoch": None, "tombstones": [good]})
        assert status == 200 and answer["applied"] == 1, answer
        assert post({"device": "laptop", "epoch": answer["epoch"], "tombstones": [good]})[1]["applied"] == 0
        status, stale = post({"device": "laptop", "epoch": "0" * 16, "tombstones": [good]})
        assert status == 409 and stale["stale"] is True and stale["epoch"] == answer["epoch"]
        # A token bound to another device may not speak for this one.
        assert post({"device": "desktop", "tombstones": []})[0] == 403
    finally:
        conn.close()
    assert _excluded(hub.home, "claude-code:x")
    # The owner's audit log says which device made the hub forget, with counts only.
    with sqlite3.connect(hub.home / origin.DB_NAME) as h:
        rows = h.execute("SELECT actor, action, channel, details FROM audit_log "
                         "WHERE action = 'tombstones_received'").fetchall()
    assert rows == [("device:laptop", "tombstones_received", "replication", '{"keys":0,"tombstones":1}')]
    assert hub.stop() == 0, "".join(hub.log)


def test_invariant_2_a_backup_from_before_a_forget_restored_after_it_keeps_the_forget(tmp_path):
    laptop = Device(tmp_path / "devices", "laptop", ("claude-code",))
    assert laptop.run("sync").returncode == 0
    (eid, _session, words), (other, _s2, other_words) = _messages(laptop.store, "claude-code", 2)
    backup = tmp_path / "backup"
    p = laptop.run("backup", str(backup))
    assert p.returncode == 0, p.stderr
    _forget_here(laptop, eid)
    # origin.db is lost; the tombstone log beside it survives.
    for path in sorted(laptop.store.iterdir()):
        if path.name != origin.TOMBSTONE_LOG:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    p = laptop.run("restore", str(backup), "--json")
    assert p.returncode == 0, p.stderr
    assert _excluded(laptop.store, eid)
    assert _hub_shows(laptop.store, eid, words) == []
    assert json.loads(p.stdout)["forgets_merged"] == 1
    assert _hub_shows(laptop.store, other, other_words) == ["search", "show"]

    # The old home moved aside, and one more forget made there: its log is
    # given with --forgets.
    old = tmp_path / "old-home"
    laptop.store.rename(old)
    p = subprocess.run(origin_argv("forget", other, "--yes", "--json"), env=origin_env(laptop.home, old),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    p = laptop.run("restore", str(backup), "--forgets", str(old / origin.TOMBSTONE_LOG), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["forgets_merged"] == 2
    for gone, gone_words in ((eid, words), (other, other_words)):
        assert _excluded(laptop.store, gone)
        assert _hub_shows(laptop.store, gone, gone_words) == []
    # A file that is no tombstone log is refused with a reason, and nothing is written.
    notes = tmp_path / "notes.txt"
    notes.write_text("not a log\n")
    fresh = tmp_path / "fresh"
    p = _run(fresh, "restore", str(backup), "--forgets", str(notes))
    assert p.returncode == origin.UsageError.exit_code and "no tombstone records" in p.stderr
    assert not fresh.exists() or list(fresh.iterdir()) == []


def test_invariant_2_a_restored_hub_relearns_forgets_and_its_new_ones_reach_devices(tmp_path):
    hub = HubProcess(tmp_path / "hub")
    port = int(hub.url.rsplit(":", 1)[1])
    laptop = Device(tmp_path / "devices", "laptop", ("claude-code",))
    connect(hub, laptop)
    laptop.push()
    (a, _sa, a_words), (b, _sb, b_words), (c, sc, c_words) = _messages(laptop.store, "claude-code", 3)
    backup = tmp_path / "hub-backup"
    code, out = hub.cli("backup", str(backup))
    assert code == 0, out
    # Two forgets on the hub after its backup; the laptop takes them in.
    for gone in (a, b):
        code, out = hub.cli("forget", gone, "--yes", "--json")
        assert code == 0, out
    assert laptop.push()["tombstones"]["applied"] == 2
    laptop.push()
    assert hub.stop() == 0, "".join(hub.log)

    # The hub's disk is lost; it is restored from the backup, on the same URL.
    restored = tmp_path / "hub-restored"
    p = _run(restored, "restore", str(backup), "--json")
    assert p.returncode == 0, p.stderr
    assert not _excluded(restored, a) and not _excluded(restored, b)
    hub2 = HubProcess(restored, port=port)
    assert hub2.url == hub.url
    # A new forget on the restored hub: its tombstone is number 1 again,
    # below the laptop's cursor of 2.
    p = _run(restored, "forget", c, "--yes", "--json")
    assert p.returncode == 0, p.stderr
    with sqlite3.connect(restored / origin.DB_NAME) as h:
        assert h.execute("SELECT max(id) FROM tombstone").fetchone()[0] == 1
    report = laptop.push()
    # The laptop reads the hub's tombstones from the first one, so the new
    # forget arrives...
    assert _excluded(laptop.store, c)
    assert _found_anywhere(laptop, c, sc, c_words) == []
    # ...and tells the restored hub every forget again.
    for gone, gone_words in ((a, a_words), (b, b_words)):
        assert _excluded(restored, gone)
        assert _hub_shows(restored, gone, gone_words) == []
    assert report["tombstones_sent"]["restarted"] is True and report["tombstones_sent"]["applied"] == 2
    with sqlite3.connect(laptop.store / origin.DB_NAME) as d:
        assert d.execute("SELECT count(*) FROM excluded_event WHERE event_id IN (?, ?, ?)",
                         (a, b, c)).fetchone()[0] == 3
    again = laptop.push()
    assert again["tombstones_sent"]["restarted"] is False and again["tombstones"]["fetched"] == 0
    assert hub2.stop() == 0, "".join(hub2.log)
