"""What a CLI call loads before it starts (issue 13 item 19).

Every call used to import the whole program: the adapters, TOML, thread
pools, dataclasses and a parser of every command.  These tests run the real
entry point in a fresh interpreter and check which modules it imported;
how long that takes is measured by ``make bench``, never here.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import adapters
import origin

ROOT = Path(__file__).resolve().parent.parent

#: Loaded by no command that does not need them.
HEAVY = {"adapters", "tomllib", "concurrent.futures", "dataclasses", "inspect", "typing", "zstandard", "mcp",
         "anyio", "asyncio", "threading", "secrets", "hashlib", "hmac", "traceback", "unicodedata",
         # pathlib brings urllib.parse and ipaddress; argparse's help formatter
         # asks shutil for the terminal's width, and shutil brings bz2 and lzma.
         "pathlib", "urllib.parse", "ipaddress", "shutil", "bz2", "lzma"}


def modules_after(argv: list[str], origin_home: Path) -> tuple[set[str], str]:
    """Run origin's main(argv) in a fresh Python; return the modules it imported and its stdout."""
    probe = ("import sys\n"
             "before = set(sys.modules)\n"
             "from origin import main\n"
             f"code = main({argv!r})\n"
             "sys.stdout.flush()\n"
             "sys.stderr.write(repr(sorted(set(sys.modules) - before)))\n"
             "sys.exit(code)\n")
    env = {**os.environ, "ORIGIN_HOME": str(origin_home), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return set(ast.literal_eval(p.stderr.strip().splitlines()[-1])), p.stdout


def test_version_imports_nothing_beyond_the_interpreter_start(origin_home):
    loaded, out = modules_after(["--version"], origin_home)
    assert out == f"origin {origin.__version__}\n"
    assert loaded <= {"origin", "__future__", "errno", "math"}, sorted(loaded)


def test_a_search_loads_neither_adapters_nor_toml_nor_threads_nor_every_parser(claude_root, origin_home):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    loaded, out = modules_after(["search", "Demo", "--limit", "3"], origin_home)
    assert "Demo" in out
    assert not loaded & HEAVY, sorted(loaded & HEAVY)
    assert {"sqlite3", "argparse"} <= loaded


def test_every_command_is_listed_by_help_and_each_runs_with_its_own_parser(capsys):
    full = origin.build_parser()
    commands = full._subparsers._group_actions[0].choices
    assert {"sync", "status", "search", "timeline", "show", "remember", "forget", "mcp", "setup"} <= set(commands)
    with pytest.raises(SystemExit):
        origin.main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in commands)
    for name in commands:
        one = origin.build_parser([name])._subparsers._group_actions[0].choices
        assert list(one) == [name]
        # The command's own options are all there.
        assert {a.dest for a in one[name]._actions} == {a.dest for a in commands[name]._actions}


def test_a_mistyped_command_is_answered_with_the_list_of_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        origin.main(["serch", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serch'" in err and "search" in err and "timeline" in err


def test_the_cli_knows_every_adapter_by_name_without_importing_them():
    assert origin.SOURCES == tuple(sorted(adapters.ADAPTERS)), "add the new adapter's name to origin.SOURCES"


def test_a_search_of_a_sound_store_opens_no_index_writer_and_compiles_no_secret_pattern(claude_root, origin_home,
                                                                                      monkeypatch, capsys):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    # Each part of the index is checked on the reader itself; a writer
    # (BEGIN IMMEDIATE on a part) is opened only to put a part right.
    monkeypatch.setattr(origin, "_open_index", lambda *a: pytest.fail("a sound index was opened for writing"))
    compiled = []
    real_compile = origin.re.compile
    monkeypatch.setattr(origin.re, "compile", lambda p, f=0: compiled.append(p) or real_compile(p, f))
    with origin.open_store(origin_home) as s:
        hits = origin.search_events(s, "Demo", limit=5)
        assert hits
        origin.readout(hits)
    # The snippets end with "…" and name no key word: no secret pattern is
    # compiled to look at them (each costs a millisecond or more).
    secret_sources = {p.regex._source for p in origin.SECRET_PATTERNS} | {
        origin._CUT_KEY._source, origin._CUT_NAMED._source}
    assert not secret_sources & set(compiled), [p[:40] for p in secret_sources & set(compiled)]


def test_a_damaged_index_part_is_still_reported_by_a_search(claude_root, origin_home):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
    (origin_home / origin.INDEX_DIR / origin.EVENT_INDEXES["tool"][0]).write_bytes(b"not a database" * 512)
    with origin.open_store(origin_home) as s, pytest.raises(origin.StoreError, match="delete"):
        origin.search_events(s, "Demo", limit=5)


def test_index_uris_escape_what_sqlite_would_read_as_uri_syntax(tmp_path):
    home = tmp_path / "a dir?#%&=x"
    with origin.open_store(home) as s:
        assert s.reader.execute("SELECT count(*) FROM ix_message.mark").fetchone()[0] >= 1
    assert origin._uri("/x y/a?b#c%d", mode="ro") == "file:/x%20y/a%3Fb%23c%25d?mode=ro"
