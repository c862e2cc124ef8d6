"""The dashboard's one listing op (issue 17, SPEC DT-5, API-6): ordinary items only.

``dashboard_list`` pages over the ordinary kinds (memory, knowledge, brain, persona) of
the default vault, optionally narrowed to some of them and to one tag, and answers the
per-kind and per-tag counts the page's sidebar shows. Protected cards, logins,
credentials and device-local records are never listed here: the kinds a caller may name
are a closed set, so no request can widen it. Not on the MCP allowlist; the desktop's
gateway is its only caller.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

import msgspec

from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.handlers.assets import ORDINARY_KINDS
from engine.service.projections import asset_summary
from engine.service.registry import op
from engine.service.requests import Request, Tag
from engine.service.service import Service
from engine.vault.index import AssetEntry

__all__ = ["DashboardList", "TAG_FACETS"]

TAG_FACETS = 200
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
            key = (newest.created_ms, entry.asset_id)
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
