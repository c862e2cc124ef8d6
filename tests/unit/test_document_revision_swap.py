"""An unlock's snapshot swaps each document's revision ID for the revision's own object (issue
32: memory per asset). ``Document.with_revision`` builds that copy directly, for speed, and must
keep every other field, including any field added to Document later."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.search.documents import Document

_DISTINCT: dict[str, Any] = {  # a value per field type, none of them a default
    "bytes": b"asset-id-bytes",
    "str": "text",
    "tuple[str, ...]": ("tag-a", "tag-b"),
    "tuple[tuple[str, str], ...]": (("source", "web"),),
    "int": 1_700_000_000_123,
    "bool": True,  # not the default: a field dropped by the copy would come back as False
}


def test_with_revision_is_replace_of_the_id_and_time() -> None:
    values = {f.name: _DISTINCT[str(f.type)] for f in dataclasses.fields(Document)}
    doc = Document(**values)
    rev_id = bytes(32)
    swapped = doc.with_revision(rev_id, 42)
    assert swapped == dataclasses.replace(doc, rev_id=rev_id, updated_ms=42)
    assert swapped.rev_id is rev_id and doc.rev_id == b"asset-id-bytes"
