"""Secrets in the archive: masked in events, the index and every read-out; the mirror keeps them.

The recall corpus plants fake keys of every family of the pattern table into
the synthetic corpora of all five agents (messages, tool calls, tool
results), syncs them, and checks that no key is left anywhere a reader can
reach; the false-hit figure scans every line of the real fixtures.
"""

from __future__ import annotations

import itertools
import os
import json
import random
import shutil
import sqlite3
import string
import time
from pathlib import Path

import pytest

import corpus
import adapters
import origin
from conftest import FIXTURES
from zcode_made_here import build_zcode_db

ALNUM = string.ascii_letters + string.digits


def _rand(rng: random.Random, n: int, chars: str = ALNUM) -> str:
    """Random characters with at least one digit and one letter, as real keys have."""
    while True:
        s = "".join(rng.choices(chars, k=n))
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def fake_secret(family: str, rng: random.Random) -> tuple[str, list[str]]:
    """Return (text holding one fake secret of family, the secret values in it)."""
    up = string.ascii_uppercase + string.digits
    if family == "aws":
        key, sec = "AKIA" + _rand(rng, 16, up), _rand(rng, 40, ALNUM + "/+")
        return f"aws_access_key_id={key} aws_secret_access_key={sec}", [key, sec]
    if family == "aws-pair":
        key, sec = "ASIA" + _rand(rng, 16, up), _rand(rng, 40, ALNUM + "/+")
        return f"keys {key} {sec}", [key, sec]
    if family == "private-key":
        body = "\n".join(_rand(rng, 64, ALNUM + "+/") for _ in range(4))
        return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----", body.split("\n")
    if family == "jwt":
        import base64

        def seg(obj):
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
        tok = f"{seg({'alg': 'HS256', 'typ': 'JWT'})}.{seg({'sub': _rand(rng, 10), 'n': rng.random()})}." \
              + _rand(rng, 43, ALNUM + "-_")
        return f"Authorization: Bearer {tok}", [tok]
    if family in ("password", "credential-env", "credential-json", "credential-yaml"):
        value = _rand(rng, 20, ALNUM + "#$%!@^*")
        shape = {"password": f"DB_PASSWORD={value}", "credential-env": f"export STRIPE_API_KEY={value}",
                 "credential-json": json.dumps({"client_secret": value}),
                 "credential-yaml": f"auth:\n  token: {value}\n"}[family]
        return shape, [value]
    prefix, body = {
        "github-ghp": ("ghp_", lambda: _rand(rng, 36)), "github-gho": ("gho_", lambda: _rand(rng, 36)),
        "github-ghu": ("ghu_", lambda: _rand(rng, 36)), "github-ghs": ("ghs_", lambda: _rand(rng, 36)),
        "github-ghr": ("ghr_", lambda: _rand(rng, 36)),
        "github-pat": ("github_pat_", lambda: _rand(rng, 22) + "_" + _rand(rng, 59)),
        "gitlab": ("glpat-", lambda: _rand(rng, 20)), "openai": ("sk-", lambda: _rand(rng, 48)),
        "openai-proj": ("sk-proj-", lambda: _rand(rng, 120, ALNUM + "_-")),
        "anthropic": ("sk-ant-api03-", lambda: _rand(rng, 93, ALNUM + "_-")),
        "xai": ("xai-", lambda: _rand(rng, 80)), "google": ("AIza", lambda: _rand(rng, 35, ALNUM + "_-")),
        "slack": ("xoxb-", lambda: f"{rng.randrange(10**11, 10**12)}-{rng.randrange(10**12, 10**13)}-"
                                   + _rand(rng, 24)),
        "stripe": ("sk_live_", lambda: _rand(rng, 24)), "stripe-restricted": ("rk_live_", lambda: _rand(rng, 24)),
        "npm": ("npm_", lambda: _rand(rng, 36)), "pypi": ("pypi-AgEIcHlwaS5vcmc", lambda: _rand(rng, 70)),
        "huggingface": ("hf_", lambda: _rand(rng, 34)), "origin": ("ogn_", lambda: _rand(rng, 32, ALNUM + "_-")),
    }[family]
    tok = prefix + body()
    return f"the key is {tok} here", [tok]


