"""The encrypted SQLite store file (ST-1 … ST-5, ST-8).

Tables:

* ``header`` — one row: format name and version (clear), KDF parameters with the
  salt (clear), the master key sealed by the password key (header fields are its
  associated data, so they cannot be changed undetected).
* ``state`` — append-only encrypted records keyed by a row sequence number; each
  sealed with the master key, the sequence number bound into the associated data.
* ``content`` — content chunks, already sealed by a revision's data key.
* ``checkpoints`` — one sealed row: last sequence number, record count and a hash
  chain over every state row, so dropped, reordered or rolled-back rows are caught.

A write is one ``BEGIN IMMEDIATE … COMMIT`` with ``synchronous=FULL`` covering new
state rows, content rows and the checkpoint: it costs the same in a 1k and a
100k-asset store (ST-6).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import logging
import os
import queue
import sqlite3
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.crypto.aead import AeadError, new_key, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import DerivationAhead, KdfParams, derive_key
from engine.crypto.libsodium import RowOpener
from engine.errors import MemoriesError
from engine.store.checkpointer import BACKSTOP_PAGES, JOURNAL_SIZE_LIMIT, WalCheckpointer
from engine.store.room import ensure_reserve, free_bytes, release_reserve

__all__ = ["StoreFile", "FORMAT_NAME", "FORMAT_VERSION", "create_store", "Loaded", "SealedRows", "is_disk_full"]

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
_HEADER_AAD = b"memories.header\x00\x01"
_STATE_AAD = b"memories.state\x00\x01"
_CHECKPOINT_AAD = b"memories.checkpoint\x00\x01"
_CHAIN_START = hashlib.sha256(b"memories.chain\x00\x01").digest()

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
"""


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


def _open_row(opener: RowOpener, seq: int, blob: bytes) -> bytes:
    """A state row's plaintext, under the associated data of its version; raises AeadError, or
    _NewerRowVersion for a version this Memories does not know."""
    version = blob[:1]
    if version != _ROW_VERSION and version != _DEFERRED_ROW_VERSION:
        raise _NewerRowVersion
    plain = opener.open(blob, 1, _row_aad(version, seq))
    if plain is None:
        raise AeadError("authentication failed")
    return plain


def _open_rows(
    key: bytes,
    rows: list[tuple[int, bytes]],
    opened: queue.SimpleQueue[list[tuple[int, bytes]] | BaseException | None],
    stop: threading.Event,
) -> None:
    """Open (AEAD) ``rows`` in chunks onto ``opened``; an error or ``None`` (done) ends it."""
    opener = RowOpener(key)
    try:
        for start in range(0, len(rows), _OPEN_CHUNK):
            if stop.is_set():
                return
            opened.put([(seq, _open_row(opener, seq, blob)) for seq, blob in rows[start : start + _OPEN_CHUNK]])
        opened.put(None)
    except (AeadError, ValueError, TypeError, _NewerRowVersion) as exc:
        opened.put(exc)


def _header_aad(fmt: str, version: int, kdf_blob: bytes) -> bytes:
    return _HEADER_AAD + canonical_bytes({"format": fmt, "version": version, "kdf": kdf_blob})


def _state_aad(seq: int) -> bytes:
    return _STATE_AAD + struct.pack(">Q", seq)


def _row_aad(version: bytes, seq: int) -> bytes:
    # Binding the version byte: a row cannot be moved between "opened at unlock" and "left sealed".
    return _state_aad(seq) if version == _ROW_VERSION else _state_aad(seq) + b"/deferred"


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

    The checkpoint's chain already proved their bytes are the ones this device wrote; ``open``
    checks each row's own AEAD, the defence in depth the unlock ran for every other row.
    Holds the master key until dropped: a lock drops it with the reader's state (ST-10).
    """

    def __init__(self, key: bytes, rows: list[tuple[int, bytes]]) -> None:
        self._key = key
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def open(self) -> list[tuple[int, bytes]]:
        """Every row's (seq, plaintext), in order; store_corrupt if one fails to authenticate."""
        opener = RowOpener(self._key)
        try:
            return [(seq, _open_row(opener, seq, blob)) for seq, blob in self.rows]
        except AeadError:
            raise MemoriesError("store_corrupt", "A state row failed authentication.") from None


@dataclass
class _Cursor:
    last_seq: int = 0
    count: int = 0
    chain: bytes = _CHAIN_START
    last_content_seq: int = 0


