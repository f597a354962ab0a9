"""The zipapp `make pyz` builds, run as a user would: one file and a bare python3 (marked slow).

Each test copies dist/origin.pyz into an empty folder and runs it with
``python3 -I -S`` (no site-packages, no PYTHON* variables, no venv) under a
bare environment, on every CPython this machine has whose minor the pyz
carries: pyenv's interpreters, ``python3.X`` on PATH and the system's
``/usr/bin/python3``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

import shiptools
from conftest import ROOT
from helpers import LAYOUTS
from shiptools import fixture_home

PYZ = ROOT / "dist" / "origin.pyz"

pytestmark = pytest.mark.slow


def carried_minors(pyz: Path) -> set[str]:
    """CPython minors whose compiled modules the pyz holds, e.g. {"3.11", "3.12"}."""
    with zipfile.ZipFile(pyz) as z:
        tags = {m.group(1) for n in z.namelist() if (m := re.search(r"zstandard/backend_c\.cpython-3(\d+)-", n))}
    return {f"3.{t}" for t in tags}


def interpreters() -> dict[str, Path]:
    """Every CPython 3 found here, by full version: pyenv's, python3.X on PATH, the system's."""
    found: list[Path] = []
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if pyenv.is_dir():
        found += sorted(p / "bin" / "python3" for p in pyenv.iterdir() if (p / "bin" / "python3").exists())
    found += [Path(w) for m in range(8, 16) if (w := shutil.which(f"python3.{m}"))]
    found += [Path("/usr/bin/python3")] if Path("/usr/bin/python3").exists() else []
    out: dict[str, Path] = {}
    for exe in found:
        try:
            v = subprocess.run([str(exe), "-I", "-S", "-c", "import platform, sys; "
                                "print(platform.python_implementation(), '%d.%d.%d' % sys.version_info[:3])"],
                               capture_output=True, text=True, timeout=60).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if len(v) == 2 and v[0] == "CPython" and v[1].startswith("3."):
            out.setdefault(v[1], exe)
    return out


@pytest.fixture(scope="module")
def pythons() -> dict[str, Path]:
    """The interpreters, found when a test asks (never at import or collection: that runs each one)."""
    return interpreters()


@pytest.fixture(scope="module")
def pyz():
    if not PYZ.exists():
        pytest.fail("dist/origin.pyz is missing: build it with `make pyz`")
    return PYZ


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def supported(version: str) -> bool:
    """Origin needs CPython 3.11 or newer."""
    return tuple(int(x) for x in version.split(".")[:2]) >= (3, 11)


def bare_env(tmp_path: Path, **extra: str) -> dict:
    return shiptools.bare_env(tmp_path, SHIV_ROOT=str(tmp_path / "shiv"), **extra)


def run(python: Path, app: Path, tmp_path: Path, *argv: str, env: dict | None = None):
    return subprocess.run([str(python), "-I", "-S", str(app), *argv], capture_output=True, text=True,
                          cwd=app.parent, env=env or bare_env(tmp_path), timeout=300)


def copied(pyz: Path, tmp_path: Path) -> Path:
    """The pyz alone in an empty folder."""
    d = tmp_path / "server"
    d.mkdir()
    return Path(shutil.copy(pyz, d / "origin.pyz"))


def test_the_pyz_carries_every_minor_this_machine_has(pyz, pythons):
    have = {minor(v) for v in pythons if supported(v)}
    assert have, "no CPython 3.11+ found to run the pyz with"
    assert have <= carried_minors(pyz), f"this machine has CPython {sorted(have)}; the pyz carries " \
                                        f"{sorted(carried_minors(pyz))}"


def test_pyz_prints_its_version_or_says_which_pythons_it_needs(pyz, tmp_path, pythons):
    assert pythons, "no CPython found"
    for version in sorted(pythons):
        version_or_hint(pyz, tmp_path / version, pythons[version], version)


def version_or_hint(pyz: Path, tmp_path: Path, python: Path, version: str) -> None:
    tmp_path.mkdir()
    app = copied(pyz, tmp_path)
    t = time.perf_counter()
    p = run(python, app, tmp_path, "--version")
    first = time.perf_counter() - t
    if minor(version) in carried_minors(pyz):
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == f"origin {origin_version()}"
        # First start unpacks into SHIV_ROOT; later starts reuse it.
        unpacked = [d for d in (tmp_path / "shiv").iterdir() if d.is_dir()]
        assert len(unpacked) == 1 and (unpacked[0] / "site-packages" / "origin.py").exists()
        t = time.perf_counter()
        assert run(python, app, tmp_path, "--version").returncode == 0
        print(f"\n{version}: first start {first:.2f} s, then {time.perf_counter() - t:.2f} s")
    else:
        assert p.returncode == 2, f"{version}: {p.stderr}"
        assert "carries compiled modules for CPython" in p.stderr and "Traceback" not in p.stderr
        for m in sorted(carried_minors(pyz)):
            assert m in p.stderr


def origin_version() -> str:
    return re.search(r'^__version__ = "(.+)"', (ROOT / "origin.py").read_text(), re.M).group(1)


def test_pyz_syncs_a_fixture_home_and_finds_its_text(pyz, tmp_path, pythons):
    versions = sorted(v for v in pythons if supported(v))
    assert versions, "no CPython 3.11+ found to run the pyz with"
    for version in versions:
        syncs_and_finds(pyz, tmp_path / version, pythons[version], version)


def syncs_and_finds(pyz: Path, tmp_path: Path, python: Path, version: str) -> None:
    tmp_path.mkdir()
    if minor(version) not in carried_minors(pyz):
        pytest.fail(f"the pyz does not carry CPython {minor(version)}, which this machine has")

    app = copied(pyz, tmp_path)
    env = fixture_home(tmp_path, SHIV_ROOT=str(tmp_path / "shiv"))
    p = run(python, app, tmp_path, "sync", "--json", env=env)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["problems"] == []
    assert {name for name, src in report["sources"].items() if src["events_added"]} == set(LAYOUTS)
    p = run(python, app, tmp_path, "search", "CLAUDE.md", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["events"]
    # Nothing was written next to the pyz or outside the store and SHIV_ROOT.
    assert sorted(x.name for x in app.parent.iterdir()) == ["origin.pyz"]


def test_pyz_serves_a_hub_that_accepts_a_push_and_answers_tools_from_its_workers(pyz, tmp_path, pythons):
    """One pyz copied onto a "server" runs the hub; the same file on a "device" pushes to it.

    The device's search then runs on the hub, in a tool worker the pyz's
    hub started from its own unpacked files.
    """
    import socket
    import urllib.request

    python = Path("/usr/bin/python3") if Path("/usr/bin/python3").exists() else pythons[max(pythons)]
    app = copied(pyz, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server_env = bare_env(tmp_path, ORIGIN_HOME=str(tmp_path / "hub"))
    hub = subprocess.Popen([str(python), "-I", "-S", str(app), "serve", "--listen", f"127.0.0.1:{port}"],
                           cwd=app.parent, env=server_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                    assert json.loads(r.read())["ok"] is True
                    break
            except OSError:
                assert hub.poll() is None and time.monotonic() < deadline, hub.stdout.read()[-2000:]
                time.sleep(0.2)
        p = run(python, app, tmp_path, "healthcheck", "--url", f"{url}/healthz", env=server_env)
        assert p.returncode == 0, p.stderr
        p = run(python, app, tmp_path, "token", "create", "laptop", "--url", url, "--json", env=server_env)
        assert p.returncode == 0, p.stderr
        token = json.loads(p.stdout)["token"]
        device = tmp_path / "device"
        device.mkdir()
        env = fixture_home(device, SHIV_ROOT=str(tmp_path / "shiv"))
        p = run(python, app, tmp_path, "hub", "connect", url, "--token", token, "--device", "laptop", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        p = run(python, app, tmp_path, "push", "--json", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["bytes_sent"] > 0
        p = run(python, app, tmp_path, "status", "--json", env=server_env)
        hub_events = json.loads(p.stdout)["events"]
        p = run(python, app, tmp_path, "status", "--json", env=env)
        assert hub_events == json.loads(p.stdout)["events"] > 0
        p = run(python, app, tmp_path, "search", "CLAUDE.md", "--json", env=env)  # on the hub, over /mcp
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["events"]
    finally:
        hub.terminate()
        hub.wait(timeout=60)
    log = hub.stdout.read()
    assert hub.returncode == 0, log
    assert "POST /mcp 200" in log and "tool worker" not in log, log
