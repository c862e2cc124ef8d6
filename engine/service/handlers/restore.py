"""History restore and the trash (issue 31, DT-8).

* ``restore_revision`` writes an earlier revision's content (title, tags, metadata, body) as a
  new revision whose parents are all the current heads: history is never rewritten, and a
  restore is itself undone by restoring again. On a deleted item it is the undelete: the new
  revision follows the tombstone, so the item is back in every view.
* ``trash`` lists deleted items (every head a tombstone) with the title they had.

Both serve ordinary kinds (memory, knowledge, brain, persona), like the generic edit they
mirror: protected cards, logins and credentials keep their own commands, so no restore here
needs elevation. Secret references are carried like an edit carries them (CD-7).
"""

from __future__ import annotations

from typing import Any

from engine.errors import MemoriesError
from engine.service import requests as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import ORDINARY_KINDS, carried_secrets, make_summary, new_revision, write_one
from engine.service.projections import visible_body
from engine.service.registry import op
from engine.service.service import Service

__all__ = ["restore_revision", "trash"]

NOT_RESTORABLE = "Only memories, knowledge, brain and persona items are restored this way; this kind has its own commands."


@op(rq.RestoreRevision)
def restore_revision(service: Service, request: rq.RestoreRevision, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    index = state.index
    entry = index.resolve(request.id)  # deleted items too: restoring one is the undelete
    if entry.kind not in ORDINARY_KINDS:
        raise MemoriesError("invalid_input", NOT_RESTORABLE)
    heads = index.head_revisions(entry)
    if request.rev is not None:
        source = index.resolve_revision(entry, request.rev)
        if source.tombstone:
            raise MemoriesError("invalid_input", "That revision is a deletion; name a revision that has content.")
    else:
        live = [r for r in index.history(entry) if not r.tombstone]
        if not live:
            raise MemoriesError("not_found", "That item has no revision with content to restore.")
        source = live[-1]
    if [h.rev_id for h in heads] == [source.rev_id]:
        raise MemoriesError("invalid_input", "That revision is already the current one; nothing was changed.")
    old = service.vault.summary_of(state, source)
    summary = make_summary(
        str(old.get("title", "")),
        list(old.get("tags", [])),
        dict(old.get("meta", {})),
        **carried_secrets(service, state, entry, caller),
    )
    body = visible_body(service, state, source)
    rev, rows = new_revision(
        service,
        state,
        asset_id=entry.asset_id,
        kind=entry.kind,
        parents=[h.rev_id for h in heads],
        summary=summary,
        body=body,
    )
    result = write_one(service, state, caller, "restore_revision", rev, rows, text=(str(summary["title"]), body))
    return {**result, "restored_from": source.rev_id.hex(), "undeleted": all(h.tombstone for h in heads)}


@op(rq.Trash)
def trash(service: Service, request: rq.Trash, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    index = state.index
    rows: list[dict[str, Any]] = []
    for entry in index.assets.values():
        if entry.kind not in ORDINARY_KINDS or not index.is_deleted(entry):
            continue
        tomb = max(index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq))
        summary = service.vault.summary_of(state, tomb)  # a tombstone keeps the summary it deleted
        rows.append(
            {
                "id": entry.asset_id.hex(),
                "short_id": index.short_id(entry.asset_id),
                "kind": entry.kind,
                "title": str(summary.get("title", "")),
                "tags": list(summary.get("tags", [])),
                "deleted_ms": tomb.created_ms,
            }
        )
    rows.sort(key=lambda r: r["deleted_ms"], reverse=True)
    return {"items": rows[: request.limit], "total": len(rows)}
