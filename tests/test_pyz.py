"""Smoke-run the shiv zipapp that `make pyz` builds (marked slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

PYZ = ROOT / "dist" / "origin.pyz"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pyz():
    if not PYZ.exists():
        pytest.fail("dist/origin.pyz is missing: build it with `make pyz`")
    return PYZ


def run(pyz, tmp_path, *argv, env=None):
    env = {**os.environ, "SHIV_ROOT": str(tmp_path / "shiv"), **(env or {})}
    return subprocess.run([sys.executable, str(pyz), *argv], capture_output=True, text=True, env=env, timeout=300)


def test_pyz_prints_its_version(pyz, tmp_path):
    p = run(pyz, tmp_path, "--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("origin ")


def test_pyz_syncs_a_fixture_home_and_finds_its_text(pyz, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project",
                    home / ".claude" / "projects" / "-path-to-Demo")
    env = {"HOME": str(home), "ORIGIN_HOME": str(tmp_path / "origin")}
    p = run(pyz, tmp_path, "sync", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["events_added"] > 0
    p = run(pyz, tmp_path, "search", "CLAUDE.md", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["events"]
