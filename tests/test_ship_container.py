"""The hub image, built by `make container` and run as a hub (marked container).

`make container-test` builds the image and names it in ORIGIN_TEST_IMAGE.
The hub runs inside it with `buildah run --isolation chroot` (the image's own
user, environment, ENTRYPOINT and CMD, with the listen address moved to a
free loopback port); chroot isolation shares the network, so "outside" is
this machine.  A device home on the outside pushes real fixtures to it.
`podman run` itself starts the image too, with Debian's runc and lowered
limits (crun refuses this machine's cgroup mounts), and its HEALTHCHECK is
run by the engine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

import origin

from reliability_tools import origin_argv
from shiptools import fixture_home, rows

pytestmark = pytest.mark.container

IMAGE = os.environ.get("ORIGIN_TEST_IMAGE", "")


def _tool(name: str) -> str:
    exe = shutil.which(name)
    if not exe:
        pytest.fail(f"{name} is not installed: `make container-test` installs it")
    return exe


@pytest.fixture(scope="module")
def image() -> dict:
    if not IMAGE:
        pytest.fail("ORIGIN_TEST_IMAGE names no image: run `make container-test`")
    p = subprocess.run([_tool("podman"), "image", "inspect", IMAGE], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)[0]


@pytest.fixture
def containers(image):
    """Make working containers of the image; all are removed afterwards."""
    made = []

    def make() -> str:
        name = f"origin-test-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run([_tool("buildah"), "from", "--name", name, IMAGE], check=True, capture_output=True)
        made.append(name)
        # `buildah run` puts a directory of its own on every declared VOLUME,
        # over any -v; without the declaration, -v mounts the host folder on
        # /data the way `podman run -v` does.
        subprocess.run(["buildah", "config", "--volume", "/data-", name], check=True, capture_output=True)
        return name

    yield make
    for name in made:
        subprocess.run(["buildah", "rm", name], capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthz(url: str, died) -> None:
    """Wait until the hub at url answers /healthz; ``died()`` returns why it never will, or None."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200 and json.loads(r.read())["ok"] is True:
                    return
        except OSError:
            pass
        why = died()
        assert why is None, why
        assert time.monotonic() < deadline, "the hub did not answer /healthz within 120 s"
        time.sleep(0.2)


