"""What `origin status` and `origin preserved` say on a hub: its devices and their last push.

A hub holds the files its devices pushed; their originals are on the
devices, so the hub must not report them as gone from disk.
"""

from __future__ import annotations

import json

import pytest

from helpers import HubDevice, Serve

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def test_a_hubs_status_and_preserved_show_its_devices_not_files_gone(tmp_path):
    hub = Serve(tmp_path / "hub")
    try:
        dev = HubDevice(tmp_path, "laptop", hub.url, hub.token("laptop"))
        p = dev.run("push", "--json")
        assert p.returncode == 0, p.stderr
        st = hub.run("status")
        pres = hub.run("preserved")
        st_json = json.loads(hub.run("status", "--json").stdout)
        pres_json = json.loads(hub.run("preserved", "--json").stdout)
    finally:
        hub.stop()
    assert st.returncode == 0 and pres.returncode == 0, st.stderr + pres.stderr
    # Before, both called every file the device pushed "gone from disk".
    assert "gone from disk" not in st.stdout and "files gone" not in pres.stdout
    assert st_json["files_gone"] == 0 and pres_json["files"] == 0 and pres_json["agents"] == {}
    laptop = st_json["devices"]["laptop"]
    assert laptop["files"] > 0 and laptop["last_push"]
    assert pres_json["devices"] == st_json["devices"]
    for out in (st.stdout, pres.stdout):
        line = next(x for x in out.splitlines() if x.strip().startswith("laptop"))
        assert f"{laptop['files']} files" in " ".join(line.split()) and f"last push {laptop['last_push']}" in line
    assert "this store is a hub" in pres.stdout