FAMILIES = ("aws", "aws-pair", "private-key", "jwt", "password", "credential-env", "credential-json",
            "credential-yaml", "github-ghp", "github-gho", "github-ghu", "github-ghs", "github-ghr", "github-pat",
            "gitlab", "openai", "openai-proj", "anthropic", "xai", "google", "slack", "stripe",
            "stripe-restricted", "npm", "pypi", "huggingface", "origin")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_of_the_table_is_masked_with_its_kind_and_last_four(family):
    rng = random.Random(family)
    for _ in range(20):
        text, values = fake_secret(family, rng)
        masked = origin.mask_secrets(text)
        assert not any(v in masked for v in values), (family, masked)
        assert "[secret:" in masked and origin.mask_secrets(masked) == masked
        assert origin.secret_kinds(text)
    assert origin.mask_secrets("ghp_" + "a1" * 18) == "[secret:github…a1a1]"


BENIGN = [
    '{"input_tokens": 12, "cache_read_input_tokens": 90210, "output_tokens": 1500, "max_tokens": 4096}',
    "password: <your password here>", "api_key = os.environ['OPENAI_API_KEY']", "token = process.env.GITHUB_TOKEN",
    'export OPENAI_API_KEY="sk-..."', "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxx", "secret: ${{ secrets.NPM_TOKEN }}",
    "the tokenizer: cl100k_base", "commit 3f786850e387550fdab836ed7e6dc881de23001b", "task-runner-service-v2",
    "uuid 4f1c2a9e-8b7d-4c3e-9f2a-1b2c3d4e5f60", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "risk-assessment-framework-guide-2024", "the password must have at least 12 characters", "pwd: /home/dev/src",
    "token_type: Bearer", "csrf_token: {{ csrf_token() }}", '"secret": "[secret:github…abcd]"',
    "ask-questions-first-then-code-2026", "akia is not a key; AKIA alone neither", "hf_hub_download(repo_id)",
    "npm_config_cache=/tmp/x", "xoxb-token-goes-here", "DB_PASSWORD=$DATABASE_PASSWORD_FROM_VAULT",
    "export API_TOKEN=$XDG_RUNTIME_DIR/api-token-file", "client_secret: $CLIENT_SECRET_VALUE:-unset", "sk_test_abcdefghijklmnopqrstu is a test key",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
]


def test_a_named_credential_in_json_escaped_at_any_depth_is_masked():
    value = "0D2iFOX97iW!0bUM@$o2"
    text = json.dumps({"client_secret": value})
    for _ in range(4):  # JSON in a tool's arguments, in a database row, in a mirror line
        assert value not in origin.mask_secrets(text), text
        text = json.dumps(text)


def test_a_password_that_starts_with_a_dollar_is_masked_and_a_variable_is_not():
    for value in ("$mWxYaO4kVIMEyq4ld@h", "$Wsuxa17N!fxwiip5C3l"):
        for line in (f"auth:\n  token: {value}\n", f"export STRIPE_API_KEY={value}"):
            assert value not in origin.mask_secrets(line), line
    assert origin.mask_secrets("export STRIPE_API_KEY=$STRIPE_KEY_FROM_VAULT") == \
        "export STRIPE_API_KEY=$STRIPE_KEY_FROM_VAULT"


def test_benign_lines_that_look_close_are_left_alone():
    assert [line for line in BENIGN if origin.find_secrets(line)] == []


