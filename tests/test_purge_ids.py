"""Ids made from the text leave nothing to test guesses against after `origin purge` (issue 26).

Cursor names a bubble, ZCode a text part, by a hash of its text.  A short
forgotten message ("pin is 4417") hidden by its id could be found again
from that id by hashing the 10,000 four-digit candidates.  Here real
`origin` processes archive the agent's fixture with that message planted,
forget it, purge,
and then every byte under ORIGIN_HOME (database, WAL, journals, mirrors) is
searched for the hash of every candidate; and the bubble stays hidden when
Cursor rewrites it, after `origin rebuild`, and on a hub the device pushes to.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

import adapters
import origin
from helpers import Device, HubProcess, connect, replace_in_db
from reliability_tools import age_tree, origin_argv, origin_env

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running

PIN = "pin is 4417"
CURSOR_DB = Path("Cursor") / "User" / "globalStorage" / "state.vscdb"


def _put_pin(db_path: Path, table: str, column: str, old: str) -> None:
    replace_in_db(db_path, table, column, old, PIN)


def _plant(dev: Device, agent: str = "cursor") -> None:
    """Make one message of the agent's real fixture read PIN, and nothing else."""
    if agent == "cursor":  # a user bubble of the global state
        _put_pin(dev.home / CURSOR_DB, "cursorDiskKV", "value", "how do I do 2")
    else:  # a ZCode text part
        _put_pin(dev.home / ".zcode" / "cli" / "db" / "db.sqlite", "part", "data",
                 "Let me look at how totals are rounded.")


def _cursor_rewrites_the_bubble(dev: Device) -> None:
    """Cursor writes the bubble's row again (another field changes): it is exported again."""
    db = sqlite3.connect(dev.home / CURSOR_DB)
    with db:
        key, value = db.execute("SELECT key, value FROM cursorDiskKV WHERE instr(value, ?) > 0", (PIN,)).fetchone()
        db.execute("UPDATE cursorDiskKV SET value = ? WHERE key = ?",
                   (json.dumps({**json.loads(value), "isRewritten": True}), key))
    db.close()


def _guess(agent: str, n: int) -> str:
    """The tail the agent's adapter puts in the id of a message reading `pin is <n>`."""
    text = f"pin is {n:04d}"
    if agent == "cursor":
        return adapters._content_key("u", text)  # u:<12 hex>
    return "m:" + adapters.short_hash(text, n=8)  # ZCode: <part id>:m:<8 hex>


def _home_bytes(home: Path) -> bytes:
    return b"\0".join(p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file())


def _guesses_found(home: Path, agent: str = "cursor") -> list[int]:
    """The four-digit candidates whose id tail some file under home holds (the attack, without the key)."""
    tails = {m.group(1) for m in re.finditer(rb":([a-z]:[0-9a-f]{8,12})(?![0-9a-f])", _home_bytes(home))}
    return [n for n in range(10_000) if _guess(agent, n).encode() in tails]


def _ok(p) -> dict:
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}


def _pin_event(store: Path) -> str:
    with sqlite3.connect(store / origin.DB_NAME) as c:
        (eid,) = c.execute("SELECT id FROM event WHERE text = ?", (PIN,)).fetchone()
    return eid


def _shown(run, eid: str) -> list[str]:
    """The read routes that still show the bubble."""
    seen = []
    p = run("search", "4417", "--scope", "events", "--all", "--json")
    assert p.returncode in (0, 1), p.stderr
    if PIN in p.stdout or eid in p.stdout:
        seen.append("search")
    if run("show", eid, "--json").returncode == 0:
        seen.append("show")
    return seen


def _visible_pins(store: Path) -> int:
    with sqlite3.connect(store / origin.DB_NAME) as c:
        return c.execute("SELECT count(*) FROM event e WHERE instr(text, '4417') > 0 AND NOT EXISTS "
                         "(SELECT 1 FROM excluded_event x WHERE x.event_id = e.id)").fetchone()[0]