class Hub:
    """The image's ENTRYPOINT + CMD inside a working container, with /data on a host folder."""

    def __init__(self, image: dict, ctr: str, data: Path, port: int, log: Path):
        self.ctr, self.data, self.port, self.log = ctr, data, port, log
        cmd = list(image["Config"]["Entrypoint"]) + list(image["Config"]["Cmd"])
        cmd[cmd.index("--listen") + 1] = f"127.0.0.1:{port}"
        self.argv = cmd
        self.proc: subprocess.Popen | None = None

    def run(self, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        """One command in the container, like `podman exec`."""
        extra = [x for k, v in (env or {}).items() for x in ("--env", f"{k}={v}")]
        return subprocess.run(["buildah", "run", "--isolation", "chroot", "-v", f"{self.data}:/data", *extra,
                               self.ctr, "--", *argv], capture_output=True, text=True, timeout=300)

    def start(self) -> None:
        self.proc = subprocess.Popen(["buildah", "run", "--isolation", "chroot", "-v", f"{self.data}:/data",
                                      self.ctr, "--", *self.argv],
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        _wait_healthz(self.url, lambda: self.log.read_text()[-3000:] if self.proc.poll() is not None else None)

    def stop(self) -> int:
        """SIGTERM to the hub process itself, as `podman stop` sends it to PID 1."""
        inner = [c for c in psutil.Process(self.proc.pid).children(recursive=True)
                 if "serve" in c.cmdline() and c.uids().real == 65532]
        assert inner, "the hub process was not found under buildah run"
        inner[-1].send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=120)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _ids(db: Path) -> set[str]:
    return {r[0] for r in rows(db, "SELECT id FROM event")}


def test_the_image_runs_as_a_non_root_user_with_its_health_probe(image):
    cfg = image["Config"]
    assert cfg["User"] not in ("", "root", "0")
    assert "7077/tcp" in cfg["ExposedPorts"] and "/data" in cfg["Volumes"]
    assert "ORIGIN_HOME=/data" in cfg["Env"]
    assert image["Healthcheck"]["Test"] == ["CMD", "origin", "healthcheck"], "build with --format docker"
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.version"] == origin.__version__
    assert labels["org.opencontainers.image.licenses"] == "MIT"


def test_the_image_keeps_its_store_on_the_volume_and_its_probe_says_when_no_hub_answers(image, containers,
                                                                                        tmp_path):
    data = tmp_path / "volume"
    data.mkdir(mode=0o700)
    os.chown(data, 65532, 65532)
    hub = Hub(image, containers(), data, _free_port(), tmp_path / "hub.log")
    p = hub.run("origin", "--version")
    assert p.returncode == 0 and p.stdout.strip() == f"origin {origin.__version__}", p.stderr
    p = hub.run("origin", "status", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["home"] == "/data"
    db = data / "origin.db"
    assert db.exists() and db.stat().st_uid == 65532 and db.stat().st_mode & 0o077 == 0
    # The HEALTHCHECK command, as the engine runs it, against a port nobody serves.
    probe = image["Healthcheck"]["Test"][1:]
    p = hub.run(*probe, env={"ORIGIN_HEALTHCHECK_URL": f"{hub.url}/healthz"})
    assert p.returncode == 1 and "does not answer" in p.stderr
    # A new container of the image on the same volume finds the same store.
    other = Hub(image, containers(), data, hub.port, tmp_path / "hub.log")
    p = other.run("sh", "-c", "id -u; stat -c %a /data")
    assert p.stdout.split() == ["65532", "700"], p.stdout + p.stderr
    assert other.run("origin", "status", "--json").returncode == 0
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
def test_a_device_pushes_to_the_hub_in_the_image_and_the_store_survives_a_restart(image, containers, tmp_path):
    data = tmp_path / "volume"
    data.mkdir(mode=0o700)
    os.chown(data, 65532, 65532)
    hub = Hub(image, containers(), data, _free_port(), tmp_path / "hub.log")
    hub.start()
    try:
        with urllib.request.urlopen(f"{hub.url}/healthz", timeout=10) as r:
            assert json.loads(r.read())["ok"] is True
        # The image's own probe, inside the container, as HEALTHCHECK runs it.
        probe = image["Healthcheck"]["Test"][1:]
        p = hub.run(*probe, env={"ORIGIN_HEALTHCHECK_URL": f"{hub.url}/healthz"})
        assert p.returncode == 0, p.stdout + p.stderr
        p = hub.run("origin", "token", "create", "laptop", "--url", hub.url, "--json")
        assert p.returncode == 0, p.stderr
        token = json.loads(p.stdout)["token"]

        env = fixture_home(tmp_path / "device")
        env = {**os.environ, **env}
        p = subprocess.run(origin_argv("hub", "connect", hub.url, "--token", token, "--device", "laptop"),
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        p = subprocess.run(origin_argv("push", "--json"), capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        device_ids = _ids(Path(env["ORIGIN_HOME"]) / "origin.db")
        assert device_ids and _ids(data / "origin.db") == device_ids
        # A token the hub did not make is refused.
        req = urllib.request.Request(f"{hub.url}/v1/cursors?device=laptop",
                                     headers={"Authorization": "Bearer ogn_not-a-real-token"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 401
        # An agent's search through the image's /mcp, with the token made
        # inside, finds the text the device pushed (refs #17).
        pushed = rows(Path(env["ORIGIN_HOME"]) / "origin.db",
                      "SELECT id FROM event WHERE text LIKE '%type-check%' AND kind = 'message'")
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "search", "arguments": {"query": "type-check", "scope": "events", "limit": 50}}}
        req = urllib.request.Request(f"{hub.url}/mcp", data=json.dumps(call).encode(), method="POST", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        with urllib.request.urlopen(req, timeout=60) as r:
            result = json.loads(r.read())["result"]
        assert result.get("isError") is not True, result
        found = {e["id"] for e in json.loads(result["content"][0]["text"])["events"]}
        assert found and found <= device_ids and found & {r[0] for r in pushed}
    finally:
        code = hub.stop()
    assert code == 0, hub.log.read_text()[-3000:]

    # A new container of the same image on the same volume: everything is there.
    hub = Hub(image, containers(), data, hub.port, tmp_path / "hub.log")
    hub.start()
    try:
        p = hub.run("origin", "status", "--json")
        assert p.returncode == 0, p.stderr
        assert _ids(data / "origin.db") == device_ids
        tokens = json.loads(hub.run("origin", "token", "list", "--json").stdout)["tokens"]
        assert [(t["name"], t["device"], t["revoked"]) for t in tokens] == [("laptop", "laptop", None)]
        p = subprocess.run(origin_argv("push", "--json"), capture_output=True, text=True, env=env, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["bytes_sent"] == 0
    finally:
        assert hub.stop() == 0


def _podman_run_flags() -> list[str]:
    """What `podman run` needs on a machine like CI's (see docs/hub.md).

    crun cannot start containers here (it refuses cgroup v1/v2 hybrid
    mounts), so Debian's runc runs them; and the machine withholds
    CAP_SYS_RESOURCE, so the container's open-file and process limits are set
    below the machine's own rather than at podman's defaults.
    """
    import resource

    nofile = min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    nproc = min(4096, resource.getrlimit(resource.RLIMIT_NPROC)[0])
    return ["--runtime", _tool("runc"), "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def test_podman_runs_the_image_and_its_healthcheck_reports_healthy(image, tmp_path):
    podman = _tool("podman")
    data = tmp_path / "volume"
    data.mkdir(mode=0o700)
    os.chown(data, 65532, 65532)
    port = _free_port()
    name = f"origin-test-{os.getpid()}-{time.monotonic_ns()}"
    global_flags, run_flags = _podman_run_flags()[:2], _podman_run_flags()[2:]
    p = subprocess.run([podman, *global_flags, "run", "-d", "--name", name, *run_flags,
                        "-p", f"127.0.0.1:{port}:7077", "-v", f"{data}:/data", IMAGE],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]

    def inspect(fmt: str) -> str:
        return subprocess.run([podman, "inspect", name, "--format", fmt], capture_output=True, text=True,
                              timeout=60).stdout.strip()

    try:
        _wait_healthz(f"http://127.0.0.1:{port}", lambda: None if inspect("{{.State.Running}}") == "true" else
                      subprocess.run([podman, "logs", name], capture_output=True, text=True).stdout[-3000:])
        # The engine's own run of the image's HEALTHCHECK (no systemd timer here, so run it now).
        p = subprocess.run([podman, *global_flags, "healthcheck", "run", name], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert inspect("{{.State.Health.Status}}") == "healthy"
        assert inspect("{{.Config.User}}") not in ("", "root", "0")
        # `podman stop` sends SIGTERM to PID 1, the hub: it stops cleanly.
        p = subprocess.run([podman, *global_flags, "stop", "-t", "60", name], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        assert inspect("{{.State.ExitCode}}") == "0"
        assert rows(data / "origin.db", "PRAGMA integrity_check") == [("ok",)]
    finally:
        subprocess.run([podman, "rm", "-f", name], capture_output=True, timeout=120)
