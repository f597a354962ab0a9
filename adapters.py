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

import datetime as _dt
import functools
import hashlib
import itertools
import json
import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

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
    and byte offset, and how many lines it covers.
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


def as_text(value: Any) -> str:
    """Render a JSON value (string, list of blocks, object) as plain text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, dict):
                t = item.get("type")
                if t in ("image", "input_image") or "data" in item and t != "text":
                    parts.append("[image]")
                elif isinstance(item.get("text"), str):
                    parts.append(item["text"])
                elif "content" in item:
                    parts.append(as_text(item["content"]))
                else:
                    parts.append(json.dumps(item, ensure_ascii=False, sort_keys=True))
            else:
                parts.append(as_text(item))
        return "\n".join(p for p in parts if p)
    if isinstance(value, (int, float, bool)):
        return json.dumps(value)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


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
    """Return the directories named by an env var, else the defaults."""
    value = env.get(var)
    if value:
        return [Path(os.path.expanduser(v)) for v in value.split(",") if v.strip()]
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

    Unlike as_text it never dumps an image block (whose JSON would carry
    base64 data) and stops at a fixed depth, so hostile nesting is cheap.
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


def _clean(text: str | None) -> str | None:
    """Replace lone UTF-16 surrogates, which SQLite cannot store."""
    if not text or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


#: A JSON escape of a UTF-16 surrogate: only lines holding one need scrubbing.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _scrub(value: Any) -> Any:
    """Return a JSON value with lone surrogates replaced in every string."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _scrub(v) for k, v in value.items()}
    return value


def _load_object(line: str) -> dict:
    """Parse a line that must hold a JSON object, free of lone surrogates.

    Strings go from the line into records and into the parse state, both
    stored as UTF-8, so a lone surrogate is replaced here, once.
    """
    obj = load_json_line(line)
    if not isinstance(obj, dict):
        raise ParseError("line is not a JSON object")
    return _scrub(obj) if _SURROGATE_ESCAPE.search(line) else obj


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
            if not root.is_dir() or key in seen:
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
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def _files(path: Path, suffix: str) -> list[Path]:
    """Return the regular files of path ending in suffix, sorted."""
    try:
        return sorted(p for p in path.iterdir() if p.name.endswith(suffix) and p.is_file())
    except OSError:
        return []


###############################################################################
# Adapter base ################################################################
###############################################################################


