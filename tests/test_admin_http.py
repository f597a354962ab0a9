"""The owner's admin page over real HTTP: a real `origin serve --admin` on loopback.

Every serving, login, session, request and response rule of the admin page
is asserted here against a hub process holding real agent fixtures: host
and origin checks, CSRF, cookies, fixation, expiry, re-typed passwords,
rate limits, headers on every response class, tokens shown once, forget
with a previewed plan, and sticky forget through every page.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

import origin
from conftest import run_at_once
from helpers import Browser, Hub, PASSWORD, SECURITY, _hub_home, a_message, db
from reliability_tools import origin_argv, origin_env

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


def assert_secure(r, *, https: bool = False) -> None:
    for k, v in SECURITY.items():
        assert r.hdrs.get(k) == [v], (r.status, k, r.hdrs.get(k))
    assert ("strict-transport-security" in r.hdrs) == https


@pytest.fixture(scope="module")
def hub_home(tmp_path_factory) -> Path:
    return _hub_home(tmp_path_factory.mktemp("adminhub"))


@pytest.fixture(scope="module")
def hub(hub_home):
    h = Hub(hub_home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": PASSWORD}, track=False)
    yield h
    h.stop()


@pytest.fixture
def owner(hub) -> Browser:
    b = Browser(hub.port)
    assert b.login().status == 303
    return b


# --- serving -----------------------------------------------------------------


def test_admin_is_404_when_off(hub_home, tmp_path):
    h = Hub(hub_home, "--listen", "127.0.0.1:0")
    b = Browser(h.port)
    for path in ("/admin", "/admin/", "/admin/login"):
        assert b.get(path).status == 404
    assert b.get("/healthz").status == 200
    h.stop()


def test_refuses_to_start_on_a_public_address_without_https(tmp_path):
    env = {"ORIGIN_ADMIN_PASSWORD": PASSWORD}
    for args in (("--listen", "0.0.0.0:0", "--admin"),
                 ("--listen", "0.0.0.0:0", "--admin", "--public-url", "http://hub.example.org"),
                 ("--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:0"),
                 ("--listen", "127.0.0.1:0", "--admin", "--public-url", "ftp://hub.example.org"),
                 ("--listen", "0.0.0.0:0", "--admin", "--public-url", "https://example.org/origin")):
        p = subprocess.run(origin_argv("serve", *args), env=origin_env(tmp_path, tmp_path / "o", env),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0, args
        assert "public-url" in p.stderr or "https" in p.stderr, p.stderr
    # https, or http on a loopback host (a container port published on 127.0.0.1), is accepted.
    for url in ("https://hub.example.org", "http://127.0.0.1:8080"):
        h = Hub(tmp_path / "o", "--listen", "0.0.0.0:0", "--admin", "--public-url", url, env=env)
        assert h.proc.poll() is None and h.url
        h.stop()


def test_admin_listen_serves_the_page_on_its_own_listener_only(hub_home):
    h = Hub(hub_home, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
            env={"ORIGIN_ADMIN_PASSWORD": PASSWORD})
    admin_port = int(h.admin_url().rsplit(":", 1)[1].split("/")[0])
    assert admin_port != h.port
    assert Browser(h.port).get("/admin/login").status == 404
    b = Browser(admin_port)
    assert b.login().status == 303
    assert "Overview" in b.get("/admin/").text
    assert b.get("/v1/cursors?device=x").status == 404  # the admin listener serves only the page
    h.stop()


def test_without_a_public_url_only_loopback_host_names_are_answered(hub):
    for host in ("evil.example", "hub.example.org", "10.0.0.1", "127.0.0.1.nip.io"):
        r = Browser(hub.port, host=host).get("/admin/login")
        assert r.status == 421, host
        assert_secure(r)
    for host in ("127.0.0.1", "localhost"):
        assert Browser(hub.port, host=host).get("/admin/login").status == 200


def test_public_url_host_is_answered_and_cookie_is_host_prefixed(tmp_path):
    h = Hub(tmp_path / "o", "--listen", "127.0.0.1:0", "--admin", "--public-url", "https://hub.example.org",
            env={"ORIGIN_ADMIN_PASSWORD": PASSWORD})
    b = Browser(h.port, host="hub.example.org", host_header="hub.example.org")
    assert Browser(h.port, host="hub.example.org").get("/admin/login").status == 421  # another port
    page = b.get("/admin/login")
    assert page.status == 200
    assert_secure(page, https=True)
    assert page.hdrs["strict-transport-security"][0].startswith("max-age=")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
    # A browser on https sends Origin https://hub.example.org; http://… is another origin.
    assert b.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False).status == 403
    r = b.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False, origin_="https://hub.example.org")
    assert r.status == 303
    cookie = next(v for v in r.hdrs["set-cookie"] if v.startswith("__Host-origin-admin="))
    assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/;" in cookie + ";"
    assert "Domain" not in cookie
    h.stop()


# --- login and password --------------------------------------------------------


def test_generated_password_is_printed_once_and_logs_in(tmp_path):
    home = tmp_path / "o"
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin")
    line = next(x for x in h.log if "admin password" in x)
    password = line.rsplit(": ", 1)[1].strip()
    assert re.fullmatch(r"[A-Z2-7]{20}", password)
    assert Browser(h.port).login(password).status == 303
    h.stop()
    with db(home) as conn:
        stored = conn.execute("SELECT value FROM setting WHERE key = 'admin.password'").fetchone()[0]
        audit = [dict(r) for r in conn.execute("SELECT * FROM audit_log")]
    n, r, p, salt, digest = stored.split("$")[1:]
    assert stored.startswith("scrypt$") and (int(n), int(r), int(p)) == (1 << 15, 8, 3) and len(salt) == 32
    assert password not in stored
    assert any(a["actor"] == "hub" and a["action"] == "password_generated" for a in audit)
    assert password not in json.dumps(audit)
    h2 = Hub(home, "--listen", "127.0.0.1:0", "--admin")
    assert not any("admin password" in x for x in h2.log)  # shown only the first time
    assert Browser(h2.port).login(password).status == 303
    h2.stop()


@pytest.mark.parametrize("bad", ["short", "ogn_" + "x" * 20])
def test_a_weak_or_token_like_env_password_refuses_to_start(tmp_path, bad):
    p = subprocess.run(origin_argv("serve", "--listen", "127.0.0.1:0", "--admin"),
                       env=origin_env(tmp_path, tmp_path / "o", {"ORIGIN_ADMIN_PASSWORD": bad}),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "admin password" in p.stderr


def test_cli_password_change_ends_sessions_and_is_audited_as_cli(tmp_path):
    home = tmp_path / "o"
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin")
    password = next(x for x in h.log if "admin password" in x).rsplit(": ", 1)[1].strip()
    b = Browser(h.port)
    assert b.login(password).status == 303
    assert b.get("/admin/").status == 200
    assert h.cli("admin", "password", stdin="ogn_not allowed\n").returncode == 2
    p = h.cli("admin", "password", stdin="a brand new password\n")
    assert p.returncode == 0, p.stderr
    assert b.get("/admin/").status == 303  # the session ended
    assert Browser(h.port).login(password).status == 401
    assert Browser(h.port).login("a brand new password").status == 303
    h.stop()
    with db(home) as conn:
        rows = [dict(r) for r in conn.execute("SELECT actor, action, details FROM audit_log")]
    assert {"actor": "cli", "action": "password_set", "details": '{"sessions_ended":1}'} in rows
    assert "brand new" not in json.dumps(rows)


def test_changed_env_password_ends_sessions_at_start(tmp_path):
    home = tmp_path / "o"
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": PASSWORD})
    b = Browser(h.port)
    assert b.login().status == 303
    h.stop()
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": PASSWORD})
    b.port = h.port
    assert b.get("/admin/").status == 200  # same password: the session lives on
    h.stop()
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": "another password!"})
    b.port = h.port
    assert b.get("/admin/").status == 303
    assert Browser(h.port).login().status == 401
    h.stop()


# --- sessions -------------------------------------------------------------------


def test_login_cookie_flags_on_loopback_http(hub):
    b = Browser(hub.port)
    r = b.login()
    cookie = next(v for v in r.hdrs["set-cookie"] if v.startswith("origin-admin="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
    assert "Secure" not in cookie and "Domain" not in cookie
    sid = b.cookies["origin-admin"]
    assert len(sid) >= 40
    with db(hub.home) as conn:
        hashes = {r[0] for r in conn.execute("SELECT id_hash FROM admin_session")}
    assert sid not in hashes and origin._session_hash(sid) in hashes  # only the hash is stored


def test_fixation_a_preset_cookie_is_never_adopted(hub):
    b = Browser(hub.port)
    b.cookies["origin-admin"] = "attacker-chosen-session-id-0123456789abcdef"
    assert b.get("/admin/").status == 303
    assert b.login().status == 303
    assert b.cookies["origin-admin"] != "attacker-chosen-session-id-0123456789abcdef"
    mallory = Browser(hub.port)
    mallory.cookies["origin-admin"] = "attacker-chosen-session-id-0123456789abcdef"
    assert mallory.get("/admin/").status == 303
    # Two logins never share an id.
    other = Browser(hub.port)
    other.login()
    assert other.cookies["origin-admin"] != b.cookies["origin-admin"]


def test_idle_and_absolute_expiry(hub):
    for column, age_ms in (("last_seen", origin.ADMIN_IDLE_MS + 1000), ("created_at", origin.ADMIN_ABSOLUTE_MS + 1000)):
        b = Browser(hub.port)
        b.login()
        h = origin._session_hash(b.cookies["origin-admin"])
        assert b.get("/admin/").status == 200
        with db(hub.home) as conn:
            conn.execute(f"UPDATE admin_session SET {column} = {column} - ? WHERE id_hash = ?", (age_ms, h))
        assert b.get("/admin/").status == 303, column
        assert b.post("/admin/logout", {}).status == 401
        with db(hub.home) as conn:
            assert conn.execute("SELECT ended_at FROM admin_session WHERE id_hash = ?", (h,)).fetchone()[0]


def test_just_inside_the_idle_window_the_session_lives(hub):
    b = Browser(hub.port)
    b.login()
    h = origin._session_hash(b.cookies["origin-admin"])
    with db(hub.home) as conn:
        conn.execute("UPDATE admin_session SET last_seen = last_seen - ? WHERE id_hash = ?",
                     (origin.ADMIN_IDLE_MS - 60_000, h))
    assert b.get("/admin/").status == 200


def test_logout_ends_the_session(owner):
    old = dict(owner.cookies)
    assert owner.post("/admin/logout", {}).status == 303
    replay = Browser(owner.port)
    replay.cookies = old
    assert replay.get("/admin/").status == 303


# --- requests -------------------------------------------------------------------


def _tokens(home: Path) -> set[str]:
    with db(home) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM api_token")}


def test_csrf_origin_and_fetch_site_refusals_change_nothing(hub, owner):
    before = _tokens(hub.home)
    good = owner.csrf
    cases = [
        dict(csrf=False),
        dict(fields={"_csrf": "0" * 43}),
        dict(origin_=None),
        dict(origin_="http://evil.example"),
        dict(origin_="null"),
        dict(origin_=f"https://127.0.0.1:{hub.port}"),
        dict(origin_=f"http://127.0.0.1:{hub.port + 1}"),
        dict(headers={"Sec-Fetch-Site": "cross-site"}),
        dict(headers={"X-CSRF-Token": "wrong"}, csrf=False),
    ]
    for i, case in enumerate(cases):
        fields = {"name": f"forged{i}", "password": PASSWORD, **case.pop("fields", {})}
        r = owner.post("/admin/tokens", fields, **case)
        assert r.status == 403, (case, r.status)
        assert_secure(r)
    other = Browser(hub.port)
    other.login()
    assert owner.post("/admin/tokens", {"name": "forged-other", "_csrf": other.csrf}).status == 403
    for ctype in ("text/plain", "multipart/form-data; boundary=x"):
        assert owner.post("/admin/tokens", {"name": "forged-ct"}, ctype=ctype).status == 415
    assert _tokens(hub.home) == before
    # The header form of the token works, and so does the field.
    assert owner.post("/admin/tokens", {"name": "via-header"}, csrf=False,
                      headers={"X-CSRF-Token": good}).status == 201
    assert owner.csrf == good
    # GET never changes anything.
    assert owner.get("/admin/tokens?name=via-get").status == 200
    assert _tokens(hub.home) == before | {"via-header"}


def test_login_form_needs_its_csrf_token_and_origin(hub):
    b = Browser(hub.port)
    page = b.get("/admin/login")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
    assert b.post("/admin/login", {"password": PASSWORD}, csrf=False).status == 403
    assert b.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False,
                  origin_="http://evil.example").status == 403
    assert b.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False,
                  headers={"Sec-Fetch-Site": "cross-site"}).status == 403
    fresh = Browser(hub.port)  # another client's token, without its pre-login cookie
    assert fresh.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False).status == 403
    assert "origin-admin" not in b.cookies and "origin-admin" not in fresh.cookies


def test_oversize_body_and_other_methods(hub, owner):
    r = owner.post("/admin/remember", {"text": "x" * (70 << 10)})
    assert r.status == 413
    assert_secure(r)
    for method in ("PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"):
        r = owner.request(method, "/admin/", b"" if method != "HEAD" else None,
                          {"Content-Length": "0"} if method != "HEAD" else None)
        assert r.status == 405, method
        assert_secure(r)
        assert r.hdrs["allow"] == ["GET, POST"]


def test_password_failures_are_limited_per_client_with_retry_after(hub_home, tmp_path):
    h = Hub(hub_home, "--listen", "127.0.0.1:0", "--admin",
            env={"ORIGIN_ADMIN_PASSWORD": PASSWORD, "ORIGIN_CLIENT_IP_HEADER": "X-Forwarded-For"})
    b = Browser(h.port)

    def attempt(password, client):
        page = b.get("/admin/login")
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
        return b.post("/admin/login", {"_csrf": csrf, "password": password}, csrf=False,
                      headers={"X-Forwarded-For": f"198.51.100.7, {client}"})

    began = time.monotonic()
    for _ in range(10):
        assert attempt("wrong password", "203.0.113.5").status == 401
    took = time.monotonic() - began
    r = attempt(PASSWORD, "203.0.113.5")  # even the right one: no check is made
    assert r.status == 429
    assert_secure(r)
    assert 1 <= int(r.hdrs["retry-after"][0]) <= 600
    assert attempt(PASSWORD, "203.0.113.6").status == 303  # another client is not locked out
    h.stop()
    with db(hub_home) as conn:
        rows = [dict(r) for r in conn.execute("SELECT * FROM audit_log WHERE action = 'login_failed'")]
    # Ten failures of one client fold: the first is a record of its own, the
    # other nine one record per ADMIN_FAIL_FLUSH seconds they took (one more
    # across a window edge), all ten counted.
    mine = [r for r in rows if r["client"] == "203.0.113.5"]
    assert sum(json.loads(r["details"])["failures"] for r in mine) == 10
    assert 2 <= len(mine) <= 3 + int(took // origin.ADMIN_FAIL_FLUSH), (len(mine), took)
    assert "wrong password" not in json.dumps(rows)


def test_wrong_passwords_sent_at_once_are_checked_no_more_than_the_limit(tmp_path):
    """30 wrong passwords from one client at once: at most 10 scrypt checks run, the rest are 429."""
    home = tmp_path / "hub"
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin",
            env={"ORIGIN_ADMIN_PASSWORD": PASSWORD, "ORIGIN_CLIENT_IP_HEADER": "X-Forwarded-For"})
    b = Browser(h.port)
    page = b.get("/admin/login")
    csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
    form = urllib.parse.urlencode({"_csrf": csrf, "password": "wrong password"}).encode()
    headers = {"Host": f"127.0.0.1:{h.port}", "Origin": b.origin, "X-Forwarded-For": "203.0.113.50",
               "Content-Type": "application/x-www-form-urlencoded",
               "Cookie": "; ".join(f"{k}={v}" for k, v in b.cookies.items())}
    start = threading.Barrier(30)
    answers: list = []

    def attempt():
        conn = http.client.HTTPConnection("127.0.0.1", h.port, timeout=300)
        conn.connect()
        start.wait(60)  # all connected, then all sent at once
        conn.request("POST", "/admin/login", body=form, headers=headers)
        r = conn.getresponse()
        r.read()
        answers.append((r.status, r.getheader("Retry-After")))
        conn.close()

    run_at_once(attempt, 30, 300)
    status = [s for s, _ in answers]
    assert len(status) == 30 and set(status) <= {401, 429, 503}, (status, "".join(h.log))
    assert 1 <= status.count(401) <= origin.ADMIN_FAIL_CLIENT, status
    # A 503 (no turn to check in time) is given back, so it may let a later one through.
    assert status.count(429) >= 30 - origin.ADMIN_FAIL_CLIENT - status.count(503), status
    assert all(wait and int(wait) >= 1 for s, wait in answers if s != 401), answers
    # The limit holds for the right password too (no check is made), another client logs in.
    assert Browser(h.port).login().status == 303
    assert b.post("/admin/login", {"_csrf": csrf, "password": PASSWORD}, csrf=False,
                  headers={"X-Forwarded-For": "203.0.113.50"}).status == 429
    h.stop()
    audited, _records, waiting = _failure_counts(home)
    # Each 401 was one scrypt check, on disk; none of the others was checked.
    assert audited.get("203.0.113.50", 0) + waiting.get("203.0.113.50", 0) == status.count(401)


def test_password_checks_run_two_at_once_and_a_login_without_a_turn_is_told_to_retry(hub_home, monkeypatch):
    """In-process, with a password check that holds its turn until the test lets it go."""
    monkeypatch.setattr(origin, "ADMIN_CHECK_WAIT", 0.0, raising=False)
    inside = threading.Condition()
    running = [0]
    release = threading.Event()

    def check(store, pw):
        with inside:
            running[0] += 1
            inside.notify_all()
        release.wait(30)
        with inside:
            running[0] -= 1
        return pw == PASSWORD

    monkeypatch.setattr(origin, "check_owner_password", check)
    hub = origin.Hub(hub_home, index=False)
    app = origin.AdminApp()
    origin.mount_admin(hub, app)
    stores = [origin.open_store(hub_home) for _ in range(3)]
    got: dict = {}

    def login(i: int, password: str):
        r = hub.dispatch("POST", "/admin/login", *_login_request(app, password), client=f"127.0.1.{i}",
                         store=stores[i])
        got[i] = r

    threads = [threading.Thread(target=login, args=(i, "nope")) for i in (0, 1)]
    for t in threads:
        t.start()
    with inside:
        assert inside.wait_for(lambda: running[0] == 2, 60)
    busy = hub.dispatch("POST", "/admin/login", *_login_request(app, PASSWORD), client="127.0.1.2",
                        store=stores[2])
    release.set()
    for t in threads:
        t.join(60)
    assert busy.status == 503 and b"busy checking other passwords" in busy.body
    assert dict(busy.headers)["Retry-After"] == "1"
    assert [got[i].status for i in (0, 1)] == [401, 401]
    assert app.limited("127.0.1.2") is None and "127.0.1.2" not in app._fails  # nothing counted
    # With the turns free again the same client logs in.
    monkeypatch.setattr(origin, "ADMIN_CHECK_WAIT", 30.0)
    assert hub.dispatch("POST", "/admin/login", *_login_request(app, PASSWORD), client="127.0.1.2",
                        store=stores[2]).status == 303
    for st in stores:
        st.close()
    hub.close()


def test_a_right_password_gives_its_counted_check_back(hub_home, monkeypatch):
    monkeypatch.setattr(origin, "check_owner_password", lambda store, pw: pw == PASSWORD)
    attempts = ([("127.0.2.1", "nope", {})] * 9 + [("127.0.2.1", PASSWORD, {})] + [("127.0.2.1", "nope", {})]
                + [("127.0.2.1", PASSWORD, {})])
    # Nine failures, a login (refunded), the tenth failure: only then is the client limited.
    assert _login_attempts(hub_home, origin.AdminApp(), attempts) == [401] * 9 + [303, 401, 429]


def _failure_counts(home: Path) -> tuple[dict, dict, dict]:
    """Per client: failures in audit records, records, and failures counted but not yet in a record."""
    with db(home) as conn:
        audited: dict = {}
        records: dict = {}
        for r in conn.execute("SELECT client, details FROM audit_log WHERE action = 'login_failed'"):
            audited[r[0]] = audited.get(r[0], 0) + json.loads(r[1])["failures"]
            records[r[0]] = records.get(r[0], 0) + 1
        counted = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'login_failure'").fetchone()
        waiting = {r[0]: r[1] for r in conn.execute("SELECT client, failures FROM login_failure WHERE failures > 0")
                   } if counted else {}
    return audited, records, waiting


def test_failed_logins_reach_the_audit_log_when_the_hub_is_killed(tmp_path):
    """SIGKILL right after the last 401: no failure is lost, and the restarted hub's audit page shows each."""
    home = tmp_path / "hub"
    env = {"ORIGIN_ADMIN_PASSWORD": PASSWORD, "ORIGIN_CLIENT_IP_HEADER": "X-Forwarded-For"}
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin", env=env)
    b = Browser(h.port)
    tried = "hunter2-not-the-password"

    def attempt(client):
        page = b.get("/admin/login")
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page.text).group(1)
        return b.post("/admin/login", {"_csrf": csrf, "password": tried}, csrf=False,
                      headers={"X-Forwarded-For": client, "User-Agent": "attack-tool/1.0"})

    began = time.monotonic()
    for client, n in (("203.0.113.9", 6), ("198.51.100.23", 1)):
        for _ in range(n):
            assert attempt(client).status == 401
    took = time.monotonic() - began
    h.proc.kill()  # no SIGTERM: nothing runs after the last answer
    assert h.proc.wait(60) == -signal.SIGKILL
    audited, records, waiting = _failure_counts(home)
    # The first failure of each client's window was a record before its 401;
    # the rest are on disk as a count (the killed hub had no time to fold them).
    assert audited.get("198.51.100.23") == 1 and records.get("203.0.113.9", 0) >= 1
    assert audited.get("203.0.113.9", 0) + waiting.get("203.0.113.9", 0) == 6
    assert audited.get("198.51.100.23", 0) + waiting.get("198.51.100.23", 0) == 1

    h2 = Hub(home, "--listen", "127.0.0.1:0", "--admin", env=env)
    audited, records, waiting = _failure_counts(home)
    assert audited == {"203.0.113.9": 6, "198.51.100.23": 1} and waiting == {}  # written at start
    # The fold still folds: 6 failures are the first and the rest, not 6 records
    # (one more per ADMIN_FAIL_FLUSH seconds the attempts took, and at a window edge).
    assert 2 <= records["203.0.113.9"] <= 3 + int(took // origin.ADMIN_FAIL_FLUSH), (records, took)
    owner = Browser(h2.port)
    assert owner.login().status == 303
    page = owner.get("/admin/audit")
    assert page.status == 200
    shown: dict = {}
    for n, client in re.findall(r"(\d+) failed logins? from ([0-9.]+) (?:at|between) \d\d:\d\d:\d\d", page.text):
        shown[client] = shown.get(client, 0) + int(n)
    assert shown == {"203.0.113.9": 6, "198.51.100.23": 1}, page.text
    assert re.search(r"\d+ failed logins from 203\.0\.113\.9 (?:at|between) ", page.text)
    with db(home) as conn:
        stored = json.dumps([list(r) for t in ("audit_log", "login_failure") for r in conn.execute(f"SELECT * FROM {t}")])
    assert "attack-tool/1.0" in stored  # the user agent is kept ...
    for text in (stored, page.text):
        assert tried not in text  # ... the password tried never
    h2.stop()


def test_failed_logins_fold_per_client_and_window(store, monkeypatch):
    """The fold's rules, with the clock in the test's hands."""
    clock = [1_800_000_000_000 - 1_800_000_000_000 % (origin.ADMIN_FAIL_WINDOW * 1000)]
    monkeypatch.setattr(origin, "now_ms", lambda: clock[0])
    ip = "203.0.113.9"

    def step(ms):
        clock[0] += ms

    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    assert origin.record_login_failure(store, ip, "ua") is True  # the first of the window: a record now
    store.conn.set_trace_callback(None)
    # Committed with the WAL synced (a power loss cannot take it back), then the store's NORMAL again.
    assert seen.index("PRAGMA synchronous = FULL") < seen.index("BEGIN IMMEDIATE") < seen.index("COMMIT") \
        < seen.index("PRAGMA synchronous = NORMAL")
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    for _ in range(9):
        step(1000)
        assert origin.record_login_failure(store, ip, "ua") is False
    assert origin.flush_login_failures(store, due=True) == 1  # the nine are younger than ADMIN_FAIL_FLUSH
    step(origin.ADMIN_FAIL_FLUSH * 1000)
    assert origin.flush_login_failures(store, due=True) == 0
    records = origin.audit_log(store)
    assert [r["details"]["failures"] for r in records] == [9, 1]
    assert origin._audit_details(records[0]) == f"9 failed logins from {ip} between " \
        f"{origin.iso_local(clock[0] - origin.ADMIN_FAIL_FLUSH * 1000 - 8000)[11:19]} and " \
        f"{origin.iso_local(clock[0] - origin.ADMIN_FAIL_FLUSH * 1000)[11:19]}"
    assert origin._audit_details(records[1]).startswith(f"1 failed login from {ip} at ")
    # Later in the same window: folded again, not a new first record.
    assert origin.record_login_failure(store, ip, "ua") is False
    # The window turns: what was counted is written, and a new first record opens the next.
    step(origin.ADMIN_FAIL_WINDOW * 1000)
    assert origin.record_login_failure(store, ip, "ua") is True
    assert [r["details"]["failures"] for r in origin.audit_log(store)] == [1, 1, 9, 1]
    assert origin.flush_login_failures(store) == 0 and len(origin.audit_log(store)) == 4  # nothing waiting
    # Each fold is a new row: the audit log still refuses changes.
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute("UPDATE audit_log SET details = NULL")


def test_folded_failures_are_written_by_the_hub_within_the_flush_time(hub_home, monkeypatch):
    """Failures after the first are written without another request (a timer), and at stop."""
    monkeypatch.setattr(origin, "check_owner_password", lambda store, pw: pw == PASSWORD)
    monkeypatch.setattr(origin, "ADMIN_FAIL_FLUSH", 0.05)
    hub = origin.Hub(hub_home, index=False)
    app = origin.AdminApp()
    origin.mount_admin(hub, app)
    before = _failure_counts(hub_home)[0].get("127.0.0.77", 0)
    for _ in range(3):
        r = hub.dispatch("POST", "/admin/login", *_login_request(app, "nope"), client="127.0.0.77")
        assert r.status == 401
    deadline = time.monotonic() + 120
    while _failure_counts(hub_home)[0].get("127.0.0.77", 0) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _failure_counts(hub_home)[0]["127.0.0.77"] == before + 3
    # With a long flush time the second failure waits as a count, which a clean stop writes.
    assert hub.dispatch("POST", "/admin/login", *_login_request(app, "nope"), client="127.0.0.78").status == 401
    monkeypatch.setattr(origin, "ADMIN_FAIL_FLUSH", 3600)
    r = hub.dispatch("POST", "/admin/login", *_login_request(app, "nope"), client="127.0.0.78")
    assert r.status == 401 and _failure_counts(hub_home)[2].get("127.0.0.78") == 1
    hub.close()  # a clean stop writes what is waiting
    assert _failure_counts(hub_home)[2].get("127.0.0.78") is None


def _login_request(app, password: str) -> tuple[dict, bytes]:
    nonce = "n" * 30
    body = urllib.parse.urlencode({"_csrf": app._login_csrf(nonce), "password": password})
    return ({"Host": "127.0.0.1:1", "Origin": "http://127.0.0.1:1", "Content-Type": "application/x-www-form-urlencoded",
             "Content-Length": str(len(body)), "Cookie": f"origin-admin-pre={nonce}"}, body.encode())


def _login_attempts(hub_home, app, attempts: list[tuple[str, str, dict]]) -> list[int]:
    """POST /admin/login in-process for each (client, password, extra headers); return the statuses."""
    hub = origin.Hub(hub_home, index=False)
    origin.mount_admin(hub, app)
    status = []
    for client, password, extra in attempts:
        headers, body = _login_request(app, password)
        r = hub.dispatch("POST", "/admin/login", {**headers, **extra}, body, client=client)
        status.append(r.status)
    hub.close()
    return status


def test_password_failures_are_limited_in_all(hub_home, monkeypatch):
    """100 failures in all lock out every client (in-process, with a cheap password check)."""
    monkeypatch.setattr(origin, "check_owner_password", lambda store, pw: pw == PASSWORD)
    attempts = [(f"127.0.0.{i // 9 + 1}", "nope", {}) for i in range(100)] + [("127.0.0.99", PASSWORD, {})]
    status = _login_attempts(hub_home, origin.AdminApp(), attempts)
    assert status[:100] == [401] * 100 and status[100] == 429


def test_client_ip_header_is_read_only_when_configured(hub_home, monkeypatch):
    monkeypatch.setattr(origin, "check_owner_password", lambda store, pw: pw == PASSWORD)
    # Unset: a client cannot dodge its limit by sending another X-Forwarded-For each time.
    attempts = [("127.0.0.1", "nope", {"X-Forwarded-For": f"203.0.113.{i}"}) for i in range(11)]
    assert _login_attempts(hub_home, origin.AdminApp(), attempts)[-1] == 429
    # Set: each forwarded address has a limit of its own.
    app = origin.AdminApp(client_ip_header="X-Forwarded-For")
    assert _login_attempts(hub_home, app, attempts) == [401] * 11


# --- responses ------------------------------------------------------------------


def test_security_headers_on_every_response_class(hub, owner):
    responses = [
        owner.get("/admin/"), owner.get("/admin/search?q=the"), owner.get("/admin/nope"),
        owner.get("/admin/event?id=no-such-event"), Browser(hub.port).get("/admin/"),
        Browser(hub.port).post("/admin/tokens", {"name": "x"}), owner.get("/admin/api/raw?id=nope"),
        owner.post("/admin/tokens", {"name": "x"}, csrf=False),
        owner.request("POST", "/admin/tokens", b"x", {"Content-Type": "text/plain"}),  # no Content-Length: 411
    ]
    page = owner.get("/admin/").text
    for asset in re.findall(r'(?:href|src)="(/admin/assets/[^"]+)"', page):
        responses.append(owner.get(asset))
    statuses = {r.status for r in responses}
    assert {200, 303, 401, 403, 404}.issubset(statuses), statuses
    for r in responses:
        assert_secure(r)


def test_assets_are_content_hashed_and_nothing_is_external(hub, owner):
    page = owner.get("/admin/").text
    css = re.search(r'<link rel="stylesheet" href="(/admin/assets/admin\.([0-9a-f]{12})\.css)"', page)
    assert css
    r = owner.get(css.group(1))
    assert r.status == 200 and r.hdrs["content-type"][0].startswith("text/css")
    import hashlib

    assert hashlib.sha256(r.data).hexdigest()[:12] == css.group(2)
    font = re.search(r"url\((/admin/assets/inter-latin-wght-normal\.[0-9a-f]{12}\.woff2)\)", r.text)
    assert font and owner.get(font.group(1)).hdrs["content-type"] == ["font/woff2"]
    assert owner.get("/admin/assets/admin.css").status == 404
    assert owner.get("/admin/assets/../origin.db").status == 404
    for html in (page, owner.get("/admin/search?q=the").text):
        assert not re.search(r'(?:src|href|action)="(?:https?:)?//', html)
        assert "<style" not in html and " style=" not in html
        assert not re.search(r"<script(?![^>]*\ssrc=)", html)  # no inline script
        # Each page inlines only the icons it uses.
        used = set(re.findall(r'<use href="#i-([a-z0-9-]+)"', html))
        defined = set(re.findall(r'<symbol id="i-([a-z0-9-]+)"', html))
        assert used == defined and used


def test_values_are_escaped(hub, owner):
    r = owner.get("/admin/search?" + urllib.parse.urlencode({"q": '<script>alert(1)</script>"x'}))
    assert r.status == 200
    assert "<script>alert(1)" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;x" in r.text


def test_tokens_are_never_accepted_by_admin_nor_the_cookie_by_the_api(hub, owner):
    r = owner.post("/admin/tokens", {"name": "api-dev"})
    token = re.search(r"(ogn_[A-Za-z0-9_-]+)", r.text).group(1)
    plain = Browser(hub.port)
    r = plain.get("/admin/", headers={"Authorization": f"Bearer {token}"})
    assert r.status == 401
    r = owner.get("/v1/cursors?device=api-dev", headers={"Authorization": "x"}, cookies=True)
    assert r.status == 401
    r = owner.get("/v1/cursors?device=api-dev")
    assert r.status == 401  # the admin cookie opens nothing but /admin
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    r = owner.request("POST", "/mcp", rpc, {"Content-Type": "application/json",
                                            "Accept": "application/json, text/event-stream"})
    assert r.status == 401


def test_a_token_is_shown_once(hub, owner):
    r = owner.post("/admin/tokens", {"name": "phone"})
    assert r.status == 201
    token = re.search(r"(ogn_[A-Za-z0-9_-]+)", r.text).group(1)
    assert f"origin hub connect http://127.0.0.1:{hub.port} --token {token} --device phone" in r.text
    assert "origin setup" in r.text and "/mcp" in r.text
    listing = owner.get("/admin/tokens")
    assert "phone" in listing.text and token not in listing.text
    again = owner.post("/admin/tokens", {"name": "phone"})  # a resubmitted form
    assert again.status == 409 and token not in again.text and "ogn_" not in again.text
    for page in ("/admin/", "/admin/devices", "/admin/audit", "/admin/api/overview"):
        assert token not in owner.get(page).text
    with db(hub.home) as conn:
        assert token not in json.dumps([list(r) for r in conn.execute("SELECT * FROM audit_log")])


def test_the_owner_creates_agent_and_bound_device_tokens_and_sees_each_scope_and_device(hub, owner):
    r = owner.post("/admin/tokens", {"name": "helper", "scope": "agent"})
    assert r.status == 201 and "Agent token helper created" in r.text
    agent = re.search(r"(ogn_[A-Za-z0-9_-]+)", r.text).group(1)
    assert "origin hub connect" not in r.text and f"http://127.0.0.1:{hub.port}/mcp" in r.text
    r = owner.post("/admin/tokens", {"name": "desk-2", "scope": "device", "device": "desk"})
    assert r.status == 201
    device = re.search(r"(ogn_[A-Za-z0-9_-]+)", r.text).group(1)
    assert f"--token {device} --device desk" in r.text
    with db(hub.home) as conn:
        assert dict(conn.execute("SELECT t.name, s.scope FROM api_token t JOIN token_scope s ON s.token_id = t.id "
                                 "WHERE t.name IN ('helper', 'desk-2')")) == {"helper": "agent", "desk-2": "device"}
        assert conn.execute("SELECT d.device FROM token_device d JOIN api_token t ON t.id = d.token_id "
                            "WHERE t.name = 'desk-2'").fetchone()[0] == "desk"
    rows = {m[0]: m[1:] for m in re.findall(r"<tr><td>([a-z0-9-]+)</td><td>([^<]*)</td><td>([^<]*)</td>",
                                           owner.get("/admin/tokens").text)}
    assert rows["helper"] == ("agent (/mcp only)", "-") and rows["desk-2"] == ("device (pushes, /mcp)", "desk")
    # The scopes hold: the agent token reaches /mcp and nothing of replication.
    plain = Browser(hub.port)
    assert plain.get("/v1/cursors?device=helper", headers={"Authorization": f"Bearer {agent}"}).status == 403
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    r = plain.request("POST", "/mcp", rpc, {"Content-Type": "application/json", "Authorization": f"Bearer {agent}",
                                            "Accept": "application/json, text/event-stream"})
    assert r.status == 200
    # Refused with the reason, nothing created, nothing echoed as markup.
    r = owner.post("/admin/tokens", {"name": "helper-2", "scope": "agent", "device": "desk"})
    assert r.status == 400 and "leave Device empty" in r.text
    r = owner.post("/admin/tokens", {"name": "odd", "device": "<b>desk</b>"})
    assert r.status == 400 and "<b>desk</b>" not in r.text
    r = owner.post("/admin/tokens", {"name": "odd", "scope": "root"})
    assert r.status == 400 and "scope is one of device, agent" in r.text
    with db(hub.home) as conn:
        assert not conn.execute("SELECT name FROM api_token WHERE name IN ('helper-2', 'odd')").fetchall()


def test_revoke_needs_a_recent_password(hub, owner):
    owner.post("/admin/tokens", {"name": "tablet"})
    h = origin._session_hash(owner.cookies["origin-admin"])
    with db(hub.home) as conn:
        conn.execute("UPDATE admin_session SET password_at = password_at - ? WHERE id_hash = ?",
                     (origin.ADMIN_REAUTH_MS + 1000, h))
    page = owner.get("/admin/tokens")
    assert 'name="password"' in page.text
    r = owner.post("/admin/tokens/revoke", {"name": "tablet"})
    assert r.status == 403
    r = owner.post("/admin/tokens/revoke", {"name": "tablet", "password": "not it at all"})
    assert r.status == 403
    with db(hub.home) as conn:
        assert conn.execute("SELECT revoked_at FROM api_token WHERE name = 'tablet'").fetchone()[0] is None
    assert owner.post("/admin/tokens/revoke", {"name": "tablet", "password": PASSWORD}).status == 303
    with db(hub.home) as conn:
        assert conn.execute("SELECT revoked_at FROM api_token WHERE name = 'tablet'").fetchone()[0]
        actions = [r[0] for r in conn.execute("SELECT action FROM audit_log WHERE actor = 'owner'")]
    assert "token_revoked" in actions


def test_every_page_renders(hub, owner):
    ev = a_message(hub.home)
    for path in ("/admin/", "/admin/tokens", "/admin/devices", "/admin/timeline?since=5000d",
                 "/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "source": ev["source"]}),
                 "/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "tools": "1"}),
                 "/admin/event?" + urllib.parse.urlencode({"id": ev["id"]}),
                 "/admin/event?" + urllib.parse.urlencode({"id": ev["id"], "raw": "1"}),
                 "/admin/search?q=the", "/admin/search?q=%22the%22&source=codex", "/admin/entries",
                 "/admin/audit", "/admin/logins", "/admin/api/overview",
                 "/admin/api/raw?" + urllib.parse.urlencode({"id": ev["id"]})):
        r = owner.get(path)
        assert r.status == 200, (path, r.text[:500])
    assert "<svg viewBox" in owner.get("/admin/").text
    raw = json.loads(owner.get("/admin/api/raw?" + urllib.parse.urlencode({"id": ev["id"]})).text)
    assert raw["ok"] and len(raw["raw"]) <= origin.ADMIN_RAW_MAX


def test_tool_events_are_hidden_unless_asked(hub, owner):
    with db(hub.home) as conn:
        r = conn.execute("SELECT session, source FROM event WHERE kind IN ('tool_call', 'tool_result') "
                         "GROUP BY session ORDER BY count(*) DESC LIMIT 1").fetchone()
    q = {"id": r["session"], "source": r["source"]}
    plain = owner.get("/admin/session?" + urllib.parse.urlencode(q)).text
    tools = owner.get("/admin/session?" + urllib.parse.urlencode({**q, "tools": "1"})).text
    assert "· tool_" not in plain and "· tool_" in tools


def test_raw_line_is_cut_at_4000_characters(hub, owner):
    with db(hub.home) as conn:
        ev = conn.execute("SELECT e.id FROM event e WHERE length(e.text) > 4200 "
                          "AND e.id NOT IN (SELECT event_id FROM excluded_event) LIMIT 1").fetchone()
    assert ev is not None, "the fixtures hold a tool result longer than 4,200 characters"
    raw = json.loads(owner.get("/admin/api/raw?" + urllib.parse.urlencode({"id": ev["id"]})).text)
    assert raw["truncated"] and len(raw["raw"]) == origin.ADMIN_RAW_MAX


# --- remember, correct, forget ----------------------------------------------------


def test_invariant_2_remember_correct_forget_with_preview_is_sticky_on_every_page(hub, owner):
    ev = a_message(hub.home)
    secret_text = "Decision zebra-quasar: keep the admin page stdlib only"
    r = owner.post("/admin/remember", {"event": ev["id"], "kind": "knowledge", "text": secret_text})
    assert r.status == 303
    entry_id = urllib.parse.parse_qs(urllib.parse.urlsplit(r.getheader("Location")).query)["id"][0]
    page = owner.get(r.getheader("Location")).text
    assert secret_text in page and ev["id"] in page
    with db(hub.home) as conn:
        row = conn.execute("SELECT author, confidence FROM entry WHERE id = ?", (entry_id,)).fetchone()
        cites = [x[0] for x in conn.execute("SELECT event_id FROM entry_source WHERE entry_id = ?", (entry_id,))]
    assert row["author"] == "user" and cites == [ev["id"]]
    # Correct: confidence 1 unless given.
    corrected = "Decision zebra-quasar: keep the admin page stdlib only, with a committed assets step"
    r = owner.post("/admin/correct", {"id": entry_id, "text": corrected, "confidence": ""})
    assert r.status == 303
    new_id = urllib.parse.parse_qs(urllib.parse.urlsplit(r.getheader("Location")).query)["id"][0]
    with db(hub.home) as conn:
        row = conn.execute("SELECT supersedes, confidence, author FROM entry WHERE id = ?", (new_id,)).fetchone()
    assert row["supersedes"] == entry_id and row["confidence"] == 1 and row["author"] == "user"
    assert entry_id in owner.get("/admin/entry?id=" + new_id).text  # the history
    # Forget: the preview's digest, a re-typed id; a changed plan forgets nothing.
    preview = owner.get("/admin/forget?id=" + new_id)
    assert preview.status == 200 and ev["id"] in preview.text
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', preview.text).group(1)
    assert owner.post("/admin/forget", {"id": new_id, "confirm": new_id + "x", "digest": digest}).status == 400
    other = owner.post("/admin/remember", {"event": ev["id"], "kind": "memory",
                                           "text": "A second entry on the same event"})
    assert other.status == 303  # the plan now forgets this entry too
    r = owner.post("/admin/forget", {"id": new_id, "confirm": new_id, "digest": digest})
    assert r.status == 409
    with db(hub.home) as conn:
        assert conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', r.text).group(1)  # the new plan, shown again
    r = owner.post("/admin/forget", {"id": new_id, "confirm": new_id, "digest": digest, "reason": "test"})
    assert r.status == 200 and "Forgotten" in r.text
    # Sticky: no page and no JSON answer shows any of it again.
    words = [secret_text, corrected, "A second entry on the same event", ev["text"][:60]]
    pages = ["/admin/", "/admin/search?q=zebra-quasar", "/admin/search?q=" + urllib.parse.quote(ev["text"][:30]),
             "/admin/timeline?since=5000d",
             "/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "source": ev["source"],
                                                         "tools": "1"}),
             "/admin/event?id=" + urllib.parse.quote(ev["id"]), "/admin/entries", "/admin/entries?history=1",
             "/admin/entry?id=" + new_id, "/admin/entry?id=" + entry_id, "/admin/audit", "/admin/api/overview",
             "/admin/api/raw?id=" + urllib.parse.quote(ev["id"]), "/admin/forget?id=" + new_id]
    for path in pages:
        text = owner.get(path).text
        for w in words:
            assert text.count(w) == 0, (path, w)
    with db(hub.home) as conn:
        audit = json.dumps([dict(r) for r in conn.execute("SELECT * FROM audit_log")])
        actions = {r[0] for r in conn.execute("SELECT action FROM audit_log WHERE actor = 'owner'")}
    for w in words + [PASSWORD]:
        assert w not in audit
    assert {"login", "entry_written", "entry_corrected", "forget"} <= actions


