"""Content split into independently authenticated 256 KiB chunks (ST-4).

Each chunk is sealed with the revision's data key; its associated data binds
the asset, the field (summary or body), the chunk index and the total count,
so chunks cannot be reordered, dropped, moved between assets or truncated.
"""

from __future__ import annotations

import os
import struct

from engine.crypto.aead import NONCE_BYTES, AeadError, open_sealed, seal
from engine.crypto.libsodium import xchacha_open_into, xchacha_seal_buffer, xchacha_seal_into

__all__ = [
    "CHUNK_BYTES",
    "seal_chunks",
    "open_chunks",
    "seal_chunk",
    "seal_chunk_buffer",
    "seal_chunk_into",
    "open_chunk",
    "open_chunk_into",
    "ChunkError",
]

CHUNK_BYTES = 256 * 1024
_AAD_TAG = b"memories.chunk\x00\x01"


class ChunkError(Exception):
    """Chunks are missing, reordered, truncated or do not authenticate."""


def _aad(context: bytes, index: int, total: int) -> bytes:
    return _AAD_TAG + struct.pack(">H", len(context)) + context + struct.pack(">II", index, total)


def seal_chunks(key: bytes, plaintext: bytes, context: bytes) -> list[bytes]:
    """Split ``plaintext`` into sealed chunks; empty content is one empty chunk."""
    total = max(1, -(-len(plaintext) // CHUNK_BYTES))
    view = memoryview(plaintext)
    return [seal(key, bytes(view[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]), _aad(context, i, total)) for i in range(total)]


def open_chunks(key: bytes, chunks: list[bytes], context: bytes) -> bytes:
    total = len(chunks)
    if total == 0:
        raise ChunkError("no chunks")
    parts = []
    for index, sealed in enumerate(chunks):
        try:
            parts.append(open_sealed(key, sealed, _aad(context, index, total)))
        except AeadError as exc:
            raise ChunkError(f"chunk {index} of {total} failed authentication") from exc
    return b"".join(parts)


def seal_chunk(key: bytes, plaintext: bytes, context: bytes, index: int, total: int) -> bytes:
    """One chunk of ``total``, sealed exactly as :func:`seal_chunks` seals it (streamed files, FI-1)."""
    return seal(key, plaintext, _aad(context, index, total))


def open_chunk(key: bytes, sealed: bytes, context: bytes, index: int, total: int) -> bytes:
    try:
        return open_sealed(key, sealed, _aad(context, index, total))
    except AeadError as exc:
        raise ChunkError(f"chunk {index} of {total} failed authentication") from exc


def seal_chunk_buffer(key: bytes, plaintext: bytes | bytearray | memoryview, context: bytes, index: int, total: int) -> bytearray:
    """:func:`seal_chunk` without its intermediate copies: the same sealed layout, in a
    ``bytearray``, from any buffer (a view into a received frame). For streamed files."""
    return xchacha_seal_buffer(key, os.urandom(NONCE_BYTES), plaintext, _aad(context, index, total))


def seal_chunk_into(
    key: bytes, plaintext: bytes | bytearray | memoryview, context: bytes, index: int, total: int, out: memoryview
) -> None:
    """:func:`seal_chunk_buffer` into ``out`` (the sealed chunk's exact length): a slice of a reused buffer."""
    xchacha_seal_into(key, os.urandom(NONCE_BYTES), plaintext, _aad(context, index, total), out)


def open_chunk_into(key: bytes, sealed: bytes, context: bytes, index: int, total: int, out: memoryview) -> None:
    """:func:`open_chunk` into ``out`` (the plaintext's exact length), e.g. a slice of an answer."""
    if not xchacha_open_into(key, sealed, _aad(context, index, total), out):
        raise ChunkError(f"chunk {index} of {total} failed authentication")
