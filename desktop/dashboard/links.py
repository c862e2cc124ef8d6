"""Links and the graph neighbourhood of one card or memory in the dashboard (issue 17, CD-2).

A route module of its own: ``register(app, ctx)`` adds ``GET /api/cards/ID/links``. It
sends the engine's ``connections`` op (both directions, two links deep) and answers

* ``outgoing`` and ``incoming``: the item's own links, each with the relation, the
  confidence and the node at the other end;
* ``neighbourhood``: every node within two links, grouped by distance;
* ``edges``: the links among the item and those nodes as ``{src, dst, rel}`` (the graph
  drawing's lines; both ends are always listed nodes or the item itself).

A node is its ID, short ID, kind and title only (a protected card or login appears by
title and kind, like everywhere in the dashboard). The engine already hides deleted and
conflicted nodes with their links, and refuses items that are not graph nodes
(credentials, files), so the page shows no Links tab for a credential.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from desktop.dashboard import cards

__all__ = ["register", "project_links", "DEPTH", "NODE_LIMIT"]

DEPTH = 2
NODE_LIMIT = 200


def _node(raw: dict[str, Any]) -> dict[str, Any]:
    kind = raw.get("kind")
    return {
        "id": raw.get("id"),
        "short_id": raw.get("short_id"),
        "kind": kind,
        "title": str(raw.get("title", "")),
        "locked": kind in cards.PROTECTED_KINDS,
        "editable": kind in cards.EDITABLE_KINDS,
    }


def _edge(edge: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    confidence = edge.get("confidence")
    return {
        "rel": str(edge.get("rel", "")),
        "confidence": confidence if isinstance(confidence, (int, float)) else None,
        "node": node,
    }


def project_links(raw: dict[str, Any]) -> dict[str, Any]:
    """The engine's ``connections`` answer reduced to what the Links tab shows."""
    root = raw.get("id")
    nodes = {n["id"]: _node(n) for n in raw.get("neighbours", []) if isinstance(n, dict) and isinstance(n.get("id"), str)}
    distance = {n["id"]: n.get("distance") for n in raw.get("neighbours", []) if isinstance(n, dict)}
    outgoing, incoming = [], []
    for edge in raw.get("edges", []):
        if not isinstance(edge, dict):
            continue
        if edge.get("src") == root and edge.get("dst") in nodes:
            outgoing.append(_edge(edge, nodes[edge["dst"]]))
        elif edge.get("dst") == root and edge.get("src") in nodes:
            incoming.append(_edge(edge, nodes[edge["src"]]))
    by_title = lambda e: (e["node"]["title"].casefold(), e["rel"])  # noqa: E731 - a sort key
    groups: dict[int, list[dict[str, Any]]] = {}
    for node_id, node in nodes.items():
        d = distance.get(node_id)
        if isinstance(d, int):
            groups.setdefault(d, []).append(node)
    drawn = {*nodes, root}
    lines = [
        {"src": e["src"], "dst": e["dst"], "rel": str(e.get("rel", ""))}
        for e in raw.get("edges", [])
        if isinstance(e, dict) and e.get("src") in drawn and e.get("dst") in drawn and e.get("src") != e.get("dst")
    ]
    return {
        "edges": lines,
        "outgoing": sorted(outgoing, key=by_title),
        "incoming": sorted(incoming, key=by_title),
        "neighbourhood": [
            {"distance": d, "nodes": sorted(group, key=lambda n: n["title"].casefold())} for d, group in sorted(groups.items())
        ],
        "truncated": bool(raw.get("truncated")),
    }


def register(app: web.Application, ctx: Any) -> None:
    gateway = ctx.gateway

    async def links(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        # `connections` itself refuses every kind that is not a graph node (credentials,
        # files, transcripts, device records) with invalid_input, and reads no content.
        raw = await ctx.engine(lambda: gateway.connections(asset_id, DEPTH, NODE_LIMIT))
        return web.json_response(project_links(raw))

    app.router.add_get("/api/cards/{id}/links", links)
