"""The encrypted SQLite store file (ST-1 … ST-5, ST-8).

Tables:

* ``header`` — one row: format name and version (clear), KDF parameters with the
  salt (clear), the master key sealed by the password key (header fields are its
  associated data, so they cannot be changed undetected).
* ``state`` — append-only encrypted records keyed by a row sequence number; each
  sealed with the master key, the sequence number bound into the associated data. Large
  records are compressed first, alone or with their kind's dictionary (issue 32), which is
  itself a sealed state row written before the first row that uses it.
* ``content`` — content chunks, already sealed by a revision's data key.
* ``content_packed`` — where the sealed chunks of a file upload lie in a pack file beside the
  store (engine/store/packs.py, issue 32): row number, pack, offset and length. Content row
  numbers are shared by both tables; readers of content get the sealed bytes from either.
* ``checkpoints`` — one sealed row: last sequence number, record count and a hash
  chain over every state row, so dropped, reordered or rolled-back rows are caught.
* ``snapshot`` — one sealed, compressed blob in 1 MiB chunks (the search index as built,
  issue 32), replaced as a whole. It is trusted only through the state record that names it
  (its chunk rows and the SHA-256 of their sealed bytes): that record is in the chain.

A write is one ``BEGIN IMMEDIATE … COMMIT`` with ``synchronous=FULL`` covering new
state rows, content rows and the checkpoint: it costs the same in a 1k and a
100k-asset store (ST-6).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import hmac
import json
import logging
import os
import queue
import sqlite3
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from engine.crypto.aead import AeadError, new_key, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import DerivationAhead, KdfParams, derive_key
from engine.crypto.libsodium import RowOpener
from engine.crypto.two_cores import map_in_two_halves
from engine.errors import MemoriesError
from engine.store.checkpointer import BACKSTOP_PAGES, JOURNAL_SIZE_LIMIT, WalCheckpointer
from engine.store.packs import PACK_MIN_BYTES, PACKED_ROW_MIN, PackDir, PackWriter, packs_path
from engine.store.room import ensure_reserve, free_bytes, release_reserve

__all__ = [
    "StoreFile",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "create_store",
    "STORE_PAGE_SIZE",
    "Loaded",
    "SealedRows",
    "is_disk_full",
    "sqlite_replica_rows",
    "chain_over",
    "CHAIN_START",
    "SnapshotRef",
    "read_state_rows",
]

log = logging.getLogger("memories.store")

FORMAT_NAME = "memories-store"
FORMAT_VERSION = 1
# A content row at most (a sealed 256 KiB file chunk): about what deleting one rewrites.
_CONTENT_ROW_BYTES = 256 * 1024 + 64
_ROW_VERSION = b"\x01"
# A row of a deferred kind (a cache such as SR-6's search token streams), sealed like any
# other with its version in the AAD. An unlock leaves it sealed: the checkpoint's chain,
# checked before the unlock answers, covers its bytes like every row's, and its reader opens
# it later off the unlock's path (``SealedRows``). On a 10k-note vault these rows are 70% of
# the state's bytes; opening them beside the decoder cost the unlock ~65 ms of GIL contention.
_DEFERRED_ROW_VERSION = b"\x02"
# The same two, with the record compressed (zlib) before sealing (issue 32): a record of at least
# _COMPRESS_MIN bytes that shrinks to _COMPRESS_KEEP of its size or less. In practice the token
# streams (~2.4 KB, to ~1 KB) and large audit entries; revisions, whose body and summary are
# sealed under their data key and do not compress, stay as they are. SECURITY.md says what the
# compressed length reveals.
_ZROW_VERSION = b"\x03"
_DEFERRED_ZROW_VERSION = b"\x04"
# Dictionary rows and rows compressed with one (see _DICT_BYTES below).
_DICT_ROW_VERSION = b"\x05"
_DROW_VERSION = b"\x06"
_DEFERRED_DROW_VERSION = b"\x07"
_COMPRESSED = {_ROW_VERSION: _ZROW_VERSION, _DEFERRED_ROW_VERSION: _DEFERRED_ZROW_VERSION}
_COMPRESS_MIN = 1024
_ROW_AAD_SUFFIX = {
    _ROW_VERSION: b"",
    _DEFERRED_ROW_VERSION: b"/deferred",
    _ZROW_VERSION: b"/z",
    _DEFERRED_ZROW_VERSION: b"/deferred/z",
    _DICT_ROW_VERSION: b"/dictionary",
    _DROW_VERSION: b"/zd",
    _DEFERRED_DROW_VERSION: b"/deferred/zd",
}
_COMPRESS_KEEP = 0.8
# Dictionary compression (issue 32). A record alone compresses poorly: a revision's signed bytes
# are mostly base64 ciphertext and identifiers every revision repeats, a token stream is ~2.4 KB of
# a vocabulary its neighbours share. Compressed against a dictionary taken from records of its
# own kind in this store, a revision row shrinks to ~55% and a token row to ~40% of what the zlib
# of the record alone gave, and each row stays one sealed record. A dictionary is a state row of
# its own (version 5): sealed, chained and counted like any other, never handed to readers of
# records, written once per kind and never changed. A row compressed with it (versions 6 and 7:
# 1 and 2 with the record so compressed) names its dictionary's sequence number, in clear after
# the version byte and again in the associated data, so the dictionary a row is opened with is
# the very one it was written with. (Versions: _DICT_ROW_VERSION, _DROW_VERSION, _DEFERRED_DROW_VERSION.)
_DICT_COMPRESSED = {_ROW_VERSION: _DROW_VERSION, _DEFERRED_ROW_VERSION: _DEFERRED_DROW_VERSION}
_DICT_SEQ = struct.Struct(">I")
_DICT_SEQ_MAX = 2**32 - 1
_ADLER = struct.Struct(">I")  # a zlib stream's dictionary ID and checksum (RFC 1950)
# A dictionary is made for a kind once this many of its records were committed since the unlock
# (one import batch, or notes written one by one): from samples of them, at most zlib's window.
_DICT_TRAIN_RECORDS = 64
# The kinds that get one. Not any kind: a dictionary makes a row's size depend on how much it
# shares with other records (SECURITY.md). A revision's content is ciphertext under its data key
# before the store sees it; token rows never hold credentials or protected values; audit entries
# hold operation names and IDs. (Spelled here: the store imports no feature module.)
_DICTIONARY_KINDS = frozenset({"revision", "search_tokens", "audit"})
_DICT_BYTES = 32 * 1024
_DICT_SAMPLES = 64
# Level 3 with the dictionary primed once and copied per row: ~50 us a record, what the level-1
# zlib of the record alone cost (a fresh compressor would hash the 32 KiB dictionary every time).
_DICT_LEVEL = 3
_DICT_MEM_LEVEL = 8
# What a revision (or audit) row shares with its neighbours is a few identifiers (vault, policy
# head, device, certificate) and the field names: the last 4 KiB of the dictionary hold them
# all. Compressing with a 4 KiB window (which uses only that tail of the dictionary) and a small
# hash table costs less per row (issue 32: ~50 us instead of ~60, and up to ~120 when the large
# tables' copy missed the allocator's cache), and a 10k-note import's revision rows came to
# 5.44 MB instead of 5.46 MB (samples of other notes: 0.527 of the record against 0.523).
# Token rows share a vocabulary, which the whole window does pay for (0.17 against 0.27). Only
# the writer differs: the stream names its window and the dictionary's checksum is over the
# whole dictionary, so the reader opens either with the same dictionary, as it always did.
_DICT_SMALL_WINDOW = {"revision": 12, "audit": 12}
# Those small-window kinds are also written with deflate's fixed Huffman codes (Z_FIXED): a row
# of ~1 KB carries mostly matches against the dictionary, and the codes a dynamic block sends
# are a table its reader must build before the first symbol, per row. Every revision row is
# opened at every unlock and read back by lists and gets (issue 32: 100k rows at an unlock).
# Measured on the revision rows of a 10k-note vault: inflate 7.9 -> 4.2 us a row, compress 32 ->
# 29 us, rows 517 -> 541 bytes (+4.6%; the store's 16 KiB pages, STORE_PAGE_SIZE, more than make
# up for it: 233.6 -> 231.7 MB at 100k notes). Token rows keep dynamic codes:
# they are larger and read only when an index is rebuilt, so their size counts for more.
# Readers need nothing new: both block types are plain deflate, as any zlib opens it.
_DICT_SMALL_STRATEGY = zlib.Z_FIXED
_DICT_SMALL_MEM_LEVEL = 4
_DICT_MIN = 128
_DEFERRED_VERSIONS = (_DEFERRED_ROW_VERSION, _DEFERRED_ZROW_VERSION, _DEFERRED_DROW_VERSION)


def _compress_row(plain: bytes) -> bytes:
    """``plain`` deflated at zlib's fastest level, with a window no larger than the record.

    zlib sets up (and clears) a 32 KiB window's tables per call: for a 1 KiB revision record
    that set-up cost twice the compression itself (issue 32: ~30 us of ~60 per record, on every
    record of an import or a restore). A window covering the whole record finds the same
    matches; the stream says its window size, and zlib.decompress reads any of them.
    """
    return zlib.compress(plain, 1, max(10, min(15, len(plain).bit_length())))


_HEADER_AAD = b"memories.header\x00\x01"
_STATE_AAD = b"memories.state\x00\x01"
_CHECKPOINT_AAD = b"memories.checkpoint\x00\x01"
_CHAIN_START = hashlib.sha256(b"memories.chain\x00\x01").digest()
CHAIN_START = _CHAIN_START
_SNAPSHOT_AAD = b"memories.snapshot\x00\x01"
_SNAPSHOT_CHUNK = 1024 * 1024
# zlib's default level (issue 32): on a 10k-note index 7.2 MB where level 1 gave 8.4 (the payload
# is 23.9 MB), for ~1.4 s more of one core in a background job that runs after the index changed.
_SNAPSHOT_LEVEL = 6

SCHEMA = """
CREATE TABLE header (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    format TEXT NOT NULL,
    version INTEGER NOT NULL,
    kdf BLOB NOT NULL,
    sealed_master BLOB NOT NULL
);
CREATE TABLE state (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL);
CREATE TABLE content (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL);
CREATE TABLE checkpoints (id INTEGER PRIMARY KEY CHECK (id = 1), blob BLOB NOT NULL);
CREATE TABLE snapshot (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL);
CREATE TABLE content_packed (seq INTEGER PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL);
CREATE INDEX content_packed_by_pack ON content_packed (pack);
"""
# Stores made before the snapshot table (issue 32) get it when they are opened.
_ADD_SNAPSHOT_TABLE = "CREATE TABLE IF NOT EXISTS snapshot (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL)"
# Stores made before pack files (issue 32) get the table with their first packed upload; until
# then every content row is in ``content``, as they were written.
_CONTENT_SEQS = "SELECT seq FROM content WHERE seq <= ? ORDER BY seq"
_PACKED_SEQS = "SELECT seq FROM content_packed WHERE seq <= ? ORDER BY seq"
_ADD_PACKED_TABLE = (
    "CREATE TABLE IF NOT EXISTS content_packed "
    "(seq INTEGER PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS content_packed_by_pack ON content_packed (pack)",
)


# Pages of 16 KiB for a new store (SQLite's default is 4 KiB). A table's rows are appended in
# sequence order, so each leaf is filled with whole rows and closed: what is left of a page when
# the next row does not fit is lost. State rows of ~600 bytes left 4-12% of every 4 KiB page
# unused (which of the two hung on whether six or seven rows fit: issue 32, 100k notes: 4.3 or
# 11.8 MB of a 124 MB table); a 16 KiB page loses the same remainder once for four times the
# rows. Large rows (snapshot pieces, file chunks) need a quarter of the overflow pages. Stores
# made before keep their page size: nothing in the format depends on it.
STORE_PAGE_SIZE = 16384


def _pragmas(conn: sqlite3.Connection, journal: str) -> None:
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA temp_store=MEMORY")  # ST-2: no temp files with plaintext
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("PRAGMA secure_delete=ON")


# State rows are sealed MessagePack: they are never signed (signed bodies inside them
# keep their exact canonical bytes), so a fast binary encoding is enough here.
_record_encoder = msgspec.msgpack.Encoder()
_record_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def encode_record(record: dict[str, Any]) -> bytes:
    return _record_encoder.encode(record)


def decode_record(data: bytes) -> dict[str, Any]:
    try:
        return _record_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError("malformed state record") from exc


def _kind_prefix(kind: str) -> bytes:
    """What follows the map header of a record whose first key is ``"t": kind``."""
    return _record_encoder.encode("t") + _record_encoder.encode(kind)


def _deferred_kind(plain: bytes, prefixes: list[tuple[str, bytes]]) -> str | None:
    """The deferred kind of a record's plaintext, read from its first key without decoding it.

    Records are maps written with ``"t"`` first (a msgpack fixmap or map16 header, then the
    key). A record laid out otherwise is simply decoded at once: this only decides *when*.
    """
    if not plain:
        return None
    head = plain[0]
    start = 1 if 0x80 <= head <= 0x8F else 3 if head == 0xDE else 0
    if not start:
        return None
    for kind, prefix in prefixes:
        if plain.startswith(prefix, start):
            return kind
    return None


class _NewerRowVersion(Exception):
    """A state row of a version this Memories does not know: written by a newer one."""


_OPEN_CHUNK = 1024  # rows per hand-over from the opening thread to the decoder
_READ_BATCH = 500  # rows per query of ``read_records`` (below SQLite's bound on parameters)


class _Dictionary:
    """One kind's compression dictionary (a state row of version 5 at ``seq``), with a compressor
    primed with it once: each row compresses with a copy of it; and raw inflaters primed with it
    once, one per window: each row opens with a copy of one (see :meth:`inflate`)."""

    __slots__ = ("_base", "_dict_id", "_raw", "seq", "zdict")

    def __init__(self, seq: int, zdict: bytes, kind: str = "") -> None:
        self.seq = seq
        self.zdict = zdict
        window = _DICT_SMALL_WINDOW.get(kind)
        if window is None:
            self._base = zlib.compressobj(_DICT_LEVEL, zlib.DEFLATED, 15, _DICT_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, zdict)
        else:
            self._base = zlib.compressobj(_DICT_LEVEL, zlib.DEFLATED, window, _DICT_SMALL_MEM_LEVEL, _DICT_SMALL_STRATEGY, zdict)
        # Raw deflate with the dictionary set now, one inflater per window a stream names (its
        # header's CINFO): a copy costs its window, and a revision or audit row's stream names
        # 4 KiB, so copying a 32 KiB inflater per row was most of what copying cost (issue 32:
        # ~2 us of a row's ~15 at an unlock). zlib keeps the dictionary's tail that fits the
        # window, which is all such a stream refers to, at the same distances.
        self._raw: dict[int, zlib._Decompress] = {}  # made on first use (see _inflater)
        self._dict_id = _ADLER.pack(zlib.adler32(zdict))

    def compress(self, plain: bytes) -> bytes:
        compressor = self._base.copy()  # zlib serializes copies of one object: safe on two threads
        return compressor.compress(plain) + compressor.flush()

    def _inflater(self, bits: int) -> zlib._Decompress:
        """The raw inflater of a ``bits`` window with the dictionary set (two threads may both
        make one at first: either is the same)."""
        raw = self._raw.get(bits)
        if raw is None:
            raw = self._raw[bits] = zlib.decompressobj(-bits, zdict=self.zdict)
        return raw

    def inflate(self, data: bytes) -> bytes:
        """``data`` decompressed with this dictionary; it must be exactly one whole zlib stream.

        A zlib stream that names a dictionary makes the inflater checksum the dictionary (32 KiB)
        to check its ID, then copy it in: ~40 us a row, 6x the rest of opening one (issue 32: every
        revision row at an unlock, every list row). Here the stream's header and trailer are
        checked as zlib checks them, and its deflate data inflated by a copy of an inflater the
        dictionary was set in once. Anything else takes zlib's own path, which opens it or
        refuses it as before."""
        if (
            len(data) < 10
            or data[0] & 0x0F != zlib.DEFLATED
            or data[0] >> 4 > 7  # the window: at most zlib's 32 KiB
            or (data[0] << 8 | data[1]) % 31
            or not data[1] & 0x20  # FDICT: the stream names a dictionary …
            or data[2:6] != self._dict_id  # … this one
        ):
            return _inflate(data, self.zdict)
        try:
            # A stream that reaches past the window it names fails here and takes zlib's path,
            # whose 32 KiB window opens it as it always did: the result is zlib's either way.
            inflater = self._inflater((data[0] >> 4) + 8).copy()  # serialized by zlib like the compressor's copies
            # Without a bound on its output, decompress gives all it can: a flush adds nothing
            # to a stream that ended (eof), and one that did not takes zlib's path below.
            plain = inflater.decompress(memoryview(data)[6:])
        except zlib.error:
            return _inflate(data, self.zdict)
        if not inflater.eof or inflater.unused_data != _ADLER.pack(zlib.adler32(plain)):
            return _inflate(data, self.zdict)
        return plain


def _train_dictionary(samples: Iterable[bytes]) -> bytes:
    """A zlib dictionary from records of one kind: samples joined up to the window's size.

    zlib looks for matches in the dictionary as in earlier input, so records themselves are the
    dictionary; samples spread over a commit rather than its first records cover more of it."""
    joined = bytearray()
    for sample in samples:
        joined += sample
        if len(joined) >= _DICT_BYTES:
            break
    return bytes(joined[-_DICT_BYTES:])


def _dictionary_row(key: bytes, kind: str, book: _Dictionary) -> bytes:
    plain = encode_record({"kind": kind, "dict": book.zdict})
    return _DICT_ROW_VERSION + seal(key, plain, _row_aad(_DICT_ROW_VERSION, book.seq))


def _open_dictionary(opener: RowOpener, seq: int, blob: bytes) -> tuple[str, bytes]:
    """A dictionary row's kind and dictionary; AeadError or ValueError when it is not one of ours."""
    plain = _open_row(opener, seq, blob)
    entry = decode_record(plain)
    kind, zdict = entry.get("kind"), entry.get("dict")
    if not isinstance(kind, str) or not isinstance(zdict, bytes) or not 0 < len(zdict) <= _DICT_BYTES:
        raise ValueError("malformed dictionary row")
    return kind, zdict


