"""MySQL/MariaDB password scrambles the MySQL proxy answers upstream with (PX-2).

``mysql_native_password`` and ``caching_sha2_password`` scrambles are the
documented XOR constructions; MariaDB's ``client_ed25519`` is an Ed25519
signature whose "seed" is the whole password (SHA-512 of it), which standard
Ed25519 APIs cannot express, so it is built from libsodium's primitives.
"""

from __future__ import annotations

import hashlib

from nacl import bindings

from engine.errors import MemoriesError
from engine.remote.targets import Target

__all__ = ["native_scramble", "caching_sha2_scramble", "ed25519_signature", "access_denied"]


def access_denied(target: Target) -> MemoriesError:
    """ER_ACCESS_DENIED (1045) as a typed error. MariaDB answers a missing client
    certificate for a ``REQUIRE X509`` account the same way as a wrong password, so
    without one in the credential the sentence names both causes."""
    if target.tls_client_cert:
        return MemoriesError("remote_auth_failed")
    return MemoriesError(
        "remote_auth_failed",
        "The remote server rejected the credential (a wrong password, or the account requires a "
        "TLS client certificate: add one with --tls-cert).",
    )


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def native_scramble(password: str, nonce: bytes) -> bytes:
    if not password:
        return b""
    stage1 = hashlib.sha1(password.encode(), usedforsecurity=False).digest()
    stage2 = hashlib.sha1(stage1, usedforsecurity=False).digest()
    return _xor(stage1, hashlib.sha1(nonce[:20] + stage2, usedforsecurity=False).digest())


def caching_sha2_scramble(password: str, nonce: bytes) -> bytes:
    if not password:
        return b""
    p1 = hashlib.sha256(password.encode()).digest()
    p2 = hashlib.sha256(p1).digest()
    return _xor(p1, hashlib.sha256(p2 + nonce[:20]).digest())


def ed25519_signature(password: str, message: bytes) -> bytes:
    """MariaDB client_ed25519: sign ``message`` with the key whose expanded secret is SHA-512(password)."""
    h = hashlib.sha512(password.encode()).digest()
    s = bytearray(h[:32])
    s[0] &= 248
    s[31] = (s[31] & 127) | 64
    scalar = bytes(s)
    r = bindings.crypto_core_ed25519_scalar_reduce(hashlib.sha512(h[32:] + message).digest())
    big_r = bindings.crypto_scalarmult_ed25519_base_noclamp(r)
    big_a = bindings.crypto_scalarmult_ed25519_base_noclamp(scalar)
    k = bindings.crypto_core_ed25519_scalar_reduce(hashlib.sha512(big_r + big_a + message).digest())
    return bytes(big_r + bindings.crypto_core_ed25519_scalar_add(bindings.crypto_core_ed25519_scalar_mul(k, scalar), r))
