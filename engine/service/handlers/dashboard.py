"""The dashboard's listing ops (issue 17, SPEC DT-5, API-6): ordinary items only, and activity.

``dashboard_list`` pages over the ordinary kinds (memory, knowledge, brain, persona) of
the default vault, optionally narrowed to some of them and to one tag, and answers the
per-kind and per-tag counts the page's sidebar shows. Protected cards, logins,
credentials and device-local records are never listed here: the kinds a caller may name
are a closed set, so no request can widen it. Not on the MCP allowlist; the desktop's
gateway is its only caller.

``dashboard_activity`` is the activity view ("what did my agents read today") for a page
that must never elevate: unlike ``audit`` it needs no elevation, so it answers far less —
the last 24 hours at most, and per entry only its time, who acted (in words), the
operation's name and the kinds and current titles of the items it touched. No IDs, no
outcome details, no request data, never content (a credential's title is its name). The
read itself is committed as a ``dashboard_activity`` intent before the answer is delivered.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated, Any, Literal

import msgspec

from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.handlers.assets import ORDINARY_KINDS
from engine.service.handlers.audit import _DEVICE, _asset_view, _newest_first, _who
from engine.service.handlers.devices import device_names
from engine.service.projections import asset_summary
from engine.service.registry import op
from engine.service.requests import Request, Tag
from engine.service.service import Service
from engine.vault.index import AssetEntry

__all__ = ["DashboardList", "DashboardActivity", "TAG_FACETS", "ACTIVITY_HOURS"]

TAG_FACETS = 200
ACTIVITY_HOURS = 24
OrdinaryKind = Literal["memory", "knowledge", "brain", "persona"]


class DashboardList(Request, tag="dashboard_list"):
    kinds: Annotated[list[OrdinaryKind], msgspec.Meta(max_length=4)] = []
    tag: Tag | None = None
    offset: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 100
    sort: Literal["updated", "oldest", "title"] = "updated"


@op(DashboardList)
def dashboard_list(service: Service, request: DashboardList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    wanted: frozenset[str] = frozenset(request.kinds) or frozenset(ORDINARY_KINDS)
    if not wanted <= ORDINARY_KINDS:  # the Literal already holds this; kept as the security line
        raise MemoriesError("invalid_input", "The dashboard lists ordinary items only.")
    vault_id = state.default_vault
    kind_counts: Counter[str] = Counter()
    tag_counts: Counter[str] = Counter()
    # Light rows (sort key, entry) for every match; the full summary only for the page asked
    # for. Summaries are cached on their revisions, so this is one pass over the index.
    rows: list[tuple[Any, AssetEntry]] = []
    for entry in state.index.visible():
        if entry.vault_id != vault_id or entry.kind not in ORDINARY_KINDS:
            continue
        kind_counts[entry.kind] += 1
        if entry.kind not in wanted:
            continue
        heads = state.index.head_revisions(entry)
        newest = max([r for r in heads if not r.tombstone] or heads, key=lambda r: (r.created_ms, r.seq))
        summary = service.vault.summary_of(state, newest)
        tags = list(summary.get("tags", []))
        tag_counts.update(tags)
        if request.tag is not None and request.tag not in tags:
            continue
        if request.sort == "title":
            key: Any = (str(summary.get("title", "")).casefold(), entry.asset_id)
        else:
            key = (newest.changed_ms, entry.asset_id)
        rows.append((key, entry))
    rows.sort(key=lambda row: row[0], reverse=request.sort == "updated")
    page = [asset_summary(service, state, entry) for _, entry in rows[request.offset : request.offset + request.limit]]
    tags = sorted(tag_counts.items(), key=lambda kv: (-kv[1], kv[0].casefold()))[:TAG_FACETS]
    return {
        "items": page,
        "total": len(rows),
        "offset": request.offset,
        "kinds": {kind: kind_counts.get(kind, 0) for kind in sorted(ORDINARY_KINDS)},
        "tags": [{"tag": t, "count": n} for t, n in tags],
        "conflicts": sum(1 for _, entry in rows if entry.in_conflict),
    }


class DashboardActivity(Request, tag="dashboard_activity"):
    hours: Annotated[int, msgspec.Meta(ge=1, le=ACTIVITY_HOURS)] = ACTIVITY_HOURS
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 200


@op(DashboardActivity)
def dashboard_activity(service: Service, request: DashboardActivity, caller: Caller) -> dict[str, Any]:
    """Issue 17: time, actor, op and item titles of the last ``hours`` (≤ 24) of audit entries, newest first."""
    state = service.require_unlocked()
    since_ms = int(time.time() * 1000) - request.hours * 3_600_000
    found: list[dict[str, Any]] = []
    for entry in _newest_first(state):
        if int(entry["ts_ms"]) < since_ms or len(found) > request.limit:
            break
        found.append(entry)
    names = device_names(state) if any(_DEVICE in e for e in found) else {}
    views: dict[bytes, dict[str, Any]] = {}
    entries = []
    for entry in found[: request.limit]:
        fields = {k: (v if isinstance(v := entry.get(k), str) else None) for k in ("op", "caller", "surface", "client")}
        items = []
        for raw in entry.get("assets", []):
            if not isinstance(raw, bytes):
                continue
            asset_id = bytes(raw)
            if asset_id not in views:
                views[asset_id] = _asset_view(service, state, asset_id)
            view = views[asset_id]
            items.append({"kind": view["kind"], "title": view["title"]})
        entries.append(
            {"ts_ms": int(entry["ts_ms"]), "who": _who(entry, fields, names), "op": fields["op"] or "", "items": items}
        )
    service.vault.commit_intent(state, "dashboard_activity", caller, [])
    return {"entries": entries, "hours": request.hours, "more": len(found) > request.limit}