def _inflate(data: bytes, zdict: bytes) -> bytes:
    """``data`` decompressed with ``zdict``, which must be exactly one whole zlib stream."""
    try:
        inflater = zlib.decompressobj(zdict=zdict)
        plain = inflater.decompress(data) + inflater.flush()
    except zlib.error as exc:  # authenticated, so only our own writer could have made it
        raise ValueError("malformed compressed row") from exc
    if not inflater.eof or inflater.unused_data:
        raise ValueError("malformed compressed row")
    return plain


_NO_DICTIONARIES: dict[int, _Dictionary] = {}


def _open_row(opener: RowOpener, seq: int, blob: bytes, dictionaries: dict[int, _Dictionary] = _NO_DICTIONARIES) -> bytes:
    """A state row's plaintext, under the associated data of its version; raises AeadError, or
    _NewerRowVersion for a version this Memories does not know. ``dictionaries``: the store's,
    by their sequence number (a row compressed with one names it)."""
    version = blob[:1]
    if version in (_DROW_VERSION, _DEFERRED_DROW_VERSION):
        if len(blob) < 1 + _DICT_SEQ.size:
            raise AeadError("authentication failed")
        (book,) = _DICT_SEQ.unpack_from(blob, 1)
        plain = opener.open(blob, 1 + _DICT_SEQ.size, _row_aad(version, seq) + _DICT_SEQ.pack(book))
        if plain is None:
            raise AeadError("authentication failed")
        dictionary = dictionaries.get(book)
        if dictionary is None:  # the chain holds the row as written: its dictionary row went missing
            raise ValueError("a row names a dictionary the store does not hold")
        return dictionary.inflate(plain)
    if version not in (_ROW_VERSION, _DEFERRED_ROW_VERSION, _ZROW_VERSION, _DEFERRED_ZROW_VERSION, _DICT_ROW_VERSION):
        raise _NewerRowVersion
    plain = opener.open(blob, 1, _row_aad(version, seq))
    if plain is None:
        raise AeadError("authentication failed")
    if version in (_ZROW_VERSION, _DEFERRED_ZROW_VERSION):
        try:
            return zlib.decompress(plain)
        except zlib.error as exc:  # authenticated, so only our own writer could have made it
            raise ValueError("malformed compressed row") from exc
    return plain


