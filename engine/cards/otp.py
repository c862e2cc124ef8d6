"""HOTP (RFC 4226) and TOTP (RFC 6238) codes.

Hand-written on the standard library's ``hmac`` because it is a dozen lines and the
vault needs exact control over the counter (CD-5); RFC vectors in the tests pin it.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["ALGORITHMS", "DIGITS", "hotp", "totp", "totp_counter", "MAX_COUNTER"]

ALGORITHMS: dict[str, Callable[..., Any]] = {
    "SHA1": hashlib.sha1,
    "SHA256": hashlib.sha256,
    "SHA512": hashlib.sha512,
}
DIGITS = (6, 7, 8)
MAX_COUNTER = 2**63 - 1  # the 8-byte counter, kept in a signed-safe range


def hotp(key: bytes, counter: int, *, digits: int = 6, algorithm: str = "SHA1") -> str:
    """RFC 4226 section 5.3: dynamic truncation of HMAC(key, counter)."""
    if digits not in DIGITS:
        raise ValueError("digits must be 6, 7 or 8")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValueError("counter out of range")
    mac = hmac.new(key, struct.pack(">Q", counter), ALGORITHMS[algorithm]).digest()
    offset = mac[-1] & 0x0F
    binary = struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF
    return str(binary % 10**digits).zfill(digits)


def totp_counter(unix_seconds: int, period: int = 30) -> int:
    """RFC 6238 section 4: T = floor((now - T0) / X) with T0 = 0."""
    if period <= 0:
        raise ValueError("period must be positive")
    return unix_seconds // period


def totp(key: bytes, unix_seconds: int, *, period: int = 30, digits: int = 6, algorithm: str = "SHA1") -> str:
    return hotp(key, totp_counter(unix_seconds, period), digits=digits, algorithm=algorithm)
