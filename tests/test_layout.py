"""The layout rule of origin.py and adapters.py, checked mechanically.

The rule is stated in ARCHITECTURE.md ("The layout rule"): each module is in
banner-marked sections; a section may use only names defined in itself or in
the sections above it; the sections come in one fixed order (origin.py's is
ORDER below, the table at the top of ARCHITECTURE.md, and its docstring's
section map lists exactly the banners); no top-level name is bound twice; and
no name is looked up by a string (``globals()[...]``, ``sys.modules``, an
import of ``origin`` from inside the modules), which would hide a use from
this check.  adapters.py never imports origin.  These tests read the source
with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "origin.py"
ADAPTERS = ROOT / "adapters.py"

#: Every section origin.py may have, in the only order allowed.  A new
#: section is added here at its place in the table of ARCHITECTURE.md before it lands.
ORDER = ("Imports and constants", "Errors", "Helpers", "Secrets", "Storage", "Journals", "Index", "Store",
         "Ingest", "Entries", "Forget", "Backup", "Queries", "Access", "Replication", "MCP", "Admin",
         "Hub server", "Agent setup", "CLI")
#: adapters.py's sections: these first, in this order, then one per agent, and the registry last.
ADAPTERS_FIRST = ("Records", "Helpers", "Adapter base")
ADAPTERS_LAST = "Registry"

_RULE = "#" * 79
_TITLE = re.compile(r"^# (\S(?:.*\S)?) #+$")


def banners(lines: list[str], label: str = "origin.py") -> list[tuple[str, int]]:
    """Return (section name, first line number) for each banner, in order.

    A banner is three lines: a rule of 79 hashes, ``# Name ####…`` padded to
    79 columns, and the rule again.
    """
    found = []
    for i in range(len(lines) - 2):
        if lines[i] == _RULE and lines[i + 2] == _RULE:
            m = _TITLE.match(lines[i + 1])
            if m is None or len(lines[i + 1]) != 79:
                raise AssertionError(f"{label}:{i + 2}: a banner's middle line must be '# Name ###…' "
                                     f"79 columns wide, not {lines[i + 1]!r}")
            found.append((m.group(1), i + 1))
    return found


def section_map(doc: str) -> list[str]:
    """Return the names listed under 'Section map' in the module docstring."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Section map")), None)
    if start is None:
        raise AssertionError("the module docstring of origin.py has no 'Section map' paragraph")
    names: list[str] = []
    for line in lines[start + 1:]:
        if not line.strip():
            if names:
                break
            continue
        names += [n.strip() for n in re.split(r"\s{2,}", line.strip()) if n.strip()]
    return names


class _Section:
    """Maps a line number to the section holding it."""

    def __init__(self, marks: list[tuple[str, int]]):
        self.marks = marks

    def of(self, lineno: int) -> int:
        """Index of the section that holds lineno (-1: above the first banner)."""
        index = -1
        for i, (_name, start) in enumerate(self.marks):
            if start <= lineno:
                index = i
        return index

    def name(self, index: int) -> str:
        return self.marks[index][0] if index >= 0 else "(module docstring)"