def _open_rows(
    key: bytes,
    parts: list[list[tuple[int, bytes]]],
    opened: queue.SimpleQueue[list[tuple[int, bytes]] | BaseException | None],
    stop: threading.Event,
    dictionaries: dict[int, _Dictionary],
) -> None:
    """Open (AEAD) the rows of ``parts`` (last part first) onto ``opened``; an error or ``None``
    (done) ends it. Each part's ciphertext is let go once opened: at 100k notes the rows are
    ~100 MB, which would otherwise stay until the last row is decoded (the unlock's peak)."""
    opener = RowOpener(key)
    try:
        while parts:
            if stop.is_set():
                return
            part = parts.pop()
            opened.put([(seq, _open_row(opener, seq, blob, dictionaries)) for seq, blob in part])
            del part
        opened.put(None)
    except (AeadError, ValueError, TypeError, _NewerRowVersion) as exc:
        opened.put(exc)


def _header_aad(fmt: str, version: int, kdf_blob: bytes) -> bytes:
    return _HEADER_AAD + canonical_bytes({"format": fmt, "version": version, "kdf": kdf_blob})


def _state_aad(seq: int) -> bytes:
    return _STATE_AAD + struct.pack(">Q", seq)


def _row_aad(version: bytes, seq: int) -> bytes:
    # Binding the version byte: a row cannot be moved between "opened at unlock" and "left sealed".
    # Binding the compression flag too: a row cannot be read as compressed when it was not.
    return _state_aad(seq) + _ROW_AAD_SUFFIX[version]


def _seal_record(
    key: bytes,
    record: dict[str, Any],
    seq: int,
    deferred_kinds: frozenset[str] | set[str],
    dictionaries: dict[str, _Dictionary] | None = None,
) -> bytes:
    """One state row: the record encoded, compressed when that pays (with its kind's dictionary
    if the store has one), sealed under its version."""
    kind = record.get("t")
    version = _DEFERRED_ROW_VERSION if kind in deferred_kinds else _ROW_VERSION
    plain = encode_record(record)
    book = dictionaries.get(kind) if dictionaries and isinstance(kind, str) and len(plain) >= _DICT_MIN else None
    if book is not None:
        packed = book.compress(plain)
        if len(packed) <= len(plain) * _COMPRESS_KEEP:
            version = _DICT_COMPRESSED[version]
            named = _DICT_SEQ.pack(book.seq)
            return version + named + seal(key, packed, _row_aad(version, seq) + named)
    if len(plain) >= _COMPRESS_MIN:
        packed = _compress_row(plain)
        if len(packed) <= len(plain) * _COMPRESS_KEEP:
            plain, version = packed, _COMPRESSED[version]
    return version + seal(key, plain, _row_aad(version, seq))


# A commit of at least this many records (an import batch, a restore) seals them on two cores.
# Below a notes import batch (500 notes: 501 records with its audit entry), which at 512 was
# sealed on one core.
_PARALLEL_SEAL = 256


def _seal_records(
    key: bytes,
    records: Sequence[dict[str, Any]],
    first_seq: int,
    deferred_kinds: frozenset[str] | set[str],
    dictionaries: dict[str, _Dictionary] | None = None,
) -> list[bytes]:
    """The rows of ``records``, numbered from ``first_seq``.

    Many records are sealed on two threads, each over half of them: deflate and the AEAD run
    without the GIL, and what each loop does in Python is small beside them, so a large commit
    takes about half the time on two cores (issue 32: a restore commits ~20k records at once).
    """

    def seal_one(i: int, record: dict[str, Any]) -> bytes:
        return _seal_record(key, record, first_seq + i, deferred_kinds, dictionaries)

    return map_in_two_halves(seal_one, records, minimum=_PARALLEL_SEAL, name="memories-seal")


def _chain_next(chain: bytes, seq: int, blob: bytes) -> bytes:
    return hashlib.sha256(chain + struct.pack(">Q", seq) + blob).digest()


@dataclass
class Loaded:
    """What unlocking a store yields: the records in order and the write cursor."""

    records: list[tuple[int, dict[str, Any]]]
    last_seq: int
    count: int
    chain: bytes
    last_content_seq: int
    # Records of the kinds ``load`` was asked to defer: authenticated plaintext, not yet
    # decoded (``decode_record`` turns each into a record when its reader needs it). Rows
    # written before deferred rows were sealed apart (row version 1).
    deferred: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    # Rows of deferred kinds written as such (row version 2), still sealed: chained, not yet opened.
    sealed: SealedRows | None = None


class SealedRows:
    """Rows of deferred kinds an unlock left sealed, for their reader to open off its path.

    Their bytes are not kept (at 100k notes the token streams are ~250 MB of ciphertext): only
    each row's hash chain before and after it, which the unlock checked against the checkpoint.
    ``open`` reads the rows again and accepts a row only if it extends the chain exactly as
    then, so it opens the very bytes that were checked; then each row's own AEAD, the defence
    in depth the unlock ran for every other row. Holds the master key until dropped: a lock
    drops it with the reader's state (ST-10).
    """

    def __init__(
        self,
        key: bytes,
        refs: list[tuple[int, bytes, bytes]],
        fetch: Callable[[int, int], list[tuple[int, bytes]]],
        dictionaries: dict[int, _Dictionary] | None = None,
    ) -> None:
        self._key = key
        self.refs = refs  # (seq, chain before the row, chain after it), ascending
        self._fetch = fetch
        # The store's dictionaries as the unlock opened them (their rows are in the chain too).
        self._dictionaries = dictionaries if dictionaries is not None else {}

    def __len__(self) -> int:
        return len(self.refs)

    def since(self, seq: int) -> SealedRows:
        """The rows written after state row ``seq`` (what a search snapshot of then lacks)."""
        return SealedRows(self._key, [ref for ref in self.refs if ref[0] > seq], self._fetch, self._dictionaries)

    def open(self) -> list[tuple[int, bytes]]:
        """Every row's (seq, plaintext), in order; store_corrupt if one is not the row the unlock
        chained or fails to authenticate."""
        opener = RowOpener(self._key)
        out: list[tuple[int, bytes]] = []
        corrupt = MemoriesError("store_corrupt", "A state row failed authentication.")
        for start in range(0, len(self.refs), _OPEN_CHUNK):
            part = self.refs[start : start + _OPEN_CHUNK]
            wanted = {seq: (before, after) for seq, before, after in part}
            found = 0
            for seq, blob in self._fetch(part[0][0], part[-1][0]):
                chains = wanted.get(seq)
                if chains is None:
                    continue
                if not isinstance(blob, bytes) or not hmac.compare_digest(_chain_next(chains[0], seq, blob), chains[1]):
                    raise corrupt
                try:
                    out.append((seq, _open_row(opener, seq, blob, self._dictionaries)))
                except (AeadError, ValueError, _NewerRowVersion):
                    raise corrupt from None
                found += 1
            if found != len(part):
                raise corrupt
        return out


@dataclass(frozen=True)
class SnapshotRef:
    """Where a sealed snapshot lies and what its sealed bytes hash to; kept in a state record
    (the chain covers it), so that rows swapped, changed or replayed in the table are refused."""

    snapshot_id: bytes
    first: int
    count: int
    digest: bytes
    size: int  # stored (compressed, sealed) bytes

    def to_fields(self) -> dict[str, Any]:
        return {"id": self.snapshot_id, "first": self.first, "count": self.count, "digest": self.digest, "size": self.size}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> SnapshotRef | None:
        try:
            ref = cls(
                bytes(fields["id"]), int(fields["first"]), int(fields["count"]), bytes(fields["digest"]), int(fields["size"])
            )
        except (KeyError, TypeError, ValueError):
            return None
        return ref if ref.first > 0 and ref.count > 0 and len(ref.digest) == 32 else None


def _snapshot_aad(snapshot_id: bytes, index: int, count: int) -> bytes:
    # Binds each chunk to its snapshot, place and the total: no chunk moves, drops or mixes.
    return _SNAPSHOT_AAD + snapshot_id + struct.pack(">II", index, count)


