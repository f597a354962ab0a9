"""The admin page in a real browser: Debian's Chromium driven by Selenium.

A fresh hub prints its one-time password; the owner logs in, walks every
page at desktop and phone width (screenshots kept as test artefacts), finds
a session by search, loads a raw line in place, remembers a decision from
its event page, corrects it, creates and revokes a token, and forgets the
entry after the preview.  No page logs a CSP violation or any console
error, and afterwards no page shows the forgotten text.  At phone width the
navigation keeps its labels, the agents table needs no sideways scrolling
and a kind badge keeps its size beside text that wraps; the hub's front
page links to the admin page.

Chromium and its driver come from Debian (`apt-get install chromium
chromium-driver`, run here when they are missing); no browser is ever
downloaded by the test tools.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from helpers import EGRET_QUOTE, Hub, _hub_home, _pages_home, a_message


ROOT = Path(__file__).resolve().parent.parent
#: Screenshots of every page, at both widths, land here.
ARTIFACTS = Path(os.environ.get("ORIGIN_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts")) / "admin"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


class Walk:
    """Visits pages, keeps their screenshots and fails on any console error."""

    def __init__(self, browser, base: str):
        self.b = browser
        self.base = base
        self.shots: list[Path] = []
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def errors(self) -> list[dict]:
        return [e for e in self.b.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]

    def check(self, name: str) -> None:
        errs = self.errors()
        assert errs == [], (name, errs)  # CSP violations and script errors land here
        assert "Content Security Policy" not in str(errs)
        for label, (w, h) in WIDTHS.items():
            self.b.set_window_size(w, h)
            path = ARTIFACTS / f"{name}-{label}.png"
            self.b.save_screenshot(str(path))
            self.shots.append(path)
            if label == "phone":
                # Nothing may push the page wider than the phone.
                width = self.b.execute_script("return document.documentElement.scrollWidth")
                assert width <= w + 1, (name, width)
        self.b.set_window_size(*WIDTHS["desktop"])
        assert self.errors() == [], name

    def open(self, path: str, name: str) -> None:
        self.b.get(self.base + path)
        self.check(name)


def test_owner_walks_every_page_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    home = _hub_home(tmp_path)
    hub = Hub(home, "--listen", "127.0.0.1:0", "--admin")
    password = next(x for x in hub.log if "admin password" in x).rsplit(": ", 1)[1].strip()
    walk = Walk(browser, f"http://127.0.0.1:{hub.port}")
    b = browser
    wait = WebDriverWait(b, 60)

    # Log in: the login page first, then the overview with its chart and devices.
    walk.open("/admin/", "login")
    assert b.current_url.endswith("/admin/login")
    field = b.find_element(By.ID, "password")
    assert b.find_element(By.CSS_SELECTOR, "label[for=password]").text == "Password"
    field.send_keys("not the password")
    field.send_keys(Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".alert")))
    b.get_log("browser")  # the 401 of a wrong password is expected once
    b.find_element(By.ID, "password").send_keys(password + Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".chart svg")))
    walk.check("overview")
    assert b.find_elements(By.CSS_SELECTOR, ".chart rect.bar") or "0 sessions" in b.page_source
    # Dark and light follow prefers-color-scheme.
    light = b.execute_script("return getComputedStyle(document.body).backgroundColor")
    b.execute_cdp_cmd("Emulation.setEmulatedMedia",
                      {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    dark = b.execute_script("return getComputedStyle(document.body).backgroundColor")
    walk.check("overview-dark")
    b.execute_cdp_cmd("Emulation.setEmulatedMedia",
                      {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
    lum = [sum(int(x) for x in re.findall(r"\d+", c)[:3]) for c in (light, dark)]
    assert lum[0] > 600 and lum[1] < 150, (light, dark)
    # Keyboard: the first Tab reaches the skip link, and focus is visible.
    b.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    assert b.switch_to.active_element.get_attribute("class") == "skip"
    outline = b.execute_script("return getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")

    # Find a session by search and open one of its events.
    ev = a_message(home)
    words = " ".join(re.findall(r"[A-Za-z]{4,}", ev["text"])[:3])
    walk.open("/admin/search", "search-empty")
    box = b.find_element(By.ID, "f-q")
    box.send_keys(words + Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".events a")))
    walk.check("search")
    link = next(a for a in b.find_elements(By.CSS_SELECTOR, ".events a")
                if urllib.parse.quote(ev["id"], safe="") in a.get_attribute("href")
                or ev["id"] in urllib.parse.unquote(a.get_attribute("href")))
    link.click()
    wait.until(EC.presence_of_element_located((By.ID, "raw-link")))
    walk.check("event")
    # The raw line loads in place (the small script), with no console error.
    b.find_element(By.ID, "raw-link").click()
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#raw-slot pre.raw")))
    assert b.find_element(By.CSS_SELECTOR, "#raw-slot pre.raw").text
    walk.check("event-raw")

    # Remember a decision from the event page; correct it.
    decision = "Decision okapi-lantern: ship the admin page with no template library"
    b.find_element(By.ID, "r-text").send_keys(decision)
    b.find_element(By.CSS_SELECTOR, "form[action='/admin/remember'] button").click()
    wait.until(EC.url_contains("/admin/entry?"))
    assert decision in b.page_source
    walk.check("entry")
    corrected = decision + ", and a committed assets step"
    text = b.find_element(By.ID, "c-text")
    text.clear()
    text.send_keys(corrected)
    b.find_element(By.CSS_SELECTOR, "form[action='/admin/correct'] button").click()
    wait.until(EC.presence_of_element_located((By.XPATH, "//pre[contains(., 'committed assets step')]")))
    walk.check("entry-corrected")
    entry_id = urllib.parse.parse_qs(urllib.parse.urlsplit(b.current_url).query)["id"][0]

    # Tokens: create (shown once, with the connect line), then revoke.
    walk.open("/admin/tokens", "tokens")
    b.find_element(By.ID, "tname").send_keys("laptop" + Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".created pre")))
    assert "origin hub connect" in b.find_element(By.CSS_SELECTOR, ".created pre").text
    token = re.search(r"ogn_[A-Za-z0-9_-]+", b.page_source).group(0)
    walk.check("token-created")
    walk.open("/admin/tokens", "tokens-list")
    assert token not in b.page_source
    b.find_element(By.XPATH, "//button[contains(., 'Revoke laptop')]").click()
    wait.until(EC.presence_of_element_located((By.XPATH, "//td/span[contains(., 'revoked')]")))
    walk.check("token-revoked")
    # An agent token: /mcp only, so no connect line; the list names its scope.
    Select(b.find_element(By.ID, "tscope")).select_by_value("agent")
    b.find_element(By.ID, "tname").send_keys("helper" + Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".created pre")))
    assert "origin hub connect" not in b.find_element(By.CSS_SELECTOR, ".created").text
    walk.check("token-agent-created")
    assert b.find_element(By.XPATH, "//tr[td[1][.='helper']]/td[2]").text == "agent (/mcp only)"

    # Every other page.
    for path, name in (("/admin/devices", "devices"), ("/admin/timeline?since=5000d", "timeline"),
                       ("/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "source": ev["source"]}),
                        "session"),
                       ("/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "source": ev["source"],
                                                                     "tools": "1"}), "session-tools"),
                       ("/admin/entries", "entries"), ("/admin/entries?history=1", "entries-history"),
                       ("/admin/audit", "audit"), ("/admin/logins", "logins")):
        walk.open(path, name)

    # Forget the entry after the preview; no page shows it again.
    walk.open("/admin/forget?id=" + entry_id, "forget-preview")
    b.find_element(By.ID, "f-confirm").send_keys(entry_id)
    b.find_element(By.CSS_SELECTOR, "form[action='/admin/forget'] button").click()
    wait.until(EC.presence_of_element_located((By.XPATH, "//h1[contains(., 'Forgotten')]")))
    walk.check("forgotten")
    pages = ["/admin/", "/admin/search?q=okapi-lantern", "/admin/search?" + urllib.parse.urlencode({"q": words}),
             "/admin/timeline?since=5000d", "/admin/entries?history=1", "/admin/audit",
             "/admin/session?" + urllib.parse.urlencode({"id": ev["session"], "source": ev["source"], "tools": "1"}),
             "/admin/api/overview"]
    for path in pages:
        b.get(walk.base + path)
        html = b.page_source
        # (The search box itself keeps the words typed; the texts never come back.)
        for text in (decision, corrected, ev["text"][:60], "ship the admin page with no template"):
            assert html.count(text) == 0, (path, text)
    assert "No entries match" in (b.get(walk.base + "/admin/search?q=okapi-lantern") or b.page_source)
    b.get(walk.base + "/admin/event?id=" + urllib.parse.quote(ev["id"]))
    assert "okapi-lantern" not in b.page_source and ev["text"][:60] not in b.page_source
    b.get_log("browser")  # the forgotten event's page answers 410, an expected console line

    # Log out: the overview asks for the password again.
    walk.open("/admin/", "overview-after")
    b.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait.until(EC.url_contains("/admin/login"))
    b.get(walk.base + "/admin/")
    assert b.current_url.endswith("/admin/login")
    hub.stop()
    assert len(walk.shots) >= 2 * 20 and all(p.stat().st_size > 2000 for p in walk.shots)


def test_phone_layout_labels_the_navigation_and_keeps_badges_and_the_agents_table_readable(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    home, ids = _pages_home(tmp_path)
    hub = Hub(home, "--listen", "127.0.0.1:0", "--admin")
    password = next(x for x in hub.log if "admin password" in x).rsplit(": ", 1)[1].strip()
    walk = Walk(browser, f"http://127.0.0.1:{hub.port}")
    b = browser
    wait = WebDriverWait(b, 60)
    b.delete_all_cookies()
    # The hub's front page links to the admin page, which asks for the password.
    walk.open("/", "front")
    b.find_element(By.LINK_TEXT, "Open the admin page").click()
    wait.until(EC.url_contains("/admin/login"))
    b.find_element(By.ID, "password").send_keys(password + Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "table.agents")))
    walk.check("overview-agents")

    def box(el) -> dict:
        return b.execute_script("return arguments[0].getBoundingClientRect().toJSON()", el)

    b.set_window_size(*WIDTHS["phone"])
    try:
        # Every section's name shows beside its icon (before: icons only, names clipped to 1 px).
        for a in b.find_elements(By.CSS_SELECTOR, ".nav a"):
            label = a.find_element(By.TAG_NAME, "span")
            assert label.is_displayed() and box(label)["width"] > 20 and label.text, a.get_attribute("href")
            assert box(a)["right"] <= WIDTHS["phone"][0]
        # The agents table needs no sideways scrolling, and each figure has its label beside it.
        scroll = b.find_element(By.CSS_SELECTOR, "table.agents").find_element(By.XPATH, "..")
        assert b.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", scroll)
        for td in b.find_elements(By.CSS_SELECTOR, "table.agents td[data-label]"):
            shown = b.execute_script("return getComputedStyle(arguments[0], '::before').content", td)
            assert shown == '"' + td.get_attribute("data-label") + '"'
        # The kind badge keeps its own size while the entry's text wraps over several lines.
        for width in ("phone", "desktop"):
            b.set_window_size(*WIDTHS[width])
            b.get(walk.base + "/admin/entries")
            for row in b.find_elements(By.CSS_SELECTOR, ".entries a"):
                badge, text = row.find_element(By.CSS_SELECTOR, ".badge"), row.find_element(By.CSS_SELECTOR, ".text")
                if box(text)["height"] > 2 * box(badge)["height"]:  # the long entry wraps
                    assert box(badge)["width"] < 0.4 * box(row)["width"], width
                    assert box(badge)["height"] < 0.5 * box(text)["height"], width
            assert any(box(r.find_element(By.CSS_SELECTOR, ".text"))["height"]
                       > 2 * box(r.find_element(By.CSS_SELECTOR, ".badge"))["height"]
                       for r in b.find_elements(By.CSS_SELECTOR, ".entries a")), width
        b.set_window_size(*WIDTHS["desktop"])
        walk.open("/admin/entries?project=egret", "entries-egret")
        assert ids["egret"] in b.page_source and ids["heron"] not in b.page_source
        walk.open("/admin/entry?id=" + ids["egret"], "entry-quote")
        assert b.find_element(By.CSS_SELECTOR, "blockquote.quote").text == EGRET_QUOTE
    finally:
        b.set_window_size(*WIDTHS["desktop"])
        hub.stop()
