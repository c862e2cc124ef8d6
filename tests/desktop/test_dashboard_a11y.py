"""Issue 17: every dashboard page and tab passes axe-core in light and dark, with screenshots.

axe-core (MPL-2.0, the copy bundled by the `axe-playwright-python` test dependency) runs in
Debian's chromium through Playwright over every page and tab of a real dashboard: the
vault list, search results, an item's Edit, History (with a diff) and Links tabs, a
protected item's read-only view, a new item, the "discard unsaved changes?" dialog,
Tickets, Activity, Status, Settings and the locked page; and (issue 31) search highlights, a
save's success message, the "changed elsewhere" banner, a conflict and the list's conflict
tag. The test fails on any serious or critical violation, listing each rule and element.
Each state's screenshot is kept as a CI artifact ($MEMORIES_TEST_ARTIFACTS).

The dashboard's CSP forbids injected scripts, so only this test opens its browser context
with ``bypass_csp=True`` to load axe; ``test_csp_blocks_injected_scripts`` proves that a
normal context refuses the same injection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError

from tests.desktop.browser import run_in_browser
from tests.desktop.support import Dashboard, save_artifact
from tests.desktop.test_dashboard_details import seeded  # noqa: F401 - the module's vault fixture
from tests.helpers import Cli, require

FAILING_IMPACTS = {"serious", "critical"}
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def _axe_source() -> str:
    try:
        return (resources.files("axe_playwright_python") / "axe.min.js").read_text("utf-8")
    except ModuleNotFoundError:
        require(False, "axe-core (pip: axe-playwright-python, in the dev extra)")
        raise


def _browser(url: str, scenario: Callable[[Any], Awaitable[None]], *, bypass_csp: bool, dark: bool, width: int) -> None:
    run_in_browser(url, scenario, width=width, height=820, dark=dark, bypass_csp=bypass_csp, console="none")


class Audit:
    """Runs axe on the page's current state, keeps a screenshot, and collects violations."""

    def __init__(self, page: Any, name: str, tmp: Path) -> None:
        self.page, self.name, self.tmp = page, name, tmp
        self.failures: list[str] = []
        self.states: list[str] = []

    async def check(self, state: str) -> None:
        await asyncio.sleep(0.15)  # let the last render and transitions settle for the screenshot
        path = self.tmp / f"dashboard-{self.name}-{state}.png"
        await self.page.screenshot(path=str(path))
        save_artifact(path)
        result = await self.page.evaluate(
            "opts => axe.run(document, opts)", {"runOnly": {"type": "tag", "values": AXE_TAGS}, "resultTypes": ["violations"]}
        )
        self.states.append(state)
        for violation in result["violations"]:
            if violation.get("impact") in FAILING_IMPACTS:
                targets = [" ".join(map(str, node.get("target", []))) for node in violation["nodes"]][:5]
                self.failures.append(f"{state}: {violation['id']} ({violation['impact']}) {violation['help']} at {targets}")


async def _walk_every_page(page: Any, audit: Audit, s: dict[str, Any], narrow: bool) -> None:
    await page.add_script_tag(content=_axe_source())
    await page.wait_for_selector("#card-list button.card")
    await page.wait_for_selector("#protected-filter button")
    await audit.check("vault")
    await page.fill("#search", "bread")
    await page.wait_for_selector("#list-note:has-text('for “bread”')")
    await audit.check("search")
    await page.click(f"#card-list button[data-id='{s['recipe']['id']}']")
    await page.wait_for_selector("#field-title")
    await audit.check("editor")
    await page.click("#tab-history")
    await page.wait_for_selector("#diff-rows tr.diff-added")
    await audit.check("history")
    await page.click("#tab-links")
    await page.wait_for_selector("#hood .hood-group")
    await audit.check("links")
    await page.click("#tab-edit")
    await page.fill("#field-body", "an unsaved change")
    await page.keyboard.press("Escape")  # leaves the field
    await page.keyboard.press("Escape")  # closes the item: asks first
    await page.wait_for_selector("#discard-dialog[open]")
    await audit.check("unsaved-dialog")
    await page.click("#discard-yes")
    await page.wait_for_selector("#discard-dialog", state="hidden")
    await page.wait_for_selector("#editor", state="hidden")
    await page.fill("#search", "")
    await page.click("#protected-filter button[data-kind='protected']")
    await page.wait_for_selector(f"#card-list button[data-id='{s['prot']['id']}']")
    await audit.check("protected-list")
    await page.click(f"#card-list button[data-id='{s['prot']['id']}']")
    await page.wait_for_selector("#locked:not([hidden]) code")
    await audit.check("protected-item")
    if narrow:
        await page.click("#back")
    await page.click("#kind-filter button[data-kind='all']")
    await page.keyboard.press("n")
    await page.wait_for_selector("#field-title:focus")
    await audit.check("new-item")
    await page.keyboard.press("Escape")
    await page.keyboard.press("Escape")
    await page.wait_for_selector("#editor", state="hidden")
    await page.click("#nav-tickets")
    await page.wait_for_selector("#ticket-note:has-text('No pending tickets')")
    await audit.check("tickets")
    await page.click("#nav-activity")
    await page.wait_for_selector("#activity-rows tr")
    await audit.check("activity")
    await page.click("#nav-status")
    await page.wait_for_selector("#status-fields dt")
    await audit.check("status")
    await _walk_issue_31_states(page, audit, s, narrow)
    await page.click("#nav-settings")
    await page.wait_for_selector("#where-theme:has-text('[desktop] theme')")
    await audit.check("settings")  # DT-9
    await asyncio.to_thread(s["cli"].ok, "lock")
    await page.click("#nav-cards")
    await page.wait_for_selector("#gate:not([hidden])")
    await audit.check("locked")
    await asyncio.to_thread(s["cli"].unlock)
    await page.wait_for_selector("#card-list button.card")


