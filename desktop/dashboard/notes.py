"""Notes that read like notes (issue 31, DT-8): the Read tab, history restore and the trash.

``GET /api/cards/ID/rendered`` answers ``{"html", "wikilinks"}`` for editable kinds only (the
same allowlist as the editor; protected items never reach this page's body views). A
``[[Title]]`` resolves as the engine links it (case-insensitively; ``Folder/Title`` and
``Title.md`` name ``Title``) against the dashboard's own item list (ordinary kinds), newest
item first when two share a title; ``wikilinks`` says which names resolved to what.

``POST /api/cards/ID/restore`` ``{"revision"}`` writes that revision's content as a new
revision (the engine's ``restore_revision``), for editable kinds only. ``GET /api/trash``
lists deleted items by title, kind and time; ``POST /api/trash/ID/restore`` brings one back
as a revision after its tombstone. The engine serves ordinary kinds only, so neither needs
elevation.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import web

from desktop.dashboard import cards, markdown
from desktop.dashboard.security import json_body
from engine.errors import MemoriesError

__all__ = ["register", "MAX_TITLE_PAGES"]

TITLE_PAGE = 500
MAX_TITLE_PAGES = 40  # 20,000 items: past that a wikilink to an older item shows as unresolved


def name_keys(name: str) -> list[str]:
    """The titles a wikilink name matches, case-folded, as the engine links it (engine/cards/
    wikilinks.py ``name_variants``): as written, without ``.md``, and its last path part."""
    variants = [name]
    if name.lower().endswith((".md", ".markdown")):
        variants.append(name.rsplit(".", 1)[0])
    last = variants[-1].rsplit("/", 1)[-1]
    if last and last != variants[-1]:
        variants.append(last)
    return list(dict.fromkeys(v.strip().casefold() for v in variants if v.strip()))


def _titles(gateway: Any, wanted: set[str]) -> dict[str, str]:
    """Each wanted name → the item it names: newest first (the list's order), most specific key first."""
    by_key: dict[str, list[tuple[int, str]]] = {}
    for name in wanted:
        for rank, key in enumerate(name_keys(name)):
            by_key.setdefault(key, []).append((rank, name))
    found: dict[str, str] = {}
    found_rank: dict[str, int] = {}
    offset = 0
    for _ in range(MAX_TITLE_PAGES):
        page = gateway.list_ordinary([], None, TITLE_PAGE, offset, "updated")
        items = [i for i in page.get("items", []) if isinstance(i, dict)]
        for item in items:
            title = item.get("title")
            if not isinstance(title, str) or item.get("kind") not in cards.EDITABLE_KINDS:
                continue
            for rank, name in by_key.get(title.casefold(), ()):
                if rank < found_rank.get(name, len(name_keys(name)) + 1):
                    found[name], found_rank[name] = str(item.get("id")), rank
        offset += len(items)
        if (found and all(found_rank.get(n) == 0 for n in wanted)) or not items or offset >= int(page.get("total", 0)):
            break
    return found


def register(app: web.Application, ctx: Any) -> None:
    gateway = ctx.gateway

    async def rendered(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        card = cards.project_card(await ctx.engine(lambda: gateway.get_asset(asset_id)))
        body = str(card["fields"].get("body", ""))
        wanted = markdown.wikilink_titles(body)
        resolved = await ctx.engine(lambda: _titles(gateway, set(wanted))) if wanted else {}
        return web.json_response(
            {
                "html": markdown.render(body, resolved),
                "wikilinks": [{"title": t, "id": resolved.get(t)} for t in wanted],
            }
        )

    async def restore(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        payload = json_body(await request.read(), "The restore")
        if not isinstance(payload, dict) or set(payload) != {"revision"}:
            raise MemoriesError("invalid_input", "A restore names exactly the revision to restore (`revision`).")
        revision = cards.check_revision(payload["revision"])
        cards.spec_for((await ctx.engine(lambda: gateway.get_asset(asset_id))).get("kind"))  # editable kinds only
        result = await ctx.engine(lambda: gateway.restore_revision(asset_id, revision))
        return web.json_response(_restored(result))

    async def trash(request: web.Request) -> web.Response:
        raw = await ctx.engine(gateway.trash)
        items = [
            {k: i.get(k) for k in ("id", "short_id", "kind", "title", "deleted_ms")}
            for i in raw.get("items", [])
            if isinstance(i, dict) and i.get("kind") in cards.EDITABLE_KINDS
        ]
        return web.json_response({"items": items, "total": raw.get("total", len(items))})

    async def untrash(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        return web.json_response(_restored(await ctx.engine(lambda: gateway.restore_revision(asset_id, None))))

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    script = (resources.files("desktop.dashboard") / "static" / "trash.js").read_bytes()
    app.router.add_get("/static/trash.js", serve_script)
    app.router.add_get("/api/cards/{id}/rendered", rendered)
    app.router.add_post("/api/cards/{id}/restore", restore)
    app.router.add_get("/api/trash", trash)
    app.router.add_post("/api/trash/{id}/restore", untrash)


def _restored(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "restored": True,
        "id": result.get("id"),
        "short_id": result.get("short_id"),
        "revision": result.get("revision"),
        "short_revision": result.get("short_revision"),
    }
