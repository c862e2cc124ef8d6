"""One Debian chromium per test through Playwright's async API, for the dashboard tests.

``console`` says which console errors fail the test besides uncaught page errors: ``all``,
only Content-Security-Policy violations (``csp``, for pages that expect refused requests
to log), or ``none`` (the accessibility walk, whose injected axe-core may log).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from tests.helpers import require

__all__ = ["ARGS", "CHROMIUM", "Scenario", "run_in_browser", "wait_until"]

CHROMIUM = os.environ.get("MEMORIES_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

Scenario = Callable[[Any], Awaitable[None]]


async def wait_until(page: Any, expression: str, arg: Any = None, timeout: float = 60.0) -> Any:
    """Poll ``page.evaluate(expression, arg)`` until it is truthy; its value, or AssertionError.

    Instead of Playwright's ``wait_for_function``: once its predicate must be polled, it is run
    with ``eval`` inside the page, which the dashboard's CSP (no 'unsafe-eval') refuses — so a
    wait that was true at once passed and the same wait on a slower run failed.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await page.evaluate(expression, arg)
        if value:
            return value
        if loop.time() >= end:
            raise AssertionError(f"never true within {timeout:.0f} s: {expression}")
        await asyncio.sleep(0.05)


def run_in_browser(
    url: str,
    scenario: Scenario,
    *,
    width: int = 1280,
    height: int = 800,
    dark: bool = False,
    bypass_csp: bool = False,
    console: Literal["all", "csp", "none"] = "all",
) -> None:
    """Open ``url`` in a fresh chromium, run ``scenario(page)``, and fail on script errors."""
    require(shutil.which(CHROMIUM) is not None or Path(CHROMIUM).exists(), "chromium (apt: chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        require(False, "playwright (pip: the dev extra)")
        raise

    def on_console(errors: list[str], msg: Any) -> None:
        if msg.type != "error" or console == "none":
            return
        if console == "all" or "Content Security" in msg.text:
            errors.append(msg.text)

    async def main() -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                context = await browser.new_context(
                    viewport={"width": width, "height": height},
                    color_scheme="dark" if dark else "light",
                    bypass_csp=bypass_csp,
                )
                page = await context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on("console", lambda msg: on_console(errors, msg))
                await page.goto(url)
                await scenario(page)
                assert errors == [], errors  # no script errors (and no CSP violations unless told)
            finally:
                await browser.close()

    asyncio.run(main())