async def _walk_issue_31_states(page: Any, audit: Audit, s: dict[str, Any], narrow: bool) -> None:
    """Issue 31's states: search highlights, a save's success message, a conflict (its note,
    the editor's conflict view and the list's "conflict" tag)."""
    cli = s["cli"]
    item = await asyncio.to_thread(cli.put, f"Race {audit.name}", "kneaded rye bread dough")
    await page.click("#nav-cards")
    await page.fill("#search", "kneaded")
    await page.wait_for_selector("#card-list mark")
    await audit.check("search-highlights")
    await page.click(f"#card-list button[data-id='{item['id']}']")
    await page.wait_for_selector("#field-title")
    await page.fill("#field-title", f"Race {audit.name} (saved)")
    await page.click("#save")
    await page.wait_for_selector("#save-result.saved")
    await audit.check("saved")
    await page.fill("#field-title", f"Race {audit.name} (browser)")
    await asyncio.to_thread(cli.ok, "edit", item["id"], "--title", f"Race {audit.name} (cli)")
    await page.wait_for_selector("#changed-banner:not([hidden])")
    await audit.check("changed-banner")
    await page.click("#changed-keep")
    await page.wait_for_selector("#save-result.conflict")
    await page.wait_for_selector("#conflict:not([hidden])")
    await audit.check("conflict")
    if narrow:  # one column: the list is behind the item
        await page.click("#back")
    await page.fill("#search", "")  # the vault list, newest first, marks the conflict
    await page.wait_for_selector(f"#card-list button[data-id='{item['id']}'] .tag.warn")
    await audit.check("conflict-tag")


@pytest.mark.parametrize(
    ("name", "dark", "width"),
    [("light", False, 1280), ("dark", True, 1280), ("narrow-dark", True, 360), ("narrow-light", False, 360)],
)
def test_every_page_passes_axe(seeded: dict[str, Any], name: str, dark: bool, width: int) -> None:  # noqa: F811
    """DT-5 (issue 17): axe-core finds no serious or critical violation (labels, names,
    contrast, landmarks, ARIA) on any page or tab, in light and dark, wide and at 360 px; a
    screenshot of every state is kept as an artifact."""
    dash: Dashboard = seeded["dash"]
    states: list[str] = []

    async def scenario(page: Any) -> None:
        audit = Audit(page, name, seeded["tmp"])
        await _walk_every_page(page, audit, seeded, narrow=width < 760)
        states.extend(audit.states)
        assert audit.failures == [], "\n".join(audit.failures)

    _browser(dash.url, scenario, bypass_csp=True, dark=dark, width=width)
    assert len(states) == 19, states  # every page and tab was audited


def test_csp_blocks_injected_scripts(seeded: dict[str, Any]) -> None:  # noqa: F811
    """DT-5: without the test-only bypass, the page's CSP refuses an injected inline script
    (the reason the accessibility test needs ``bypass_csp``), and the page still works."""
    dash: Dashboard = seeded["dash"]
    cli: Cli = seeded["cli"]
    assert cli.home.exists()

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#card-list button.card")
        refused: list[str] = []
        page.on("console", lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None)
        with contextlib.suppress(PlaywrightError):  # Playwright may report the refused tag as an error
            await page.add_script_tag(content="window.__injected = 1;")
        await asyncio.sleep(0.3)
        assert await page.evaluate("typeof window.__injected") == "undefined"
        assert refused, "the browser reported no CSP refusal"
        assert await page.evaluate("typeof axe") == "undefined"

    _browser(dash.url, scenario, bypass_csp=False, dark=False, width=1280)