def _targets(node: ast.AST) -> list[str]:
    """Names bound by an assignment target (a, (a, b), [a, *b])."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


def module_names(tree: ast.Module) -> dict[str, int]:
    """Return each module-level name and the line of its first definition."""
    defined: dict[str, int] = {}

    def bind(name: str, lineno: int) -> None:
        defined.setdefault(name, lineno)

    for stmt in tree.body:
        for node in _top_level(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(node.name, node.lineno)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    for n in _targets(t):
                        bind(n, node.lineno)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                for n in _targets(node.target):
                    bind(n, node.lineno)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bind((alias.asname or alias.name).split(".")[0], node.lineno)
    return defined


def _top_level(stmt: ast.stmt):
    """The statements that run at module level: stmt, and inside if/try/with."""
    yield stmt
    if isinstance(stmt, (ast.If, ast.Try, ast.With)):
        for block in ("body", "orelse", "finalbody"):
            for inner in getattr(stmt, block, []):
                yield from _top_level(inner)
        for handler in getattr(stmt, "handlers", []):
            for inner in handler.body:
                yield from _top_level(inner)


def _local_names(fn: ast.AST) -> set[str]:
    """Names a function or lambda binds itself (so they are not module names)."""
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    declared_global: set[str] = set()
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack += node.decorator_list  # the rest is a scope of its own
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Global):
            declared_global |= set(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        stack += list(ast.iter_child_nodes(node))
    return names - declared_global


def _comprehension_names(node: ast.AST) -> set[str]:
    return {n for gen in node.generators for n in _targets(gen.target)}


def uses(tree: ast.Module) -> list[tuple[str, int, int]]:
    """Return (name, line of use, line of the enclosing top-level statement) for
    every load of a name that is not bound locally where it is used.

    Annotations are skipped: the module postpones them, so they never run.
    """
    found: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, shadowed: frozenset[str], top: int) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                walk(d, shadowed, top)
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                walk(default, shadowed, top)
            inner = shadowed | _local_names(node)
            for stmt in node.body:
                walk(stmt, inner, top)
            return
        if isinstance(node, ast.Lambda):
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                walk(default, shadowed, top)
            walk(node.body, shadowed | _local_names(node), top)
            return
        if isinstance(node, ast.ClassDef):
            for part in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                walk(part, shadowed, top)
            for stmt in node.body:
                walk(stmt, shadowed, top)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = shadowed | _comprehension_names(node)
            for child in ast.iter_child_nodes(node):
                walk(child, inner, top)
            return
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                walk(node.value, shadowed, top)
            walk(node.target, shadowed, top)
            return
        if isinstance(node, ast.arg):
            return  # its annotation is never evaluated
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in shadowed:
            found.append((node.id, node.lineno, top))
        for child in ast.iter_child_nodes(node):
            walk(child, shadowed, top)

    for stmt in tree.body:
        walk(stmt, frozenset(), stmt.lineno)
    return found


def layering_violations(source: str, label: str = "origin.py") -> list[str]:
    """Return one line per use of a name defined in a later section."""
    lines = source.splitlines()
    sections = _Section(banners(lines, label))
    tree = ast.parse(source)
    defined = module_names(tree)
    problems = []
    for name, line, _top in uses(tree):
        if name not in defined:
            continue
        used_in, defined_in = sections.of(line), sections.of(defined[name])
        if defined_in > used_in:
            problems.append(f"{label}:{line}: section {sections.name(used_in)!r} uses {name!r}, defined at "
                            f"{label}:{defined[name]} in the later section {sections.name(defined_in)!r}: "
                            f"move {name!r} up into {sections.name(used_in)!r} or above, or move the use down")
    return problems


def _bindings(stmt: ast.stmt, report) -> dict[str, int]:
    """Names one top-level statement binds, with their lines.

    The branches of an ``if`` or a ``try`` are alternatives: a name bound in
    each of them is bound once.  Twice in one block is reported.
    """
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name: stmt.lineno}
    if isinstance(stmt, ast.Assign):
        return {n: stmt.lineno for t in stmt.targets for n in _targets(t)}
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return {n: stmt.lineno for n in _targets(stmt.target)}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0]: stmt.lineno for a in stmt.names}
    branches: list[list[ast.stmt]] = []
    if isinstance(stmt, ast.If):
        branches = [stmt.body, stmt.orelse]
    elif isinstance(stmt, ast.Try):
        branches = [stmt.body + stmt.orelse, *(h.body for h in stmt.handlers), stmt.finalbody]
    elif isinstance(stmt, ast.With):
        branches = [stmt.body]
    found: dict[str, int] = {}
    for block in branches:
        for name, line in _block_bindings(block, report).items():
            found.setdefault(name, line)
    return found


def _block_bindings(stmts: list[ast.stmt], report) -> dict[str, int]:
    seen: dict[str, int] = {}
    for stmt in stmts:
        for name, line in _bindings(stmt, report).items():
            if name in seen:
                report(name, seen[name], line)
            else:
                seen[name] = line
    return seen


def double_bindings(source: str, label: str = "origin.py") -> list[str]:
    """Return one line per top-level name bound a second time.

    The second binding silently replaces the first, and the layout check
    sees only the first: a use can then reach code in a later section.
    """
    problems: list[str] = []

    def report(name: str, first: int, again: int) -> None:
        problems.append(f"{label}:{again}: {name!r} is bound again at top level (first at {label}:{first}); "
                        "the second replaces the first: rename one, or delete the one no longer meant")

    _block_bindings(ast.parse(source).body, report)
    return problems


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_sys_modules(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def dynamic_lookups(source: str, label: str = "origin.py") -> list[str]:
    """Return one line per look-up of a module name by a string, or import of origin.

    Such a look-up can call a later section without naming it, so the
    layering check would not see it.  Writing ``globals()[name] = value``
    (how the module stand-ins put the real module in their place) is not a
    look-up, nor is reading a module's dunder (``sys.modules[m].__file__``).
    """
    tree = ast.parse(source)
    parent = _parents(tree)
    fix = "call the name itself, so tests/test_layout.py sees the use"
    problems: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "origin" for a in node.names) or \
                isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "origin":
            problems.append(f"{label}:{line}: imports origin from inside {label}: {fix}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name, args = node.func.id, node.args
            if name == "globals":
                up = parent.get(node)
                if not (isinstance(up, ast.Subscript) and isinstance(up.ctx, ast.Store)):
                    problems.append(f"{label}:{line}: reads globals(), a look-up by string: {fix}")
            elif name in ("eval", "exec") or name in ("vars", "locals") and not args:
                problems.append(f"{label}:{line}: {name}() looks names up by string: {fix}")
            elif name == "__import__" and args and isinstance(args[0], ast.Constant) and args[0].value == "origin":
                problems.append(f"{label}:{line}: imports origin from inside {label}: {fix}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "origin":
            problems.append(f"{label}:{line}: imports origin from inside {label}: {fix}")
        elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value) or \
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_modules(node.func.value):
            up = parent.get(node)
            if not (isinstance(up, ast.Attribute) and up.attr.startswith("__") and up.attr.endswith("__")):
                problems.append(f"{label}:{line}: reaches a module through sys.modules, a look-up by string: {fix}")
    return problems


def adapters_order_problems(source: str) -> list[str]:
    """Return what is wrong with the order of adapters.py's banners."""
    names = [n for n, _ in banners(source.splitlines(), "adapters.py")]
    problems = []
    if tuple(names[:len(ADAPTERS_FIRST)]) != ADAPTERS_FIRST or names[-1:] != [ADAPTERS_LAST]:
        problems.append(f"adapters.py's sections are {names}: they start with {list(ADAPTERS_FIRST)} and end "
                        f"with {ADAPTERS_LAST!r} (one section per agent between them)")
    if len(set(names)) != len(names):
        problems.append(f"a section of adapters.py has two banners: {names}")
    return problems


