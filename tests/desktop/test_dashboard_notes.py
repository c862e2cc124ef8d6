"""Issue 31 (DT-8): notes that read like notes — Markdown rendered and sanitized in the Read
tab with the raw text one click away, and ``[[Title]]`` wikilinks that open the item they name.

One real daemon and one real `memories dashboard`; flows run in Debian's chromium through
Playwright, with every request the page makes logged so a remote image or a script fetch
would show; axe-core checks the Read tab light and dark.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desktop.dashboard.markdown import render, wikilink_titles
from tests.desktop.browser import run_in_browser, wait_until
from tests.desktop.support import Dashboard, save_artifact, start_dashboard, stop_process
from tests.desktop.test_dashboard_a11y import AXE_TAGS, FAILING_IMPACTS, _axe_source
from tests.helpers import Cli

HOSTILE = """# Trip plan

Pack **boots** and read [[Flour types]] before leaving; see also [[Nowhere to be found]].

<script>window.__pwned = 1</script>
<img src="http://198.51.100.7/track.png" onerror="window.__pwned = 2">
![tracker](http://198.51.100.7/pixel.gif)
[click me](javascript:window.__pwned=3) and [data](data:text/html,<script>window.__pwned=4</script>)
<a href="#" onclick="window.__pwned=5">inline handler</a>

- one
- two

`[[not a link]]`
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("notes")
    cli = Cli(home=tmp / "home")
    cli.init()
    dash = None
    try:
        target = cli.put("Flour types", "T55 for bread, **T65** for baguettes.", "food")
        note = cli.put("Trip plan", HOSTILE, "travel")
        packing = cli.put("Packing list", "tent\nstove", "travel")
        cli.ok("edit", packing["id"], "--title", "Packing list (short)", "--body", "tent")
        binned = cli.put("Old itinerary", "Day 1: Lyon", "travel")
        cli.ok("delete", binned["id"])
        dash = start_dashboard(cli, tmp / "dashboard.log")
        dash.wait_state("unlocked", "attention")
        yield {"cli": cli, "dash": dash, "tmp": tmp, "target": target, "note": note, "packing": packing, "binned": binned}
    finally:
        if dash is not None:
            stop_process(dash.proc)
        cli.stop()


async def _open_read(page: Any, item_id: str) -> None:
    await page.wait_for_selector("#card-list button.card")
    await page.click(f"#card-list button[data-id='{item_id}']")
    await page.wait_for_selector("#editor:not([hidden])")
    await page.click("#tab-read")
    await page.wait_for_selector("#rendered h1, #rendered p")


def test_markdown_renders_sanitized_with_raw_one_click_away(seeded: dict[str, Any]) -> None:
    """DT-8: the Read tab renders Markdown; a hostile <script>, a remote <img> with onerror, a
    remote Markdown image, javascript:/data: links and an inline handler neither run nor make
    a request (every request is logged), their text is still shown, and "Show raw text"
    shows the note exactly as written."""
    dash: Dashboard = seeded["dash"]
    origin = urlsplit(dash.url).netloc
    requests: list[str] = []

    async def scenario(page: Any) -> None:
        async def log(route: Any) -> None:
            requests.append(route.request.url)
            await route.continue_()

        await page.route("**/*", log)
        await _open_read(page, seeded["note"]["id"])
        rendered = page.locator("#rendered")
        assert await rendered.locator("h1").inner_text() == "Trip plan"
        assert await rendered.locator("strong").inner_text() == "boots"
        assert await rendered.locator("li").count() == 2
        text = await rendered.inner_text()
        assert "<script>window.__pwned = 1</script>" in text  # shown as text, not run
        assert 'onerror="window.__pwned = 2"' in text
        assert "[image: tracker]" in text
        assert await rendered.locator("script, img, iframe, [onerror], [onclick], [style]").count() == 0
        hrefs = await rendered.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert not [h for h in hrefs if h and not h.startswith(("#item=", "http://", "https://", "mailto:"))], hrefs
        await page.click("#rendered >> text=inline handler")  # a plain text now: clicking does nothing
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        await page.click("#read-raw")
        await page.wait_for_selector("#raw-text:not([hidden])")
        assert await page.locator("#rendered").is_hidden()
        assert await page.locator("#raw-text").text_content() == HOSTILE
        assert await page.get_attribute("#read-raw", "aria-pressed") == "true"
        path = seeded["tmp"] / "dashboard-read-raw.png"
        await page.screenshot(path=str(path))
        save_artifact(path)
        await page.click("#read-raw")
        await page.wait_for_selector("#rendered:not([hidden])")
        assert await page.evaluate("typeof window.__pwned") == "undefined"

    run_in_browser(dash.url, scenario)
    assert requests, "the route log saw the page's own requests"
    outside = [u for u in requests if urlsplit(u).netloc != origin]
    assert outside == [], outside


def test_wikilink_opens_the_named_item_and_unresolved_is_marked(seeded: dict[str, Any]) -> None:
    """DT-8: [[Flour types]] is a link that opens that item; [[Nowhere to be found]] is shown
    as an unresolved link (no target, a note says it matches no item); [[…]] in code stays code."""
    dash: Dashboard = seeded["dash"]
    target = seeded["target"]

    async def scenario(page: Any) -> None:
        await _open_read(page, seeded["note"]["id"])
        link = page.locator("#rendered a.wikilink")
        assert await link.count() == 1
        assert await link.get_attribute("href") == "#item=" + target["id"]
        missing = page.locator("#rendered .wikilink.missing")
        assert await missing.inner_text() == "Nowhere to be found"
        await page.wait_for_selector("#read-note:has-text('1 linked title matches no item')")
        assert await page.locator("#rendered code").inner_text() == "[[not a link]]"
        await link.click()
        await page.wait_for_selector(f"#card-id:has-text('{target['short_id']}')")
        await page.wait_for_selector("#rendered strong:has-text('T65')")
        assert await page.get_attribute("#tab-read", "aria-selected") == "true"

    run_in_browser(dash.url, scenario)


def test_history_restore_button_writes_a_new_revision(seeded: dict[str, Any]) -> None:
    """DT-8, HI-3: in History, an earlier revision has "Restore this version"; it writes that
    revision's text as a new current revision (the editor shows it), and the history grows."""
    dash: Dashboard = seeded["dash"]
    cli: Cli = seeded["cli"]
    packing = seeded["packing"]

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#card-list button.card")
        await page.click(f"#card-list button[data-id='{packing['id']}']")
        await page.wait_for_selector("#editor:not([hidden])")
        await page.click("#tab-history")
        await page.wait_for_selector("#revisions button.rev.selected")
        assert await page.locator("#restore-rev").is_hidden()  # the current revision is not restorable
        await page.click(f"#revisions button.rev[data-revision='{packing['revision']}']")
        await page.wait_for_selector("#restore-rev:not([hidden])")
        path = seeded["tmp"] / "dashboard-history-restore.png"
        await page.screenshot(path=str(path))
        save_artifact(path)
        await page.click("#restore-rev")
        await page.wait_for_selector("#restore-note:has-text('Restored: it is now revision')")
        await wait_until(page, "document.querySelectorAll('#revisions button.rev').length === 3")
        await page.click("#tab-read")
        await page.wait_for_selector("#rendered p:has-text('stove')")

    run_in_browser(dash.url, scenario)
    now = cli.ok("get", packing["id"])
    assert (now["title"], now["body"]) == ("Packing list", "tent\nstove")
    history = cli.ok("history", packing["id"])["revisions"]
    assert len(history) == 3 and history[-1]["title"] == "Packing list"


def test_trash_lists_deleted_items_and_restores_one(seeded: dict[str, Any]) -> None:
    """DT-8: the Trash page lists deleted items by title; Restore brings one back (it leaves
    the trash, reappears in the vault list with its text, and its history keeps the tombstone)."""
    dash: Dashboard = seeded["dash"]
    cli: Cli = seeded["cli"]
    binned = seeded["binned"]

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#card-list button.card")
        assert await page.locator(f"#card-list button[data-id='{binned['id']}']").count() == 0
        await page.click("#nav-trash")
        row = page.locator(f"#trash-rows tr[data-id='{binned['id']}']")
        await row.wait_for()
        assert "Old itinerary" in await row.inner_text()
        for dark in (False, True):
            await page.emulate_media(color_scheme="dark" if dark else "light")
            path = seeded["tmp"] / f"dashboard-trash-{'dark' if dark else 'light'}.png"
            await page.screenshot(path=str(path))
            save_artifact(path)
        await page.emulate_media(color_scheme="light")
        await row.get_by_role("button", name="Restore Old itinerary").click()
        await page.wait_for_selector("#trash-note:has-text('Restored “Old itinerary”')")
        assert await page.locator(f"#trash-rows tr[data-id='{binned['id']}']").count() == 0
        await page.click("#trash-note button")
        await page.wait_for_selector(f"#card-id:has-text('{cli.ok('get', binned['id'])['short_id']}')")
        await page.wait_for_selector(f"#card-list button[data-id='{binned['id']}']")

    run_in_browser(dash.url, scenario)
    assert cli.ok("get", binned["id"])["body"] == "Day 1: Lyon"
    assert binned["id"] not in {i["id"] for i in cli.ok("trash")["items"]}
    assert any(r["tombstone"] for r in cli.ok("history", binned["id"])["revisions"])


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_read_tab_passes_axe(seeded: dict[str, Any], dark: bool) -> None:
    """DT-5/DT-8: axe-core finds no serious or critical violation on the Read tab (rendered
    and raw), the History tab and the Trash page, light and dark; screenshots kept."""
    dash: Dashboard = seeded["dash"]
    failures: list[str] = []

    async def check(page: Any, state: str) -> None:
        path = seeded["tmp"] / f"dashboard-read-{state}-{'dark' if dark else 'light'}.png"
        await page.screenshot(path=str(path))
        save_artifact(path)
        result = await page.evaluate(
            "opts => axe.run(document, opts)", {"runOnly": {"type": "tag", "values": AXE_TAGS}, "resultTypes": ["violations"]}
        )
        for v in result["violations"]:
            if v.get("impact") in FAILING_IMPACTS:
                failures.append(f"{state}: {v['id']} {v['help']} at {[n.get('target') for n in v['nodes']][:5]}")

    async def scenario(page: Any) -> None:
        await page.add_script_tag(content=_axe_source())
        await _open_read(page, seeded["note"]["id"])
        await check(page, "rendered")
        await page.click("#read-raw")
        await page.wait_for_selector("#raw-text:not([hidden])")
        await check(page, "raw")
        await page.click("#tab-history")
        await page.wait_for_selector("#revisions button.rev.selected")
        await check(page, "history")
        await page.click("#nav-trash")
        await page.wait_for_selector("#trash-note:has-text('empty'), #trash-rows tr")
        await check(page, "trash")

    run_in_browser(dash.url, scenario, dark=dark, bypass_csp=True, console="none")
    assert failures == [], failures


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend((k, v or "") for k, v in attrs)


def test_render_units() -> None:
    """DT-8: the renderer alone — raw HTML escaped, images as alt text, unsafe schemes refused,
    wikilinks resolved by exact title only and never inside code."""
    html = render(HOSTILE, {"Flour types": "ab" * 16})
    parser = _Tags()
    parser.feed(html)
    assert not parser.tags & {"script", "img", "iframe", "style"}, parser.tags
    assert not [a for a in parser.attrs if a[0].startswith("on") or a[0] == "style"], parser.attrs
    hrefs = [v for k, v in parser.attrs if k == "href"]
    assert all(h.startswith(("#item=", "http", "mailto:")) for h in hrefs), hrefs
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html  # kept as text
    assert f'href="#item={"ab" * 16}"' in html
    assert '<span class="wikilink missing"' in html
    assert "<code>[[not a link]]</code>" in html
    assert wikilink_titles("[[A]] [[b|label]] [[A]]") == ["A", "b"]
    assert 'class="wikilink"' not in render("[[flour types]]", {"Flour types": "x" * 32})  # exact title only


_PIECES = st.sampled_from(
    ["<script>", "</script>", "<img src=x onerror=y>", "[[", "]]", "|", "[a](", "javascript:", "data:", ")", "![i](",
     "http://h/p.png", "`", "\n", "> ", "- ", "# ", "<a href=", "onclick=", "\"", "'", "<style>", "&", "Flour types"]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=30).map("".join))
