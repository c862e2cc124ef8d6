"""Agent-facing recall ops (issue 18): ``annotate`` (AG-7).

An annotation is a dated, attributed note attached to a memory or card without rewriting
it: a new signed revision whose body, title, tags and metadata are the current ones,
byte for byte, and whose summary gains one entry in ``annotations`` (note, time, and who
wrote it: the grant's agent name for an MCP caller, else ``cli``/``dashboard``).
Reads return the list (``annotations``); ``history`` marks the revision that added one.
It syncs and merges like any revision.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec

from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.handlers.assets import ORDINARY_KINDS, carried_secrets, new_revision, visible_entry, write_one
from engine.service.registry import op
from engine.service.requests import AssetRef, Request
from engine.service.service import Service

__all__ = ["Annotate", "MAX_ANNOTATIONS", "author_of"]

MAX_ANNOTATIONS = 200  # per item: an agent in a loop must not grow one summary without bound
NoteText = Annotated[str, msgspec.Meta(min_length=1, max_length=4000)]


class Annotate(Request, tag="annotate"):
    id: AssetRef
    note: NoteText


def author_of(caller: Caller) -> str:
    """``agent:NAME`` for an MCP grant, else the surface (cli, dashboard, …)."""
    if caller.namespace.startswith("mcp:"):
        return "agent:" + caller.namespace[4:]
    return caller.surface


@op(Annotate, mcp_allowed=True)
def annotate(service: Service, request: Annotate, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    entry = visible_entry(state, request.id)
    if entry.kind not in ORDINARY_KINDS:
        raise MemoriesError("invalid_input", "Annotations go on memories and cards (knowledge, brain, persona).")
    if entry.in_conflict:
        raise MemoriesError("conflict")
    note = request.note.strip()
    if not note:
        raise MemoriesError("invalid_input", "An annotation needs some text.")
    heads = state.index.head_revisions(entry)
    source = heads[0]
    old = service.vault.summary_of(state, source)
    existing = old.get("annotations", [])
    annotations = list(existing) if isinstance(existing, list) else []
    if len(annotations) >= MAX_ANNOTATIONS:
        raise MemoriesError("invalid_input", f"This item already has {MAX_ANNOTATIONS} annotations; edit it instead.")
    annotations.append({"note": note, "at_ms": int(time.time() * 1000), "by": author_of(caller)})
    summary = {k: v for k, v in old.items() if k not in ("content_key", "secrets")}
    summary.update(carried_secrets(service, state, entry, caller))  # CD-7: agents cannot touch secret-bearing items
    summary["annotations"] = annotations
    body = service.vault.body_of(state, source)  # the stored body itself, unchanged
    rev, rows = new_revision(
        service, state, asset_id=entry.asset_id, kind=entry.kind, parents=[source.rev_id], summary=summary, body=body
    )
    result = write_one(service, state, caller, "annotate", rev, rows)
    return {**result, "annotations": len(annotations)}
