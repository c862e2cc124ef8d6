"""Streamed file bodies: seal chunk by chunk on the way in, open chunk by chunk on the way out."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import mmap
import os
import queue
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.crypto.aead import NONCE_BYTES, TAG_BYTES
from engine.crypto.chunks import CHUNK_BYTES, ChunkError, open_chunk, open_chunk_into, seal_chunk_buffer, seal_chunk_into
from engine.errors import MemoriesError
from engine.files.source import identity_of
from engine.files.space import check_room_for_batch
from engine.store.database import StoreFile
from engine.store.packs import PACK_MIN_BYTES, PackWriter, aligned
from engine.vault.core import Unlocked, VaultKeys
from engine.vault.revision import Revision, build_streamed_revision, chunk_count

__all__ = [
    "FILE_KIND",
    "MAX_FILE_BYTES",
    "TEXT_SAMPLE_BYTES",
    "FileUpload",
    "file_info",
    "is_searchable",
    "open_file_chunk",
    "open_file_chunks",
    "text_of_sample",
    "uses_pack",
]

log = logging.getLogger("memories.files")

FILE_KIND = "file"
# Chunk indexes are 32-bit in the chunk AAD; 1 TiB is far below that and far above any use.
MAX_FILE_BYTES = 1 << 40
# The head of a text file that search indexes (bounded whatever the file's size).
TEXT_SAMPLE_BYTES = 64 * 1024
SEALED_OVERHEAD = NONCE_BYTES + TAG_BYTES  # a sealed chunk is nonce || ciphertext || tag


def _write_error(exc: OSError) -> MemoriesError:
    """The typed error of a failed pack write (never the OS text: it names paths)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return MemoriesError("disk_full")
    return MemoriesError("io_error", "The file could not be written; nothing was saved.")


def uses_pack(store: StoreFile, size: int) -> bool:
    """Whether an upload of ``size`` bytes goes to a pack file of its own beside the store (issue
    32, engine/store/packs.py); smaller ones stay content rows, where a pack file (and the syncs
    that make its name durable) would cost more than the few chunks it saves SQLite."""
    return store.keeps_packs and size >= PACK_MIN_BYTES


