"""The copy-free chunk sealing and opening of streamed files (FI-1, ST-4) against the originals."""

from __future__ import annotations

import os

import pytest

from engine.crypto.chunks import (
    CHUNK_BYTES,
    ChunkError,
    open_chunk,
    open_chunk_into,
    seal_chunk,
    seal_chunk_buffer,
    seal_chunk_into,
)

KEY = bytes(range(32))
CONTEXT = b"\x01" * 16 + b"body"


@pytest.mark.parametrize("size", [0, 1, 1000, CHUNK_BYTES])
def test_a_buffer_sealed_chunk_is_a_sealed_chunk(size: int) -> None:
    """ST-4: seal_chunk_buffer's output opens with open_chunk (the stored layout is unchanged),
    from a view into a larger buffer, and seal_chunk's output opens into a buffer."""
    frame = os.urandom(size + 10)
    plain = frame[5 : 5 + size]
    sealed = seal_chunk_buffer(KEY, memoryview(frame)[5 : 5 + size], CONTEXT, 3, 7)
    assert isinstance(sealed, bytearray) and len(sealed) == len(seal_chunk(KEY, plain, CONTEXT, 3, 7))
    assert open_chunk(KEY, bytes(sealed), CONTEXT, 3, 7) == plain
    out = bytearray(size + 4)
    open_chunk_into(KEY, seal_chunk(KEY, plain, CONTEXT, 3, 7), CONTEXT, 3, 7, memoryview(out)[2 : 2 + size])
    assert bytes(out[2 : 2 + size]) == plain and out[:2] == b"\0\0" and out[2 + size :] == b"\0\0"


def test_opening_into_a_buffer_refuses_what_does_not_authenticate() -> None:
    """ST-4: a flipped byte, another index, total, context or key, or a wrong output length is a ChunkError."""
    plain = os.urandom(4096)
    sealed = bytes(seal_chunk_buffer(KEY, plain, CONTEXT, 1, 2))
    flipped = sealed[:30] + bytes([sealed[30] ^ 1]) + sealed[31:]
    cases = [
        (KEY, flipped, CONTEXT, 1, 2, len(plain)),
        (KEY, sealed, CONTEXT, 0, 2, len(plain)),
        (KEY, sealed, CONTEXT, 1, 3, len(plain)),
        (KEY, sealed, b"\x02" * 16 + b"body", 1, 2, len(plain)),
        (bytes(32), sealed, CONTEXT, 1, 2, len(plain)),
        (KEY, sealed, CONTEXT, 1, 2, len(plain) - 1),
        (KEY, sealed[:20], CONTEXT, 1, 2, 0),
    ]
    for key, blob, context, index, total, length in cases:
        out = bytearray(length)
        with pytest.raises(ChunkError):
            open_chunk_into(key, blob, context, index, total, memoryview(out))
        assert out == bytearray(length)  # no plaintext is written when it fails


@pytest.mark.parametrize("size", [0, 1, 1000, CHUNK_BYTES])
def test_a_chunk_sealed_into_a_slice_is_a_sealed_chunk_and_touches_nothing_else(size: int) -> None:
    """ST-4, issue 32: seal_chunk_into writes the stored layout (it opens with open_chunk) into
    exactly its slice of a larger reused buffer (a pack batch), with a fresh nonce each time;
    a slice of the wrong length is refused before anything is written."""
    plain = os.urandom(size)
    buffer = bytearray(b"\xaa" * (size + 100))
    view = memoryview(buffer)
    seal_chunk_into(KEY, plain, CONTEXT, 3, 7, view[50 : 50 + size + 40])
    sealed = bytes(buffer[50 : 50 + size + 40])
    assert open_chunk(KEY, sealed, CONTEXT, 3, 7) == plain
    assert buffer[:50] == b"\xaa" * 50 and buffer[50 + size + 40 :] == b"\xaa" * 10
    seal_chunk_into(KEY, plain, CONTEXT, 3, 7, view[50 : 50 + size + 40])
    assert bytes(buffer[50:74]) != sealed[:24]  # another nonce
    with pytest.raises(ChunkError):
        open_chunk(KEY, sealed, CONTEXT, 4, 7)
    before = bytes(buffer)
    with pytest.raises(ValueError):
        seal_chunk_into(KEY, plain, CONTEXT, 3, 7, view[0 : size + 39])
    assert bytes(buffer) == before
