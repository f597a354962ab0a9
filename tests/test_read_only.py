"""A store whose files cannot be written here answers reads and refuses writes with the reason.

The real case: the store belongs to another account (root made it, mode
755/644) and `origin` runs as user nobody, through the CLI and through the
MCP server as a separate process driven by the SDK's own client.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

import origin
from conftest import FIXTURES, ROOT
from helpers import failed, ok, run_client

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root to drop to another user")


@pytest.fixture
def foreign_store(monkeypatch):
    """A synced store with an entry, readable but not writable by nobody; yield (base, entry)."""
    base = Path(tempfile.mkdtemp(prefix="origin-ro-"))
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project",
                        home / ".claude" / "projects" / "-demo")
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("ORIGIN_HOME", str(base / "store"))
        with origin.open_store(base / "store") as store:
            origin.sync(store)
            entry = origin.remember(store, kind="memory", text="the demo repository started empty",
                                    sources=[{"quote": "The directory appears to be empty"}], author="user")
            # A store made by an older version lacks later additions to the schema.
            store.conn.execute("DROP TABLE parsed_by")
        for p in [base / "store", *(base / "store").rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        yield base, entry
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _app(base: Path) -> tuple[list[str], dict]:
    """Origin and its runtime packages copied where nobody may read them; return (command, env).

    The checkout and its .venv may sit in a folder only root may enter (a
    clone inside `mktemp -d`), so the code runs from a copy, by the
    interpreter's own path, with the packages `origin mcp` imports (the
    three dependencies and what they require) copied beside it.
    """
    app, site = base / "app", base / "site"
    if not app.exists():
        app.mkdir()
        for name in ("origin.py", "adapters.py"):
            shutil.copy(ROOT / name, app / name)
        purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
        todo, seen = ["mcp", "zstandard", "anyio"], set()
        while todo:
            name = todo.pop()
            key = re.sub(r"[-_.]+", "-", name).lower()
            if key in seen:
                continue
            seen.add(key)
            try:
                dist = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                continue
            for f in dist.files or []:
                src = Path(dist.locate_file(f)).resolve()
                if src.is_file() and purelib in src.parents:
                    dest = site / src.relative_to(purelib)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(src, dest)
            todo += [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra ==" not in r]
        for p in [app, site, *app.rglob("*"), *site.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    env = {**os.environ, "PYTHONPATH": str(site)}
    return [os.path.realpath(sys.executable), str(app / "origin.py")], env


def _as_nobody(base: Path, *argv: str) -> subprocess.CompletedProcess:
    command, env = _app(base)
    return subprocess.run([*NOBODY, *command, *argv], env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(base))


def test_a_store_another_account_owns_answers_every_read_and_refuses_writes_with_the_reason(foreign_store):
    base, entry = foreign_store
    before = _files(base / "store")
    event = entry["sources"][0]["event"]
    reads = {
        "search": ("search", "directory appears empty", "--json"),
        "show": ("show", event, "--json"),
        "timeline": ("timeline", "--since", "4000d", "--json"),
        "entries": ("entries", "--json"),
        "projects": ("projects", "--json"),
        "status": ("status", "--json"),
    }
    out = {}
    for name, argv in reads.items():
        p = _as_nobody(base, *argv)
        assert p.returncode == 0, (name, p.stderr)
        out[name] = json.loads(p.stdout)
    assert event in {e["id"] for e in out["search"]["events"]}
    assert out["show"]["event"]["id"] == event
    assert [e["id"] for e in out["entries"]["entries"]] == [entry["id"]]
    assert out["timeline"]["sessions"] and out["projects"]["projects"]
    assert out["status"]["events"] > 0
    for argv in (("sync",), ("remember", "a new statement", "--kind", "memory", "--event", event),
                 ("forget", entry["id"], "--yes"), ("purge", "--yes")):
        p = _as_nobody(base, *argv)
        assert p.returncode == origin.StoreError.exit_code, (argv, p.stderr)
        assert "read-only here" in p.stderr and "not a usable" not in p.stderr and "Traceback" not in p.stderr
    assert _files(base / "store") == before


def test_origin_mcp_on_a_store_another_account_owns_answers_reads(foreign_store):
    base, entry = foreign_store
    before = _files(base / "store")

    async def body(c):
        found = ok(await c.call_tool("search", {"query": "demo repository"}))
        got = ok(await c.call_tool("get", {"ids": [entry["id"]]}))
        refused = failed(await c.call_tool("remember", {
            "kind": "memory", "text": "a statement that cannot be written here",
            "sources": [{"event": entry["sources"][0]["event"]}]}))
        return found, got, refused

    command, env = _app(base)
    found, got, refused = run_client("auto", body, prefix=NOBODY, server=[*command, "mcp"], env=env, cwd=base)
    assert entry["id"] in {e["id"] for e in found["entries"]}
    assert entry["id"] in json.dumps(got)
    assert "read-only here" in refused
    assert _files(base / "store") == before