def _fixture_lines() -> list[str]:
    """Every line of every real fixture: text files, and the text cells of the databases."""
    import io

    import zstandard
    lines: list[str] = []
    for p in sorted(FIXTURES.rglob("*")):
        if not p.is_file() or p.name == "SOURCES.md":
            continue
        data = p.read_bytes()
        if data.startswith(b"SQLite format 3"):
            conn = sqlite3.connect(f"file:{p}?immutable=1", uri=True)
            try:
                for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    for row in conn.execute(f'SELECT * FROM "{table}"'):
                        for v in row:
                            v = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                            if isinstance(v, str):
                                lines += v.splitlines()
            except sqlite3.DatabaseError:
                pass
            finally:
                conn.close()
            continue
        if data[:4] == b"\x28\xb5\x2f\xfd":
            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        lines += data.decode("utf-8", "replace").splitlines()
    return [line for line in lines if line.strip()]


def test_false_hits_on_the_real_fixtures_stay_under_ten_per_ten_thousand_lines(capsys):
    lines = _fixture_lines()
    hits = [(k, line[a:b]) for line in lines for a, b, k in origin.find_secrets(line)]
    with capsys.disabled():
        print(f"\nsecret scanner: {len(hits)} hits in {len(lines)} benign fixture lines "
              f"({len(hits) * 10000 / len(lines):.1f} per 10,000): {hits}")
    assert len(lines) > 1000
    assert len(hits) * 10000 <= 10 * len(lines)


def test_a_key_cut_short_by_a_length_limit_is_masked_too():
    cut = "output: " + "ghp_" + "Ab1" * 4 + "…"
    assert origin.mask_secrets(cut) == "output: [secret:github…]…"
    assert origin.mask_secrets('DB_PASSWORD="Xk9#mQ2…') == 'DB_PASSWORD="[secret:credential…]…'
    assert origin.mask_secrets("nothing secret here…") == "nothing secret here…"


###############################################################################
# The planted corpus: every family in every agent's shapes ####################
###############################################################################


class Planter:
    """Hands out texts that hold fake secrets, cycling through the families."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.values: list[str] = []
        self.start()

    def start(self) -> None:
        self.cycle = itertools.cycle(FAMILIES)

    def text(self) -> str:
        text, values = fake_secret(next(self.cycle), self.rng)
        self.values += values
        return text


@pytest.fixture
def planted(user_home, tmp_path, monkeypatch):
    """Write every agent's corpus with fake secrets in its texts; return the values planted."""
    planter = Planter(18)
    plain_text = corpus._text
    monkeypatch.setattr(corpus, "_text", lambda rng, n: plain_text(rng, min(n, 30)) + " " + planter.text())
    monkeypatch.setattr(corpus, "CODE", [f"curl -H 'x' {i} && echo" for i in range(5)])
    # Short tool output, so that the adapters' length limits cut nothing.
    monkeypatch.setattr(corpus, "_tool_output", lambda rng: corpus._text(rng, 20))
    env = {"HOME": str(user_home)}
    claude = corpus.write_claude_corpus(user_home / ".claude", files=3, turns=4, seed=1, outputs=(15,))
    planter.start()
    memory = claude[0].parent / "memory"
    memory.mkdir()
    for i in range(len(FAMILIES)):
        (memory / f"note_{i}.md").write_text(f"---\nname: note {i}\ntype: reference\n---\n{planter.text()}\n")
    planter.start()
    env["CODEX_HOME"] = str(tmp_path / "codex")
    corpus.write_codex_corpus(tmp_path / "codex", files=6, turns=4, seed=2)
    planter.start()
    env["GROK_HOME"] = str(tmp_path / "grok")
    corpus.write_grok_corpus(tmp_path / "grok", sessions=3, turns=4, seed=3)
    planter.start()
    user = tmp_path / "Cursor" / "User"
    env["ORIGIN_CURSOR_USER_DIR"] = str(user)
    corpus.write_cursor_db(user / "globalStorage" / "state.vscdb", composers=3, bubbles_per_composer=12, seed=4)
    planter.start()
    db = build_zcode_db(tmp_path / "zcode" / "cli" / "db" / "db.sqlite", origin.now_ms())
    env["ORIGIN_ZCODE_HOME"] = str(tmp_path / "zcode")
    _plant_in_zcode(db, planter)
    planter.start()
    _plant_in_opencode(tmp_path / "opencode", planter)
    env["ORIGIN_OPENCODE_HOME"] = str(tmp_path / "opencode")
    planter.start()
    _plant_in_gemini(tmp_path / "gemini", planter)
    env["ORIGIN_GEMINI_HOME"] = str(tmp_path / "gemini")
    planter.start()
    _plant_in_goose(tmp_path / "goose", planter)
    env["ORIGIN_GOOSE_HOME"] = str(tmp_path / "goose")
    made = (("COPILOT_HOME", "copilot", lambda p: corpus.write_copilot_corpus(p, sessions=3, turns=4)),
            ("ORIGIN_QWEN_HOME", "qwen", lambda p: corpus.write_qwen_corpus(p, sessions=3, turns=4)),
            ("PI_CODING_AGENT_DIR", "pi", lambda p: corpus.write_pi_corpus(p, sessions=3, turns=4)),
            ("ORIGIN_AIDER_ROOTS", "aider", lambda p: corpus.write_aider_corpus(p, repos=3, runs=2)))
    for var, folder, write in made:
        planter.start()
        env[var] = str(tmp_path / folder)
        write(tmp_path / folder)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return planter.values


