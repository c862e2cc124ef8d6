"""Merging an item in conflict line by line in the dashboard (issue 31, DT-8).

``GET /api/cards/ID/merge`` answers, for an editable item in conflict, each side (head) with
its time, the device that wrote it and its allowlisted fields, the common base revision
where the history has one, and a proposed merge: a three-way line merge of the body against
that base (changes made on one side only are taken; where both sides changed the same lines
differently both are kept between conflict markers, for the user to edit), the title taken
from the side that changed it, and tags merged as sets (added on either side are added,
removed on either side are removed). Without a common base every differing line is a
conflict.

``POST /api/cards/ID/merge`` ``{"heads": [REV, ...], "fields": {title, tags, body}}`` saves
the user's text as a new revision whose parents are all heads: the same write as
``memories edit ID --resolve``. It is refused (``stale_base``) when the heads are no longer
those the page merged, and (``invalid_input``) while a conflict marker line is left in the
body, so a half-done merge is never saved by accident.

The three-way merge follows the classic diff3 walk (the one GNU diff3 and bzr's merge3 use),
on top of ``difflib.SequenceMatcher``: no dependency, and nothing here sees a secret (the
engine's ``get --rev`` already masks protected values as ``{{secret:LABEL}}``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from desktop.dashboard import cards, history
from desktop.dashboard.security import json_body
from engine.errors import MemoriesError

__all__ = ["register", "merge3", "Merged", "common_base", "merge_tags", "merge_title", "MARK_A", "MARK_SPLIT", "MARK_B"]

MARK_A = "<<<<<<<"
MARK_SPLIT = "======="
MARK_B = ">>>>>>>"
MARKER_REFUSED = (
    "The merged text still has conflict markers (lines starting with <<<<<<<, ======= or >>>>>>>); "
    "edit each conflict into the text you want, then save."
)


@dataclass(frozen=True)
class Merged:
    lines: list[str]
    conflicts: int


def _sync_regions(base: Sequence[str], a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int, int, int, int]]:
    """Runs of base lines unchanged on both sides: (base start, base end, a start, a end, b start, b end)."""
    a_blocks = difflib.SequenceMatcher(None, base, a, autojunk=False).get_matching_blocks()
    b_blocks = difflib.SequenceMatcher(None, base, b, autojunk=False).get_matching_blocks()
    regions: list[tuple[int, int, int, int, int, int]] = []
    ia = ib = 0
    while ia < len(a_blocks) and ib < len(b_blocks):
        a_base, a_at, a_len = a_blocks[ia]
        b_base, b_at, b_len = b_blocks[ib]
        start, end = max(a_base, b_base), min(a_base + a_len, b_base + b_len)
        if start < end:
            a_sub = a_at + (start - a_base)
            b_sub = b_at + (start - b_base)
            regions.append((start, end, a_sub, a_sub + end - start, b_sub, b_sub + end - start))
        if a_base + a_len < b_base + b_len:
            ia += 1
        else:
            ib += 1
    regions.append((len(base), len(base), len(a), len(a), len(b), len(b)))
    return regions


def merge3(base: Sequence[str], a: Sequence[str], b: Sequence[str], label_a: str, label_b: str) -> Merged:
    """Lines of ``a`` and ``b`` merged against ``base``; conflicting regions between markers."""
    out: list[str] = []
    conflicts = 0
    iz = ia = ib = 0
    for z_start, z_end, a_start, a_end, b_start, b_end in _sync_regions(base, a, b):
        a_chunk, b_chunk, base_chunk = list(a[ia:a_start]), list(b[ib:b_start]), list(base[iz:z_start])
        if a_chunk or b_chunk:
            if a_chunk == b_chunk or b_chunk == base_chunk:
                out.extend(a_chunk)
            elif a_chunk == base_chunk:
                out.extend(b_chunk)
            else:
                conflicts += 1
                out.extend([f"{MARK_A} {label_a}", *a_chunk, MARK_SPLIT, *b_chunk, f"{MARK_B} {label_b}"])
        out.extend(base[z_start:z_end])
        iz, ia, ib = z_end, a_end, b_end
    return Merged(out, conflicts)


def merge_title(base: str | None, a: str, b: str) -> tuple[str, bool]:
    """The side that changed it; (a, True) when both changed it differently."""
    if a == b or b == base:
        return a, False
    if a == base:
        return b, False
    return a, True


def merge_tags(base: list[str] | None, a: list[str], b: list[str]) -> list[str]:
    """Added on either side: added; removed on either side: removed; order of first appearance."""
    if base is None:
        return list(dict.fromkeys([*a, *b]))
    removed = (set(base) - set(a)) | (set(base) - set(b))
    return [t for t in dict.fromkeys([*a, *b, *base]) if t not in removed]


def common_base(rows: list[dict[str, Any]], a: str, b: str) -> str | None:
    """The newest revision both heads descend from (by the history's parent links), if any."""
    parents = {str(r["revision"]): [str(p) for p in r.get("parents", [])] for r in rows if isinstance(r.get("revision"), str)}
    created = {str(r["revision"]): int(r.get("created_ms") or 0) for r in rows if isinstance(r.get("revision"), str)}

    def ancestors(start: str) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            rev = stack.pop()
            if rev in seen:
                continue
            seen.add(rev)
            stack.extend(parents.get(rev, []))
        return seen

    shared = ancestors(a) & ancestors(b)
    return max(shared, key=lambda rev: (created.get(rev, 0), rev)) if shared else None


def _label(side: dict[str, Any]) -> str:
    return f"{side['author']} · {side['short_revision']}"


def has_markers(text: str) -> bool:
    return any(line.startswith((MARK_A, MARK_B)) or line == MARK_SPLIT for line in text.splitlines())


def register(app: web.Application, ctx: Any) -> None:
    gateway = ctx.gateway

    async def proposal(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        card = cards.project_card(await ctx.engine(lambda: gateway.get_asset(asset_id)))  # editable kinds only
        if not card["conflict"] or len(card["versions"]) < 2:
            raise MemoriesError("invalid_input", "This item is not in conflict; there is nothing to merge.")
        raw = await ctx.engine(lambda: gateway.history(asset_id))
        names = history.device_names(await ctx.engine(gateway.devices))
        rows = [history.project_revision(r, names) for r in raw.get("revisions", []) if isinstance(r, dict)]
        by_rev = {r["revision"]: r for r in rows}
        sides = []
        for version in card["versions"]:
            row = by_rev.get(version["revision"], {})
            sides.append(
                {
                    "revision": version["revision"],
                    "short_revision": version["short_revision"],
                    "created_ms": row.get("created_ms"),
                    "author": row.get("author", "another device"),
                    "fields": version["fields"],
                }
            )
        sides.sort(key=lambda s: s["created_ms"] or 0)
        a, b = sides[0], sides[-1]  # oldest and newest head; more than two heads merge pairwise in turn
        base_rev = common_base(rows, str(a["revision"]), str(b["revision"]))
        base_fields: dict[str, Any] | None = None
        base_row: dict[str, Any] | None = None
        if base_rev is not None:
            base_card = cards.project_card(await ctx.engine(lambda: gateway.get_revision(asset_id, base_rev)))
            base_fields = None if base_card["tombstone"] else base_card["fields"]
            base_row = by_rev.get(base_rev)
        a_fields, b_fields = a["fields"], b["fields"]
        base_body = str(base_fields.get("body", "")).splitlines() if base_fields is not None else []
        body = merge3(
            base_body,
            str(a_fields.get("body", "")).splitlines(),
            str(b_fields.get("body", "")).splitlines(),
            _label(a),
            _label(b),
        )
        title, title_conflict = merge_title(
            base_fields.get("title") if base_fields else None, str(a_fields.get("title", "")), str(b_fields.get("title", ""))
        )
        tags = merge_tags(
            list(base_fields.get("tags", [])) if base_fields else None,
            list(a_fields.get("tags", [])),
            list(b_fields.get("tags", [])),
        )
        return web.json_response(
            {
                "id": card["id"],
                "heads": [s["revision"] for s in sides],
                "sides": sides,
                "base": None
                if base_row is None
                else {
                    "revision": base_row["revision"],
                    "short_revision": base_row["short_revision"],
                    "created_ms": base_row["created_ms"],
                    "author": base_row["author"],
                },
                "merged": {"title": title, "tags": tags, "body": "\n".join(body.lines)},
                "conflicts": body.conflicts,
                "title_conflict": title_conflict,
            }
        )

    async def save(request: web.Request) -> web.Response:
        asset_id = cards.check_asset_id(request.match_info["id"])
        payload = json_body(await request.read(), "The merge")
        if not isinstance(payload, dict) or set(payload) != {"heads", "fields"}:
            raise MemoriesError(
                "invalid_input", "A merge names the versions it merged (`heads`) and the merged fields (`fields`)."
            )
        heads = payload["heads"]
        if not isinstance(heads, list) or not 2 <= len(heads) <= 64:
            raise MemoriesError("invalid_input", "A merge names the two or more versions it merged (`heads`).")
        named = sorted(cards.check_revision(h) for h in heads)
        current = await ctx.engine(lambda: gateway.get_asset(asset_id))
        card = cards.project_card(current)
        base, fields = cards.parse_save(card["kind"], {"base": named[0], "fields": payload["fields"]})
        if sorted(str(v["revision"]) for v in card["versions"]) != named:
            raise MemoriesError(
                "stale_base",
                "This item changed again while you merged; nothing was saved. Reload the merge to include the new version.",
            )
        if has_markers(str(fields.get("body", ""))):
            raise MemoriesError("invalid_input", MARKER_REFUSED)
        result = await ctx.engine(lambda: gateway.resolve_merged(asset_id, base, fields))
        return web.json_response(
            {"resolved": True, "revision": result.get("revision"), "short_revision": result.get("short_revision")}
        )

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    script = (resources.files("desktop.dashboard") / "static" / "merge.js").read_bytes()
    app.router.add_get("/static/merge.js", serve_script)
    app.router.add_get("/api/cards/{id}/merge", proposal)
    app.router.add_post("/api/cards/{id}/merge", save)