def order_problems(source: str) -> list[str]:
    """Return what is wrong with the banners' names and order and the section map."""
    names = [n for n, _ in banners(source.splitlines())]
    problems = []
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        problems.append(f"sections {unknown} are not in the section order of ARCHITECTURE.md {list(ORDER)}: "
                        "add a new section to ORDER in tests/test_layout.py at its place")
    known = [n for n in names if n in ORDER]
    if known != sorted(known, key=ORDER.index):
        problems.append(f"the banners come in the order {known}; ARCHITECTURE.md wants "
                        f"{sorted(known, key=ORDER.index)}")
    if len(set(names)) != len(names):
        problems.append(f"a section has two banners: {names}")
    mapped = section_map(ast.get_docstring(ast.parse(source)) or "")
    if mapped != names:
        problems.append(f"the docstring's section map lists {mapped} but the banners are {names}: "
                        "make the map in origin.py's docstring list every banner, in order")
    return problems


# -- origin.py and adapters.py as they are -----------------------------------

MODULES = {"origin.py": SOURCE, "adapters.py": ADAPTERS}


@pytest.mark.parametrize("label", MODULES)
def test_every_section_uses_only_names_from_itself_or_the_sections_above(label):
    problems = layering_violations(MODULES[label].read_text(encoding="utf-8"), label)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("label", MODULES)
def test_no_top_level_name_is_bound_twice(label):
    problems = double_bindings(MODULES[label].read_text(encoding="utf-8"), label)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("label", MODULES)
def test_no_name_is_looked_up_by_a_string_and_neither_module_imports_origin(label):
    problems = dynamic_lookups(MODULES[label].read_text(encoding="utf-8"), label)
    assert not problems, "\n".join(problems)


