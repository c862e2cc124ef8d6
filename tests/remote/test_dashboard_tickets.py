"""DT-5 / RM-5: approving a remote-exec ticket in the real browser with the vault password."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.desktop.support import Dashboard, start_dashboard, stop_process
from tests.desktop.test_dashboard_browser import run_in_browser
from tests.helpers import Cli
from tests.remote import fakes


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


@pytest.fixture(scope="module")
def dash(rvault: Cli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    board = start_dashboard(rvault, tmp_path_factory.mktemp("dash") / "dashboard.log")
    try:
        board.wait_state("unlocked", "attention")
        yield board
    finally:
        stop_process(board.proc)


def test_browser_shows_the_ticket_and_never_asks_for_the_password(rvault: Cli, dash: Dashboard, tmp_path: Path) -> None:
    """DT-5, DT-6: the page shows the full instruction and fingerprint and has no password field;
    without a tray (this standalone dashboard) Approve names the terminal command, approves
    nothing, and the ticket still runs only after a CLI approval. The tray's own approval
    window is tested in tests/desktop/test_tray_approval.py."""
    with fakes.serve(_echo) as port:
        rvault.ok("credential", "new", "tcp", "--name", "dash-echo", "--host", "127.0.0.1", "--port", str(port))
        session = rvault.ok("remote", "open", "dash-echo")["session"]
        ticket = rvault.ok("remote", "propose", session, "hello from the dashboard")

        async def scenario(page: Any) -> None:
            await page.click("#nav-tickets")
            item = f"li.ticket[data-ticket='{ticket['ticket']}']"
            await page.wait_for_selector(item)
            assert await page.text_content(f"{item} .ticket-fingerprint") == ticket["fingerprint"]
            assert await page.text_content(f"{item} .ticket-instruction") == "send hello from the dashboard  (24 bytes)"
            assert await page.query_selector("input[type=password]") is None
            await page.click(f"{item} .ticket-approve")
            await page.wait_for_selector(f"{item} .ticket-result.error")
            shown = await page.text_content(f"{item} .ticket-result") or ""
            assert f"memories remote approve {ticket['ticket']}" in shown
            assert await page.query_selector("input[type=password]") is None

        run_in_browser(dash.url, scenario)
        assert rvault.err("remote", "exec", ticket["ticket"])["code"] == "ticket_not_approved"
        rvault.sudo()
        rvault.ok("remote", "approve", ticket["ticket"])
        done = rvault.ok("remote", "exec", ticket["ticket"])
        assert done["result"]["output"] == "echo:hello from the dashboard"
        rvault.ok("remote", "close", session)


def test_tickets_api_validates_input(rvault: Cli, dash: Dashboard) -> None:
    """DT-5/API-8: the approve route takes exactly a fingerprint and a password; bad input is typed."""
    code, _, data = dash.request("POST", "/api/tickets/zz/approve", {"fingerprint": "0" * 64, "password": "x"})
    assert code == 400 and data["error"]["code"] == "invalid_input"
    code, _, data = dash.request("POST", "/api/tickets/0123456789abcdef/approve", {"password": "x"})
    assert code == 400 and data["error"]["code"] == "invalid_input"
    code, _, data = dash.request(
        "POST", "/api/tickets/0123456789abcdef/approve", {"fingerprint": "0" * 64, "password": "x"}, origin="http://evil.example"
    )
    assert code == 403
    code, _, data = dash.request("GET", "/api/tickets")
    assert code == 200 and isinstance(data["tickets"], list)
