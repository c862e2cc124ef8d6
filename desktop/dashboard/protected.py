"""Protected cards, logins and credentials in the dashboard: by title and kind only (issue 17).

A route module of its own: ``register(app, ctx)`` adds two GET routes.

* ``/api/protected`` answers how many of each protected kind the vault holds (the
  sidebar's counts); with ``?kind=K`` it lists that kind's items, a page at a time,
  optionally narrowed by ``q`` to titles containing it. Credentials are the stand-alone
  ones (`memories credential list`): the credential behind a protected card, a login or a
  protected secret belongs to that item and is not counted twice.
* ``/api/protected/ID`` answers one such item as title, kind, short ID and revision, plus
  the terminal commands that copy its secret (``memories copy``, ``memories login
  copy-password`` …), which need ``memories sudo``.

Both read the engine's ordinary ``list`` and ``get`` answers and keep only those fields:
a body, metadata (account, username, URLs), secret references and the secret itself never
leave this module, and nothing here can copy, reveal or elevate.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from typing import Any

from aiohttp import web

from desktop.dashboard import cards
from engine.errors import MemoriesError

__all__ = ["register", "project_item", "copy_commands", "PAGE_SIZE"]

PAGE_SIZE = 100
# Every item of a kind is read to filter titles: the protected kinds are small (accounts,
# logins), and the engine's `list` has no title filter.
FILTER_LIMIT = 100_000
MAX_QUERY_CHARS = 200
_SUMMARY_KEYS = ("id", "short_id", "kind", "title", "conflict", "updated_ms", "revision", "short_revision")


def copy_commands(
    kind: str, short_id: str, features: Collection[str] = (), username: bool = False, fields: Collection[str] = ()
) -> list[dict[str, str]]:
    """What to run in a terminal to use this item's secret; the page never holds it.

    Only what the item has (its ``features`` from the engine's ``card_read``: a login
    without a TOTP offers no one-time code), and every command whose op needs elevation
    starts with ``memories sudo &&`` (issue 27, item 6).
    """
    if kind == "login":
        rows = []
        if "password" in features:
            rows.append({"label": "Copy the password", "command": f"memories sudo && memories login copy-password {short_id}"})
        if username:
            rows.append({"label": "Copy the username", "command": f"memories login copy-username {short_id}"})
        if "totp" in features:
            rows.append({"label": "Copy the one-time code", "command": f"memories sudo && memories login copy-otp {short_id}"})
        for name in fields:
            # A protected custom field, by name only (IM-2); the page never holds its value.
            ref = shlex.quote(f"{short_id}:{name}")
            rows.append({"label": f"Copy the field {name}", "command": f"memories sudo && memories copy {ref}"})
        return rows or [{"label": "Show its public fields", "command": f"memories login show {short_id}"}]
    if kind == "protected":
        otp = "totp" in features or "hotp" in features
        label = "Copy the token" if "token" in features or not otp else "Copy the current one-time code"
        rows = [{"label": label, "command": f"memories sudo && memories copy {short_id}"}]
        if otp:
            rows.append({"label": "Show the one-time code", "command": f"memories otp {short_id}"})
        return rows
    return [
        {"label": "Copy the password or token", "command": f"memories sudo && memories copy {short_id}"},
        {"label": "Show its public fields", "command": f"memories credential show {short_id}"},
    ]


def project_item(raw: dict[str, Any]) -> dict[str, Any]:
    """Title and kind (and the identifiers the page addresses it by); nothing else."""
    kind = raw.get("kind")
    if kind not in cards.PROTECTED_KINDS:
        raise MemoriesError("invalid_input", "That item is not a protected card, login or credential.")
    return {k: raw[k] for k in _SUMMARY_KEYS if k in raw} | {"locked": True}


def _kind_arg(request: web.Request) -> str:
    kind = request.query.get("kind", "")
    if kind not in cards.PROTECTED_KINDS:
        raise MemoriesError("invalid_input", "kind is protected, login or credential.")
    return kind


def _offset(request: web.Request) -> int:
    try:
        offset = int(request.query.get("offset", "0"))
    except ValueError:
        raise MemoriesError("invalid_input", "offset must be a number.") from None
    if not 0 <= offset <= 10_000_000:
        raise MemoriesError("invalid_input", "offset is out of range.")
    return offset


def register(app: web.Application, ctx: Any) -> None:
    gateway = ctx.gateway

    async def counts() -> web.Response:
        found = {}
        for kind in cards.PROTECTED_KINDS:
            if kind == "credential":  # the user's own; the others show under their items
                found[kind] = len(await ctx.engine(gateway.standalone_credential_ids))
                continue
            raw = await ctx.engine(lambda k=kind: gateway.list_assets(k, 1, 0))
            found[kind] = int(raw.get("total", 0))
        labels = [{"kind": k, "label": label} for k, label in cards.PROTECTED_KINDS.items()]
        return web.json_response({"counts": found, "kinds": labels})

    async def list_protected(request: web.Request) -> web.Response:
        if "kind" not in request.query:
            return await counts()
        kind = _kind_arg(request)
        offset = _offset(request)
        query = request.query.get("q", "").strip().casefold()
        if len(query) > MAX_QUERY_CHARS:
            raise MemoriesError("invalid_input", f"A title filter is at most {MAX_QUERY_CHARS} characters.")
        if query or kind == "credential":
            raw = await ctx.engine(lambda: gateway.list_assets(kind, FILTER_LIMIT, 0))
            matching = [i for i in raw.get("items", []) if query in str(i.get("title", "")).casefold()]
            if kind == "credential":
                # Only stand-alone credentials: a protected card's, a login's or a protected
                # secret's credential is reached through that item (its copy command).
                own = await ctx.engine(gateway.standalone_credential_ids)
                matching = [i for i in matching if i.get("id") in own]
            total, page = len(matching), matching[offset : offset + PAGE_SIZE]
        else:
            raw = await ctx.engine(lambda: gateway.list_assets(kind, PAGE_SIZE, offset))
            total, page = int(raw.get("total", 0)), raw.get("items", [])
        items = [project_item(i) for i in page if isinstance(i, dict) and i.get("kind") == kind]
        return web.json_response({"items": items, "total": total, "offset": offset, "limit": PAGE_SIZE})

    async def get_protected(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        item = project_item(await ctx.engine(lambda: gateway.get_asset(asset_id)))
        item["label"] = cards.PROTECTED_KINDS[item["kind"]]
        features: list[str] = []
        fields: list[str] = []
        username = False
        if item["kind"] in ("login", "protected"):
            # Which secrets it holds (names only) and whether it has a username: read here,
            # never sent to the page, only the commands built from them.
            card = await ctx.engine(lambda: gateway.read_card(asset_id))
            found = (card.get("protected") or {}).get("features", [])
            features = [f for f in found if isinstance(f, str)]
            names = (card.get("protected") or {}).get("fields", [])
            fields = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
            username = bool((card.get("meta") or {}).get("username"))
        item["commands"] = copy_commands(item["kind"], str(item.get("short_id", asset_id)), features, username, fields)
        return web.json_response(item)

    app.router.add_get("/api/protected", list_protected)
    app.router.add_get("/api/protected/{id}", get_protected)
