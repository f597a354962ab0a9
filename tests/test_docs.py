"""The docs stay true: invariants cited, commands and variables documented."""

from __future__ import annotations

import re

import adapters
import origin
from conftest import ROOT

SOURCE = (ROOT / "origin.py").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
CONFIG_DOC = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
JSON_DOC = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
TESTS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").glob("test_*.py"))


def test_every_invariant_is_defined_cited_in_code_and_tested():
    for n in range(1, 6):
        assert f"Invariant {n} (" in origin.__doc__
        cites = re.findall(rf"# Invariant {n} \(", SOURCE)
        assert cites, f"no code line cites invariant {n}"
        assert re.search(rf"def test_invariant_{n}_", TESTS), f"no test named test_invariant_{n}_…"


def test_every_cli_command_is_in_the_command_reference():
    parser = origin.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        assert f"origin {name}" in CLI_DOC, name


def test_every_environment_variable_is_documented():
    names = set(re.findall(r'"(ORIGIN_[A-Z_]+)"', SOURCE))
    names |= set(re.findall(r'"(ORIGIN_[A-Z_]+)"', (ROOT / "adapters.py").read_text()))
    names |= {v for a in adapters.ADAPTERS.values() for v in a.env_vars}  # the agents' own, from their table
    names.discard("ORIGIN_CRASH_AT")  # a test hook, documented under Development in docs/cli.md
    assert "ORIGIN_CRASH_AT" in CLI_DOC
    for n in names:
        assert n in CONFIG_DOC, n


def test_every_variable_an_adapter_declares_has_a_row_in_the_configuration_table():
    """Each agent's own variables (COPILOT_HOME, PI_CODING_AGENT_DIR…) are documented where people look."""
    table = CONFIG_DOC[CONFIG_DOC.index("# Configuration"):]
    table = table[:table.index("\n## ", 1)] if "\n## " in table[1:] else table
    declared = {v for a in adapters.ADAPTERS.values() for v in a.env_vars}
    assert {"COPILOT_HOME", "ORIGIN_QWEN_HOME", "PI_CODING_AGENT_DIR", "ORIGIN_AIDER_ROOTS"} <= declared
    missing = sorted(v for v in declared if f"\n| `{v}` |" not in table)
    assert not missing, missing


def test_readme_quick_start_has_the_two_commands():
    assert "make run" in README and "make test" in README


def test_the_readme_stays_short():
    assert len((ROOT / "README.md").read_bytes()) <= 20_000


def test_every_exit_code_has_a_row_in_the_command_reference():
    section = CLI_DOC[CLI_DOC.index("\n## Exit codes"):]
    section = section[:section.index("\n## ", 1)]
    for code in range(11):
        assert f"\n| {code} |" in section, code


def test_every_read_command_with_json_has_its_shape_documented():
    for name in ("status", "sync", "search", "timeline", "projects", "entries", "show", "remember", "correct",
                 "forget", "purge", "export", "preserved", "backup", "restore", "rebuild"):
        assert f"`origin {name}" in JSON_DOC, name


def test_links_between_docs_are_relative_and_resolve():
    for doc in [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert not target.startswith("/"), (doc.name, target)
            assert (doc.parent / target).exists(), (doc.name, target)


def test_sections_follow_the_documented_map():
    banners = re.findall(r"^# (.+?) #{3,}$", SOURCE, flags=re.M)
    doc_map = origin.__doc__.split("Section map")[1].split("\n\n")[1].split()
    # Each banner's first word appears in the map, in the same order.
    firsts = [b.split()[0] for b in banners]
    assert firsts == [w for w in doc_map if w in firsts]


def test_the_session_start_hook_table_has_a_row_per_agent_with_a_hook_and_names_the_others():
    """The hook each agent gets, from the adapters' table; an agent without one is said to have none."""
    section = CLI_DOC[CLI_DOC.index("\n### The session-start hook"):]
    section = section[:section.index("\n## ", 1)]
    rows = set(re.findall(r"^\| ([^|]+?) \| `", section, re.M))
    with_hook = {a.display for a in adapters.ADAPTERS.values() if a.hook is not None}
    assert rows == with_hook
    # Claude Code's memory files come from Claude Code, whose hook is in the table.
    without = {a.display for a in adapters.ADAPTERS.values() if a.hook is None and a.name != "claude-memory"}
    others = section[section.index("The other agents get no hook"):]
    missing = sorted(d for d in without if d not in others)
    assert not missing, missing
