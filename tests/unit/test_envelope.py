"""ID-2: the device-to-device envelope (engine/crypto/envelope.py; layout in docs/formats.md)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl import bindings
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.envelope import (
    HEADER_BYTES,
    MAGIC,
    MIN_ENVELOPE_BYTES,
    SIGNATURE_BYTES,
    EnvelopeError,
    open_envelope,
    seal_envelope,
)
from engine.errors import CODES, MemoriesError

SENDER = SigningKey(bytes(range(32)))
OTHER_SENDER = SigningKey(bytes(range(32, 64)))
RECIPIENT = PrivateKey(bytes(range(64, 96)))
OTHER_RECIPIENT = PrivateKey(bytes(range(96, 128)))
SENDER_PUB = bytes(SENDER.verify_key)
RECIPIENT_PUB = bytes(RECIPIENT.public_key)

# Offsets from docs/formats.md ("Envelope").
SENDER_AT, RECIPIENT_AT, EPHEMERAL_AT, NONCE_AT = 7, 39, 71, 103


def _tagged(purpose: str) -> bytes:
    return bytes([len(purpose)]) + purpose.encode("ascii")


def _resign(envelope: bytes, key: SigningKey, purpose: str, *, sender_field: bytes | None = None) -> bytes:
    """Re-sign an envelope's body exactly as docs/formats.md describes (optionally with a new sender field)."""
    body = bytearray(envelope[:-SIGNATURE_BYTES])
    if sender_field is not None:
        body[SENDER_AT : SENDER_AT + 32] = sender_field
    message = b"memories.envelope\x00\x01" + _tagged(purpose) + bytes(body)
    return bytes(body) + key.sign(message).signature


def _refused(data: bytes, *, purpose: str = "sync", key: PrivateKey = RECIPIENT, sender: bytes | None = None) -> EnvelopeError:
    with pytest.raises(EnvelopeError) as caught:
        open_envelope(key, data, purpose=purpose, expected_sender=sender)
    assert caught.value.code == "envelope_invalid"
    return caught.value


def test_round_trip_returns_payload_and_sender() -> None:
    """ID-2: an envelope opens for its recipient and purpose, and names the sender device key."""
    payload = b"the epoch key, say" * 10
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, payload, purpose="epoch-key")
    opened = open_envelope(RECIPIENT, envelope, purpose="epoch-key")
    assert opened.payload == payload
    assert opened.sender_device_pub == SENDER_PUB
    assert open_envelope(RECIPIENT, envelope, purpose="epoch-key", expected_sender=SENDER_PUB).payload == payload
    assert open_envelope(RECIPIENT, seal_envelope(SENDER, RECIPIENT_PUB, b"", purpose="sync"), purpose="sync").payload == b""


def test_layout_matches_docs_and_opens_independently() -> None:
    """ID-2: the documented layout, HKDF info and AAD are what the code writes.

    The test decrypts and verifies with the primitives directly, from docs/formats.md alone.
    """
    payload = b"payload bytes"
    purpose = "join-approval"
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, payload, purpose=purpose)
    assert len(envelope) == HEADER_BYTES + len(payload) + 16 + SIGNATURE_BYTES
    assert HEADER_BYTES == 127 and MIN_ENVELOPE_BYTES == 127 + 16 + 64
    assert envelope[:6] == MAGIC == b"MEMENV" and envelope[6] == 1
    assert envelope[SENDER_AT:RECIPIENT_AT] == SENDER_PUB
    assert envelope[RECIPIENT_AT:EPHEMERAL_AT] == RECIPIENT_PUB
    ephemeral = envelope[EPHEMERAL_AT:NONCE_AT]
    nonce = envelope[NONCE_AT:HEADER_BYTES]
    header = envelope[:HEADER_BYTES]
    body, signature = envelope[:-64], envelope[-64:]
    SENDER.verify_key.verify(b"memories.envelope\x00\x01" + _tagged(purpose) + body, signature)
    shared = bindings.crypto_scalarmult(bytes(RECIPIENT), ephemeral)
    info = b"memories.envelope.key\x00\x01" + _tagged(purpose) + SENDER_PUB + RECIPIENT_PUB + ephemeral
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
    aad = b"memories.envelope.aad\x00\x01" + _tagged(purpose) + header
    plain = bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(body[HEADER_BYTES:], aad, nonce, key)
    assert plain == payload


def test_ephemeral_key_and_nonce_are_fresh() -> None:
    """ID-2: every seal uses a new ephemeral X25519 key, so the same payload never seals to the same bytes."""
    first = seal_envelope(SENDER, RECIPIENT_PUB, b"same", purpose="sync")
    second = seal_envelope(SENDER, RECIPIENT_PUB, b"same", purpose="sync")
    assert first != second
    assert first[EPHEMERAL_AT:NONCE_AT] != second[EPHEMERAL_AT:NONCE_AT]
    assert first[HEADER_BYTES:-64] != second[HEADER_BYTES:-64]
    assert open_envelope(RECIPIENT, first, purpose="sync").payload == open_envelope(RECIPIENT, second, purpose="sync").payload


def test_every_flipped_bit_anywhere_is_refused() -> None:
    """ID-2: flipping any bit of any byte (header, ephemeral key, nonce, ciphertext, tag, signature) is refused."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"hi", purpose="sync")
    for offset in range(len(envelope)):
        for bit in range(8):
            tampered = bytearray(envelope)
            tampered[offset] ^= 1 << bit
            _refused(bytes(tampered))


def test_every_truncation_and_extension_is_refused() -> None:
    """ID-2: every strict prefix of an envelope, and an envelope with bytes appended, is refused."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"hello", purpose="sync")
    for length in range(len(envelope)):
        _refused(envelope[:length])
    _refused(envelope + b"\x00")
    _refused(b"\x00" + envelope)


