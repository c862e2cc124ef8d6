"""Dashboard import and export (SPEC DT-9): the page starts them, the tray's windows ask the rest.

``POST /api/import`` takes an empty object: the tray's import window (``ctx.importer``,
desktop/tray/import_dialog.py) asks for the file or folder, so no page names a local path.

A route module of its own: ``POST /api/export`` takes exactly a format, and hands it to the
host's native export window (``ctx.exporter``, the tray's desktop/tray/export_dialog.py), which
takes the destination and the vault password (the CLI's `memories sudo`) and starts the job.
The route answers when the window closes: started, cancelled, busy (a window or a job is
already there) or no_dialog (this host has none: the page names the CLI command). The job's
progress and outcome are in ``/api/status`` under ``transfer``; no secret is ever in either.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import web

from desktop.dashboard.security import json_body
from engine.errors import MemoriesError

__all__ = ["register", "FORMATS"]

FORMATS = ("markdown", "jsonl")
# Elevation answers the page shows as the person's doing (4xx), as the Tickets page does.
_CLIENT_ERRORS = {"wrong_password": 403, "rate_limited": 429, "locked": 423, "not_initialized": 423, "invalid_input": 400}


def register(app: web.Application, ctx: Any) -> None:
    script = (resources.files("desktop.dashboard") / "static" / "transfer.js").read_bytes()

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def export(request: web.Request) -> web.Response:
        payload = json_body(await request.read(), "The export")
        # The page names a format only: a password (or anything else) sent by it is refused.
        if not isinstance(payload, dict) or set(payload) != {"format"}:
            raise MemoriesError("invalid_input", "An export names exactly its format; the tray asks for the folder and password.")
        fmt = payload["format"]
        if fmt not in FORMATS:
            raise MemoriesError("invalid_input", "The format is markdown or jsonl.")
        exporter = ctx.exporter
        if exporter is None:
            return web.json_response({"outcome": "no_dialog", "format": fmt})
        # Blocks one worker thread while the person fills the window; the page waits for the answer.
        result = await ctx.engine(lambda: exporter(fmt))
        error = result.get("error")
        if isinstance(error, str):  # the window closed on the engine's refusal (budget spent, locked…)
            failure = MemoriesError(error)
            return web.json_response(
                {"error": {"code": failure.code, "message": failure.message}}, status=_CLIENT_ERRORS.get(failure.code, 503)
            )
        return web.json_response({"outcome": result.get("outcome"), "format": fmt})

    async def import_(request: web.Request) -> web.Response:
        payload = json_body(await request.read(), "The import")
        # The page names nothing: what to import is chosen in the tray's window, never sent by a page.
        if payload != {}:
            raise MemoriesError("invalid_input", "An import carries nothing; the tray's window asks what to import.")
        importer = ctx.importer
        if importer is None:
            return web.json_response({"outcome": "no_dialog"})
        result = await ctx.engine(importer)
        return web.json_response({"outcome": result.get("outcome")})

    app.router.add_get("/static/transfer.js", serve_script)
    app.router.add_post("/api/export", export)
    app.router.add_post("/api/import", import_)
