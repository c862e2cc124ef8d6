"""A built vault index as bytes and back (issue 32): what an unlock loads instead of rebuilding.

The payload holds the FTS5 database image, the word postings and the Python side of
``VaultIndex`` (chunk texts, each asset's indexed revision and display fields, bounds and
eviction order, truncated and excluded assets). It is plaintext of indexed content, so it is
only ever kept in memory or sealed by the store (engine/store/database.py ``write_snapshot``,
named by a chained state record). Vectors are not kept: they are computed on demand, as after
any rebuild. ``SNAPSHOT_VERSION`` includes the token streams' version: a snapshot built by
another segmenter or chunker is not used (the index is rebuilt and a new snapshot saved).

The payload is a sequence of frames (an 8-byte big-endian length, then that many bytes): the
head (what decides whether the snapshot is used), the bookkeeping, the FTS5 image, the word
postings, then the assets and the chunks in batches. A loader reads it frame by frame as the
store opens and decompresses it (``StoreFile.read_snapshot_stream``), so an unlock never holds
the whole payload beside the index it builds from it (at 100k notes the payload is ~220 MiB).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import msgspec

from engine.search.documents import PREPARED_VERSION, Document
from engine.search.fts import FtsIndex
from engine.search.index import AssetInfo, ChunkInfo, Limits, VaultIndex, compact_rowids, folded_head

__all__ = ["SNAPSHOT_VERSION", "dump", "dump_pieces", "load"]

# 3 (issue 32): a contentless FTS5 table (engine/search/fts.py), chunk texts in UTF-8 as the index
# keeps them, and the payload in frames. A snapshot of version 1 (one msgpack map) is not used:
# the unlock rebuilds from the token streams and saves a snapshot of this version.
SNAPSHOT_VERSION = f"{PREPARED_VERSION}/snapshot-3"
_BATCH = 4096  # assets or chunks per frame
_LENGTH = struct.Struct(">Q")


class _Head(msgspec.Struct, array_like=True):
    """What decides whether a snapshot is used: the first frame."""

    version: str
    vault: bytes
    policy: bytes
    limits: tuple[int, int, int]


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
    folded_head: str  # written for engines before issue 32's memory work; not read
    title_end: int
    stamp: int  # eviction order (AssetInfo.stamp)


class _Chunk(msgspec.Struct, array_like=True):
    rowid: int
    asset: int  # position in the assets, over all their frames
    ordinal: int
    text: bytes  # UTF-8
    aux: bool


class _Books(msgspec.Struct, array_like=True):
    truncated: list[bytes]
    excluded: list[tuple[bytes, str]]
    next_rowid: int
    text_bytes: int
    aux_rows: int
    changes: int
    assets: int  # how many assets and chunks the frames after the postings hold
    chunks: int


def _limits(limits: Limits) -> tuple[int, int, int]:
    return (limits.max_chunks, limits.max_text_bytes, limits.max_vector_bytes)


def _frame(data: bytes) -> list[bytes]:
    return [_LENGTH.pack(len(data)), data]


def dump_pieces(index: VaultIndex) -> list[bytes]:
    """The index as it is now, as the pieces of its payload; call while nothing changes it (under
    the service lock). A caller that hands them on one by one may drop each once handed over."""
    fts, postings = index.fts.image()
    position: dict[bytes, int] = {}
    assets: list[_Asset] = []
    for asset_id, info in index.assets.items():
        position[asset_id] = len(assets)
        doc = info.doc
        # Not kept by the index any more (issue 32), but still written: an engine of before
        # that reads this snapshot reranks with them.
        title, head = folded_head(doc)
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
                list(info.rowids),
                info.text_bytes,
                head,
                len(title),
                info.stamp,
            )
        )
    chunks = [_Chunk(rowid, position[c.asset_id], c.ordinal, c.utf8, c.aux) for rowid, c in index.chunks.items()]
    encode = msgspec.msgpack.encode
    books = _Books(
        list(index.truncated),
        list(index.excluded.items()),
        index._next_rowid,
        index.text_bytes,
        index.aux_rows,
        index.changes,
        len(assets),
        len(chunks),
    )
    pieces = [
        *_frame(encode(_Head(SNAPSHOT_VERSION, index.vault_id, index.policy_head, _limits(index.limits)))),
        *_frame(encode(books)),
        *_frame(fts),
        *_frame(postings),
    ]
    for start in range(0, len(assets), _BATCH):
        pieces.extend(_frame(encode(assets[start : start + _BATCH])))
    for start in range(0, len(chunks), _BATCH):
        pieces.extend(_frame(encode(chunks[start : start + _BATCH])))
    return pieces


def dump(index: VaultIndex) -> bytes:
    """:func:`dump_pieces` joined."""
    return b"".join(dump_pieces(index))


class _Frames:
    """Frames out of pieces of any size, holding at most a frame and a piece at a time."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces: Iterator[bytes] = iter(pieces)
        self._buffer = bytearray()

    def _more(self) -> bytes:
        piece = next(self._pieces, None)
        if piece is None:
            raise ValueError("not a search snapshot")  # cut short
        return piece

    def first_byte(self) -> int:
        while not self._buffer:
            self._buffer += self._more()
        return self._buffer[0]

    def take(self) -> bytearray:
        while len(self._buffer) < _LENGTH.size:
            self._buffer += self._more()
        (size,) = _LENGTH.unpack_from(self._buffer)
        del self._buffer[: _LENGTH.size]
        if len(self._buffer) >= size:
            frame = self._buffer[:size]
            del self._buffer[:size]
            return frame
        # A frame larger than what is buffered (the FTS5 image): grown in place, not copied again.
        frame, self._buffer = self._buffer, bytearray()
        while len(frame) < size:
            frame += self._more()
        if len(frame) > size:
            self._buffer = frame[size:]
            del frame[size:]
        return frame

    def end(self) -> None:
        """Read to the end (the store checks what it read only then); nothing may be left."""
        if self._buffer or any(self._pieces):
            raise ValueError("not a search snapshot")