@dataclass
class _ReadRows:
    """State rows read for an unlock, and the hash chain over all of them."""

    rows: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, blob) of the rows to open now
    later: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # deferred rows: (seq, chain before, after)
    dictionaries: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, blob) of dictionary rows
    chain: bytes = _CHAIN_START
    count: int = 0
    last_seq: int = 0


def read_state_rows(rows: Iterable[tuple[int, bytes]], *, keep_deferred: bool = False) -> _ReadRows:
    """The unlock's view of state rows given in order: the rows to open now, the deferred rows'
    places in the hash chain, and the chain over all of them (shared by the PostgreSQL store)."""
    read = _ReadRows()
    chain = _CHAIN_START
    for seq, blob in rows:
        before, chain = chain, _chain_next(chain, seq, blob)
        if blob[:1] == _DICT_ROW_VERSION:
            read.dictionaries.append((seq, blob))
        elif not keep_deferred and blob[:1] in _DEFERRED_VERSIONS:
            read.later.append((seq, before, chain))
        else:
            read.rows.append((seq, blob))
        read.count += 1
        read.last_seq = seq
    read.chain = chain
    return read


@dataclass
class _Cursor:
    last_seq: int = 0
    count: int = 0
    chain: bytes = _CHAIN_START
    last_content_seq: int = 0


