"""Parser versions: a fixed adapter reaches the lines a store archived before the fix.

A store is synced with a deliberately older Claude Code parser (version 1)
that drops every assistant message and emits one event today's parser does
not; the real parser, declared version 2, then parses the old mirror again.
"""

from __future__ import annotations

import shutil

import pytest

import adapters
import origin
from conftest import FIXTURES


class OlderClaude(adapters.ClaudeCode):
    """The parser as it was before a fix: assistant messages were dropped."""

    version = 1

    def parse(self, line, ctx):
        out = [r for r in super().parse(line, ctx) if not (isinstance(r, adapters.Record) and r.role == "assistant")]
        if ctx.lineno == 1:  # an event of its own the fix no longer makes, one per file
            out.append(adapters.Record(id=f"only-the-old-parser-made-this:{ctx.file.rel}",
                                       session=ctx.state.get("session") or "old", kind="meta"))
        return out


def _events(store) -> dict:
    return {r[0]: tuple(r[1:]) for r in store.conn.execute(
        "SELECT e.id, e.session, e.role, e.kind, e.text, r.mirror, e.line, e.offset FROM event e "
        "JOIN raw_file r ON r.id = e.raw_file_id")}


@pytest.fixture
def demo_logs(user_home):
    shutil.copytree(FIXTURES / "claude-code" / "claude-code-viewer" / "sample-project",
                    user_home / ".claude" / "projects" / "-path-to-Demo")


def test_a_newer_parser_adds_the_events_an_older_one_dropped_on_the_next_sync(demo_logs, origin_home, tmp_path,
                                                                              monkeypatch, cli):
    real = adapters.ADAPTERS["claude-code"]
    monkeypatch.setitem(adapters.ADAPTERS, "claude-code", OlderClaude())
    with origin.open_store(origin_home) as store:
        origin.sync(store)
        old = _events(store)
    assert old and not any(v[1] == "assistant" for v in old.values())
    raw_before = sorted(p.name for p in (origin_home / "raw").rglob("*") if p.is_file())

    monkeypatch.setitem(adapters.ADAPTERS, "claude-code", real)
    monkeypatch.setattr(type(real), "version", 2)
    code, st = cli("status", "--json")
    assert st["reparse"]["mirrors"] == 2 and st["reparse"]["bytes"] > 0
    code, report = cli("sync", "--json")
    assert code == 0 and report["reparsed"]["mirrors"] == 2

    with origin.open_store(origin_home) as store:
        now = _events(store)
    with origin.open_store(tmp_path / "fresh") as fresh:
        origin.sync(fresh)
        want = _events(fresh)
    kept = {k for k in now if "only-the-old-parser-made-this" in k}
    assert len(kept) == 2
    # Every event today's parser makes is there once, where a fresh store has it;
    # what the old parser made stays, unchanged, and is reported.
    assert {k: v for k, v in now.items() if k not in kept} == want
    assert all(now[k] == v for k, v in old.items())
    assert sorted(p.name for p in (origin_home / "raw").rglob("*") if p.is_file()) == raw_before
    code, st = cli("status", "--json")
    assert st["reparse"] == {"mirrors": 0, "bytes": 0, "events_kept": 2}
    code, report = cli("sync", "--json")
    assert "reparsed" not in report
    with origin.open_store(origin_home) as store:
        assert origin.search_events(store, next(v[3] for v in want.values() if v[1] == "assistant")[:40], limit=5)
