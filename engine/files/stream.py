"""Streamed file bodies: seal chunk by chunk on the way in, open chunk by chunk on the way out."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from engine.crypto.chunks import CHUNK_BYTES, ChunkError, open_chunk, seal_chunk
from engine.errors import MemoriesError
from engine.store.database import StoreFile
from engine.vault.core import Unlocked, VaultKeys
from engine.vault.revision import Revision, build_streamed_revision, chunk_count

__all__ = [
    "FILE_KIND",
    "MAX_FILE_BYTES",
    "TEXT_SAMPLE_BYTES",
    "FileUpload",
    "file_info",
    "open_file_chunk",
    "text_of_sample",
]

FILE_KIND = "file"
# Chunk indexes are 32-bit in the chunk AAD; 1 TiB is far below that and far above any use.
MAX_FILE_BYTES = 1 << 40
# The head of a text file that search indexes (bounded whatever the file's size).
TEXT_SAMPLE_BYTES = 64 * 1024


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


class FileUpload:
    """One file revision being written: chunks sealed and stored as they arrive, signed at the end.

    Memory is bounded by the chunk count (32-byte digests) plus the text sample, never the
    file. Chunks must come in order; each but the last is exactly ``CHUNK_BYTES``.
    """

    def __init__(
        self,
        *,
        store: StoreFile,
        vault: VaultKeys,
        asset_id: bytes,
        parents: list[bytes],
        size: int,
        owner: str,
    ) -> None:
        if size < 0 or size > MAX_FILE_BYTES:
            raise MemoriesError("invalid_input", "A file must be between 0 bytes and 1 TiB.")
        self.store = store
        self.vault = vault
        self.asset_id = asset_id
        self.parents = parents
        self.size = size
        self.owner = owner
        self.total = chunk_count(size)
        self.dek = os.urandom(32)
        self.digests: list[bytes] = []
        self.seqs: list[int] = []
        self.received = 0
        self.hasher = hashlib.sha256()
        self.sample = bytearray()

    @property
    def next_index(self) -> int:
        return len(self.digests)

    def add(self, index: int, pieces: list[bytes]) -> None:
        """Seal and store ``pieces`` as chunks ``index``, ``index + 1``, …"""
        if index != self.next_index:
            raise MemoriesError("invalid_input", f"Expected file chunk {self.next_index}, got {index}.")
        if self.next_index + len(pieces) > self.total:
            raise MemoriesError("invalid_input", "More file chunks than the announced size holds.")
        rows: list[tuple[int, bytes]] = []
        first_seq = self.store.reserve_content(1)[0]
        for offset, piece in enumerate(pieces):
            position = index + offset
            last = position == self.total - 1
            expected = self.size - position * CHUNK_BYTES if last else CHUNK_BYTES
            if len(piece) != expected:
                raise MemoriesError(
                    "invalid_input", f"File chunk {position} has the wrong length; the file changed while it was read."
                )
            sealed = seal_chunk(self.dek, piece, self.asset_id + b"body", position, self.total)
            rows.append((first_seq + offset, sealed))
        self.store.write_content(rows)
        for (seq, sealed), piece in zip(rows, pieces, strict=True):
            self.seqs.append(seq)
            self.digests.append(hashlib.sha256(sealed).digest())
            self.hasher.update(piece)
            if len(self.sample) < TEXT_SAMPLE_BYTES:
                self.sample += piece[: TEXT_SAMPLE_BYTES - len(self.sample)]
        self.received += sum(len(p) for p in pieces)

    def finish(self, state: Unlocked, summary: dict[str, Any]) -> Revision:
        """Sign the revision over every stored chunk (HI-2); nothing is written here."""
        if self.next_index != self.total:
            raise MemoriesError("invalid_input", f"The upload has {self.next_index} of {self.total} chunks.")
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

    def discard(self) -> None:
        """Remove the chunks written so far (the upload was aborted, timed out or the vault locked)."""
        self.store.discard_content(self.seqs)
        self.seqs = []
        self.digests = []


def file_info(summary: dict[str, Any]) -> dict[str, Any]:
    info = summary.get("file")
    return dict(info) if isinstance(info, dict) else {}


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
