"""A built vault index as bytes and back (issue 32): what an unlock loads instead of rebuilding.

The payload holds the FTS5 database image, the word postings and the Python side of
``VaultIndex`` (chunk texts, each asset's indexed revision and display fields, bounds and
eviction order, truncated and excluded assets). It is plaintext of indexed content, so it is
only ever kept in memory or sealed by the store (engine/store/database.py ``write_snapshot``,
named by a chained state record). Vectors are not kept: they are computed on demand, as after
any rebuild. ``SNAPSHOT_VERSION`` includes the token streams' version: a snapshot built by
another segmenter or chunker is not used (the index is rebuilt and a new snapshot saved).
"""

from __future__ import annotations

import heapq

import msgspec

from engine.search.documents import PREPARED_VERSION, Document, chunk_key
from engine.search.fts import FtsIndex
from engine.search.index import AssetInfo, ChunkInfo, Limits, VaultIndex

__all__ = ["SNAPSHOT_VERSION", "dump", "load"]

SNAPSHOT_VERSION = f"{PREPARED_VERSION}/snapshot-1"


class _Asset(msgspec.Struct, array_like=True):
    asset_id: bytes
    rev_id: bytes
    kind: str
    title: str
    tags: list[str]
    meta: list[tuple[str, str]]
    updated_ms: int
    aux: bool
    rowids: list[int]
    text_bytes: int
    folded_title: str
    folded_head: str
    stamp: int  # eviction order (VaultIndex._age_stamp)


class _Chunk(msgspec.Struct, array_like=True):
    rowid: int
    asset: int  # position in ``assets``
    ordinal: int
    text: str
    aux: bool


class _Payload(msgspec.Struct):
    version: str
    vault: bytes
    policy: bytes
    limits: tuple[int, int, int]
    fts: bytes
    postings: bytes
    assets: list[_Asset]
    chunks: list[_Chunk]
    truncated: list[bytes]
    excluded: list[tuple[bytes, str]]
    next_rowid: int
    text_bytes: int
    aux_rows: int
    changes: int


def _limits(limits: Limits) -> tuple[int, int, int]:
    return (limits.max_chunks, limits.max_text_bytes, limits.max_vector_bytes)


def dump(index: VaultIndex) -> bytes:
    """The index as it is now; call while nothing changes it (under the service lock)."""
    fts, postings = index.fts.image()
    position: dict[bytes, int] = {}
    assets: list[_Asset] = []
    for asset_id, info in index.assets.items():
        position[asset_id] = len(assets)
        doc = info.doc
        assets.append(
            _Asset(
                asset_id,
                doc.rev_id,
                doc.kind,
                doc.title,
                list(doc.tags),
                list(doc.meta),
                doc.updated_ms,
                doc.aux,
                info.rowids,
                info.text_bytes,
                info.folded_title,
                info.folded_head,
                index._age_stamp.get(asset_id, 0),
            )
        )
    chunks = [_Chunk(rowid, position[c.asset_id], c.ordinal, c.text, c.aux) for rowid, c in index.chunks.items()]
    payload = _Payload(
        SNAPSHOT_VERSION,
        index.vault_id,
        index.policy_head,
        _limits(index.limits),
        fts,
        postings,
        assets,
        chunks,
        list(index.truncated),
        list(index.excluded.items()),
        index._next_rowid,
        index.text_bytes,
        index.aux_rows,
        index.changes,
    )
    return msgspec.msgpack.encode(payload)


def load(data: bytes, vault_id: bytes, policy_head: bytes, limits: Limits) -> VaultIndex | None:
    """The index a :func:`dump` describes, or None when it is of another version, vault, policy
    head or bounds (then the caller rebuilds). ValueError when the bytes are not a dump."""
    try:
        payload = msgspec.msgpack.decode(data, type=_Payload)
    except msgspec.DecodeError as exc:
        raise ValueError("not a search snapshot") from exc
    if (
        payload.version != SNAPSHOT_VERSION
        or payload.vault != vault_id
        or payload.policy != policy_head
        or tuple(payload.limits) != _limits(limits)
    ):
        return None
    index = VaultIndex(vault_id, policy_head, limits)
    try:
        _fill(index, payload)
    except BaseException:
        index.close()
        raise
    return index


def _fill(index: VaultIndex, payload: _Payload) -> None:
    try:
        fts = FtsIndex(payload.fts)
        fts.load_postings(payload.postings)
    except Exception as exc:  # apsw's errors for an image that is not a database
        raise ValueError("not a search snapshot") from exc
    index.fts.close()
    index.fts = fts
    assets: list[AssetInfo] = []
    for a in payload.assets:
        doc = Document(a.asset_id, a.rev_id, a.kind, a.title, "", tuple(a.tags), tuple(a.meta), a.updated_ms, a.aux)
        info = AssetInfo(doc, a.rowids, a.text_bytes, a.folded_title, a.folded_head)
        assets.append(info)
        index.assets[a.asset_id] = info
        index._age_stamp[a.asset_id] = a.stamp
        index._age_heap.append((a.updated_ms, a.stamp, a.asset_id))
    heapq.heapify(index._age_heap)
    for c in payload.chunks:
        info = assets[c.asset]
        title = info.doc.title.encode()
        key = chunk_key(title, c.text.encode())
        index.chunks[c.rowid] = ChunkInfo(info.doc.asset_id, c.ordinal, c.text, key, c.aux)
        index.by_key.setdefault(key, []).append(c.rowid)
    index.truncated = set(payload.truncated)
    index.excluded = dict(payload.excluded)
    index._next_rowid = payload.next_rowid
    index.text_bytes = payload.text_bytes
    index.aux_rows = payload.aux_rows
    index.changes = payload.changes