def test_render_never_emits_active_content(text: str) -> None:
    """DT-8: whatever a note holds, the rendered HTML has no script, image, frame or style
    element, no event-handler or style attribute, and only safe link targets."""
    parser = _Tags()
    parser.feed(render(text, {"Flour types": "ab" * 16}))
    assert not parser.tags & {"script", "img", "iframe", "style", "object", "embed", "svg", "form"}
    assert not [a for a in parser.attrs if a[0].startswith("on") or a[0] in ("style", "src")]
    assert all(
        v.startswith(("#item=", "http://", "https://", "mailto:")) or ":" not in v.split("/")[0]
        for k, v in parser.attrs
        if k == "href"
    )


def test_notes_routes_have_the_guards_and_refuse_protected_items(seeded: dict[str, Any]) -> None:
    """DT-5, API-6, DT-8: the rendered, restore and trash routes need the token and this
    listener's Host, refuse cross-site requests and foreign Origins, and serve no protected
    item (a login's rendered view and restore are refused, its canary never in an answer)."""
    dash: Dashboard = seeded["dash"]
    cli: Cli = seeded["cli"]
    canary = "NOTES-CANARY-pw-31d8"
    login = cli.ok("login", "new", "--title", "Notes bank", "--username", "u", "--password-stdin", input=canary)
    note_id = seeded["note"]["id"]
    cases: list[tuple[dict[str, Any], int]] = [
        ({"token": None}, 401),
        ({"token": "wrong"}, 401),
        ({"host": f"evil.example:{dash.port}"}, 403),
        ({"headers": {"Sec-Fetch-Site": "cross-site"}}, 403),
    ]
    for path in (f"/api/cards/{note_id}/rendered", "/api/trash"):
        assert dash.request("GET", path)[0] == 200, path
        for case, status in cases:
            code, _, body = dash.request("GET", path, **case)
            assert (code, set(body)) == (status, {"error"}), (path, case)
        assert dash.request("POST", path, {})[0] == 405, path
    restore = f"/api/cards/{note_id}/restore"
    rev = seeded["note"]["revision"]
    for case, status in [*cases, ({"origin": "http://evil.example"}, 403)]:
        assert dash.request("POST", restore, {"revision": rev}, **case)[0] == status, case
    assert dash.request("POST", restore, {"revision": "nothex"})[0] == 400
    assert dash.request("POST", restore, {"revision": rev, "extra": 1})[0] == 400
    assert dash.request("POST", f"/api/trash/{note_id}/restore", {}, origin="http://evil.example")[0] == 403
    for method, path, body in (
        ("GET", f"/api/cards/{login['id']}/rendered", None),
        ("POST", f"/api/cards/{login['id']}/restore", {"revision": login["revision"]}),
        ("POST", f"/api/trash/{login['id']}/restore", {}),
    ):
        code, _, answer = dash.request(method, path, body)
        assert code == 400 and set(answer) == {"error"}, (path, code, answer)
        assert canary not in str(answer)
    assert len(cli.ok("history", note_id)["revisions"]) == 1  # every refusal changed nothing


def test_read_tab_resolves_names_as_the_graph_does(seeded: dict[str, Any]) -> None:
    """DT-8: the Read tab and the graph agree: [[flour TYPES#Kinds|…]] and [[Food/Flour types.md]]
    both open "Flour types" (case-insensitive, heading dropped, path and .md ignored), and the
    engine made the same note a graph link."""
    dash: Dashboard = seeded["dash"]
    cli: Cli = seeded["cli"]
    target = seeded["target"]["id"]
    note = cli.put("Bake day", "Read [[flour TYPES#Kinds|the kinds]] and [[Food/Flour types.md]].")
    assert note["wikilinks"]["linked"] == 1
    status, _, rendered = dash.request("GET", f"/api/cards/{note['id']}/rendered")
    assert status == 200
    assert rendered["wikilinks"] == [{"title": "flour TYPES", "id": target}, {"title": "Food/Flour types.md", "id": target}]
    assert rendered["html"].count(f'href="#item={target}"') == 2 and ">the kinds</a>" in rendered["html"]
    edges = cli.ok("card", "connections", note["id"], "--direction", "out")["edges"]
    assert [(e["dst"], e["rel"]) for e in edges] == [(target, "wikilink")]
