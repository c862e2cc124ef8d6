"""DT-6 under Xvfb: the dashboard's Approve opens the tray's native window (GTK, a real tray host,
a real engine, real chromium); the password is typed there with xdotool, never into the page.

One scenario in one browser: no dashboard page has a password input in any state (tickets
pending, a ticket approved, locked); a wrong password shows in the window and leaves the ticket
pending; the right one approves it and the page says so; approving again is 409; closing the
window after a wrong password is 403; a spent password budget is 429.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from desktop.status import TrayState
from desktop.tray.approval_dialog import TITLE_APPROVE
from tests.desktop.browser import run_in_browser
from tests.desktop.support import XSession
from tests.desktop.test_tray_unlock import _require_toolkit, _type_into, _visible, _window
from tests.desktop.test_tray_x11 import Tray
from tests.helpers import PASSWORD, Cli
from tests.remote import fakes

WRONG = "not the vault password 1234"
PAGES = ("#nav-cards", "#nav-tickets", "#nav-activity", "#nav-status")


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


def _post(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    port = int(url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=180)  # the route waits for the window
    headers = {
        "Authorization": f"Bearer {url.split('#', 1)[1]}",
        "Origin": f"http://127.0.0.1:{port}",
        "Content-Type": "application/json",
    }
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def _gone(x: XSession, title: str, timeout: float = 120) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _visible(x, title):
            return True
        time.sleep(0.1)
    return False


async def _no_password_input(page: Any) -> None:
    """DT-6: every page of the dashboard, in the current state, has no password field."""
    for nav in PAGES:
        if await page.locator(nav).is_visible():
            await page.click(nav)
        assert await page.locator("input[type=password]").count() == 0, nav


@pytest.mark.parametrize("backend", ["gtk", "xorg"])  # the GTK window; the xorg backend's tkinter window
def test_dt6_tray_window_approves_a_ticket_from_the_page(vault: Cli, xsession: XSession, tmp_path: Path, backend: str) -> None:
    """DT-6: Approve in the page → the tray's window with target, instruction and full fingerprint;
    wrong password refused there, right one approves; the page shows the result; no password input
    on any page (pending, approved, locked); 403 on a window closed (Escape) after a wrong password; 409; 429."""
    _require_toolkit(backend)
    tray = Tray(vault, xsession, tmp_path, backend)
    with fakes.serve(_echo) as port:
        vault.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
        session = vault.ok("remote", "open", "echo")["session"]
        first = vault.ok("remote", "propose", session, "PING")
        try:
            url = tray.wait_output(r"memories tray: dashboard (http://127\.0\.0\.1:\d+/#\S+)").group(1)
            tray.wait_output(r"badges tickets=1")  # the tray knows the pending ticket

            async def scenario(page: Any) -> None:
                await page.wait_for_selector("#ticket-count:not([hidden])")
                await _no_password_input(page)  # unlocked, a ticket pending
                await page.click("#nav-tickets")
                item = f"#ticket-list li[data-ticket='{first['ticket']}']"
                await page.wait_for_selector(item)
                await page.click(f"{item} .ticket-approve")
                window = await asyncio.to_thread(_window, xsession, TITLE_APPROVE)
                await asyncio.to_thread(xsession.screenshot, tmp_path / f"tray-approve-window-{backend}.png")
                await asyncio.to_thread(_type_into, xsession, window, ("type", WRONG), ("key", "Return"))
                await asyncio.to_thread(tray.wait_output, r"approval dialog shows wrong_password")
                assert await page.locator("input[type=password]").count() == 0
                await asyncio.to_thread(_type_into, xsession, window, ("type", PASSWORD), ("key", "Return"))
                await page.wait_for_selector(f"{item} .ticket-result.ok")
                assert "Approved" in (await page.text_content(f"{item} .ticket-result") or "")
                assert await asyncio.to_thread(_gone, xsession, TITLE_APPROVE), "the window closes once approved"
                await _no_password_input(page)  # a ticket approved

            run_in_browser(url, scenario)
            out = tray.output()
            assert "approval dialog ends with approved" in out
            assert WRONG not in out and PASSWORD not in out
            code, data = _post(url, f"/api/tickets/{first['ticket']}/approve", {"fingerprint": first["fingerprint"]})
            assert (code, data["error"]["code"]) == (409, "ticket_used"), "single use"

            # Closing the window after a wrong password is a refusal (403); the ticket stays pending.
            second = vault.ok("remote", "propose", session, "two")
            answers: list[tuple[int, dict[str, Any]]] = []

            def approve_second() -> None:
                answers.append(_post(url, f"/api/tickets/{second['ticket']}/approve", {"fingerprint": second["fingerprint"]}))

            asker = threading.Thread(target=approve_second)
            asker.start()
            window = _window(xsession, TITLE_APPROVE)
            _type_into(xsession, window, ("type", WRONG), ("key", "Return"))
            tray.wait_output(r"approval dialog shows wrong_password(.|\n)*approval dialog shows wrong_password")
            _type_into(xsession, window, ("key", "Escape"))
            asker.join(60)
            assert answers and (answers[0][0], answers[0][1]["error"]["code"]) == (403, "wrong_password")

            # The password budget (5 a minute) holds for the window: it ends with 429 and closes.
            answers.clear()
            asker = threading.Thread(target=approve_second)
            asker.start()
            window = _window(xsession, TITLE_APPROVE)
            for _ in range(6):
                if not asker.is_alive():
                    break
                # Counted before typing: an answer that comes back at once must not be missed (the
                # budget refills while the loop waits in vain).
                before = tray.output().count("approval dialog shows")
                _type_into(xsession, window, ("type", WRONG), ("key", "Return"))
                end = time.monotonic() + 30
                while time.monotonic() < end and asker.is_alive() and tray.output().count("approval dialog shows") == before:
                    time.sleep(0.05)
            asker.join(60)
            assert answers and (answers[0][0], answers[0][1]["error"]["code"]) == (429, "rate_limited")
            assert _gone(xsession, TITLE_APPROVE)
            assert "pending" in json.dumps(vault.ok("remote", "list"))

            vault.ok("lock")
            tray.wait_icon(TrayState.LOCKED)

            async def locked(page: Any) -> None:
                await page.wait_for_selector("#gate:not([hidden])", timeout=30_000)
                await _no_password_input(page)  # locked

            run_in_browser(url, locked, console="csp")  # a locked vault answers the page's reads with 423
        finally:
            tray.stop()  # the vault is this test's own; lock dropped the session
