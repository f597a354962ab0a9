"""Admin pages over real HTTP: quotes, the project filter, the hub's front page, same-text forgets.

A real `origin serve --admin` on loopback, over a store of Claude Code
sessions written for these tests: two projects with entries that quote
their sources, and one line of boilerplate said in four sessions of three
projects.
"""

from __future__ import annotations

import re
import urllib.parse

import pytest

from helpers import BOILERPLATE, Browser, EGRET_QUOTE, Hub, PASSWORD, SECURITY, _pages_home, db

pytestmark = pytest.mark.usefixtures("_no_hub_left_running")  # kill the hubs a test leaves running


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    home, ids = _pages_home(tmp_path_factory.mktemp("adminpages"))
    h = Hub(home, "--listen", "127.0.0.1:0", "--admin", env={"ORIGIN_ADMIN_PASSWORD": PASSWORD}, track=False)
    yield h, ids
    h.stop()


@pytest.fixture
def owner(pages) -> Browser:
    b = Browser(pages[0].port)
    assert b.login().status == 303
    return b


def test_an_entrys_page_shows_each_sources_quote(pages, owner):
    hub, ids = pages
    page = owner.get("/admin/entry?id=" + ids["egret"])
    assert page.status == 200
    # Before, the page listed the cited event ids only.
    assert re.search(r'<blockquote class="quote">' + re.escape(EGRET_QUOTE) + "</blockquote>", page.text)


def test_the_entries_page_filters_by_project(pages, owner):
    hub, ids = pages
    everything = owner.get("/admin/entries").text
    assert ids["heron"] in everything and ids["egret"] in everything
    assert re.search(r'<select id="e-project" name="project"><option value="">any</option>'
                     r'<option value="egret">egret</option><option value="heron">heron</option></select>', everything)
    heron = owner.get("/admin/entries?project=heron").text
    assert ids["heron"] in heron and ids["egret"] not in heron
    assert '<option value="heron" selected>heron</option>' in heron
    nothing = owner.get("/admin/entries?project=kite").text
    assert ids["heron"] not in nothing and "No entries match." in nothing


def test_the_hub_answers_its_root_with_a_link_to_the_admin_page_when_it_is_on(pages, tmp_path):
    hub, _ids = pages
    r = Browser(hub.port).get("/")
    # Before, / was a JSON 404 even with the admin page on.
    assert r.status == 200 and r.hdrs["content-type"] == ["text/html; charset=utf-8"]
    assert '<a class="button" href="/admin/">Open the admin page</a>' in r.text
    for k, v in SECURITY.items():
        assert r.hdrs.get(k) == [v], k
    assert Browser(hub.port, host_header="evil.example").get("/").status == 421  # the admin page's host rule
    off = Hub(tmp_path / "off", "--listen", "127.0.0.1:0")
    try:
        assert Browser(off.port).get("/").status == 404
    finally:
        off.stop()


def test_the_forget_page_says_how_far_the_same_text_reaches_and_can_hide_it(pages, owner):
    hub, ids = pages
    target = ids["target"]
    page = owner.get("/admin/forget?" + urllib.parse.urlencode({"id": target}))
    # Before, the page said nothing of the copies, and could not hide them.
    assert "3 other events with the same text, in 3 other sessions and 2 other projects stay visible" in page.text
    link = re.search(r'href="(/admin/forget\?[^"]*same_text=1[^"]*)"', page.text).group(1)
    same = owner.get(link.replace("&amp;", "&"))
    assert "Also hides 3 other events with the same text, in 3 other sessions and 2 other projects" in same.text
    assert '<input type="hidden" name="same_text" value="1">' in same.text
    digest = re.search(r'name="digest" value="([0-9a-f]+)"', same.text).group(1)
    r = owner.post("/admin/forget", {"id": target, "confirm": target, "digest": digest, "same_text": "1"})
    assert r.status == 200 and "hid 4 events" in r.text
    with db(hub.home) as conn:
        hidden = {x[0] for x in conn.execute("SELECT event_id FROM excluded_event")}
        copies = {x[0] for x in conn.execute("SELECT id FROM event WHERE text = ?", (BOILERPLATE,))}
        (details,) = conn.execute("SELECT details FROM audit_log WHERE action = 'forget'").fetchone()
    assert copies == hidden and len(copies) == 4
    assert '"events":4' in details
