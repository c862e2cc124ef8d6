"""Signed, recipient-encrypted envelopes between devices (SPEC ID-2; layout in docs/formats.md).

An envelope carries one payload from a sender device to one recipient device:

    magic "MEMENV" || version 0x01 || sender Ed25519 key (32) || recipient X25519 key (32)
    || ephemeral X25519 key (32) || nonce (24) || XChaCha20-Poly1305 ciphertext + tag
    || Ed25519 signature (64) by the sender device key

The transport key is HKDF-SHA256 over X25519(ephemeral, recipient); its ``info`` binds the
purpose, the sender, the recipient and the ephemeral key, and the AEAD's associated data is
the purpose plus the whole header, so the recipient identity and the ephemeral key are
authenticated twice (by the AEAD and by the signature). The signature covers a domain tag, the
purpose and every byte before it. A ``purpose`` (``"join-approval"``, ``"epoch-key"``,
``"sync"`` …) is not stored in the envelope: the opener names the purpose it expects, and an
envelope sealed for another purpose fails both the signature and the AEAD.

Every refusal is one :class:`EnvelopeError` (code ``envelope_invalid``); its ``reason`` says
which check refused, and its message never contains envelope bytes.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey

from engine.crypto.aead import KEY_BYTES, NONCE_BYTES, TAG_BYTES
from engine.crypto.libsodium import ed25519_verify_detached, xchacha_open
from engine.errors import MemoriesError

__all__ = [
    "MAGIC",
    "VERSION",
    "HEADER_BYTES",
    "SIGNATURE_BYTES",
    "MIN_ENVELOPE_BYTES",
    "EnvelopeError",
    "Opened",
    "seal_envelope",
    "open_envelope",
]

MAGIC = b"MEMENV"
VERSION = 1
_KEY = 32
SIGNATURE_BYTES = 64
# magic, version, sender, recipient, ephemeral, nonce
HEADER_BYTES = len(MAGIC) + 1 + _KEY + _KEY + _KEY + NONCE_BYTES
MIN_ENVELOPE_BYTES = HEADER_BYTES + TAG_BYTES + SIGNATURE_BYTES
_SIGN_TAG = b"memories.envelope\x00\x01"
_KDF_TAG = b"memories.envelope.key\x00\x01"
_AAD_TAG = b"memories.envelope.aad\x00\x01"
_MAX_PURPOSE = 64

_MESSAGES = {
    "format": "The envelope is damaged or not a version this engine reads; nothing was opened.",
    "recipient": "The envelope is addressed to another device; nothing was opened.",
    "sender": "The envelope was not sent by the expected device; nothing was opened.",
    "signature": "The envelope's signature does not verify for this purpose; nothing was opened.",
    "payload": "The envelope's payload does not authenticate; nothing was opened.",
    "key": "The recipient exchange key is not a usable X25519 public key.",
}


class EnvelopeError(MemoriesError):
    """An envelope could not be sealed or opened; ``reason`` names the check that refused."""

    def __init__(self, reason: str) -> None:
        super().__init__("envelope_invalid", _MESSAGES[reason])
        self.reason = reason


@dataclass(frozen=True)
class Opened:
    """What an authenticated envelope carried, and which device key signed it."""

    sender_device_pub: bytes
    payload: bytes


def _purpose_bytes(purpose: str) -> bytes:
    if not isinstance(purpose, str) or not 0 < len(purpose) <= _MAX_PURPOSE or not purpose.isascii():
        raise ValueError("purpose must be 1-64 ASCII characters")
    if not purpose.isprintable():
        raise ValueError("purpose must be printable")
    raw = purpose.encode("ascii")
    return bytes([len(raw)]) + raw


def _transport_key(shared: bytes, purpose: bytes, sender: bytes, recipient: bytes, ephemeral: bytes) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=_KDF_TAG + purpose + sender + recipient + ephemeral)
    return hkdf.derive(shared)


def _shared_secret(secret: bytes, public: bytes) -> bytes:
    # libsodium refuses (and PyNaCl raises) when the result is all zero: a low-order point.
    try:
        return bytes(bindings.crypto_scalarmult(secret, public))
    except CryptoError:
        raise EnvelopeError("key") from None


def seal_envelope(sender_device_key: Any, recipient_exchange_pub: bytes, payload: bytes, *, purpose: str) -> bytes:
    """Encrypt ``payload`` to ``recipient_exchange_pub`` and sign it with ``sender_device_key``.

    ``sender_device_key`` is a ``nacl.signing.SigningKey``. A fresh ephemeral X25519 key is
    made for every envelope, so sealing the same payload twice gives different bytes.
    """
    tagged_purpose = _purpose_bytes(purpose)
    recipient = bytes(recipient_exchange_pub)
    if len(recipient) != _KEY:
        raise EnvelopeError("key")
    sender = bytes(sender_device_key.verify_key)
    ephemeral = PrivateKey.generate()
    ephemeral_pub = bytes(ephemeral.public_key)
    shared = _shared_secret(bytes(ephemeral), recipient)
    key = _transport_key(shared, tagged_purpose, sender, recipient, ephemeral_pub)
    nonce = os.urandom(NONCE_BYTES)
    header = MAGIC + bytes([VERSION]) + sender + recipient + ephemeral_pub + nonce
    ciphertext = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
        bytes(payload), _AAD_TAG + tagged_purpose + header, nonce, key
    )
    body = header + bytes(ciphertext)
    signature = bytes(sender_device_key.sign(_SIGN_TAG + tagged_purpose + body).signature)
    return body + signature


def open_envelope(
    recipient_exchange_key: PrivateKey,
    data: bytes,
    *,
    purpose: str,
    expected_sender: bytes | None = None,
) -> Opened:
    """Verify and decrypt an envelope addressed to ``recipient_exchange_key`` for ``purpose``.

    With ``expected_sender`` the envelope must be signed by exactly that device key. Any
    failure raises :class:`EnvelopeError`; nothing else escapes for any input bytes.
    """
    tagged_purpose = _purpose_bytes(purpose)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise EnvelopeError("format")
    data = bytes(data)
    if len(data) < MIN_ENVELOPE_BYTES or data[: len(MAGIC)] != MAGIC or data[len(MAGIC)] != VERSION:
        raise EnvelopeError("format")
    offset = len(MAGIC) + 1
    sender = data[offset : offset + _KEY]
    recipient = data[offset + _KEY : offset + 2 * _KEY]
    ephemeral = data[offset + 2 * _KEY : offset + 3 * _KEY]
    nonce = data[offset + 3 * _KEY : HEADER_BYTES]
    header = data[:HEADER_BYTES]
    body, signature = data[:-SIGNATURE_BYTES], data[-SIGNATURE_BYTES:]
    ciphertext = body[HEADER_BYTES:]
    own = bytes(recipient_exchange_key.public_key)
    if not hmac.compare_digest(recipient, own):
        raise EnvelopeError("recipient")
    if expected_sender is not None and not hmac.compare_digest(sender, bytes(expected_sender)):
        raise EnvelopeError("sender")
    if not ed25519_verify_detached(sender, _SIGN_TAG + tagged_purpose + body, signature):
        raise EnvelopeError("signature")
    try:
        shared = bytes(bindings.crypto_scalarmult(bytes(recipient_exchange_key), ephemeral))
    except CryptoError:
        raise EnvelopeError("format") from None
    key = _transport_key(shared, tagged_purpose, sender, recipient, ephemeral)
    payload = xchacha_open(key, nonce, ciphertext, _AAD_TAG + tagged_purpose + header)
    if payload is None:
        raise EnvelopeError("payload")
    return Opened(sender_device_pub=sender, payload=payload)
