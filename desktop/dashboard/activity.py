"""Dashboard Activity page (issue 17): "what did my agents read today".

A route module of its own, like the Tickets page: ``register(app, ctx)`` adds one GET route
and the page's script. The route sends exactly one engine request, ``dashboard_activity``,
which needs no elevation because it answers little: the last 24 hours at most, and per entry
only time, who, op and item kinds and titles (see docs/security-desktop.md). The dashboard
projects that answer again onto those fields, so nothing else could reach the page.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import web

from desktop.gateway import CLIENT_LABEL
from engine.ipc.client import IpcClient

__all__ = ["register", "ACTIVITY_TIMEOUT", "project"]

ACTIVITY_TIMEOUT = 10.0
ACTIVITY_LIMIT = 200


def project(entry: dict[str, Any]) -> dict[str, Any]:
    """Only the four fields the view shows, with items reduced to kind and title."""
    items = entry.get("items")
    return {
        "ts_ms": entry.get("ts_ms") if isinstance(entry.get("ts_ms"), int) else None,
        "who": str(entry.get("who", "")),
        "op": str(entry.get("op", "")),
        "items": [
            {"kind": i.get("kind"), "title": i.get("title")}
            for i in (items if isinstance(items, list) else [])
            if isinstance(i, dict)
        ],
    }


def register(app: web.Application, ctx: Any) -> None:
    socket_path = ctx.gateway.socket_path
    script = (resources.files("desktop.dashboard") / "static" / "activity.js").read_bytes()

    def fetch() -> dict[str, Any]:
        with IpcClient(socket_path, timeout=ACTIVITY_TIMEOUT, client_label=CLIENT_LABEL) as client:
            return client.request({"op": "dashboard_activity", "limit": ACTIVITY_LIMIT}, timeout=ACTIVITY_TIMEOUT)

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def list_activity(request: web.Request) -> web.Response:
        raw = await ctx.engine(fetch)
        entries = raw.get("entries", [])
        return web.json_response(
            {
                "entries": [project(e) for e in entries if isinstance(e, dict)],
                "hours": raw.get("hours"),
                "more": bool(raw.get("more")),
            }
        )

    app.router.add_get("/static/activity.js", serve_script)
    app.router.add_get("/api/activity", list_activity)