def test_forget_needs_a_recent_password(hub, owner):
    ev = a_message(hub.home)
    r = owner.post("/admin/remember", {"event": ev["id"], "kind": "memory", "text": "Needs a password to forget"})
    entry_id = urllib.parse.parse_qs(urllib.parse.urlsplit(r.getheader("Location")).query)["id"][0]
    h = origin._session_hash(owner.cookies["origin-admin"])
    with db(hub.home) as conn:
        conn.execute("UPDATE admin_session SET password_at = password_at - ? WHERE id_hash = ?",
                     (origin.ADMIN_REAUTH_MS + 1000, h))
    preview = owner.get("/admin/forget?id=" + entry_id)
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', preview.text).group(1)
    assert 'name="password"' in preview.text
    assert owner.post("/admin/forget", {"id": entry_id, "confirm": entry_id, "digest": digest}).status == 403
    assert owner.post("/admin/forget", {"id": entry_id, "confirm": entry_id, "digest": digest,
                                        "password": PASSWORD}).status == 200


def test_audit_log_is_append_only(hub):
    with db(hub.home) as conn:
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute("UPDATE audit_log SET actor = 'x'")
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute("DELETE FROM audit_log")


def test_end_other_sessions(hub, owner):
    other = Browser(hub.port)
    other.login()
    assert owner.post("/admin/logins/end", {}).status == 303
    assert other.get("/admin/").status == 303
    assert owner.get("/admin/").status == 200


