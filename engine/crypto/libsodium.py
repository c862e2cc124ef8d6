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

__all__ = [
    "xchacha_open",
    "xchacha_seal",
    "xchacha_seal_buffer",
    "xchacha_seal_into",
    "xchacha_open_into",
    "RowOpener",
    "ed25519_verify_detached",
    "ed25519_sign_detached",
    "DIRECT",
]

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


def xchacha_seal(key: bytes, nonce: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """``nonce || ciphertext || tag`` as bytes, built in one buffer: the small values every
    revision seals (a data key, a summary, a short body; issue 32's bulk imports seal ~8 per
    entry) without PyNaCl's per-call checks and its extra copy to put the nonce in front."""
    if len(key) != _KEY or len(nonce) != _NONCE:
        raise ValueError("an XChaCha20-Poly1305 key is 32 bytes and a nonce 24")
    if _lib is None:
        return nonce + bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(bytes(plaintext), aad, nonce, key)
    size = _NONCE + len(plaintext) + _TAG
    out = _ffi.new("unsigned char[]", size)
    _ffi.memmove(out, nonce, _NONCE)
    _lib.crypto_aead_xchacha20poly1305_ietf_encrypt(
        out + _NONCE, _ffi.NULL, plaintext, len(plaintext), aad, len(aad), _ffi.NULL, nonce, key
    )
    sealed: bytes = _ffi.buffer(out, size)[:]
    return sealed


def xchacha_seal_buffer(key: bytes, nonce: bytes, plaintext: bytes | bytearray | memoryview, aad: bytes) -> bytearray:
    """``nonce || ciphertext || tag`` built in one buffer (file chunks, FI-1).

    PyNaCl's binding takes only ``bytes``, fills a zeroed buffer, copies it out, and the
    caller then copies again to put the nonce in front: three passes over every 256 KiB
    chunk of a file. Here libsodium writes the ciphertext straight after the nonce, and the
    plaintext may be a view into a larger received frame.
    """
    if len(key) != _KEY or len(nonce) != _NONCE:
        raise ValueError("an XChaCha20-Poly1305 key is 32 bytes and a nonce 24")
    if _lib is None:
        sealed = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(bytes(plaintext), aad, nonce, key)
        return bytearray(nonce + sealed)
    out = bytearray(_NONCE + len(plaintext) + _TAG)
    out[:_NONCE] = nonce
    target = _ffi.from_buffer(out)
    source = _ffi.from_buffer(plaintext)
    _lib.crypto_aead_xchacha20poly1305_ietf_encrypt(
        target + _NONCE, _ffi.NULL, source, len(plaintext), aad, len(aad), _ffi.NULL, nonce, key
    )
    return out


def xchacha_seal_into(key: bytes, nonce: bytes, plaintext: bytes | bytearray | memoryview, aad: bytes, out: memoryview) -> None:
    """:func:`xchacha_seal_buffer` into ``out`` (exactly nonce + plaintext + tag long), e.g. a slice
    of a buffer reused batch after batch (a file upload's pack writes, issue 32): no allocation."""
    if len(key) != _KEY or len(nonce) != _NONCE or len(out) != _NONCE + len(plaintext) + _TAG:
        raise ValueError("the output of a seal is nonce, ciphertext and tag long")
    if _lib is None:
        out[:] = nonce + bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(bytes(plaintext), aad, nonce, key)
        return
    out[:_NONCE] = nonce
    target = _ffi.from_buffer(out, require_writable=True)
    source = _ffi.from_buffer(plaintext)
    _lib.crypto_aead_xchacha20poly1305_ietf_encrypt(
        target + _NONCE, _ffi.NULL, source, len(plaintext), aad, len(aad), _ffi.NULL, nonce, key
    )


def xchacha_open_into(key: bytes, sealed: bytes, aad: bytes, out: memoryview) -> bool:
    """Open ``nonce || ciphertext || tag`` into ``out`` (exactly the plaintext's length).

    False when it does not authenticate (libsodium checks the tag before it writes any
    plaintext). Lets a download decrypt every chunk of an answer into that answer's one
    buffer instead of allocating, copying and joining each chunk.
    """
    body_len = len(sealed) - _NONCE
    if len(key) != _KEY or body_len < _TAG or len(out) != body_len - _TAG:
        return False
    if _lib is None:
        plain = xchacha_open(key, bytes(sealed[:_NONCE]), bytes(sealed[_NONCE:]), aad)
        if plain is None:
            return False
        out[:] = plain
        return True
    source = _ffi.from_buffer(sealed)
    target = _ffi.from_buffer(out, require_writable=True)
    result = _lib.crypto_aead_xchacha20poly1305_ietf_decrypt(
        target, _ffi.NULL, _ffi.NULL, source + _NONCE, body_len, aad, len(aad), source, key
    )
    return bool(result == 0)


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


def ed25519_sign_detached(secret_key: bytes, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature of ``message`` under a 64-byte libsodium secret key.

    PyNaCl's ``SigningKey.sign`` returns signature and message together, copied twice and
    wrapped in an object; a bulk import signs two revisions per entry (issue 32), so this
    calls libsodium's combined ``crypto_sign`` directly and keeps only the signature.
    """
    if len(secret_key) != bindings.crypto_sign_SECRETKEYBYTES:
        raise ValueError("an Ed25519 secret key is 64 bytes")
    if _lib is None:
        return bytes(bindings.crypto_sign(message, secret_key)[:_SIGNATURE])
    out = _ffi.new("unsigned char[]", len(message) + _SIGNATURE)
    _lib.crypto_sign(out, _ffi.NULL, message, len(message), secret_key)
    signature: bytes = _ffi.buffer(out, _SIGNATURE)[:]
    return signature


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