def _plant_in_zcode(db: Path, planter: Planter) -> None:
    """Add a fake secret to every text, tool input and tool output of the made-here ZCode database."""
    conn = sqlite3.connect(db)

    def plant(obj):
        if isinstance(obj, dict):
            return {k: (v + " " + " ".join(planter.text() for _ in range(4))
                        if k in ("text", "output", "command") and isinstance(v, str)
                        else plant(v)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [plant(v) for v in obj]
        return obj
    for pid, data in conn.execute("SELECT id, data FROM part").fetchall():
        conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(plant(json.loads(data))), pid))
    conn.commit()
    conn.close()


def _planted(obj, planter: Planter, keys: tuple[str, ...]):
    """Return a JSON value with fake secrets added to every string under one of keys."""
    if isinstance(obj, dict):
        return {k: (v + " " + " ".join(planter.text() for _ in range(4)) if k in keys and isinstance(v, str)
                    else _planted(v, planter, keys)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_planted(v, planter, keys) for v in obj]
    return obj


def _plant_in_opencode(root: Path, planter: Planter) -> None:
    """Copy the real OpenCode database and add fake secrets to its texts, tool inputs and outputs."""
    root.mkdir(parents=True)
    shutil.copy(FIXTURES / "opencode" / "lantern-sqlite" / "opencode.db", root / "opencode.db")
    conn = sqlite3.connect(root / "opencode.db")
    for pid, data in conn.execute("SELECT id, data FROM part").fetchall():
        planted = _planted(json.loads(data), planter, ("text", "output", "content"))
        conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(planted), pid))
    conn.commit()
    conn.close()


def _plant_in_gemini(root: Path, planter: Planter) -> None:
    """Lay Gemini CLI's documents out with fake secrets in messages, tool arguments and results."""
    chats = root / "tmp" / "secrets" / "chats"
    chats.mkdir(parents=True)
    for f in sorted((FIXTURES / "gemini" / "agentsview-json").glob("tool_calls*.json")):
        doc = json.loads(f.read_text())
        doc["messages"] = [{**m, "content": m["content"] + " " + " ".join(planter.text() for _ in range(4)),
                            "toolCalls": [{**c, "args": {**c["args"], "command": planter.text()}}
                                          for c in m.get("toolCalls", [])]} for m in doc["messages"]]
        doc = _planted(doc, planter, ("output",))
        path = chats / f"session-2024-01-01T10-00-{f.stem}.json"
        path.write_text(json.dumps(doc))
        os.utime(path, (time.time() - 86400,) * 2)