def text_of_sample(sample: bytes) -> str | None:
    """The text of a file's first bytes if they look like UTF-8 text, else None (binary)."""
    if b"\x00" in sample:
        return None
    for cut in range(4):  # a multi-byte character may be split at the sample's end
        try:
            return sample[: len(sample) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


@dataclass
class _Sealed:
    """A batch as the sealer hands it to the writer."""

    rows: list[tuple[int, bytearray]]  # (content row number, sealed chunk): a batch for rows
    digests: list[bytes]  # SHA-256 of each sealed chunk
    plain: Sequence[bytes | memoryview]  # the chunks as sealed
    # A batch for the pack: the buffer its chunks were sealed into, and each chunk's
    # (content row number, offset in the buffer, length).
    packed: mmap.mmap | None = None
    places: list[tuple[int, int, int]] = field(default_factory=list)
    plain_buffer: mmap.mmap | None = None  # the pool buffer a pulled batch was read into


class _Buffers:
    """Page-aligned buffers reused batch after batch by one upload (pack uploads, issue 32).

    A buffer allocated per batch is new memory every time, and its first touch (the kernel
    zeroing and mapping each page) cost as much as sealing it; reused, the pages stay mapped.
    There are as many as batches can be in flight, so taking one never waits for long."""

    def __init__(self, count: int, size: int) -> None:
        self._all = [mmap.mmap(-1, size) for _ in range(count)]
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
        for buffer in self._all:
            self._free.put(buffer)

    def take(self) -> mmap.mmap:
        return self._free.get()

    def give(self, buffer: mmap.mmap | None) -> None:
        if buffer is not None:
            self._free.put(buffer)

    def close(self) -> None:
        for buffer in self._all:
            with contextlib.suppress(BufferError):  # a view still held: unmapped when it goes
                buffer.close()


class FileUpload:
    """One file revision being written: chunks sealed and stored as they arrive, signed at the end.

    Work runs as a pipeline off the request thread, so that the engine receives the next
    batch while earlier ones are sealed (``sealer``: each chunk sealed and the digest of its
    sealed bytes taken, two batches at once) and the one before is written (``writer``: the
    plaintext's digest and text sample, in order, then the sealed chunks appended to the
    upload's pack file and their places recorded in the store; a small file's chunks are rows,
    whose log the checkpointer copies on a thread of its own). libsodium, hashlib and SQLite release the
    GIL, so the stages share both cores. :meth:`add` waits while ``IN_FLIGHT`` batches are
    unfinished: memory stays a few batches plus the chunk digests (32 bytes each) and the
    text sample, never the file. The first failure of a stage is kept and raised by the next
    :meth:`add` or by :meth:`complete`; later batches are skipped. Chunks must come in order;
    each but the last is exactly ``CHUNK_BYTES``.

    With a ``source`` (a descriptor of the client's file, engine/files/source.py) the chunks
    are not sent: :meth:`pull` names them and the sealer reads the batch itself. The upload
    owns the descriptor.
    """

    # Batches accepted but not yet stored: two sealing, one writing.
    IN_FLIGHT = 3
    SEALERS = 2
    # The most chunks one request names (engine/service/requests_files.py): a batch buffer's size.
    BATCH_CHUNKS = 32

    def __init__(
        self,
        *,
        store: StoreFile,
        vault: VaultKeys,
        asset_id: bytes,
        parents: list[bytes],
        size: int,
        owner: str,
        source: int | None = None,
    ) -> None:
        if size < 0 or size > MAX_FILE_BYTES:
            if source is not None:
                os.close(source)
            raise MemoriesError("invalid_input", "A file must be between 0 bytes and 1 TiB.")
        self.store = store
        self.vault = vault
        self.asset_id = asset_id
        self.parents = parents
        self.size = size
        self.owner = owner
        self.total = chunk_count(size)
        self.dek = os.urandom(32)
        self.digests: list[bytes] = []  # appended by the writer, in chunk order
        self.seqs: list[int] = []  # content rows claimed, in chunk order
        self.received = 0
        self.accepted = 0  # chunks handed to the pipeline
        self.hasher = hashlib.sha256()
        self.sample = bytearray()
        self._sealer = ThreadPoolExecutor(max_workers=self.SEALERS, thread_name_prefix="memories-file-seal")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memories-file-write")
        self._in_flight: deque[Future[None]] = deque()
        self._failure: MemoriesError | None = None
        self._stopped = False
        self._source_identity: tuple[int, ...] | None = None
        if source is not None:
            try:
                self._source_identity = identity_of(os.fstat(source))
            except OSError:  # then the client sends the bytes
                os.close(source)
                source = None
        self.source = source
        self.pulled = source is not None  # the engine reads the file (no digest from the client)
        # The pack file this upload appends to (numbered by its first content row), made with the
        # first batch; None for a small file or a store that keeps no packs (rows, as before).
        self.packed = uses_pack(store, size)
        self.pack: int | None = None
        self._pack_writer: PackWriter | None = None
        self._sealed_buffers: _Buffers | None = None
        self._plain_buffers: _Buffers | None = None

    @property
    def next_index(self) -> int:
        return self.accepted

    def _expected(self, position: int) -> int:
        """The length of chunk ``position``: ``CHUNK_BYTES``, the last one what is left."""
        return self.size - position * CHUNK_BYTES if position == self.total - 1 else CHUNK_BYTES

    def _check_batch(self, index: int, count: int) -> None:
        self._raise_failure()
        if index != self.next_index:
            raise MemoriesError("invalid_input", f"Expected file chunk {self.next_index}, got {index}.")
        if self.next_index + count > self.total:
            raise MemoriesError("invalid_input", "More file chunks than the announced size holds.")
        if count > self.BATCH_CHUNKS:
            raise MemoriesError("invalid_input", f"At most {self.BATCH_CHUNKS} file chunks travel in one request.")

    def add(self, index: int, pieces: Sequence[bytes | memoryview]) -> None:
        """Hand ``pieces`` (chunks ``index``, ``index + 1``, …) to the pipeline.

        Everything that can be checked without the data is checked here, so a bad request
        is refused by its own answer; a failure while sealing or writing (a full disk, a
        lock) is raised by the next call.
        """
        if self.pulled:
            raise MemoriesError("invalid_input", "This upload reads the file itself; send `file_pull` requests.")
        self._check_batch(index, len(pieces))
        for offset, piece in enumerate(pieces):
            if len(piece) != self._expected(index + offset):
                raise MemoriesError(
                    "invalid_input", f"File chunk {index + offset} has the wrong length; the file changed while it was read."
                )
        self._submit(index, len(pieces), pieces)

    def pull(self, index: int, count: int) -> None:
        """Hand chunks ``index`` … ``index + count - 1`` of the source file to the pipeline."""
        if self.source is None:
            raise MemoriesError("invalid_input", "This upload has no file to read; send its chunks with `file_chunk`.")
        self._check_batch(index, count)
        self._submit(index, count, None)

    def _submit(self, index: int, count: int, pieces: Sequence[bytes | memoryview] | None) -> None:
        while len(self._in_flight) >= self.IN_FLIGHT:
            self._in_flight.popleft().result()
        self._raise_failure()
        seqs = self.store.claim_content(count)
        self.seqs.extend(seqs)
        if self.packed and self.pack is None:
            self.pack = seqs[0]
            self._pack_writer = self.store.open_pack(seqs[0])
            self._sealed_buffers = _Buffers(self.IN_FLIGHT, aligned(self.BATCH_CHUNKS * (CHUNK_BYTES + SEALED_OVERHEAD)))
            if self.source is not None:
                self._plain_buffers = _Buffers(self.IN_FLIGHT, self.BATCH_CHUNKS * CHUNK_BYTES)
        self.accepted += count
        self.received += sum(self._expected(index + offset) for offset in range(count))
        sealing = self._sealer.submit(self._seal, index, pieces, seqs)
        self._in_flight.append(self._writer.submit(self._write, sealing))

    def _read_batch(self, index: int, count: int, buffer: mmap.mmap | None = None) -> list[memoryview]:
        """Chunks ``index`` … ``index + count - 1`` of the source file, read into one buffer
        (``buffer``, reused, or a new one)."""
        assert self.source is not None
        sizes = [self._expected(index + offset) for offset in range(count)]
        view = memoryview(buffer)[: sum(sizes)] if buffer is not None else memoryview(bytearray(sum(sizes)))
        got = 0
        while got < len(view):
            try:
                n = os.preadv(self.source, [view[got:]], index * CHUNK_BYTES + got)
            except OSError:
                raise MemoriesError("io_error", "The file could not be read; nothing was saved.") from None
            if n == 0:
                raise MemoriesError("file_changed", "The file shrank while it was read; nothing was saved.")
            got += n
        pieces, start = [], 0
        for size in sizes:
            pieces.append(view[start : start + size])
            start += size
        return pieces

    def _seal(self, index: int, pieces: Sequence[bytes | memoryview] | None, seqs: list[int]) -> _Sealed:
        """Sealer stage (batches in parallel): read the batch (a pulled upload), seal each chunk and
        take the digest of its sealed bytes (HI-2)."""
        if self._stopped or self._failure is not None:
            return _Sealed([], [], [])
        if self._sealed_buffers is not None:
            return self._seal_for_pack(index, pieces, seqs, self._sealed_buffers)
        plain = pieces if pieces is not None else self._read_batch(index, len(seqs))
        rows: list[tuple[int, bytearray]] = []
        digests: list[bytes] = []
        for offset, (seq, piece) in enumerate(zip(seqs, plain, strict=True)):
            sealed = seal_chunk_buffer(self.dek, piece, self.asset_id + b"body", index + offset, self.total)
            digests.append(hashlib.sha256(sealed).digest())
            rows.append((seq, sealed))
        return _Sealed(rows, digests, plain)

    def _seal_for_pack(
        self, index: int, pieces: Sequence[bytes | memoryview] | None, seqs: list[int], buffers: _Buffers
    ) -> _Sealed:
        """The sealer stage of a pack upload: the batch sealed chunk after chunk into one reused
        buffer, ready to be written as it is (zeros up to the next ``ALIGN``)."""
        plain_buffer = self._plain_buffers.take() if pieces is None and self._plain_buffers is not None else None
        out = buffers.take()
        try:
            plain = pieces if pieces is not None else self._read_batch(index, len(seqs), plain_buffer)
            view = memoryview(out)
            places: list[tuple[int, int, int]] = []
            digests: list[bytes] = []
            at = 0
            for offset, (seq, piece) in enumerate(zip(seqs, plain, strict=True)):
                size = len(piece) + SEALED_OVERHEAD
                target = view[at : at + size]
                seal_chunk_into(self.dek, piece, self.asset_id + b"body", index + offset, self.total, target)
                digests.append(hashlib.sha256(target).digest())
                target.release()
                places.append((seq, at, size))
                at += size
            view[at : aligned(at)] = bytes(aligned(at) - at)  # no earlier batch's bytes in the padding
            view.release()
        except BaseException:
            buffers.give(out)
            if self._plain_buffers is not None:
                self._plain_buffers.give(plain_buffer)
            raise
        return _Sealed([], digests, plain, packed=out, places=places, plain_buffer=plain_buffer)

    def _check_source(self) -> None:
        """FI-2 for a pulled upload: the file is still as it was when the client opened it."""
        if self.source is None:
            return
        try:
            same = identity_of(os.fstat(self.source)) == self._source_identity
        except OSError:
            same = False
        if not same:
            raise MemoriesError(
                "file_changed",
                "The file changed while it was read (its size or times differ); nothing was saved. "
                "Add it again once nothing writes to it.",
            )

    def _write(self, sealing: Future[_Sealed]) -> None:
        """Writer stage (batches in order): the plaintext's digest and text sample, then the
        sealed rows stored; the first failure of either stage is kept."""
        batch: _Sealed | None = None
        try:
            batch = sealing.result()
            if (batch.rows or batch.places) and not self._stopped and self._failure is None:
                self.digests.extend(batch.digests)
                for piece in batch.plain:
                    self.hasher.update(piece)
                    if len(self.sample) < TEXT_SAMPLE_BYTES:
                        self.sample += piece[: TEXT_SAMPLE_BYTES - len(self.sample)]
                if batch.packed is None:
                    check_room_for_batch(self.store, sum(len(sealed) for _, sealed in batch.rows))
                    self.store.write_content(batch.rows)
                else:
                    self._write_to_pack(batch.packed, batch.places)
        except OSError as exc:  # the pack file's write
            self._fail(_write_error(exc))
        except MemoriesError as exc:
            self._fail(exc)
        except Exception as exc:  # never str(exc): it could carry request data
            log.error("a file upload stage failed type=%s", type(exc).__name__)
            self._fail(MemoriesError("internal"))
        finally:
            if batch is not None:
                self._give_back(batch)

    def _write_to_pack(self, buffer: mmap.mmap, places: list[tuple[int, int, int]]) -> None:
        """Append a sealed batch to the pack, then record where each chunk lies."""
        assert self._pack_writer is not None
        length = aligned(places[-1][1] + places[-1][2])
        check_room_for_batch(self.store, length, packed=True)
        with memoryview(buffer) as view, view[:length] as batch:
            start = self._pack_writer.append(batch)
        self.store.write_packed([(seq, self._pack_writer.pack, start + at, size) for seq, at, size in places])

    def _give_back(self, batch: _Sealed) -> None:
        """A pack batch's buffers, for the next batches (its plaintext views released first)."""
        if batch.packed is None:
            return
        if batch.plain_buffer is not None:
            for piece in batch.plain:
                if isinstance(piece, memoryview):
                    piece.release()
        if self._sealed_buffers is not None:
            self._sealed_buffers.give(batch.packed)
        if self._plain_buffers is not None:
            self._plain_buffers.give(batch.plain_buffer)

    def _fail(self, exc: MemoriesError) -> None:
        if self._failure is None:
            self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _drain(self) -> None:
        while self._in_flight:
            self._in_flight.popleft().result()

    def complete(self) -> str:
        """Wait until every chunk is stored; the SHA-256 (hex) of the plaintext received."""
        self._drain()
        self._raise_failure()
        if self.next_index != self.total:
            raise MemoriesError("invalid_input", f"The upload has {self.next_index} of {self.total} chunks.")
        self._check_source()
        if self._pack_writer is not None:
            try:  # durable before the commit that names its chunks
                self._pack_writer.sync()
            except OSError as exc:
                raise _write_error(exc) from None
        self._shutdown()
        return self.hasher.hexdigest()

    def finish(self, state: Unlocked, summary: dict[str, Any]) -> Revision:
        """Sign the revision over every stored chunk (HI-2); nothing is written here."""
        self.complete()
        return build_streamed_revision(
            identity=state.identity,
            vault_id=self.vault.vault_id,
            policy_head=self.vault.policy.head,
            epoch=self.vault.policy.epoch,
            epoch_key=self.vault.current_key,
            asset_id=self.asset_id,
            kind=FILE_KIND,
            parents=self.parents,
            summary=summary,
            dek=self.dek,
            body_digests=self.digests,
            body_len=self.size,
            content_seqs=self.seqs,
        )

    def discard(self) -> bool:
        """Remove the chunks written so far (the upload was aborted, timed out or the vault locked).

        Stages still running finish their batch first (at most ``IN_FLIGHT``), so no row
        lands after the rows are removed. False when the store refused to delete them (a
        full disk): calling again later retries.
        """
        self._stopped = True
        self._drain()
        self._shutdown()
        if not self.store.discard_content(self.seqs):
            return False
        if self.pack is not None:
            self.store.remove_pack(self.pack)
        self.seqs = []
        self.digests = []
        return True

    def _shutdown(self) -> None:
        self._sealer.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        source, self.source = self.source, None
        if source is not None:
            os.close(source)
        writer, self._pack_writer = self._pack_writer, None
        if writer is not None:
            writer.close()
        for buffers in (self._sealed_buffers, self._plain_buffers):
            if buffers is not None:
                buffers.close()
        self._sealed_buffers = self._plain_buffers = None


def file_info(summary: dict[str, Any]) -> dict[str, Any]:
    info = summary.get("file")
    return dict(info) if isinstance(info, dict) else {}


def is_searchable(summary: dict[str, Any]) -> bool:
    """Whether search may index the file's text (issue 27). Files stay out of the index but for
    their title and tags unless the user asked for this file; a file saved before the setting
    existed (no ``searchable`` in its signed summary) is not searched."""
    return file_info(summary).get("searchable") is True


def open_file_chunk(rev: Revision, epoch_key: bytes, store: StoreFile, index: int) -> bytes:
    """Chunk ``index`` of a file revision's body, checked against its signed digest and opened."""
    digests = list(rev.body["body"])
    if not 0 <= index < len(digests):
        raise MemoriesError("invalid_input", "That chunk is outside the file.")
    sealed = store.read_content([rev.body_seqs[index]])[0]
    try:
        if hashlib.sha256(sealed).digest() != bytes(digests[index]):
            raise ChunkError("body chunk does not match the signed digest")
        return open_chunk(rev.data_key(epoch_key), sealed, rev.asset_id + b"body", index, len(digests))
    except ChunkError as exc:
        raise MemoriesError("store_corrupt", "A file chunk failed authentication.") from exc


def open_file_chunks(rev: Revision, epoch_key: bytes, store: StoreFile, start: int, end: int) -> tuple[list[int], bytearray]:
    """Chunks ``start`` … ``end - 1`` of a file revision: their sizes and their plaintext in
    one buffer (an answer's binary part), each checked against its signed digest (HI-2)
    and decrypted straight into its place (no per-chunk copies, no join)."""
    digests = rev.body["body"]
    if not 0 <= start < end <= len(digests):
        raise MemoriesError("invalid_input", "That chunk is outside the file.")
    sealed_chunks = store.read_content(rev.body_seqs[start:end])
    sizes = [len(sealed) - SEALED_OVERHEAD for sealed in sealed_chunks]
    if min(sizes) < 0:
        raise MemoriesError("store_corrupt", "A file chunk failed authentication.")
    payload = bytearray(sum(sizes))
    view = memoryview(payload)
    key = rev.data_key(epoch_key)
    context = rev.asset_id + b"body"
    offset = 0
    try:
        for index, (sealed, size) in enumerate(zip(sealed_chunks, sizes, strict=True), start):
            if hashlib.sha256(sealed).digest() != bytes(digests[index]):
                raise ChunkError("body chunk does not match the signed digest")
            open_chunk_into(key, sealed, context, index, len(digests), view[offset : offset + size])
            offset += size
    except ChunkError as exc:
        raise MemoriesError("store_corrupt", "A file chunk failed authentication.") from exc
    finally:
        view.release()
    return sizes, payload
