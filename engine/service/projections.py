"""Safe projections of assets for clients: short IDs, summaries, never secrets."""

from __future__ import annotations

from typing import Any

from engine.crypto.keys import fingerprint
from engine.service.service import Service, Unlocked
from engine.vault.index import REV_SHORT, AssetEntry
from engine.vault.revision import Revision

__all__ = ["asset_summary", "revision_ref", "content_view"]


def revision_ref(rev: Revision) -> dict[str, Any]:
    return {"revision": rev.rev_id.hex(), "short_revision": rev.rev_id.hex()[:REV_SHORT]}


def _newest(revs: list[Revision]) -> Revision:
    return max(revs, key=lambda r: (r.created_ms, r.seq))


def asset_summary(service: Service, state: Unlocked, entry: AssetEntry) -> dict[str, Any]:
    heads = state.index.head_revisions(entry)
    live = [r for r in heads if not r.tombstone] or heads
    newest = _newest(live)
    summary = service.summary_of(state, newest)
    first = state.index.revisions[entry.revisions[0]]
    return {
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        "kind": entry.kind,
        "title": summary.get("title", ""),
        "tags": list(summary.get("tags", [])),
        "conflict": entry.in_conflict,
        "heads": len(heads),
        "created_ms": first.created_ms,
        "updated_ms": newest.created_ms,
        **revision_ref(newest),
    }


def content_view(service: Service, state: Unlocked, rev: Revision, *, with_body: bool = True) -> dict[str, Any]:
    """Title, body, tags, meta of one revision; ``with_body=False`` for secret-bodied kinds."""
    summary = service.summary_of(state, rev)
    return {
        **revision_ref(rev),
        "title": summary.get("title", ""),
        "body": service.body_of(state, rev) if with_body and not rev.tombstone else "",
        "tags": list(summary.get("tags", [])),
        "meta": dict(summary.get("meta", {})),
        "tombstone": rev.tombstone,
        "created_ms": rev.created_ms,
        "author": fingerprint(rev.author)[:16],
    }