class Adapter:
    """Base of every adapter; subclasses set ``name`` and override methods."""

    name = ""
    display = ""
    kind = "log"

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
    display = "Claude Code"

    def roots(self, env: Mapping[str, str], home: Path) -> list[Path]:
        """Return ``CLAUDE_CONFIG_DIR`` (comma list), else both defaults."""
        return env_dirs(env, "CLAUDE_CONFIG_DIR", [home / ".claude", home / ".config" / "claude"])

    def discover(self, env: Mapping[str, str], home: Path) -> Iterator[SourceFile]:
        """Yield main, flat sub-agent and nested sub-agent transcripts."""
        found: dict[str, SourceFile] = {}
        for prefix, root in _labelled(self.roots(env, home), home):
            projects = root / "projects"
            if not projects.is_dir():
                continue
            for project in _subdirs(projects):
                for path in _files(project, ".jsonl"):
                    rel = _rel(prefix, root, path)
                    # A main transcript is named after its session; the id
                    # names title lines that come before any sessionId.
                    meta = {} if path.name.startswith("agent-") else {"session": path.stem}
                    found[rel] = SourceFile(str(path), rel, meta=meta)
                for session in _subdirs(project):
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
            out.append(SessionInfo(session, title=title[0], title_rank=title[1]))
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
    if not top.is_dir():
        return
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(".jsonl") or name == "journal.jsonl":
                continue
            path = Path(folder) / name
            if not path.is_file():
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
    else ``<thread>:<line number>`` in the decompressed stream; ``#k`` is
    added when a line gives several events.  The thread comes from the first
    ``session_meta`` (later ones are history copied by a fork), so the same
    rollout plain, compressed or archived gives the same ids.  The prompt is
    indexed once, from the ``user_message`` event; the user ``message`` item
    that repeats it is skipped (legacy files, which have no events, index the
    item instead).
    """

    name = "codex"
    display = "Codex"

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
        ids = _codex_ids(obj, ctx)
        common = dict(ts=ts if ts is not None else st.get("ts", ctx.mtime_ms), ts_approx=ts is None)
        payload = obj.get("payload")
        if kind == "session_meta":
            return self._session_meta(_dict(payload), st)
        if kind == "turn_context":
            return self._turn_context(_dict(payload), st)
        if kind == "response_item":
            return self._item(_dict(payload), st, ids, common)
        if kind == "event_msg":
            return self._event(_dict(payload), st, ids, common)
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
        if not st.get("legacy"):
            return []  # the user_message event carries the same prompt
        return self._prompt(st, next(ids), text, common)

    def _event(self, p: dict, st: dict, ids: Iterator[str], common: dict) -> list:
        """Return the events of one event message."""
        etype = p.get("type")
        if etype == "user_message":
            text = _str(p.get("message")) or ""
            images = len(_list(p.get("images"))) + len(_list(p.get("local_images")))
            text = "\n".join([text] * bool(text) + ["[image]"] * images)
            return self._prompt(st, next(ids), text, common) if text else []
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


def _codex_is_item(kind: str) -> bool:
    """True for a response item type this adapter knows."""
    return (kind in ("message", "agent_message") or kind in _CODEX_CALLS
            or kind in _CODEX_OUTPUTS or kind in _CODEX_QUIET_ITEMS)


def _codex_ids(obj: dict, ctx: Context) -> Iterator[str]:
    """Return the event ids of a line: its base id, then base#1, base#2, …

    The ordinal names the line while it keeps rising through the file; a
    repeated or missing one falls back to the line number, which is as
    stable (rollouts are append-only) and keeps ids unique within a thread.
    """
    st = ctx.state
    ordinal = _int(obj.get("ordinal"))
    if ordinal is not None and st.get("ordinal", -1) < ordinal < 2**53:
        st["ordinal"] = ordinal
        base = f"{st['thread']}:o{ordinal}"
    else:
        base = f"{st['thread']}:{ctx.lineno}"
    return itertools.chain([base], (f"{base}#{k}" for k in itertools.count(1)))


def _codex_rollouts(folder: Path) -> list[Path]:
    """Return every rollout JSONL (plain or .zst) under folder, any depth."""
    if not folder.is_dir():
        return []
    found = []
    for dirpath, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            if name.startswith("rollout-") and name.endswith((".jsonl", ".jsonl.zst")):
                path = Path(dirpath) / name
                if path.is_file():
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
GROK_OPEN_TOOLS_MAX = 32


def _grok_group_cwd(group: Path) -> str | None:
    """Return a session group's cwd: its ``.cwd`` file, else its decoded name."""
    try:
        marker = group / ".cwd"
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
            "parent": parent or _str(summary.get("parent_session_id"))}
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

    chat_history.jsonl is rewritten on compaction, so its ids never use the
    line number: ``<session>:<turn>.<k>:<hash>``, where the turn is the
    prompt index, k counts records since that prompt and the hash covers
    the record's text, so records a rewrite keeps get the same ids.
    """

    name = "grok"
    display = "Grok Build"

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
                    if path.is_file():
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
        facts = {k: m.get(k) for k in keys}
        sig = short_hash(json.dumps(facts, sort_keys=True, default=str), n=8)
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
        # A line without a time takes the last one seen, marked approximate.
        here = {"line": ctx.lineno, "off": ctx.offset, "session": session, "approx": ts is None,
                "ts": ts if ts is not None else st.get("ts", ctx.mtime_ms)}
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
        # No record has a time: the file's mtime stands in, marked approximate.
        here = {"line": None, "off": None, "ts": ctx.mtime_ms, "approx": True, "session": session}
        synthetic = obj.get("synthetic_reason") is not None
        if kind == "user" and not synthetic:
            index = _int(obj.get("prompt_index"))
            st["prompts"] = st.get("prompts", 0) + 1
            st["turn"] = f"p{index}" if index is not None else f"u{st['prompts']}"
            st["k"] = 0
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
        base = f"{session}:{st.get('turn', 's')}.{st['k']}:{digest}"
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
# Registry ####################################################################
###############################################################################

ADAPTERS = {a.name: a for a in (ClaudeCode(), Codex(), Grok())}
