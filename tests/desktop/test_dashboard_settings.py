"""Issue 31, DT-9: the dashboard's Settings page, in Debian's chromium against a real engine.

A change on the page shows in `memories config` and the reverse; the theme applies at once and
at the next load; bad input is refused with the engine's typed error and changes nothing;
start at login writes and removes this install's login entry (under a private
XDG_CONFIG_HOME). The HTTP route refuses malformed changes without touching config.toml.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop.dashboard.settings import screen_lock_support
from tests.desktop.browser import run_in_browser, wait_until
from tests.desktop.support import Dashboard, start_dashboard, stop_process
from tests.helpers import Cli

DARK_BG = "rgb(22, 24, 29)"  # --bg in dark (app.css)
LIGHT_BG = "rgb(247, 247, 249)"  # --bg in light


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Cli, Dashboard, Path]]:
    xdg = tmp_path / "xdg-config"
    cli = Cli(home=tmp_path / "home", env={"XDG_CONFIG_HOME": str(xdg)})
    cli.init()
    dash = start_dashboard(cli, tmp_path / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        yield cli, dash, xdg
    finally:
        stop_process(dash.proc)
        cli.stop()


async def _background(page: Any) -> str:
    value: str = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    return value


def test_settings_round_trip_theme_and_bad_input(setup: tuple[Cli, Dashboard, Path]) -> None:
    """DT-9: each setting says where it is stored; a page change shows in `memories config get`,
    a `memories config set` shows on the page; the dark theme applies at once (and again after a
    reload) in a light system; 0 minutes is refused with the engine's sentence, marked invalid,
    and config.toml keeps the last good value; start at login writes the XDG autostart entry."""
    cli, dash, xdg = setup
    config_file = cli.home / "config.toml"
    entry = xdg / "autostart" / "memories-tray.desktop"

    async def scenario(page: Any) -> None:
        await page.click("#nav-settings")
        await page.wait_for_selector("#where-idle_lock_minutes:has-text('[engine] idle_lock_minutes')")
        assert await page.input_value("#set-idle_lock_minutes") == "15"
        assert str(config_file) in await page.text_content("#where-clipboard_clear_seconds")
        assert "[clipboard] clear_seconds" in await page.text_content("#where-clipboard_clear_seconds")
        assert str(entry) in await page.text_content("#where-start_at_login")
        assert await page.is_checked("#set-lock_on_screen_lock")
        assert "D-Bus" in await page.text_content("#screen-lock-how")

        # Page -> CLI.
        await page.fill("#set-idle_lock_minutes", "7")
        await page.keyboard.press("Tab")
        await page.wait_for_selector("#result-idle_lock_minutes.saved")
        got = await asyncio.to_thread(cli.ok, "config", "get", "idle_lock_minutes")
        assert got["value"] == 7
        await page.click("#set-lock_on_screen_lock")
        await page.wait_for_selector("#result-lock_on_screen_lock.saved")
        assert (await asyncio.to_thread(cli.ok, "config", "get", "lock_on_screen_lock"))["value"] is False

        # CLI -> page (the page reads the engine when it is shown).
        await asyncio.to_thread(cli.ok, "config", "set", "clipboard_clear_seconds", "45")
        await page.click("#nav-status")
        await page.click("#nav-settings")
        await wait_until(page, "document.getElementById('set-clipboard_clear_seconds').value === '45'")

        # Bad input: refused by the engine, nothing changed.
        before = config_file.read_bytes()
        await page.fill("#set-idle_lock_minutes", "0")
        await page.keyboard.press("Tab")
        await page.wait_for_selector("#result-idle_lock_minutes.error")
        assert "from 1 to 1440" in await page.text_content("#result-idle_lock_minutes")
        assert await page.get_attribute("#set-idle_lock_minutes", "aria-invalid") == "true"
        await page.fill("#set-clipboard_clear_seconds", "2.5")
        await page.keyboard.press("Tab")
        await page.wait_for_selector("#result-clipboard_clear_seconds.error")
        assert "whole number" in await page.text_content("#result-clipboard_clear_seconds")
        assert config_file.read_bytes() == before
        assert (await asyncio.to_thread(cli.ok, "config", "get", "idle_lock_minutes"))["value"] == 7

        # Theme: dark in a light system, at once and after a reload; back to the system's.
        assert await _background(page) == LIGHT_BG
        await page.check("#set-theme-dark")
        await page.wait_for_selector("html[data-theme='dark']")
        await page.wait_for_selector("#result-theme.saved")
        assert await _background(page) == DARK_BG
        assert (await asyncio.to_thread(cli.ok, "config", "get", "theme"))["value"] == "dark"
        await page.reload()
        await page.wait_for_selector("html[data-theme='dark']")
        assert await _background(page) == DARK_BG
        await page.click("#nav-settings")
        await wait_until(page, "document.getElementById('set-theme-dark').checked")
        await page.check("#set-theme-system")
        await page.wait_for_selector("#result-theme.saved")
        await page.wait_for_selector("html:not([data-theme])")
        assert await _background(page) == LIGHT_BG

        # The tray's transcript watcher (AG-11): page -> CLI and CLI -> page.
        assert await page.is_checked("#set-transcript_watcher-auto")
        assert "[desktop] transcript_watcher" in await page.text_content("#where-transcript_watcher")
        await page.check("#set-transcript_watcher-off")
        await page.wait_for_selector("#result-transcript_watcher.saved")
        assert (await asyncio.to_thread(cli.ok, "config", "get", "transcript_watcher"))["value"] == "off"
        await asyncio.to_thread(cli.ok, "config", "set", "transcript_watcher", "on")
        await page.click("#nav-status")
        await page.click("#nav-settings")
        await wait_until(page, "document.getElementById('set-transcript_watcher-on').checked")

        # Start at login: the XDG autostart entry, as `memories autostart` sees it.
        await page.check("#set-start_at_login")
        await page.wait_for_selector("#result-start_at_login.saved")
        assert entry.is_file() and "desktop.tray.launcher" in entry.read_text()
        status = await asyncio.to_thread(cli.ok, "autostart", "status")
        assert any(e["kind"] == "xdg" and e["enabled"] for e in status["entries"])
        await page.uncheck("#set-start_at_login")
        await page.wait_for_selector("#result-start_at_login:has-text('Saved: off')")
        assert not entry.exists()

    # The refused changes are answered 400, which chromium logs: only CSP reports count here.
    run_in_browser(dash.url, scenario, console="csp")


def test_settings_keyboard_only(setup: tuple[Cli, Dashboard, Path]) -> None:
    """DT-9: the page works from the keyboard: Tab reaches each control, Space toggles a box,
    the arrow keys choose a theme, and each choice is saved."""
    cli, dash, _ = setup

    async def scenario(page: Any) -> None:
        await page.click("#nav-settings")
        await page.wait_for_selector("#where-theme:has-text('[desktop] theme')")
        await page.focus("#set-idle_lock_minutes")
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.id") == "set-lock_on_screen_lock"
        await page.keyboard.press("Space")
        await page.wait_for_selector("#result-lock_on_screen_lock.saved")
        await page.keyboard.press("Tab")
        await page.keyboard.type("90")
        await page.keyboard.press("Tab")  # leaves the field: saved; focus is on the theme group
        await page.wait_for_selector("#result-clipboard_clear_seconds.saved")
        assert await page.evaluate("document.activeElement.name") == "theme"
        await page.keyboard.press("ArrowDown")  # system -> light
        await page.wait_for_selector("#result-theme.saved")
        await page.wait_for_selector("html[data-theme='light']")

    run_in_browser(dash.url, scenario)
    assert cli.ok("config", "get", "lock_on_screen_lock")["value"] is False
    assert cli.ok("config", "get", "clipboard_clear_seconds")["value"] == 90
    assert cli.ok("config", "get", "theme")["value"] == "light"


def test_settings_route_refuses_malformed_changes(setup: tuple[Cli, Dashboard, Path]) -> None:
    """DT-9, API-8, DT-5: an unknown setting, extra fields, a value of the wrong type, a foreign
    Origin or Host, a missing token and a locked vault are refused, and config.toml is left as
    it was."""
    cli, dash, _ = setup
    config_file = cli.home / "config.toml"
    config_file.write_text("# mine\n[engine]\nsudo_minutes = 3\n", "utf-8")
    before = config_file.read_bytes()
    cases: list[tuple[Any, int, str]] = [
        ({"name": "nope", "value": 1}, 400, "invalid_input"),
        ({"name": "idle_lock_minutes", "value": 5, "extra": 1}, 400, "invalid_input"),
        ({"name": "idle_lock_minutes", "value": {"a": 1}}, 400, "invalid_input"),
        ({"name": "idle_lock_minutes", "value": "x" * 100}, 400, "invalid_input"),
        ({"name": "theme", "value": "purple"}, 400, "invalid_input"),
        ({"name": "lock_on_screen_lock", "value": 3}, 400, "invalid_input"),
        ({"name": "start_at_login", "value": "yes please"}, 400, "invalid_input"),
        (b"{not json", 400, "invalid_input"),
    ]
    for body, status, code in cases:
        got, _, data = dash.request("POST", "/api/settings", body)
        assert (got, data["error"]["code"]) == (status, code), (body, data)
    good = {"name": "theme", "value": "dark"}
    assert dash.request("POST", "/api/settings", good, origin="http://evil.example")[0] == 403
    assert dash.request("POST", "/api/settings", good, origin=None)[0] == 403
    assert dash.request("POST", "/api/settings", good, token=None)[0] == 401
    assert dash.request("POST", "/api/settings", good, host="evil.example")[0] == 403
    assert dash.request("GET", "/api/settings", token=None)[0] == 401
    cli.ok("lock")
    got, _, data = dash.request("POST", "/api/settings", good)
    assert (got, data["error"]["code"]) == (423, "locked")
    assert config_file.read_bytes() == before
    got, _, data = dash.request("GET", "/api/settings")  # reading needs no unlock
    assert got == 200 and data["settings"]["idle_lock_minutes"]["value"] == 15
    cli.unlock()


def test_screen_lock_support_names_each_platform() -> None:
    """DT-9: the page says what each platform uses and whether the tray listens there."""
    assert screen_lock_support("linux")["implemented"] is True
    assert "WTS_SESSION_LOCK" in screen_lock_support("win32")["how"]
    assert screen_lock_support("win32")["implemented"] is False
    assert "screenIsLocked" in screen_lock_support("darwin")["how"]
    assert screen_lock_support("darwin")["implemented"] is False


def test_settings_without_an_engine_say_so(tmp_path: Path) -> None:
    """DT-9: with no engine running, the Settings page says the settings show when the engine
    answers (no failed request in the browser's console) and offers no control."""
    cli = Cli(home=tmp_path / "home")
    cli.init()
    cli.stop()
    dash = start_dashboard(cli, tmp_path / "dashboard.log")
    try:
        dash.wait_state("not_running")
        code, _, data = dash.request("GET", "/api/settings")
        assert code == 200 and data["available"] is False and data["message"]

        async def scenario(page: Any) -> None:
            await page.click("#nav-settings")
            await page.wait_for_selector("#settings-note:has-text('when the engine answers')")
            assert await page.is_hidden("#settings-form")

        run_in_browser(dash.url, scenario)
    finally:
        stop_process(dash.proc)
        cli.stop()
