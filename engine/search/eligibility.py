"""What may enter a search index (SR-3): decided before any text is read or segmented."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["INDEXED_KINDS", "exclusion_reason", "is_private"]

# Memories and ordinary cards. Credentials, files, protected cards and any kind a
# later feature invents stay out unless added here deliberately.
# file: title and tags; its text (a bounded sample, engine/files TEXT_SAMPLE_BYTES) only for a
# text file the user made searchable (issue 27).
INDEXED_KINDS = frozenset({"memory", "knowledge", "brain", "persona", "transcript", "file"})  # transcript: AG-5
_TRUE = frozenset({"true", "yes", "1"})


def is_private(summary: Mapping[str, Any]) -> bool:
    meta = summary.get("meta")
    if isinstance(meta, Mapping) and str(meta.get("private", "")).strip().lower() in _TRUE:
        return True
    return summary.get("private") is True


def _is_protected(summary: Mapping[str, Any]) -> bool:
    meta = summary.get("meta")
    card_type = summary.get("card_type") or (meta.get("card_type") if isinstance(meta, Mapping) else None)
    return summary.get("protected") is True or card_type in ("protected", "protected_card")


def exclusion_reason(
    *, kind: str, deleted: bool, conflict: bool, quarantined: bool, summary: Mapping[str, Any] | None
) -> str | None:
    """None when indexable, else a short reason (counted in `rag status`, never shown per asset)."""
    if kind not in INDEXED_KINDS:
        return "kind"
    if deleted:
        return "deleted"
    if quarantined:
        return "quarantined"
    if conflict:
        return "conflict"
    if summary is None:
        return "unreadable"
    if is_private(summary):
        return "private"
    if _is_protected(summary):
        return "protected"
    return None
