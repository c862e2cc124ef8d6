"""Crypto building blocks: AEAD, chunking (ST-4), canonical encoding, certificates (ID-1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.crypto.aead import AeadError, new_key, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.chunks import CHUNK_BYTES, ChunkError, open_chunks, seal_chunks
from engine.crypto.kdf import calibrate, derive_key
from engine.crypto.keys import SignatureError, new_identity


def test_aead_round_trip_and_tamper() -> None:
    key = new_key()
    sealed = seal(key, b"hello", b"aad")
    assert open_sealed(key, sealed, b"aad") == b"hello"
    with pytest.raises(AeadError):
        open_sealed(key, sealed, b"other aad")
    flipped = bytearray(sealed)
    flipped[-1] ^= 1
    with pytest.raises(AeadError):
        open_sealed(key, bytes(flipped), b"aad")


def test_chunks_bind_index_and_total() -> None:
    """ST-4: chunks cannot be reordered, dropped, truncated or moved to another context."""
    key = new_key()
    data = bytes(range(256)) * (CHUNK_BYTES // 256) * 2 + b"tail"
    chunks = seal_chunks(key, data, b"asset-1")
    assert len(chunks) == 3
    assert open_chunks(key, chunks, b"asset-1") == data
    with pytest.raises(ChunkError):
        open_chunks(key, [chunks[1], chunks[0], chunks[2]], b"asset-1")
    with pytest.raises(ChunkError):
        open_chunks(key, chunks[:2], b"asset-1")  # truncated: total count changes
    with pytest.raises(ChunkError):
        open_chunks(key, chunks, b"asset-2")
    with pytest.raises(ChunkError):
        open_chunks(key, [], b"asset-1")


def test_empty_content_is_one_chunk() -> None:
    key = new_key()
    chunks = seal_chunks(key, b"", b"ctx")
    assert len(chunks) == 1
    assert open_chunks(key, chunks, b"ctx") == b""


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text() | st.binary(max_size=64),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)


@given(json_values)
def test_canonical_round_trip(value: object) -> None:
    encoded = canonical_bytes(value)
    assert canonical_bytes(decode_canonical(encoded)) == encoded


@given(st.dictionaries(st.text(max_size=8), st.integers(), max_size=8))
def test_canonical_independent_of_key_order(value: dict[str, int]) -> None:
    reversed_order = dict(reversed(list(value.items())))
    assert canonical_bytes(value) == canonical_bytes(reversed_order)


def test_canonical_refuses_floats() -> None:
    with pytest.raises(TypeError):
        canonical_bytes({"x": 1.5})
    with pytest.raises(ValueError):
        decode_canonical(b'{"x":1.5}')


def test_domain_separation() -> None:
    assert domain_bytes("a", 1, {}) != domain_bytes("b", 1, {})
    assert domain_bytes("a", 1, {}) != domain_bytes("a", 2, {})


def test_device_certificate_verifies_and_detects_tamper() -> None:
    """ID-1: the user key certifies the device signing and exchange keys."""
    identity = new_identity()
    identity.verify_certificate()
    identity.certificate = {**identity.certificate, "exchange": b"\x00" * 32}
    with pytest.raises(SignatureError):
        identity.verify_certificate()


def test_kdf_parameters_stored_and_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    """ST-3: the same password and stored parameters derive the same key."""
    monkeypatch.setenv("MEMORIES_KDF_TARGET_MS", "10")
    params = calibrate()
    assert derive_key("pw", params) == derive_key("pw", params)
    assert derive_key("pw", params) != derive_key("pw2", params)