@dataclass
class StoreFile:
    """An open store file. Holds the master key only while unlocked."""

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
    _prefetched: tuple[list[tuple[int, bytes]], bytes] | None = field(default=None, repr=False)
    # The kinds the last load deferred: commits seal records of these kinds as deferred rows.
    _deferred_kinds: frozenset[str] = field(default=frozenset(), repr=False)
    # Copies the write-ahead log into the file on its own thread (set by ``open``).
    _checkpointer: WalCheckpointer | None = field(default=None, repr=False)

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
        except (sqlite3.DatabaseError, ValueError, KeyError) as exc:
            conn.close()
            if is_disk_full(exc, path):
                raise MemoriesError("disk_full", "The disk is full, so the store could not be opened; free some space.") from exc
            raise MemoriesError("store_corrupt", "The store header could not be read.") from exc
        except MemoriesError:
            conn.close()
            raise
        return cls(path=path, conn=conn, kdf=kdf, _checkpointer=WalCheckpointer(path))

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
            fmt, version, kdf_blob, sealed = self.conn.execute(
                "SELECT format, version, kdf, sealed_master FROM header WHERE id = 1"
            ).fetchone()
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

    def install_master(self, master: bytes) -> None:
        self._master = master

    def _key(self) -> bytes:
        if self._master is None:
            raise MemoriesError("locked")
        return self._master

    # -- reading ---------------------------------------------------------------------
    def _read_rows(self) -> tuple[list[tuple[int, bytes]], bytes]:
        """Every state row in order and the hash chain over them (no key needed)."""
        rows: list[tuple[int, bytes]] = self.conn.execute("SELECT seq, blob FROM state ORDER BY seq").fetchall()
        chain = _CHAIN_START
        for seq, blob in rows:
            chain = _chain_next(chain, seq, blob)
        return rows, chain

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
    def _matches(checkpoint: dict[str, Any], rows: list[tuple[int, bytes]], chain: bytes) -> bool:
        last_seq = rows[-1][0] if rows else 0
        return bool(
            checkpoint.get("chain") == chain and checkpoint.get("count") == len(rows) and checkpoint.get("last_seq") == last_seq
        )

    def _load(self, deferred_kinds: frozenset[str], open_deferred: bool) -> tuple[Loaded, Iterator[tuple[int, dict[str, Any]]]]:
        key = self._key()
        prefixes = [(kind, _kind_prefix(kind)) for kind in deferred_kinds]
        prefetched, self._prefetched = self._prefetched, None
        try:
            cp_row = self.conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()
            checkpoint = decode_record(open_sealed(key, cp_row[0][1:], _CHECKPOINT_AAD))
            # Rows read during the KDF are used only if they are exactly what the checkpoint
            # covers; otherwise (the store changed since, or no prefetch) they are read now.
            # Either way the rows decrypted below are the rows whose chain was checked.
            if prefetched is None or not self._matches(checkpoint, *prefetched):
                prefetched = self._read_rows()
            rows, chain = prefetched
            if not self._matches(checkpoint, rows, chain):
                raise MemoriesError("store_corrupt", "The state rows do not match the checkpoint.")
            last_content = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0]
        except (AeadError, ValueError, TypeError, IndexError, sqlite3.DatabaseError) as exc:
            raise MemoriesError("store_corrupt", "A state row failed authentication.") from exc
        last_seq = rows[-1][0] if rows else 0
        with self._content_lock:
            self._cursor = _Cursor(last_seq, len(rows), chain, max(last_content, checkpoint.get("last_content_seq", 0)))
        self._loaded_refs = (frozenset(), 0)  # set once every record has been read
        deferred: dict[str, list[tuple[int, bytes]]] = {}
        to_open, later = rows, list[tuple[int, bytes]]()
        if not open_deferred:
            to_open = []
            for row in rows:  # one pass: a 10k-note vault has ~20k rows
                (later if row[1][:1] == _DEFERRED_ROW_VERSION else to_open).append(row)
        sealed = SealedRows(key, later) if later else None
        records = self._open_records(key, to_open, prefixes, deferred)
        return Loaded([], last_seq, len(rows), chain, self._cursor.last_content_seq, deferred, sealed), records

    def _open_records(
        self,
        key: bytes,
        rows: list[tuple[int, bytes]],
        prefixes: list[tuple[str, bytes]],
        deferred: dict[str, list[tuple[int, bytes]]],
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every record, in order, as its row is opened; raises store_corrupt at a bad row.

        A helper thread opens the rows (libsodium runs without the GIL) while the consumer
        decodes the records already opened: on two cores the AEAD of a 10k-note unlock
        (~60 MB) overlaps with building the index instead of preceding it. A row is yielded
        only after it authenticated; the caller consumes all of them before serving anything.
        """
        opened: queue.SimpleQueue[list[tuple[int, bytes]] | BaseException | None] = queue.SimpleQueue()
        stop = threading.Event()
        threading.Thread(target=_open_rows, args=(key, rows, opened, stop), name="memories-open-rows", daemon=True).start()
        named: set[int] = set()
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
                        named.update(s for s in body_seqs if isinstance(s, int))
                    yield seq, record
        finally:
            stop.set()
        # Deferred kinds never name content rows (a kind that does must not be deferred).
        self._loaded_refs = (frozenset(named), self._cursor.last_content_seq)

    def read_content(self, seqs: Sequence[int]) -> list[bytes]:
        with self._db_lock:
            try:
                return self._read_content(seqs)
            except sqlite3.DatabaseError as exc:  # e.g. a chunk overwritten with TEXT
                raise MemoriesError("store_corrupt", "A content chunk could not be read.") from exc

    def _read_content(self, seqs: Sequence[int]) -> list[bytes]:
        rows = []
        for seq in seqs:
            row = self.conn.execute("SELECT blob FROM content WHERE seq = ?", (seq,)).fetchone()
            if row is None:
                raise MemoriesError("store_corrupt", "A content chunk is missing.")
            rows.append(bytes(row[0]))
        return rows

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
            try:
                self.conn.execute("PRAGMA synchronous=NORMAL")
                try:
                    with self._transaction(sum(len(blob) for _, blob in content)):
                        self.conn.executemany("INSERT INTO content (seq, blob) VALUES (?, ?)", content)
                finally:
                    self.conn.execute("PRAGMA synchronous=FULL")
            except sqlite3.Error as exc:
                if is_disk_full(exc, self.path):
                    raise MemoriesError("disk_full") from exc
                raise MemoriesError("io_error", "The file could not be written; nothing was changed.") from exc
            top = max((s for s, _ in content), default=0)
            with self._content_lock:
                if top > self._cursor.last_content_seq:
                    self._cursor.last_content_seq = top

    def orphan_content(self, limit: int) -> list[int]:
        """Up to ``limit`` content rows that no record read by the last :meth:`load` names
        (``body_seqs`` of any record): what an upload cut short by a crash left behind.

        Only rows that existed at that load are considered (numbers up to its cursor), so
        rows written since (a new upload, a commit) are never candidates. Only row numbers
        are read.
        """
        referenced, top = self._loaded_refs
        with self._db_lock:
            rows = self.conn.execute("SELECT seq FROM content WHERE seq <= ? ORDER BY seq", (top,))
            found: list[int] = []
            for (seq,) in rows:
                if seq not in referenced:
                    found.append(seq)
                    if len(found) >= limit:
                        break
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
        # their bytes are unreadable to anyone, before and after.
        self.conn.execute("PRAGMA secure_delete=OFF")
        try:
            with self._transaction():
                self.conn.executemany("DELETE FROM content WHERE seq = ?", [(s,) for s in seqs])
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("PRAGMA secure_delete=ON")

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
        rows: list[tuple[int, bytes]] = []
        for record in records:
            seq += 1
            version = _DEFERRED_ROW_VERSION if record.get("t") in self._deferred_kinds else _ROW_VERSION
            blob = version + seal(key, encode_record(record), _row_aad(version, seq))
            chain = _chain_next(chain, seq, blob)
            rows.append((seq, blob))
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
            written = sum(len(b) for _, b in content) + sum(len(b) for _, b in rows) + len(cp_blob)
            with self._transaction(written):
                self.conn.executemany("INSERT INTO content (seq, blob) VALUES (?, ?)", content)
                self.conn.executemany("INSERT INTO state (seq, blob) VALUES (?, ?)", rows)
                self.conn.execute("UPDATE checkpoints SET blob = ? WHERE id = 1", (cp_blob,))
        except sqlite3.Error as exc:
            if is_disk_full(exc, self.path):
                raise MemoriesError("disk_full") from exc
            raise MemoriesError("io_error", "The change could not be written; nothing was changed.") from exc
        except OSError as exc:
            if is_disk_full(exc, self.path):
                raise MemoriesError("disk_full") from exc
            raise
        with self._content_lock:  # numbers an upload claimed meanwhile stay claimed
            self._cursor = _Cursor(seq, cursor.count + len(rows), chain, max(last_content, self._cursor.last_content_seq))
        return [s for s, _ in rows]

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
