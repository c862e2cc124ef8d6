"""DT-5 in a real browser: Debian's chromium driven by Playwright loads the dashboard,
sees the status, edits a card, and the CLI shows the new revision."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from tests.desktop import browser
from tests.desktop.browser import Scenario
from tests.desktop.support import Dashboard, save_artifact
from tests.helpers import Cli

CANARY = "CANARY-browser-private-91c2"


def run_in_browser(url: str, scenario: Scenario) -> None:
    """The status-page viewport; refused requests may log, so only CSP violations fail."""
    browser.run_in_browser(url, scenario, height=720, console="csp")


async def _shot(page: Any, path: Path) -> None:
    await page.screenshot(path=str(path))
    save_artifact(path)


def test_browser_status_edit_and_save(dashboard: Dashboard, module_vault: Cli, tmp_path: Path) -> None:
    """DT-5: status page, card editor, save; the CLI sees the new revision; no private value
    shown; without the token the page gets nothing."""
    put = module_vault.ok("put", "--title", "Browser card", "--body", "old body", "--tag", "t1", "--meta", f"private={CANARY}")

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#status-line[data-state='unlocked'], #status-line[data-state='attention']")
        assert page.url.endswith("/")  # the token left the address bar
        assert await page.text_content("#backend") == "none"
        # Issue 32: what the vault takes on disk, in the units the CLI prints.
        await _shot(page, tmp_path / "dashboard-status.png")
        await page.click("#nav-status")
        await page.wait_for_selector("#status-storage")
        assert re.fullmatch(r"\d+(\.\d)? (KiB|MiB|GiB)", await page.text_content("#status-storage") or "")
        await _shot(page, tmp_path / "dashboard-status-page.png")
        await page.click("#nav-cards")
        await page.click(f"#card-list button[data-id='{put['id']}']")
        await page.wait_for_selector("#field-title")
        assert await page.input_value("#field-title") == "Browser card"
        assert await page.input_value("#field-body") == "old body"
        await page.fill("#field-title", "Browser card, edited")
        await page.fill("#field-body", "new body from the browser")
        await page.fill("#field-tags", "t1, t2")
        await page.click("#save")
        await page.wait_for_selector("#save-result.saved")
        await _shot(page, tmp_path / "dashboard-editor.png")
        content = await page.content()
        assert CANARY not in content
        # The same address without its token: a notice, and no data.
        bare = await page.context.browser.new_page()  # a fresh context: no stored token
        await bare.goto(dashboard.url.split("#", 1)[0])
        await bare.wait_for_selector("#auth-missing:not([hidden])")
        assert await bare.text_content("#status-line") == "Waiting for the first probe…"

    run_in_browser(dashboard.url, scenario)
    after = module_vault.ok("get", put["id"])
    assert (after["title"], after["body"], after["tags"]) == ("Browser card, edited", "new body from the browser", ["t1", "t2"])
    assert after["meta"] == {"private": CANARY}  # untouched: not an editor field
    history = module_vault.ok("history", put["id"])["revisions"]
    assert len(history) == 2


def test_browser_stale_save_shows_conflict(dashboard: Dashboard, module_vault: Cli, tmp_path: Path) -> None:
    """DT-5, DT-7: the page edits the revision it loaded; if the card changed meanwhile under
    unsaved edits it says so, and keeping both makes the conflict (nothing overwritten)."""
    put = module_vault.put("Race", "v1")

    async def scenario(page: Any) -> None:
        await page.click("#nav-cards")
        await page.click(f"#card-list button[data-id='{put['id']}']")
        await page.wait_for_selector("#field-title")
        await page.fill("#field-title", "Race (browser)")
        # Someone else edits the card from the CLI while the page holds revision 1.
        await asyncio.to_thread(module_vault.ok, "edit", put["id"], "--title", "Race (cli)")
        await page.wait_for_selector("#changed-banner:not([hidden])")
        await page.click("#changed-keep")
        await page.wait_for_selector("#save-result.conflict")
        assert "nothing was overwritten" in (await page.text_content("#save-result") or "")
        await _shot(page, tmp_path / "dashboard-conflict.png")

    run_in_browser(dashboard.url, scenario)
    now = module_vault.ok("get", put["id"])
    assert now["conflict"] is True
    assert {h["title"] for h in now["head_contents"]} == {"Race (cli)", "Race (browser)"}
