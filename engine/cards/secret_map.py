"""Secret maps: stable labels in a body that point at credential assets (CD-7).

``protect_secret`` swaps exact occurrences of a value for ``{{secret:LABEL}}`` and the
value moves into a credential; the map (label → credential asset ID) lives in the
encrypted summary. Generic writes may keep a map but never create or redirect an
entry. Older signed revisions keep their original bodies (history is never
rewritten), so text projections of history pass through :func:`redact`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from engine.errors import MemoriesError

__all__ = ["LABEL_PATTERN", "MIN_VALUE", "check_label", "placeholder", "replace_exact", "redact", "same_map"]

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


def same_map(existing: dict[str, bytes], supplied: dict[str, bytes]) -> bool:
    return dict(existing) == dict(supplied)
