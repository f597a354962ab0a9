"""Deterministic parsers for the session logs of coding agents.

One adapter per agent turns the bytes an agent wrote into records Origin can
store.  An adapter never calls a model, never reads the clock, never uses
randomness and never touches the network: the same line in the same context
always gives the same records.  It also never imports ``origin`` (``origin``
imports it), so there is no import cycle.

The contract, used by ``origin``'s ingest engine:

* ``discover(env, home)`` lists the files (or databases) the agent keeps, as
  ``SourceFile`` values.  It reads directory listings and small sidecar files,
  never credentials (``auth.json``, ``config.toml``, ``credentials.json``,
  ``cursorAuth/*``): what is read is allow-listed.
* ``parse(line, ctx)`` turns one complete line of a mirror into a list of
  ``Record`` (one future event each) and ``SessionInfo`` (facts about a
  session).  It raises ``ParseError`` for a line it cannot read; ingest counts
  the error and goes on.  ``ctx.state`` is a small JSON-able dict the adapter
  may use to carry facts from line to line (a thread id, a half-joined
  message); ingest persists it with the file's cursor, in the same
  transaction, so a sync that stops anywhere resumes exactly.
* Adapters of agents that keep sessions in SQLite (``kind = "db"``) also have
  ``export(file, known, now_ms)``: it opens the database read-only and yields
  one JSON line per new or changed finished row; ingest appends those lines to
  the source's mirror and parses them like any log line.

The module ends with the registry ``ADAPTERS``.
"""

from __future__ import annotations

import base64
import contextvars
import datetime as _dt
import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

###############################################################################
# Records #####################################################################
###############################################################################

#: Event kinds.  Only these four (plus ``meta``) exist.
KINDS = ("message", "tool_call", "tool_result", "meta")

#: Tool text is cut to these lengths before it is stored and indexed.
TOOL_CALL_MAX = 2000
TOOL_RESULT_MAX = 4000


class ParseError(ValueError):
    """A line that cannot be read: counted and skipped, never fatal."""


