"""XChaCha20-Poly1305 AEAD (libsodium via PyNaCl) with random 192-bit nonces.

XChaCha's long nonce makes random nonces safe for any number of messages under
one key, so no nonce counter has to survive crashes.
"""

from __future__ import annotations

import os

from nacl import bindings

from engine.crypto.libsodium import xchacha_open, xchacha_seal

KEY_BYTES = 32
NONCE_BYTES = bindings.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
TAG_BYTES = bindings.crypto_aead_xchacha20poly1305_ietf_ABYTES

__all__ = ["seal", "open_sealed", "new_key", "AeadError", "KEY_BYTES", "NONCE_BYTES", "TAG_BYTES"]


class AeadError(Exception):
    """Ciphertext, key or associated data did not authenticate."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Return ``nonce || ciphertext || tag``."""
    return xchacha_seal(bytes(key), os.urandom(NONCE_BYTES), bytes(plaintext), bytes(aad))


def open_sealed(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    if len(sealed) < NONCE_BYTES + TAG_BYTES:
        raise AeadError("sealed value too short")
    plain = xchacha_open(bytes(key), bytes(sealed[:NONCE_BYTES]), bytes(sealed[NONCE_BYTES:]), bytes(aad))
    if plain is None:
        raise AeadError("authentication failed")
    return plain
