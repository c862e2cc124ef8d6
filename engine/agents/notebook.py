"""Each connected agent's own notebook (AG-13, seed 000's "core"): keys, records, sealed entries.

A notebook belongs to one MCP grant. It has a random 32-byte key of its own; every entry
revision (title, body, tags) is sealed under that key into a content row whose associated
data binds notebook, entry and revision, so no row can be moved to another notebook,
entry or revision. The records that describe the notebook are device-local extra records
(sealed by the store's master key like every state row; never in sync or a backup):

- ``notebook``        {notebook, key, name, created_ms}: the key, for the user's own reads;
- ``notebook_grant``  {notebook, grant, wrapped, at_ms}: which grant owns it now (the latest
  record of a notebook wins) and the key wrapped for that grant: sealed under
  HKDF(the grant's token, grant ID). The token is never stored (only its SHA-256 digest),
  so the daemon can unwrap this copy only while that agent's own token is in the request;
- ``notebook_entry``  {notebook, entry, rev, at_ms, size, body_seqs}: one revision;
- ``notebook_delete`` {notebook, at_ms}: the user deleted it (its content rows are erased).

The agent path opens the key only from its grant's wrapped copy, with the key derived from
the token that authenticated the call, and finds the notebook from the grant ID the daemon
authenticated, never from an argument: a bug that named another notebook would still fail
to decrypt (another grant's token derives another wrapping key, and the associated data
names the grant). The user path (the local CLI and dashboard) uses the ``key`` record.

This module is pure logic over records and bytes; the daemon's ops are in
``engine.service.handlers.notebook``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from engine.crypto.aead import AeadError, new_key, open_sealed, seal
from engine.errors import MemoriesError

__all__ = [
    "NOTEBOOK_KIND",
    "OWNER_KIND",
    "ENTRY_KIND",
    "DELETE_KIND",
    "SCRATCH",
    "Book",
    "Revision",
    "books",
    "grant_wrap_key",
    "wrap_key",
    "unwrap_key",
    "seal_entry",
    "open_entry",
    "new_entry_id",
    "matches",
    "MAX_ENTRIES",
    "MAX_REVISIONS",
]

NOTEBOOK_KIND: Final = "notebook"
OWNER_KIND: Final = "notebook_grant"
ENTRY_KIND: Final = "notebook_entry"
DELETE_KIND: Final = "notebook_delete"
# The scratch pad is the entry with this ID: revisions like any entry, never listed as one.
SCRATCH: Final = bytes(16)
# An agent in a loop must not grow its notebook without bound.
MAX_ENTRIES: Final = 1000
MAX_REVISIONS: Final = 20000

_WRAP_INFO = b"memories notebook grant key v1"
_WRAP_AAD = b"memories-notebook-wrap-v1\x00"
_ENTRY_AAD = b"memories-notebook-entry-v1\x00"


@dataclass
class Revision:
    rev: int
    at_ms: int
    size: int
    content_seq: int


@dataclass
class Book:
    notebook_id: bytes
    key: bytes
    name: str
    created_ms: int
    owner: bytes = b""  # the grant that owns it now
    owners: list[bytes] = field(default_factory=list)  # every grant that ever owned it, oldest first
    wrapped: bytes = b""  # the key wrapped for ``owner``
    deleted_ms: int | None = None
    entries: dict[bytes, list[Revision]] = field(default_factory=dict)

    def content_seqs(self) -> list[int]:
        return [r.content_seq for revs in self.entries.values() for r in revs]

    def revision_count(self) -> int:
        return sum(len(revs) for revs in self.entries.values())


def books(extra_records: dict[str, list[tuple[int, dict[str, Any]]]]) -> dict[bytes, Book]:
    """Every notebook (deleted ones too, marked), with its owner and entry revisions."""
    found: dict[bytes, Book] = {}
    for _seq, record in extra_records.get(NOTEBOOK_KIND, []):
        nid = bytes(record["notebook"])
        found.setdefault(nid, Book(nid, bytes(record["key"]), str(record["name"]), int(record["created_ms"])))
    for _seq, record in extra_records.get(OWNER_KIND, []):
        book = found.get(bytes(record["notebook"]))
        if book is not None:
            book.owner = bytes(record["grant"])
            book.wrapped = bytes(record["wrapped"])
            book.owners.append(book.owner)
    for _seq, record in extra_records.get(ENTRY_KIND, []):
        book = found.get(bytes(record["notebook"]))
        if book is not None:
            seqs = record["body_seqs"]
            revision = Revision(int(record["rev"]), int(record["at_ms"]), int(record["size"]), int(seqs[0]))
            book.entries.setdefault(bytes(record["entry"]), []).append(revision)
    for _seq, record in extra_records.get(DELETE_KIND, []):
        book = found.get(bytes(record["notebook"]))
        if book is not None and book.deleted_ms is None:
            book.deleted_ms = int(record["at_ms"])
    return found


def grant_wrap_key(token: str, grant_id: bytes) -> bytes:
    """The key that wraps a notebook key for one grant, derived from that grant's token."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=grant_id, info=_WRAP_INFO)
    return hkdf.derive(token.encode("utf-8"))


def wrap_key(wrapping: bytes, notebook_id: bytes, grant_id: bytes, key: bytes) -> bytes:
    return seal(wrapping, key, _WRAP_AAD + notebook_id + grant_id)


def unwrap_key(wrapping: bytes, notebook_id: bytes, grant_id: bytes, wrapped: bytes) -> bytes:
    """The notebook key, or ``permission_denied`` when this grant's key does not open it."""
    try:
        return open_sealed(wrapping, wrapped, _WRAP_AAD + notebook_id + grant_id)
    except AeadError:
        raise MemoriesError("permission_denied", "This notebook is not open to this agent.") from None


def _entry_aad(notebook_id: bytes, entry_id: bytes, rev: int) -> bytes:
    return _ENTRY_AAD + notebook_id + entry_id + rev.to_bytes(4, "big")


def seal_entry(key: bytes, notebook_id: bytes, entry_id: bytes, rev: int, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
    return seal(key, data, _entry_aad(notebook_id, entry_id, rev))


def open_entry(key: bytes, notebook_id: bytes, entry_id: bytes, rev: int, blob: bytes) -> dict[str, Any]:
    try:
        data = open_sealed(key, blob, _entry_aad(notebook_id, entry_id, rev))
    except AeadError:
        raise MemoriesError("store_corrupt", "A notebook entry failed authentication.") from None
    payload = json.loads(data)
    if not isinstance(payload, dict):
        raise MemoriesError("store_corrupt", "A notebook entry failed authentication.")
    return payload


def new_entry_id() -> bytes:
    while True:
        entry = os.urandom(16)
        if entry != SCRATCH:
            return entry


def new_notebook_key() -> bytes:
    return new_key()


_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def matches(query: str, text: str) -> int:
    """How well ``text`` answers ``query``: the number of query words found (0: no match).

    A notebook holds at most a thousand entries and is private to one agent, so it is
    searched by scanning its own decrypted text, never through the shared search index.
    A word matches case-insensitively as a prefix of a word of the text; Chinese or
    Japanese text (no spaces between words) matches as a substring."""
    folded = text.casefold()
    words = {w.casefold() for w in _WORD.findall(query)}
    if not words:
        return 0
    text_words = _WORD.findall(folded)
    score = 0
    for word in words:
        if _CJK.search(word):
            score += folded.count(word)
        else:
            score += sum(1 for t in text_words if t.startswith(word))
    hit_all = all((w in folded) for w in words)
    return score + (1000 if hit_all else 0) if score else 0
