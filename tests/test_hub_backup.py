"""Backups of a hub and of a device connected to it.

A restore has to give back a working member of the setup, not only its
events: the hub's tokens and device bindings (in origin.db) and the
devices' mirrors under raw/devices/, and on a device its connection to the
hub (hub.json, token included), so the restored device pushes as itself and
finds the hub already holding everything it has.
"""

from __future__ import annotations

import os
import stat
import origin


def test_a_restored_device_pushes_as_itself_and_a_restored_hub_knows_its_tokens(served, all_agents, tmp_path):
    hub, cfg, dev = served
    url, token = cfg.url, cfg.token
    origin.save_hub_config(dev.home, cfg)
    origin.sync(dev)
    sent = origin.push(dev, cfg)
    assert sent["chunks"] > 0
    origin.backup(dev, tmp_path / "device-backup")
    device_ids = sorted(r[0] for r in dev.conn.execute("SELECT id FROM event"))

    restored = tmp_path / "device-restored"
    origin.restore(tmp_path / "device-backup", restored)
    path = restored / origin.HUB_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = origin.load_hub_config(restored, env={})
    assert (again.url, again.token, again.device) == (url, token, "laptop")
    with origin.open_store(restored) as dev:
        # The hub holds all of it already: the restored device sends nothing.
        report = origin.push(dev, again)
        assert report["files"] == sent["files"] and report["chunks"] == 0 and report["bytes_sent"] == 0

    with origin.open_store(hub.home) as hs:
        origin.backup(hs, tmp_path / "hub-backup")
    hub_restored = tmp_path / "hub-restored"
    origin.restore(tmp_path / "hub-backup", hub_restored)
    with origin.open_store(hub_restored) as hs:
        t = origin.verify_token(hs, f"Bearer {token}")
        assert t.name == "laptop" and t.device == "laptop"
        assert [(x["name"], x["device"]) for x in origin.list_tokens(hs)] == [("laptop", "laptop")]
        assert sorted(r[0] for r in hs.conn.execute("SELECT id FROM event")) == device_ids
        for mirror, size in hs.conn.execute("SELECT mirror, bytes_ingested FROM raw_file"):
            assert mirror.startswith("raw/devices/laptop/")
            assert (hub_restored / mirror).stat().st_size >= size
        assert origin.hub_cursor_digest(hs, "laptop") == origin.hub_cursor_digest(hub.default_store(), "laptop")