def _plant_in_goose(root: Path, planter: Planter) -> None:
    """Copy the real Goose database and add fake secrets to its texts, tool arguments and results."""
    (root / "sessions").mkdir(parents=True)
    db = root / "sessions" / "sessions.db"
    shutil.copy(FIXTURES / "goose" / "lantern" / "sessions.db", db)
    conn = sqlite3.connect(db)
    for rid, data in conn.execute("SELECT id, content_json FROM messages").fetchall():
        parts = _planted(json.loads(data), planter, ("text", "error"))
        for p in parts:
            value = p.get("toolCall", {}).get("value")
            if isinstance(value, dict):
                value["arguments"] = {**(value.get("arguments") or {}), "command": planter.text()}
        conn.execute("UPDATE messages SET content_json = ? WHERE id = ?", (json.dumps(parts), rid))
    conn.commit()
    conn.close()


def _exposed(values: list[str], text: str) -> list[str]:
    """Return the values (or their first 12 characters) found in text."""
    return [v for v in values if v in text or v[:12] in text]


def test_recall_is_complete_for_every_family_in_every_agents_shapes(planted, origin_home, cli, capsys):
    with origin.open_store(origin_home) as s:
        report = origin.sync(s)
        assert report.problems == []
        mirrors = {src: b"".join((origin_home / m).read_bytes() for (m,) in s.conn.execute(
            "SELECT mirror FROM raw_file WHERE source = ?", (src,))).decode("utf-8", "replace")
            for src in adapters.ADAPTERS}
        texts = s.conn.execute("SELECT source, kind, text FROM event").fetchall()
        titles = [r[0] or "" for r in s.conn.execute("SELECT title FROM session")]
        masked_kinds = {(r[0], r[1]) for r in texts if "[secret:" in r[2]}
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # The mirrors keep every byte (Invariant 3): each agent holds keys of every family.
    kinds = {"message", "tool_call", "tool_result"}
    for src in adapters.ADAPTERS:
        raw = mirrors[src]
        held = [v for v in planted if v in raw or json.dumps(v)[1:-1] in raw]
        assert len(held) >= len(FAMILIES), src
        want = {"message"} if src == "claude-memory" else kinds  # a memory note is one message
        want = want - {"tool_call"} if src == "aider" else want  # Aider logs what tools printed, not their calls
        assert {k for src2, k in masked_kinds if src2 == src} >= want, src
    found = [v for v in planted if any(v in m or json.dumps(v)[1:-1] in m for m in mirrors.values())]
    assert len(found) >= len(FAMILIES) * 6
    everything = "\n".join(r[2] for r in texts) + "\n".join(titles)
    exposed = _exposed(found, everything)
    recall = 1 - len(exposed) / len(found)
    with capsys.disabled():
        print(f"\nsecret scanner: recall {recall:.2%} over {len(found)} planted values in "
              f"{len(adapters.ADAPTERS)} sources, {len(texts)} events")
    assert exposed == []
    # Nothing reaches the index either: the index files hold no key, and searching finds nothing.
    stored = b"".join(p.read_bytes() for p in (origin_home / origin.INDEX_DIR).glob("*.db*"))
    stored += (origin_home / origin.DB_NAME).read_bytes()
    assert [v for v in found if v.encode() in stored] == []
    for v in found[:: max(1, len(found) // 40)]:
        code, res = cli("search", v, "--all", "--json")
        assert code == 0 and res["events"] == [], v


def test_no_read_out_shows_a_planted_key_except_show_reveal(planted, origin_home, cli):
    with origin.open_store(origin_home) as s:
        origin.sync(s)
        ids = [r[0] for r in s.conn.execute("SELECT id FROM event WHERE text LIKE '%[secret:%' ORDER BY seq")]
        sessions = [r[0] for r in s.conn.execute("SELECT id FROM session WHERE events > 0")]
    sample = ids[:: max(1, len(ids) // 30)]
    service = origin.McpService(origin_home, lambda *a, **k: None)
    outputs = []
    try:
        for eid in sample:
            outputs.append(service.call("get", {"ids": [eid]}, "t")[0])
            outputs.append(service.call("sources", {"id": eid, "max_chars": 20000}, "t")[0])
        for sid in sessions:
            outputs.append(service.call("timeline", {"session": sid, "include_tools": True, "limit": 200}, "t")[0])
        outputs.append(service.call("search", {"query": "secret", "include_tools": True, "limit": 200}, "t")[0])
    finally:
        service.close()
    for eid in sample:
        outputs.append(json.dumps(cli("show", eid, "--json")[1]))
        outputs.append(cli("show", eid)[1])
    for sid in sessions:
        outputs.append(json.dumps(cli("timeline", "--session", sid, "--all", "--json")[1]))
    outputs.append(json.dumps(cli("search", "secret", "--all", "--limit", "200", "--json")[1]))
    joined = "\n".join(outputs)
    assert "[secret:" in joined
    assert _exposed(planted, joined.replace("\\/", "/")) == []
    # The owner sees the original lines on the device.
    revealed = "\n".join(cli("show", eid, "--reveal")[1] for eid in sample)
    assert any(v in revealed or json.dumps(v)[1:-1] in revealed for v in planted)


def test_remember_and_correct_refuse_a_secret_in_the_text_or_the_quote(claude_root, store, cli):
    origin.sync(store)
    key = "ghp_" + "x9" * 18
    with pytest.raises(origin.UsageError, match=r"holds a secret \(github\)"):
        origin.remember(store, kind="memory", text=f"The CI token is {key}", sources=[{"quote": "Hello"}],
                        author="t")
    with pytest.raises(origin.UsageError, match=r"a quote holds a secret \(aws-access-key\)"):
        origin.precheck_entry(kind="memory", text="The deploy key", author="t",
                              sources=[{"quote": "AKIA" + "Z" * 15 + "7"}])
    code, _ = cli("remember", f"token {key}", "--kind", "memory", "--quote", "hello")
    assert code == 2 and "github" in cli.err
    assert store.conn.execute("SELECT count(*) FROM entry").fetchone()[0] == 0
    service = origin.McpService(store.home, lambda *a, **k: None)
    try:
        text, is_error = service.call("remember", {"kind": "memory", "text": f"use {key}",
                                                    "sources": [{"quote": "hello"}]}, "t")
    finally:
        service.close()
    assert is_error and "holds a secret (github)" in text


def test_a_store_written_before_masking_gets_its_index_rebuilt_masked(user_home, origin_home, monkeypatch, cli):
    token = "ghp_" + "Lg5" * 12
    log = user_home / ".claude" / "projects" / "-w" / "s.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s", "cwd": "/w",
                               "timestamp": "2026-03-01T10:00:00Z",
                               "message": {"role": "user", "content": f"deploy with {token} please"}}) + "\n")
    # An older version: no masking, so the text and the index hold the token.
    with monkeypatch.context() as m:
        m.setattr(origin, "mask_secrets", lambda text: text)
        with origin.open_store(origin_home) as s:
            origin.sync(s)
            assert token in s.conn.execute("SELECT text FROM event").fetchone()[0]
            assert [h["id"] for h in origin.search_events(s, token)] == ["claude-code:u1"]
            with origin.transaction(s.conn):
                s.conn.execute("DELETE FROM setting WHERE key = ?", (origin.MASKED_FROM,))
        for part in origin.EVENT_INDEXES:
            c = origin._open_index(origin_home, part)
            c.execute("DELETE FROM mark WHERE name = 'masked'")
            c.close()
    # This version: the event keeps its text (Invariant 3), the index is taken in again masked.
    with origin.open_store(origin_home) as s:
        assert s.conn.execute("SELECT value FROM setting WHERE key = ?", (origin.MASKED_FROM,)).fetchone()[0] == "2"
        origin.sync(s)
        assert token in s.conn.execute("SELECT text FROM event").fetchone()[0]
        assert origin.search_events(s, token) == []
        assert [h["id"] for h in origin.search_events(s, "deploy with")] == ["claude-code:u1"]
    code, out = cli("show", "claude-code:u1")
    assert token not in out and "[secret:github…" in out

