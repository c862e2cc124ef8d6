"""Dashboard Tickets page (DT-5, DT-6): pending remote-exec tickets, Approve in the tray, Reject.

A route module of its own: ``register(app, ctx)`` adds three fixed API routes and the
page's script. The page never takes the vault password (DT-6): Approve names the ticket and
its fingerprint; the route checks both against the engine's pending list and hands the
engine's view of the ticket to the host's native approval window (``ctx.approver``, the
tray's), which takes the password and sends it to the engine itself. The page only learns
the outcome: approved, cancelled, or the engine's 403/409/429 answer.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from aiohttp import web

from desktop.dashboard.security import json_body
from desktop.gateway import CLIENT_LABEL
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["register", "TicketGateway"]

TICKET = re.compile(r"^[0-9a-f]{16}$")
FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
LIST_TIMEOUT = 5.0
# Engine answers that are the client's doing, not a dashboard fault: 4xx with the typed error.
_CLIENT_ERRORS = {
    "wrong_password": 403,
    "rate_limited": 429,
    "ticket_used": 409,
    "ticket_not_approved": 409,
    "session_closed": 409,
}


class TicketGateway:
    """The only ticket requests the dashboard can send."""

    def __init__(self, socket_path: Any) -> None:
        self.socket_path = socket_path

    def _call(self, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        with IpcClient(self.socket_path, timeout=timeout, client_label=CLIENT_LABEL) as client:
            return client.request(body, timeout=timeout)

    def pending(self) -> dict[str, Any]:
        return self._call({"op": "remote_pending"}, LIST_TIMEOUT)

    def find(self, ticket: str) -> dict[str, Any] | None:
        """The engine's view of one pending ticket, or None when it is not pending (used, gone)."""
        return next((t for t in self.pending().get("tickets", []) if t.get("ticket") == ticket), None)

    def reject(self, ticket: str) -> dict[str, Any]:
        return self._call({"op": "remote_reject", "ticket": ticket}, LIST_TIMEOUT)


def _ticket_id(request: web.Request) -> str:
    ticket = request.match_info["id"]
    if not TICKET.match(ticket):
        raise MemoriesError("invalid_input", "That is not a ticket ID.")
    return ticket


def _client_error(exc: MemoriesError) -> web.Response:
    return web.json_response({"error": {"code": exc.code, "message": exc.message}}, status=_CLIENT_ERRORS[exc.code])


def _project(ticket: dict[str, Any]) -> dict[str, Any]:
    keys = ("ticket", "session", "seq", "target", "instruction", "fingerprint", "state")
    return {k: ticket.get(k) for k in keys}


def register(app: web.Application, ctx: Any) -> None:
    gateway = TicketGateway(ctx.gateway.socket_path)
    script = (resources.files("desktop.dashboard") / "static" / "tickets.js").read_bytes()

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def list_tickets(request: web.Request) -> web.Response:
        raw = await ctx.engine(gateway.pending)
        return web.json_response({"tickets": [_project(t) for t in raw.get("tickets", [])]})

    async def approve(request: web.Request) -> web.Response:
        ticket = _ticket_id(request)
        payload = json_body(await request.read(), "The approval")
        # DT-6: a password sent by the page is refused outright; the tray's window takes it.
        if not isinstance(payload, dict) or set(payload) != {"fingerprint"}:
            raise MemoriesError("invalid_input", "An approval carries exactly the fingerprint; the tray asks for the password.")
        fingerprint = payload["fingerprint"]
        if not isinstance(fingerprint, str) or not FINGERPRINT.match(fingerprint):
            raise MemoriesError("invalid_input", "The fingerprint is 64 hex digits.")
        shown = await ctx.engine(lambda: gateway.find(ticket))
        if shown is None:
            return _client_error(MemoriesError("ticket_used"))
        if shown.get("fingerprint") != fingerprint:
            raise MemoriesError("invalid_input", "The fingerprint does not match this ticket; nothing was approved.")
        approver = ctx.approver
        if approver is None:
            return web.json_response({**_project(shown), "outcome": "no_dialog"})
        try:
            # Blocks one worker thread while the person reads the window; the page waits for the answer.
            result = await ctx.engine(lambda: approver(_project(shown)))
        except MemoriesError as exc:
            if exc.code in _CLIENT_ERRORS:  # a wrong password is the user's typo, not a server error
                return _client_error(exc)
            raise
        state = "approved" if result.get("outcome") == "approved" else shown.get("state")
        return web.json_response({**_project(shown), "state": state, "outcome": result.get("outcome")})

    async def reject(request: web.Request) -> web.Response:
        ticket = _ticket_id(request)
        try:
            result = await ctx.engine(lambda: gateway.reject(ticket))
        except MemoriesError as exc:
            if exc.code in _CLIENT_ERRORS:
                return _client_error(exc)
            raise
        return web.json_response({"ticket": result.get("ticket"), "state": result.get("state")})

    app.router.add_get("/static/tickets.js", serve_script)
    app.router.add_get("/api/tickets", list_tickets)
    app.router.add_post("/api/tickets/{id}/approve", approve)
    app.router.add_post("/api/tickets/{id}/reject", reject)
