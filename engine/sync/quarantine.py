"""Quarantined revisions (SY-2; design in docs/sync.md).

An incoming revision that verified but must not enter the current view (written under a
superseded policy by a device the merged policy no longer lets write: revoked, or its user
made a Reader) is stored as a sealed ``sync_quarantine`` record — its exact signed bytes,
signature and inner-encrypted content — never as a revision: it is in no head, no listing
and no search. Only this device's user clears it, locally: ``reapply`` writes a fresh
revision with the quarantined content under the current policy (if this device may write
there), ``discard`` records that it was dropped. No incoming field can clear a quarantine:
the records are local and never synced.
"""

from __future__ import annotations

from typing import Any

from engine.errors import MemoriesError
from engine.vault.core import Unlocked

__all__ = ["QUARANTINE_RECORD", "QUARANTINE_DONE_RECORD", "quarantined", "quarantined_ids", "find"]

QUARANTINE_RECORD = "sync_quarantine"
QUARANTINE_DONE_RECORD = "sync_quarantine_done"


def _done(state: Unlocked) -> set[bytes]:
    return {bytes(record["id"]) for _, record in state.extra_records.get(QUARANTINE_DONE_RECORD, [])}


def quarantined(state: Unlocked) -> list[dict[str, Any]]:
    """Open quarantine records, oldest first (one per revision)."""
    done = _done(state)
    seen: set[bytes] = set()
    out: list[dict[str, Any]] = []
    for _, record in state.extra_records.get(QUARANTINE_RECORD, []):
        rev = bytes(record["rev"])
        if bytes(record["id"]) in done or rev in seen:
            continue
        seen.add(rev)
        out.append(record)
    return out


def quarantined_ids(state: Unlocked) -> set[bytes]:
    """Revision IDs held in quarantine or already reviewed: a peer sending them again changes nothing."""
    return {bytes(record["rev"]) for _, record in state.extra_records.get(QUARANTINE_RECORD, [])}


def find(state: Unlocked, ref: str) -> dict[str, Any]:
    """An open quarantine record by a hex prefix of its ID (at least 4 digits)."""
    text = ref.strip().lower()
    if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
        raise MemoriesError("invalid_input", "A quarantine ID is a hex prefix of at least 4 characters.")
    matches = [r for r in quarantined(state) if bytes(r["id"]).hex().startswith(text)]
    if not matches:
        raise MemoriesError("not_found", "No open quarantine entry has that ID; see `memories quarantine list`.")
    if len(matches) > 1:
        raise MemoriesError("ambiguous_id", "That prefix matches more than one quarantine entry; type more characters.")
    return matches[0]