def test_banners_follow_the_style_order_and_match_the_docstring_section_map():
    problems = order_problems(SOURCE.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_adapters_sections_start_with_the_shared_parts_and_end_with_the_registry():
    problems = adapters_order_problems(ADAPTERS.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_the_section_order_is_the_table_of_architecture_md():
    doc = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| ([A-Z][A-Za-z]*(?: [a-z]+)*) \|", doc.split("\n## ", 1)[0], flags=re.M)
    assert tuple(table) == ORDER
    assert "## The layout rule" in doc


def test_the_checks_see_every_section_and_most_module_names():
    source = SOURCE.read_text(encoding="utf-8")
    names = [n for n, _ in banners(source.splitlines())]
    assert names[0] == "Imports and constants" and names[-1] == "CLI" and len(names) >= 11
    tree = ast.parse(source)
    defined = module_names(tree)
    for name in ("main", "Store", "OriginError", "search", "now_ms", "__version__"):
        assert name in defined
    assert len({n for n, _line, _top in uses(tree) if n in defined}) > 200
    adapters_source = ADAPTERS.read_text(encoding="utf-8")
    assert len(banners(adapters_source.splitlines(), "adapters.py")) >= 10
    adapters_tree = ast.parse(adapters_source)
    adapters_defined = module_names(adapters_tree)
    assert len({n for n, _line, _top in uses(adapters_tree) if n in adapters_defined}) > 100


def test_adapters_never_imports_origin():
    tree = ast.parse(ADAPTERS.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert "origin" not in imported


# -- the checks themselves, on small modules ---------------------------------


def _banner(name: str) -> str:
    return f"{_RULE}\n{('# ' + name + ' ').ljust(79, '#')}\n{_RULE}\n"


def _module(doc_map: str, *sections: tuple[str, str]) -> str:
    body = "".join(_banner(name) + code + "\n" for name, code in sections)
    return f'"""Demo.\n\nSection map (a section calls only sections above it):\n\n    {doc_map}\n"""\n\n{body}'


def test_a_call_into_a_later_section_is_reported_with_name_sections_and_lines():
    src = _module("Helpers   Storage   Queries",
                  ("Helpers", "def clock():\n    return 1\n"),
                  ("Storage", "def list_entries(limit):\n    return _check_limit(limit) + clock()\n"),
                  ("Queries", "def _check_limit(limit):\n    return limit\n"))
    problems = layering_violations(src)
    assert len(problems) == 1
    line = src.splitlines().index("    return _check_limit(limit) + clock()") + 1
    defined = src.splitlines().index("def _check_limit(limit):") + 1
    assert problems[0].startswith(f"origin.py:{line}: section 'Storage' uses '_check_limit', "
                                  f"defined at origin.py:{defined} in the later section 'Queries'")


@pytest.mark.parametrize("code", [
    "def f(later):\n    return later\n",  # a parameter
    "def f():\n    later = 1\n    return later\n",  # a local
    "def f():\n    return [later for later in range(3)]\n",  # a comprehension variable
    "def f():\n    from os import path as later\n    return later\n",  # a local import
    "def f(x: later) -> later:\n    return x\n",  # annotations never run
    "f = lambda later: later\n",
    "def f():\n    try:\n        pass\n    except ValueError as later:\n        return later\n",
])
def test_a_name_bound_where_it_is_used_is_not_a_use_of_the_later_section(code):
    src = _module("Helpers   Queries", ("Helpers", code), ("Queries", "later = 2\n"))
    assert layering_violations(src) == []


@pytest.mark.parametrize("code", [
    "X = later\n",  # at module level
    "def f(x=later):\n    return x\n",  # a default value runs at definition time
    "@later\ndef f():\n    pass\n",  # a decorator
    "class C(later):\n    pass\n",  # a base class
    "def f():\n    def g():\n        return later()\n    return g\n",  # a nested function
    "def f():\n    global later\n    later = 3\n    return later\n",  # declared global
    "class C:\n    def m(self):\n        return later\n",  # a method
])
def test_a_later_name_is_found_wherever_it_is_used(code):
    src = _module("Helpers   Queries", ("Helpers", code), ("Queries", "def later():\n    pass\n"))
    problems = layering_violations(src)
    assert problems and all("uses 'later'" in p for p in problems)


def test_a_new_section_in_style_order_is_accepted_and_out_of_order_is_refused():
    ok = _module("Queries   Access   MCP", ("Queries", "a = 1\n"), ("Access", "b = a\n"), ("MCP", "c = b\n"))
    assert order_problems(ok) == [] and layering_violations(ok) == []
    swapped = _module("Access   Queries", ("Access", "a = 1\n"), ("Queries", "b = a\n"))
    assert any("ARCHITECTURE.md wants ['Queries', 'Access']" in p for p in order_problems(swapped))
    stranger = _module("Queries   Plugins", ("Queries", "a = 1\n"), ("Plugins", "b = a\n"))
    assert any("['Plugins'] are not in the section order" in p for p in order_problems(stranger))


def test_a_section_map_that_differs_from_the_banners_is_refused():
    missing = _module("Helpers", ("Helpers", "a = 1\n"), ("Queries", "b = a\n"))
    assert any("section map lists ['Helpers'] but the banners are ['Helpers', 'Queries']" in p
               for p in order_problems(missing))
    two_lines = _module("Helpers\n    Queries", ("Helpers", "a = 1\n"), ("Queries", "b = a\n"))
    assert order_problems(two_lines) == []


@pytest.mark.parametrize("code", [
    "def f():\n    pass\n\n\ndef f():\n    pass\n",  # two defs of one name
    "X = 1\nX = 2\n",
    "class C:\n    pass\n\n\ndef C():\n    pass\n",
    "import os\nos = 1\n",
    "if True:\n    def f():\n        pass\n\n    def f():\n        pass\n",  # twice in one branch
])
def test_a_name_bound_twice_at_top_level_is_reported_at_its_second_binding(code):
    src = _module("Helpers", ("Helpers", code))
    problems = double_bindings(src)
    assert len(problems) == 1 and "is bound again at top level" in problems[0]
    assert problems[0].startswith("origin.py:")


def test_the_second_of_two_defs_is_the_line_reported():
    src = _module("Helpers   Queries", ("Helpers", "def _parse_mirror():\n    return 1\n"),
                  ("Queries", "def _parse_mirror():\n    return 2\n"))
    lines = src.splitlines()
    first, second = [i + 1 for i, line in enumerate(lines) if line.startswith("def _parse_mirror")]
    assert double_bindings(src) == [
        f"origin.py:{second}: '_parse_mirror' is bound again at top level (first at origin.py:{first}); "
        "the second replaces the first: rename one, or delete the one no longer meant"]


@pytest.mark.parametrize("code", [
    "if TYPE_CHECKING:\n    import types\nelse:\n    types = None\n",  # alternatives
    "try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n",
    "X: int\nX = 1\n",  # an annotation binds nothing
    "X = [1]\nX += [2]\n",  # an update, not a new binding
    "def f():\n    f = 1\n    f = 2\n    return f\n",  # locals
])
def test_alternatives_updates_and_locals_are_not_double_bindings(code):
    assert double_bindings(_module("Helpers", ("Helpers", code))) == []


@pytest.mark.parametrize("code, says", [
    ("def f(name):\n    return globals()[name]()\n", "reads globals()"),
    ("def f(name):\n    return globals().get(name)\n", "reads globals()"),
    ("def f():\n    import origin\n    return origin.later()\n", "imports origin"),
    ("def f():\n    from origin import later\n    return later()\n", "imports origin"),
    ("def f():\n    return __import__('origin').later()\n", "imports origin"),
    ("def f():\n    return importlib.import_module('origin').later()\n", "imports origin"),
    ("def f(name):\n    return getattr(sys.modules[__name__], name)()\n", "through sys.modules"),
    ("def f():\n    return sys.modules.get('origin').later()\n", "through sys.modules"),
    ("def f(text):\n    return eval(text)\n", "eval() looks names up"),
    ("def f():\n    return vars()['later']()\n", "vars() looks names up"),
])
def test_a_look_up_by_string_is_reported(code, says):
    src = _module("Helpers   Queries", ("Helpers", code), ("Queries", "def later():\n    pass\n"))
    problems = dynamic_lookups(src)
    assert len(problems) == 1 and says in problems[0], problems


@pytest.mark.parametrize("code", [
    "def f(name, value):\n    globals()[name] = value\n",  # a stand-in putting the module in its place
    "def f():\n    return sys.modules[__name__].__file__\n",  # a module's own dunder
    "def f(obj):\n    return vars(obj)\n",  # an object's attributes, not the module's names
    "CODE = 'from origin import main'\n",  # text, not an import
])
def test_writes_dunders_and_text_are_not_look_ups(code):
    assert dynamic_lookups(_module("Helpers", ("Helpers", code))) == []


def test_the_rules_are_applied_to_adapters_py_with_its_own_name():
    src = _module("Records   Helpers", ("Records", "def record():\n    return helper()\n"),
                  ("Helpers", "def helper():\n    pass\n\n\ndef helper():\n    pass\n"))
    assert layering_violations(src, "adapters.py")[0].startswith("adapters.py:")
    assert double_bindings(src, "adapters.py")[0].startswith("adapters.py:")
    assert adapters_order_problems(src) == [
        "adapters.py's sections are ['Records', 'Helpers']: they start with ['Records', 'Helpers', "
        "'Adapter base'] and end with 'Registry' (one section per agent between them)"]
