"""Secret maps: stable labels in a body that point at credential assets (CD-7).

``protect_secret`` swaps exact occurrences of a value for ``{{secret:LABEL}}`` in every
text field of the item — title, tags, metadata values, annotation notes and body
(:func:`protect_fields`; issue 27: protecting only the body left the value in clear in
the title, where search and agents found it) — and the value moves into a credential;
the map (label → credential asset ID) lives in the encrypted summary. Generic writes
may keep a map but never create or redirect an entry. Older signed revisions keep their
original text (history is never rewritten), so projections of history pass through
:func:`redact` (bodies) and :func:`redact_fields` (summaries).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from engine.errors import MemoriesError

__all__ = [
    "LABEL_PATTERN",
    "MIN_VALUE",
    "check_label",
    "placeholder",
    "protect_fields",
    "replace_exact",
    "redact",
    "redact_fields",
    "same_map",
]

LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# Shorter values would replace ordinary words and digits all over a body.
MIN_VALUE = 4
MAX_VALUE = 64 * 1024


def check_label(label: str) -> str:
    if not LABEL_PATTERN.match(label):
        raise MemoriesError("invalid_input", "A secret label is 1–64 letters, digits, '_', '.' or '-'.")
    return label


def placeholder(label: str) -> str:
    return "{{secret:" + label + "}}"


def replace_exact(body: str, value: str, label: str) -> tuple[str, int]:
    """Replace every exact occurrence; the count lets the caller refuse a value that is absent."""
    if not MIN_VALUE <= len(value) <= MAX_VALUE:
        raise MemoriesError("invalid_input", f"A protected value is {MIN_VALUE}–{MAX_VALUE} characters.")
    count = body.count(value)
    return body.replace(value, placeholder(label)), count


def redact(text: str, values: Iterable[tuple[str, str]]) -> str:
    """Replace known secret values, given as (label, value) pairs; a label may have had several
    values over time. Longest first, so a value inside another stays hidden."""
    for label, value in sorted(values, key=lambda kv: -len(kv[1])):
        if len(value) >= MIN_VALUE:
            text = text.replace(value, placeholder(label))
    return text


def _map_fields(summary: dict[str, Any], change: Callable[[str, str], str]) -> dict[str, Any]:
    """``summary`` with ``change(field, text)`` applied to each text field a user wrote."""
    out = dict(summary)
    if isinstance(out.get("title"), str):
        out["title"] = change("title", out["title"])
    if isinstance(out.get("tags"), list):
        out["tags"] = [change("tags", t) if isinstance(t, str) else t for t in out["tags"]]
    if isinstance(out.get("meta"), dict):
        out["meta"] = {k: change(f"meta.{k}", v) if isinstance(v, str) else v for k, v in out["meta"].items()}
    if isinstance(out.get("annotations"), list):
        out["annotations"] = [
            {**n, "note": change("annotations", n["note"])} if isinstance(n, dict) and isinstance(n.get("note"), str) else n
            for n in out["annotations"]
        ]
    return out


def redact_fields(summary: dict[str, Any], values: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """:func:`redact` over every text field of a summary (title, tags, metadata, annotations)."""
    pairs = list(values)
    if not pairs:
        return summary
    return _map_fields(summary, lambda _field, text: redact(text, pairs))


def protect_fields(summary: dict[str, Any], body: str, value: str, label: str) -> tuple[dict[str, Any], str, dict[str, int]]:
    """Every exact occurrence of ``value`` in the item replaced by the label's placeholder.

    Returns the new summary and body and, per field that held the value, how many were
    replaced (``title``, ``tags``, ``meta.NAME``, ``annotations``, ``body``). A value in the
    *name* of a metadata field cannot be replaced (names are the card type's): refused.
    """
    new_body, in_body = replace_exact(body, value, label)
    meta = summary.get("meta")
    if isinstance(meta, dict) and any(value in str(name) for name in meta):
        raise MemoriesError(
            "invalid_input", "The value occurs in the name of a metadata field; rename or remove that field first."
        )
    counts: dict[str, int] = {}

    def change(field: str, text: str) -> str:
        found = text.count(value)
        if not found:
            return text
        counts[field] = counts.get(field, 0) + found
        return text.replace(value, placeholder(label))

    new_summary = _map_fields(summary, change)
    if in_body:
        counts["body"] = in_body
    return new_summary, new_body, counts


def same_map(existing: dict[str, bytes], supplied: dict[str, bytes]) -> bool:
    return dict(existing) == dict(supplied)