def _hub_run(hub: HubProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(origin_argv(*args), env=origin_env(hub.home / "hostenv", hub.home), capture_output=True,
                          text=True, timeout=300)


def _forgotten_and_purged(tmp_path: Path) -> tuple[Device, str]:
    dev = Device(tmp_path, "laptop", ("cursor",))
    _plant(dev)
    _ok(dev.run("sync", "--json"))
    eid = _pin_event(dev.store)
    assert _guess("cursor", 4417) in eid  # the id is the hash of the text the attack computes
    _ok(dev.run("forget", eid, "--yes", "--reason", "a pin", "--json"))
    res = _ok(dev.run("purge", "--yes", "--json"))
    assert res["complete"] and res["events"] == 1
    return dev, eid


def _leaves_nothing(home: Path, eid: str, agent: str = "cursor") -> None:
    data = _home_bytes(home)
    assert eid.encode() not in data
    assert PIN.encode() not in data
    assert _guesses_found(home, agent) == []


@pytest.mark.parametrize("agent", ["cursor", "zcode"])
def test_invariant_2_a_purged_short_message_leaves_no_id_a_guess_can_be_tested_against(tmp_path, agent):
    dev = Device(tmp_path, "laptop", (agent,))
    _plant(dev, agent)
    _ok(dev.run("sync", "--json"))
    eid = _pin_event(dev.store)
    assert eid.endswith(_guess(agent, 4417)) or f":{_guess(agent, 4417)}:" in eid
    _ok(dev.run("forget", eid, "--yes", "--reason", "a pin", "--json"))
    # Forgotten only: the bytes are still there, and so is the attack.
    assert _guesses_found(dev.store, agent) == [4417]
    res = _ok(dev.run("purge", "--yes", "--json"))
    assert res["complete"] and res["events"] == 1
    # Every file under ORIGIN_HOME: origin.db after its VACUUM and
    # checkpoint, the index, tombstones.log, entries.log, the mirrors.
    _leaves_nothing(dev.store, eid, agent)
    # What stays is the keyed id: a holder of the key can still test it.
    with origin.open_store(dev.store) as s:
        kid = origin._setting(s.conn, origin._OWN_KEY)
        keyed = origin.keyed_event_id(kid, origin.key_ring(s.conn)[kid], eid)
        assert origin.excluded_by(s.conn, eid) is not None
        assert s.conn.execute("SELECT 1 FROM excluded_event WHERE event_id = ?", (keyed,)).fetchone()
        assert s.conn.execute("SELECT text FROM event WHERE id = ?", (keyed,)).fetchone()[0] == ""
    assert keyed.encode() in (dev.store / origin.TOMBSTONE_LOG).read_bytes()
    assert _shown(dev.run, eid) == []


def test_invariant_2_a_purged_cursor_bubble_stays_hidden_when_rewritten_and_after_a_rebuild(tmp_path):
    dev, eid = _forgotten_and_purged(tmp_path)
    # Cursor writes the row again: the bubble is exported again, under its own id.
    _cursor_rewrites_the_bubble(dev)
    _ok(dev.run("sync", "--json"))
    assert _visible_pins(dev.store) == 0 and _shown(dev.run, eid) == []
    assert eid.encode() not in _home_bytes(dev.store / origin.DB_NAME)  # it arrived as its keyed id
    _ok(dev.run("purge", "--yes", "--json"))
    _leaves_nothing(dev.store, eid)
    # A new origin.db from raw/ and the journals, then a sync that reads the
    # Cursor database again (the rebuilt store exports the bubble anew).
    _ok(dev.run("rebuild", "--json"))
    _ok(dev.run("sync", "--json"))
    assert _visible_pins(dev.store) == 0 and _shown(dev.run, eid) == []
    _ok(dev.run("purge", "--yes", "--json"))
    _leaves_nothing(dev.store, eid)


def _pin_pushed_to_a_hub(tmp_path: Path) -> tuple[HubProcess, Device, str]:
    """A hub and a device whose Cursor database holds the pin, synced and pushed; the pin's event id."""
    hub = HubProcess(tmp_path / "hub")
    dev = Device(tmp_path, "laptop", ("cursor",))
    _plant(dev)
    _ok(dev.run("sync", "--json"))
    eid = _pin_event(dev.store)
    connect(hub, dev)
    dev.push()
    return hub, dev, eid


def test_invariant_2_a_cursor_bubble_purged_on_a_device_stays_hidden_on_its_hub(tmp_path):
    hub, dev, eid = _pin_pushed_to_a_hub(tmp_path)
    on_hub = functools.partial(_hub_run, hub)

    assert _visible_pins(hub.home) == 1
    # Forgotten and purged on the device before its next push: the record
    # the hub gets names the event by its keyed id only.
    _ok(dev.run("forget", eid, "--yes", "--reason", "a pin", "--json"))
    _ok(dev.run("purge", "--yes", "--json"))
    dev.push()
    assert _visible_pins(hub.home) == 0 and _shown(on_hub, eid) == []
    # Cursor rewrites the bubble: the device mirrors it again (hidden there)
    # and pushes the bytes; the hub keeps it hidden too.
    _cursor_rewrites_the_bubble(dev)
    _ok(dev.run("sync", "--json"))
    dev.push()
    assert _visible_pins(hub.home) == 0 and _shown(on_hub, eid) == []
    assert _visible_pins(dev.store) == 0
    code, out = hub.cli("purge", "--yes", "--json")
    assert code == 0, out
    _ok(dev.run("purge", "--yes", "--json"))
    hub.stop()
    _leaves_nothing(dev.store, eid)
    _leaves_nothing(hub.home, eid)


def test_invariant_2_a_cursor_bubble_forgotten_and_purged_on_the_hub_stays_hidden_on_the_device(tmp_path):
    hub, dev, eid = _pin_pushed_to_a_hub(tmp_path)
    # The hub forgets and purges before the device hears of it: the record
    # the device pulls names the event by its keyed id only.
    code, out = hub.cli("forget", eid, "--yes", "--json")
    assert code == 0, out
    code, out = hub.cli("purge", "--yes", "--json")
    assert code == 0, out
    assert eid.encode() not in (hub.home / origin.TOMBSTONE_LOG).read_bytes()
    assert _visible_pins(dev.store) == 1
    dev.push()
    assert _visible_pins(dev.store) == 0 and _shown(dev.run, eid) == []
    _ok(dev.run("purge", "--yes", "--json"))
    hub.stop()
    _leaves_nothing(dev.store, eid)
    _leaves_nothing(hub.home, eid)


def test_invariant_2_a_purged_cursor_prompt_leaves_no_export_key_a_guess_can_be_tested_against(tmp_path):
    # Cursor's per-workspace prompt history: the row is known by a key that
    # holds the hash of the prompt's text, and by a digest of its text and time.
    dev = Device(tmp_path, "laptop", ("cursor",))
    ws = dev.home / "Cursor" / "User" / "workspaceStorage" / "a1b2c3" / "state.vscdb"
    db = sqlite3.connect(ws)
    with db:
        (value,) = db.execute("SELECT value FROM ItemTable WHERE key = 'aiService.prompts'").fetchone()
        prompts = json.loads(value)
        assert prompts[4]["text"] == "ion footer is not a known element"
        prompts[4]["text"] = PIN
        db.execute("UPDATE ItemTable SET value = ? WHERE key = 'aiService.prompts'", (json.dumps(prompts),))
    db.close()
    age_tree(dev.home, 7200)  # a quiet database: its prompts are exported
    _ok(dev.run("sync", "--json"))
    eid = _pin_event(dev.store)
    with sqlite3.connect(dev.store / origin.DB_NAME) as c:
        assert c.execute("SELECT count(*) FROM export_state WHERE instr(key, ?) > 0",
                         (_guess("cursor", 4417),)).fetchone()[0] == 1
    _ok(dev.run("forget", eid, "--yes", "--reason", "a pin", "--json"))
    _ok(dev.run("purge", "--yes", "--json"))
    _leaves_nothing(dev.store, eid)
    # The keyed row still tells the export the prompt is unchanged: the
    # next syncs copy nothing again, and the prompt stays hidden.
    size = sum(p.stat().st_size for p in (dev.store / "raw").rglob("*") if p.is_file())
    _ok(dev.run("sync", "--json"))
    assert sum(p.stat().st_size for p in (dev.store / "raw").rglob("*") if p.is_file()) == size
    assert _visible_pins(dev.store) == 0 and _shown(dev.run, eid) == []
    _leaves_nothing(dev.store, eid)
