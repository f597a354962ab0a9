"""Stored XSS through memory content: 50 payloads in a real browser.

A Claude Code session whose prompts, replies, project folder, branch and
an entry carry markup meant to run script, load a resource, restyle or
reshape the page, or be filled in by a template.  The owner opens every
page that shows them in Chromium.  Escaping must hold on its own, under
the CSP: no element of a payload exists in any page's DOM, no payload
reaches the loopback beacon it names, the console has no CSP violation
(an escaped text never asks for anything), and each payload is shown as
the text it is.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

from helpers import Hub, PASSWORD
from reliability_tools import origin_argv, origin_env, run_sync

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running

SESSION = "7d4c6a10-5e2b-4f4e-9a51-3c2f0b9e8d11"


def payloads(beacon: str) -> list[str]:
    """Fifty texts, each marked ``data-xss`` and naming the beacon where it could."""
    b = beacon
    return [
        f'<img data-xss=1 src="{b}/1">',
        f'<img data-xss=2 src=x onerror="fetch(\'{b}/2\')">',
        f'<script data-xss=3 src="{b}/3"></script>',
        f'<script data-xss=4>fetch("{b}/4")</script>',
        f'"><img data-xss=5 src="{b}/5">',
        f"'><img data-xss=6 src='{b}/6'>",
        f'</pre><img data-xss=7 src="{b}/7">',
        f'</textarea><img data-xss=8 src="{b}/8">',
        f'</title><img data-xss=9 src="{b}/9">',
        f'</script><img data-xss=10 src="{b}/10">',
        f'<svg data-xss=11 onload="fetch(\'{b}/11\')"></svg>',
        f'<svg><script data-xss=12 href="{b}/12"></script></svg>',
        f'<iframe data-xss=13 src="{b}/13"></iframe>',
        f'<object data-xss=14 data="{b}/14"></object>',
        f'<embed data-xss=15 src="{b}/15">',
        f'<link data-xss=16 rel=stylesheet href="{b}/16">',
        f'<style data-xss=17>@import url("{b}/17");</style>',
        f'<div data-xss=18 style="background:url({b}/18)">x</div>',
        f'<base data-xss=19 href="{b}/19/">',
        f'<meta data-xss=20 http-equiv=refresh content="0;url={b}/20">',
        f'<form data-xss=21 action="{b}/21"><button>go</button></form>',
        f'<a data-xss=22 href="javascript:fetch(\'{b}/22\')">click</a>',
        f'<video data-xss=23><source onerror="fetch(\'{b}/23\')"></video>',
        f'<audio data-xss=24 src=x onerror="fetch(\'{b}/24\')"></audio>',
        f'<body data-xss=25 onload="fetch(\'{b}/25\')">',
        f'<details data-xss=26 open ontoggle="fetch(\'{b}/26\')">x</details>',
        f'<input data-xss=27 autofocus onfocus="fetch(\'{b}/27\')">',
        f'<math data-xss=28><mtext><img src="{b}/28"></mtext></math>',
        f'<table data-xss=29 background="{b}/29"></table>',
        f'<img data-xss=30 srcset="{b}/30 1x">',
        f'<picture data-xss=31><source srcset="{b}/31"><img src=x></picture>',
        f'<isindex data-xss=32 action="{b}/32">',
        f'<!--<img data-xss=33 src="--><img data-xss=33 src="{b}/33">',
        f'<![CDATA[<img data-xss=34 src="{b}/34">]]>',
        f'<noscript><p title="</noscript><img data-xss=35 src={b}/35>">',
        f'<template data-xss=36><img src="{b}/36"></template>',
        f'<marquee data-xss=37 onstart="fetch(\'{b}/37\')">x</marquee>',
        f'<select data-xss=38 autofocus onfocus="fetch(\'{b}/38\')"></select>',
        f'<object data-xss=39 data="data:text/html,<script>fetch(\'{b}/39\')</script>"></object>',
        f'<iframe data-xss=40 srcdoc="<script>fetch(\'{b}/40\')</script>"></iframe>',
        f'<svg><a data-xss=41 href="javascript:fetch(\'{b}/41\')"><text>x</text></a></svg>',
        f'<img data-xss=42 src=x onerror=&#x66;etch(\'{b}/42\')>',
        f'<sCrIpT data-xss=43 SrC="{b}/43"></ScRiPt>',
        f'<<img data-xss=44 src="{b}/44">',
        f'<img/data-xss=45/src="{b}/45">',
        f'<div data-xss=46 id="x" popover onbeforetoggle="fetch(\'{b}/46\')">x</div>',
        # Template and formatting syntaxes a renderer might fill in.
        '${csrf} $csrf ${body} <b data-xss=47>$title</b>',
        '{{csrf}} {{ 7*7 }} <b data-xss=48>{% raw %}</b>',
        '%(csrf)s %s <b data-xss=49>%(body)s</b>',
        f'&lt;img data-xss=50 src="{b}/50"&gt; <i data-xss=50>&amp;</i>',
    ]


class Beacon:
    """A loopback HTTP server counting every request made to it."""

    def __init__(self):
        self.hits: list[str] = []
        beacon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                beacon.hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _session(user: Path, texts: list[str]) -> Path:
    """Write a Claude Code session whose messages are texts, in a project folder and branch made of markup."""
    project = user / ".claude" / "projects" / '-x-<b data-xss=dir>'
    project.mkdir(parents=True)
    lines, parent = [], None
    for i, text in enumerate(texts):
        role = "user" if i % 2 == 0 else "assistant"
        uid = f"00000000-0000-4000-8000-{i:012d}"
        rec = {"parentUuid": parent, "isSidechain": False, "userType": "external",
               "cwd": '/home/dev/<svg data-xss=cwd onload=alert(1)>', "sessionId": SESSION, "version": "1.0.98",
               "gitBranch": '<img data-xss=branch src=x>', "type": role, "uuid": uid,
               "timestamp": f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}.000Z",
               "message": ({"role": "user", "content": text} if role == "user" else
                           {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
                            "content": [{"type": "text", "text": text}]})}
        lines.append(json.dumps(rec))
        parent = uid
    path = project / f"{SESSION}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def xss_hub(tmp_path):
    beacon = Beacon()
    texts = payloads(beacon.url)
    user = tmp_path / "user"
    _session(user, texts)
    home = tmp_path / "hub"
    report = run_sync(user, home)
    assert report["events_added"] >= len(texts), report
    # An entry whose text is a payload too, citing the first message.
    entry_text = f'Decision <img data-xss=entry src="{beacon.url}/entry"> and ${{csrf}} kept as typed'
    p = subprocess.run(origin_argv("remember", entry_text, "--kind", "memory", "--quote", "data-xss=1", "--json"),
                       env=origin_env(user, home), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    entry_id = json.loads(p.stdout)["id"]
    hub = Hub(home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": PASSWORD})
    yield hub, beacon, texts, entry_id, entry_text
    hub.stop()
    beacon.close()


def test_fifty_stored_payloads_are_shown_as_text_and_run_nothing(browser, xss_hub):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    hub, beacon, texts, entry_id, entry_text = xss_hub
    base = f"http://127.0.0.1:{hub.port}"
    b = browser
    b.delete_all_cookies()
    b.get(base + "/admin/login")
    b.find_element(By.ID, "password").send_keys(PASSWORD + Keys.ENTER)
    WebDriverWait(b, 60).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".chart")))
    b.get_log("browser")

    with __import__("sqlite3").connect(hub.home / "origin.db") as conn:
        events = [r[0] for r in conn.execute("SELECT id FROM event WHERE session = ? ORDER BY seq", (SESSION,))]
    assert len(events) >= len(texts)
    q = urllib.parse.quote
    pages = ["/admin/", "/admin/timeline?since=5000d", "/admin/search?q=data-xss",
             "/admin/search?q=" + q("csrf"), "/admin/entries", "/admin/entries?history=1",
             f"/admin/entry?id={q(entry_id)}", f"/admin/forget?id={q(entry_id)}",
             f"/admin/session?id={q(SESSION)}&source=claude-code",
             f"/admin/session?id={q(SESSION)}&source=claude-code&tools=1"]
    pages += [f"/admin/event?id={q(e)}" for e in events] + [f"/admin/event?id={q(events[0])}&raw=1"]
    shown = ""
    for path in pages:
        b.get(base + path)
        injected = b.execute_script("return Array.from(document.querySelectorAll('[data-xss]'))"
                                    ".map(e => e.outerHTML.slice(0, 120))")
        assert injected == [], (path, injected)
        assert b.execute_script("return document.querySelectorAll('base, meta[http-equiv]').length") == 0, path
        logs = b.get_log("browser")
        assert [e for e in logs if e["level"] in ("SEVERE", "WARNING")] == [], (path, logs)
        shown += b.execute_script("return document.body.innerText")
    # The raw line loads in place on the event page (the page's own script).
    b.get(base + f"/admin/event?id={q(events[1])}")
    b.find_element(By.ID, "raw-link").click()
    WebDriverWait(b, 60).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#raw-slot pre.raw")))
    assert b.execute_script("return document.querySelectorAll('[data-xss]').length") == 0
    assert "data-xss=2" in b.find_element(By.CSS_SELECTOR, "#raw-slot pre.raw").text
    assert [e for e in b.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []

    assert beacon.hits == [], beacon.hits
    # Each payload is on some page as the text it is: nothing dropped, decoded or filled in.
    for text in texts:
        assert text in shown, text
    assert entry_text in shown
    assert "data-xss=cwd" in shown  # the project's name, made of markup
