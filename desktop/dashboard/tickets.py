"""Dashboard Tickets page (DT-5): pending remote-exec tickets, Approve with the vault password, Reject.

A route module of its own: ``register(app, ctx)`` adds three fixed API routes and the
page's script. Each route maps to exactly one engine request built here with validated
fields; the password goes to the engine for this one ticket and nothing is elevated.
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
APPROVE_TIMEOUT = 30.0  # the engine runs the password KDF (≈1 s on the reference machine)
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

    def approve(self, ticket: str, fingerprint: str, password: str) -> dict[str, Any]:
        return self._call(
            {"op": "remote_approve_confirm", "ticket": ticket, "fingerprint": fingerprint, "password": password}, APPROVE_TIMEOUT
        )

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
        if not isinstance(payload, dict) or set(payload) != {"fingerprint", "password"}:
            raise MemoriesError("invalid_input", "An approval carries exactly the fingerprint and the password.")
        fingerprint, password = payload["fingerprint"], payload["password"]
        if not isinstance(fingerprint, str) or not FINGERPRINT.match(fingerprint):
            raise MemoriesError("invalid_input", "The fingerprint is 64 hex digits.")
        if not isinstance(password, str) or not 1 <= len(password) <= 1024:
            raise MemoriesError("invalid_input", "Enter the vault password.")
        try:
            result = await ctx.engine(lambda: gateway.approve(ticket, fingerprint, password))
        except MemoriesError as exc:
            if exc.code in _CLIENT_ERRORS:  # a wrong password is the user's typo, not a server error
                return _client_error(exc)
            raise
        return web.json_response(_project(result))

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
