"""Direct libsodium calls for the two hot paths of an unlock (opening rows, verifying signatures).

PyNaCl's public bindings check every argument and format their error messages on every
call; for the ~30k small operations of a 10k-asset unlock that wrapper costs several times
the cryptography itself, and it runs holding the GIL (which the background signature check
and the search index build would otherwise share). These functions call the same compiled
libsodium through PyNaCl's own cffi module after checking lengths once. Where that module
is missing they fall back to the public bindings, with identical results (tests/unit/test_crypto.py).
"""

from __future__ import annotations

from typing import Any

from nacl import bindings
from nacl.exceptions import BadSignatureError, CryptoError

__all__ = ["xchacha_open", "RowOpener", "ed25519_verify_detached", "DIRECT"]

try:
    from nacl import _sodium

    _ffi: Any = _sodium.ffi
    _lib: Any = _sodium.lib
    DIRECT = True
except ImportError:  # pragma: no cover - a PyNaCl without the module
    _ffi = _lib = None
    DIRECT = False

_NONCE = bindings.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
_TAG = bindings.crypto_aead_xchacha20poly1305_ietf_ABYTES
_KEY = bindings.crypto_aead_xchacha20poly1305_ietf_KEYBYTES
_PUBLIC_KEY = bindings.crypto_sign_PUBLICKEYBYTES
_SIGNATURE = bindings.crypto_sign_BYTES


def xchacha_open(key: bytes, nonce: bytes, body: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or None when the ciphertext, key or associated data do not authenticate."""
    if len(key) != _KEY or len(nonce) != _NONCE or len(body) < _TAG:
        return None
    if _lib is None:
        try:
            return bytes(bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(body, aad, nonce, key))
        except CryptoError:
            return None
    message = _ffi.new("unsigned char[]", len(body) - _TAG)
    message_len = _ffi.new("unsigned long long *")
    result = _lib.crypto_aead_xchacha20poly1305_ietf_decrypt(
        message, message_len, _ffi.NULL, body, len(body), aad, len(aad), nonce, key
    )
    if result != 0:
        return None
    return bytes(_ffi.buffer(message, message_len[0]))


class RowOpener:
    """Opens many ``nonce || ciphertext || tag`` values under one key (an unlock's rows).

    Same result as :func:`xchacha_open` per value, without its per-call costs: the output
    buffer is allocated once, and nonce and ciphertext are passed as pointers into the
    caller's buffer instead of sliced copies (a 10k-note unlock opens ~30k rows, ~60 MB).
    Not thread-safe: one opener per loop.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) != _KEY:
            raise ValueError("an XChaCha20-Poly1305 key is 32 bytes")
        self._key = bytes(key)
        self._capacity = 0
        self._out: Any = None
        self._out_len: Any = _ffi.new("unsigned long long *") if _lib is not None else None

    def open(self, data: bytes, start: int, aad: bytes) -> bytes | None:
        """Open the sealed value ``data[start:]``; None when it does not authenticate."""
        body_len = len(data) - start - _NONCE
        if start < 0 or body_len < _TAG:
            return None
        if _lib is None:
            return xchacha_open(self._key, data[start : start + _NONCE], data[start + _NONCE :], aad)
        if body_len > self._capacity:
            self._capacity = max(body_len, 2 * self._capacity)
            self._out = _ffi.new("unsigned char[]", self._capacity)
        sealed = _ffi.from_buffer(data)
        result = _lib.crypto_aead_xchacha20poly1305_ietf_decrypt(
            self._out, self._out_len, _ffi.NULL, sealed + start + _NONCE, body_len, aad, len(aad), sealed + start, self._key
        )
        if result != 0:
            return None
        plain: bytes = _ffi.buffer(self._out, self._out_len[0])[:]
        return plain


def ed25519_verify_detached(public_key: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key) != _PUBLIC_KEY or len(signature) != _SIGNATURE:
        return False
    if _lib is None:
        try:
            bindings.crypto_sign_open(signature + message, public_key)
            return True
        except (BadSignatureError, ValueError):
            return False
    # PyNaCl's cffi module exposes crypto_sign_open (combined form), not the detached check.
    signed = signature + message
    opened = _ffi.new("unsigned char[]", len(signed))
    opened_len = _ffi.new("unsigned long long *")
    return bool(_lib.crypto_sign_open(opened, opened_len, signed, len(signed), public_key) == 0)
