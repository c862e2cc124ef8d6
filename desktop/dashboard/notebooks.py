"""Dashboard Agents page (AG-13): each connected agent's private notebook, read-only.

A route module of its own, like the Activity page: ``register(app, ctx)`` adds two GET routes
and the page's script. Each route sends exactly one engine request, ``notebook_show`` (the
list, or one notebook's latest entries and scratch pad; the engine commits a read intent
first). Nothing here writes, exports or deletes: that is ``memories agent notebook`` in a
terminal (deleting needs ``memories sudo``). The answer is projected again onto the fields
the page shows.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from aiohttp import web

from desktop.gateway import CLIENT_LABEL
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["register", "NOTEBOOK_TIMEOUT", "project_list", "project_one"]

NOTEBOOK_TIMEOUT = 15.0
# A grant name (engine/service/requests_mcp.py) or a notebook ID prefix.
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$|^[0-9a-f]{6,32}$")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _book(raw: Any) -> dict[str, Any]:
    book = raw if isinstance(raw, dict) else {}
    return {
        "id": str(book.get("id", "")),
        "agent": str(book.get("agent", "")),
        "agent_active": book.get("agent_active") is True,
        "entries": _int(book.get("entries")),
        "revisions": _int(book.get("revisions")),
        "created_ms": _int(book.get("created_ms")),
    }


def project_list(raw: dict[str, Any]) -> dict[str, Any]:
    books = raw.get("notebooks")
    return {"notebooks": [_book(b) for b in (books if isinstance(books, list) else [])]}


def project_one(raw: dict[str, Any]) -> dict[str, Any]:
    entries = raw.get("entries")
    scratch = raw.get("scratch")
    return {
        "notebook": _book(raw.get("notebook")),
        "entries": [
            {
                "id": str(e.get("id", ""))[:12],
                "title": str(e.get("title", "")),
                "tags": [str(t) for t in e.get("tags", []) if isinstance(t, str)] if isinstance(e.get("tags"), list) else [],
                "body": str(e.get("body", "")),
                "rev": _int(e.get("rev")),
                "updated_ms": _int(e.get("updated_ms")),
                "forgotten": e.get("forgotten") is True,
            }
            for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict)
        ],
        "scratch": (
            {"text": str(scratch.get("text", "")), "rev": _int(scratch.get("rev")), "at_ms": _int(scratch.get("at_ms"))}
            if isinstance(scratch, dict)
            else None
        ),
    }


def register(app: web.Application, ctx: Any) -> None:
    socket_path = ctx.gateway.socket_path
    script = (resources.files("desktop.dashboard") / "static" / "notebooks.js").read_bytes()

    def fetch(body: dict[str, Any]) -> dict[str, Any]:
        with IpcClient(socket_path, timeout=NOTEBOOK_TIMEOUT, client_label=CLIENT_LABEL) as client:
            return client.request(body, timeout=NOTEBOOK_TIMEOUT)

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def list_notebooks(request: web.Request) -> web.Response:
        raw = await ctx.engine(lambda: fetch({"op": "notebook_show"}))
        return web.json_response(project_list(raw))

    async def show_notebook(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not _NAME.match(name):
            raise MemoriesError("invalid_input", "A notebook is named by its agent's name or its ID.")
        raw = await ctx.engine(lambda: fetch({"op": "notebook_show", "name": name}))
        return web.json_response(project_one(raw))

    app.router.add_get("/static/notebooks.js", serve_script)
    app.router.add_get("/api/notebooks", list_notebooks)
    app.router.add_get("/api/notebooks/{name}", show_notebook)
