"""Dashboard history and diff of one item (issue 17): which revisions it has, and what changed.

A route module of its own, like the Tickets page: ``register(app, ctx)`` adds two GET routes.

* ``/api/cards/ID/history`` lists the item's revisions, newest first: time, which device
  wrote it (by name, from the non-elevated ``devices`` op), short revision, parents, title
  and whether it is a head or a deletion. Never a body. It serves every kind the dashboard
  shows, protected ones included, because a revision row carries only a title.
* ``/api/cards/ID/diff?from=REV&to=REV`` is a line diff of the editor's allowlisted fields
  (title, tags, body) between two revisions, for editable kinds only. Each side is read
  with ``get --rev`` (audited like any read), whose body the engine has already passed
  through ``projections.visible_body``, so protected values stay masked. The engine's own
  ``diff`` op is not used because its projection includes typed metadata, which the
  editor's allowlist keeps off the page. Protected cards, logins and credentials are shown
  by title and kind only, so their diff is refused (``memories diff ID`` in a terminal).
"""

from __future__ import annotations

import difflib
from typing import Any

from aiohttp import web

from desktop.dashboard import cards
from engine.errors import MemoriesError

__all__ = ["register", "project_revision", "line_diff", "MAX_DIFF_LINES"]

# Bodies are at most 1 MB; past this many lines per side the page points to the CLI
# instead of making the browser (and difflib) chew through it.
MAX_DIFF_LINES = 20_000
CONTEXT_LINES = 3
PROTECTED_DIFF = (
    "The dashboard shows protected items by title and kind only; `memories diff ID` shows their changes, secrets masked."
)


def project_revision(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A history row as the page may show it: no body, no annotations, the author in words."""
    author = str(row.get("author", ""))
    return {
        "revision": row.get("revision"),
        "short_revision": row.get("short_revision"),
        "parents": [p for p in row.get("parents", []) if isinstance(p, str)],
        "created_ms": row.get("created_ms") if isinstance(row.get("created_ms"), int) else None,
        "author": names.get(author, "device " + author[:8] if author else "a restored backup"),
        "title": str(row.get("title", "")),
        "tombstone": bool(row.get("tombstone")),
        "head": bool(row.get("head")),
    }


def device_names(raw: dict[str, Any]) -> dict[str, str]:
    """Author fingerprint prefix (as history shows it) → "this device" or the device's name."""
    names: dict[str, str] = {}
    for device in raw.get("devices", []):
        if not isinstance(device, dict) or not isinstance(device.get("fingerprint"), str):
            continue
        label = "this device" if device.get("this_device") else str(device.get("name") or "another device")
        names[device["fingerprint"][:16]] = label
    return names


def text_lines(fields: dict[str, Any], tombstone: bool) -> list[str]:
    """The allowlisted fields of one revision as lines: title, tags, a blank line, the body."""
    if tombstone:
        return ["(deleted)"]
    tags = fields.get("tags") or []
    return [
        f"Title: {fields.get('title', '')}",
        "Tags: " + ", ".join(str(t) for t in tags),
        "",
        *str(fields.get("body", "")).splitlines(),
    ]


def line_diff(old: list[str], new: list[str]) -> list[dict[str, Any]]:
    """Hunks of a unified diff as rows the page renders with textContent: a hunk header,
    then context (" "), removed ("-") and added ("+") lines with their line numbers."""
    rows: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        rows.append({"op": "@", "text": f"lines {first[1] + 1}–{last[2]} → {first[3] + 1}–{last[4]}"})
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows.extend(
                    {"op": " ", "old": i + 1, "new": j + 1, "text": old[i]}
                    for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
                )
                continue
            rows.extend({"op": "-", "old": i + 1, "text": old[i]} for i in range(i1, i2))
            rows.extend({"op": "+", "new": j + 1, "text": new[j]} for j in range(j1, j2))
    return rows


def _revision_arg(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    return None if value in (None, "") else cards.check_revision(value)


def register(app: web.Application, ctx: Any) -> None:
    gateway = ctx.gateway

    async def history(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        current = await ctx.engine(lambda: gateway.get_asset(asset_id))
        kind = cards.shown_kind(current.get("kind"))
        raw = await ctx.engine(lambda: gateway.history(asset_id))
        names = device_names(await ctx.engine(gateway.devices))
        rows = [project_revision(r, names) for r in raw.get("revisions", []) if isinstance(r, dict)]
        rows.sort(key=lambda r: r["created_ms"] or 0, reverse=True)
        return web.json_response({"id": raw.get("id"), "kind": kind, "diffable": kind in cards.EDITABLE_KINDS, "revisions": rows})

    async def diff(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        new_rev = _revision_arg(request, "to")
        old_rev = _revision_arg(request, "from")
        if new_rev is None:
            raise MemoriesError("invalid_input", "A diff names the revision to show (`to`).")
        # The newer side's answer names the kind: no separate read (each get is an audit entry).
        newer = await ctx.engine(lambda: gateway.get_revision(asset_id, new_rev))
        if cards.shown_kind(newer.get("kind")) not in cards.EDITABLE_KINDS:
            raise MemoriesError("invalid_input", PROTECTED_DIFF)
        new = cards.project_card(newer)
        old = cards.project_card(await ctx.engine(lambda: gateway.get_revision(asset_id, old_rev))) if old_rev else None
        new_lines = text_lines(new["fields"], new["tombstone"])
        old_lines = text_lines(old["fields"], old["tombstone"]) if old is not None else []
        too_large = max(len(new_lines), len(old_lines)) > MAX_DIFF_LINES
        return web.json_response(
            {
                "from": old["revision"] if old is not None else None,
                "to": new["revision"],
                "too_large": too_large,
                "rows": [] if too_large else line_diff(old_lines, new_lines),
            }
        )

    app.router.add_get("/api/cards/{id}/history", history)
    app.router.add_get("/api/cards/{id}/diff", diff)