@dataclass
class StoreFile:
    """An open store file. Holds the master key only while unlocked."""

    # Whether this store keeps sealed search-index snapshots (issue 32). The hosted PostgreSQL
    # store (engine/store/postgres.py) has no snapshot table; its Center rebuilds the index at unlock.
    keeps_snapshots: ClassVar[bool] = True
    # Whether a file upload's chunks go to pack files beside the store (issue 32); the hosted
    # PostgreSQL store keeps them as rows.
    keeps_packs: ClassVar[bool] = True

    path: Path
    conn: sqlite3.Connection
    kdf: KdfParams
    _master: bytes | None = None
    _cursor: _Cursor = field(default_factory=_Cursor)
    # One SQLite connection shared by worker threads: serialize every use of it.
    _db_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    # Guards the content cursor alone, so that claiming numbers for the next batch of an upload
    # does not wait behind the previous batch's write (which holds ``_db_lock`` for its whole
    # transaction). Taken after ``_db_lock`` where both are held.
    _content_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Content rows named by the records of the last load, and the content cursor then.
    _loaded_refs: tuple[frozenset[int], int] = field(default=(frozenset(), 0), repr=False)
    # Rows and their hash chain read while the KDF ran (see ``check_password``); ciphertext only.
    _prefetched: _ReadRows | None = field(default=None, repr=False)
    # The kinds the last load deferred: commits seal records of these kinds as deferred rows.
    _deferred_kinds: frozenset[str] = field(default=frozenset(), repr=False)
    # Copies the write-ahead log into the file on its own thread (set by ``open``).
    _checkpointer: WalCheckpointer | None = field(default=None, repr=False)
    # The store's compression dictionaries (set by ``load``, added to by commits): by sequence
    # number for opening rows, by kind for sealing new ones. Plaintext fragments of records:
    # dropped with the master key.
    _dictionaries: dict[int, _Dictionary] = field(default_factory=dict, repr=False)
    _kind_dictionaries: dict[str, _Dictionary] = field(default_factory=dict, repr=False)
    # Per kind still without a dictionary: how many of its records commits wrote since the unlock,
    # and samples of their plaintext (at most _DICT_BYTES), until there are enough to make one.
    _samples: dict[str, tuple[int, list[bytes]]] = field(default_factory=dict, repr=False)
    # The pack files beside the store (set by ``open``), and whether its ``content_packed`` table
    # exists yet (a store made before packs has none until its first packed upload).
    _packs: PackDir | None = field(default=None, repr=False)
    _has_packed: bool = field(default=False, repr=False)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path) -> StoreFile:
        """Open the store; on a full disk, after releasing the reserve (engine/store/room.py) once."""
        try:
            store = cls._open(path)
        except MemoriesError as exc:
            if exc.code != "disk_full" or not release_reserve(path):
                raise
            store = cls._open(path)
        ensure_reserve(path)
        return store

    @classmethod
    def _open(cls, path: Path) -> StoreFile:
        if not path.exists():
            raise MemoriesError("not_initialized")
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            _pragmas(conn, "WAL")
            row = conn.execute("SELECT format, version, kdf FROM header WHERE id = 1").fetchone()
            if row is None or row[0] != FORMAT_NAME or row[1] != FORMAT_VERSION:
                raise MemoriesError("store_corrupt", "The store header is missing or of an unknown format.")
            kdf = KdfParams.from_dict(decode_canonical(row[2]))
            # Checkpoints run on the checkpointer's thread; this connection's own are a backstop.
            conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
            has_packed = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'content_packed'").fetchone()
        except (sqlite3.DatabaseError, ValueError, KeyError) as exc:
            conn.close()
            if is_disk_full(exc, path):
                raise MemoriesError("disk_full", "The disk is full, so the store could not be opened; free some space.") from exc
            raise MemoriesError("store_corrupt", "The store header could not be read.") from exc
        except MemoriesError:
            conn.close()
            raise
        return cls(
            path=path,
            conn=conn,
            kdf=kdf,
            _checkpointer=WalCheckpointer(path),
            _packs=PackDir(packs_path(path)),
            _has_packed=has_packed is not None,
        )

    def close(self) -> None:
        self.wipe()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self.conn.close()

    @property
    def unlocked(self) -> bool:
        return self._master is not None

    def wipe(self) -> None:
        """Forget the master key (ST-10). Python cannot zero immutable bytes; we drop them."""
        self._master = None
        self._prefetched = None
        self._dictionaries = {}  # a reader still holding the old mapping fails closed, never reads a new one
        self._kind_dictionaries = {}
        self._samples = {}

    # -- keys ------------------------------------------------------------------------
    def check_password(self, password: str, *, prefetch: bool = False, ahead: DerivationAhead | None = None) -> bytes:
        """Derive the password key and unseal the master key; wrong_password if it fails.

        With ``prefetch`` (an unlock), the state rows are read and hash-chained on another
        thread while the KDF runs: neither needs the key, and the KDF leaves the GIL and
        the other core free. ``load`` then checks that chain against the checkpoint.
        ``ahead``: a derivation already under way for this password (an unlock that reached
        a re-executed engine while it loaded); its key is used if password and parameters match.
        """
        with self._db_lock:
            fmt, version, kdf_blob, sealed = self._header_row()
        if prefetch:
            threading.Thread(target=self._prefetch, name="memories-prefetch", daemon=True).start()
        key = ahead.take(password, self.kdf) if ahead is not None else None
        if key is None:
            key = derive_key(password, self.kdf)
        try:
            return open_sealed(key, sealed, _header_aad(fmt, version, kdf_blob))
        except AeadError as exc:
            if prefetch:
                with self._db_lock:  # after the prefetch: no rows kept for a refused attempt
                    self._prefetched = None
            raise MemoriesError("wrong_password") from exc

    # -- the rows themselves (a hosted PostgreSQL store overrides these: engine/store/postgres.py) --
    def _header_row(self) -> tuple[str, int, bytes, bytes]:
        row = self.conn.execute("SELECT format, version, kdf, sealed_master FROM header WHERE id = 1").fetchone()
        return str(row[0]), int(row[1]), bytes(row[2]), bytes(row[3])

    def _checkpoint_blob(self) -> bytes:
        return bytes(self.conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0])

    def _max_content_seq(self) -> int:
        top = int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0])
        if self._has_packed:
            top = max(top, int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content_packed").fetchone()[0]))
        return top

    def _write_commit(self, content: Sequence[tuple[int, bytes]], rows: list[tuple[int, bytes]], cp_blob: bytes) -> None:
        """Content rows, state rows and the new checkpoint in one durable transaction.

        Chunks of large files that arrive whole in one commit (a sync bundle, a cloud object, a
        restore's batch) go to a pack file, like an upload's (issue 32): written and synced
        first, then named by rows of this same transaction, so a failure or a crash in between
        leaves only a pack no row names (removed here, or by the unlock's sweep)."""
        content, pack, places = self._pack_chunks(content)
        written = sum(len(b) for _, b in content) + 64 * len(places) + sum(len(b) for _, b in rows) + len(cp_blob)
        try:
            with self._transaction(written):
                self.conn.executemany("INSERT INTO content (seq, blob) VALUES (?, ?)", content)
                if places:  # a store from before packs has no such table until its first packed chunks
                    for statement in () if self._has_packed else _ADD_PACKED_TABLE:
                        self.conn.execute(statement)
                    self.conn.executemany("INSERT INTO content_packed (seq, pack, offset, length) VALUES (?, ?, ?, ?)", places)
                self.conn.executemany("INSERT INTO state (seq, blob) VALUES (?, ?)", rows)
                self.conn.execute("UPDATE checkpoints SET blob = ? WHERE id = 1", (cp_blob,))
        except BaseException:
            if pack is not None:
                self._pack_dir().remove([pack])
            raise
        if places:
            self._has_packed = True

    def _pack_chunks(
        self, content: Sequence[tuple[int, bytes]]
    ) -> tuple[Sequence[tuple[int, bytes]], int | None, list[tuple[int, int, int, int]]]:
        """The rows still to write as rows, the pack written, and the places of what went to it."""
        if self._packs is None or not self.keeps_packs:
            return content, None, []
        chunks = [(seq, blob) for seq, blob in content if len(blob) >= PACKED_ROW_MIN]
        if sum(len(blob) for _, blob in chunks) < PACK_MIN_BYTES:
            return content, None, []
        pack = chunks[0][0]  # named by a row of its own, like an upload's: unique while that row lives
        places = self._packs.write_whole(pack, [blob for _, blob in chunks])
        if places is None:
            return content, None, []
        kept = [(seq, blob) for seq, blob in content if len(blob) < PACKED_ROW_MIN]
        return kept, pack, [(seq, pack, offset, length) for (seq, _), (offset, length) in zip(chunks, places, strict=True)]

    def replica_rows(self, after: int, content_after: int, limit: int) -> dict[str, Any]:
        """Sealed rows past two cursors, read in one snapshot, for a standby (CT-4; no key needed).

        Chunks in pack files travel as the sealed bytes they are: a standby stores them as
        content rows (packs are this store's layout, not part of what it replicates)."""
        with self._db_lock:
            if not self._has_packed:
                return sqlite_replica_rows(self.conn, after, content_after, limit)
            self.conn.execute("BEGIN")
            try:
                rows = sqlite_replica_rows(self.conn, after, content_after, limit)
                places = self.conn.execute(
                    "SELECT seq, pack, offset, length FROM content_packed WHERE seq > ? ORDER BY seq LIMIT ?",
                    (content_after, limit),
                ).fetchall()
                top = int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content_packed").fetchone()[0])
            finally:
                self.conn.execute("COMMIT")
        blobs = self._pack_dir().read([(p[1], p[2], p[3]) for p in places])
        packed = [(int(p[0]), blob) for p, blob in zip(places, blobs, strict=True)]
        merged = sorted(rows["content"] + packed)[:limit]
        rows["content"] = merged
        rows["last_content_seq"] = max(rows["last_content_seq"], top)
        return rows

    def _pack_dir(self) -> PackDir:
        if self._packs is None:
            raise MemoriesError("io_error", "This store keeps no pack files.")
        return self._packs

    def install_master(self, master: bytes) -> None:
        self._master = master

    def _key(self) -> bytes:
        if self._master is None:
            raise MemoriesError("locked")
        return self._master

    # -- reading ---------------------------------------------------------------------
    def _read_rows(self, *, keep_deferred: bool = False) -> _ReadRows:
        """Every state row in order and the hash chain over them (no key needed). Rows written as
        deferred are chained but not kept (unless ``keep_deferred``): only their place in the
        chain, by which ``SealedRows.open`` recognises them when it reads them again."""
        return read_state_rows(self.conn.execute("SELECT seq, blob FROM state ORDER BY seq"), keep_deferred=keep_deferred)

    def _fetch_rows(self, low: int, high: int) -> list[tuple[int, bytes]]:
        """State rows ``low`` … ``high`` as stored now (``SealedRows`` checks them against the chain)."""
        with self._db_lock:
            try:
                rows: list[tuple[int, bytes]] = self.conn.execute(
                    "SELECT seq, blob FROM state WHERE seq BETWEEN ? AND ? ORDER BY seq", (low, high)
                ).fetchall()
            except sqlite3.DatabaseError as exc:
                raise MemoriesError("store_corrupt", "A state row could not be read.") from exc
        return rows

    def _prefetch(self) -> None:
        with self._db_lock:  # ``load`` waits for it here rather than reading the rows twice
            try:
                self._prefetched = self._read_rows()
            except (sqlite3.DatabaseError, TypeError, ValueError):
                self._prefetched = None  # ``load`` reads again and reports the error

    def load(self, deferred_kinds: frozenset[str] = frozenset(), *, open_deferred: bool = False) -> Loaded:
        """Decrypt every state row, verifying the hash chain against the checkpoint.

        Rows whose record kind is in ``deferred_kinds`` are not decoded: ``Loaded.deferred``
        holds the plaintext of those written before deferred rows existed, ``Loaded.sealed``
        the rows written as deferred, chained but not yet opened, for a background reader.
        Later commits seal records of these kinds as deferred rows. ``open_deferred``: open
        those rows now too (after a background reader found one that failed its AEAD).
        """
        loaded, records = self.load_stream(deferred_kinds, open_deferred=open_deferred)
        loaded.records = list(records)
        return loaded

    def load_stream(
        self, deferred_kinds: frozenset[str] = frozenset(), *, open_deferred: bool = False
    ) -> tuple[Loaded, Iterator[tuple[int, dict[str, Any]]]]:
        """Like :meth:`load`, with the records as an iterator that opens rows as it goes.

        The chain is checked before this returns; each row's AEAD as the iterator reaches it
        (a bad row raises store_corrupt there), so a caller serves nothing until it has read
        the iterator to its end. ``Loaded.records`` stays empty; ``Loaded.deferred`` fills as
        the iterator runs.
        """
        with self._db_lock:
            self._deferred_kinds = deferred_kinds
            return self._load(deferred_kinds, open_deferred or not deferred_kinds)

    @staticmethod
    def _matches(checkpoint: dict[str, Any], read: _ReadRows) -> bool:
        return bool(
            checkpoint.get("chain") == read.chain
            and checkpoint.get("count") == read.count
            and checkpoint.get("last_seq") == read.last_seq
        )

    def _load(self, deferred_kinds: frozenset[str], open_deferred: bool) -> tuple[Loaded, Iterator[tuple[int, dict[str, Any]]]]:
        key = self._key()
        prefixes = [(kind, _kind_prefix(kind)) for kind in deferred_kinds]
        prefetched, self._prefetched = self._prefetched, None
        try:
            cp_blob = self._checkpoint_blob()
            checkpoint = decode_record(open_sealed(key, cp_blob[1:], _CHECKPOINT_AAD))
            # Rows read during the KDF are used only if they are exactly what the checkpoint
            # covers; otherwise (the store changed since, or no prefetch) they are read now.
            # Either way the rows decrypted below are the rows whose chain was checked.
            # After an integrity failure every row is opened now: then deferred rows are kept too.
            if prefetched is None or not self._matches(checkpoint, prefetched) or (open_deferred and prefetched.later):
                prefetched = self._read_rows(keep_deferred=open_deferred)
            read = prefetched
            if not self._matches(checkpoint, read):
                raise MemoriesError("store_corrupt", "The state rows do not match the checkpoint.")
            last_content = self._max_content_seq()
            dictionaries, kinds = self._open_dictionaries(key, read.dictionaries)
        except (AeadError, ValueError, TypeError, IndexError, sqlite3.DatabaseError) as exc:
            raise MemoriesError("store_corrupt", "A state row failed authentication.") from exc
        self._dictionaries, self._kind_dictionaries = dictionaries, kinds
        last_seq, chain = read.last_seq, read.chain
        with self._content_lock:
            self._cursor = _Cursor(last_seq, read.count, chain, max(last_content, checkpoint.get("last_content_seq", 0)))
        self._loaded_refs = (frozenset(), 0)  # set once every record has been read
        deferred: dict[str, list[tuple[int, bytes]]] = {}
        sealed = SealedRows(key, read.later, self._fetch_rows, dictionaries) if read.later else None
        records = self._open_records(key, read.rows, prefixes, deferred, dictionaries)
        return Loaded([], last_seq, read.count, chain, self._cursor.last_content_seq, deferred, sealed), records

    @staticmethod
    def _open_dictionaries(key: bytes, rows: list[tuple[int, bytes]]) -> tuple[dict[int, _Dictionary], dict[str, _Dictionary]]:
        """The dictionary rows, opened before any row compressed with them (they are few: one per
        kind that ever had a large commit). A kind's newest dictionary seals its new rows."""
        opener = RowOpener(key)
        by_seq: dict[int, _Dictionary] = {}
        by_kind: dict[str, _Dictionary] = {}
        for seq, blob in rows:
            kind, zdict = _open_dictionary(opener, seq, blob)
            by_seq[seq] = by_kind[kind] = _Dictionary(seq, zdict, kind)
        return by_seq, by_kind

    def _open_records(
        self,
        key: bytes,
        rows: list[tuple[int, bytes]],
        prefixes: list[tuple[str, bytes]],
        deferred: dict[str, list[tuple[int, bytes]]],
        dictionaries: dict[int, _Dictionary],
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every record, in order, as its row is opened; raises store_corrupt at a bad row.

        A helper thread opens the rows (libsodium runs without the GIL) while the consumer
        decodes the records already opened: on two cores the AEAD of a 10k-note unlock
        (~60 MB) overlaps with building the index instead of preceding it. A row is yielded
        only after it authenticated; the caller consumes all of them before serving anything.
        """
        opened: queue.SimpleQueue[list[tuple[int, bytes]] | BaseException | None] = queue.SimpleQueue()
        stop = threading.Event()
        parts = [rows[i : i + _OPEN_CHUNK] for i in range(0, len(rows), _OPEN_CHUNK)]
        parts.reverse()  # popped from the end: first rows first
        rows.clear()  # the opening thread owns them now, part by part
        threading.Thread(
            target=_open_rows, args=(key, parts, opened, stop, dictionaries), name="memories-open-rows", daemon=True
        ).start()
        named: set[int] = set()
        name = named.add
        try:
            while (chunk := opened.get()) is not None:
                if isinstance(chunk, _NewerRowVersion):
                    # The chain matched the sealed checkpoint, so this row is ours, from a later format.
                    raise MemoriesError("store_version") from None
                if isinstance(chunk, BaseException):
                    raise MemoriesError("store_corrupt", "A state row failed authentication.") from chunk
                for seq, plain in chunk:
                    kind = _deferred_kind(plain, prefixes) if prefixes else None
                    if kind is not None:
                        deferred.setdefault(kind, []).append((seq, plain))
                        continue
                    try:
                        record = decode_record(plain)
                    except ValueError as exc:
                        raise MemoriesError("store_corrupt", "A state row failed authentication.") from exc
                    body_seqs = record.get("body_seqs")
                    if isinstance(body_seqs, list):
                        for body_seq in body_seqs:  # a loop, not a generator per row (issue 32)
                            if isinstance(body_seq, int):
                                name(body_seq)
                    yield seq, record
        finally:
            stop.set()
        # Deferred kinds never name content rows (a kind that does must not be deferred).
        self._loaded_refs = (frozenset(named), self._cursor.last_content_seq)

    def read_records(self, seqs: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The records of state rows ``seqs`` (those that exist), each opened under the master key
        and its row's own associated data (sequence number and version), as at the unlock: read
        back by a caller that did not keep them (a revision's signed bytes, issue 32). The caller
        checks that a record is the one it loaded (a revision: its ID is the hash of its bytes)."""
        key = self._key()
        # Taken with the key: a lock empties both, and a row compressed with its kind's dictionary
        # (issue 32) opens only with the dictionaries of this unlock.
        dictionaries = self._dictionaries
        rows: list[tuple[int, bytes]] = []
        with self._db_lock:
            try:
                for start in range(0, len(seqs), _READ_BATCH):
                    rows.extend(self._state_rows_at(seqs[start : start + _READ_BATCH]))
            except sqlite3.DatabaseError as exc:
                raise MemoriesError("store_corrupt", "A state row could not be read.") from exc
        opener = RowOpener(key)
        out: dict[int, dict[str, Any]] = {}
        try:
            for seq, blob in rows:
                if not isinstance(blob, bytes):
                    raise ValueError("not a sealed row")
                out[seq] = decode_record(_open_row(opener, seq, blob, dictionaries))
        except (AeadError, ValueError, _NewerRowVersion) as exc:
            raise MemoriesError("store_corrupt", "A state row failed authentication.") from exc
        return out

    def _state_rows_at(self, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """The stored (seq, blob) of these state rows (at most ``_READ_BATCH``), held ``_db_lock``."""
        # One parameter for the whole list (a JSON array of integers): no SQL built from values.
        wanted = json.dumps([int(seq) for seq in seqs])
        query = "SELECT seq, blob FROM state WHERE seq IN (SELECT value FROM json_each(?))"
        rows: list[tuple[int, bytes]] = self.conn.execute(query, (wanted,)).fetchall()
        return rows

    def read_content(self, seqs: Sequence[int]) -> list[bytes]:
        with self._db_lock:
            try:
                return self._read_content(seqs)
            except sqlite3.DatabaseError as exc:  # e.g. a chunk overwritten with TEXT
                raise MemoriesError("store_corrupt", "A content chunk could not be read.") from exc

    def _read_content(self, seqs: Sequence[int]) -> list[bytes]:
        rows: list[bytes | None] = []
        places: list[tuple[int, int, int]] = []
        for seq in seqs:
            row = self.conn.execute("SELECT blob FROM content WHERE seq = ?", (seq,)).fetchone()
            if row is None and self._has_packed:
                place = self.conn.execute("SELECT pack, offset, length FROM content_packed WHERE seq = ?", (seq,)).fetchone()
                if place is not None and all(isinstance(v, int) for v in place):
                    places.append(place)
                    rows.append(None)
                    continue
            if row is None:
                raise MemoriesError("store_corrupt", "A content chunk is missing.")
            rows.append(bytes(row[0]))
        if not places:
            return [row for row in rows if row is not None]
        # Read while the store's lock is held, like the rows: a discard cannot remove the pack
        # between finding a chunk's place and reading it.
        packed = iter(self._pack_dir().read(places))
        return [row if row is not None else next(packed) for row in rows]

    # -- writing ---------------------------------------------------------------------
    def reserve_content(self, count: int) -> list[int]:
        """Sequence numbers for content rows of the next commit (rolled back on failure)."""
        start = self._cursor.last_content_seq + 1
        return list(range(start, start + count))

    def claim_content(self, count: int) -> list[int]:
        """Sequence numbers for content rows written later, off the caller's thread (streamed files).

        Unlike :meth:`reserve_content` the cursor moves now: a write, commit or another
        upload that runs before these rows land takes numbers above them. Numbers never
        written are only a gap (an aborted upload's :meth:`discard_content` may name them).
        """
        with self._content_lock:
            start = self._cursor.last_content_seq + 1
            self._cursor.last_content_seq += count
            return list(range(start, start + count))

    def write_content(self, content: Sequence[tuple[int, bytes | bytearray]]) -> None:
        """Write content rows ahead of the commit that will reference them (streamed files, FI-1).

        The rows are ciphertext under a data key only the pending revision holds; until a
        commit references them they are unreachable. The cursor moves past them so no other
        write reuses their numbers; :meth:`discard_content` removes them if the upload ends.

        These transactions are not synced on their own (``synchronous=NORMAL``): the commit
        that references the rows syncs the write-ahead log with them in it, and a crash
        before that loses only the upload (its rows are swept at the next unlock, see
        :meth:`sweep_orphan_content`).
        """
        with self._db_lock:
            self._key()
            self._insert_unsynced("INSERT INTO content (seq, blob) VALUES (?, ?)", content, sum(len(blob) for _, blob in content))
            self._content_written(max((s for s, _ in content), default=0))

    def _insert_unsynced(self, sql: str, rows: Sequence[tuple[Any, ...]], size: int, first: Sequence[str] = ()) -> None:
        """``rows`` inserted in one transaction that is not synced on its own (see
        :meth:`write_content`), after the statements ``first``; a failure is ``disk_full`` or
        ``io_error``."""
        try:
            for statement in first:
                self.conn.execute(statement)
            self.conn.execute("PRAGMA synchronous=NORMAL")
            try:
                with self._transaction(size):
                    self.conn.executemany(sql, rows)
            finally:
                self.conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise _write_error(exc, self.path, "The file could not be written; nothing was changed.") from exc

    def _content_written(self, top: int) -> None:
        """The cursor moves past content rows written ahead of their commit."""
        with self._content_lock:
            if top > self._cursor.last_content_seq:
                self._cursor.last_content_seq = top

    def open_pack(self, pack: int) -> PackWriter:
        """A new pack file for one upload's sealed chunks, numbered by its first content row."""
        self._key()
        try:
            return self._pack_dir().create(pack)
        except OSError as exc:
            raise _write_error(exc, None, "The file could not be written; nothing was changed.") from exc

    def write_packed(self, places: Sequence[tuple[int, int, int, int]]) -> None:
        """Record where chunks written to a pack lie: (content row, pack, offset, length) each.

        Like :meth:`write_content` these rows are not synced on their own: the upload syncs its
        pack, then the commit that names the rows syncs the log with them in it. Written after
        their bytes, so a row never names bytes not yet written.
        """
        with self._db_lock:
            self._key()
            self._insert_unsynced(
                "INSERT INTO content_packed (seq, pack, offset, length) VALUES (?, ?, ?, ?)",
                places,
                64 * len(places),
                first=() if self._has_packed else _ADD_PACKED_TABLE,  # a store's first packed upload
            )
            self._has_packed = True
            self._content_written(max((place[0] for place in places), default=0))

    def remove_pack(self, pack: int) -> None:
        """Delete an ended upload's pack file once its rows are gone (also one it never got to name)."""
        with self._db_lock:
            named = self._has_packed and self.conn.execute("SELECT 1 FROM content_packed WHERE pack = ?", (pack,)).fetchone()
            if not named and self._packs is not None:
                self._packs.remove([pack])

    def _named_packs(self) -> set[int]:
        with self._db_lock:
            if not self._has_packed:
                return set()
            return {int(p) for (p,) in self.conn.execute("SELECT DISTINCT pack FROM content_packed")}

    def sweep_stale_packs(self) -> int:
        """Remove pack files no row names (a crash before an upload's first rows, or rows swept
        since) and no upload is writing; how many (the unlock's sweep, engine/service/handlers/files.py)."""
        if self._packs is None:
            return 0
        try:
            return self._packs.sweep(self._named_packs)
        except (OSError, sqlite3.Error) as exc:
            log.warning("stale pack files not removed yet type=%s", type(exc).__name__)
            return 0

    def orphan_content(self, limit: int) -> list[int]:
        """Up to ``limit`` content rows that no record read by the last :meth:`load` names
        (``body_seqs`` of any record): what an upload cut short by a crash left behind.

        Only rows that existed at that load are considered (numbers up to its cursor), so
        rows written since (a new upload, a commit) are never candidates. Only row numbers
        are read.
        """
        referenced, top = self._loaded_refs
        found: list[int] = []
        with self._db_lock:
            queries = [_CONTENT_SEQS] + ([_PACKED_SEQS] if self._has_packed else [])
            for query in queries:
                for (seq,) in self.conn.execute(query, (top,)):
                    if seq not in referenced:
                        found.append(seq)
                        if len(found) >= limit:
                            return found
            return found

    def sweep_orphan_content(self, seqs: Sequence[int]) -> None:
        """Delete orphaned content rows found by :meth:`orphan_content` (see :meth:`discard_content`).

        Callers pass rows found before any new upload began: new uploads take numbers above
        every row that existed, so a sweep never touches a live upload.
        """
        if not self.discard_content(seqs):
            raise MemoriesError("io_error", "Orphaned file chunks could not be removed yet; the next unlock tries again.")

    def discard_content(self, seqs: Sequence[int]) -> bool:
        """Remove content rows no committed revision references (an abandoned upload), also on a
        full disk (FI-2). False when the store still refused; the caller may try again later,
        and the sweep at the next unlock removes them in any case.

        The delete itself writes only a few pages to the log (see :meth:`_delete_content`); on a
        full disk the store's reserve is released for them (engine/store/room.py). Then the log
        is checkpointed and cut to nothing, giving its space back. The checkpoint comes last:
        tried first on a full disk it fails half-way, and the store file's growth by then would
        take the very space the delete needs.
        """
        with self._db_lock:
            for attempt in range(2):
                try:
                    self._delete_content(seqs)
                    break
                except sqlite3.Error as exc:
                    if attempt or not is_disk_full(exc, self.path) or not release_reserve(self.path):
                        log.warning("file chunks not removed yet code=%s", getattr(exc, "sqlite_errorname", "?"))
                        return False
            self._truncate_log()
        ensure_reserve(self.path)
        return True

    def _delete_content(self, seqs: Sequence[int]) -> None:
        # Without secure_delete: it would overwrite every freed page, writing the rows' size to the
        # log again, which a full disk refuses. Nothing is lost by it: these rows were sealed under
        # a data key that only the upload held in memory (no revision wrapped or signed it), so
        # their bytes are unreadable to anyone, before and after. The same holds for their packs.
        self.conn.execute("PRAGMA secure_delete=OFF")
        try:
            self._delete_rows(seqs)
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA secure_delete=ON")

    def _delete_rows(self, seqs: Sequence[int]) -> None:
        """Delete content rows from both tables; then the pack files no row names any more."""
        params = [(s,) for s in seqs]
        packs: set[int] = set()
        with self._transaction():
            self.conn.executemany("DELETE FROM content WHERE seq = ?", params)
            if self._has_packed:
                for start in range(0, len(seqs), _READ_BATCH):
                    wanted = json.dumps([int(seq) for seq in seqs[start : start + _READ_BATCH]])
                    found = self.conn.execute(
                        "SELECT DISTINCT pack FROM content_packed WHERE seq IN (SELECT value FROM json_each(?))", (wanted,)
                    )
                    packs.update(int(p) for (p,) in found)
                self.conn.executemany("DELETE FROM content_packed WHERE seq = ?", params)
        if packs and self._packs is not None:
            left = {int(p) for p in packs if self.conn.execute("SELECT 1 FROM content_packed WHERE pack = ?", (p,)).fetchone()}
            self._packs.remove(sorted(packs - left))

    def erase_content(self, seqs: Sequence[int]) -> None:
        """Delete content rows for good (a notebook the user deleted, AG-13): the freed pages are
        overwritten (this connection's ``secure_delete``), then the write-ahead log is copied back
        and cut, so no old log frame keeps their bytes. Rows already gone are skipped."""
        with self._db_lock:
            self._key()
            try:
                self._delete_rows(seqs)
            except sqlite3.Error as exc:
                raise _write_error(exc, self.path, "The store could not be written; nothing was erased.") from exc
            self._truncate_log()

    def _truncate_log(self) -> bool:
        """Copy the write-ahead log into the store and cut it to zero bytes (best effort).

        Not tried while the free space is below the log's size: on a full disk the copy would
        fail half-way, after its growth of the store file took the space that reads (their
        audit intents, appended to the log) need. It runs at a later discard, or when the
        engine stops once there is room.
        """
        try:
            if free_bytes(self.path.parent) < os.stat(f"{self.path}-wal").st_size:
                return False
        except OSError:
            return False
        try:
            busy = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:
            log.warning("a truncating WAL checkpoint failed code=%s", getattr(exc, "sqlite_errorname", "?"))
            return False
        return bool(busy) and busy[0] == 0

    def keep_reserve(self) -> bool:
        """Make the full-disk reserve again if it was used and there is room now (room.py)."""
        return ensure_reserve(self.path)

    def reusable_bytes(self) -> int:
        """Bytes of free pages inside the store file, which new rows fill before it grows."""
        with self._db_lock:
            try:
                pages = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
                size = self.conn.execute("PRAGMA page_size").fetchone()[0]
            except sqlite3.Error:
                return 0
        return int(pages) * int(size)

    # -- the sealed snapshot (issue 32) -------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """The sequence number of the newest state row (a snapshot's watermark)."""
        return self._cursor.last_seq

    def write_snapshot(self, payload: bytes | Iterable[bytes]) -> SnapshotRef:
        """Compress and seal ``payload`` into new rows of the snapshot table; the caller then
        commits a state record naming the returned reference (until then nothing trusts them).

        ``payload`` may come in pieces, compressed as they come (issue 32: a caller that drops each
        piece once handed over never holds the whole payload beside its compressed form).
        Written without a sync of its own, like streamed file chunks: the record's commit syncs
        the log with these rows in it. Rows of older snapshots stay until :meth:`prune_snapshot`.
        """
        key = self._key()
        compressor = zlib.compressobj(_SNAPSHOT_LEVEL)
        packed = bytearray()
        for piece in [payload] if isinstance(payload, bytes) else payload:
            packed += compressor.compress(piece)
        packed += compressor.flush()
        parts = [bytes(packed[i : i + _SNAPSHOT_CHUNK]) for i in range(0, len(packed), _SNAPSHOT_CHUNK)] or [b""]
        del packed
        snapshot_id = os.urandom(16)
        sealed = [seal(key, part, _snapshot_aad(snapshot_id, i, len(parts))) for i, part in enumerate(parts)]
        digest = hashlib.sha256()
        for blob in sealed:
            digest.update(struct.pack(">Q", len(blob)) + blob)
        with self._db_lock:
            try:
                self.conn.execute(_ADD_SNAPSHOT_TABLE)
                first = int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM snapshot").fetchone()[0]) + 1
                self.conn.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction(sum(len(b) for b in sealed)):
                        self.conn.executemany(
                            "INSERT INTO snapshot (seq, blob) VALUES (?, ?)", [(first + i, b) for i, b in enumerate(sealed)]
                        )
                finally:
                    self.conn.execute("PRAGMA synchronous=FULL")
            except sqlite3.Error as exc:
                raise _write_error(exc, self.path, "The search snapshot could not be written.") from exc
        return SnapshotRef(snapshot_id, first, len(sealed), digest.digest(), sum(len(b) for b in sealed))

    def read_snapshot(self, ref: SnapshotRef) -> bytes:
        """The payload of the snapshot ``ref`` names, whole (see :meth:`read_snapshot_stream`)."""
        return b"".join(self.read_snapshot_stream(ref))

    def read_snapshot_stream(self, ref: SnapshotRef) -> Iterator[bytes]:
        """The payload of the snapshot ``ref`` names, in pieces as its rows are opened and
        decompressed one by one (issue 32: reading every row, then opening, joining and
        decompressing them at once held about three times the stored size beside the payload,
        ~450 MiB at 100k notes). Each row is authenticated by its AEAD, which binds it to this
        snapshot, its place and the count, before any of it is yielded; that the rows are
        exactly the sealed bytes the (chained) record hashed is known at the end: store_corrupt
        is raised then, as for a row that fails to open or decompress, so a reader uses what it
        built only once the iterator is exhausted."""
        key = self._key()
        digest = hashlib.sha256()
        decompressor = zlib.decompressobj()
        for i in range(ref.count):
            with self._db_lock:
                try:
                    row = self.conn.execute("SELECT blob FROM snapshot WHERE seq = ?", (ref.first + i,)).fetchone()
                except sqlite3.DatabaseError as exc:
                    raise MemoriesError("store_corrupt", "The search snapshot could not be read.") from exc
            blob = row[0] if row is not None else None
            if not isinstance(blob, bytes):
                raise MemoriesError("store_corrupt", "The search snapshot does not match its record.")
            digest.update(struct.pack(">Q", len(blob)) + blob)
            try:
                piece = decompressor.decompress(open_sealed(key, blob, _snapshot_aad(ref.snapshot_id, i, ref.count)))
            except (AeadError, zlib.error) as exc:
                raise MemoriesError("store_corrupt", "The search snapshot failed authentication.") from exc
            del blob, row
            if piece:
                yield piece
        if not hmac.compare_digest(digest.digest(), ref.digest):
            raise MemoriesError("store_corrupt", "The search snapshot does not match its record.")
        try:
            rest = decompressor.flush()
        except zlib.error as exc:
            raise MemoriesError("store_corrupt", "The search snapshot failed authentication.") from exc
        if not decompressor.eof or decompressor.unused_data:
            raise MemoriesError("store_corrupt", "The search snapshot failed authentication.")
        if rest:
            yield rest

    def prune_snapshot(self, keep: SnapshotRef | None) -> None:
        """Delete snapshot rows other than ``keep``'s (best effort; unreferenced rows are never read).

        Without secure_delete (see :meth:`_delete_content`): the rows are sealed under the master
        key like the token streams the state keeps anyway, and zeroing them would write their
        size to the log a second time.
        """
        with self._db_lock:
            try:
                self.conn.execute(_ADD_SNAPSHOT_TABLE)
                self.conn.execute("PRAGMA secure_delete=OFF")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction():
                        if keep is None:
                            self.conn.execute("DELETE FROM snapshot")
                        else:
                            self.conn.execute(
                                "DELETE FROM snapshot WHERE seq < ? OR seq >= ?", (keep.first, keep.first + keep.count)
                            )
                finally:
                    self.conn.execute("PRAGMA synchronous=FULL")
                    self.conn.execute("PRAGMA secure_delete=ON")
            except sqlite3.Error as exc:
                log.warning("old search snapshot rows not removed yet code=%s", getattr(exc, "sqlite_errorname", "?"))

    def commit(
        self, records: Sequence[dict[str, Any]], content: Sequence[tuple[int, bytes]] = (), *, essential: bool = False
    ) -> list[int]:
        """Append ``records`` and ``content`` with a new checkpoint in ONE transaction (ST-5).

        Returns the state sequence numbers. On any failure nothing is written and
        the cursor is unchanged. ``essential`` (a read's audit intent): on a full disk the
        store's reserve is released for it, so reads keep working (engine/store/room.py).
        """
        with self._db_lock:
            try:
                return self._commit(records, content)
            except MemoriesError as exc:
                if not essential or exc.code != "disk_full" or not release_reserve(self.path):
                    raise
                return self._commit(records, content)

    def _commit(self, records: Sequence[dict[str, Any]], content: Sequence[tuple[int, bytes]]) -> list[int]:
        key = self._key()
        cursor = self._cursor
        seq, chain = cursor.last_seq, cursor.chain
        fresh = self._train(records, seq + 1)
        rows = [(book.seq, _dictionary_row(key, kind, book)) for kind, book in fresh.items()]
        first = seq + 1 + len(rows)
        kinds = {**self._kind_dictionaries, **fresh} if fresh else self._kind_dictionaries
        rows += enumerate(_seal_records(key, records, first, self._deferred_kinds, kinds), start=first)
        for seq, blob in rows:
            chain = _chain_next(chain, seq, blob)
        last_content = max([cursor.last_content_seq, *(s for s, _ in content)])
        checkpoint = {
            "v": 1,
            "last_seq": seq,
            "count": cursor.count + len(rows),
            "chain": chain,
            "last_content_seq": last_content,
        }
        cp_blob = _ROW_VERSION + seal(key, encode_record(checkpoint), _CHECKPOINT_AAD)
        try:
            self._write_commit(content, rows, cp_blob)
        except (sqlite3.Error, OSError) as exc:  # OSError: a pack file's write (see _write_commit)
            raise _write_error(exc, self.path, "The change could not be written; nothing was changed.") from exc
        with self._content_lock:  # numbers an upload claimed meanwhile stay claimed
            self._cursor = _Cursor(seq, cursor.count + len(rows), chain, max(last_content, self._cursor.last_content_seq))
        if fresh:  # only once their rows are written: no later row names a dictionary that is not there
            self._dictionaries = {**self._dictionaries, **{book.seq: book for book in fresh.values()}}
            self._kind_dictionaries = kinds
            for kind in fresh:
                self._samples.pop(kind, None)
        return [s for s, _ in rows[len(fresh) :]]

    def _train(self, records: Sequence[dict[str, Any]], first_seq: int) -> dict[str, _Dictionary]:
        """Dictionaries for the kinds of _DICTIONARY_KINDS that have none yet, once their records
        committed since the unlock (these included) number _DICT_TRAIN_RECORDS, numbered from
        ``first_seq`` (their rows precede the records). Samples are spread over each commit."""
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            kind = record.get("t")
            if isinstance(kind, str) and kind in _DICTIONARY_KINDS and kind not in self._kind_dictionaries:
                by_kind.setdefault(kind, []).append(record)
        fresh: dict[str, _Dictionary] = {}
        for kind, same in by_kind.items():
            seen, kept = self._samples.get(kind, (0, []))
            held = sum(len(sample) for sample in kept)
            for record in same[:: max(1, len(same) // _DICT_SAMPLES)]:
                if held >= _DICT_BYTES:
                    break
                kept.append(encode_record(record))
                held += len(kept[-1])
            self._samples[kind] = (seen + len(same), kept)
            if seen + len(same) < _DICT_TRAIN_RECORDS or held < _DICT_BYTES // 4 or first_seq + len(fresh) > _DICT_SEQ_MAX:
                continue  # too few records yet, or too small to be worth a dictionary
            fresh[kind] = _Dictionary(first_seq + len(fresh), _train_dictionary(kept), kind)
        return fresh

    @contextlib.contextmanager
    def _transaction(self, written: int = 0) -> Iterator[None]:
        """``written``: about how many bytes the transaction appends to the log, for the
        background checkpoints (engine/store/checkpointer.py)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            # SQLITE_FULL may already have rolled back (then ROLLBACK itself fails and would hide
            # the cause), or may leave the transaction open (a failed COMMIT): end it either way.
            if self.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            raise
        if self._checkpointer is not None:
            self._checkpointer.wrote(written)


def sqlite_replica_rows(conn: sqlite3.Connection, after: int, content_after: int, limit: int) -> dict[str, Any]:
    """State rows after ``after`` and content rows after ``content_after`` (at most ``limit``
    each), the sealed checkpoint and the cursors, from one read transaction: a standby copies
    sealed bytes only (CT-4). ``chain`` is the hash chain over every state row up to
    ``last_seq`` (hashes of ciphertext, no secret), so a standby checks its copy without a key."""
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        state = conn.execute("SELECT seq, blob FROM state WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)).fetchall()
        content = conn.execute(
            "SELECT seq, blob FROM content WHERE seq > ? ORDER BY seq LIMIT ?", (content_after, limit)
        ).fetchall()
        last_seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM state").fetchone()[0])
        last_content = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0])
        checkpoint = bytes(conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0])
        header = conn.execute("SELECT format, version, kdf, sealed_master FROM header WHERE id = 1").fetchone()
    finally:
        if own:
            conn.execute("COMMIT")
    return {
        "state": [(int(a), bytes(b)) for a, b in state],
        "content": [(int(a), bytes(b)) for a, b in content],
        "last_seq": last_seq,
        "last_content_seq": last_content,
        "checkpoint": checkpoint,
        "header": (str(header[0]), int(header[1]), bytes(header[2]), bytes(header[3])),
    }


def chain_over(rows: Sequence[tuple[int, bytes]], chain: bytes = _CHAIN_START) -> bytes:
    """The checkpoint's hash chain continued over ``rows`` (from the start by default)."""
    for seq, blob in rows:
        chain = _chain_next(chain, seq, blob)
    return chain


def _write_error(exc: BaseException, path: Path | None, message: str) -> MemoriesError:
    """What a failed write says: ``disk_full`` when the disk is full (see :func:`is_disk_full`),
    otherwise ``io_error`` with ``message``."""
    if is_disk_full(exc, path):
        return MemoriesError("disk_full")
    return MemoriesError("io_error", message)


def is_disk_full(exc: BaseException, path: Path | None = None) -> bool:
    """SQLITE_FULL (``database or disk is full``), an OS ``ENOSPC``/``EDQUOT``, or an SQLite
    I/O error while ``path``'s filesystem has no free space left (SQLite reports a failed
    shared-memory or journal allocation as ``disk I/O error``, e.g. SQLITE_IOERR_SHMSIZE)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc):
            return True
        if path is not None and isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_IOERR:
            return no_free_space(path.parent)
    return False


def no_free_space(directory: Path) -> bool:
    """Whether the filesystem holding ``directory`` has (next to) no space for an unprivileged write."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":  # pragma: no cover - directory fsync is POSIX-only
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_init_files(target: Path) -> None:
    """Delete leftovers of interrupted inits (they never block a retry anyway).

    Only the engine holding the exclusive writer lock (ST-7) ever builds a store, so
    while we hold it every staging file beside the target belongs to a dead init.
    """
    for name in glob.glob(glob.escape(str(target)) + ".init-*"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def create_store(target: Path, password: str, kdf: KdfParams, initial_records: Sequence[dict[str, Any]]) -> bytes:
    """Build a complete store beside ``target`` and publish it without overwriting (ST-8).

    Returns the new master key. Raises ``already_initialized`` if ``target`` exists
    (before or during the build); the existing file is never touched.
    """
    if target.exists():
        raise MemoriesError("already_initialized")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    remove_stale_init_files(target)
    staging = target.with_name(f"{target.name}.init-{os.getpid()}-{os.urandom(6).hex()}")
    master = new_key()
    try:
        conn = sqlite3.connect(staging, isolation_level=None)
        try:
            _pragmas(conn, "DELETE")
            # Before the first table: a page size is fixed once the file has one (VACUUM aside).
            conn.execute(f"PRAGMA page_size={STORE_PAGE_SIZE}")
            conn.executescript(SCHEMA)
            kdf_blob = canonical_bytes(kdf.to_dict())
            sealed = seal(derive_key(password, kdf), master, _header_aad(FORMAT_NAME, FORMAT_VERSION, kdf_blob))
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO header (id, format, version, kdf, sealed_master) VALUES (1, ?, ?, ?, ?)",
                (FORMAT_NAME, FORMAT_VERSION, kdf_blob, sealed),
            )
            chain, seq = _CHAIN_START, 0
            for record in initial_records:
                seq += 1
                blob = _ROW_VERSION + seal(master, encode_record(record), _state_aad(seq))
                chain = _chain_next(chain, seq, blob)
                conn.execute("INSERT INTO state (seq, blob) VALUES (?, ?)", (seq, blob))
            checkpoint = {"v": 1, "last_seq": seq, "count": seq, "chain": chain, "last_content_seq": 0}
            conn.execute(
                "INSERT INTO checkpoints (id, blob) VALUES (1, ?)",
                (_ROW_VERSION + seal(master, encode_record(checkpoint), _CHECKPOINT_AAD),),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()
        fd = os.open(staging, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(staging, 0o600)
        try:
            # link() fails if the target exists: a publish that can never overwrite.
            os.link(staging, target)
        except FileExistsError as exc:
            raise MemoriesError("already_initialized") from exc
        _fsync_dir(target.parent)
    except (sqlite3.Error, OSError) as exc:
        if is_disk_full(exc, target):
            raise MemoriesError("disk_full") from exc
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
    _fsync_dir(target.parent)
    return master
