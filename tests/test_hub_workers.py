"""The hub's tool workers: agents' tool calls answered in processes of their own.

A real `origin serve` answers /mcp tool calls in worker processes
(`ToolWorkers`): the answers are those of the hub's own threads, no more
workers run than it was given, a worker that dies is replaced, a hub that
cannot start one runs its tools itself, and stopping the hub stops them.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import threading
import time

import psutil
import pytest

import origin
from conftest import run_at_once
from helpers import DECISION, Serve
from reliability_tools import origin_argv, origin_env

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def workers_of(hub: Serve) -> list[psutil.Process]:
    """The hub's tool worker processes, as the system lists them."""
    return [c for c in psutil.Process(hub.proc.pid).children()
            if "origin.tool_worker" in " ".join(c.cmdline())]


def agent(hub: Serve, token: str) -> origin.HubTools:
    """An agent's client of the hub's /mcp with token."""
    return origin.HubTools(origin.HubConfig(hub.url, token, "laptop"))


def until(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def calls(hub: Serve, token: str) -> list[tuple[str, dict]]:
    """Read calls over the fixture store, with the ids they need."""
    tools = agent(hub, token)
    try:
        found = json.loads(tools.call("search", {"query": "type-check"})[0])
    finally:
        tools.close()
    event, entry = found["events"][0]["id"], found["entries"][0]["id"]
    return [("search", {"query": "type-check"}), ("search", {"scope": "entries"}),
            ("timeline", {"since": "2020-01-01"}),
            ("get", {"ids": [event, entry]}), ("sources", {"id": entry}), ("get", {"ids": ["ent_nosuch"]}),
            ("search", {"query": "type-check", "limit": 0})]


def test_invariant_5_tool_workers_answer_exactly_as_the_hubs_own_threads(hub_home):
    """The same calls on one store: a hub with workers and one with --workers 0 answer alike."""
    with_workers, in_threads = Serve(hub_home), Serve(hub_home, "--workers", "0")
    try:
        answers = []
        for hub in (with_workers, in_threads):
            token = hub.token(f"t{hub.port}")
            tools = agent(hub, token)
            try:
                answers.append([tools.call(name, args) for name, args in calls(hub, token)])
            finally:
                tools.close()
        assert answers[0] == answers[1]
        assert [is_error for _text, is_error in answers[0]] == [False] * 5 + [True, True]
        assert DECISION in answers[0][3][0] and '"sessions":[{' in answers[0][2][0]
        assert "ORIGIN_HOME" not in answers[0][5][0] and str(hub_home) not in answers[0][5][0]
        assert len(workers_of(with_workers)) >= 1
        assert workers_of(in_threads) == []
    finally:
        with_workers.stop()
        in_threads.stop()


def test_the_hub_runs_no_more_workers_than_it_was_given_and_stops_them_with_itself(hub_home):
    hub = Serve(hub_home, "--workers", "2")
    try:
        token = hub.token("laptop")
        todo = calls(hub, token)
        answers, errors = [], []

        def one_agent():
            tools = agent(hub, token)
            try:
                for name, args in todo * 3:
                    answers.append(tools.call(name, args))
            except Exception as e:  # counted, never fatal
                errors.append(e)
            finally:
                tools.close()

        run_at_once(one_agent, 8, 120)
        assert errors == [] and len(answers) == 8 * 3 * len(todo)
        started = workers_of(hub)
        assert 1 <= len(started) <= 2
    finally:
        assert hub.stop() == 0
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert alive == []


def test_a_worker_that_died_between_calls_is_replaced_and_the_log_says_so(hub_home):
    hub = Serve(hub_home, "--workers", "1")
    try:
        tools = agent(hub, hub.token("laptop"))
        assert tools.call("timeline", {})[1] is False
        [worker] = workers_of(hub)
        worker.send_signal(signal.SIGKILL)
        until(lambda: not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE, "the worker to die")
        text, is_error = tools.call("search", {"query": "type-check"})
        assert not is_error and DECISION in text
        [again] = workers_of(hub)
        assert again.pid != worker.pid
        until(lambda: any("a tool worker had stopped" in line for line in hub.log), "the log line")
        tools.close()
    finally:
        hub.stop()


def test_a_worker_that_dies_mid_call_answers_a_tool_error_and_the_next_call_works(hub_home, monkeypatch):
    notes: list[str] = []
    workers = origin.ToolWorkers(hub_home, 1, notes.append)
    real = origin.ToolWorker.call

    def dies_first(self, *args):
        self.proc.kill()  # the worker is gone just as the call is sent
        self.proc.wait()
        return real(self, *args)

    try:
        assert workers.call("timeline", {}, "agent@laptop", False)[1] is False
        monkeypatch.setattr(origin.ToolWorker, "call", dies_first)
        text, is_error = workers.call("remember", {"kind": "memory", "text": "x", "sources": []}, "agent@laptop",
                                      False)
        assert is_error and "stopped before it answered" in text and "whether it took effect" in text
        assert any("the tool worker running remember stopped" in n for n in notes)
        monkeypatch.setattr(origin.ToolWorker, "call", real)
        text, is_error = workers.call("search", {"query": "type-check"}, "agent@laptop", False)
        assert not is_error and DECISION in text
    finally:
        workers.close()


def test_a_worker_of_another_origin_is_refused(hub_home, monkeypatch):
    """The worker must run this very module: a version that differs stops it at its first line."""
    monkeypatch.setattr(origin, "__version__", "0.0.0-elsewhere")
    with pytest.raises(origin.WorkerGone, match="was expected"):
        origin.ToolWorker(hub_home)


def test_a_hub_that_cannot_start_a_worker_runs_its_tools_itself(hub_home, monkeypatch):
    log = io.StringIO()
    hub = origin.Hub(hub_home, log=log, workers=2)
    server = origin.make_hub_server(hub, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    monkeypatch.setattr(origin.sys, "executable", str(hub_home / "no-such-python"))
    try:
        cfg = origin.HubConfig(f"http://127.0.0.1:{server.server_address[1]}",
                               origin.create_token(hub.default_store(), "laptop"), "laptop")
        tools = origin.HubTools(cfg)
        for _ in range(3):
            text, is_error = tools.call("search", {"query": "type-check"})
            assert not is_error and DECISION in text
        tools.close()
        notes = [line for line in log.getvalue().splitlines() if "could not start" in line]
        assert len(notes) == 1 and "run in the hub's own threads" in notes[0]  # tried once, not per call
    finally:
        server.shutdown()
        server.server_close()
        hub.close()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_serve_refuses_a_worker_count_it_cannot_use(tmp_path, how):
    env = origin_env(tmp_path, tmp_path / "hub", {"ORIGIN_HUB_WORKERS": "-1"} if how == "env" else None)
    argv = origin_argv("serve", *(["--workers", "-1"] if how == "flag" else []))
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "workers is from 0 to 64" in p.stderr
    assert ("ORIGIN_HUB_WORKERS" in p.stderr) == (how == "env")


def test_the_environment_sets_the_worker_count_and_the_flag_wins(hub_home, monkeypatch):
    monkeypatch.setenv("ORIGIN_HUB_WORKERS", "0")
    in_threads, with_one = Serve(hub_home), Serve(hub_home, "--workers", "1")
    try:
        for hub in (in_threads, with_one):
            tools = agent(hub, hub.token(f"t{hub.port}"))
            assert tools.call("timeline", {})[1] is False
            tools.close()
        assert workers_of(in_threads) == [] and len(workers_of(with_one)) == 1
    finally:
        in_threads.stop()
        with_one.stop()


def test_a_killed_hub_leaves_no_worker_behind(hub_home):
    """A worker ends when its hub's end of the pipe closes, however the hub ended."""
    hub = Serve(hub_home, "--workers", "1")
    tools = agent(hub, hub.token("laptop"))
    assert tools.call("timeline", {})[1] is False
    tools.close()
    started = workers_of(hub)
    hub.proc.send_signal(signal.SIGKILL)
    hub.proc.wait(30)
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert started and alive == []


def test_invariant_2_a_forget_beside_the_hub_is_gone_from_its_workers_next_answer(hub_home):
    """A worker that already answered reads what was committed since: nothing it keeps goes stale."""
    hub = Serve(hub_home, "--workers", "1")
    try:
        tools = agent(hub, hub.token("laptop"))
        found = json.loads(tools.call("search", {"query": "type-check"})[0])
        entry = found["entries"][0]["id"]
        assert found["entries"][0]["snippet"] and len(workers_of(hub)) == 1
        with origin.open_store(hub_home) as store:  # the owner forgets it with the CLI on the hub's machine
            origin.forget(store, entry, reason="test")
        after = json.loads(tools.call("search", {"query": "type-check"})[0])
        assert entry not in {e["id"] for e in after.get("entries", [])}
        text, is_error = tools.call("get", {"ids": [entry]})
        assert is_error and "forgotten" in text
        assert DECISION not in tools.call("search", {"query": "removed from CLAUDE.md"})[0]
        assert len(workers_of(hub)) == 1  # the same worker answered all of it
        tools.close()
    finally:
        hub.stop()