def test_cli_token_changes_are_audited_as_cli(hub):
    assert hub.cli("token", "create", "cli-made").returncode == 0
    assert hub.cli("token", "revoke", "cli-made").returncode == 0
    with db(hub.home) as conn:
        rows = {(r[0], r[1]) for r in conn.execute("SELECT actor, action FROM audit_log WHERE channel = 'cli'")}
    assert {("cli", "token_created"), ("cli", "token_revoked")} <= rows


def test_plan_digest_refuses_a_changed_plan_in_the_core(store, claude_root):
    origin.sync(store)
    ev = store.conn.execute("SELECT id FROM event WHERE kind = 'message' LIMIT 1").fetchone()[0]
    pv = origin.preview_forget(store, ev)
    origin.remember(store, kind="memory", text="cites the event, so the plan grows", sources=[{"event": ev}],
                    author="user")
    with pytest.raises(origin.Conflict):
        origin.forget(store, ev, expect_digest=pv["digest"])
    assert store.conn.execute("SELECT count(*) FROM tombstone").fetchone()[0] == 0
    fresh = origin.preview_forget(store, ev)
    assert fresh["digest"] != pv["digest"]
    assert origin.forget(store, ev, expect_digest=fresh["digest"])["excluded_events"]


def test_activity_chart_counts_sessions_per_day_per_agent(store, claude_root):
    origin.sync(store)
    now = origin.now_ms()
    rows = store.conn.execute("SELECT source, id FROM session WHERE events > 0 ORDER BY id").fetchall()
    assert len(rows) >= 3
    with origin.transaction(store.conn) as conn:  # two sessions today, one three days ago
        for (source, sid), age in zip(rows, (0, 0, 3)):
            conn.execute("UPDATE session SET first_ts = ? WHERE source = ? AND id = ?",
                         (now - age * 86_400_000, source, sid))
    labels, per = origin._sessions_per_day(store)
    assert len(labels) == 90 and labels[-1] == origin.dt.date.today().isoformat()
    assert per["claude-code"][-1] == 2 and per["claude-code"][-4] == 1 and sum(per["claude-code"]) == 3
    svg = origin.activity_chart(labels, per)
    bars = re.findall(r'<rect class="bar a-claude-code" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)">'
                      r"<title>([\d-]+): (\d) claude-code</title>", svg)
    assert [(b[2], b[3]) for b in bars] == [(labels[-4], "1"), (labels[-1], "2")]
    assert float(bars[1][1]) == 2 * float(bars[0][1])  # heights in proportion
    assert 'aria-label="3 sessions in the last 90 days' in svg


