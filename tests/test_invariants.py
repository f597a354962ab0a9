"""Invariants 4 and 5: data stays under ORIGIN_HOME; one set of core operations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse

import origin
from conftest import ROOT

#: Runs a sync, a search and a remember with an audit hook that records every
#: network call and every file opened for writing.
_PROBE = r"""
import json, os, sys
events = []
def hook(name, args):
    if name in ("socket.connect", "socket.getaddrinfo", "socket.bind", "socket.sendto"):
        events.append(["net", name, repr(args)[:200]])
    elif name == "open":
        path, mode = args[0], args[1]
        if isinstance(path, (str, bytes, os.PathLike)) and mode and any(c in str(mode) for c in "wax+"):
            events.append(["write", os.fsdecode(path)])
    elif name == "sqlite3.connect":
        events.append(["sqlite", os.fsdecode(args[0])])
sys.addaudithook(hook)
import origin
with origin.open_store() as s:
    origin.sync(s)
    hits = origin.search_events(s, "CLAUDE.md")
    origin.remember(s, kind="memory", text="The demo project keeps its guide in CLAUDE.md.",
                    sources=[{"event": hits[0]["id"]}], author="probe")
print(json.dumps(events))
"""


def test_invariant_4_sync_search_and_remember_touch_only_origin_home_and_no_network(claude_root, origin_home,
                                                                                   user_home):
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "HOME": str(user_home)}
    p = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    events = json.loads(p.stdout.strip().splitlines()[-1])
    assert [e for e in events if e[0] == "net"] == []
    writes = [e[1] for e in events if e[0] == "write"]
    assert writes, "the probe saw no writes at all"
    for w in writes:
        assert os.path.realpath(w).startswith(os.path.realpath(origin_home)), w
    opened = [e[1] for e in events if e[0] == "sqlite"]
    assert opened, "the probe saw no database opened"
    for db in opened:
        if db.startswith("file:"):  # a URI: file:<quoted path>?<params>
            db = urllib.parse.unquote(db[len("file:"):].split("?", 1)[0])
        assert os.path.realpath(db).startswith(os.path.realpath(origin_home)), db


def test_invariant_5_cli_reads_and_writes_go_through_the_core_operations(claude_root, cli, monkeypatch):
    calls = []
    for name in ("sync", "search", "timeline", "get_item", "raw_sources", "remember", "correct", "forget",
                 "list_entries", "status"):
        real = getattr(origin, name)

        def spy(*a, _real=real, _name=name, **kw):
            calls.append(_name)
            return _real(*a, **kw)

        monkeypatch.setattr(origin, name, spy)
    cli("sync")
    code, res = cli("search", "CLAUDE.md", "--json")
    ev = res["events"][0]["id"]
    cli("show", ev)
    cli("timeline", "--since", "2020-01-01")
    code, ent = cli("remember", "The guide lives in CLAUDE.md.", "--kind", "memory", "--event", ev, "--json")
    assert code == 0
    cli("correct", ent["id"], "The guide lives in CLAUDE.md at the repo root.", "--json")
    cli("entries")
    cli("status")
    cli("forget", ev, "--yes")
    assert {"sync", "search", "timeline", "get_item", "raw_sources", "remember", "correct", "forget",
            "list_entries", "status"} <= set(calls)
