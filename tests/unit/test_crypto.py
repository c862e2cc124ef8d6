"""Crypto building blocks: AEAD, chunking (ST-4), canonical encoding, certificates (ID-1)."""

from __future__ import annotations

from collections.abc import Callable

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


@given(st.binary(max_size=300), st.binary(max_size=40), st.integers(min_value=0, max_value=400))
def test_aead_fast_open_agrees_with_the_public_binding(plaintext: bytes, aad: bytes, flip: int) -> None:
    """open_sealed calls libsodium directly; it must accept and refuse exactly what PyNaCl's binding does."""
    from nacl import bindings
    from nacl.exceptions import CryptoError

    key = new_key()
    sealed = bytearray(seal(key, plaintext, aad))
    if flip < len(sealed):
        sealed[flip] ^= 0x40
    nonce, body = bytes(sealed[:24]), bytes(sealed[24:])
    try:
        expected: bytes | None = bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(body, aad, nonce, key)
    except CryptoError:
        expected = None
    try:
        got: bytes | None = open_sealed(key, bytes(sealed), aad)
    except AeadError:
        got = None
    assert got == expected
    assert (got is None) == (flip < len(sealed))


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


_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=20)
_values = _scalars | st.binary(max_size=40) | st.lists(st.binary(max_size=20), max_size=4)
_anything = st.recursive(
    _values, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
)


@given(st.dictionaries(st.text(max_size=8), _values, max_size=8) | _anything)
def test_flat_decoder_agrees_with_the_general_one(value: object) -> None:
    """decode_canonical_flat (unlock's fast path for revision bodies) never differs from decode_canonical."""
    from engine.crypto.canonical import decode_canonical_flat

    data = canonical_bytes(value)
    assert decode_canonical_flat(data) == decode_canonical(data)


@given(st.binary(max_size=80) | st.sampled_from([b'{"a":1.5}', b'{"a":{"$b":"!!"}}', b'{"a":{"$b":"AA","x":1}}', b"[]", b"{}"]))
def test_flat_decoder_fails_like_the_general_one(data: bytes) -> None:
    from engine.crypto.canonical import decode_canonical_flat

    def outcome(decode: Callable[[bytes], object]) -> object:
        try:
            return ("ok", decode(data))
        except ValueError:  # JSONDecodeError, UnicodeDecodeError and binascii.Error included
            return ("error",)

    assert outcome(decode_canonical_flat) == outcome(decode_canonical)


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=300))
def test_signature_check_agrees_with_the_public_binding(message: bytes, flip: int) -> None:
    """engine.crypto.keys.verify calls libsodium directly; it accepts exactly what PyNaCl's VerifyKey accepts."""
    from nacl.exceptions import BadSignatureError
    from nacl.signing import SigningKey

    from engine.crypto.keys import verify

    key = SigningKey.generate()
    signature = bytearray(key.sign(message).signature)
    tampered = bytearray(message)
    if flip < 64:
        signature[flip] ^= 0x01
    elif flip - 64 < len(tampered):
        tampered[flip - 64] ^= 0x01
    try:
        key.verify_key.verify(bytes(tampered), bytes(signature))
        expected = True
    except BadSignatureError:
        expected = False
    try:
        verify(bytes(key.verify_key), bytes(tampered), bytes(signature))
        got = True
    except SignatureError:
        got = False
    assert got == expected
    assert got == (flip >= 64 + len(message))


@given(st.binary(max_size=600), st.binary(max_size=40), st.binary(min_size=24, max_size=24))
def test_aead_fast_seal_agrees_with_the_public_binding(plaintext: bytes, aad: bytes, nonce: bytes) -> None:
    """seal calls libsodium directly (issue 32); the layout is exactly nonce || PyNaCl's ciphertext and tag."""
    from nacl import bindings

    from engine.crypto.libsodium import xchacha_seal

    key = new_key()
    expected = nonce + bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, nonce, key)
    assert xchacha_seal(key, nonce, plaintext, aad) == expected
    assert open_sealed(key, expected, aad) == plaintext


@given(st.binary(max_size=600))
def test_direct_signing_gives_pynacls_signature(message: bytes) -> None:
    """keys.sign calls libsodium directly (issue 32); Ed25519 is deterministic, so it must equal PyNaCl's."""
    from nacl.signing import SigningKey

    from engine.crypto.keys import sign, verify

    key = SigningKey.generate()
    assert sign(key, message) == bytes(key.sign(message).signature)
    verify(bytes(key.verify_key), message, sign(key, message))