def test_activity_chart_days_are_local_days_and_the_counts_read_covering_indexes(store, claude_root):
    origin.sync(store)
    rows = store.conn.execute("SELECT source, id FROM session WHERE events > 0 ORDER BY id").fetchall()
    assert len(rows) >= 4
    today = origin.dt.date.today()

    def midnight(days_ago: int) -> int:
        day = today - origin.dt.timedelta(days=days_ago)
        return int(origin.dt.datetime.combine(day, origin.dt.time()).timestamp() * 1000)

    # At a local midnight, a millisecond before it, and on either side of the window's first day.
    starts = (midnight(2), midnight(2) - 1, midnight(89), midnight(89) - 1)
    with origin.transaction(store.conn) as conn:
        conn.execute("UPDATE session SET first_ts = 0")
        for (source, sid), ts in zip(rows, starts):
            conn.execute("UPDATE session SET first_ts = ? WHERE source = ? AND id = ?", (ts, source, sid))
    labels, per = origin._sessions_per_day(store)
    counts = per["claude-code"]
    assert counts[-3] == 1 and counts[-4] == 1 and counts[0] == 1 and sum(counts) == 3
    plans = {q: " ".join(r[3] for r in store.conn.execute("EXPLAIN QUERY PLAN " + q)) for q in (
        "SELECT source, count(*), sum(events) FROM session WHERE events > 0 GROUP BY source",
        "SELECT source, count(*), sum(parse_errors), sum(unknown_records), max(last_sync) FROM raw_file GROUP BY source",
        "SELECT source FROM session WHERE events > 0 AND first_ts >= 1 AND first_ts < 2")}
    assert all("COVERING INDEX" in plan for plan in plans.values()), plans


