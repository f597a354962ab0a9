"""`pipx install` of the built wheel into a fresh PIPX_HOME gives a working `origin` (marked slow).

`make ship-test` builds the wheel and installs pipx first; the install itself
resolves the three runtime dependencies from the package index, as a user's
would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from shiptools import MCP_TOOLS, bare_env, close, fixture_home, mcp_session

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """Return the `origin` command pipx installed from dist/ into a fresh PIPX_HOME."""
    version = re.search(r'^__version__ = "(.+)"', (ROOT / "origin.py").read_text(), re.M).group(1)
    wheel = ROOT / "dist" / f"origin_memory-{version}-py3-none-any.whl"
    if not wheel.exists():
        pytest.fail(f"{wheel.name} is missing from dist/: build it with `make wheel`")
    if subprocess.run([sys.executable, "-m", "pipx", "--version"], capture_output=True).returncode != 0:
        pytest.fail("pipx is not installed for this Python: `make ship-test` installs it")
    tmp = tmp_path_factory.mktemp("pipx")
    env = bare_env(tmp, PIPX_HOME=str(tmp / "pipx"), PIPX_BIN_DIR=str(tmp / "bin"), PIPX_MAN_DIR=str(tmp / "man"))
    p = subprocess.run([sys.executable, "-m", "pipx", "install", str(wheel)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    exe = tmp / "bin" / "origin"
    assert exe.exists(), p.stdout
    p = subprocess.run([sys.executable, "-m", "pipx", "list", "--json"], capture_output=True, text=True, env=env)
    venvs = json.loads(p.stdout)["venvs"]
    assert venvs["origin-memory"]["metadata"]["main_package"]["package_version"] == version
    return exe


def test_pipx_installs_the_distribution_as_origin_memory_with_its_version(installed):
    p = subprocess.run([str(installed), "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("origin ")


def test_the_pipx_origin_syncs_and_serves_mcp(installed, tmp_path):
    env = fixture_home(tmp_path)
    p = subprocess.run([str(installed), "sync", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["problems"] == [] and report["events_added"] > 0
    server, answers = mcp_session([str(installed), "mcp"], env, [
        ("tools/list", {}),
        ("tools/call", {"name": "search", "arguments": {"query": "CLAUDE.md"}}),
    ])
    assert close(server) == 0
    assert {t["name"] for t in answers[0]["result"]["tools"]} == MCP_TOOLS
    hits = json.loads(answers[1]["result"]["content"][0]["text"])
    assert not answers[1]["result"].get("isError") and hits["events"]
