"""Shipping checks fast enough for every CI run: `origin healthcheck`, and the
Containerfile and build context against what the wheel ships."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
import tomllib

import pytest

import origin
from conftest import ROOT

CONTAINERFILE = (ROOT / "Containerfile").read_text()


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers GET /healthz with whatever the test put in ``reply``."""

    reply: tuple[int, bytes] = (200, b'{"ok": true, "version": "9.9"}')

    def do_GET(self):
        code, body = self.reply if self.path == "/healthz" else (404, b"{}")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
    _FakeHub.reply = (200, b'{"ok": true, "version": "9.9"}')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthcheck_exits_0_for_a_hub_that_answers(fake_hub, cli):
    url = f"http://127.0.0.1:{fake_hub.server_port}/healthz"
    code, out = cli("healthcheck", "--url", url, "--json")
    assert code == 0, cli.err
    assert out == {"url": url, "ok": True, "version": "9.9"}


def test_healthcheck_reads_its_url_from_the_environment(fake_hub, cli, monkeypatch):
    monkeypatch.setenv("ORIGIN_HEALTHCHECK_URL", f"http://127.0.0.1:{fake_hub.server_port}/healthz")
    code, out = cli("healthcheck")
    assert code == 0 and out.startswith("ok: ") and "origin 9.9" in out


@pytest.mark.parametrize("reply, says", [
    ((500, b'{"error": "boom"}'), "answered 500"),
    ((200, b"<html>a proxy page</html>"), "not as an Origin hub does"),
    ((200, b'{"ok": false}'), "not as an Origin hub does"),
])
def test_healthcheck_exits_1_with_the_reason_when_the_hub_is_unwell(fake_hub, cli, reply, says):
    _FakeHub.reply = reply
    code, _ = cli("healthcheck", "--url", f"http://127.0.0.1:{fake_hub.server_port}/healthz")
    assert code == 1 and says in cli.err


def test_healthcheck_exits_1_when_nothing_listens(cli):
    code, _ = cli("healthcheck", "--url", f"http://127.0.0.1:{_free_port()}/healthz", "--timeout", "2")
    assert code == 1 and "does not answer" in cli.err and "origin serve" in cli.err


def test_healthcheck_refuses_a_url_that_is_not_http(cli):
    code, _ = cli("healthcheck", "--url", "file:///etc/passwd")
    assert code == origin.UsageError.exit_code and "not an http(s) URL" in cli.err


def test_the_image_and_its_build_context_carry_every_file_of_the_wheel():
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    copied = set()
    for line in re.findall(r"^COPY (?!--from)(.+)$", CONTAINERFILE, re.M):
        copied |= set(line.split()[:-1])
    assert set(wheel["only-include"]) | {"pyproject.toml", "README.md"} == copied
    allowed = {ln[1:] for ln in (ROOT / ".containerignore").read_text().splitlines() if ln.startswith("!")}
    assert allowed == copied
    assert "*" in (ROOT / ".containerignore").read_text().splitlines()


def test_the_containerfile_keeps_the_shape_a_hub_needs():
    stages = re.findall(r"^FROM \$\{BASE\}", CONTAINERFILE, re.M)
    assert len(stages) == 2, "build and runtime stages, both on the BASE build argument"
    assert re.search(r"^ARG BASE=docker\.io/library/python:3\.\d+-slim", CONTAINERFILE, re.M)
    runtime = CONTAINERFILE.split("\nFROM ${BASE}\n")[1]
    user = re.search(r"^USER (\S+)", runtime, re.M).group(1)
    assert user not in ("root", "0")
    assert re.search(r"^ENV .*ORIGIN_HOME=/data", runtime, re.M | re.S) and "VOLUME /data" in runtime
    assert "EXPOSE 7077" in runtime
    health = re.search(r"^HEALTHCHECK .*CMD (\[.+\])$", runtime, re.M)
    assert json.loads(health.group(1)) == ["origin", "healthcheck"]
    instructions = "\n".join(ln for ln in runtime.splitlines() if not ln.lstrip().startswith("#"))
    assert "curl" not in instructions and "wget" not in instructions
    assert json.loads(re.search(r"^ENTRYPOINT (.+)$", runtime, re.M).group(1)) == ["origin"]
    assert json.loads(re.search(r"^CMD (.+)$", runtime, re.M).group(1))[:3] == ["serve", "--listen", "0.0.0.0:7077"]
    assert origin.HEALTHCHECK_URL.endswith(":7077/healthz")
    for label in ("source", "version", "licenses"):
        assert f"org.opencontainers.image.{label}=" in runtime
