"""Dashboard HTTP routes: a fixed, small surface (SPEC API-6, DT-5).

Status comes from the prober's latest snapshot (never a live engine call), so the status
page answers at once even when the engine is busy or hung. The card routes map one to one
onto the gateway's fixed engine requests, run in a bounded executor with timeouts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web

from desktop.dashboard import (
    activity,
    cards,
    history,
    links,
    live,
    merge,
    notebooks,
    notes,
    protected,
    settings,
    tickets,
    transfer,
)
from desktop.dashboard.security import json_body
from desktop.gateway import EngineGateway
from desktop.prober import ProbeWorker
from desktop.status import tray_state
from engine.errors import MemoriesError

__all__ = ["DashboardContext", "build_app", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 2 * 1024 * 1024
PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
SEARCH_LIMIT = 50
MAX_QUERY_CHARS = 500
T = TypeVar("T")

_STATIC_TYPES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "details.js": "text/javascript",
    "app.css": "text/css",
    "favicon.svg": "image/svg+xml",
}


@dataclass
class DashboardContext:
    prober: ProbeWorker
    gateway: EngineGateway
    mode: str  # "tray" or "dashboard"
    backend: str  # the tray backend in use, or "none"
    on_quit: Callable[[], None] | None = None
    quit_locks: bool = False  # the host locks the vault when it quits (the tray's default)
    # DT-6: the host's native ticket-approval window (the tray's); None where there is none.
    approver: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # DT-9: the host's native export window (folder and password) and its job's state; None where there is none.
    exporter: Callable[[str], dict[str, Any]] | None = None
    importer: Callable[[], dict[str, Any]] | None = None
    transfer_state: Callable[[], dict[str, Any]] | None = None
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="memories-dashboard")
    )

    async def engine(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)


def _load_static() -> dict[str, bytes]:
    # Embedded in the package and read once: nothing is fetched from disk paths at request time.
    root = resources.files("desktop.dashboard") / "static"
    return {name: (root / name).read_bytes() for name in _STATIC_TYPES}


def build_app(ctx: DashboardContext, middleware: Any) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=MAX_BODY_BYTES)
    static = _load_static()

    def serve(name: str) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=static[name], content_type=_STATIC_TYPES[name], charset="utf-8")

        return handler

    async def status(request: web.Request) -> web.Response:
        probe = ctx.prober.latest
        return web.json_response(
            {
                "probe": probe.to_json(),
                "tray_state": tray_state(probe).value,
                "desktop": {
                    "mode": ctx.mode,
                    "backend": ctx.backend,
                    "can_quit": ctx.on_quit is not None,
                    "quit_locks": ctx.on_quit is not None and ctx.quit_locks,
                    "can_approve": ctx.approver is not None,
                    "can_export": ctx.exporter is not None,
                    "can_import": ctx.importer is not None,
                },
                # DT-9: the import or export started from the page (state, folder, count or typed error; no secret).
                "transfer": ctx.transfer_state() if ctx.transfer_state is not None else {"state": "idle"},
            }
        )

    async def kinds(request: web.Request) -> web.Response:
        return web.json_response({"kinds": cards.kind_table()})

    def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
        try:
            value = int(request.query.get(name, str(default)))
        except ValueError:
            raise MemoriesError("invalid_input", f"{name} must be a number.") from None
        if not low <= value <= high:
            raise MemoriesError("invalid_input", f"{name} is out of range.")
        return value

    async def list_cards(request: web.Request) -> web.Response:
        # ?kind=K narrows to one allowlisted kind; without it every ordinary kind is listed.
        kind = request.query.get("kind", "all")
        kinds = [] if kind == "all" else [cards.spec_for(kind).kind]
        tag = cards.check_tag(request.query["tag"]) if "tag" in request.query else None
        offset = _int(request, "offset", 0, 0, 10_000_000)
        limit = _int(request, "limit", PAGE_SIZE, 1, MAX_PAGE_SIZE)
        sort = request.query.get("sort", "updated")
        if sort not in ("updated", "oldest", "title"):
            raise MemoriesError("invalid_input", "sort is updated, oldest or title.")
        raw = await ctx.engine(lambda: ctx.gateway.list_ordinary(kinds, tag, limit, offset, sort))
        items = [cards.project_summary(i) for i in raw.get("items", []) if i.get("kind") in cards.EDITABLE_KINDS]
        return web.json_response(
            {
                "items": items,
                "total": raw.get("total", len(items)),
                "offset": offset,
                "limit": limit,
                "kinds": raw.get("kinds", {}),
                "tags": raw.get("tags", []),
            }
        )

    async def search(request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        if not 0 < len(query) <= MAX_QUERY_CHARS:
            raise MemoriesError("invalid_input", f"A search is 1 to {MAX_QUERY_CHARS} characters.")
        kind = request.query.get("kind", "all")
        only = None if kind == "all" else cards.spec_for(kind).kind
        offset = _int(request, "offset", 0, 0, 100_000)
        raw = await ctx.engine(lambda: ctx.gateway.search(query, only, SEARCH_LIMIT, offset))
        hits = [h for h in (cards.project_hit(r) for r in raw.get("results", [])) if h is not None]
        # Items in conflict are kept out of the index (seed 001): say which the search would have matched.
        unsearched = await ctx.engine(lambda: ctx.gateway.search_conflicts(query))
        conflicted = [
            {"id": str(i["id"]), "short_id": str(i.get("short_id", ""))[:32]}
            for i in unsearched.get("items", [])[:50]
            if isinstance(i, dict) and isinstance(i.get("id"), str) and (only is None or i.get("kind") == only)
        ]
        return web.json_response(
            {
                "conflicted": conflicted,
                "query": query,
                "mode": raw.get("mode"),
                "partial": bool(raw.get("partial")),
                "results": hits,
                # DT-7: every match is counted and reachable a page at a time.
                "total": int(raw.get("total", len(hits))),
                "offset": offset,
                "limit": SEARCH_LIMIT,
            }
        )

    async def _json_body(request: web.Request) -> Any:
        return json_body(await request.read())

    async def create_card(request: web.Request) -> web.Response:
        kind, fields = cards.parse_create(await _json_body(request))
        result = await ctx.engine(lambda: ctx.gateway.create_asset(kind, fields))
        return web.json_response(
            {"created": True, "id": result.get("id"), "short_id": result.get("short_id"), "revision": result.get("revision")}
        )

    async def delete_card(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        current = await ctx.engine(lambda: ctx.gateway.get_asset(asset_id))
        cards.spec_for(current.get("kind"))  # only allowlisted kinds are deleted here
        await ctx.engine(lambda: ctx.gateway.delete_asset(asset_id))
        return web.json_response({"deleted": True, "id": asset_id})

    async def resolve_card(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        payload = await _json_body(request)
        if not isinstance(payload, dict) or set(payload) != {"keep"}:
            raise MemoriesError("invalid_input", "A resolution names exactly the revision to keep (`keep`).")
        keep = cards.check_revision(payload["keep"])
        current = await ctx.engine(lambda: ctx.gateway.get_asset(asset_id))
        cards.spec_for(current.get("kind"))
        result = await ctx.engine(lambda: ctx.gateway.resolve_asset(asset_id, keep))
        return web.json_response(
            {"resolved": True, "revision": result.get("revision"), "short_revision": result.get("short_revision")}
        )

    async def get_card(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        raw = await ctx.engine(lambda: ctx.gateway.get_asset(asset_id))
        return web.json_response(cards.project_card(raw))

    async def save_card(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        payload = json_body(await request.read(), "The save")
        # The kind comes from the engine, not from the page: the allowlist is enforced here.
        current = await ctx.engine(lambda: ctx.gateway.get_asset(asset_id))
        base, fields = cards.parse_save(str(current.get("kind")), payload)
        # DT-7: a save over a change made elsewhere is refused by the engine (stale_base),
        # unless the user chose to keep both versions (a conflict to resolve).
        keep_both = isinstance(payload, dict) and payload.get("keep_both") is True
        result = await ctx.engine(lambda: ctx.gateway.edit_asset(asset_id, base, fields, keep_both=keep_both))
        return web.json_response(
            {
                "saved": True,
                "conflict": bool(result.get("conflict")),
                "revision": result.get("revision"),
                "short_revision": result.get("short_revision"),
            }
        )

    async def lock(request: web.Request) -> web.Response:
        await ctx.engine(ctx.gateway.lock)
        ctx.prober.refresh()
        return web.json_response({"locked": True})

    async def quit_(request: web.Request) -> web.Response:
        if ctx.on_quit is None:
            raise MemoriesError("not_found", "This dashboard cannot quit its host.")
        asyncio.get_running_loop().call_later(0.2, ctx.on_quit)  # answer first, then stop
        return web.json_response({"quitting": True, "locks": ctx.quit_locks})

    app.router.add_get("/", serve("index.html"))
    app.router.add_get("/static/app.js", serve("app.js"))
    app.router.add_get("/static/details.js", serve("details.js"))
    app.router.add_get("/static/app.css", serve("app.css"))
    app.router.add_get("/favicon.svg", serve("favicon.svg"))
    app.router.add_get("/api/status", status)
    app.router.add_get("/api/kinds", kinds)
    app.router.add_get("/api/cards", list_cards)
    app.router.add_post("/api/cards", create_card)
    app.router.add_get("/api/search", search)
    app.router.add_get("/api/cards/{id}", get_card)
    app.router.add_post("/api/cards/{id}", save_card)
    app.router.add_delete("/api/cards/{id}", delete_card)
    app.router.add_post("/api/cards/{id}/resolve", resolve_card)
    app.router.add_post("/api/lock", lock)
    app.router.add_post("/api/quit", quit_)
    tickets.register(app, ctx)  # issue 7: the Tickets page lives in its own route module
    activity.register(app, ctx)  # issue 17: the Activity page (dashboard_activity, no elevation)
    history.register(app, ctx)  # issue 17: an item's revisions and a diff of two (allowlisted fields)
    links.register(app, ctx)  # issue 17: an item's links and its neighbourhood (titles only)
    protected.register(app, ctx)  # issue 17: protected cards, logins, credentials by title and kind
    notebooks.register(app, ctx)  # AG-13: the agents' private notebooks, read-only
    notes.register(app, ctx)  # DT-8: the Read tab (Markdown, sanitized; wikilinks resolved)
    merge.register(app, ctx)  # DT-8: a line-level merge of an item in conflict, saved as its resolution
    live.register(app, ctx)  # DT-7: the engine's change feed as server-sent events, and Needs attention
    settings.register(app, ctx)  # DT-9: the Settings page (engine settings, start at login)
    transfer.register(app, ctx)  # DT-9: Import and Export from the window (the tray's windows take paths and password)
    return app
