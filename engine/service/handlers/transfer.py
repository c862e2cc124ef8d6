"""Import in batches (one commit per batch, idempotent) and elevated export of ordinary content."""

from __future__ import annotations

import os
from typing import Any

from engine.service import requests as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import ORDINARY_KINDS, body_links, content_key, make_summary, new_revision
from engine.service.handlers.vaults import vault_for
from engine.service.memory import gc_paused
from engine.service.projections import asset_summary, content_view
from engine.service.registry import op
from engine.service.search_runtime import expect_more_commits
from engine.service.service import Service
from engine.vault.revision import Revision, chunk_count, sign_revisions


@op(rq.ImportBatch)
def import_batch(service: Service, request: rq.ImportBatch, caller: Caller) -> dict[str, Any]:
    # Bulk work that makes ~100 objects per note, most of which live on in the index: the
    # cyclic collector would scan them again and again as the batch grows (issue 32).
    with gc_paused():
        expect_more_commits(service, request.more)
        try:
            return _import_batch(service, request, caller)
        finally:
            expect_more_commits(service, False)


def _import_batch(service: Service, request: rq.ImportBatch, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    store = service.require_store()
    revisions: list[Revision] = []
    texts: list[tuple[Revision, str, str]] = []
    rows: list[tuple[int, bytes]] = []
    seen: set[str] = set()
    skipped = 0
    vault = vault_for(state, request.vault)
    # Refused before anything is reserved when this user may not write there (read_only).
    service.vault.writable_vault(state, b"", vault)
    next_seq = store.reserve_content(1)[0]
    for item in request.items:
        key = content_key(item.title, item.body, item.tags, item.meta)
        if key in seen or service.vault.has_content(state, key):
            skipped += 1
            continue
        seen.add(key)
        need = chunk_count(len(item.body.encode("utf-8")))
        reserved = list(range(next_seq, next_seq + need))
        next_seq += need
        rev, rev_rows = new_revision(
            service,
            state,
            asset_id=os.urandom(16),
            kind="memory",
            parents=[],
            summary=make_summary(item.title, item.tags, item.meta),
            body=item.body,
            reserved=reserved,
            vault=vault,
            # The summary's tags are the item's stripped: the same key unless stripping changes one.
            key=key if all(tag == tag.strip() for tag in item.tags) else None,
            unsigned=True,  # signed below, all at once on two cores
        )
        revisions.append(rev)
        texts.append((rev, item.title, item.body))
        rows.extend(rev_rows)
    sign_revisions(state.identity, revisions)
    report: dict[str, Any] = {}
    if revisions:
        # DT-8: wikilinks between the notes of this batch (and to items already there) become links.
        links, report = body_links(service, state, texts)
        audit = service.vault.audit_record(state, "import", caller, outcome="ok", assets=[r.asset_id for r in revisions])
        service.vault.commit(state, revisions, rows, [*links, audit])
    return {
        "created": len(revisions),
        "skipped": skipped,
        "ids": [r.asset_id.hex() for r in revisions],
        **({"wikilinks": report} if report else {}),
    }


@op(rq.Export, needs_elevation=True)
def export(service: Service, request: rq.Export, caller: Caller) -> dict[str, Any]:
    """Ordinary content only (no credentials or protected material), paged."""
    state = service.require_unlocked()
    vault_id = vault_for(state, request.vault).vault_id
    entries = sorted(
        (e for e in state.index.visible() if e.kind in ORDINARY_KINDS and e.vault_id == vault_id),
        key=lambda e: state.index.revisions[e.revisions[0]].created_ms,
    )
    page = entries[request.offset : request.offset + request.limit]
    items = []
    for entry in page:
        summary = asset_summary(service, state, entry)
        head = state.index.revisions[bytes.fromhex(summary["revision"])]
        view = content_view(service, state, head)
        items.append(
            {
                "id": summary["id"],
                "short_id": summary["short_id"],
                "kind": entry.kind,
                "title": view["title"],
                "body": view["body"],
                "tags": view["tags"],
                "meta": view["meta"],
                "conflict": summary["conflict"],
                "created_ms": summary["created_ms"],
                "updated_ms": summary["updated_ms"],
            }
        )
    service.vault.commit_intent(state, "export", caller, [e.asset_id for e in page])
    return {"items": items, "total": len(entries), "offset": request.offset}
