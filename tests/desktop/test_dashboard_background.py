"""Issue 17: the desktop tells you what the engine is doing (SPEC DT-1, DT-4).

A real daemon, a real `memories dashboard` and Debian's chromium: while 4,000 imported notes
are indexed in the background, the side bar and the Status tab show "Indexing N of 4,000…"
with a progress bar, a search says its results may be incomplete, and all of it goes away by
itself when the work ends. States and texts are asserted, never times.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.desktop.browser import run_in_browser, wait_until
from tests.desktop.support import Dashboard, start_dashboard, stop_process
from tests.desktop.test_dashboard_vault import _shot
from tests.helpers import Cli

NOTES = 4000
WORDS = "garden river lantern harbor meadow copper violet orchard summit willow ember quartz".split()
PROGRESS = re.compile(r"^Indexing( new items)? [\d,]+ of [\d,]+…$")


def notes(start: int, count: int) -> list[dict[str, Any]]:
    # Long enough bodies that segmenting them takes the catch-up job a while to work through.
    return [
        {"title": f"Note {n}", "body": " ".join(WORDS[(n * 7 + k * 3) % len(WORDS)] + str(k % 50) for k in range(150))}
        for n in range(start, start + count)
    ]


@pytest.fixture
def dashboard_vault(tmp_path: Path) -> Iterator[tuple[Cli, Dashboard]]:
    cli = Cli(home=tmp_path / "home")
    cli.init()
    dash = start_dashboard(cli, tmp_path / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        yield cli, dash
    finally:
        stop_process(dash.proc)
        cli.stop()


def test_background_indexing_shows_progress_and_then_goes_away(dashboard_vault: tuple[Cli, Dashboard], tmp_path: Path) -> None:
    """DT-1, DT-4 (issue 17): the running index job appears in the side bar and on the Status
    tab as counts with a progress bar, a search meanwhile is marked partial, and both disappear
    when the job is done."""
    cli, dash = dashboard_vault
    imported: list[dict[str, Any]] = []

    def import_notes() -> None:
        with IpcClient(Paths(cli.home).socket) as client:
            imported.append(client.request({"op": "import_batch", "items": notes(0, NOTES)}))

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#status-line[data-state='unlocked']")
        await page.click("#nav-status")
        await page.wait_for_selector("#status-jobs-idle:not([hidden])")
        assert await page.locator("#activity-bar").is_hidden()
        worker = threading.Thread(target=import_notes)
        worker.start()
        try:
            await page.wait_for_selector("#activity-bar:not([hidden])", timeout=120_000)
            # The job names its total after taking its first batch; until then the bar is
            # indeterminate ("Indexing new items…").
            await wait_until(
                page,
                "re => new RegExp(re).test(document.getElementById('activity-text').textContent)",
                arg=PROGRESS.pattern,
                timeout=120,
            )
            side = (await page.text_content("#activity-text")) or ""
            assert PROGRESS.match(side), side
            row = page.locator("#status-jobs li[data-job]").first
            assert PROGRESS.match((await row.text_content()) or ""), await row.text_content()
            bar = page.locator("#activity-progress")
            assert int((await bar.get_attribute("max")) or 0) >= NOTES  # a determinate bar over every note
            assert await page.locator("#status-jobs-idle").is_hidden()
            await _shot(page, "dashboard-background-progress.png", tmp_path)

            # A search meanwhile says whether its index was complete, in words a person reads.
            await page.click("#nav-cards")
            async with page.expect_response(lambda r: "/api/search?" in r.url) as answer:
                await page.fill("#search", "lantern7")
            partial = (await (await answer.value).json())["partial"]
            note = page.locator("#list-note")
            await page.wait_for_selector("#list-note:has-text('for “lantern7”')")
            assert ("Still indexing: results may be incomplete" in ((await note.text_content()) or "")) is partial
            if partial:
                await _shot(page, "dashboard-search-partial.png", tmp_path)
            await page.click("#nav-status")

            # When the work ends, the bar and the rows go by themselves.
            await page.wait_for_selector("#activity-bar", state="hidden", timeout=300_000)
            await page.wait_for_selector("#status-jobs-idle:not([hidden])")
            assert await page.locator("#status-jobs li").count() == 0
        finally:
            worker.join(300)
        assert len(imported) == 1, "the import did not answer"

    run_in_browser(dash.url, scenario)
    # The engine's own follow-up work (the word postings' catch-up, a second after indexing,
    # which the page does not name) ends by itself too.
    deadline = time.monotonic() + 60
    while [j for j in cli.ok("status")["jobs"] if j["state"] == "running"]:
        assert time.monotonic() < deadline, cli.ok("status")["jobs"]
        time.sleep(0.2)


def test_locked_dashboard_shows_no_activity(dashboard_vault: tuple[Cli, Dashboard]) -> None:
    """DT-1: a locked engine says only "locked": no activity reaches the page."""
    cli, dash = dashboard_vault
    cli.ok("lock")
    dash.wait_state("locked")

    async def scenario(page: Any) -> None:
        await page.wait_for_selector("#status-line[data-state='locked']")
        await page.click("#nav-status")
        assert await page.locator("#activity-bar").is_hidden()
        assert await page.locator("#status-jobs li").count() == 0

    run_in_browser(dash.url, scenario)
    assert dash.status()["probe"]["status"] == {"state": "locked"}
