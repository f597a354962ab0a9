"""The docs stay true: invariants cited, commands and variables documented."""

from __future__ import annotations

import ast
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


def _defined_names(path) -> tuple[set[str], dict[str, set[str]]]:
    """The names a module binds anywhere (functions, classes, assignments, fields), and each class's members."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        if isinstance(node, ast.ClassDef):
            own = members.setdefault(node.name, set())
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    own.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    own.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    own.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return names, members


def test_every_name_a_recipe_cites_exists_in_the_code():
    """The recipes of ARCHITECTURE.md name real tables, functions and tests, so they stay true."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    recipes = text[text.index("\n## Recipes\n"):]
    recipes = recipes[:recipes.index("\n## ", 1)] if "\n## " in recipes[1:] else recipes
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for path in [ROOT / "origin.py", ROOT / "adapters.py", *sorted((ROOT / "tests").glob("*.py"))]:
        n, m = _defined_names(path)
        names |= n
        for cls, own in m.items():
            members.setdefault(cls, set()).update(own)
    checked, missing = [], []
    for name in re.findall(r"`([^`]+)`", recipes):
        # Only names: not paths (tests/helpers.py), commands, options or patterns such as `cmd_<name>`.
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", name) or name.endswith((".py", ".md")):
            continue
        head, _, attr = name.partition(".")
        if attr and head in members:
            found = attr in members[head]
        else:  # a name, or an attribute of a variable (`hub.index`)
            found = (attr or head) in names
        (checked if found else missing).append(name)
    assert not missing, f"the recipes cite names the code does not define: {missing}"
    assert {"MCP_TOOLS", "HUB_ROUTES", "build_parser", "Hub.dispatch", "ADAPTERS"} <= set(checked)


def test_the_readme_quick_start_is_install_setup_ask_and_every_command_it_shows_exists():
    start = README.index("\n## Quick start\n")
    quick = README[start:README.index("\n## ", start + 1)]
    steps = [line.split()[:2] for line in quick.split("```")[1].strip().splitlines()]
    assert steps == [["pipx", "install"], ["origin", "setup"], ["origin", "ask"]]
    parser = origin.build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)
    shown = set(re.findall(r"(?:^|[\s`$])origin ([a-z]+)\b", README, flags=re.M))
    assert {"setup", "ask", "search", "forget", "purge", "serve", "push"} <= shown
    assert not shown - commands, shown - commands


def test_the_changelog_opens_with_unreleased_and_names_only_real_commands_and_options():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (.+)$", changelog, flags=re.M)[0].startswith("Unreleased")
    parser = origin.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    cited = [span.split() for span in re.findall(r"`origin ([^`]+)`", changelog.replace("\n  ", " "))]
    assert len(cited) > 20
    for words in cited:
        assert words[0] in commands, words
        sub = commands[words[0]]
        parsers = [sub, *(p for a in sub._actions if isinstance(getattr(a, "choices", None), dict)
                          for p in a.choices.values())]
        known = {s for p in parsers for a in p._actions for s in a.option_strings}
        for option in (w for w in words if w.startswith("--")):
            assert option in known, (words, option)
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
