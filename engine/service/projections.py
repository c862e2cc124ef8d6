"""Safe projections of assets for clients: short IDs, summaries, never secrets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.crypto.keys import fingerprint
from engine.service.service import Service
from engine.vault.core import Unlocked, VaultCore
from engine.vault.index import REV_SHORT, AssetEntry
from engine.vault.revision import Revision, held, keep_list_fields

__all__ = [
    "BODY_REDACTORS",
    "SUMMARY_REDACTORS",
    "asset_summary",
    "listed_summaries",
    "newest_head",
    "revision_ref",
    "content_view",
    "summary_masker",
    "visible_body",
    "visible_summary",
]

# Redactors applied to every body a client is shown, of any revision (CD-7, HI-3): signed
# bodies are never rewritten, so a value protected later is masked whenever an older
# revision (or a head written before the protection) is read, diffed, exported or indexed.
# Each takes (vault core, state, asset_id, body) and returns the body to show.
BODY_REDACTORS: list[Callable[[VaultCore, Unlocked, bytes, str], str]] = []
# The same for a revision's summary (title, tags, metadata, annotations): a value protected
# later is masked there too (issue 27). Each takes (vault core, state, asset_id) and returns
# the masking function for that asset's summaries, or None when there is nothing to mask; it
# is made once per asset so that a history of many revisions looks the values up once.
Masker = Callable[[dict[str, Any]], dict[str, Any]]
SUMMARY_REDACTORS: list[Callable[[VaultCore, Unlocked, bytes], Masker | None]] = []


def visible_body(service: Service, state: Unlocked, rev: Revision) -> str:
    """The body of ``rev`` as clients may see it: decrypted, then every redactor applied."""
    body = service.vault.body_of(state, rev)
    for redactor in BODY_REDACTORS:
        body = redactor(service.vault, state, rev.asset_id, body)
    return body


def summary_masker(service: Service, state: Unlocked, asset_id: bytes) -> Masker:
    """What to apply to each summary of ``asset_id`` a client is shown (see SUMMARY_REDACTORS)."""
    maskers = [m for redactor in SUMMARY_REDACTORS if (m := redactor(service.vault, state, asset_id)) is not None]

    def apply(summary: dict[str, Any]) -> dict[str, Any]:
        for mask in maskers:
            summary = mask(summary)
        return summary

    return apply


def visible_summary(service: Service, state: Unlocked, rev: Revision) -> dict[str, Any]:
    """The summary of ``rev`` as clients may see it: decrypted, then every redactor applied."""
    return summary_masker(service, state, rev.asset_id)(service.vault.summary_of(state, rev))


def revision_ref(rev: Revision) -> dict[str, Any]:
    return {"revision": rev.rev_id.hex(), "short_revision": rev.rev_id.hex()[:REV_SHORT]}


def newest_head(state: Unlocked, entry: AssetEntry) -> Revision:
    """The head a summary shows: the newest live head (the newest tombstone if all are)."""
    return state.index.newest_head(entry)


def listed_summaries(service: Service, state: Unlocked, asset_ids: Sequence[bytes]) -> list[dict[str, Any]]:
    """Title and tags of the summaries the list rows of these items show (their newest live
    heads'), in order, as the list orders read them (engine/vault/listing.py): kept from an earlier
    read (Revision.list_fields), else read with the heads' signed bytes read back together (one
    query, not one each) and kept for the next time; the whole summaries are not kept."""
    heads = [newest_head(state, state.index.assets[asset_id]) for asset_id in asset_ids]
    out: list[dict[str, Any] | None] = []
    unread: list[Revision] = []
    for head in heads:
        fields = head.list_fields
        if fields is None:
            unread.append(head)
            out.append(None)
        else:
            out.append({"title": fields[0], "tags": fields[1]})
    if unread:
        with held([head for head in unread if not head.summary_kept]):
            read = [service.vault.summary_of(state, head, keep=False) for head in unread]
        keep_list_fields(zip(unread, read, strict=True))
        fill = iter(read)
        out = [summary if summary is not None else next(fill) for summary in out]
    return [summary for summary in out if summary is not None]


def asset_summary(
    service: Service,
    state: Unlocked,
    entry: AssetEntry,
    *,
    keep: bool = True,
    opened: list[tuple[Revision, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """An item's list row; ``keep`` False: its decrypted summary is not kept (a page of a listing).
    ``opened``: where to add the head and its summary when the row opened it unmasked (a listing
    keeps their list fields, engine.vault.revision.keep_list_fields)."""
    newest = newest_head(state, entry)
    # Lists and search results show many items: the redactors (which read every revision's
    # secret map) run only where a protected value can be: a head written after a protection
    # carries the map, a head from a branch that forked before it sits beside another, and a
    # tombstone carries none. Elsewhere the row shows the head's own title and tags, which a
    # listing keeps once read (never for a summary with a secret map, keep_list_fields).
    masked = len(entry.heads) > 1 or newest.tombstone
    fields = None if masked else newest.list_fields
    if fields is None:
        summary = service.vault.summary_of(state, newest, keep=keep)
        if summary.get("secrets") or masked:
            summary = visible_summary(service, state, newest)
        elif opened is not None:
            opened.append((newest, summary))
        fields = (summary.get("title", ""), summary.get("tags", []))
    first = state.index.revisions[entry.revisions[0]]
    return {
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        "kind": entry.kind,
        "title": fields[0],
        "tags": list(fields[1]),
        "conflict": entry.in_conflict,
        "heads": len(entry.heads),
        # A restored item shows its original times (BK-2), not the restore's (Revision.changed_ms).
        "created_ms": first.item_created_ms,
        "updated_ms": newest.changed_ms,
        **revision_ref(newest),
    }


def content_view(service: Service, state: Unlocked, rev: Revision, *, with_body: bool = True) -> dict[str, Any]:
    """Title, body, tags, meta of one revision; ``with_body=False`` for secret-bodied kinds."""
    summary = visible_summary(service, state, rev)
    view = {
        **revision_ref(rev),
        "title": summary.get("title", ""),
        "body": visible_body(service, state, rev) if with_body and not rev.tombstone else "",
        "tags": list(summary.get("tags", [])),
        "meta": dict(summary.get("meta", {})),
        "tombstone": rev.tombstone,
        "created_ms": rev.created_ms,
        "author": fingerprint(rev.author)[:16],
    }
    notes = summary.get("annotations")
    if isinstance(notes, list) and notes:  # AG-7: dated, attributed notes (engine/service/handlers/agents.py)
        view["annotations"] = [dict(n) for n in notes if isinstance(n, dict)]
    return view