def load(data: bytes | Iterable[bytes], vault_id: bytes, policy_head: bytes, limits: Limits) -> VaultIndex | None:
    """The index a :func:`dump` describes (whole, or in pieces as the store reads it), or None
    when it is of another version, vault, policy head or bounds (then the caller rebuilds).
    ValueError when the bytes are not a dump."""
    frames = _Frames([data] if isinstance(data, bytes) else data)
    try:
        if frames.first_byte() != 0:
            return None  # not framed: a version-1 snapshot (one msgpack map)
        head = msgspec.msgpack.decode(frames.take(), type=_Head)
    except msgspec.DecodeError:
        return None  # another version's head
    if (
        head.version != SNAPSHOT_VERSION
        or head.vault != vault_id
        or head.policy != policy_head
        or tuple(head.limits) != _limits(limits)
    ):
        return None
    index = VaultIndex(vault_id, policy_head, limits)
    try:
        _fill(index, frames)
        frames.end()
    except BaseException:
        index.close()
        raise
    return index


def _fill(index: VaultIndex, frames: _Frames) -> None:
    try:
        books = msgspec.msgpack.decode(frames.take(), type=_Books)
    except msgspec.DecodeError as exc:
        raise ValueError("not a search snapshot") from exc
    try:
        fts = FtsIndex(frames.take())  # SQLite copies the image; this frame is freed right after
        fts.load_postings(frames.take())
    except Exception as exc:  # apsw's errors for an image that is not a database
        raise ValueError("not a search snapshot") from exc
    index.fts.close()
    index.fts = fts
    # Kinds and tags repeat across a vault: one string object each (issue 32: memory per asset).
    words: dict[str, str] = {}
    assets: list[AssetInfo] = []
    try:
        while len(assets) < books.assets:
            for a in msgspec.msgpack.decode(frames.take(), type=list[_Asset]):
                kind = words.setdefault(a.kind, a.kind)
                tags = tuple(words.setdefault(t, t) for t in a.tags)
                doc = Document(a.asset_id, a.rev_id, kind, a.title, "", tags, tuple(a.meta), a.updated_ms, a.aux)
                if not 0 <= a.title_end <= len(a.folded_head):
                    raise ValueError("not a search snapshot")
                # The folded head is folded again per query from the title and tags (issue 32).
                info = AssetInfo(doc, compact_rowids(a.rowids), a.text_bytes, a.stamp)
                assets.append(info)
                index.assets[a.asset_id] = info
        chunks = 0
        while chunks < books.chunks:
            batch = msgspec.msgpack.decode(frames.take(), type=list[_Chunk])
            chunks += len(batch)
            for c in batch:
                index.chunks[c.rowid] = ChunkInfo(assets[c.asset].doc.asset_id, c.ordinal, c.text, c.aux)
    except (msgspec.DecodeError, IndexError) as exc:
        raise ValueError("not a search snapshot") from exc
    if len(assets) != books.assets or chunks != books.chunks:
        raise ValueError("not a search snapshot")
    index.truncated = set(books.truncated)
    index.excluded = dict(books.excluded)
    index._next_rowid = books.next_rowid
    index.text_bytes = books.text_bytes
    index.aux_rows = books.aux_rows
    index.changes = books.changes
