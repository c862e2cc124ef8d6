"""DT-5 / API-8: the ticket approval route answers a wrong password with a 4xx typed error, not 500."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.desktop.support import Dashboard
from tests.helpers import PASSWORD, Cli
from tests.remote import fakes


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


def _approve(dashboard: Dashboard, ticket: dict[str, Any], password: str) -> tuple[int, dict[str, Any]]:
    code, _, data = dashboard.request(
        "POST", f"/api/tickets/{ticket['ticket']}/approve", {"fingerprint": ticket["fingerprint"], "password": password}
    )
    return code, data


def _state(dashboard: Dashboard, ticket: dict[str, Any]) -> str:
    code, _, data = dashboard.request("GET", "/api/tickets")
    assert code == 200
    return next(str(t["state"]) for t in data["tickets"] if t["ticket"] == ticket["ticket"])


def test_wrong_approval_password_is_a_4xx_and_approves_nothing(module_vault: Cli, dashboard: Dashboard) -> None:
    """DT-5 / API-8: a wrong approval password is 403 wrong_password (the ticket stays pending); the
    right one approves; approving again is 409 ticket_used; a spent password budget is 429 rate_limited."""
    with fakes.serve(_echo) as port:
        module_vault.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
        session = module_vault.ok("remote", "open", "echo")["session"]
        first = module_vault.ok("remote", "propose", session, "one")
        second = module_vault.ok("remote", "propose", session, "two")

        code, data = _approve(dashboard, first, "not the password")
        assert (code, data["error"]["code"]) == (403, "wrong_password")
        assert "not the password" not in str(data)
        assert _state(dashboard, first) == "pending"

        code, data = _approve(dashboard, first, PASSWORD)
        assert code == 200 and data["state"] == "approved"
        code, data = _approve(dashboard, first, PASSWORD)
        assert (code, data["error"]["code"]) == (409, "ticket_used")

        # Four more wrong tries spend the budget (5 a minute); the next is refused before any KDF.
        for _ in range(4):
            assert _approve(dashboard, second, "still wrong")[0] == 403
        code, data = _approve(dashboard, second, PASSWORD)
        assert (code, data["error"]["code"]) == (429, "rate_limited")
        assert _state(dashboard, second) == "pending"
        module_vault.ok("remote", "close", session)
