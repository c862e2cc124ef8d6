"""KeePass's AES-KDF in native code: the transformed key of a KDBX 3.1 (or AES-KDF KDBX 4) file.

AES-KDF encrypts the 32-byte composite key with AES-256-ECB under the file's seed, ``rounds``
times over (KeePassXC tunes the count to a time: 1.8 million rounds for a 100 ms target on a
slow machine), then hashes it. pykeepass runs that loop in Python, one library call per round:
about 6 s of CPU for such a file before a single entry is read (issue 32).

The two 16-byte halves of the key are independent ECB blocks, and iterating a block cipher is
what CBC does over zero blocks: with a zero IV, C₀ = E(x), and each following zero block gives
Cᵢ = E(0 ⊕ Cᵢ₋₁) = E(Cᵢ₋₁). So the last block of the CBC encryption of ``x`` followed by
``rounds - 1`` zero blocks is ``x`` encrypted ``rounds`` times, computed by OpenSSL (AES-NI)
in one pass. The result is handed to pykeepass as the precomputed ``transformed_key``; the
file's own checks (header hash, payload hash) still decide whether the password was right.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

__all__ = ["aes_kdf", "transformed_key"]

# Zero blocks encrypted per call: 1 MiB of input, so memory stays flat whatever the count.
_CHUNK_BLOCKS = 1 << 16
_ZEROS = bytes(16 * _CHUNK_BLOCKS)
_AES_KDF_UUID = bytes.fromhex("c9d9f39a628a4460bf740d08c18a4fea")
_KDBX3_SEED, _KDBX3_ROUNDS, _KDBX4_KDF, _END = 5, 6, 11, 0


def aes_kdf(seed: bytes, rounds: int, composite: bytes) -> bytes:
    """SHA-256 of ``composite`` (32 bytes) encrypted ``rounds`` times with AES-256-ECB under ``seed``."""
    if len(seed) != 32 or len(composite) != 32 or rounds < 0:
        raise ValueError("AES-KDF takes a 32-byte seed and key and a non-negative round count")
    halves: list[bytes] = []
    for half in (composite[:16], composite[16:]):
        if rounds == 0:
            halves.append(half)
            continue
        encryptor = Cipher(algorithms.AES(seed), modes.CBC(bytes(16))).encryptor()
        last = encryptor.update(half)  # round 1: E(half ⊕ 0)
        left = rounds - 1
        while left:
            count = min(left, _CHUNK_BLOCKS)
            last = encryptor.update(_ZEROS if count == _CHUNK_BLOCKS else _ZEROS[: 16 * count])[-16:]
            left -= count
        halves.append(last)
    return hashlib.sha256(b"".join(halves)).digest()


def _kdbx3_params(data: bytes, offset: int) -> tuple[bytes, int] | None:
    seed: bytes | None = None
    rounds: int | None = None
    while offset + 3 <= len(data):
        field, size = data[offset], int.from_bytes(data[offset + 1 : offset + 3], "little")
        value = data[offset + 3 : offset + 3 + size]
        offset += 3 + size
        if field == _END:
            break
        if field == _KDBX3_SEED:
            seed = value
        elif field == _KDBX3_ROUNDS and size == 8:
            rounds = int.from_bytes(value, "little")
    return (seed, rounds) if seed is not None and rounds is not None else None


def _variant_dict(data: bytes) -> dict[str, bytes]:
    """KDBX 4's VariantDictionary (version, then type, key, value entries), values as raw bytes."""
    out: dict[str, bytes] = {}
    offset = 2  # the version
    while offset < len(data):
        kind = data[offset]
        if kind == 0:
            break
        (key_size,) = struct.unpack_from("<i", data, offset + 1)
        key = data[offset + 5 : offset + 5 + key_size].decode("utf-8", "replace")
        offset += 5 + key_size
        (value_size,) = struct.unpack_from("<i", data, offset)
        out[key] = data[offset + 4 : offset + 4 + value_size]
        offset += 4 + value_size
    return out


def _kdbx4_params(data: bytes, offset: int) -> tuple[bytes, int] | None:
    while offset + 5 <= len(data):
        field, size = data[offset], int.from_bytes(data[offset + 1 : offset + 5], "little")
        value = data[offset + 5 : offset + 5 + size]
        offset += 5 + size
        if field == _END:
            return None
        if field == _KDBX4_KDF:
            params = _variant_dict(value)
            seed, rounds = params.get("S"), params.get("R")
            if params.get("$UUID") != _AES_KDF_UUID or seed is None or rounds is None or len(rounds) != 8:
                return None  # Argon2: pykeepass already runs it in native code
            return seed, int.from_bytes(rounds, "little")
    return None


def transformed_key(path: Path, password: str | None, keyfile: Path | None) -> bytes | None:
    """The file's transformed key when it uses AES-KDF; None for anything else (Argon2, a header
    this does not understand), which pykeepass then derives itself, as before."""
    from pykeepass.kdbx_parsing.common import compute_key_composite

    try:
        with path.open("rb") as handle:
            head = handle.read(1 << 16)  # the outer header is far smaller
        major = int.from_bytes(head[10:12], "little")
        found = _kdbx3_params(head, 12) if major == 3 else _kdbx4_params(head, 12) if major == 4 else None
        if found is None or len(found[0]) != 32:
            return None
        composite: Any = compute_key_composite(password=password, keyfile=str(keyfile) if keyfile else None)
    except Exception:  # a malformed header or key file: pykeepass reports it in its own words
        return None
    if not isinstance(composite, bytes) or len(composite) != 32:
        return None
    return aes_kdf(found[0], found[1], composite)
