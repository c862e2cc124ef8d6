"""The Read tab's route (issue 31, DT-8): an item's body as sanitized HTML, wikilinks resolved.

``GET /api/cards/ID/rendered`` answers ``{"html", "wikilinks"}`` for editable kinds only (the
same allowlist as the editor; protected items never reach this page's body views). A
``[[Title]]`` resolves by exact title against the dashboard's own item list (ordinary kinds),
newest item first when two share a title; ``wikilinks`` says which titles resolved to what.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from desktop.dashboard import cards, markdown

__all__ = ["register", "MAX_TITLE_PAGES"]

TITLE_PAGE = 500
MAX_TITLE_PAGES = 40  # 20,000 items: past that a wikilink to an older item shows as unresolved


def _titles(gateway: Any, wanted: set[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    offset = 0
    for _ in range(MAX_TITLE_PAGES):
        page = gateway.list_ordinary([], None, TITLE_PAGE, offset, "updated")
        items = [i for i in page.get("items", []) if isinstance(i, dict)]
        for item in items:
            title = item.get("title")
            if isinstance(title, str) and title in wanted and title not in found and item.get("kind") in cards.EDITABLE_KINDS:
                found[title] = str(item.get("id"))
        offset += len(items)
        if len(found) == len(wanted) or not items or offset >= int(page.get("total", 0)):
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

    app.router.add_get("/api/cards/{id}/rendered", rendered)