def test_audit_page_pages_back_through_older_records(hub, owner):
    with db(hub.home) as conn:
        conn.executemany("INSERT INTO audit_log (ts, actor, action, channel, details) VALUES (?, 'cli', ?, 'cli', ?)",
                         [(origin.now_ms(), "token_created", json.dumps({"token": f"bulk{i}"})) for i in range(250)])
        newest = conn.execute("SELECT max(id) FROM audit_log").fetchone()[0]
    first = owner.get("/admin/audit").text
    link = re.search(r'href="(/admin/audit\?before=(\d+))"', first)
    assert link and int(link.group(2)) == newest - 199
    assert "bulk249" in first and "bulk49" not in first
    second = owner.get(link.group(1).replace("&amp;", "&")).text
    assert "bulk49" in second and "bulk249" not in second


def test_search_marks_the_hits_that_hold_only_some_words(hub, owner):
    ev = a_message(hub.home)
    word = next(w for w in ev["text"].split() if len(w) >= 5 and w.isascii() and w.isalpha())
    text = owner.get("/admin/search?" + urllib.parse.urlencode({"q": f"{word} zebraquasarx"})).text
    assert "partial 1/2" in text and "No events match" not in text
    text = owner.get("/admin/search?" + urllib.parse.urlencode({"q": word})).text
    assert "partial" not in text
