"""DT-5 / DT-6 / API-8: the dashboard's approve route takes no password and answers bad input with typed 4xx errors.

The approval itself happens in the tray's native window (tests/desktop/test_tray_approval.py);
a `memories dashboard` without a tray has no window and says how to approve in a terminal.
"""

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


def _approve(dashboard: Dashboard, ticket: dict[str, Any], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    code, _, data = dashboard.request("POST", f"/api/tickets/{ticket['ticket']}/approve", body)
    return code, data


def _state(dashboard: Dashboard, ticket: dict[str, Any]) -> str:
    code, _, data = dashboard.request("GET", "/api/tickets")
    assert code == 200
    return next(str(t["state"]) for t in data["tickets"] if t["ticket"] == ticket["ticket"])


def test_dt6_approve_route_refuses_a_password_and_needs_the_tray(module_vault: Cli, dashboard: Dashboard) -> None:
    """DT-6: a password in the approval body is 400 invalid_input and approves nothing; a wrong
    fingerprint is 400; without a tray window the answer says so (outcome no_dialog) and the ticket
    stays pending; an unknown ticket is 409 ticket_used; Reject still works."""
    with fakes.serve(_echo) as port:
        module_vault.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
        session = module_vault.ok("remote", "open", "echo")["session"]
        first = module_vault.ok("remote", "propose", session, "one")
        try:
            code, data = _approve(dashboard, first, {"fingerprint": first["fingerprint"], "password": PASSWORD})
            assert (code, data["error"]["code"]) == (400, "invalid_input")
            assert "tray" in data["error"]["message"] and PASSWORD not in str(data)
            assert _state(dashboard, first) == "pending"

            code, data = _approve(dashboard, first, {"fingerprint": "0" * 64})
            assert (code, data["error"]["code"]) == (400, "invalid_input")
            code, data = _approve(dashboard, first, {"fingerprint": "not hex"})
            assert (code, data["error"]["code"]) == (400, "invalid_input")

            code, data = _approve(dashboard, first, {"fingerprint": first["fingerprint"]})
            assert code == 200 and data["outcome"] == "no_dialog" and data["state"] == "pending"
            assert data["fingerprint"] == first["fingerprint"]
            assert _state(dashboard, first) == "pending"

            code, _, data = dashboard.request("GET", "/api/status")
            assert data["desktop"]["can_approve"] is False

            code, _, data = dashboard.request("POST", f"/api/tickets/{first['ticket']}/reject", {})
            assert code == 200 and data["state"] == "rejected"
            code, data = _approve(dashboard, first, {"fingerprint": first["fingerprint"]})
            assert (code, data["error"]["code"]) == (409, "ticket_used")
        finally:
            module_vault.ok("remote", "close", session)


def test_dt9_import_export_routes_take_no_secret_and_need_the_tray(dashboard: Dashboard) -> None:
    """DT-9, API-8: POST /api/export takes exactly a format and /api/import exactly {}: a password,
    a path, another format or a body that is not JSON is 400 invalid_input (the password is not
    echoed); `memories dashboard` without a tray has no window and says so (outcome no_dialog)."""
    bodies: list[Any] = [{"format": "markdown", "password": PASSWORD}, {"format": "pdf"}, {}, ["markdown"], {"format": 1}]
    for body in bodies:
        code, _, data = dashboard.request("POST", "/api/export", body)
        assert (code, data["error"]["code"]) == (400, "invalid_input"), body
        assert PASSWORD not in str(data)
    for body in [{"path": "/etc"}, {"password": PASSWORD}, [], None]:
        code, _, data = dashboard.request("POST", "/api/import", body)
        assert (code, data["error"]["code"]) == (400, "invalid_input"), body
    code, _, data = dashboard.request("POST", "/api/export", {"format": "jsonl"})
    assert (code, data) == (200, {"outcome": "no_dialog", "format": "jsonl"})
    code, _, data = dashboard.request("POST", "/api/import", {})
    assert (code, data) == (200, {"outcome": "no_dialog"})
    code, _, data = dashboard.request("GET", "/api/status")
    assert data["desktop"]["can_export"] is False and data["desktop"]["can_import"] is False
    assert data["transfer"] == {"state": "idle"}