def test_wrong_recipient_is_refused() -> None:
    """ID-2: the recipient exchange key is authenticated; another device's key cannot open it."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"for recipient", purpose="sync")
    assert _refused(envelope, key=OTHER_RECIPIENT).reason == "recipient"
    # Rewriting the recipient field to the other device (and re-signing as the real sender) still
    # cannot open: the transport key is X25519 with the real recipient.
    readdressed = bytearray(envelope[:-64])
    readdressed[RECIPIENT_AT:EPHEMERAL_AT] = bytes(OTHER_RECIPIENT.public_key)
    resigned = _resign(bytes(readdressed) + bytes(64), SENDER, "sync")
    assert _refused(resigned, key=OTHER_RECIPIENT).reason == "payload"


def test_wrong_purpose_is_refused_by_signature_and_by_key() -> None:
    """ID-2: an envelope sealed for one purpose never opens as another (signature and HKDF/AAD both bind it)."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"sync data", purpose="sync")
    for purpose in ("join-approval", "epoch-key", "syn", "sync2", "Sync"):
        assert _refused(envelope, purpose=purpose).reason == "signature"
    # Even a sender who re-signs the same ciphertext for another purpose gets nothing to open:
    # the transport key and the associated data name the purpose too.
    assert _refused(_resign(envelope, SENDER, "join-approval"), purpose="join-approval").reason == "payload"


def test_resigned_by_another_key_is_refused() -> None:
    """ID-2: replacing the sender and its signature is refused, with or without an expected sender."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"from SENDER", purpose="sync")
    forged = _resign(envelope, OTHER_SENDER, "sync", sender_field=bytes(OTHER_SENDER.verify_key))
    assert _refused(forged, sender=SENDER_PUB).reason == "sender"
    # Without a pin the forgery still fails: the sender key is bound into the transport key.
    assert _refused(forged).reason == "payload"
    # A signature by another key over the unchanged body fails the signature check.
    assert _refused(_resign(envelope, OTHER_SENDER, "sync")).reason == "signature"


def test_expected_sender_refuses_a_genuine_envelope_from_another_device() -> None:
    """ID-2: with expected_sender, a well-formed envelope from any other device key is refused."""
    envelope = seal_envelope(OTHER_SENDER, RECIPIENT_PUB, b"genuine, but not from SENDER", purpose="sync")
    assert open_envelope(RECIPIENT, envelope, purpose="sync").sender_device_pub == bytes(OTHER_SENDER.verify_key)
    assert _refused(envelope, sender=SENDER_PUB).reason == "sender"


def test_low_order_keys_are_refused() -> None:
    """ID-2: an all-zero (low-order) recipient or ephemeral key gives a typed error, not a crash."""
    with pytest.raises(EnvelopeError):
        seal_envelope(SENDER, bytes(32), b"x", purpose="sync")
    with pytest.raises(EnvelopeError):
        seal_envelope(SENDER, b"short", b"x", purpose="sync")
    envelope = bytearray(seal_envelope(SENDER, RECIPIENT_PUB, b"x", purpose="sync"))
    envelope[EPHEMERAL_AT:NONCE_AT] = bytes(32)
    assert _refused(_resign(bytes(envelope), SENDER, "sync")).reason == "format"


def test_errors_are_typed_and_echo_no_bytes() -> None:
    """API-8: an envelope error is a MemoriesError with a registered code and a message free of key bytes."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, b"secret payload", purpose="sync")
    errors = [
        _refused(envelope, key=OTHER_RECIPIENT),
        _refused(envelope, purpose="epoch-key"),
        _refused(envelope, sender=bytes(OTHER_SENDER.verify_key)),
        _refused(envelope[:-1]),
    ]
    assert "envelope_invalid" in CODES
    for error in errors:
        assert isinstance(error, MemoriesError)
        text = str(error) + repr(error.to_wire())
        for key in (SENDER_PUB, RECIPIENT_PUB, bytes(OTHER_RECIPIENT.public_key)):
            assert key.hex()[:8] not in text
        assert "secret payload" not in text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_only_raise_envelope_error(data: bytes) -> None:
    """ID-2: any byte string either opens (never, here) or raises EnvelopeError; no other exception."""
    with pytest.raises(EnvelopeError):
        open_envelope(RECIPIENT, data, purpose="sync")


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=HEADER_BYTES - 7, max_size=400), st.booleans(), st.booleans())
def test_arbitrary_bodies_behind_a_valid_header_only_raise_envelope_error(rest: bytes, ours: bool, pinned: bool) -> None:
    """ID-2: past the magic (and, when `ours`, with this recipient's key in place) any bytes give EnvelopeError."""
    data = bytearray(MAGIC + b"\x01" + rest)
    if ours:
        data[RECIPIENT_AT:EPHEMERAL_AT] = RECIPIENT_PUB
    with pytest.raises(EnvelopeError):
        open_envelope(RECIPIENT, bytes(data), purpose="sync", expected_sender=SENDER_PUB if pinned else None)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["sync", "epoch-key", "join-approval"]))
def test_round_trip_any_payload(payload: bytes, purpose: str) -> None:
    """ID-2: any payload round-trips and its ciphertext does not contain it in clear."""
    envelope = seal_envelope(SENDER, RECIPIENT_PUB, payload, purpose=purpose)
    assert open_envelope(RECIPIENT, envelope, purpose=purpose, expected_sender=SENDER_PUB).payload == payload
    if len(payload) >= 16:
        assert payload not in envelope