class UnreadableSource(Exception):
    """An agent's store could not be read this time; the message says why."""


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file (or database) an agent keeps, as discovery found it.

    ``rel`` is the path relative to the agent's root, posix style, and is what
    the mirror is named after.  ``compressed`` is ``"zstd"`` for a file whose
    magic bytes say so.  ``meta`` holds small facts discovery read from
    sidecars (a Grok session's ``summary.json``, a Cursor workspace folder).
    """

    path: str
    rel: str
    compressed: str | None = None
    kind: str = "log"  # "log" (append-only text) or "db" (exported rows)
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Record:
    """One normalised conversation event, before it is stored.

    ``id`` is the native id, unique within the agent; the stored event id is
    ``<source>:<id>``.  It must come from the content (a uuid, a thread id
    plus an ordinal), never from the file's path, so a file that is moved,
    compressed or rewritten yields the same ids.  ``ts`` is epoch
    milliseconds.  ``line``/``offset``/``span`` override the locator when an
    event is made of several lines (joined chunks): the first line's number
    and byte offset, and how many lines it covers.  ``project`` names the
    project of an event whose ``cwd`` is unknown (the project of a known cwd
    is its last segment).
    """

    id: str
    session: str
    kind: str
    role: str = ""
    text: str = ""
    ts: int | None = None
    indexed: bool = True
    cwd: str | None = None
    branch: str | None = None
    model: str | None = None
    ts_approx: bool = False
    line: int | None = None
    offset: int | None = None
    span: int = 1
    project: str | None = None


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """Facts about a session that are not events: title, parent, version.

    ``title_rank`` orders title sources: a later title replaces an earlier one
    only if its rank is at least as high (a title the user typed beats one a
    model generated, which beats a summary line).
    """

    session: str
    title: str | None = None
    title_rank: int = 0
    cwd: str | None = None
    branch: str | None = None
    model: str | None = None
    agent_version: str | None = None
    parent: str | None = None
    #: The native id of the event whose conversation the title sums up,
    #: when the line names it (a Claude summary's ``leafUuid``, which may lie
    #: in another session's file): the title goes when that is forgotten.
    about: str | None = None


@dataclass(slots=True)
class Context:
    """What an adapter knows about the line it is given."""

    file: SourceFile
    state: dict
    lineno: int = 0  # 1-based line number in the mirror
    offset: int = 0  # byte offset of the line in the mirror
    mtime_ms: int | None = None  # the source file's mtime, for approximate times


###############################################################################
# Helpers #####################################################################
###############################################################################


def parse_ts(value: Any) -> int | None:
    """Return epoch milliseconds for an ISO string, epoch seconds or ms."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        # Seconds until the year 33658; anything larger is milliseconds.
        v = float(value)
        ms = v if abs(v) >= 1e12 else v * 1000.0
        if abs(ms) > 253402300799999:  # past year 9999
            return None
        return int(ms)
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        if s.lstrip("-").replace(".", "", 1).isdigit():
            try:
                return parse_ts(float(s))
            except ValueError:
                return None
        if s.endswith("Z") or s.endswith("z"):
            s = s[:-1] + "+00:00"
        # Python 3.11 accepts up to microseconds; trim nanoseconds.
        if "." in s:
            head, _, rest = s.partition(".")
            digits = ""
            i = 0
            while i < len(rest) and rest[i].isdigit():
                digits += rest[i]
                i += 1
            s = head + "." + (digits[:6] or "0") + rest[i:]
        try:
            d = _dt.datetime.fromisoformat(s)
        except ValueError:
            return None
        if d.tzinfo is None:
            d = d.replace(tzinfo=_dt.timezone.utc)
        try:
            return int(d.timestamp() * 1000)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def short_hash(*parts: str | bytes, n: int = 16) -> str:
    """Return a stable hex digest of the parts, for synthesised ids."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass") if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()[:n]


def truncate(text: str, limit: int) -> str:
    """Cut text to limit characters, marking the cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def load_json_line(line: str) -> Any:
    """Parse one JSON line, turning every failure into ParseError."""
    try:
        return json.loads(line)
    except RecursionError:
        raise ParseError("JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and the int-digits limit
        raise ParseError(f"not JSON: {str(e)[:120]}") from None


def last_segment(path: str | None) -> str | None:
    """Return the last segment of a posix or Windows path (the project name)."""
    if not path or not isinstance(path, str):
        return None
    p = path.replace("\\", "/").rstrip("/")
    seg = p.rsplit("/", 1)[-1]
    return seg or None


def env_dirs(env: Mapping[str, str], var: str, defaults: Iterable[Path]) -> list[Path]:
    """Return the directories named by an env var, else the defaults.

    The value is a comma-separated list; each item is stripped, so
    ``"/a, /b"`` names /a and /b, and ``~`` is expanded.  Discovery and
    ``origin setup`` both read the agents' variables through this one helper.
    """
    value = env.get(var)
    if value:
        dirs = [Path(os.path.expanduser(v.strip())) for v in value.split(",") if v.strip()]
        if dirs:
            return dirs
    return list(defaults)


def sniff_zstd(path: str) -> bool:
    """True when a file starts with the zstd frame magic bytes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x28\xb5\x2f\xfd"
    except OSError:
        return False


def _str(value: Any) -> str | None:
    """Return value when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def _dict(value: Any) -> dict:
    """Return value when it is a JSON object, else an empty dict."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    """Return value when it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    """Return value when it is a plain integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ts(value: Any) -> int | None:
    """Return epoch ms like parse_ts, but None for absurd numbers."""
    try:
        return parse_ts(value)
    except (OverflowError, ValueError):  # float() of a 400-digit integer
        return None


def _compact(value: Any) -> str:
    """Render a JSON value as compact one-line JSON (strings stay bare)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _unjson(value: Any) -> Any:
    """Decode a string holding a JSON object or array; else return it as is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _is_image(item: dict) -> bool:
    """True for a content block that carries an image."""
    kind = item.get("type")
    return isinstance(kind, str) and "image" in kind


def _plain(value: Any, depth: int = 0) -> str:
    """Render message or tool content as text, images as "[image]".

    An image block is never dumped (its JSON would carry base64 data), and
    rendering stops at a fixed depth, so hostile nesting is cheap.
    """
    if value is None or depth > 20:
        return ""
    if isinstance(value, str):
        return "[image]" if value.startswith("data:image/") else value
    if isinstance(value, list):
        parts = (_plain(v, depth + 1) for v in value)
        return "\n".join(p for p in parts if p)
    if isinstance(value, dict):
        if _is_image(value):
            return "[image]"
        for key in ("text", "content", "output"):
            if key in value:
                return _plain(value[key], depth + 1)
        return _compact(value)
    return _compact(value)


def _tool_call_text(name: Any, arguments: Any) -> str:
    """Return the searchable text of a tool call: name, then its input."""
    args = _compact(_unjson(arguments)) if arguments not in (None, "", {}) else ""
    return truncate(f"{_str(name) or 'tool'} {args}".strip(), TOOL_CALL_MAX)


def _output_text(value: Any) -> str:
    """Return a tool output as readable text.

    Outputs are often JSON inside a string (``{"output": …, "metadata": …}``
    from a shell tool); the inner output text reads better than the JSON.
    """
    value = _unjson(value)
    if isinstance(value, dict) and isinstance(value.get("output"), str):
        return value["output"]
    return _plain(value)


def clean_text(text: str) -> str:
    """Make text storable as UTF-8: a lone UTF-16 surrogate becomes U+FFFD.

    A high and low surrogate that sit side by side are joined into the one
    character they encode.  The one helper for this in Origin: parsed
    records, entries and arguments all pass through it.
    """
    if not text or text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


#: A JSON escape of a UTF-16 surrogate: only lines holding one need scrubbing.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def scrub_surrogates(value: Any) -> Any:
    """Return a JSON value with lone surrogates replaced in every string."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [scrub_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): scrub_surrogates(v) for k, v in value.items()}
    return value


def _load_object(line: str) -> dict:
    """Parse a line that must hold a JSON object, free of lone surrogates.

    Strings go from the line into records and into the parse state, both
    stored as UTF-8, so a lone surrogate is replaced here, once.
    """
    obj = load_json_line(line)
    if not isinstance(obj, dict):
        raise ParseError("line is not a JSON object")
    return scrub_surrogates(obj) if SURROGATE_ESCAPE.search(line) else obj


def _guarded(parse):
    """Wrap a parse method so it only ever raises ParseError.

    A line can be hostile in ways no schema check anticipates (nesting that
    exhausts the stack, numbers too large for a float, types swapped deep
    inside); one bad line must cost one counted error, never the sync.
    """

    @functools.wraps(parse)
    def wrapper(self, line: str, ctx: Context) -> list:
        try:
            return parse(self, line, ctx)
        except ParseError:
            raise
        except RecursionError:
            raise ParseError("record nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - see the docstring
            raise ParseError(f"unreadable record ({type(e).__name__})") from None

    return wrapper


def _read_json_file(path: Path, limit: int = 1 << 20) -> Any:
    """Return a small sidecar JSON file's value, or None if unreadable."""
    _look(path)
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return None
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def _labelled(roots: list[Path], home: Path) -> list[tuple[str, Path]]:
    """Pair each distinct existing root with the prefix its rel names get.

    One root needs no prefix.  With several, each file's rel starts with the
    root's path under home (".claude/"), or a hash of the path for a root
    elsewhere, so rels stay unique and readable.
    """
    seen, found = set(), []
    for root in roots:
        try:
            key = root.resolve()
            if not _is_dir(root) or key in seen:
                continue
        except OSError:
            continue
        seen.add(key)
        found.append(root)
    if len(roots) < 2:
        return [("", r) for r in found]
    out = []
    for root in found:
        try:
            label = root.relative_to(home).as_posix()
        except ValueError:
            label = short_hash(str(root), n=8)
        out.append((label + "/", root))
    return out


def _rel(prefix: str, root: Path, path: Path) -> str:
    """Return a file's rel: the prefix plus its posix path under root."""
    base, full = str(root), str(path)
    if full.startswith(base + os.sep):
        return prefix + full[len(base) + 1 :].replace(os.sep, "/")
    return prefix + path.relative_to(root).as_posix()


#: Title ranks shared by the adapters: typed by the user, named by the agent
#: or a model, a summary line, the first prompt.
RANK_MANUAL, RANK_GENERATED, RANK_SUMMARY, RANK_PROMPT = 3, 2, 1, 0


def _title_of(value: Any, rank: int) -> tuple[str, int] | None:
    """Return (title, rank) for a non-empty title string."""
    s = " ".join(value.split()) if isinstance(value, str) else ""
    return (truncate(s, 200), rank) if s else None


def _subdirs(path: Path) -> list[Path]:
    """Return the sub-folders of path, sorted; none if it cannot be listed."""
    return _listing(path, lambda e: e.is_dir())


def _files(path: Path, suffix: str) -> list[Path]:
    """Return the regular files of path ending in suffix, sorted."""
    return _listing(path, lambda e: e.name.endswith(suffix) and e.is_file())


def _split_listing(path: Path, suffix: str) -> tuple[list[str], list[Path]]:
    """Return (names of regular files ending in suffix, sub-folders), sorted.

    One scandir for both: this is the hot path of a sync with nothing new.
    """
    _look(path)
    files, folders = [], []
    try:
        with os.scandir(path) as it:
            for e in it:
                if _safe(lambda x: x.is_dir(), e):
                    folders.append(e.name)
                elif e.name.endswith(suffix) and _safe(lambda x: x.is_file(), e):
                    files.append(e.name)
    except OSError as e:
        _unreadable(path, e)
        return [], []
    return sorted(files), [path / n for n in sorted(folders)]


def _listing(path: Path, keep) -> list[Path]:
    """List a folder with scandir: the entry type needs no stat per file,
    which keeps a sync of thousands of unchanged files cheap."""
    _look(path)
    try:
        with os.scandir(path) as it:
            names = sorted(e.name for e in it if _safe(keep, e))
    except OSError as e:
        _unreadable(path, e)
        return []
    return [path / n for n in names]


def _safe(keep, entry) -> bool:
    """Apply a check to a path or a directory entry; a failure is noted, and False."""
    try:
        return bool(keep(entry))
    except OSError as e:
        _unreadable(getattr(entry, "path", entry), e)
        return False


# The discovery guard ----------------------------------------------------------
#
# A folder or file discovery may not read (another user's session folder,
# a mount that went away) is reported and skipped; everything else is still
# found.  Every check discovery makes on a path goes through ``_is_dir``,
# ``_is_file`` or the listings above, which note such a path in the list of
# the discovery that runs (``discover_guarded``); ``discover_guarded`` also
# catches what an adapter let escape, so no adapter can lose its whole
# discovery to one path.

_UNREADABLE: contextvars.ContextVar[list | None] = contextvars.ContextVar("origin_unreadable", default=None)
#: Project folders Origin already knows from the sessions it holds, given to
#: the discovery of an agent that keeps its logs in the projects (Aider).
_FOLDERS: contextvars.ContextVar[tuple] = contextvars.ContextVar("origin_folders", default=())
#: When a caller asks (``discover_guarded(..., looked=set())``), every folder
#: discovery lists and every path it checks or reads, so that the caller can
#: tell later, by stat alone, that a discovery would find the same files.
#: A discovery that stopped at a bound adds LOOK_CUT: it saw only part.
_LOOKED: contextvars.ContextVar[set | None] = contextvars.ContextVar("origin_looked", default=None)
LOOK_CUT = ""


def _look(path: Path | str) -> None:
    """Note a path discovery lists, checks or reads (for ``looked``)."""
    sink = _LOOKED.get()
    if sink is not None:
        sink.add(str(path))


def _unreadable(path: Path | str, e: OSError) -> None:
    """Note a path discovery may not read; a path that vanished is no problem."""
    sink = _UNREADABLE.get()
    if sink is None or isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return
    why = f"cannot be read ({e.strerror or type(e).__name__}); everything else was archived"
    if (str(path), why) not in sink:
        sink.append((str(path), why))


def _is_dir(path: Path) -> bool:
    _look(path)
    return _safe(Path.is_dir, path)


def _is_file(path: Path) -> bool:
    _look(path)
    return _safe(Path.is_file, path)


def discover_guarded(adapter: "Adapter", env: Mapping[str, str], home: Path,
                     folders: Iterable[str] = (), looked: set | None = None) -> tuple[list, list[tuple[str, str]]]:
    """Run an adapter's discovery; return (files found, unreadable paths with why).

    The one guard every adapter's discovery runs under: a path it may not
    read costs that path, reported, never the rest.  ``folders`` are the
    project folders Origin knows from the sessions it holds, for an agent
    whose logs live in the projects themselves (``in_projects``: Aider).
    ``looked``, when given, receives every path the discovery looked at
    (see ``_LOOKED``).
    """
    problems: list[tuple[str, str]] = []
    files: list = []
    token = _UNREADABLE.set(problems)
    given = _FOLDERS.set(tuple(folders))
    watching = _LOOKED.set(looked)
    try:
        for sf in adapter.discover(env, home):
            files.append(sf)
    except OSError as e:
        _unreadable(e.filename or adapter.display, e)
    finally:
        _LOOKED.reset(watching)
        _FOLDERS.reset(given)
        _UNREADABLE.reset(token)
    return files, problems


###############################################################################
# Adapter base ################################################################
###############################################################################


@dataclass(frozen=True, slots=True)
class McpConfig:
    """Where an agent reads its MCP servers, for ``origin setup``.

    ``fmt`` is ``"json"`` or ``"toml"`` (edited in place, keys kept) or
    ``"yaml"`` (never edited: setup prints the lines to add).  ``keys`` is
    the path to the servers table in the file; ``entry`` the shape of one
    server (``"command"``: command, args and env; ``"command-list"``: the
    command and its arguments as one list, with ``environment``);
    ``stdio_type`` adds ``"type": "stdio"`` for agents whose own tools
    write it; ``extra`` holds (key, value) pairs a new entry gets unless
    the user's entry already sets them.  ``files`` and ``homes`` name the
    configuration files and the folders whose presence says the agent is
    installed (default: its roots), ``programs`` the commands that say so
    too.
    """

    fmt: str
    keys: tuple[str, ...]
    files: Callable[[Mapping[str, str], Path], list[Path]]
    programs: tuple[str, ...]
    homes: Callable[[Mapping[str, str], Path], list[Path]] | None = None
    stdio_type: bool = False
    entry: str = "command"
    note: str | None = None
    extra: tuple = ()


@dataclass(frozen=True, slots=True)
class HookConfig:
    """Where an agent reads its session-start hooks, for ``origin setup``.

    ``files`` names the JSON settings files that hold them, under
    ``"hooks"``: a list per ``event``.  ``entry`` is the shape of one item
    of that list: ``"group"`` (Claude Code's, which Gemini CLI, Qwen Code
    and Codex share: ``{"hooks": [{"type": "command", "command": …,
    "timeout": …}]}``) or ``"bash"`` (Copilot CLI's: ``{"type": "command",
    "bash": …, "timeoutSec": …}``).  ``timeout`` is in the agent's own unit
    (seconds or milliseconds).  ``output`` is how the command's stdout
    reaches the model: ``"text"`` (as it is), ``"hookSpecificOutput"``
    (``{"hookSpecificOutput": {"hookEventName": event, "additionalContext":
    text}}``) or ``"additionalContext"`` (``{"additionalContext": text}``).
    """

    event: str
    files: Callable[[Mapping[str, str], Path], list[Path]]
    timeout: int
    output: str = "text"
    entry: str = "group"


def _settings_json(var: str, folder: str) -> Callable[[Mapping[str, str], Path], list[Path]]:
    """Return the files function of ``settings.json`` in $var (comma list), else ~/folder."""
    return lambda env, home: [d / "settings.json" for d in env_dirs(env, var, [home / folder])]


def _gemini_settings(var: str, folder: str, program: str) -> tuple[McpConfig, HookConfig]:
    """Return the rows of an agent that reads Gemini CLI's ``settings.json``: MCP servers and hooks.

    Gemini CLI and Qwen Code (its fork) keep ``"mcpServers"`` and
    ``"hooks"`` in ``settings.json`` in $var, else ~/folder.  Their
    SessionStart hooks are Claude Code's shape with the timeout in
    milliseconds, and read the reply as JSON: Gemini CLI shows plain text
    to the person only.
    """
    files = _settings_json(var, folder)
    return (McpConfig("json", ("mcpServers",), files, (program,)),
            HookConfig("SessionStart", files, 10_000, "hookSpecificOutput"))


class Adapter:
    """Base of every adapter; subclasses set ``name`` and override methods.

    The class attributes are the agent's row in the table of agents: every
    list of agents in Origin (discovery, ``--source``, ``origin setup``,
    the variables setup registers, the docs' checks) is read from them.
    """

    name = ""
    display = ""
    kind = "log"
    #: Environment variables that move the agent's folders (comma lists).
    env_vars: tuple[str, ...] = ()
    #: Where the agent reads its MCP servers; None when it reads none.
    mcp: McpConfig | None = None
    #: Where the agent reads a session-start hook; None when it documents none.
    hook: HookConfig | None = None
    #: Whether its logs live in the projects themselves, not in a folder of
    #: its own: discovery is then given the project folders Origin knows.
    in_projects = False
    #: The parser's version, raised when a fix changes what lines already
    #: archived parse into: Origin then parses those mirrors again (event
    #: ids come from the content, so existing events keep theirs).
    version = 1

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return the directories this adapter looks in."""
        return []

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every file the agent keeps under its roots."""
        return iter(())

    def new_state(self, f: SourceFile) -> dict:
        """Return the parse state a new file (or generation) starts with."""
        return {}

    def parse(self, line: str, ctx: Context) -> list:
        """Return the Records and SessionInfos of one line."""
        return []  # an adapter that reads nothing fails the registry tests

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, value hash, JSON line) for new or changed rows (db kind)."""
        return iter(())


###############################################################################
# Claude Code #################################################################
###############################################################################

#: Claude Code line types that carry nothing to index (metadata, hooks,
#: snapshots, workflow journal lines); anything else unknown is counted.
_CLAUDE_QUIET = frozenset({
    "file-history-snapshot", "queue-operation", "progress", "attachment",
    "permission-mode", "mode", "agent-name", "last-prompt", "pr-link",
    "frame-link", "worktree-state", "bridge-session", "atis-latch",
    "relocated", "started", "result",
})

#: Flags of lines whose text is kept for provenance but not searched.
_CLAUDE_HIDDEN = ("isMeta", "isCompactSummary", "isApiErrorMessage")

#: Line types that only name the session.
_CLAUDE_TITLES = ("summary", "custom-title", "ai-title")

#: Wrapped user strings that are not a prompt worth a title.
_CLAUDE_NOT_PROMPT = ("<local-command", "<bash-", "<task-notification", "<system-reminder",
                      "<ide_", "<user-prompt-submit-hook", "Caveat:")


def _claude_prompt_title(text: str) -> str | None:
    """Return a title for a user prompt, or None when it is not a prompt."""
    s = text.strip()
    if s.startswith("<command-"):
        # A slash command: "/name args" says more than the expansion text.
        name = _between(s, "<command-name>", "</command-name>")
        args = _between(s, "<command-args>", "</command-args>")
        s = f"{name or ''} {args or ''}".strip()
    elif s.startswith(_CLAUDE_NOT_PROMPT) or s.startswith("[Request interrupted"):
        return None
    s = " ".join(s.split())
    return truncate(s, 200) if s else None


def _between(text: str, start: str, end: str) -> str | None:
    """Return the text between two markers, or None when either is missing."""
    i = text.find(start)
    j = text.find(end, i + len(start)) if i >= 0 else -1
    return text[i + len(start):j].strip() if j >= 0 else None


class ClaudeCode(Adapter):
    """Parse Claude Code transcripts: JSONL, one record per line.

    Understands CLI 1.0.x (one line per assistant message) through 2.1.x
    (one line per content block, sub-agents under ``<session>/subagents/``,
    nested workflows), old flat ``agent-*.jsonl`` sub-agents, and the drift
    shapes with top-level ``tool_use``/``tool_result`` lines.  Fixtures:
    ``tests/fixtures/claude-code/claude-code-viewer/`` (1.0.98, 1.0.108) and
    ``tests/fixtures/claude-code/agent-sessions/`` (2.1.x coverage, drift,
    sub-agent layout).

    Event ids: the line's ``uuid`` for its message, ``<uuid>#<i>`` for the
    tool block at index i; a line without uuid gets a hash of session and
    line.  State: session, cwd, branch, last timestamp, the session facts
    last reported, and whether the fallback title was sent.
    """

    name = "claude-code"
    version = 1
    display = "Claude Code"
    env_vars = ("CLAUDE_CONFIG_DIR",)
    # Claude Code keeps user-scope servers in .claude.json beside (not in)
    # its config dir: ~/.claude.json, or $CLAUDE_CONFIG_DIR/.claude.json.
    mcp = McpConfig("json", ("mcpServers",),
                    lambda env, home: [d / ".claude.json" for d in env_dirs(env, "CLAUDE_CONFIG_DIR", [home])],
                    ("claude",), homes=lambda env, home: env_dirs(env, "CLAUDE_CONFIG_DIR", [home / ".claude"]),
                    stdio_type=True)
    # SessionStart hooks live in settings.json; what the command prints is context.
    hook = HookConfig("SessionStart", _settings_json("CLAUDE_CONFIG_DIR", ".claude"), 10)

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``CLAUDE_CONFIG_DIR`` (comma list), else both defaults."""
        return env_dirs(env, "CLAUDE_CONFIG_DIR", [home / ".claude", home / ".config" / "claude"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield main, flat sub-agent and nested sub-agent transcripts."""
        found: dict[str, SourceFile] = {}
        for prefix, root in _labelled(self.roots(env, home), home):
            projects = root / "projects"
            if not _is_dir(projects):
                continue
            for project in _subdirs(projects):
                files, folders = _split_listing(project, ".jsonl")
                base, rel_base = str(project) + os.sep, _rel(prefix, root, project) + "/"
                for name in files:
                    # A main transcript is named after its session; the id
                    # names title lines that come before any sessionId.
                    meta = {} if name.startswith("agent-") else {"session": name[: -len(".jsonl")]}
                    found[rel_base + name] = SourceFile(base + name, rel_base + name, meta=meta)
                for session in folders:
                    for path, meta in _claude_subagents(session):
                        rel = _rel(prefix, root, path)
                        found[rel] = SourceFile(str(path), rel, meta=meta)
        for rel in sorted(found):
            yield found[rel]

    def new_state(self, f: SourceFile) -> dict:
        """Start with nothing known: the lines name their session."""
        return {}

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one transcript line."""
        if not line.strip():
            return []
        obj = _load_object(line)
        st = ctx.state
        kind = obj.get("type")
        session = (_str(obj.get("sessionId")) or st.get("session")
                   or _str(ctx.file.meta.get("session")) or "unknown")
        st["session"] = session
        if _str(obj.get("cwd")):
            st["cwd"] = obj["cwd"]
        if isinstance(obj.get("gitBranch"), str):
            st["branch"] = obj["gitBranch"] or None
        ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        message = _dict(obj.get("message"))
        model = _str(message.get("model"))
        if model == "<synthetic>":
            model = None
        out: list = self._session_facts(obj, ctx, session, model)
        title = self._title(obj, kind, ctx)
        if title:
            about = _str(obj.get("leafUuid")) if kind == "summary" else None
            out.append(SessionInfo(session, title=title[0], title_rank=title[1], about=about))
        base = _str(obj.get("uuid")) or short_hash(session, line)
        # A line without a time (or with a redacted one) takes the last
        # time seen in the file, else the file's mtime, marked approximate.
        common = dict(session=session, ts=ts if ts is not None else st.get("ts", ctx.mtime_ms),
                      ts_approx=ts is None, cwd=st.get("cwd"), branch=st.get("branch"))
        if kind in ("user", "assistant"):
            out += self._message(obj, message, kind, base, model, common)
        elif kind == "system":
            text = _plain(obj.get("content"))
            if text:
                out.append(Record(base, kind="meta", role="system", text=text, indexed=False,
                                  **common))
        elif kind == "tool_use":
            text = _tool_call_text(obj.get("name"), obj.get("input"))
            out.append(Record(base, kind="tool_call", role="assistant", text=text, **common))
        elif kind == "tool_result":
            text = _plain(obj.get("output", obj.get("content")))
            out.append(Record(base, kind="tool_result", role="tool",
                              text=truncate(text, TOOL_RESULT_MAX), **common))
        elif kind not in _CLAUDE_TITLES and not (isinstance(kind, str) and kind in _CLAUDE_QUIET):
            st["unknown"] = st.get("unknown", 0) + 1
        return out

    def _session_facts(self, obj: dict, ctx: Context, session: str, model: str | None) -> list:
        """Report the session facts that changed since the last report."""
        st = ctx.state
        version = _str(obj.get("version"))
        facts = [session, st.get("cwd"), st.get("branch"), version, model]
        sent = st.get("sent") or [None] * 5
        if sent[0] == session and all(new in (None, old) for new, old in zip(facts, sent)):
            return []
        if sent[0] != session:
            sent = [None] * 5
        st["sent"] = [old if new is None else new for new, old in zip(facts, sent)]
        # A new-layout sub-agent names its own session; its parent is the
        # session folder above subagents/.  Old flat agent files reuse the
        # parent's session id, so they have no parent to report.
        parent = _str(ctx.file.meta.get("parent"))
        return [SessionInfo(session, cwd=facts[1], branch=facts[2], agent_version=version,
                            model=model, parent=parent if parent != session else None)]

    def _title(self, obj: dict, kind: Any, ctx: Context) -> tuple[str, int] | None:
        """Return (title, rank) when the line names the session."""
        if kind == "custom-title":
            return _title_of(obj.get("customTitle"), RANK_MANUAL)
        if kind == "ai-title":
            return _title_of(obj.get("aiTitle"), RANK_GENERATED)
        if kind == "summary":
            return _title_of(obj.get("summary"), RANK_SUMMARY)
        if kind != "user" or ctx.state.get("titled") or obj.get("isMeta") is True:
            return None
        if obj.get("isCompactSummary") is True:
            return None
        if obj.get("isSidechain") is True and not ctx.file.meta.get("parent"):
            return None  # an old flat sub-agent shares its parent's session
        content = _dict(obj.get("message")).get("content")
        if isinstance(content, list):
            texts = [b.get("text") for b in content
                     if isinstance(b, dict) and b.get("type") == "text"]
            content = "\n".join(t for t in texts if isinstance(t, str))
        title = _claude_prompt_title(content) if isinstance(content, str) else None
        if title:
            ctx.state["titled"] = True
            return title, RANK_PROMPT
        return None

    def _message(self, obj: dict, message: dict, kind: str, base: str, model: str | None,
                 common: dict) -> list:
        """Return the message, tool call and tool result events of a line."""
        role = "assistant" if kind == "assistant" else "user"
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        texts, out = [], []
        for i, block in enumerate(blocks):
            if isinstance(block, str):
                texts.append(block)
                continue
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text":
                texts.append(_plain(block.get("text")))
            elif _is_image(block):
                texts.append("[image]")
            elif btype == "tool_use":
                text = _tool_call_text(block.get("name"), block.get("input"))
                out.append(Record(f"{base}#{i}", kind="tool_call", role="assistant", text=text,
                                  model=model, **common))
            elif btype == "tool_result":
                text = _plain(block.get("content"))
                if block.get("is_error") is True:
                    text = "[error] " + text
                out.append(Record(f"{base}#{i}", kind="tool_result", role="tool",
                                  text=truncate(text, TOOL_RESULT_MAX), **common))
            # thinking, redacted_thinking, fallback and unknown blocks: not text
        text = "\n".join(t for t in texts if t)
        if text:
            # Injected context, compaction summaries and synthetic API errors
            # are kept for provenance but stay out of search.
            hidden = any(obj.get(flag) is True for flag in _CLAUDE_HIDDEN)
            out.insert(0, Record(base, kind="meta" if hidden else "message", role=role, text=text,
                                 indexed=not hidden, model=model, **common))
        return out


def _claude_subagents(session: Path) -> Iterator[tuple[Path, dict]]:
    """Yield sub-agent transcripts under ``<session>/subagents/`` with meta.

    Workflows nest further down; ``journal.jsonl`` there is bookkeeping.
    The parent session id is the folder name above ``subagents/``.
    """
    top = session / "subagents"
    if not _is_dir(top):
        return
    for folder, dirs, names in os.walk(top, onerror=lambda e: _unreadable(e.filename, e)):
        _look(folder)
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(".jsonl") or name == "journal.jsonl":
                continue
            path = Path(folder) / name
            if not _is_file(path):
                continue
            meta = {"parent": session.name}
            sidecar = _read_json_file(path.with_name(path.stem + ".meta.json"), 1 << 16)
            for key in ("agentType", "description", "spawnDepth"):
                value = _dict(sidecar).get(key)
                if isinstance(value, (str, int)) and not isinstance(value, bool):
                    meta[key] = value if not isinstance(value, str) else truncate(value, 200)
            yield path, meta


###############################################################################
# Codex CLI ###################################################################
###############################################################################

#: Outer line types that carry nothing to index.
_CODEX_QUIET = frozenset({
    "world_state", "inter_agent_communication", "inter_agent_communication_metadata",
    "security_risk_score", "realtime_item",
})

#: Items that are history or plumbing, not conversation (reasoning stays in
#: the mirror only).
_CODEX_QUIET_ITEMS = frozenset({
    "reasoning", "ghost_snapshot", "image_generation_call", "tool_search_output",
})

#: Item types that are a tool call, mapped to the field holding the input.
_CODEX_CALLS = {
    "function_call": "arguments", "custom_tool_call": "input", "local_shell_call": "action",
    "web_search_call": "action", "tool_search_call": "arguments",
}

#: Item types that are a tool's output.
_CODEX_OUTPUTS = frozenset({
    "function_call_output", "custom_tool_call_output", "local_shell_call_output",
})

#: Event messages that repeat items, report progress or carry no text.  The
#: set is open: others are counted as unknown, never fatal.
_CODEX_QUIET_EVENTS = frozenset({
    "agent_message", "agent_reasoning", "agent_reasoning_raw_content",
    "agent_reasoning_section_break",
    "token_count", "task_started", "task_complete", "turn_aborted", "context_compacted",
    "exec_command_begin", "exec_command_end", "exec_command_output_delta", "patch_apply_begin",
    "patch_apply_end", "mcp_tool_call_begin", "mcp_tool_call_end", "web_search_begin",
    "web_search_end", "item_started", "item_completed", "sub_agent_activity", "turn_diff",
    "thread_settings_applied", "thread_goal_updated", "entered_review_mode", "exited_review_mode",
    "guardian_assessment", "image_generation_begin", "image_generation_end", "view_image_tool_call",
    "dynamic_tool_call_request", "dynamic_tool_call_response", "undo_started", "undo_completed",
    "plan_update", "stream_error", "background_event", "shutdown_complete",
    "collab_agent_spawn_begin", "collab_agent_spawn_end", "collab_agent_interaction_begin",
    "collab_agent_interaction_end", "collab_waiting_begin", "collab_waiting_end",
    "collab_close_begin", "collab_close_end",
})

#: How injected context starts when it is dressed as a user message.
_CODEX_INJECTED = (
    "<environment_context", "<user_instructions", "<permissions", "<INSTRUCTIONS>",
    "# AGENTS.md instructions", "<collaboration_mode", "<skills_instructions",
    "<personality_spec", "<turn_aborted", "<user_shell_command", "<subagent_notification",
)


def _codex_text(content: Any) -> str:
    """Join the text parts of a Codex message; images become "[image]"."""
    parts = []
    for part in content if isinstance(content, list) else [content]:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            if _is_image(part):
                parts.append("[image]")
            elif isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(p for p in parts if p)


def _codex_thread_of(name: str) -> str:
    """Return the key a rollout is known by across folders and compression."""
    return name[: -len(".zst")] if name.endswith(".zst") else name


class Codex(Adapter):
    """Parse OpenAI Codex CLI rollouts (also Codex Desktop and IDE).

    Understands the envelope format ``{timestamp, type, payload}`` from about
    0.40 on, with the optional ``ordinal`` of 0.14x, plain or zstd
    compressed (0.137+), live or archived; and the mid-2025 legacy JSONL
    whose first line is ``{id, timestamp, instructions, git}`` followed by
    bare items and ``{"record_type": "state"}`` separators.  Fixtures:
    ``tests/fixtures/codex/localpush/`` (0.104, three real rollouts) and
    ``tests/fixtures/codex/agent-sessions/`` (0.146 coverage and drift).

    Event ids: ``<thread>:o<ordinal>`` while the line's ordinal keeps rising,
    else ``<thread>:<line number>`` in the decompressed stream, then ``:`` and
    a short hash of the line; ``#k`` is added when a line gives several
    events.  The thread comes from the first
    ``session_meta`` (later ones are history copied by a fork), so the same
    rollout plain, compressed or archived gives the same ids.

    A prompt is written twice: as a user ``message`` item and as a
    ``user_message`` event.  It is indexed once, from the event; the two are
    paired by their normalised text within the turn, whichever comes first.
    An item that nothing repeats is kept: it waits in the state until its
    turn ends (or the file goes quiet) and is then archived from its own
    line, as a prompt, or as meta when it is injected context (a known
    marker, a text wrapped whole in one ``<tag>…</tag>``, or an item outside
    the turns of a rollout that marks them).  Legacy files, which have no
    events, index the item at once.
    """

    name = "codex"
    version = 1
    display = "Codex"
    env_vars = ("CODEX_HOME",)
    mcp = McpConfig("toml", ("mcp_servers",),
                    lambda env, home: [d / "config.toml" for d in env_dirs(env, "CODEX_HOME", [home / ".codex"])],
                    ("codex",))
    # hooks.json beside config.toml, in Claude Code's shape (timeout in seconds); a
    # reply that looks like JSON must be valid hook JSON, so the context goes as JSON.
    hook = HookConfig("SessionStart",
                      lambda env, home: [d / "hooks.json" for d in env_dirs(env, "CODEX_HOME", [home / ".codex"])],
                      10, "hookSpecificOutput")

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``CODEX_HOME`` (comma list allowed), else ``~/.codex``."""
        return env_dirs(env, "CODEX_HOME", [home / ".codex"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield one rollout per thread: live beats archived, plain beats zstd."""
        best: dict[str, tuple[tuple, SourceFile]] = {}
        for prefix, root in _labelled(self.roots(env, home), home):
            for archived, folder in enumerate(("sessions", "archived_sessions")):
                for path in _codex_rollouts(root / folder):
                    compressed = "zstd" if sniff_zstd(str(path)) else None
                    if path.name.endswith(".zst") and not compressed:
                        continue  # still being written by the compressor
                    rank = (archived, compressed is not None)
                    key = prefix + _codex_thread_of(path.name)
                    if key not in best or rank < best[key][0]:
                        rel = _rel(prefix, root, path)
                        best[key] = (rank, SourceFile(str(path), rel, compressed=compressed))
        for _, f in sorted(best.values(), key=lambda pair: pair[1].rel):
            yield f

    def new_state(self, f: SourceFile) -> dict:
        """Start with no thread: the first session_meta names it."""
        return {}

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one rollout line."""
        if not line.strip():
            return []
        obj = _load_object(line)
        st = ctx.state
        kind = obj.get("type")
        if "thread" not in st:
            # Only a file without session_meta lacks a thread: name it after
            # its first line, which is content and never changes.
            st["thread"] = "anon-" + short_hash(line)
        if kind is None and "record_type" in obj:
            return []
        if kind is None and _str(obj.get("id")) and ctx.lineno == 1:
            return self._legacy_header(obj, st)
        ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        ids = _codex_ids(obj, ctx, line)
        common = dict(ts=ts if ts is not None else st.get("ts", ctx.mtime_ms), ts_approx=ts is None)
        st["at"] = [ctx.lineno, ctx.offset]
        payload = obj.get("payload")
        if kind == "session_meta":
            return self._session_meta(_dict(payload), st)
        if kind == "turn_context":
            return self._turn_context(_dict(payload), st)
        if kind == "response_item":
            return self._item(_dict(payload), st, ids, common)
        if kind == "event_msg":
            return self._event(_dict(payload), st, ids, common, ctx)
        if kind == "compacted":
            text = _str(_dict(payload).get("message")) or "[compacted]"
            return [self._record(st, next(ids), "meta", "system", text, common, indexed=False)]
        if isinstance(kind, str) and (kind in _CODEX_QUIET):
            return []
        if isinstance(kind, str) and payload is None and _codex_is_item(kind):
            return self._item(obj, st, ids, common)  # a bare item of the legacy format
        st["unknown"] = st.get("unknown", 0) + 1
        return []

    def _legacy_header(self, obj: dict, st: dict) -> list:
        """Take a legacy rollout's first line as the file's identity."""
        st["thread"], st["legacy"] = obj["id"], True
        st["identified"] = True
        ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        branch = _str(_dict(obj.get("git")).get("branch"))
        return [SessionInfo(obj["id"], branch=branch)]

    def _session_meta(self, p: dict, st: dict) -> list:
        """Take the first session_meta as identity; ignore copied history."""
        if st.get("identified") or not _str(p.get("id")):
            return []
        st["thread"], st["identified"] = p["id"], True
        if _str(p.get("cwd")):
            st["cwd"] = p["cwd"]
        spawn = _dict(_dict(_dict(p.get("source")).get("subagent")).get("thread_spawn"))
        parent = (_str(p.get("parent_thread_id")) or _str(spawn.get("parent_thread_id"))
                  or _str(p.get("forked_from_id")))
        branch = _str(_dict(p.get("git")).get("branch"))
        return [SessionInfo(p["id"], cwd=_str(p.get("cwd")), branch=branch,
                            agent_version=_str(p.get("cli_version")), parent=parent)]

    def _turn_context(self, p: dict, st: dict) -> list:
        """Track cwd and model; report them when they change."""
        cwd, model = _str(p.get("cwd")), _str(p.get("model"))
        if cwd in (None, st.get("cwd")) and model in (None, st.get("model")):
            return []
        st["cwd"], st["model"] = cwd or st.get("cwd"), model or st.get("model")
        return [SessionInfo(st["thread"], cwd=cwd, model=model)]

    def _item(self, p: dict, st: dict, ids: Iterator[str], common: dict) -> list:
        """Return the events of one response item."""
        ptype = p.get("type")
        if ptype == "message":
            return self._message(p, st, ids, common)
        if ptype == "agent_message":  # one agent of a multi-agent run speaking to another
            text = _codex_text(p.get("content"))
            if not text:
                return []
            return [self._record(st, next(ids), "message", "assistant", text, common)]
        if isinstance(ptype, str) and ptype in _CODEX_CALLS:
            name = p.get("name") or ptype.removesuffix("_call")
            if ptype == "local_shell_call":
                name = "shell"
            text = _tool_call_text(name, p.get(_CODEX_CALLS[ptype]))
            return [self._record(st, next(ids), "tool_call", "assistant", text, common)]
        if isinstance(ptype, str) and ptype in _CODEX_OUTPUTS:
            text = truncate(_output_text(p.get("output")), TOOL_RESULT_MAX)
            return [self._record(st, next(ids), "tool_result", "tool", text, common)]
        if not (isinstance(ptype, str) and ptype in _CODEX_QUIET_ITEMS):
            st["unknown"] = st.get("unknown", 0) + 1
        return []

    def _message(self, p: dict, st: dict, ids: Iterator[str], common: dict) -> list:
        """Return the event of a message item, or none when it is a repeat."""
        role = p.get("role")
        text = _codex_text(p.get("content"))
        if not text:
            return []
        if role == "assistant":
            return [self._record(st, next(ids), "message", "assistant", text, common)]
        if role in ("developer", "system"):
            return [self._record(st, next(ids), "meta", "system", text, common, indexed=False)]
        if role != "user":
            st["unknown"] = st.get("unknown", 0) + 1
            return []
        if text.lstrip().startswith(_CODEX_INJECTED):
            return [self._record(st, next(ids), "meta", "user", text, common, indexed=False)]
        if st.get("legacy"):
            return self._prompt(st, next(ids), text, common)
        key = _codex_prompt_key(text)
        said = st.get("said", [])
        if key in said:
            said.remove(key)  # the user_message event already carried it
            return []
        # Wait for the user_message event that usually repeats it.
        out = self._release(st, keep=CODEX_PENDING_MAX - 1)
        line, offset = st["at"]
        st.setdefault("pending", []).append({"id": next(ids), "key": key, "text": text[:CODEX_PENDING_TEXT],
                                             "ts": common["ts"], "approx": common["ts_approx"],
                                             "line": line, "offset": offset, "in_turn": bool(st.get("turn"))})
        return out

    def _release(self, st: dict, keep: int = 0) -> list:
        """Archive the prompt items no event repeated (all but the last keep)."""
        pending = st.get("pending") or []
        out: list = []
        while len(pending) > keep:
            item = pending.pop(0)
            common = dict(ts=item["ts"], ts_approx=item["approx"], line=item["line"], offset=item["offset"])
            # Injected context under a marker this adapter does not know, or
            # a user item outside any turn: Codex writes its session preamble
            # (instructions, environment) before the first turn starts.
            if _CODEX_WRAPPED.match(item["text"]) or (st.get("turns") and not item["in_turn"]):
                out.append(self._record(st, item["id"], "meta", "user", item["text"], common, indexed=False))
            else:
                out += self._prompt(st, item["id"], item["text"], common)
        if not pending:
            st.pop("pending", None)
        return out

    def flush(self, ctx: Context) -> list:
        """Archive the prompt items still waiting when the rollout went quiet."""
        return self._release(ctx.state)

    def _event(self, p: dict, st: dict, ids: Iterator[str], common: dict, ctx: Context) -> list:
        """Return the events of one event message."""
        etype = p.get("type")
        if etype == "user_message":
            text = _str(p.get("message")) or ""
            images = len(_list(p.get("images"))) + len(_list(p.get("local_images")))
            text = "\n".join([text] * bool(text) + ["[image]"] * images)
            if not text:
                return []
            key = _codex_prompt_key(text)
            pending = st.get("pending") or []
            twin = next((i for i, item in enumerate(pending) if item["key"] == key), None)
            if twin is not None:
                pending.pop(twin)  # the item this event repeats: the event is the prompt
                if not pending:
                    st.pop("pending", None)
            else:
                st["said"] = (st.get("said", []) + [key])[-CODEX_PENDING_MAX:]
            return self._prompt(st, next(ids), text, common)
        if etype in _CODEX_TURN_EDGES:
            # A turn starts or ends: prompt items of the last turn that no
            # event repeated are archived now.
            st.pop("said", None)
            st["turns"] = st.get("turns") or etype == "task_started"
            out = self._release(st)
            st["turn"] = etype == "task_started"
            return out
        if etype == "thread_name_updated":
            title = _title_of(p.get("thread_name"), RANK_GENERATED)
            return [SessionInfo(st["thread"], title=title[0], title_rank=title[1])] if title else []
        if etype == "error":
            text = _plain(p.get("message")) or "error"
            return [self._record(st, next(ids), "meta", "system", text, common, indexed=False)]
        if not (isinstance(etype, str) and etype in _CODEX_QUIET_EVENTS):
            st["unknown"] = st.get("unknown", 0) + 1
        return []

    def _prompt(self, st: dict, rid: str, text: str, common: dict) -> list:
        """Return a user prompt's event, and the fallback title once."""
        out: list = [self._record(st, rid, "message", "user", text, common)]
        title = None if st.get("titled") else _title_of(text, RANK_PROMPT)
        if title:
            st["titled"] = True
            out.append(SessionInfo(st["thread"], title=title[0], title_rank=title[1]))
        return out

    def _record(self, st: dict, rid: str, kind: str, role: str, text: str, common: dict,
                indexed: bool = True) -> Record:
        """Build a Record of the file's thread with the carried cwd and model."""
        model = st.get("model") if role == "assistant" else None
        return Record(rid, session=st["thread"], kind=kind, role=role, text=text, indexed=indexed,
                      cwd=st.get("cwd"), model=model, **common)


#: Event messages at which a turn starts or ends.
_CODEX_TURN_EDGES = frozenset({"task_started", "task_complete", "turn_aborted"})
#: Prompt items a rollout's state holds while waiting for their event, and
#: the characters of each it keeps (the whole text stays in the mirror).
CODEX_PENDING_MAX = 8
CODEX_PENDING_TEXT = 1_000_000
#: A user item wrapped whole in one element is injected context.
_CODEX_WRAPPED = re.compile(r"\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>.*</\1>\s*\Z", re.S)


def _codex_prompt_key(text: str) -> str:
    """Return what pairs a prompt item with its event: the text, normalised."""
    return short_hash(" ".join(text.replace("[image]", " ").split()))


def _codex_is_item(kind: str) -> bool:
    """True for a response item type this adapter knows."""
    return (kind in ("message", "agent_message") or kind in _CODEX_CALLS
            or kind in _CODEX_OUTPUTS or kind in _CODEX_QUIET_ITEMS)


def _codex_ids(obj: dict, ctx: Context, line: str) -> Iterator[str]:
    """Return the event ids of a line: its base id, then base#1, base#2, …

    The ordinal names the line while it keeps rising through the file; a
    repeated or missing one falls back to the line number, which is as
    stable (rollouts are append-only) and keeps ids unique within a thread.
    A short hash of the line follows: the same rollout plain, compressed or
    archived has the same bytes and so the same ids, while a reverted
    rollout (``…-<thread>_<rollout>.jsonl``, same thread) that says
    something else at the same position keeps its own events.
    """
    st = ctx.state
    ordinal = _int(obj.get("ordinal"))
    if ordinal is not None and st.get("ordinal", -1) < ordinal < 2**53:
        st["ordinal"] = ordinal
        base = f"{st['thread']}:o{ordinal}"
    else:
        base = f"{st['thread']}:{ctx.lineno}"
    base += ":" + short_hash(line, n=8)
    return itertools.chain([base], (f"{base}#{k}" for k in itertools.count(1)))


def _codex_rollouts(folder: Path) -> list[Path]:
    """Return every rollout JSONL (plain or .zst) under folder, any depth."""
    if not _is_dir(folder):
        return []
    found = []
    seen: set[str] = set()
    # Symlinked date folders are followed; a folder already walked (a link
    # loop, or two links to one place) is not entered again.
    for dirpath, dirs, names in os.walk(folder, followlinks=True, onerror=lambda e: _unreadable(e.filename, e)):
        _look(dirpath)
        real = os.path.realpath(dirpath)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(names):
            if name.startswith("rollout-") and name.endswith((".jsonl", ".jsonl.zst")):
                path = Path(dirpath) / name
                if _is_file(path):
                    found.append(path)
    return found


###############################################################################
# Grok Build ##################################################################
###############################################################################

#: Envelope methods of an update line.
_GROK_METHODS = ("session/update", "_x.ai/session/update")

#: Streamed chunk kinds, and the role of the message they build.
_GROK_CHUNKS = {"user_message_chunk": "user", "agent_message_chunk": "assistant",
                "agent_thought_chunk": "thought"}

#: Tool statuses after which no more output comes.
_GROK_FINAL = ("completed", "failed", "cancelled", "canceled", "error")

#: Update kinds with nothing to index; the set is open, others are counted.
_GROK_QUIET = frozenset({
    "plan", "available_commands_update", "current_mode_update", "config_option_update",
    "session_info_update", "usage_update", "hook_execution", "retry_state", "feedback_request",
})
_GROK_QUIET_PREFIXES = ("auto_compact_", "memory_")

#: Caps on what the parse state carries between lines: the text of a message
#: being joined, and the number of tool calls waiting for their end.  The
#: whole text always stays in the mirror, which the event's lines point to.
GROK_PENDING_MAX = 100_000
#: Characters of an open Cursor TXT block kept in the parse state.
CURSOR_BLOCK_MAX = 20_000
GROK_OPEN_TOOLS_MAX = 32
#: Distinct chat records per turn whose hash the parse state remembers, to
#: number identical ones; past it, records are told apart by position.
GROK_TURN_SEEN_MAX = 2048


def _grok_group_cwd(group: Path) -> str | None:
    """Return a session group's cwd: its ``.cwd`` file, else its decoded name."""
    try:
        marker = group / ".cwd"
        _look(marker)
        if marker.is_file() and marker.stat().st_size <= 4096:
            text = marker.read_text(encoding="utf-8", errors="replace").strip()
            if text:
                return text
    except OSError:
        pass
    decoded = urllib.parse.unquote(group.name)
    # A long cwd is stored as slug plus hash, which is no path.
    if decoded.startswith("/") or decoded[1:3] in (":\\", ":/"):
        return decoded
    return None


def _grok_meta(folder: Path, cwd: str | None, fmt: str, parent: str | None) -> dict:
    """Return what a session's ``summary.json`` says, for SourceFile.meta."""
    summary = _dict(_read_json_file(folder / "summary.json"))
    info = _dict(summary.get("info"))
    meta = {"format": fmt, "session": _str(info.get("id")) or folder.name,
            "cwd": _str(info.get("cwd")) or cwd, "branch": _str(summary.get("head_branch")),
            "model": _str(summary.get("current_model_id")),
            "parent": parent or _str(summary.get("parent_session_id")),
            # The session's own times, better than the file's: a copied or
            # restored folder has the mtime of the copy.
            "created_ms": _ts(summary.get("created_at")),
            "updated_ms": _ts(summary.get("updated_at")) or _ts(summary.get("last_active_at")),
            "records": _int(summary.get("num_chat_messages"))}
    title = _str(summary.get("generated_title"))
    if title:
        manual = summary.get("title_is_manual") is True
        meta["title"], meta["title_rank"] = title, RANK_MANUAL if manual else RANK_GENERATED
    elif _str(summary.get("session_summary")):
        meta["title"], meta["title_rank"] = summary["session_summary"], RANK_SUMMARY
    if isinstance(meta.get("title"), str):
        meta["title"] = truncate(" ".join(meta["title"].split()), 200)
    return {k: v for k, v in meta.items() if v is not None}


def _grok_prompt(text: str) -> str:
    """Return a prompt without the ``<user_query>`` wrapper Grok adds."""
    s = text.strip()
    if s.startswith("<user_query>") and s.endswith("</user_query>"):
        return s[len("<user_query>"): -len("</user_query>")].strip()
    return text


def _grok_output(update: dict) -> str:
    """Return the output text a tool_call_update carries (the whole so far).

    Content blocks come first; a terminal block only points at a terminal,
    so ``rawOutput`` is preferred to it.
    """
    parts, terminals = [], []
    for item in _list(update.get("content")):
        item = _dict(item)
        kind = item.get("type")
        if kind == "content":
            parts.append(_plain(item.get("content")))
        elif kind == "diff":
            parts.append(f"diff {_plain(item.get('path'))}\n{_plain(item.get('newText'))}")
        elif kind == "terminal":
            terminals.append(f"[terminal {_plain(item.get('terminalId'))}]")
    text = "\n".join(p for p in parts if p)
    if not text and update.get("rawOutput") is not None:
        text = _output_text(update["rawOutput"])
    return text or "\n".join(terminals)


def _grok_guess(ctx: Context, n: int) -> int | None:
    """Guess the time of a session's n-th record from its summary's times.

    Records are spread evenly from ``created_at`` to ``updated_at`` over the
    number of records the summary counts; without summary times the file's
    mtime stands in.  Every guess is marked approximate by the caller.
    """
    m = ctx.file.meta
    created, updated, total = _int(m.get("created_ms")), _int(m.get("updated_ms")), _int(m.get("records"))
    if created is None:
        return updated if updated is not None else ctx.mtime_ms
    if updated is None or updated < created or not total or total < 2:
        return created
    return created + (updated - created) * (min(max(n, 1), total) - 1) // (total - 1)


@functools.lru_cache(maxsize=1024)
def _facts_sig(facts: tuple) -> str:
    """Hash a session's summary facts once, not on every line of its log."""
    return short_hash(*facts, n=8)


class Grok(Adapter):
    """Parse Grok Build sessions (xAI ``grok`` CLI, TUI and ACP agent).

    Understands Grok Build 0.1.x to 1.0.x: the append-only ``updates.jsonl``
    (ACP ``session/update`` and ``_x.ai/session/update`` envelopes, time as
    epoch s, ms or ISO, ``_meta`` in params or update), and for a session
    without it the ``chat_history.jsonl`` snapshot, version 1 (keyed by
    ``type``) and version 0 (OpenAI messages keyed by ``role``).  Fixtures:
    ``tests/fixtures/grok/agent-sessions/`` (real chat history v1 and
    summaries) and ``tests/fixtures/grok/made-here/`` (updates streams built
    from the documented envelope).

    updates.jsonl: consecutive chunks of one kind are joined into one
    message, emitted when the next update of another kind arrives, with its
    first line and the number of lines it covers; thoughts are joined but not
    indexed.  A tool call and its updates become one tool_call and one
    tool_result event, emitted when the call reaches a final status or the
    turn completes.  Ids: ``<session>:<eventId>`` of the first line, else
    ``<session>:line<n>``; tools ``<session>:<toolCallId>`` (``#result``).

    chat_history.jsonl is rewritten on compaction, so its ids never use a
    position: ``<session>:<turn>:<hash>``, where the turn is the prompt
    index and the hash covers the record's text (``~n`` numbers identical
    records of one turn), so a rewrite that drops or inserts records
    leaves the ids of the records it keeps unchanged.
    """

    name = "grok"
    version = 1
    display = "Grok Build"
    env_vars = ("GROK_HOME",)
    # Grok Build documents [mcp_servers.<name>] in $GROK_HOME/config.toml.
    mcp = McpConfig("toml", ("mcp_servers",),
                    lambda env, home: [d / "config.toml" for d in env_dirs(env, "GROK_HOME", [home / ".grok"])],
                    ("grok",))

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``GROK_HOME`` (comma list allowed), else ``~/.grok``."""
        return env_dirs(env, "GROK_HOME", [home / ".grok"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield each session's updates.jsonl, else its chat_history.jsonl."""
        for prefix, root in _labelled(self.roots(env, home), home):
            listing, parents = [], {}
            for group in _subdirs(root / "sessions"):
                cwd = _grok_group_cwd(group)
                for folder in _subdirs(group):
                    listing.append((folder, cwd))
                    # Only the parent knows it spawned a sub-agent.
                    for child in _subdirs(folder / "subagents"):
                        meta = _dict(_read_json_file(child / "meta.json", 1 << 16))
                        if _str(meta.get("parent_session_id")):
                            parents[child.name] = meta["parent_session_id"]
            for folder, cwd in listing:
                for name, fmt in (("updates.jsonl", "updates"), ("chat_history.jsonl", "chat")):
                    path = folder / name
                    if _is_file(path):
                        meta = _grok_meta(folder, cwd, fmt, parents.get(folder.name))
                        yield SourceFile(str(path), _rel(prefix, root, path), meta=meta)
                        break

    def new_state(self, f: SourceFile) -> dict:
        """Start with no message pending, no tool open, summary not yet told."""
        return {}

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one line."""
        if not line.strip():
            return []
        obj = _load_object(line)
        out = self._summary(ctx)
        fmt = ctx.file.meta.get("format")
        if fmt == "chat" or (fmt is None and ctx.file.rel.endswith("chat_history.jsonl")):
            return out + self._chat(obj, ctx)
        return out + self._update(obj, ctx)

    def _summary(self, ctx: Context) -> list:
        """Report the summary.json facts once, and again when they change."""
        m = ctx.file.meta
        keys = ("session", "title", "title_rank", "cwd", "branch", "model", "parent")
        sig = _facts_sig(tuple(str(m.get(k)) for k in keys))
        if ctx.state.get("told") == sig or not _str(m.get("session")):
            return []
        ctx.state["told"] = sig
        rank = _int(m.get("title_rank"))
        return [SessionInfo(m["session"], title=_str(m.get("title")), title_rank=rank or 0,
                            cwd=_str(m.get("cwd")), branch=_str(m.get("branch")),
                            model=_str(m.get("model")), parent=_str(m.get("parent")))]

    # updates.jsonl -----------------------------------------------------------

    def _update(self, obj: dict, ctx: Context) -> list:
        """Return the events one update line completes."""
        st = ctx.state
        params = _dict(obj.get("params"))
        update = params.get("update")
        kind = _dict(update).get("sessionUpdate")
        if obj.get("method") not in _GROK_METHODS or not isinstance(kind, str):
            st["unknown"] = st.get("unknown", 0) + 1
            return []
        meta = {**_dict(update.get("_meta")), **_dict(params.get("_meta"))}
        ts = _ts(meta.get("agentTimestampMs"))
        if ts is None:
            ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        session = _str(params.get("sessionId")) or _str(ctx.file.meta.get("session")) or "unknown"
        # A line without a time takes the last one seen (or the session's
        # start), marked approximate.
        here = {"line": ctx.lineno, "off": ctx.offset, "session": session, "approx": ts is None,
                "ts": ts if ts is not None else st.get("ts", _grok_guess(ctx, 1))}
        if kind in _GROK_CHUNKS:
            return self._chunk(update, _GROK_CHUNKS[kind], meta, here, ctx)
        out = self._close_message(ctx)
        if kind in ("tool_call", "tool_call_update"):
            out += self._tool(update, here, ctx)
        elif kind == "turn_completed":
            out += self._flush_tools(ctx, len(st.get("tools") or {}))
        elif kind == "rewind_marker":
            # Lines after the target prompt are a dead branch from here on;
            # nothing is deleted, the marker is kept as a meta event.
            target = _plain(update.get("target_prompt_index")) or "?"
            rid = f"{session}:{_str(meta.get('eventId')) or f'line{ctx.lineno}'}"
            out.append(self._record(rid, "meta", "system", f"rewind to prompt {target}", here, ctx,
                                    indexed=False))
        elif not (kind in _GROK_QUIET or kind.startswith(_GROK_QUIET_PREFIXES)):
            st["unknown"] = st.get("unknown", 0) + 1
        return out

    def _chunk(self, update: dict, role: str, meta: dict, here: dict, ctx: Context) -> list:
        """Add a streamed chunk to the message being joined."""
        st = ctx.state
        text = _plain(update.get("content"))
        key = _str(meta.get("promptId")) or _str(update.get("messageId"))
        pending = st.get("msg")
        out = []
        if pending and (pending["role"] != role or (key and pending.get("key") not in (None, key))):
            out = self._close_message(ctx)
            pending = None
        if pending is None:
            rid = f"{here['session']}:{_str(meta.get('eventId')) or f'line{ctx.lineno}'}"
            pending = st["msg"] = dict(here, id=rid, role=role, key=key, text="", span=0)
        room = GROK_PENDING_MAX - len(pending["text"])
        if room > 0:
            pending["text"] += text if len(text) <= room else text[:room] + "…"
        pending["span"] = ctx.lineno - pending["line"] + 1
        return out

    def _close_message(self, ctx: Context) -> list:
        """Emit the message being joined, if any."""
        pending = ctx.state.pop("msg", None)
        if not pending or not pending["text"].strip():
            return []
        role, text = pending["role"], pending["text"]
        if role == "thought":
            # Joined for provenance, but reasoning never enters the index.
            text = truncate(text, TOOL_RESULT_MAX)
            return [self._record(pending["id"], "meta", "assistant", text, pending, ctx,
                                 indexed=False, span=pending["span"])]
        if role == "user":
            text = _grok_prompt(text)
        out = [self._record(pending["id"], "message", role, text, pending, ctx,
                            span=pending["span"])]
        if role == "user":
            out += self._title_once(ctx, pending["session"], text)
        return out

    def _tool(self, update: dict, here: dict, ctx: Context) -> list:
        """Merge a tool_call or tool_call_update into its open call."""
        tools = ctx.state.setdefault("tools", {})
        tid = _str(update.get("toolCallId")) or f"line{ctx.lineno}"
        call = tools.setdefault(tid, dict(here, name=None, input=None, out=None, status=None))
        name = _str(update.get("title")) or _str(update.get("kind"))
        if name:
            call["name"] = truncate(name, 200)
        if update.get("rawInput") is not None:
            call["input"] = truncate(_compact(_unjson(update["rawInput"])), TOOL_CALL_MAX)
        output = _grok_output(update)
        if output:
            # Every update repeats the whole output so far: keep the latest.
            call["out"] = truncate(output, TOOL_RESULT_MAX)
            call["at"] = [ctx.lineno, ctx.offset, here["ts"], here["approx"]]
        if _str(update.get("status")):
            call["status"] = update["status"]
        if call["status"] in _GROK_FINAL:
            return self._emit_tool(ctx, tid)
        return self._flush_tools(ctx, len(tools) - GROK_OPEN_TOOLS_MAX)

    def flush(self, ctx: Context) -> list:
        """Emit what a session that stopped writing left open.

        A joined message is closed by the next update and a tool call by its
        final status; once the file has been quiet for a while neither will
        come, so both are emitted as they stand.
        """
        out = self._close_message(ctx)
        return out + self._flush_tools(ctx, len(ctx.state.get("tools") or {}))

    def _flush_tools(self, ctx: Context, n: int) -> list:
        """Emit the n oldest open tool calls."""
        tools = ctx.state.get("tools") or {}
        oldest = sorted(tools, key=lambda t: tools[t]["line"])[: max(n, 0)]
        return [r for tid in oldest for r in self._emit_tool(ctx, tid)]

    def _emit_tool(self, ctx: Context, tid: str) -> list:
        """Emit one tool call and, when it has one, its result."""
        call = ctx.state["tools"].pop(tid)
        base = f"{call['session']}:{tid}"
        args = _unjson(call["input"]) if call["input"] is not None else None
        text = _tool_call_text(call["name"], args)
        out = [self._record(base, "tool_call", "assistant", text, call, ctx)]
        if call["out"] or call["status"] in _GROK_FINAL:
            # The result points at the update that carried the final output.
            at = dict(call, **dict(zip(("line", "off", "ts", "approx"), call.get("at") or ())))
            result = call["out"] or f"[{call['status']}]"
            out.append(self._record(base + "#result", "tool_result", "tool", result, at, ctx))
        return out

    # chat_history.jsonl ------------------------------------------------------

    def _chat(self, obj: dict, ctx: Context) -> list:
        """Return the events of one chat history record (v0 or v1)."""
        st = ctx.state
        kind = obj.get("type") if isinstance(obj.get("type"), str) else obj.get("role")
        session = _str(ctx.file.meta.get("session")) or "unknown"
        # A record with a time of its own is precise; the others get a time
        # between the session's start and its last update, marked approximate.
        own = _ts(obj.get("timestamp")) or _ts(obj.get("created_at"))
        here = {"line": None, "off": None, "ts": own if own is not None else _grok_guess(ctx, ctx.lineno),
                "approx": own is None, "session": session}
        synthetic = obj.get("synthetic_reason") is not None
        if kind == "user" and not synthetic:
            index = _int(obj.get("prompt_index"))
            st["prompts"] = st.get("prompts", 0) + 1
            st["turn"] = f"p{index}" if index is not None else f"u{st['prompts']}"
            st["k"], st["seen"] = 0, {}
        else:
            st["k"] = st.get("k", 0) + 1
        events: list[tuple[str, str, str, bool]] = []  # (kind, role, text, indexed)
        if kind == "system":
            events.append(("meta", "system", _plain(obj.get("content")), False))
        elif kind == "user":
            text = _plain(obj.get("content"))
            if synthetic:  # injected context: environment, instructions, reminders
                events.append(("meta", "user", text, False))
            else:
                events.append(("message", "user", _grok_prompt(text), True))
        elif kind == "assistant":
            events.append(("message", "assistant", _plain(obj.get("content")), True))
            for call in _list(obj.get("tool_calls")):
                fn = _dict(call).get("function")
                src = _dict(fn) if fn is not None else _dict(call)
                text = _tool_call_text(src.get("name"), src.get("arguments"))
                events.append(("tool_call", "assistant", text, True))
        elif kind in ("tool_result", "tool"):
            text = _plain(obj.get("content"))
            text += "\n[image]" * len(_list(obj.get("images")))
            events.append(("tool_result", "tool", truncate(text, TOOL_RESULT_MAX), True))
        elif kind == "backend_tool_call":
            spec = _dict(obj.get("kind"))
            text = _tool_call_text(spec.get("tool_type"), spec.get("action"))
            events.append(("tool_call", "assistant", text, True))
        elif kind != "reasoning":
            st["unknown"] = st.get("unknown", 0) + 1
        digest = short_hash(*(f"{k}\x00{r}\x00{t}" for k, r, t, _ in events), n=8)
        base = f"{session}:{st.get('turn', 's')}:{digest}"
        seen = st.setdefault("seen", {})
        if digest in seen:
            # The same record again in this turn (an identical tool result):
            # its occurrence tells the copies apart.
            seen[digest] += 1
            base += f"~{seen[digest]}"
        elif len(seen) < GROK_TURN_SEEN_MAX:
            seen[digest] = 1
        elif events:
            base += f"@{st['k']}"  # a turn too long to track: position, as a last resort
        out = []
        for i, (ekind, role, text, indexed) in enumerate(events):
            if text or ekind != "message":
                rid = base if i == 0 else f"{base}#{i}"
                model = _str(obj.get("model_id")) if role == "assistant" else None
                out.append(self._record(rid, ekind, role, text, here, ctx, indexed=indexed,
                                        model=model))
        if kind == "user" and not synthetic and events[0][2]:
            out += self._title_once(ctx, session, events[0][2])
        return out

    # shared ------------------------------------------------------------------

    def _title_once(self, ctx: Context, session: str, prompt: str) -> list:
        """Offer the first prompt as a fallback title, once per file."""
        title = None if ctx.state.get("titled") else _title_of(prompt, RANK_PROMPT)
        if not title:
            return []
        ctx.state["titled"] = True
        return [SessionInfo(session, title=title[0], title_rank=title[1])]

    def _record(self, rid: str, kind: str, role: str, text: str, at: dict, ctx: Context,
                indexed: bool = True, span: int = 1, model: str | None = None) -> Record:
        """Build a Record located at the line ``at`` describes."""
        m = ctx.file.meta
        return Record(rid, session=at["session"], kind=kind, role=role, text=text, ts=at["ts"],
                      ts_approx=at["approx"], indexed=indexed, cwd=_str(m.get("cwd")),
                      branch=_str(m.get("branch")), model=model, line=at["line"], offset=at["off"],
                      span=span)


###############################################################################
# Agent databases #############################################################
###############################################################################
# Read-only snapshots of the SQLite stores of Cursor and ZCode, for export().
# parse() never opens a database: an exported line carries all it needs.

#: A conversation is exported once it has gone this long without a change:
#: agents rewrite rows while an answer streams, and events never change.
DB_QUIET_MS = 60_000
#: A conversation still flagged as generating this long after its last change
#: was abandoned (the agent quit mid-answer): export what it holds.
DB_STUCK_MS = 3_600_000
#: Attempts at reading a busy or changing database, and the pause between.
DB_ATTEMPTS = 3
DB_RETRY_S = 0.2
#: How long one statement waits on an agent's lock before the attempt fails.
DB_BUSY_S = 1.0


class _Changed(Exception):
    """The database file changed while it was being read."""


def read_agent_db(path: str, reader: Callable[[sqlite3.Connection], Any]) -> Any:
    """Run reader on a read-only, consistent view of an agent's database.

    Return what reader returns, or None when the database is gone.  When it
    stays busy, locked, changing or unreadable through every attempt, raise
    ``UnreadableSource`` with the reason: ingest reports it and tries again
    at the next sync.  The agent's files are never written, and no -wal,
    -shm or -journal file is left next to them.
    """
    if not os.path.isfile(path):
        return None
    last: Exception | None = None
    for attempt in range(DB_ATTEMPTS):
        if attempt:
            time.sleep(DB_RETRY_S * attempt)
        try:
            return _read_db_once(Path(path), reader)
        except (sqlite3.Error, OSError, _Changed) as e:
            last = e
    raise UnreadableSource(f"cannot read {path} ({type(last).__name__}: {last}); will try again next sync")


def iter_agent_db(path: str, reader: Callable[[sqlite3.Connection], Iterator]) -> Iterator:
    """Yield what reader yields from a read-only, consistent view of a database.

    Like ``read_agent_db``, but the rows stream out while the snapshot is
    open, so exporting a database of gigabytes takes little memory.  A busy
    or changing database is retried only until the first row went out;
    after that, a failure raises ``UnreadableSource`` and the caller drops
    what it took (ingest rolls the file back and tries again next sync).
    """
    if not os.path.isfile(path):
        return
    last: Exception | None = None
    for attempt in range(DB_ATTEMPTS):
        if attempt:
            time.sleep(DB_RETRY_S * attempt)
        started = False
        try:
            for item in _read_db_once(Path(path), reader, stream=True):
                started = True
                yield item
            return
        except (sqlite3.Error, OSError, _Changed) as e:
            last = e
            if started:
                break
    raise UnreadableSource(f"cannot read {path} ({type(last).__name__}: {last}); will try again next sync")


def _read_db_once(db: Path, reader: Callable[[sqlite3.Connection], Any], stream: bool = False) -> Any:
    """Pick the way of opening db that neither writes nor blocks the agent."""
    wal, shm = _side(db, "-wal"), _side(db, "-shm")
    if wal.exists() and shm.exists():
        # The agent is running (or crashed): share its WAL index.  mode=ro
        # reads the committed state without creating any file.  If the index
        # needs a recovery a reader may not do, or stays busy, use a copy.
        if stream:
            return _stream_shared(db, reader)
        try:
            return _run_reader(_db_uri(db, "mode=ro"), reader)
        except sqlite3.OperationalError:
            return _read_copy(db, reader, stream)
    if _has_frames(wal) or _side(db, "-journal").exists():
        # A WAL without its index, or a hot journal, needs a writer to
        # recover; a read-only open would create the index beside the agent's
        # database.  Recover a private copy instead.
        return _read_copy(db, reader, stream)
    # No side files.  Even mode=ro would create -wal and -shm for a WAL-mode
    # database and leave them behind, and would hold a lock that stalls the
    # agent's writes to a rollback-journal one.  So read the file as
    # immutable (no locks, no side files) and check nothing wrote it meanwhile.
    if stream:
        return _stream_immutable(db, reader)
    before = _stamp(db)
    result = _run_reader(_db_uri(db, "immutable=1"), reader)
    if _stamp(db) != before or _has_frames(wal):
        raise _Changed(str(db))
    return result


def _stream_shared(db: Path, reader) -> Iterator:
    try:
        gen = _stream_reader(_db_uri(db, "mode=ro"), reader)
        first = next(gen, _END)
    except sqlite3.OperationalError:
        yield from _read_copy(db, reader, True)
        return
    if first is not _END:
        yield first
        yield from gen


def _stream_immutable(db: Path, reader) -> Iterator:
    before = _stamp(db)
    yield from _stream_reader(_db_uri(db, "immutable=1"), reader)
    if _stamp(db) != before or _has_frames(_side(db, "-wal")):
        raise _Changed(str(db))


_END = object()


def _stream_reader(uri: str, reader) -> Iterator:
    """Open uri and yield from reader inside one read transaction."""
    conn = sqlite3.connect(uri, uri=True, timeout=DB_BUSY_S, isolation_level=None)
    try:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("BEGIN")
        yield from reader(conn)
    finally:
        conn.close()


def _read_copy(db: Path, reader: Callable[[sqlite3.Connection], Any], stream: bool = False) -> Any:
    """Run reader on a copy of db and its WAL or journal in a temp dir."""
    tmp = _snapshot(db)
    if stream:
        return _stream_copy(tmp, db, reader)
    try:
        return _run_reader(_db_uri(Path(tmp) / db.name, "mode=rw"), reader)
    finally:
        _drop_snapshot(tmp)


def _stream_copy(tmp: str, db: Path, reader) -> Iterator:
    try:
        yield from _stream_reader(_db_uri(Path(tmp) / db.name, "mode=rw"), reader)
    finally:
        _drop_snapshot(tmp)


#: Where private copies of agent databases are made: a folder under
#: ORIGIN_HOME that ``use_scratch_dir`` names (the system temp folder only
#: when no store named one).  Copies hold an agent's whole database, access
#: tokens included, so they are owner-only and never outlive their reader.
_SCRATCH: dict[str, Path | None] = {"dir": None}
_SNAPSHOT_PREFIX = "origin-snapshot-"
#: Leftover copies in the system temp folder (made before copies moved under
#: ORIGIN_HOME) are removed once they are this old (seconds).
_LEGACY_SNAPSHOT_AGE_S = 3600
_MADE_HERE: set[str] = set()


def use_scratch_dir(path: Path) -> int:
    """Make private database copies under path; remove copies left by dead runs.

    A run killed while it read a copy leaves it behind; the next run that
    uses the same folder removes it (a copy of a live run, named after its
    process, stays).  Return how many leftovers were removed.
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    _SCRATCH["dir"] = path
    removed = 0
    for entry in _listing(path, lambda e: e.name.startswith(_SNAPSHOT_PREFIX)):
        if str(entry) not in _MADE_HERE and not _alive(_snapshot_pid(entry.name)):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    legacy = Path(tempfile.gettempdir())
    for entry in _listing(legacy, lambda e: e.name.startswith(_SNAPSHOT_PREFIX) and e.is_dir()):
        try:
            st = entry.stat()
            if st.st_uid == os.getuid() and time.time() - st.st_mtime > _LEGACY_SNAPSHOT_AGE_S:
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    return removed


def _snapshot_pid(name: str) -> int | None:
    head = name[len(_SNAPSHOT_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int | None) -> bool:
    """Tell whether process pid exists (a copy named after it may be in use)."""
    if pid is None or pid <= 0:
        return False
    if pid == os.getpid():
        return False  # this process's own copies are all in _MADE_HERE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, run by someone else
    return True


def _snapshot(db: Path) -> str:
    """Copy db and its WAL or journal to a new private folder; return it.

    Only the database and the one side file SQLite needs to recover it are
    copied, owner-only, into the scratch folder.
    """
    tmp = tempfile.mkdtemp(prefix=f"{_SNAPSHOT_PREFIX}{os.getpid()}-", dir=_SCRATCH["dir"])
    _MADE_HERE.add(tmp)
    try:
        side = _side(db, "-wal") if _side(db, "-wal").exists() else _side(db, "-journal")
        files = [db] + [side] * side.exists()
        before = [_stamp(f) for f in files]
        for f in files:
            with open(f, "rb") as src, os.fdopen(
                    os.open(Path(tmp) / f.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        if [_stamp(f) for f in files] != before:
            raise _Changed(str(db))
    except BaseException:
        _drop_snapshot(tmp)
        raise
    return tmp


def _drop_snapshot(tmp: str) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    _MADE_HERE.discard(tmp)


def _run_reader(uri: str, reader: Callable[[sqlite3.Connection], Any]) -> Any:
    """Open uri, run reader inside one read transaction, close."""
    conn = sqlite3.connect(uri, uri=True, timeout=DB_BUSY_S, isolation_level=None)
    try:
        # Agents store bytes that are not always valid UTF-8.
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        conn.execute("BEGIN")  # every query of the reader sees one snapshot
        return reader(conn)
    finally:
        conn.close()


def _has_frames(wal: Path) -> bool:
    """Tell whether a WAL file exists and holds more than its header.

    An empty WAL (left by a clean close) adds nothing to the database, which
    is then read in place rather than through a copy.
    """
    try:
        return wal.stat().st_size > 32
    except OSError:
        return False


def _side(db: Path, suffix: str) -> Path:
    """Return the path of one of SQLite's side files of db."""
    return db.with_name(db.name + suffix)


def _db_uri(db: Path, query: str) -> str:
    """Return a SQLite URI for db with query parameters."""
    return db.resolve().as_uri() + "?" + query


def _stamp(path: Path) -> tuple | None:
    """Return what changes when a file is written: inode, size, mtime."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _db_mtime_ms(path: str) -> int | None:
    """Return when a database or its WAL was last written, in epoch ms."""
    times = []
    for p in (Path(path), _side(Path(path), "-wal")):
        try:
            times.append(p.stat().st_mtime_ns // 1_000_000)
        except OSError:
            continue
    return max(times, default=None)


def _settled(last_ms: int | None, now_ms: int, busy: bool = False) -> bool:
    """True when a conversation last changed at last_ms is finished.

    busy: the agent flags it as generating; trusted until DB_STUCK_MS.
    """
    if last_ms is None:
        return True
    idle = now_ms - last_ms
    return idle >= DB_QUIET_MS and (not busy or idle >= DB_STUCK_MS)


def _tables(conn: sqlite3.Connection) -> set[str]:
    """Return the names of the tables of a database."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Return the column names of a table (none if it does not exist)."""
    quoted = '"' + table.replace('"', '""') + '"'
    return [r[1] for r in conn.execute(f"PRAGMA table_info({quoted})")]


def _loads(value: Any) -> Any:
    """Return the JSON value a column holds, or None if it holds none."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = _as_str(value)
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _line(obj: dict) -> str:
    """Return obj as one JSON line: no character any reader splits on."""
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape
        s = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    # json.dumps escapes control characters but not these, which
    # str.splitlines() treats as line breaks; they occur only in strings.
    return s.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _as_str(value: Any) -> str:
    """Return a column value as text (BLOBs decoded as UTF-8)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _scalar(value: Any) -> Any:
    """Return a column value that JSON can hold: BLOBs become text."""
    return _as_str(value) if isinstance(value, (bytes, bytearray, memoryview)) else value


def _digest(*parts: Any) -> str:
    """Return the hash the engine keeps to spot a changed row."""
    return short_hash(*(p if isinstance(p, (str, bytes)) else _compact(p) for p in parts))


###############################################################################
# Cursor ######################################################################
###############################################################################

#: state.vscdb ItemTable keys read, by exact name.  The table also holds the
#: cursorAuth/* tokens, so nothing else in it is ever selected.
_CURSOR_CHATDATA = "workbench.panel.aichat.view.aichat.chatdata"
_CURSOR_COMPOSERS = "composer.composerData"
#: The prompt history of the IDE era before composers: what the user typed
#: (``[{text, commandType}]``) and what was generated for it
#: (``[{unixMs, generationUUID, type, textDescription}]``).
_CURSOR_PROMPTS = "aiService.prompts"
_CURSOR_GENERATIONS = "aiService.generations"
#: Bytes of an undecodable store.db blob kept (base64) in its exported line.
CURSOR_RAW_MAX = 4096
#: Filesystem checks spent turning one project slug back into a path.
CURSOR_SLUG_BUDGET = 256

_BUBBLE_ROLES = {1: "user", 2: "assistant", "user": "user", "ai": "assistant", "assistant": "assistant"}
_TIMESTAMP_TAG = re.compile(r"<timestamp>(.*?)</timestamp>", re.S)
_USER_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.S)
_TXT_HEADER = re.compile(r"^(user|assistant|A):\s*(.*)$")
_TXT_MARKER = re.compile(r"^\[(Thinking|Tool call|Tool result)\]\s*(.*)$")
_TXT_KINDS = {"Thinking": "k", "Tool call": "c", "Tool result": "r"}

#: What an event tag stands for: (kind, role, indexed).
_TAGS = {
    "u": ("message", "user", True),
    "a": ("message", "assistant", True),
    "k": ("message", "assistant", False),  # thinking
    "s": ("message", "system", False),
    "c": ("tool_call", "assistant", True),
    "r": ("tool_result", "tool", True),
    "e": ("meta", "system", False),
}


class Cursor(Adapter):
    """Read Cursor's three stores: state.vscdb, agent transcripts, store.db.

    ``state.vscdb`` (VS Code's key/value SQLite, global and per workspace),
    kind "db": the legacy chat tabs (``workbench.panel.aichat.view.aichat.
    chatdata``, 2024), composers with an inline ``conversation`` in
    ``composer.composerData`` (2024), and ``cursorDiskKV`` ``composerData:*``
    (``_v`` 9/10 or none) with ``bubbleId:*`` rows (``_v`` 3), 2025.
    Fixtures: ``tests/fixtures/cursor/slevin48-workspace/state.vscdb`` (tabs,
    inline composers) and ``tests/fixtures/cursor/urpg-global/state.vscdb``
    (cursorDiskKV, mixed ``_v``, NULL rows, orphan tool bubbles).

    Agent transcripts under ``~/.cursor/projects/<slug>/agent-transcripts/``,
    kind "log": JSONL ``{role, message:{content}}`` lines and ``turn_ended``
    lines (2026; ``tests/fixtures/cursor/agent-sessions/``, placeholder
    content), and the older TXT marker grammar (``user:``/``assistant:``/
    ``A:`` blocks, ``[Thinking]``, ``[Tool call]``, ``[Tool result]``).

    The ``cursor-agent`` store ``~/.cursor/chats/<md5 of cwd>/<id>/store.db``,
    kind "db": ``meta`` key "0" (hex-encoded JSON) and ``blobs`` holding JSON
    message objects; protobuf blobs are kept raw, capped.  No public sample.

    Sessions are composer, tab, agent and transcript ids, which Cursor shares
    between stores.  Event ids are ``<session>:<tag>:<hash>:<n>``: the tag
    names the kind (u, a, k thinking, s system, c tool call, r tool result,
    e lifecycle), the hash covers the normalised text, and n counts earlier
    events of the session with the same tag and hash.  So one message seen
    in two stores is stored once, and a rewritten bubble yields a new event
    only when its text changed.
    """

    name = "cursor"
    version = 1
    display = "Cursor"
    kind = "db"
    env_vars = ("ORIGIN_CURSOR_USER_DIR", "ORIGIN_CURSOR_HOME")
    mcp = McpConfig("json", ("mcpServers",), lambda env, home: [home / ".cursor" / "mcp.json"],
                    ("cursor", "cursor-agent"), homes=lambda env, home: [home / ".cursor"])

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return the editor's User folders, then the ``~/.cursor`` folders."""
        return _cursor_user_dirs(env, home) + _cursor_homes(env, home)

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield state databases, transcripts and cursor-agent stores."""
        found: list[SourceFile] = []
        folders: list[str] = []
        for prefix, root in _labelled(_cursor_user_dirs(env, home), home):
            found += _cursor_state_dbs(prefix, root, folders)
        for prefix, root in _labelled(_cursor_homes(env, home), home):
            found += _cursor_transcripts(prefix, root, folders)
            found += _cursor_agent_stores(prefix, root, folders)
        yield from found

    def new_state(self, f: SourceFile) -> dict:
        """Start with no earlier events counted and no TXT block open."""
        return {}

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one line."""
        if not line.strip():
            return []
        if ctx.file.kind == "db":
            return _cursor_exported(_load_object(line), ctx)
        if ctx.file.meta.get("format") == "txt":
            return _cursor_txt_line(line.rstrip("\r"), ctx)
        return _cursor_jsonl_line(_load_object(line), ctx)

    def flush(self, ctx: Context) -> list:
        """Return the events of a TXT transcript block still open at its end.

        A TXT block ends where the next one starts; the last block of a file
        that stopped growing has no successor and is only emitted here.
        """
        return _cursor_txt_close(ctx) if ctx.file.meta.get("format") == "txt" else []

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, hash, line) for finished new or changed conversation rows."""
        if f.meta.get("store") == "agent":
            if not _settled(_db_mtime_ms(f.path), now_ms):
                return
            lines = read_agent_db(f.path, lambda conn: _agent_store_lines(conn, f, known))
        else:
            run = _StateExport(f, known, now_ms)
            yield from iter_agent_db(f.path, run.lines)
            return
        yield from lines or ()


def _unknown(ctx: Context) -> list:
    """Count a record of a kind this adapter does not know; return none."""
    ctx.state["unknown"] = ctx.state.get("unknown", 0) + 1
    return []


# Discovery -------------------------------------------------------------------


def _cursor_user_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    """Return ``ORIGIN_CURSOR_USER_DIR`` (comma list), else the defaults."""
    defaults = [home / ".config" / "Cursor" / "User", home / "Library" / "Application Support" / "Cursor" / "User"]
    if env.get("APPDATA"):
        defaults.append(Path(env["APPDATA"]) / "Cursor" / "User")
    wsl = Path("/mnt/c/Users")
    _look(wsl)
    if sys.platform.startswith("linux") and wsl.is_dir():
        defaults += [u / "AppData" / "Roaming" / "Cursor" / "User" for u in _subdirs(wsl)]
    return env_dirs(env, "ORIGIN_CURSOR_USER_DIR", defaults)


def _cursor_homes(env: Mapping[str, str], home: Path) -> list[Path]:
    """Return ``ORIGIN_CURSOR_HOME`` (comma list), else ``~/.cursor``."""
    return env_dirs(env, "ORIGIN_CURSOR_HOME", [home / ".cursor"])


def _cursor_state_dbs(prefix: str, root: Path, folders: list[str]) -> list[SourceFile]:
    """Return the global and workspace state.vscdb files of a User folder.

    Only files named exactly state.vscdb are taken, never state.vscdb.backup.
    Appends each workspace's folder to folders.
    """
    out = []
    db = root / "globalStorage" / "state.vscdb"
    if _is_file(db):
        out.append(SourceFile(str(db), _rel(prefix, root, db), kind="db", meta={"store": "global"}))
    for ws in _subdirs(root / "workspaceStorage"):
        db = ws / "state.vscdb"
        if not _is_file(db):
            continue
        folder = _workspace_folder(ws)
        meta = {"store": "workspace"}
        if folder:
            meta["folder"] = folder
            folders.append(folder)
        out.append(SourceFile(str(db), _rel(prefix, root, db), kind="db", meta=meta))
    return out


def _cursor_transcripts(prefix: str, root: Path, folders: list[str]) -> list[SourceFile]:
    """Return the agent transcripts under ``<root>/projects/``.

    Flat ``<uuid>.txt`` (or ``.jsonl``) files, ``<uuid>/<uuid>.jsonl`` and
    sub-agents ``<uuid>/subagents/<uuid>.jsonl``.  Appends each project
    folder found on disk to folders.  A project folder not on disk (moved,
    deleted, or of another machine) still names the project: the last word
    of its slug.
    """
    out = []
    for project in _subdirs(root / "projects"):
        folder = project / "agent-transcripts"
        if not _is_dir(folder):
            continue
        cwd = _cursor_slug_path(project.name)
        base = {"cwd": cwd} if cwd else {}
        if cwd:
            folders.append(cwd)
        elif _cursor_slug_name(project.name):
            base = {"project": _cursor_slug_name(project.name)}
        for suffix, fmt in ((".txt", "txt"), (".jsonl", "jsonl")):
            for path in _files(folder, suffix):
                out.append(_transcript(prefix, root, path, {**base, "format": fmt}))
        for chat in _subdirs(folder):
            for path in _files(chat, ".jsonl"):
                parent = {"parent": chat.name} if path.stem != chat.name else {}
                out.append(_transcript(prefix, root, path, {**base, **parent, "format": "jsonl"}))
            for path in _files(chat / "subagents", ".jsonl"):
                out.append(_transcript(prefix, root, path, {**base, "parent": chat.name, "format": "jsonl"}))
    return out


def _transcript(prefix: str, root: Path, path: Path, meta: dict) -> SourceFile:
    """Return the SourceFile of a transcript, named after its session id."""
    return SourceFile(str(path), _rel(prefix, root, path), meta={"session": path.stem, **meta})


def _cursor_agent_stores(prefix: str, root: Path, folders: list[str]) -> list[SourceFile]:
    """Return the cursor-agent stores ``<root>/chats/<md5>/<id>/store.db``.

    The folder name is the MD5 of the working directory; a folder seen
    elsewhere (a workspace, a project) with that hash names the cwd.
    """
    by_hash = {hashlib.md5(f.encode("utf-8"), usedforsecurity=False).hexdigest(): f for f in folders}
    out = []
    for group in _subdirs(root / "chats"):
        for chat in _subdirs(group):
            db = chat / "store.db"
            if not _is_file(db):
                continue
            meta = {"store": "agent", "agent": chat.name}
            if group.name in by_hash:
                meta["cwd"] = by_hash[group.name]
            out.append(SourceFile(str(db), _rel(prefix, root, db), kind="db", meta=meta))
    return out


def _workspace_folder(ws: Path) -> str | None:
    """Return the folder of a workspaceStorage entry, from workspace.json."""
    info = _dict(_read_json_file(ws / "workspace.json", 1 << 16))
    if _str(info.get("folder")):
        return _uri_path(info["folder"])
    if _str(info.get("workspace")):  # a .code-workspace file: its folder
        path = _uri_path(info["workspace"])
        if path and "/" in path.strip("/"):
            return path.rsplit("/", 1)[0]
        return path
    return None


def _uri_path(uri: str) -> str | None:
    """Return the path of a file:// or vscode-remote:// URI."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("file", "vscode-remote"):
        return None
    path = urllib.parse.unquote(parts.path)
    if re.match(r"^/[A-Za-z]:", path):  # file:///c%3A/Users/... on Windows
        path = path[1:]
    return path.rstrip("/") or None


def _cursor_slug_path(slug: str) -> str | None:
    """Return the existing folder a project slug stands for, if there is one.

    The slug is the path with separators turned into dashes and no leading
    dash, so "Users-ann-my-app" is /Users/ann/my-app or /Users/ann/my/app:
    splits are tried against the filesystem, shortest names first.
    """
    parts = slug.split("-")
    if not all(parts):
        return None
    if os.name == "nt" and len(parts[0]) == 1 and parts[0].isalpha():
        base, parts = Path(parts[0] + ":/"), parts[1:]
    else:
        base = Path("/")
    budget = [CURSOR_SLUG_BUDGET]

    def walk(at: Path, rest: list[str]) -> Path | None:
        if not rest:
            return at
        for i in range(1, len(rest) + 1):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            candidate = at / "-".join(rest[:i])
            if candidate.is_dir():
                found = walk(candidate, rest[i:])
                if found:
                    return found
        return None

    found = walk(base, parts)
    return found.as_posix() if found else None


def _cursor_slug_name(slug: str) -> str | None:
    """Return the project name a slug stands for when its folder is not on disk.

    The slug is the folder's path with "/" turned into "-", so its last
    word is the folder's name, or the last word of it ("my-app" gives "app").
    """
    words = [w for w in slug.split("-") if w]
    return words[-1] if words else None


# Event ids and text ----------------------------------------------------------


def _user_text(text: str) -> str:
    """Return what the user typed: <user_query> contents, no <timestamp> tags."""
    text = _TIMESTAMP_TAG.sub("", text)
    queries = _USER_QUERY.findall(text)
    return "\n".join(q.strip() for q in queries) if queries else text.strip()


def _inband_ts(text: str) -> int | None:
    """Return the time of a <timestamp> tag in a message, if it has one."""
    m = _TIMESTAMP_TAG.search(text)
    return _ts(m.group(1).strip()) if m else None


def _content_key(tag: str, text: str) -> str:
    """Return ``<tag>:<hash>`` of an event's text, ignoring layout.

    Whitespace is collapsed and user text reduced to what was typed, so the
    same message read from different stores gives the same key.
    """
    if tag == "u":
        text = _user_text(text)
    return f"{tag}:{short_hash(tag, ' '.join(text.split()), n=12)}"


def _events(session: str, items: list[tuple[str, str]], occ: Mapping[str, int], **common) -> list[Record]:
    """Return Records for (tag, text) items; occ gives each key's count.

    common: Record fields shared by all (ts, cwd, model, line...).  The
    model names who answered, so user events do not carry it.
    """
    out = []
    for tag, text in items:
        key = _content_key(tag, text)
        kind, role, indexed = _TAGS[tag]
        fields = dict(common)
        if role == "user":
            fields.pop("model", None)
        out.append(Record(id=f"{session}:{key}:{occ.get(key, 0)}", session=session, kind=kind, role=role,
                          text=text, indexed=indexed, **fields))
    return out


def _count(items: list[tuple[str, str]], seen: dict) -> dict:
    """Return each item's occurrence number, counting it in seen."""
    occ = {}
    for tag, text in items:
        key = _content_key(tag, text)
        occ[key] = seen.get(key, 0)
        seen[key] = occ[key] + 1
    return occ


def _text_slot(items: list, texts: list[str], block: dict) -> None:
    """Collect a text block; the first one keeps the message's place in items."""
    if not texts:
        items.append(None)
    texts.append(_str(block.get("text")) or "")


def _fill_text(items: list, texts: list[str], tag: str) -> list[tuple[str, str]]:
    """Put the joined text blocks of a message in the place kept for them."""
    text = "\n".join(t for t in texts if t)
    if tag == "u":
        text = _user_text(text)
    return [(tag, text) if item is None else item for item in items if item is not None or text.strip()]


def _bubble_items(b: dict) -> list[tuple[str, str]] | None:
    """Return the (tag, text) events of a bubble; None for an unknown type."""
    role = _BUBBLE_ROLES.get(b.get("type"))
    if role is None:
        return None
    items = []
    thinking = _bubble_thinking(b)
    if thinking:
        items.append(("k", thinking))
    text = b.get("text") if _str(b.get("text")) else b.get("rawText")
    if isinstance(text, str) and text.strip():
        items.append(("u" if role == "user" else "a", text))
    tool = _dict(b.get("toolFormerData"))
    name = _str(tool.get("name")) or (f"tool-{tool['tool']}" if _int(tool.get("tool")) is not None else None)
    if name:
        items.append(("c", _tool_call_text(name, tool.get("rawArgs") or tool.get("params"))))
        result = tool.get("result")
        output = _output_text(result) if result not in (None, "") else _plain(tool.get("error"))
        if output.strip():
            items.append(("r", truncate(output, TOOL_RESULT_MAX)))
    return items


def _bubble_thinking(b: dict) -> str:
    """Return a bubble's thinking text, from ``thinking`` or its blocks."""
    thinking = b.get("thinking")
    if isinstance(thinking, dict):
        thinking = thinking.get("text")
    if _str(thinking) and thinking.strip():
        return thinking
    blocks = [_str(x.get("text")) or _str(x.get("thinking")) for x in _list(b.get("allThinkingBlocks"))
              if isinstance(x, dict)]
    return "\n".join(t for t in blocks if t)


def _bubble_time(b: dict) -> int | None:
    """Return when a bubble was written, if it says so.

    timingInfo mixes wall-clock ms with a performance counter
    (clientStartTime), so only values that look like epoch ms count.
    """
    created = _ts(b.get("createdAt"))
    if created:
        return created
    timing = _dict(b.get("timingInfo"))
    for key in ("clientRpcSendTime", "clientSettleTime", "clientEndTime"):
        value = timing.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1e12:
            return int(value)
    return None


def _guess_times(own: list[int | None], created: int | None, updated: int | None) -> list[tuple[int | None, bool]]:
    """Return (ts, approximate) per bubble from their own times and the chat's.

    A bubble without a time takes the next later one known (a question is
    sent just before its answer), the first one the chat's creation, and
    the rest the chat's last update.
    """
    out: list[tuple[int | None, bool]] = []
    later = updated or created
    for i in range(len(own) - 1, -1, -1):
        if own[i] is not None:
            out.append((own[i], False))
            later = own[i]
        else:
            out.append((created if i == 0 and created else later, True))
    return out[::-1]


def _prune(obj: dict) -> dict:
    """Drop a row's empty fields (null, "", [], {}) before it is mirrored."""
    return {k: v for k, v in obj.items() if v not in (None, "", [], {})}


# state.vscdb export ----------------------------------------------------------


class _StateExport:
    """One export of a state.vscdb: what is known, when, and what to yield."""

    def __init__(self, f: SourceFile, known: Mapping[str, str], now_ms: int):
        self.f = f
        self.known = known
        self.now_ms = now_ms
        self.file_ms = _db_mtime_ms(f.path)
        self._cwds: dict[str, str] | None = None

    def lines(self, conn: sqlite3.Connection) -> Iterator[tuple[str, str, str]]:
        """Yield export tuples for the allow-listed rows, one conversation at a time."""
        tables = _tables(conn)
        if "ItemTable" in tables:
            chatdata, composers = _item(conn, _CURSOR_CHATDATA), _item(conn, _CURSOR_COMPOSERS)
            yield from self._chat_tabs(chatdata)
            yield from self._listed_composers(composers)
            yield from self._prompt_history(conn, tables, chatdata, composers)
        if "cursorDiskKV" in tables:
            yield from self._kv_composers(conn)

    def _prompt_history(self, conn: sqlite3.Connection, tables: set[str], chatdata: Any, composers: Any) -> list:
        """Export the prompts of ``aiService.prompts`` / ``aiService.generations``.

        They are the user's own prompts of that era, in one session per
        database.  A prompt whose text a user bubble of this database also
        holds (a chat tab, a composer) is that bubble's: it is left out.  A
        prompt takes the time of the generation made for the same text, else
        the database's time (marked approximate).
        """
        prompts = [_str(_dict(p).get("text")) for p in _list(_item(conn, _CURSOR_PROMPTS))]
        gens = [(_str(_dict(g).get("textDescription")), _ts(_dict(g).get("unixMs")))
                for g in _list(_item(conn, _CURSOR_GENERATIONS))]
        prompts = [p for p in prompts if p and p.strip()]
        gens = [(t, ts) for t, ts in gens if t and t.strip()]
        if not (prompts or gens) or not _settled(self.file_ms, self.now_ms):
            return []
        typed = _typed_keys(conn, tables, chatdata, composers)
        made: dict[str, list[tuple[str, int | None]]] = {}
        for text, ts in gens:
            made.setdefault(_content_key("u", text), []).append((text, ts))
        entries = []
        for text in prompts:
            pool = made.get(_content_key("u", text))
            entries.append((text, pool.pop(0)[1] if pool else None))
        # Generations whose prompt the history no longer lists are prompts too.
        entries += [item for pool in made.values() for item in pool]
        session = _prompt_session(self.f)
        seen: dict[str, int] = {}
        out = []
        for text, ts in entries:
            key = _content_key("u", text)
            occ = _count([("u", text)], seen)
            if key in typed:
                continue  # a bubble holds the same prompt
            line = {"t": "prompt", "session": session, "ts": ts or self.file_ms, "approx": ts is None,
                    "occ": occ, "text": text}
            export_key, digest = f"prompt:{session}:{key}:{occ[key]}", _digest(line)
            if self.known.get(export_key) == digest:
                continue
            line["cwd"] = self.f.meta.get("folder")
            out.append((export_key, digest, _line({k: v for k, v in line.items() if v is not None})))
        if out:
            folder = last_segment(self.f.meta.get("folder"))
            info = {"store": "prompts", "title": "Cursor prompt history" + (f" ({folder})" if folder else "")}
            out = self._session(f"session:{session}", session, info, True) + out
        return out

    def cwd(self, composer: str) -> str | None:
        """Return the workspace folder of a composer, if known."""
        if self.f.meta.get("folder"):
            return self.f.meta["folder"]
        if self._cwds is None:
            self._cwds = _workspace_composers(Path(self.f.path))
        return self._cwds.get(composer)

    def _chat_tabs(self, chatdata: Any) -> Iterator:
        """Export the legacy chat tabs: one session line, a line per bubble."""
        for tab in _list(_dict(chatdata).get("tabs")):
            tab_id = _str(_dict(tab).get("tabId"))
            if not tab_id:
                continue
            last = _ts(tab.get("lastSendTime")) or self.file_ms
            if not _settled(last, self.now_ms):
                continue
            bubbles = [(f"chat:{tab_id}:{_str(b.get('id')) or i}", _digest(b), b)
                       for i, b in enumerate(_list(tab.get("bubbles"))) if isinstance(b, dict)]
            info = {"store": "tab", "title": _str(tab.get("chatTitle"))}
            yield from self._session(f"tab:{tab_id}", tab_id, info, bool(bubbles))
            yield from self._conversation("chat", tab_id, bubbles, None, last)

    def _listed_composers(self, data: Any) -> Iterator:
        """Export composer.composerData: inline conversations, workspace links."""
        for comp in _list(_dict(data).get("allComposers")):
            cid = _str(_dict(comp).get("composerId"))
            if not cid:
                continue
            created, last = _composer_times(comp, self.file_ms)
            if not _settled(last, self.now_ms, _generating(comp)):
                continue
            bubbles = _inline_bubbles(cid, comp)
            yield from self._session(f"composer:{cid}", cid, _composer_info(comp, None), True)
            yield from self._conversation("inline", cid, bubbles, created, last, _composer_model(comp))

    def _kv_composers(self, conn: sqlite3.Connection) -> Iterator:
        """Export cursorDiskKV composers and the bubble rows of each."""
        # Memory stays flat however large the database: the first passes keep
        # only composer ids and sub-composer links, and each composer's data
        # and bubble hashes are read when its turn comes.
        ids, parents = set(), {}
        for key, value in _kv_range(conn, "composerData:"):
            data = _loads(value)
            if isinstance(data, dict):
                cid = key.split(":", 1)[1]
                ids.add(cid)
                parents.update((sub, cid) for sub in _list(data.get("subComposerIds")) if isinstance(sub, str))
        end = "bubbleId;"  # the key range of "bubbleId:", as in _kv_range
        counts: dict[str, int] = {}
        for (key,) in conn.execute("SELECT key FROM cursorDiskKV WHERE key >= 'bubbleId:' AND key < ?", (end,)):
            parts = key.split(":")
            if len(parts) == 3:
                ids.add(parts[1])
                counts[parts[1]] = counts.get(parts[1], 0) + 1
        for cid in sorted(ids):
            row = conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (f"composerData:{cid}",)).fetchone()
            comp = _dict(_loads(row[0])) if row else {}
            created, last = _composer_times(comp, self.file_ms)
            if not _settled(last, self.now_ms, _generating(comp)):
                continue
            info = _composer_info(comp, parents.get(cid))
            if _ts(comp.get("lastUpdatedAt")) is not None:
                # The composer's own change time and its number of bubble
                # rows go into its session line: when both match what the
                # last export saw, none of its bubble values is read.  A
                # running Cursor rewrites the database all the time (editor
                # state), so this keeps a re-read to the keys and composers.
                info.update(updated=last, bubbles=counts.get(cid, 0))
                if self.known.get(f"composer:{cid}") == _digest(_session_line(cid, info)):
                    continue
            inline = _inline_bubbles(cid, comp)
            # Rows are compared by the hash of their raw value, so a composer
            # with nothing new costs no JSON decoding.
            rows = {key.split(":")[2]: _digest(value) for key, value in _kv_range(conn, f"bubbleId:{cid}:")
                    if value is not None and key.count(":") == 2}
            fresh = any(self.known.get(f"bubble:{cid}:{b}") != d for b, d in rows.items())
            if fresh or any(self.known.get(k) != d for k, d, _ in inline):
                bubbles = _order_bubbles(comp, inline + _kv_bubbles(conn, cid))
            else:
                bubbles = []
            yield from self._conversation("kv", cid, bubbles, created, last, _composer_model(comp))
            # After its bubbles: the session line is what marks the composer
            # as read, so it is recorded only with (or after) them.
            yield from self._session(f"composer:{cid}", cid, info, bool(rows or inline))

    def _session(self, key: str, session: str, info: dict, has_content: bool) -> list:
        """Export a session line when its facts are new or changed.

        The cwd is left out of the hash: finding it may mean reading the
        workspace databases, which only happens when a line goes out.
        """
        if not has_content and not info.get("title"):
            return []
        line = _session_line(session, info)
        digest = _digest(line)
        if self.known.get(key) == digest:
            return []
        cwd = self.cwd(session)
        if cwd:
            line["cwd"] = cwd
        return [(key, digest, _line(line))]

    def _conversation(self, store: str, session: str, bubbles: list[tuple[str, str, dict]],
                      created: int | None, last: int | None, model: str | None = None) -> list:
        """Export the new or changed bubbles of one conversation, in order.

        Every bubble is walked, changed or not, so that occurrence numbers
        and guessed times match what the earlier bubbles got.
        """
        if all(self.known.get(k) == d for k, d, _ in bubbles):
            return []
        times = _guess_times([_bubble_time(b) for _, _, b in bubbles], created, last)
        seen: dict[str, int] = {}
        out = []
        cwd = None
        for (key, digest, bubble), (ts, approx) in zip(bubbles, times):
            items = _bubble_items(bubble)
            occ = _count(items or [], seen)
            if self.known.get(key) == digest or items == []:
                continue  # unchanged, or an empty draft: nothing to say yet
            cwd = cwd or self.cwd(session)
            line = {"t": "bubble", "store": store, "session": session, "ts": ts, "approx": approx,
                    "cwd": cwd, "model": model, "occ": occ, "bubble": _prune(bubble)}
            out.append((key, digest, _line({k: v for k, v in line.items() if v is not None})))
        return out


def _session_line(session: str, info: dict) -> dict:
    """Return the exported line of a session's facts (its hash leaves out the cwd)."""
    return {"t": "session", "session": session, **{k: v for k, v in info.items() if v is not None}}


def _prompt_session(f: SourceFile) -> str:
    """Name the prompt-history session of a state.vscdb: its workspace id, or "global"."""
    return "prompts:" + (Path(f.path).parent.name if f.meta.get("store") == "workspace" else "global")


def _typed_keys(conn: sqlite3.Connection, tables: set[str], chatdata: Any, composers: Any) -> set[str]:
    """Return the content keys of every user bubble of a state.vscdb."""
    bubbles = [b for tab in _list(_dict(chatdata).get("tabs")) for b in _list(_dict(tab).get("bubbles"))]
    for comp in _list(_dict(composers).get("allComposers")):
        bubbles += [b for _, _, b in _inline_bubbles("", _dict(comp))]
    if "cursorDiskKV" in tables:
        bubbles += [_loads(v) for _, v in _kv_range(conn, "bubbleId:")]
    keys = set()
    for b in bubbles:
        for tag, text in (_bubble_items(b) or []) if isinstance(b, dict) else []:
            if tag == "u":
                keys.add(_content_key("u", text))
    return keys


def _item(conn: sqlite3.Connection, key: str) -> Any:
    """Return the JSON value of one allow-listed ItemTable key."""
    row = conn.execute("SELECT value FROM ItemTable WHERE key = ?", (key,)).fetchone()
    return _loads(row[0]) if row else None


def _kv_range(conn: sqlite3.Connection, prefix: str) -> Iterator[tuple[str, Any]]:
    """Yield (key, value) of the cursorDiskKV rows under a key prefix.

    A key range rather than LIKE: it is exact (LIKE ignores case and treats
    _ as a wildcard) and uses the key's index.
    """
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    yield from conn.execute("SELECT key, value FROM cursorDiskKV WHERE key >= ? AND key < ? ORDER BY key",
                            (prefix, end))


def _kv_bubbles(conn: sqlite3.Connection, composer: str) -> list[tuple[str, str, dict]]:
    """Return (export key, raw hash, bubble) for the bubble rows of a composer."""
    out = []
    for key, value in _kv_range(conn, f"bubbleId:{composer}:"):
        bubble = _loads(value)
        if isinstance(bubble, dict):
            out.append((f"bubble:{composer}:{key.rsplit(':', 1)[1]}", _digest(value), bubble))
    return out


def _inline_bubbles(composer: str, comp: dict) -> list[tuple[str, str, dict]]:
    """Return (export key, hash, bubble) for bubbles kept inside a composer."""
    found = [b for b in _list(comp.get("conversation")) if isinstance(b, dict)]
    found += [b for b in _dict(comp.get("conversationMap")).values() if isinstance(b, dict)]
    return [(f"bubble:{composer}:{_str(b.get('bubbleId')) or i}", _digest(b), b) for i, b in enumerate(found)]


def _order_bubbles(comp: dict, bubbles: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """Order a composer's bubbles as its header list does; the rest after.

    A bubble row wins over an inline copy with the same id.  Bubbles the
    header list does not name (an edited or reverted turn) keep their
    stored order after the listed ones.
    """
    by_key = {k: (k, d, b) for k, d, b in bubbles}
    stored = {k: i for i, k in enumerate(by_key)}
    cid = _str(comp.get("composerId"))
    listed = [f"bubble:{cid}:{h['bubbleId']}" for h in _list(comp.get("fullConversationHeadersOnly"))
              if isinstance(h, dict) and _str(h.get("bubbleId"))]
    rank = {k: i for i, k in enumerate(listed)}
    return [by_key[k] for k in sorted(by_key, key=lambda k: (rank.get(k, len(rank)), stored[k]))]


def _composer_times(comp: dict, fallback: int | None) -> tuple[int | None, int | None]:
    """Return a composer's (created, last changed) in ms."""
    created = _ts(comp.get("createdAt"))
    return created, _ts(comp.get("lastUpdatedAt")) or created or fallback


def _generating(comp: dict) -> bool:
    """True while Cursor says a composer is still answering."""
    return bool(_list(comp.get("generatingBubbleIds"))) or comp.get("status") == "generating"


def _composer_model(comp: dict) -> str | None:
    """Return a composer's model, unless it is Cursor's automatic choice."""
    name = _str(_dict(comp.get("modelConfig")).get("modelName"))
    return None if name == "default" else name


def _composer_info(comp: dict, parent: str | None) -> dict:
    """Return the session facts of a composer."""
    return {"store": "composer", "title": _str(comp.get("name")), "created": _ts(comp.get("createdAt")),
            "model": _composer_model(comp), "mode": _str(comp.get("unifiedMode")), "parent": parent}


def _workspace_composers(global_db: Path) -> dict[str, str]:
    """Map composer ids to folders, from the workspaces beside global_db.

    Since 2025 a workspace database only lists the ids of its composers,
    whose bubbles live in the global database.
    """
    out: dict[str, str] = {}
    for ws in _subdirs(global_db.parent.parent / "workspaceStorage"):
        db = ws / "state.vscdb"
        folder = _workspace_folder(ws)
        if not folder or not db.is_file():
            continue
        listing = read_agent_db(str(db), lambda conn: _item(conn, _CURSOR_COMPOSERS)
                                if "ItemTable" in _tables(conn) else None)
        for comp in _list(_dict(listing).get("allComposers")):
            if _str(_dict(comp).get("composerId")):
                out.setdefault(comp["composerId"], folder)
    return out


# cursor-agent store.db export ------------------------------------------------


def _agent_store_lines(conn: sqlite3.Connection, f: SourceFile, known: Mapping[str, str]) -> list:
    """Export a cursor-agent store: its session line and new blobs.

    Blobs are content-addressed, so a blob once exported never changes.
    Every message blob is walked to number repeated texts, in rowid order
    (the order they were written).
    """
    tables = _tables(conn)
    meta = _agent_meta(conn) if "meta" in tables else {}
    session = _str(meta.get("agentId")) or f.meta.get("agent") or Path(f.path).parent.name
    cwd = f.meta.get("cwd")
    model = _str(meta.get("lastUsedModel"))
    out = []
    line = {"t": "session", "store": "agent", "session": session, "title": _str(meta.get("name")),
            "created": _ts(meta.get("createdAt")), "model": model, "mode": _str(meta.get("mode")), "cwd": cwd}
    line = {k: v for k, v in line.items() if v is not None}
    if known.get("meta") != _digest(line):
        out.append(("meta", _digest(line), _line(line)))
    if "blobs" not in tables:
        return out
    ids = [r[0] for r in conn.execute("SELECT id FROM blobs")]
    if all(f"blob:{i}" in known for i in ids):
        return out
    try:
        rows = conn.execute("SELECT id, data FROM blobs ORDER BY rowid").fetchall()
    except sqlite3.OperationalError:  # a WITHOUT ROWID table has no write order
        rows = conn.execute("SELECT id, data FROM blobs ORDER BY id").fetchall()
    ts = _db_mtime_ms(f.path)
    seen: dict[str, int] = {}
    for blob_id, data in rows:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data or b"")
        message = _loads(raw)
        items = _agent_items(message)[0] if _is_agent_message(message) else []
        occ = _count(items, seen)
        key = f"blob:{blob_id}"
        if key in known:
            continue
        line = {"t": "blob", "session": session, "id": str(blob_id), "ts": ts, "cwd": cwd, "model": model}
        if _is_agent_message(message):
            line.update(occ=occ, message=message)
        else:
            line.update(size=len(raw), raw=base64.b64encode(raw[:CURSOR_RAW_MAX]).decode("ascii"))
        out.append((key, _digest(raw), _line({k: v for k, v in line.items() if v is not None})))
    return out


def _agent_meta(conn: sqlite3.Connection) -> dict:
    """Return the decoded ``meta`` row "0" of a store: hex-encoded JSON."""
    row = conn.execute("SELECT value FROM meta WHERE key = '0'").fetchone()
    value = row[0] if row else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("ascii", "replace")
    if not isinstance(value, str):
        return {}
    try:
        value = bytes.fromhex(value.strip()).decode("utf-8", "replace")
    except ValueError:
        pass  # some builds store the JSON itself
    return _dict(_loads(value))


def _is_agent_message(obj: Any) -> bool:
    """True for a store.db blob that is a JSON chat message."""
    return isinstance(obj, dict) and isinstance(obj.get("role"), str) and "content" in obj


def _agent_items(message: dict) -> tuple[list[tuple[str, str]], int]:
    """Return the (tag, text) events of a store.db message, and unknowns."""
    role = message.get("role")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)
    texts, items, unknown = [], [], 0
    for block in blocks:
        kind = _dict(block).get("type")
        if kind == "text":
            _text_slot(items, texts, block)
        elif kind in ("reasoning", "thinking"):
            thought = _str(block.get("text")) or _str(block.get("thinking"))
            if thought:
                items.append(("k", thought))
        elif kind == "tool-call":
            items.append(("c", _tool_call_text(block.get("toolName"), block.get("args") or block.get("input"))))
        elif kind == "tool-result":
            result = block.get("result") if "result" in block else block.get("content")
            items.append(("r", truncate(_output_text(result), TOOL_RESULT_MAX)))
        elif kind not in ("image", "file"):
            unknown += 1
    tag = {"user": "u", "assistant": "a", "system": "s", "tool": "r"}.get(role)
    if tag is None:
        return [], unknown + 1
    return _fill_text(items, texts, tag), unknown


# Parsing ---------------------------------------------------------------------


def _cursor_exported(obj: dict, ctx: Context) -> list:
    """Return the events of a line exported from state.vscdb or store.db."""
    kind = obj.get("t")
    session = _str(obj.get("session"))
    if not session:
        raise ParseError("exported line without a session")
    if kind == "session":
        return [SessionInfo(session, title=_str(obj.get("title")), title_rank=RANK_GENERATED,
                            cwd=_str(obj.get("cwd")), model=_str(obj.get("model")), parent=_str(obj.get("parent")))]
    common = dict(ts=_ts(obj.get("ts")), ts_approx=bool(obj.get("approx", True)), cwd=_str(obj.get("cwd")),
                  model=_str(obj.get("model")))
    occ = _dict(obj.get("occ"))
    if kind == "bubble":
        bubble = _dict(obj.get("bubble"))
        items = _bubble_items(bubble)
        if items is None:
            return _unknown(ctx)
        common["cwd"] = _str(bubble.get("workspaceProjectDir")) or common["cwd"]
        common["model"] = (_str(_dict(bubble.get("modelInfo")).get("modelName")) or _str(bubble.get("modelType"))
                           or common["model"])
        return _events(session, items, occ, **common)
    if kind == "prompt" and _str(obj.get("text")):
        return _events(session, [("u", obj["text"])], occ, **common)
    if kind == "blob" and isinstance(obj.get("message"), dict):
        items, unknown = _agent_items(obj["message"])
        if unknown:
            ctx.state["unknown"] = ctx.state.get("unknown", 0) + unknown
        return _events(session, items, occ, **common)
    return _unknown(ctx)  # an undecodable blob, or a line of a later format


def _transcript_common(ctx: Context, text_for_time: str) -> dict:
    """Return the Record fields shared by one transcript event.

    Transcripts carry no times: a <timestamp> tag in a user message is
    exact; otherwise the last such time seen, else the file's mtime,
    marked approximate.
    """
    ts = _inband_ts(text_for_time)
    if ts is not None:
        ctx.state["ts"] = ts
    return dict(ts=ts if ts is not None else ctx.state.get("ts", ctx.mtime_ms), ts_approx=ts is None,
                cwd=_str(ctx.file.meta.get("cwd")), project=_str(ctx.file.meta.get("project")))


def _transcript_session(ctx: Context) -> list:
    """Return the session facts of a transcript file, once."""
    if ctx.state.get("told"):
        return []
    ctx.state["told"] = True
    m = ctx.file.meta
    return [SessionInfo(m["session"], cwd=_str(m.get("cwd")), parent=_str(m.get("parent")))]


def _cursor_jsonl_line(obj: dict, ctx: Context) -> list:
    """Return the events of one JSONL transcript line."""
    session = ctx.file.meta["session"]
    seen = ctx.state.setdefault("seen", {})
    out = _transcript_session(ctx)
    if obj.get("type") == "turn_ended":
        text = f"turn ended: {_str(obj.get('status')) or '?'}"
        if obj.get("error"):
            text += f" ({_plain(obj['error'])})"
        items = [("e", text)]
        return out + _events(session, items, _count(items, seen), **_transcript_common(ctx, ""))
    role = obj.get("role")
    if role not in ("user", "assistant"):
        return out + _unknown(ctx)
    content = _dict(obj.get("message")).get("content", obj.get("content"))
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content)
    texts, items = [], []
    for block in blocks:
        kind = _dict(block).get("type")
        if kind == "text":
            _text_slot(items, texts, block)
        elif kind == "thinking":
            thought = _str(block.get("thinking")) or _str(block.get("text"))
            if thought:
                items.append(("k", thought))
        elif kind == "tool_use":
            items.append(("c", _tool_call_text(block.get("name"), block.get("input"))))
        elif kind == "tool_result":
            items.append(("r", truncate(_output_text(block.get("content")), TOOL_RESULT_MAX)))
        elif kind != "image":
            _unknown(ctx)
    items = _fill_text(items, texts, "u" if role == "user" else "a")
    common = _transcript_common(ctx, "\n".join(texts) if role == "user" else "")
    return out + _events(session, items, _count(items, seen), **common)


def _cursor_txt_line(line: str, ctx: Context) -> list:
    """Take one line of a TXT transcript; return the block it closes, if any.

    Blocks: a ``user:``/``assistant:``/``A:`` header starts a message;
    ``[Thinking]`` is one line; ``[Tool call] Name`` takes the indented
    argument lines after it; ``[Tool result] Name`` runs to the next block.
    Other lines continue the open block; after a thinking line or a tool
    call's arguments they start the assistant's next text.
    """
    st = ctx.state
    head = _TXT_HEADER.match(line)
    mark = None if head else _TXT_MARKER.match(line)
    block = st.get("block")
    if head:
        out = _cursor_txt_close(ctx)
        st["role"] = "user" if head.group(1) == "user" else "assistant"
        _txt_open(ctx, "u" if st["role"] == "user" else "a", head.group(2))
        return out
    if mark:
        out = _cursor_txt_close(ctx)
        tag = _TXT_KINDS[mark.group(1)]
        if tag == "k":
            _txt_open(ctx, tag, mark.group(2))
        else:
            _txt_open(ctx, tag, "", name=mark.group(2).strip())
        return out
    if block and (block["tag"] == "k" or (block["tag"] == "c" and not line[:1].isspace())):
        out = _cursor_txt_close(ctx)
        _txt_open(ctx, "a", line)
        return out
    if not block:
        role = st.get("role")
        _txt_open(ctx, "u" if role == "user" else "a" if role else "?", line)
        return []
    # The whole block stays in the mirror; the state keeps only what the
    # event's text can hold, so a huge tool output cannot bloat the cursor.
    if block.get("size", 0) < CURSOR_BLOCK_MAX:
        block["lines"].append(line[: CURSOR_BLOCK_MAX])
        block["size"] = block.get("size", 0) + min(len(line), CURSOR_BLOCK_MAX) + 1
    block["span"] = ctx.lineno - block["line"] + 1
    return []


def _txt_open(ctx: Context, tag: str, first: str, name: str = "") -> None:
    """Start a TXT block at the current line, with the text after its marker."""
    ctx.state["block"] = {"tag": tag, "name": name, "lines": [first] if first.strip() else [],
                          "line": ctx.lineno, "offset": ctx.offset, "span": 1}


def _cursor_txt_close(ctx: Context) -> list:
    """Return the events of the open TXT block and close it."""
    block = ctx.state.pop("block", None)
    if not block:
        return []
    out = _transcript_session(ctx)
    tag = block["tag"]
    if tag == "?":  # text before any header: nobody said it
        return out + _unknown(ctx)
    body = "\n".join(block["lines"]).strip()
    if tag == "c":
        text = truncate(f"{block['name'] or 'tool'} {body}".strip(), TOOL_CALL_MAX)
    elif tag == "r":
        text = truncate(body, TOOL_RESULT_MAX)
    elif tag == "u":
        text = _user_text(body)
    else:
        text = body
    if not text:
        return out
    items = [(tag, text)]
    common = _transcript_common(ctx, body if tag == "u" else "")
    occ = _count(items, ctx.state.setdefault("seen", {}))
    return out + _events(ctx.file.meta["session"], items, occ, line=block["line"], offset=block["offset"],
                         span=block["span"], **common)


###############################################################################
# ZCode #######################################################################
###############################################################################

#: Part types that carry nothing to archive as an event (bookkeeping).
_ZCODE_QUIET_PARTS = frozenset({"step-start", "step-finish", "snapshot", "patch", "compaction", "retry",
                                "file", "agent", "subtask"})
#: Titles ZCode gives a session before it has a real one.
_ZCODE_PLACEHOLDER = re.compile(r"^(New|Child) session - ")
#: Session columns read, when the table has them.
_ZCODE_SESSION_COLUMNS = ("id", "parent_id", "directory", "title", "version", "project_id",
                          "time_created", "time_updated")


class ZCode(Adapter):
    """Read ZCode's session store ``~/.zcode/cli/db/db.sqlite`` (kind "db").

    The OpenCode-style schema of ZCode 3.10 and later (CLI database 0.14.x):
    ``session`` (title, directory, version, ``parent_id`` for sub-agents),
    ``message`` and ``part`` with JSON ``data`` columns; parts ``text``,
    ``reasoning`` and ``tool`` (plus the legacy ``tool_use``/``tool_result``)
    become events, bookkeeping parts are skipped, other types counted as
    unknown.  Missing tables or columns of other versions are tolerated.
    No real database is public; ``tests/zcode_made_here.py`` builds one from
    the documented schema.

    Exported lines: ``session`` (when its facts change) and ``message`` (one
    per finished message, with its parts in order).  Event ids are the part
    id, a tag and a hash of the text, so a part whose text changes yields a
    new event and an unchanged one the same.  Only ``~/.zcode/cli/db`` is
    read: never ``config.json`` or ``credentials.json``, which hold API keys.
    """

    name = "zcode"
    version = 1
    display = "ZCode"
    kind = "db"
    env_vars = ("ORIGIN_ZCODE_HOME",)
    # ZCode publishes no reference for this file; its CLI (0.16) was seen to
    # read servers from "mcp" -> "servers" in ~/.zcode/cli/config.json.
    mcp = McpConfig("json", ("mcp", "servers"), lambda env, home: [home / ".zcode" / "cli" / "config.json"],
                    ("zcode",), homes=lambda env, home: [home / ".zcode"], stdio_type=True,
                    note="ZCode does not document this file; the mcp.servers key was observed on its CLI 0.16")

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``ORIGIN_ZCODE_HOME`` (comma list), else ``~/.zcode``."""
        return env_dirs(env, "ORIGIN_ZCODE_HOME", [home / ".zcode"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield the session database of each root."""
        for prefix, root in _labelled(self.roots(env, home), home):
            db = root / "cli" / "db" / "db.sqlite"
            if _is_file(db):
                yield SourceFile(str(db), _rel(prefix, root, db), kind="db")

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one exported line."""
        if not line.strip():
            return []
        obj = _load_object(line)
        if obj.get("t") == "session" and _str(obj.get("id")):
            title = _str(obj.get("title"))
            rank = RANK_PROMPT if title and _ZCODE_PLACEHOLDER.match(title) else RANK_GENERATED
            return [SessionInfo(obj["id"], title=title, title_rank=rank, cwd=_str(obj.get("directory")),
                                agent_version=_str(obj.get("version")), parent=_str(obj.get("parent")))]
        if obj.get("t") == "message" and _str(obj.get("session")):
            return _zcode_message(obj, ctx)
        if obj.get("t") == "unreadable":
            raise ParseError(f"row {obj.get('key')} could not be exported: {obj.get('reason')}")
        return _unknown(ctx)

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, hash, line) for changed sessions and finished messages."""
        yield from iter_agent_db(f.path, lambda conn: _zcode_lines(conn, known, now_ms))


def _zcode_lines(conn: sqlite3.Connection, known: Mapping[str, str], now_ms: int) -> Iterator:
    """Yield export tuples for the sessions and messages of a ZCode database."""
    tables = _tables(conn)
    sessions = _zcode_sessions(conn) if "session" in tables else {}
    for sid, s in sessions.items():
        line = {"t": "session", "id": sid, "title": s.get("title"), "directory": s.get("directory"),
                "version": s.get("version"), "parent": s.get("parent_id"), "project": s.get("project_id"),
                "created": s.get("time_created")}
        line = {k: v for k, v in line.items() if v is not None}
        if known.get(f"session:{sid}") != _digest(line):
            yield (f"session:{sid}", _digest(line), _line(line))
    mcols = _columns(conn, "message") if "message" in tables else []
    if "id" not in mcols or "session_id" not in mcols:
        return
    # Oldest first, so the mirror reads as a timeline; a per-session
    # sequence is the next best order.
    order = ("time_created, id" if "time_created" in mcols
             else "session_id, sequence, id" if "sequence" in mcols else "session_id, id")
    pcols = _columns(conn, "part") if "part" in tables else []
    has_parts = {"id", "message_id"} <= set(pcols)
    part_order = "sequence" if "sequence" in pcols else "id"
    # Rows stream from the cursor, so a large database is never held in memory.
    for r in conn.execute(f"SELECT * FROM message ORDER BY {order}"):
        m = {k: _scalar(v) for k, v in zip(mcols, r)}
        try:
            yield from _zcode_message_line(conn, m, sessions, pcols, has_parts, part_order, known, now_ms)
        except (TypeError, ValueError, sqlite3.Error) as e:
            # One malformed row must not hide the rest: it is recorded in the
            # mirror as unreadable, and parsing counts it as an error.
            key = f"msg:{_as_str(m.get('id'))}"
            reason = f"{type(e).__name__}: {e}"[:200]
            if known.get(key) != _digest(reason):
                yield (key, _digest(reason), _line({"t": "unreadable", "key": key, "reason": reason}))


def _zcode_message_line(conn, m: dict, sessions: dict, pcols: list, has_parts: bool, part_order: str,
                        known: Mapping[str, str], now_ms: int) -> list:
    """Return the export tuple of one finished, changed message (or none)."""
    parts = ([dict(zip(pcols, r)) for r in conn.execute(
        f"SELECT * FROM part WHERE message_id = ? ORDER BY {part_order}, id", (m["id"],))]
        if has_parts else [])
    raw = m.get("data")
    digest = _digest(_as_str(raw), *(f"{p['id']}\x00{_as_str(p.get('data'))}" for p in parts))
    key = f"msg:{m['id']}"
    if known.get(key) == digest:
        return []
    data = _loads(raw)
    pdata = [_loads(p.get("data")) for p in parts]
    session = sessions.get(m["session_id"], {})
    if not _zcode_finished(_dict(data), m, parts, pdata, session, now_ms):
        return []
    line = {"t": "message", "id": m["id"], "session": m["session_id"], "cwd": session.get("directory"),
            "row": {k: v for k, v in m.items() if k not in ("id", "session_id", "data")},
            "parts": [_zcode_part(p, d) for p, d in zip(parts, pdata)]}
    if isinstance(data, dict):
        line["data"] = data
    elif raw is not None:
        line["data_raw"] = _as_str(raw)
    return [(key, digest, _line({k: v for k, v in line.items() if v is not None}))]


def _zcode_sessions(conn: sqlite3.Connection) -> dict[str, dict]:
    """Return the sessions by id, with the columns this version has."""
    cols = [c for c in _ZCODE_SESSION_COLUMNS if c in _columns(conn, "session")]
    if "id" not in cols:
        return {}
    order = "time_created, id" if "time_created" in cols else "id"
    rows = conn.execute(f"SELECT {', '.join(cols)} FROM session ORDER BY {order}")
    return {_scalar(r[0]): {c: _scalar(v) for c, v in zip(cols, r)} for r in rows}


def _zcode_part(row: dict, data: Any) -> dict:
    """Return a part as exported: id, its data (or raw text) and extra columns."""
    out = {k: _scalar(v) for k, v in row.items() if k not in ("message_id", "session_id", "data")}
    if isinstance(data, dict):
        out["data"] = data
    elif row.get("data") is not None:
        out["data_raw"] = _as_str(row["data"])
    return out


def _zcode_finished(data: dict, row: dict, parts: list[dict], pdata: list, session: dict, now_ms: int) -> bool:
    """True once a message is final: completed, or its session went quiet.

    A user message is final once it is older than the quiet period; an
    assistant message when ZCode marks it completed, or when neither it
    nor its session changed for the quiet period (an aborted answer).
    """
    times = _dict(data.get("time"))
    if times.get("completed"):
        return True
    created = _ts(times.get("created")) or _ts(row.get("time_created"))
    if data.get("role") == "user" and created is not None and now_ms - created >= DB_QUIET_MS:
        return True
    stamps = [created, _ts(row.get("time_updated")), _ts(session.get("time_updated"))]
    for p, d in zip(parts, pdata):
        stamps += [_ts(p.get("time_updated")), _ts(p.get("time_created"))]
        d = _dict(d)
        for span in (_dict(d.get("time")), _dict(_dict(d.get("state")).get("time"))):
            stamps += [_ts(span.get("start")), _ts(span.get("end"))]
    return _settled(max((s for s in stamps if s is not None), default=None), now_ms)


def _zcode_message(obj: dict, ctx: Context) -> list:
    """Return the events of one exported ZCode message and its parts."""
    data = _dict(obj.get("data"))
    row = _dict(obj.get("row"))
    role = data.get("role") or row.get("role")
    if role == "meta":  # a legacy OpenCode record that is no turn (a model switch)
        return []
    if role not in ("user", "assistant", "system"):
        return _unknown(ctx)
    session = obj["session"]
    visibility = _dict(data.get("semantics")).get("transcriptVisibility")
    visible = visibility in (None, "visible")  # hidden ones are kept, not indexed
    model = _dict(data.get("model"))
    common = dict(session=session, cwd=_str(_dict(data.get("path")).get("cwd")) or _str(obj.get("cwd")),
                  model=(_str(model.get("modelID")) or _str(data.get("modelID"))) if role != "user" else None)
    created = _ts(_dict(data.get("time")).get("created")) or _ts(row.get("time_created"))
    out: list = []
    parts = _list(obj.get("parts"))
    for part in parts:
        out += _zcode_part_events(_dict(part), role, visible, created, common, ctx)
    if not parts and data.get("content") is not None:  # a message that keeps its text itself
        text = _plain(data["content"])
        if text.strip():
            out.append(Record(id=f"{obj['id']}:m:{short_hash(text, n=8)}", kind="message", role=role, text=text,
                              ts=created, indexed=visible, **common))
    return out


def _recent(value: Any) -> int | None:
    """Return epoch ms like _ts, but None before 2000 (a tool's duration counter, not a time)."""
    ms = _ts(value)
    return ms if ms is not None and ms >= 946_684_800_000 else None


def _zcode_part_events(part: dict, role: str, visible: bool, created: int | None, common: dict,
                       ctx: Context) -> list:
    """Return the events of one part of a message."""
    d = part.get("data")
    pid = _str(part.get("id"))
    if not isinstance(d, dict) or not pid:
        return _unknown(ctx)
    kind = d.get("type")
    span = _dict(d.get("time"))
    ts = _ts(span.get("start")) or created
    if kind in ("text", "reasoning"):
        text = _str(d.get("text")) or ""
        if not text.strip():
            return []
        shown = visible and kind == "text" and not d.get("synthetic") and not d.get("ignored")
        return [Record(id=f"{pid}:{'m' if kind == 'text' else 'k'}:{short_hash(text, n=8)}", kind="message",
                       role=role if kind == "text" else "assistant", text=text, ts=ts, indexed=shown, **common)]
    if kind == "tool":
        state = _dict(d.get("state"))
        stime = _dict(state.get("time"))
        call = _tool_call_text(d.get("tool"), state.get("input"))
        out = [Record(id=f"{pid}:c:{short_hash(call, n=8)}", kind="tool_call", role="assistant", text=call,
                      ts=_recent(stime.get("start")) or ts, indexed=visible, **common)]
        result = state.get("output") if state.get("output") is not None else state.get("error")
        if state.get("status") in ("completed", "error") and result is not None:
            text = truncate(_output_text(result), TOOL_RESULT_MAX)
            out.append(Record(id=f"{pid}:r:{short_hash(text, n=8)}", kind="tool_result", role="tool", text=text,
                              ts=_recent(stime.get("end")) or ts, indexed=visible, **common))
        return out
    if kind == "tool_use":
        call = _tool_call_text(d.get("name") or d.get("tool"), d.get("input"))
        return [Record(id=f"{pid}:c:{short_hash(call, n=8)}", kind="tool_call", role="assistant", text=call,
                       ts=ts, indexed=visible, **common)]
    if kind == "tool_result":
        text = truncate(_output_text(d.get("content", d.get("output"))), TOOL_RESULT_MAX)
        return [Record(id=f"{pid}:r:{short_hash(text, n=8)}", kind="tool_result", role="tool", text=text,
                       ts=ts, indexed=visible, **common)]
    if kind in _ZCODE_QUIET_PARTS:
        return []
    return _unknown(ctx)


###############################################################################
# OpenCode ####################################################################
###############################################################################

#: Legacy message types that are not a turn of the conversation.
_OPENCODE_LEGACY_QUIET = frozenset({"model-switched"})
#: Largest legacy JSON file read, in bytes.
OPENCODE_JSON_MAX = 16 << 20


def _opencode_data_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    """Return OpenCode's data folders: ``$XDG_DATA_HOME/opencode`` and ``~/.local/share/opencode``."""
    dirs = [Path(env["XDG_DATA_HOME"]) / "opencode"] if env.get("XDG_DATA_HOME") else []
    return dirs + [home / ".local" / "share" / "opencode"]


class OpenCode(ZCode):
    """Read OpenCode's session store (kind "db"): the database and the legacy tree.

    OpenCode 1.x keeps every project's sessions in one SQLite database,
    ``~/.local/share/opencode/opencode.db`` (``opencode-<channel>.db`` for
    the other release channels), in the schema ZCode took from it:
    ``session`` (``directory`` is the cwd, ``parent_id`` a sub-agent's
    parent), ``message`` and ``part`` with JSON ``data``; the newer tables
    are not read.  It is read as ZCode's is, from the same snapshot, into
    the same exported lines.  Fixture: ``opencode/lantern-sqlite``
    (OpenCode 1.18.13).

    Before the database, OpenCode kept a JSON tree,
    ``storage/session/<project>/<session>.json``,
    ``storage/message/<session>/*.json`` and ``storage/part/<message>/*.json``
    (fixtures ``opencode/lantern-legacy-json`` and
    ``opencode/agent-sessions-v2``), which its migration copies into the
    database and leaves behind.  Each legacy session is one source whose
    export reads its messages and parts into the same lines; ids are the
    part ids, which the migration keeps, so a session found in both places
    is archived once.  Older message shapes (``type`` instead of ``role``,
    text or parts inline, a ``shell`` command) are read as parts; a file
    that does not parse (cut off mid-write) waits for the next sync.
    """

    name = "opencode"
    display = "OpenCode"
    kind = "db"
    env_vars = ("ORIGIN_OPENCODE_HOME", "XDG_DATA_HOME")
    mcp = McpConfig("json", ("mcp",),
                    lambda env, home: [home / ".config" / "opencode" / "opencode.json"], ("opencode",),
                    homes=lambda env, home: (env_dirs(env, "ORIGIN_OPENCODE_HOME", _opencode_data_dirs(env, home))
                                             + [home / ".config" / "opencode"]),
                    entry="command-list")

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``ORIGIN_OPENCODE_HOME`` (comma list), else OpenCode's data folders."""
        return env_dirs(env, "ORIGIN_OPENCODE_HOME", _opencode_data_dirs(env, home))

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield each root's databases, then each session of its legacy tree."""
        for prefix, root in _labelled(self.roots(env, home), home):
            for db in _files(root, ".db"):
                if db.name == "opencode.db" or db.name.startswith("opencode-"):
                    yield SourceFile(str(db), _rel(prefix, root, db), kind="db")
            storage = root / "storage"
            sessions = storage / "session"
            if not _is_dir(sessions):
                continue
            for project in _subdirs(sessions):
                for path in _files(project, ".json"):
                    yield SourceFile(str(path), _rel(prefix, root, path), kind="db",
                                     meta={"storage": str(storage), "project": project.name})

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, hash, line) for changed sessions and finished messages."""
        if f.meta.get("storage"):
            yield from _opencode_legacy_lines(f, known, now_ms)
        else:
            yield from super().export(f, known, now_ms)


def _read_json_object(path: Path) -> dict | None:
    """Return a JSON file's object, or None when it is missing or does not parse."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(OPENCODE_JSON_MAX + 1)
    except OSError:
        return None
    if len(data) > OPENCODE_JSON_MAX:
        return None
    try:
        obj = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return scrub_surrogates(obj) if isinstance(obj, dict) else None


def _opencode_legacy_lines(f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator:
    """Yield export tuples for one session of OpenCode's legacy JSON tree."""
    storage = Path(f.meta["storage"])
    session = _read_json_object(Path(f.path))
    if session is None or not _str(session.get("id")):
        return
    sid = session["id"]
    project = _read_json_object(storage / "project" / f"{_str(session.get('projectID')) or f.meta['project']}.json")
    worktree = _str((project or {}).get("worktree"))
    times = _dict(session.get("time"))
    line = {"t": "session", "id": sid, "title": _str(session.get("title")),
            "directory": _str(session.get("directory")) or (worktree if worktree != "/" else None),
            "version": _str(session.get("version")), "parent": _str(session.get("parentID")),
            "project": _str(session.get("projectID")), "created": _ts(times.get("created"))}
    line = {k: v for k, v in line.items() if v is not None}
    if known.get(f"session:{sid}") != _digest(line):
        yield (f"session:{sid}", _digest(line), _line(line))
    messages = []
    for path in _files(storage / "message" / sid, ".json"):
        m = _read_json_object(path)
        if m is not None and _str(m.get("id")):
            messages.append(m)
    messages.sort(key=lambda m: (_ts(_dict(m.get("time")).get("created")) or 0, m["id"]))
    for m in messages:
        mid = m["id"]
        parts = [p for p in (_read_json_object(path) for path in _files(storage / "part" / mid, ".json"))
                 if p is not None and _str(p.get("id"))]
        digest = _digest(_line(m), *(_line(p) for p in parts))
        if known.get(f"msg:{mid}") == digest:
            continue
        data, parts = _opencode_legacy_message(m, parts)
        rows = [{"id": p["id"]} for p in parts]
        if not _zcode_finished(data, {}, rows, parts, {"time_updated": _ts(times.get("updated"))}, now_ms):
            continue
        out = {"t": "message", "id": mid, "session": sid, "cwd": line.get("directory"),
               "row": {"time_created": _ts(_dict(m.get("time")).get("created"))}, "data": data,
               "parts": [{"id": p["id"], "data": p} for p in parts]}
        yield (f"msg:{mid}", digest, _line(out))


def _opencode_legacy_message(m: dict, parts: list[dict]) -> tuple[dict, list[dict]]:
    """Return a legacy message as (data with a role, its parts), inline parts included."""
    data = dict(m)
    kind = _str(m.get("type"))
    if not _str(data.get("role")) and kind in ("user", "assistant", "system"):
        data["role"] = kind
    mid = m["id"]
    inline = []
    if _str(m.get("text")) and not parts:
        inline.append({"id": f"{mid}:text", "type": "text", "text": m["text"]})
    if kind == "shell":
        data["role"] = "user"
        inline.append({"id": f"{mid}:{_str(m.get('callID')) or 'shell'}", "type": "tool", "tool": "shell",
                       "state": {"status": "completed", "input": {"command": m.get("command")},
                                 "output": m.get("output")}})
    elif kind in _OPENCODE_LEGACY_QUIET:
        data["role"] = "meta"
    for i, item in enumerate(_list(m.get("content"))):
        if isinstance(item, dict):
            part = {**item, "id": f"{mid}:{_str(item.get('id')) or i}"}
            if part.get("type") == "tool" and "tool" not in part:
                part["tool"] = item.get("name")
            inline.append(part)
    data.pop("content", None)
    if inline:
        data.pop("text", None)
    return data, parts + inline


###############################################################################
# Gemini CLI ##################################################################
###############################################################################

#: Largest session document of Gemini CLI's first era read, in bytes.
GEMINI_JSON_MAX = 64 << 20
#: Gemini message types shown to the user as notices, not turns.
_GEMINI_NOTICES = frozenset({"info", "error", "warning"})


def _gemini_projects(root: Path) -> dict[str, str]:
    """Return project folder name -> project path, from ``projects.json``.

    The folder is the slug ``projects.json`` lists (Gemini CLI from February
    2026) or, before, the SHA-256 of the path, so both names map to it.
    """
    data = _read_json_file(root / "projects.json")
    out: dict[str, str] = {}
    for path, slug in _dict(_dict(data).get("projects")).items():
        if isinstance(path, str) and path:
            out[hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()] = path
            if _str(slug):
                out[slug] = path
    return out


def _gemini_root_of(folder: Path) -> str | None:
    """Return the path in a project folder's ``.project_root``, if any."""
    path = folder / ".project_root"
    try:
        if _is_file(path) and path.stat().st_size <= 65536:
            return _str(path.read_text(encoding="utf-8", errors="replace").strip())
    except OSError:
        return None
    return None


class Gemini(Adapter):
    """Read Gemini CLI's chats: ``~/.gemini/tmp/<project>/chats/``.

    Two eras.  Until April 2026 a session is one JSON document,
    ``session-<time>-<id>.json``: ``{sessionId, projectHash, startTime,
    lastUpdated, messages, summary?, kind?}``, rewritten whole as the session
    grows; it is read like a database (kind "db"): each export appends the
    session's facts and every new or changed message as one line, so every
    version is archived.  Since then a session is append-only JSONL,
    ``session-….jsonl`` (sub-agents: ``chats/<parent id>/<id>.jsonl``): the
    first line is the metadata, then message records, ``{"$set": {…}}``
    (metadata, or a whole ``messages`` checkpoint) and ``{"$rewindTo": id}``
    (what follows was undone in the agent; what Origin archived stays).
    Fixtures: ``gemini/agentsview-json`` and ``gemini/agent-sessions``.

    Messages: ``type`` user, gemini, or info/error/warning (notices, role
    system); ``content`` a string or parts; ``thoughts`` become one hidden
    reasoning event; ``toolCalls`` a call and, once it has one, its result.
    Event ids are ``<session>:<message id>:<tag>:<hash of the text>``, the
    same in both eras, so a session rewritten as JSONL when resumed, or a
    message re-recorded with the same id, adds only what changed.  The
    files hold no cwd: it comes from ``~/.gemini/projects.json`` or the
    folder's ``.project_root``.  Gemini CLI deletes sessions after 30 days
    by default; Origin keeps them.
    """

    name = "gemini"
    display = "Gemini CLI"
    env_vars = ("ORIGIN_GEMINI_HOME",)
    mcp, hook = _gemini_settings("ORIGIN_GEMINI_HOME", ".gemini", "gemini")

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``ORIGIN_GEMINI_HOME`` (comma list), else ``~/.gemini``."""
        return env_dirs(env, "ORIGIN_GEMINI_HOME", [home / ".gemini"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every session file of every project folder under ``tmp/``."""
        for prefix, root in _labelled(self.roots(env, home), home):
            tmp = root / "tmp"
            if not _is_dir(tmp):
                continue
            projects = _gemini_projects(root)
            for folder in _subdirs(tmp):
                chats = folder / "chats"
                if not _is_dir(chats):
                    continue
                cwd = projects.get(folder.name) or _gemini_root_of(folder)
                meta = {"cwd": cwd} if cwd else {"project": folder.name if len(folder.name) < 64 else None}
                meta = {k: v for k, v in meta.items() if v}
                for path in _files(chats, ".json"):
                    if path.name.startswith("session-"):
                        yield SourceFile(str(path), _rel(prefix, root, path), kind="db", meta=meta)
                for path in _files(chats, ".jsonl"):
                    if path.name.startswith("session-"):
                        yield SourceFile(str(path), _rel(prefix, root, path), meta=meta)
                for sub in _subdirs(chats):  # a sub-agent's session, in its parent's folder
                    for path in _files(sub, ".jsonl"):
                        yield SourceFile(str(path), _rel(prefix, root, path), meta={**meta, "parent": sub.name})

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, hash, line) for the session's facts and changed messages."""
        try:
            with open(f.path, "rb") as fh:
                data = fh.read(GEMINI_JSON_MAX + 1)
            mtime = int(os.stat(f.path).st_mtime * 1000)
        except OSError as e:
            raise UnreadableSource(f"cannot read {f.path}: {e.strerror}") from None
        if len(data) > GEMINI_JSON_MAX:
            raise UnreadableSource(f"{f.path} is larger than {GEMINI_JSON_MAX >> 20} MB; it was not read")
        try:
            doc = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return  # caught mid-rewrite: read again at the next sync
        if not isinstance(doc, dict) or not _str(doc.get("sessionId")):
            return
        doc = scrub_surrogates(doc)
        sid = doc["sessionId"]
        facts = {"t": "session", **{k: v for k, v in doc.items() if k != "messages"}}
        if known.get("session") != _digest(facts):
            yield ("session", _digest(facts), _line(facts))
        messages = [m for m in _list(doc.get("messages")) if isinstance(m, dict) and _str(m.get("id"))]
        for i, m in enumerate(messages):
            if i == len(messages) - 1 and not _settled(mtime, now_ms):
                break  # the newest message may still gain its tool results
            key = f"msg:{m['id']}"
            if known.get(key) != _digest(m):
                yield (key, _digest(m), _line({"t": "message", "session": sid, "message": m}))

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one line (exported or JSONL).

        The state holds a JSONL session's id, once its first line named it,
        and whether its first prompt already titled it.
        """
        if not line.strip():
            return []
        obj = _load_object(line)
        if ctx.file.kind == "db":
            if obj.get("t") == "session" and _str(obj.get("sessionId")):
                return _gemini_session(obj, ctx)
            if obj.get("t") == "message" and _str(obj.get("session")) and isinstance(obj.get("message"), dict):
                return _gemini_message(obj["session"], obj["message"], ctx)
            return _unknown(ctx)
        if "$rewindTo" in obj:
            return []  # undone in the agent; what Origin archived stays archived
        if isinstance(obj.get("$set"), dict):
            sid = _str(ctx.state.get("session"))
            if not sid:
                raise ParseError("a $set record before the session's first line")
            update = obj["$set"]
            out = _gemini_session({**update, "sessionId": sid}, ctx) if "summary" in update else []
            for m in _list(update.get("messages")):
                if isinstance(m, dict) and _str(m.get("id")):
                    out += _gemini_message(sid, m, ctx)
            return out
        if _str(obj.get("sessionId")) and "type" not in obj:
            ctx.state["session"] = obj["sessionId"]
            return _gemini_session(obj, ctx)
        sid = _str(ctx.state.get("session"))
        if _str(obj.get("id")) and _str(obj.get("type")):
            if not sid:
                raise ParseError("a message before the session's first line")
            return _gemini_message(sid, obj, ctx)
        return _unknown(ctx)


def _gemini_session(obj: dict, ctx: Context) -> list:
    """Return the SessionInfo of a session's metadata (or an update of it)."""
    sid = obj["sessionId"]
    summary = _title_of(obj.get("summary"), RANK_SUMMARY)
    title, rank = summary or (None, 0)
    if title is None and not ctx.file.meta.get("cwd") and not any(
            k in obj for k in ("startTime", "projectHash", "kind")):
        return []
    return [SessionInfo(sid, title=title, title_rank=rank, cwd=_str(ctx.file.meta.get("cwd")),
                        parent=_str(ctx.file.meta.get("parent")))]


def _gemini_text(value: Any) -> str:
    """Return a message's content (a string or Gemini parts) as text."""
    if isinstance(value, list):
        return "\n".join(t for t in (_gemini_text(v) for v in value) if t)
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return "" if value.get("thought") else value["text"]
        if isinstance(value.get("functionResponse"), dict):
            return _gemini_result(value["functionResponse"].get("response"))
        return "[image]" if "inlineData" in value else ""
    return value if isinstance(value, str) else ""


def _gemini_result(response: Any) -> str:
    """Return a function response's text: its output, else its error, else the JSON."""
    response = _unjson(response)
    if isinstance(response, dict):
        for key in ("output", "error", "llmContent"):
            if response.get(key) not in (None, ""):
                return _plain(response[key])
    return _plain(response)


def _gemini_message(sid: str, m: dict, ctx: Context) -> list:
    """Return the events of one Gemini CLI message record."""
    mid, kind = m["id"], _str(m.get("type"))
    ts = _ts(m.get("timestamp"))
    common = dict(session=sid, cwd=_str(ctx.file.meta.get("cwd")), project=_str(ctx.file.meta.get("project")))
    base = f"{sid}:{mid}"
    out: list = []
    if kind == "user":
        shown = m.get("displayContent")
        text = shown if isinstance(shown, str) and shown.strip() else _gemini_text(m.get("content"))
        if text.strip():
            out.append(Record(id=f"{base}:m:{short_hash(text, n=8)}", kind="message", role="user", text=text,
                              ts=ts, **common))
            title = _title_of(text, RANK_PROMPT)
            if title and not ctx.state.get("titled"):
                ctx.state["titled"] = True
                out.append(SessionInfo(sid, title=title[0], title_rank=RANK_PROMPT, cwd=common["cwd"]))
        return out
    if kind in _GEMINI_NOTICES:
        text = _gemini_text(m.get("content"))
        return [Record(id=f"{base}:n:{short_hash(text, n=8)}", kind="message", role="system", text=text, ts=ts,
                       **common)] if text.strip() else []
    if kind != "gemini":
        return _unknown(ctx)
    model = _str(m.get("model"))
    thoughts = [t for t in _list(m.get("thoughts")) if isinstance(t, dict)]
    thinking = "\n".join(": ".join(x for x in (_str(t.get("subject")), _str(t.get("description"))) if x)
                         for t in thoughts).strip()
    if thinking:
        out.append(Record(id=f"{base}:k:{short_hash(thinking, n=8)}", kind="message", role="assistant",
                          text=thinking, ts=_ts(thoughts[0].get("timestamp")) or ts, indexed=False, model=model,
                          **common))
    for i, call in enumerate(_list(m.get("toolCalls"))):
        if not isinstance(call, dict):
            continue
        cid = _str(call.get("id")) or str(i)
        when = _ts(call.get("timestamp")) or ts
        text = _tool_call_text(call.get("name"), call.get("args"))
        out.append(Record(id=f"{base}:c:{cid}:{short_hash(text, n=8)}", kind="tool_call", role="assistant",
                          text=text, ts=when, model=model, **common))
        result = call.get("result")
        if result not in (None, [], "") or call.get("status") in ("error", "cancelled"):
            body = _gemini_text(result) if result not in (None, [], "") else ""
            body = body or _plain(call.get("resultDisplay")) or _str(call.get("status")) or ""
            body = truncate(body, TOOL_RESULT_MAX)
            out.append(Record(id=f"{base}:r:{cid}:{short_hash(body, n=8)}", kind="tool_result", role="tool",
                              text=body, ts=when, model=model, **common))
    text = _gemini_text(m.get("content"))
    if text.strip():
        out.append(Record(id=f"{base}:m:{short_hash(text, n=8)}", kind="message", role="assistant", text=text,
                          ts=ts, model=model, **common))
    return out


###############################################################################
# Goose #######################################################################
###############################################################################

#: Goose content parts that carry nothing to index.
_GOOSE_QUIET_PARTS = frozenset({"redactedThinking", "toolConfirmationRequest", "frontendToolRequest",
                                "systemNotification", "conversationCompacted", "summarizationRequested",
                                "contextLengthExceeded", "actionRequired"})
#: Session columns read, when the table has them.
_GOOSE_SESSION_COLUMNS = ("id", "name", "description", "user_set_name", "session_type", "working_dir",
                          "created_at", "updated_at", "parent_session_id", "model_config_json")


def _goose_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    """Return Goose's data folders: ``$GOOSE_PATH_ROOT/data``, else ``~/.local/share/goose``."""
    if env.get("GOOSE_PATH_ROOT"):
        return [Path(os.path.expanduser(env["GOOSE_PATH_ROOT"])) / "data"]
    return [home / ".local" / "share" / "goose"]


class Goose(Adapter):
    """Read Goose's sessions: ``~/.local/share/goose/sessions/``.

    Since Goose 1.20 they live in ``sessions.db`` (kind "db"; schema 15 in
    Goose 1.45, fixture ``goose/lantern``): ``sessions`` (``name``,
    ``working_dir``, ``parent_session_id``, the model) and ``messages``
    (``role``, ``content_json``, ``created_timestamp`` in seconds,
    ``metadata_json``); other tables and columns are tolerated.  Before, one
    JSONL file per session (fixture ``goose/deja-vu-legacy``): a metadata
    line (``working_dir``, ``description``), then ``{role, created,
    content}`` lines.

    Parts: ``text`` a message, ``thinking`` one hidden reasoning event (Goose
    may store streamed reasoning one token per part: the parts are joined),
    ``toolRequest`` a tool call, ``toolResponse`` (in a user message) its
    result; bookkeeping parts are skipped, other types counted as unknown.
    Event ids are ``<session>:<message id>:<tag>:<hash of the text>`` (tools:
    ``<session>:<tool call id>:c`` and ``:r``), so Goose rewriting a
    conversation (compaction re-inserts its rows) adds only what is new.
    The newest message of a session is exported once the session has been
    quiet for a minute.
    """

    name = "goose"
    display = "Goose"
    env_vars = ("ORIGIN_GOOSE_HOME", "GOOSE_PATH_ROOT")
    # Goose keeps extensions in YAML, which Origin does not rewrite:
    # setup prints the lines to add.
    mcp = McpConfig("yaml", ("extensions",),
                    lambda env, home: [(Path(os.path.expanduser(env["GOOSE_PATH_ROOT"])) / "config"
                                        if env.get("GOOSE_PATH_ROOT") else home / ".config" / "goose") / "config.yaml"],
                    ("goose",))

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``ORIGIN_GOOSE_HOME`` (comma list), else Goose's data folder."""
        return env_dirs(env, "ORIGIN_GOOSE_HOME", _goose_dirs(env, home))

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield each root's ``sessions/sessions.db`` and legacy ``sessions/*.jsonl``."""
        for prefix, root in _labelled(self.roots(env, home), home):
            sessions = root / "sessions"
            if not _is_dir(sessions):
                continue
            db = sessions / "sessions.db"
            if _is_file(db):
                yield SourceFile(str(db), _rel(prefix, root, db), kind="db")
            for path in _files(sessions, ".jsonl"):
                yield SourceFile(str(path), _rel(prefix, root, path), meta={"session": path.name[:-len(".jsonl")]})

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield (key, hash, line) for changed sessions and finished messages."""
        yield from iter_agent_db(f.path, lambda conn: _goose_lines(conn, known, now_ms))

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one line (exported or legacy JSONL)."""
        if not line.strip():
            return []
        obj = _load_object(line)
        if ctx.file.kind == "db":
            if obj.get("t") == "session" and _str(obj.get("id")):
                return [_goose_session(obj["id"], obj)]
            if obj.get("t") == "message" and _str(obj.get("session")):
                return _goose_events(obj["session"], obj, ctx)
            if obj.get("t") == "unreadable":
                raise ParseError(f"row {obj.get('key')} could not be exported: {obj.get('reason')}")
            return _unknown(ctx)
        if "role" not in obj and "content" not in obj:  # the metadata line
            sid = _str(obj.get("id")) or _str(ctx.file.meta.get("session"))
            if not sid:
                raise ParseError("a metadata line without a session id")
            ctx.state["session"] = sid
            ctx.state["cwd"] = _str(obj.get("working_dir"))
            return [_goose_session(sid, {**obj, "name": obj.get("description")})]
        sid = _str(ctx.state.get("session")) or _str(ctx.file.meta.get("session"))
        if not sid:
            raise ParseError("a message before the session's metadata")
        return _goose_events(sid, {**obj, "cwd": ctx.state.get("cwd")}, ctx)


def _goose_session(sid: str, obj: dict) -> SessionInfo:
    """Return the SessionInfo of a session row or a legacy metadata line."""
    manual = bool(obj.get("user_set_name"))
    title = _title_of(obj.get("name"), RANK_MANUAL if manual else RANK_GENERATED) or \
        _title_of(obj.get("description"), RANK_GENERATED)
    model = _str(_dict(_unjson(obj.get("model_config_json"))).get("model_name"))
    return SessionInfo(sid, title=title[0] if title else None, title_rank=title[1] if title else 0,
                       cwd=_str(obj.get("working_dir")), model=model, parent=_str(obj.get("parent_session_id")))


def _goose_lines(conn: sqlite3.Connection, known: Mapping[str, str], now_ms: int) -> Iterator:
    """Yield export tuples for the sessions and messages of Goose's ``sessions.db``."""
    tables = _tables(conn)
    if "sessions" not in tables:
        return
    cols = [c for c in _GOOSE_SESSION_COLUMNS if c in _columns(conn, "sessions")]
    if "id" not in cols:
        return
    sessions = {}
    for r in conn.execute(f"SELECT {', '.join(cols)} FROM sessions ORDER BY id"):
        row = {c: _scalar(v) for c, v in zip(cols, r)}
        sessions[row["id"]] = row
        line = {"t": "session", **{k: v for k, v in row.items() if v not in (None, "")}}
        if known.get(f"session:{row['id']}") != _digest(line):
            yield (f"session:{row['id']}", _digest(line), _line(line))
    mcols = _columns(conn, "messages") if "messages" in tables else []
    if not {"id", "session_id", "content_json"} <= set(mcols):
        return
    last = dict(conn.execute("SELECT session_id, max(id) FROM messages GROUP BY session_id"))
    for r in conn.execute("SELECT * FROM messages ORDER BY id"):
        m = {k: _scalar(v) for k, v in zip(mcols, r)}
        key = f"msg:{m['id']}"
        digest = _digest(*(f"{k}\x00{_as_str(v)}" for k, v in sorted(m.items())))
        if known.get(key) == digest:
            continue
        session = sessions.get(m["session_id"], {})
        if m["id"] == last.get(m["session_id"]) and not _settled(
                max(filter(None, (_ts(m.get("created_timestamp")), _ts(session.get("updated_at")))), default=None),
                now_ms):
            continue  # the newest message of a live session may still be replaced
        content = _loads(m.get("content_json"))
        if not isinstance(content, list):
            reason = "content_json is not a JSON list"
            yield (key, _digest(reason), _line({"t": "unreadable", "key": key, "reason": reason}))
            continue
        line = {"t": "message", "session": m["session_id"], "id": _str(m.get("message_id")) or str(m["id"]),
                "role": m.get("role"), "created": m.get("created_timestamp"), "content": content,
                "metadata": _loads(m.get("metadata_json")), "cwd": session.get("working_dir")}
        yield (key, digest, _line({k: v for k, v in line.items() if v is not None}))


def _goose_events(sid: str, m: dict, ctx: Context) -> list:
    """Return the events of one Goose message (a row's export or a legacy line)."""
    role = m.get("role")
    if role not in ("user", "assistant"):
        return _unknown(ctx)
    ts = _ts(m.get("created"))
    visible = _dict(m.get("metadata")).get("userVisible", True) is not False
    common = dict(session=sid, cwd=_str(m.get("cwd")))
    base = f"{sid}:{_str(m.get('id')) or ts}"
    out: list = []
    thinking = []
    for part in _list(m.get("content")):
        if not isinstance(part, dict):
            _unknown(ctx)
            continue
        kind = part.get("type")
        if kind == "thinking":
            thinking.append(_str(part.get("thinking")) or "")
        elif kind == "text":
            text = _str(part.get("text")) or ""
            if text.strip():
                out.append(Record(id=f"{base}:m:{short_hash(text, n=8)}", kind="message", role=role, text=text,
                                  ts=ts, indexed=visible, **common))
        elif kind == "toolRequest":
            call = _dict(part.get("toolCall"))
            value = _dict(call.get("value"))
            text = (_tool_call_text(value.get("name"), value.get("arguments")) if value
                    else f"tool call failed: {_plain(call.get('error'))}")
            tid = _str(part.get("id")) or short_hash(text, n=8)
            out.append(Record(id=f"{sid}:{tid}:c", kind="tool_call", role="assistant", text=text, ts=ts,
                              indexed=visible, **common))
        elif kind == "toolResponse":
            result = _dict(part.get("toolResult"))
            if result.get("status") == "error" or "error" in result:
                text = f"error: {_plain(result.get('error'))}"
            else:
                value = result.get("value")
                text = _plain(value.get("content") if isinstance(value, dict) else value)
            text = truncate(text, TOOL_RESULT_MAX)
            tid = _str(part.get("id")) or short_hash(text, n=8)
            out.append(Record(id=f"{sid}:{tid}:r", kind="tool_result", role="tool", text=text, ts=ts,
                              indexed=visible, **common))
        elif kind == "image":
            continue
        elif kind not in _GOOSE_QUIET_PARTS:
            _unknown(ctx)
    reasoning = "".join(thinking).strip()
    if reasoning:
        out.insert(0, Record(id=f"{base}:k:{short_hash(reasoning, n=8)}", kind="message", role="assistant",
                             text=reasoning, ts=ts, indexed=False, **common))
    return out


###############################################################################
# Native memory notes #########################################################
###############################################################################

#: Largest memory note read, in bytes (Claude Code keeps them short; the
#: index MEMORY.md is cut at 200 lines when loaded).
MEMORY_NOTE_MAX = 1 << 20
#: Bytes of a project's newest transcript read to learn the project's cwd.
_CWD_PROBE = 65536
_CWD_FIELD = re.compile(rb'"cwd"\s*:\s*("(?:[^"\\]|\\.)*")')


def _project_cwd(project: Path) -> str | None:
    """Return the working directory a Claude Code project folder stands for.

    The folder name is the cwd with every "/" and "." turned into "-", which
    cannot be reversed; the project's newest transcript names it exactly.
    """
    try:
        logs = sorted(_files(project, ".jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for log in logs[:3]:
        try:
            with open(log, "rb") as fh:
                m = _CWD_FIELD.search(fh.read(_CWD_PROBE))
            if m:
                return _str(json.loads(m.group(1)))
        except (OSError, ValueError):
            continue
    return None


class ClaudeMemory(Adapter):
    """Claude Code's own memory notes, archived like a database source.

    Layout read: ``<root>/projects/<project folder>/memory/*.md``, where root
    is each Claude Code root (``CLAUDE_CONFIG_DIR`` or ``~/.claude``) and the
    project folder is named after the working directory; ``MEMORY.md`` is the
    index Claude Code loads at start, and every other ``.md`` file one note
    (a few lines of front matter: ``name``, ``description``, ``type``, then
    the note).  Notes are rewritten in place, so each file is exported whole
    (kind "db"): every new version of it becomes one line of its mirror and
    one event, and older versions stay archived and citable.

    Event ids: ``<project folder>/<file>@<hash of the text>``; the session is
    ``memory:<project folder>``, the role ``memory``, the time the file's
    modification time.  Grok Build keeps no memory files whose layout is
    known (its ``memory_*`` updates in ``updates.jsonl`` are skipped), so
    only Claude Code's are read.
    """

    name = "claude-memory"
    version = 1
    display = "Claude Code memory"
    kind = "db"

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return the Claude Code roots (the notes live beside the transcripts)."""
        return ClaudeCode().roots(env, home)

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every Markdown note of every project's ``memory/`` folder."""
        for prefix, root in _labelled(self.roots(env, home), home):
            projects = root / "projects"
            if not _is_dir(projects):
                continue
            for project in _subdirs(projects):
                notes = project / "memory"
                if not _is_dir(notes):
                    continue
                files = _files(notes, ".md")
                if not files:
                    continue
                meta = {"folder": project.name, "cwd": _project_cwd(project)}
                for path in files:
                    yield SourceFile(str(path), _rel(prefix, root, path), kind="db", meta=meta)

    def export(self, f: SourceFile, known: Mapping[str, str], now_ms: int) -> Iterator[tuple[str, str, str]]:
        """Yield the note as one line when its text changed since the last export."""
        try:
            with open(f.path, "rb") as fh:
                data = fh.read(MEMORY_NOTE_MAX)
            mtime = int(os.stat(f.path).st_mtime * 1000)
        except OSError as e:
            raise UnreadableSource(f"cannot read {f.path}: {e.strerror}") from None
        text = data.decode("utf-8", "replace")
        digest = _digest(text)
        if known.get("note") == digest:
            return
        line = {"t": "note", "folder": f.meta.get("folder"), "file": os.path.basename(f.path),
                "cwd": f.meta.get("cwd"), "mtime": mtime, "text": text}
        yield ("note", digest, _line({k: v for k, v in line.items() if v is not None}))

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the note's event and its session's title."""
        if not line.strip():
            return []
        obj = _load_object(line)
        if obj.get("t") != "note" or not _str(obj.get("folder")) or not _str(obj.get("file")):
            return _unknown(ctx)
        text = obj.get("text") if isinstance(obj.get("text"), str) else ""
        folder, name = obj["folder"], obj["file"]
        session = f"memory:{folder}"
        cwd = _str(obj.get("cwd"))
        title = f"Claude Code memory of {last_segment(cwd) or folder}"
        return [SessionInfo(session, title=title, title_rank=RANK_GENERATED, cwd=cwd),
                Record(id=f"{folder}/{name}@{short_hash(text, n=12)}", session=session, kind="message",
                       role="memory", text=text, ts=_ts(obj.get("mtime")), cwd=cwd, indexed=bool(text.strip()))]


###############################################################################
# GitHub Copilot CLI ##########################################################
###############################################################################

#: Copilot CLI event types that carry nothing to index: turn edges, usage,
#: hooks, sub-agent bookkeeping, the tool start (its call is in the request).
_COPILOT_QUIET = frozenset({
    "assistant.turn_start", "assistant.turn_end", "assistant.reasoning", "assistant.usage",
    "tool.execution_start", "tool.execution_partial_result", "session.info", "session.truncation",
    "session.shutdown", "session.usage_checkpoint", "session.auto_mode_resolved", "hook.start", "hook.end",
    "subagent.started", "subagent.completed", "subagent.failed", "subagent.selected",
    "session.compaction_start", "session.compaction_complete", "session.idle", "session.mode_changed",
})

#: Event types kept for provenance but not searched, with the field holding their text.
_COPILOT_META = {"system.message": "content", "system.notification": "content", "session.error": "message",
                 "abort": "reason"}


def _copilot_type(value: Any) -> str | None:
    """Return an event type in dot notation (releases before 1.0.17 used ``_``)."""
    if not isinstance(value, str) or not value:
        return None
    return value if "." in value or "_" not in value else value.replace("_", ".", 1)


class CopilotCli(Adapter):
    """Parse GitHub Copilot CLI session logs: JSONL, one event per line.

    Layout read: ``<root>/session-state/<session>/events.jsonl`` (1.0.11 on)
    and the earlier flat ``<root>/session-state/<session>.jsonl``, where root
    is ``COPILOT_HOME`` or ``~/.copilot``.  Lines are ``{type, data, id,
    timestamp, parentId}``; types in dot notation (1.0.17 on; older
    ``snake_case`` names are read as the same type).  ``user.message`` is
    archived from ``content``, what the person typed, not from
    ``transformedContent`` (the prompt with the context Copilot adds);
    ``assistant.message`` gives a message and one tool call per entry of
    ``toolRequests``; ``tool.execution_complete`` a tool result.  Unknown
    types are counted, never fatal.  Fixtures:
    ``tests/fixtures/copilot-cli/lantern/`` (1.0.78, two real sessions) and
    ``tests/fixtures/copilot-cli/agent-sessions/flat-legacy/`` (the flat
    layout, newer event types, drift).

    Event ids: the line's ``id`` and a short hash of the line (``#i`` for the
    i-th tool request), so the same bytes in the flat and the folder layout
    give the same ids, and lines whose ids were redacted stay distinct; a
    line without id gets a hash of its session and bytes.
    """

    name = "copilot-cli"
    display = "GitHub Copilot CLI"
    env_vars = ("COPILOT_HOME",)
    # Copilot CLI reads $COPILOT_HOME/mcp-config.json; "tools" says which of
    # the server's tools it may call ("*": all of them).
    mcp = McpConfig("json", ("mcpServers",),
                    lambda env, home: [d / "mcp-config.json" for d in env_dirs(env, "COPILOT_HOME",
                                                                               [home / ".copilot"])],
                    ("copilot",), stdio_type=True, extra=(("tools", ["*"]),))
    # Its user settings ($COPILOT_HOME/settings.json) may hold hooks inline: flat
    # entries, the command under "bash"; a sessionStart reply adds "additionalContext".
    hook = HookConfig("sessionStart", _settings_json("COPILOT_HOME", ".copilot"), 10, "additionalContext", "bash")

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``COPILOT_HOME`` (comma list), else ``~/.copilot``."""
        return env_dirs(env, "COPILOT_HOME", [home / ".copilot"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every session log, folder layout and flat layout alike."""
        for prefix, root in _labelled(self.roots(env, home), home):
            state = root / "session-state"
            if not _is_dir(state):
                continue
            files, folders = _split_listing(state, ".jsonl")
            found = {}
            for name in files:
                path = state / name
                found[_rel(prefix, root, path)] = SourceFile(str(path), _rel(prefix, root, path),
                                                             meta={"session": name[: -len(".jsonl")]})
            for folder in folders:
                path = folder / "events.jsonl"
                if _is_file(path):
                    found[_rel(prefix, root, path)] = SourceFile(str(path), _rel(prefix, root, path),
                                                                 meta={"session": folder.name})
            for rel in sorted(found):
                yield found[rel]

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one event line."""
        if not line.strip():
            return []
        obj = _load_object(line)
        st = ctx.state
        kind = _copilot_type(obj.get("type"))
        data = _dict(obj.get("data"))
        if kind == "session.start" and _str(data.get("sessionId")):
            st["session"] = data["sessionId"]
        session = st.get("session") or _str(ctx.file.meta.get("session")) or "unknown"
        ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        lid = _str(obj.get("id"))
        base = f"{lid}:{short_hash(line, n=8)}" if lid else short_hash(session, line)
        common = dict(session=session, ts=ts if ts is not None else st.get("ts", ctx.mtime_ms),
                      ts_approx=ts is None, cwd=st.get("cwd"), branch=st.get("branch"))
        if kind in ("session.start", "session.resume"):
            return self._context(data, st, session)
        if kind == "session.model_change":
            model = _str(data.get("newModel"))
            if model and model != st.get("model"):
                st["model"] = model
                return [SessionInfo(session, model=model)]
            return []
        if kind == "user.message":
            text = data.get("content")
            text = text if isinstance(text, str) else _plain(data.get("transformedContent"))
            if not text.strip():
                return []
            out: list = [Record(base, kind="message", role="user", text=text, **common)]
            title = None if st.get("titled") else _title_of(text, RANK_PROMPT)
            if title:
                st["titled"] = True
                out.append(SessionInfo(session, title=title[0], title_rank=title[1]))
            return out
        if kind == "assistant.message":
            return self._assistant(data, st, base, common)
        if kind == "tool.execution_complete":
            result = data.get("result")
            text = _output_text(_dict(result).get("content", result)) if result is not None else ""
            if not text:
                text = _plain(_dict(data.get("error")).get("message", data.get("error")))
            if data.get("success") is False:
                text = "[error] " + text
            return [Record(base, kind="tool_result", role="tool", text=truncate(text, TOOL_RESULT_MAX), **common)]
        if kind in _COPILOT_META:
            text = _plain(data.get(_COPILOT_META[kind])) or kind
            if kind == "session.error" and _str(data.get("errorType")):
                text = f"{data['errorType']}: {text}"
            return [Record(base, kind="meta", role="system", text=text, indexed=False, **common)]
        if not (kind and kind in _COPILOT_QUIET):
            st["unknown"] = st.get("unknown", 0) + 1
        return []

    def _context(self, data: dict, st: dict, session: str) -> list:
        """Take cwd, branch, version and model from a start or resume line."""
        context = _dict(data.get("context"))
        cwd, branch = _str(context.get("cwd")), _str(context.get("branch"))
        version, model = _str(data.get("copilotVersion")), _str(data.get("selectedModel"))
        if cwd:
            st["cwd"] = cwd
        if branch:
            st["branch"] = branch
        if model:
            st["model"] = model
        if not (cwd or branch or version or model):
            return []
        return [SessionInfo(session, cwd=cwd, branch=branch, agent_version=version, model=model)]

    def _assistant(self, data: dict, st: dict, base: str, common: dict) -> list:
        """Return the message and the tool calls of an assistant line."""
        model = _str(data.get("model")) or st.get("model")
        out: list = []
        text = _plain(data.get("content"))
        if text.strip():
            out.append(Record(base, kind="message", role="assistant", text=text, model=model, **common))
        for i, req in enumerate(_list(data.get("toolRequests"))):
            if isinstance(req, dict):
                text = _tool_call_text(req.get("name"), req.get("arguments"))
                out.append(Record(f"{base}#{i}", kind="tool_call", role="assistant", text=text, model=model,
                                  **common))
        return out


###############################################################################
# Qwen Code ###################################################################
###############################################################################

#: System line subtypes of Qwen Code that are bookkeeping (usage telemetry,
#: edit attribution): nothing to keep as an event.
_QWEN_QUIET = frozenset({"ui_telemetry", "attribution_snapshot"})

#: How context a hook injects into a prompt starts (``<qwen:…>`` blocks).
_QWEN_INJECTED = "<qwen:"


class QwenCode(Adapter):
    """Parse Qwen Code chat logs: JSONL, one record per line.

    Layout read: ``<root>/projects/<project folder>/chats/<session>.jsonl``,
    where root is ``ORIGIN_QWEN_HOME`` or ``~/.qwen`` and the project folder
    is the working directory with ``/`` turned into ``-`` (not reversible:
    the ``cwd`` of each record names it).  Records have Claude Code's
    envelope (``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``,
    ``type`` user | assistant | tool_result | system, ``cwd``, ``version``,
    ``gitBranch``) around a Gemini message: ``message.parts`` of ``text``
    (``thought: true`` for reasoning, not archived), ``functionCall`` and
    ``functionResponse``.  Context a hook adds to a prompt (a ``<qwen:…>``
    part) is kept for provenance but not searched; ``system`` lines of
    telemetry and attribution carry nothing.  Fixtures:
    ``tests/fixtures/qwen/lantern/`` (0.21.6, two real sessions) and
    ``tests/fixtures/qwen/agent-sessions/`` (0.21.13, hook context,
    notifications).

    Event ids: the record's ``uuid``; ``<uuid>#<i>`` for the tool part at
    index i; a record without uuid gets a hash of session and line.
    """

    name = "qwen"
    display = "Qwen Code"
    env_vars = ("ORIGIN_QWEN_HOME",)
    mcp, hook = _gemini_settings("ORIGIN_QWEN_HOME", ".qwen", "qwen")  # ~/.qwen/settings.json, as Gemini CLI's

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``ORIGIN_QWEN_HOME`` (comma list), else ``~/.qwen``."""
        return env_dirs(env, "ORIGIN_QWEN_HOME", [home / ".qwen"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every chat log of every project."""
        for prefix, root in _labelled(self.roots(env, home), home):
            projects = root / "projects"
            if not _is_dir(projects):
                continue
            for project in _subdirs(projects):
                for path in _files(project / "chats", ".jsonl"):
                    rel = _rel(prefix, root, path)
                    yield SourceFile(str(path), rel, meta={"session": path.name[: -len(".jsonl")]})

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one chat record."""
        if not line.strip():
            return []
        obj = _load_object(line)
        st = ctx.state
        kind = obj.get("type")
        session = _str(obj.get("sessionId")) or st.get("session") or _str(ctx.file.meta.get("session")) or "unknown"
        st["session"] = session
        if _str(obj.get("cwd")):
            st["cwd"] = obj["cwd"]
        if isinstance(obj.get("gitBranch"), str):
            st["branch"] = obj["gitBranch"] or None
        ts = _ts(obj.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        model = _str(obj.get("model"))
        out: list = self._facts(st, session, _str(obj.get("version")), model)
        base = _str(obj.get("uuid")) or short_hash(session, line)
        common = dict(session=session, ts=ts if ts is not None else st.get("ts", ctx.mtime_ms),
                      ts_approx=ts is None, cwd=st.get("cwd"), branch=st.get("branch"))
        parts = [p for p in _list(_dict(obj.get("message")).get("parts")) if isinstance(p, dict)]
        if kind == "user":
            return out + self._user(obj, parts, base, common, st)
        if kind == "assistant":
            return out + self._assistant(parts, base, model, common)
        if kind == "tool_result":
            return out + self._results(obj, parts, base, common)
        if kind == "system":
            if obj.get("subtype") in _QWEN_QUIET:
                return out
            text = _plain(parts) or _compact(obj.get("systemPayload") or obj.get("subtype") or "system")
            return out + [Record(base, kind="meta", role="system", text=truncate(text, TOOL_RESULT_MAX),
                                 indexed=False, **common)]
        st["unknown"] = st.get("unknown", 0) + 1
        return out

    def _facts(self, st: dict, session: str, version: str | None, model: str | None) -> list:
        """Report cwd, branch, version and model when they change."""
        facts = [session, st.get("cwd"), st.get("branch"), version, model]
        sent = st.get("sent") or [None] * 5
        if sent[0] == session and all(new in (None, old) for new, old in zip(facts, sent)):
            return []
        if sent[0] != session:
            sent = [None] * 5
        st["sent"] = [old if new is None else new for new, old in zip(facts, sent)]
        return [SessionInfo(session, cwd=facts[1], branch=facts[2], agent_version=version, model=model)]

    def _user(self, obj: dict, parts: list[dict], base: str, common: dict, st: dict) -> list:
        """Return a prompt (without injected context), or a notification as meta."""
        texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and p.get("thought") is not True]
        typed = "\n".join(t for t in texts if t and not t.lstrip().startswith(_QWEN_INJECTED))
        injected = "\n".join(t for t in texts if t and t.lstrip().startswith(_QWEN_INJECTED))
        out: list = []
        if obj.get("subtype") is not None:  # a notification, not something the person typed
            text = "\n".join(t for t in texts if t)
            return [Record(base, kind="meta", role="system", text=text, indexed=False, **common)] if text else []
        if typed.strip():
            out.append(Record(base, kind="message", role="user", text=typed, **common))
            title = None if st.get("titled") else _title_of(typed, RANK_PROMPT)
            if title:
                st["titled"] = True
                out.append(SessionInfo(common["session"], title=title[0], title_rank=title[1]))
        if injected:
            out.append(Record(f"{base}#context", kind="meta", role="user", text=injected, indexed=False, **common))
        return out

    def _assistant(self, parts: list[dict], base: str, model: str | None, common: dict) -> list:
        """Return the reply text and one tool call per function call."""
        texts, out = [], []
        for i, part in enumerate(parts):
            call = part.get("functionCall")
            if isinstance(call, dict):
                out.append(Record(f"{base}#{i}", kind="tool_call", role="assistant", model=model,
                                  text=_tool_call_text(call.get("name"), call.get("args")), **common))
            elif isinstance(part.get("text"), str) and part.get("thought") is not True:
                texts.append(part["text"])
        text = "\n".join(t for t in texts if t)
        if text.strip():
            out.insert(0, Record(base, kind="message", role="assistant", text=text, model=model, **common))
        return out

    def _results(self, obj: dict, parts: list[dict], base: str, common: dict) -> list:
        """Return one tool result per function response."""
        out = []
        failed = _dict(obj.get("toolCallResult")).get("status") == "error"
        for i, part in enumerate(parts):
            resp = part.get("functionResponse")
            if not isinstance(resp, dict):
                continue
            value = _dict(resp.get("response"))
            error = "error" in value
            text = _output_text(value.get("error") if error else value.get("output", resp.get("response")))
            if error or (failed and len(parts) == 1):
                text = "[error] " + text
            out.append(Record(f"{base}#{i}", kind="tool_result", role="tool", text=truncate(text, TOOL_RESULT_MAX),
                              **common))
        return out


###############################################################################
# Pi ##########################################################################
###############################################################################

#: Pi entry types that carry nothing to index.
_PI_QUIET = frozenset({"thinking_level_change", "label", "custom"})

#: Fields a Pi rewrite adds or renames (version 1 had no ids, compactions
#: named their first kept entry by index): left out of an entry's identity.
_PI_VOLATILE = frozenset({"id", "parentId", "firstKeptEntryId", "firstKeptEntryIndex"})


def _pi_identity(obj: dict) -> str:
    """Return what names a Pi entry across the rewrites of its file.

    Pi rewrites an older file in place when it opens it (version 1 to 2 adds
    random ``id``/``parentId`` to every entry, 2 to 3 renames the message
    role ``hookMessage`` to ``custom``); the entry's content and times stay.
    """
    entry = {k: v for k, v in obj.items() if k not in _PI_VOLATILE}
    message = entry.get("message")
    if isinstance(message, dict) and message.get("role") == "hookMessage":
        entry["message"] = {**message, "role": "custom"}
    return short_hash(_compact(entry))


def _pi_session_of(path: Any) -> str | None:
    """Return the session id a Pi session file is named after (``<time>_<id>.jsonl``)."""
    name = last_segment(path) if isinstance(path, str) else None
    if not name:
        return None
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    return stem.split("_", 1)[1] if "_" in stem else stem or None


class Pi(Adapter):
    """Parse Pi coding agent sessions: JSONL, a tree of entries.

    Layout read: ``<root>/sessions/--<cwd>--/<time>_<session>.jsonl``, where
    root is ``PI_CODING_AGENT_DIR`` or ``~/.pi/agent``.  The first line is
    the header ``{type: "session", version, id, timestamp, cwd,
    parentSession?}``; then entries ``{type, id, parentId, timestamp}``:
    ``message`` (``message.role`` user | assistant | toolResult |
    bashExecution | custom | branchSummary | compactionSummary, content
    blocks text, image, thinking, toolCall), ``model_change``,
    ``compaction``, ``branch_summary``, ``session_info`` (the name the person
    gave the session), ``custom_message``, and bookkeeping.  Branches share
    the file: every entry is archived, whichever branch it is on.  Versions 1
    and 2 are read too; Pi rewrites them to version 3 in place when it opens
    them, which ingest sees as a new generation.  Fixtures:
    ``tests/fixtures/pi/agentsview/`` and ``tests/fixtures/pi/agent-sessions/``.

    Event ids: ``<session>:<hash of the entry without the fields a rewrite
    changes>`` (``#i`` for the i-th tool call), so the rewritten file gives
    the ids it gave before and adds nothing twice.
    """

    name = "pi"
    display = "Pi"
    env_vars = ("PI_CODING_AGENT_DIR",)  # Pi reads no MCP servers: no mcp row

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``PI_CODING_AGENT_DIR`` (comma list), else ``~/.pi/agent``."""
        return env_dirs(env, "PI_CODING_AGENT_DIR", [home / ".pi" / "agent"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield every session file of every working directory."""
        for prefix, root in _labelled(self.roots(env, home), home):
            sessions = root / "sessions"
            if not _is_dir(sessions):
                continue
            for folder in _subdirs(sessions):
                for path in _files(folder, ".jsonl"):
                    yield SourceFile(str(path), _rel(prefix, root, path), meta={"session": _pi_session_of(path.name)})

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the events and session facts of one entry."""
        if not line.strip():
            return []
        obj = _load_object(line)
        st = ctx.state
        kind = obj.get("type")
        if kind == "session":
            return self._header(obj, st)
        session = st.get("session") or _str(ctx.file.meta.get("session")) or "unknown"
        message = _dict(obj.get("message"))
        ts = _ts(obj.get("timestamp"))
        if ts is None:
            ts = _ts(message.get("timestamp"))
        if ts is not None:
            st["ts"] = ts
        base = f"{session}:{_pi_identity(obj)}"
        common = dict(session=session, ts=ts if ts is not None else st.get("ts", ctx.mtime_ms),
                      ts_approx=ts is None, cwd=st.get("cwd"))
        if kind == "message":
            return self._message(message, st, base, common)
        if kind == "model_change":
            model = _str(obj.get("modelId"))
            if model and model != st.get("model"):
                st["model"] = model
                return [SessionInfo(session, model=model)]
            return []
        if kind == "session_info":
            title = _title_of(obj.get("name"), RANK_MANUAL)
            return [SessionInfo(session, title=title[0], title_rank=title[1])] if title else []
        if kind in ("compaction", "branch_summary"):
            text = _plain(obj.get("summary")) or kind
            return [Record(base, kind="meta", role="system", text=text, indexed=False, **common)]
        if kind == "custom_message":
            text = _plain(obj.get("content"))
            return [Record(base, kind="meta", role="system", text=text, indexed=False, **common)] if text else []
        if not (isinstance(kind, str) and kind in _PI_QUIET):
            st["unknown"] = st.get("unknown", 0) + 1
        return []

    def _header(self, obj: dict, st: dict) -> list:
        """Take the session's id, folder and parent from the header line."""
        session = _str(obj.get("id"))
        if not session:
            return []
        st["session"] = session
        if _str(obj.get("cwd")):
            st["cwd"] = obj["cwd"]
        parent = _pi_session_of(_str(obj.get("parentSession")) or _str(obj.get("branchedFrom")))
        return [SessionInfo(session, cwd=st.get("cwd"), parent=parent if parent != session else None)]

    def _message(self, message: dict, st: dict, base: str, common: dict) -> list:
        """Return the events of one message entry."""
        role = message.get("role")
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        if role == "user":
            text = _plain([b for b in blocks if not (isinstance(b, dict) and b.get("type") == "thinking")])
            if not text.strip():
                return []
            out: list = [Record(base, kind="message", role="user", text=text, **common)]
            title = None if st.get("titled") else _title_of(text, RANK_PROMPT)
            if title:
                st["titled"] = True
                out.append(SessionInfo(common["session"], title=title[0], title_rank=title[1]))
            return out
        if role == "assistant":
            model = _str(message.get("model")) or st.get("model")
            texts, out = [], []
            for i, block in enumerate(blocks):
                if isinstance(block, str):
                    texts.append(block)
                elif isinstance(block, dict) and block.get("type") == "text":
                    texts.append(_plain(block.get("text")))
                elif isinstance(block, dict) and block.get("type") == "toolCall":
                    out.append(Record(f"{base}#{i}", kind="tool_call", role="assistant", model=model,
                                      text=_tool_call_text(block.get("name"), block.get("arguments")), **common))
            text = "\n".join(t for t in texts if t)
            if not text.strip() and _str(message.get("errorMessage")):
                out.insert(0, Record(base, kind="meta", role="system", text=message["errorMessage"], indexed=False,
                                     **common))
            elif text.strip():
                out.insert(0, Record(base, kind="message", role="assistant", text=text, model=model, **common))
            return out
        if role == "toolResult":
            text = _plain(content)
            if message.get("isError") is True:
                text = "[error] " + text
            return [Record(base, kind="tool_result", role="tool", text=truncate(text, TOOL_RESULT_MAX), **common)]
        if role == "bashExecution":
            command = _str(message.get("command")) or ""
            output = _plain(message.get("output"))
            code = message.get("exitCode")
            if _int(code) not in (None, 0):
                output = f"[exit {code}] {output}"
            return [Record(f"{base}#0", kind="tool_call", role="user", text=_tool_call_text("bash", command), **common),
                    Record(f"{base}#1", kind="tool_result", role="tool", text=truncate(output, TOOL_RESULT_MAX),
                           **common)]
        if role in ("custom", "hookMessage", "branchSummary", "compactionSummary"):
            text = _plain(content) or _plain(message.get("summary"))
            return [Record(base, kind="meta", role="system", text=text, indexed=False, **common)] if text else []
        st["unknown"] = st.get("unknown", 0) + 1
        return []


###############################################################################
# Aider #######################################################################
###############################################################################

#: The chat log Aider keeps at the top of each repository it runs in.
AIDER_HISTORY = ".aider.chat.history.md"
#: The line that opens each run of Aider in its chat log (local time, no zone).
AIDER_RUN = "# aider chat started at "
#: Run headers of a history file remembered to number repeated ones.
AIDER_RECENT_RUNS = 64
#: How deep the folders of ORIGIN_AIDER_ROOTS are searched, and the bounds of
#: that search per discovery: folders listed, and seconds.
AIDER_WALK_DEPTH = 4
AIDER_WALK_DIRS = 20_000
AIDER_WALK_SECONDS = 1.0
#: Folders always listed before the clock is looked at, so a small tree is
#: searched whole however busy the machine is.
AIDER_WALK_SURE = 256
#: Parent folders of a known project folder looked in (the agent may have
#: run in a sub-folder of the repository that holds the chat log).
AIDER_PARENTS = 3
#: Characters of one open block its parse state keeps (the whole text stays
#: in the mirror; the event gets this much).
AIDER_BLOCK_TEXT = 1_000_000
#: Folder names never entered while searching the roots (besides hidden ones).
_AIDER_SKIP = frozenset({"node_modules", "vendor", "target", "build", "dist", "venv", "__pycache__",
                         "Library", "site-packages"})
#: The block kinds of a chat log: typed by the person, Aider's own output, the model's reply.
_AIDER_KINDS = {"user": ("message", "user"), "tool": ("tool_result", "tool"), "assistant": ("message", "assistant")}
_AIDER_VERSION = re.compile(r"^Aider v(\S+)")
_AIDER_MODEL = re.compile(r"^(?:Main )?[Mm]odel: (\S+)")

def _aider_rel(path: str) -> str:
    """Return the mirror name of a chat log: its absolute path, made relative.

    A chat log has no folder of its own agent to be relative to; its path
    names the repository it belongs to.  ``C:\\x`` becomes ``C/x``.
    """
    posix = path.replace("\\", "/")
    if len(posix) > 1 and posix[1] == ":":
        posix = posix[0] + posix[2:]
    return "/".join(seg for seg in posix.split("/") if seg not in ("", ".", ".."))


def _utc_offset_min(path: Path) -> int:
    """Return this machine's UTC offset in minutes at the file's mtime."""
    try:
        when = os.stat(path).st_mtime
    except OSError:
        when = None
    return int(time.localtime(when).tm_gmtoff // 60)


def _aider_walk(roots: list[Path], deadline: float) -> Iterator[Path]:
    """Yield chat logs under the roots, breadth first, within the bounds."""
    queue = [(root, 0) for root in roots]
    listed = 0
    while queue and listed < AIDER_WALK_DIRS and (listed < AIDER_WALK_SURE or time.monotonic() < deadline):
        folder, depth = queue.pop(0)
        listed += 1
        _look(folder)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            _unreadable(folder, e)
            continue
        for e in entries:
            if e.name == AIDER_HISTORY:
                if _safe(lambda x: x.is_file(), e):
                    yield Path(e.path)
            elif (depth < AIDER_WALK_DEPTH and not e.name.startswith(".") and e.name not in _AIDER_SKIP
                  and _safe(lambda x: x.is_dir(follow_symlinks=False), e)):
                queue.append((Path(e.path), depth + 1))
    if queue:  # stopped at a bound: folders left unlisted
        _look(LOOK_CUT)


class Aider(Adapter):
    """Parse Aider's chat logs: Markdown, ``.aider.chat.history.md`` per repository.

    Aider keeps no central folder: discovery looks in every project folder
    Origin already knows from the other agents (and up to three folders
    above it) and searches the folders of ``ORIGIN_AIDER_ROOTS`` a few
    levels deep, within bounds of folders and time (one second for the known
    folders, then what is left of it, at least half a second, for the
    roots).  A log holds many runs, each opened by ``# aider chat started at
    <local time>``; in a run, lines starting ``#### `` are what the person
    typed, ``> `` lines Aider's own output (edits applied, commands run,
    warnings), other lines the model's reply.  A block of one kind is one
    event, emitted when the next block starts (or the file goes quiet).
    Limits: a reply line that itself starts with ``#### `` or ``> `` is read
    as a prompt or as output; no message has a time of its own, so each
    event takes its run's start, marked approximate, read in the time zone
    the machine had when the log was first archived.  Fixtures:
    ``tests/fixtures/aider/``.

    Event ids: ``<run>:<block ordinal>:<hash of the text>``; the run is a
    hash of the log's folder, its start line and how many runs before it in
    the file started in the same second.
    """

    name = "aider"
    display = "Aider"
    env_vars = ("ORIGIN_AIDER_ROOTS",)  # Aider reads no MCP servers: no mcp row
    in_projects = True

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return the folders of ``ORIGIN_AIDER_ROOTS`` (comma list); none by default."""
        return env_dirs(env, "ORIGIN_AIDER_ROOTS", [])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield the chat log of each known project folder and under each root."""
        found: dict[str, Path] = {}
        stop = {str(home), os.sep}
        deadline = time.monotonic() + AIDER_WALK_SECONDS
        for i, folder in enumerate(_FOLDERS.get()):
            if i % 256 == 255 and time.monotonic() > deadline:
                break
            p = Path(folder)
            for _ in range(AIDER_PARENTS + 1):
                if str(p) in stop or not p.is_absolute():
                    break
                log = p / AIDER_HISTORY
                if str(log) not in found and _is_file(log):
                    found[str(log)] = log
                if p.parent == p:
                    break
                p = p.parent
        roots = [r for r in self.roots(env, home) if _is_dir(r)]
        for log in _aider_walk(roots, max(deadline, time.monotonic() + AIDER_WALK_SECONDS / 2)):
            found.setdefault(os.path.abspath(log), Path(os.path.abspath(log)))
        for path in sorted(found):
            log = found[path]
            yield SourceFile(path, _aider_rel(path), meta={"cwd": str(log.parent), "utc_offset": _utc_offset_min(log)})

    def new_state(self, f: SourceFile) -> dict:
        """Start with the log's folder and the time zone it was written in."""
        offset = f.meta.get("utc_offset")
        return {"cwd": _str(f.meta.get("cwd")), "tz": offset if isinstance(offset, int) else 0}

    @_guarded
    def parse(self, line: str, ctx: Context) -> list:
        """Return the block a line closes, and the facts of a new run."""
        st = ctx.state
        text = line[:-1] if line.endswith("\r") else line
        if text.startswith(AIDER_RUN):
            out = self._close(st)
            header = text[len(AIDER_RUN):].strip()
            # Two runs with the same header (started in the same second, or
            # headers that carry no time) get different ids: the header is
            # numbered by how often it opened a run among the last
            # AIDER_RECENT_RUNS of this file.
            recent = st.get("recent") if isinstance(st.get("recent"), list) else []
            st["dup"] = recent.count(header)
            st["recent"] = (recent + [header])[-AIDER_RECENT_RUNS:]
            st["header"] = header
            folder = ctx.file.rel.rsplit("/", 1)[0] if "/" in ctx.file.rel else ""
            st["run"] = f"{header.replace(' ', 'T')}-{short_hash(folder, header, str(st['dup']), n=12)}"
            st["n"], st["titled"] = 0, False
            start = self._start(header, st)
            st["ts"] = start if start is not None else ctx.mtime_ms  # an unreadable start: the file's time
            return out
        if text.startswith("####"):
            chan, body = "user", text[5:] if text.startswith("#### ") else text[4:]
        elif text.startswith(">"):
            chan, body = "tool", text[2:] if text.startswith("> ") else text[1:]
        elif not text.strip():
            if st.get("open"):
                st["open"]["blank"] += 1
            return []
        else:
            chan, body = "assistant", text
        out = []
        block = st.get("open")
        if block is not None and block["chan"] != chan:
            out = self._close(st)
            block = None
        if block is None:
            if "run" not in st:  # lines before any run header: the log's preamble
                st["run"] = f"preamble-{short_hash(ctx.file.rel, n=12)}"
                st["n"], st["ts"] = 0, ctx.mtime_ms
            block = st["open"] = {"chan": chan, "line": ctx.lineno, "offset": ctx.offset, "span": 0, "blank": 0,
                                  "text": ""}
        sep = "\n" * (block["blank"] + 1) if block["span"] else ""
        if len(block["text"]) < AIDER_BLOCK_TEXT:
            block["text"] = (block["text"] + sep + body)[:AIDER_BLOCK_TEXT]
        block["span"] = ctx.lineno - block["line"] + 1
        block["blank"] = 0
        return out

    def flush(self, ctx: Context) -> list:
        """Emit the block still open when the log went quiet."""
        return self._close(ctx.state)

    def _start(self, header: str, st: dict) -> int | None:
        """Return a run's start in epoch ms: its local time less the zone's offset."""
        try:
            local = _dt.datetime.strptime(header[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
        except ValueError:
            return None
        return int(local.timestamp() * 1000) - int(st.get("tz") or 0) * 60_000

    def _close(self, st: dict) -> list:
        """Turn the open block into its event (and the run's facts)."""
        block = st.pop("open", None)
        if not block or not block["text"].strip():
            return []
        kind, role = _AIDER_KINDS[block["chan"]]
        text = block["text"].strip("\n")
        run, n = st["run"], st.get("n", 0)
        st["n"] = n + 1
        if kind == "tool_result":
            text = truncate(text, TOOL_RESULT_MAX)
        out: list = [Record(f"{run}:{n}:{short_hash(text, n=8)}", session=run, kind=kind, role=role, text=text,
                            ts=st.get("ts"), ts_approx=True, cwd=st.get("cwd"), line=block["line"],
                            offset=block["offset"], span=block["span"])]
        if n == 0:
            out.append(SessionInfo(run, cwd=st.get("cwd")))
        if block["chan"] == "user" and not st.get("titled"):
            title = _title_of(text, RANK_PROMPT)
            if title:
                st["titled"] = True
                out.append(SessionInfo(run, title=title[0], title_rank=title[1]))
        if block["chan"] == "tool" and n == 0:
            version = model = None
            for row in text.splitlines()[:12]:
                m = _AIDER_VERSION.match(row)
                version = version or (m.group(1) if m else None)
                m = _AIDER_MODEL.match(row)
                model = model or (m.group(1) if m else None)
            if version or model:
                out.append(SessionInfo(run, agent_version=version, model=model))
        return out


###############################################################################
# Registry ####################################################################
###############################################################################

#: The table of agents: one row per adapter (see ``Adapter``); everything
#: in Origin that lists agents reads it.
ADAPTERS = {a.name: a for a in (ClaudeCode(), Codex(), Cursor(), ZCode(), Grok(), ClaudeMemory(), OpenCode(),
                                Gemini(), Goose(), CopilotCli(), QwenCode(), Pi(), Aider())}
