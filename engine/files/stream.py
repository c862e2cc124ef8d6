"""Streamed file bodies: seal chunk by chunk on the way in, open chunk by chunk on the way out."""

from __future__ import annotations

import hashlib
import logging
import os
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from engine.crypto.aead import NONCE_BYTES, TAG_BYTES
from engine.crypto.chunks import CHUNK_BYTES, ChunkError, open_chunk, open_chunk_into, seal_chunk_buffer
from engine.errors import MemoriesError
from engine.files.source import identity_of
from engine.files.space import check_room_for_batch
from engine.store.database import StoreFile
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
]

log = logging.getLogger("memories.files")

FILE_KIND = "file"
# Chunk indexes are 32-bit in the chunk AAD; 1 TiB is far below that and far above any use.
MAX_FILE_BYTES = 1 << 40
# The head of a text file that search indexes (bounded whatever the file's size).
TEXT_SAMPLE_BYTES = 64 * 1024
SEALED_OVERHEAD = NONCE_BYTES + TAG_BYTES  # a sealed chunk is nonce || ciphertext || tag


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

    rows: list[tuple[int, bytearray]]  # (content row number, sealed chunk)
    digests: list[bytes]  # SHA-256 of each sealed chunk
    plain: Sequence[bytes | memoryview]  # the chunks as sealed


class FileUpload:
    """One file revision being written: chunks sealed and stored as they arrive, signed at the end.

    Work runs as a pipeline off the request thread, so that the engine receives the next
    batch while earlier ones are sealed (``sealer``: each chunk sealed and the digest of its
    sealed bytes taken, two batches at once) and the one before is written (``writer``: the
    plaintext's digest and text sample, in order, then the rows to SQLite, whose log the
    checkpointer copies on a thread of its own). libsodium, hashlib and SQLite release the
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
        self.accepted += count
        self.received += sum(self._expected(index + offset) for offset in range(count))
        sealing = self._sealer.submit(self._seal, index, pieces, seqs)
        self._in_flight.append(self._writer.submit(self._write, sealing))

    def _read_batch(self, index: int, count: int) -> list[memoryview]:
        """Chunks ``index`` … ``index + count - 1`` of the source file, read into one buffer."""
        assert self.source is not None
        sizes = [self._expected(index + offset) for offset in range(count)]
        view = memoryview(bytearray(sum(sizes)))
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
        plain = pieces if pieces is not None else self._read_batch(index, len(seqs))
        rows: list[tuple[int, bytearray]] = []
        digests: list[bytes] = []
        for offset, (seq, piece) in enumerate(zip(seqs, plain, strict=True)):
            sealed = seal_chunk_buffer(self.dek, piece, self.asset_id + b"body", index + offset, self.total)
            digests.append(hashlib.sha256(sealed).digest())
            rows.append((seq, sealed))
        return _Sealed(rows, digests, plain)

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
        try:
            batch = sealing.result()
            if batch.rows and not self._stopped and self._failure is None:
                self.digests.extend(batch.digests)
                for piece in batch.plain:
                    self.hasher.update(piece)
                    if len(self.sample) < TEXT_SAMPLE_BYTES:
                        self.sample += piece[: TEXT_SAMPLE_BYTES - len(self.sample)]
                check_room_for_batch(self.store, sum(len(sealed) for _, sealed in batch.rows))
                self.store.write_content(batch.rows)
        except MemoriesError as exc:
            self._fail(exc)
        except Exception as exc:  # never str(exc): it could carry request data
            log.error("a file upload stage failed type=%s", type(exc).__name__)
            self._fail(MemoriesError("internal"))

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
        self.seqs = []
        self.digests = []
        return True

    def _shutdown(self) -> None:
        self._sealer.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        source, self.source = self.source, None
        if source is not None:
            os.close(source)


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
