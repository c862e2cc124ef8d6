"""Strict parsing of ``otpauth://`` URIs and base32 secrets (CD-4).

These bytes come from outside (a QR export, a web page), so every field is checked
and anything unexpected is a typed ``invalid_otpauth`` error. Messages name the
problem, never the secret or the URI.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from engine.cards.otp import ALGORITHMS, DIGITS, MAX_COUNTER
from engine.errors import MemoriesError

__all__ = ["OtpParams", "parse_otpauth", "decode_base32", "MAX_URI_LENGTH"]

MAX_URI_LENGTH = 4096
MIN_KEY_BYTES = 10  # 80 bits: the shortest secret common services issue
MAX_KEY_BYTES = 128
MAX_PERIOD = 3600
_B32 = re.compile(r"^[A-Z2-7]+=*$")
_NUMBER = re.compile(r"^[0-9]{1,20}$")
# Parameters some exporters add that carry no OTP semantics; anything else is refused.
_COSMETIC = frozenset({"image", "icon", "color", "lock", "tags"})


@dataclass(frozen=True)
class OtpParams:
    kind: str  # "totp" | "hotp"
    key: bytes
    algorithm: str = "SHA1"
    digits: int = 6
    period: int = 30
    counter: int = 0
    issuer: str = ""
    account: str = ""

    def public(self) -> dict[str, object]:
        """Non-secret parameters (stored in the clear part of the credential summary)."""
        fields: dict[str, object] = {"type": self.kind, "algorithm": self.algorithm, "digits": self.digits}
        if self.kind == "totp":
            fields["period"] = self.period
        else:
            fields["counter"] = self.counter
        return fields


def _fail(message: str) -> MemoriesError:
    return MemoriesError("invalid_otpauth", message)


def decode_base32(text: str) -> bytes:
    """RFC 4648 base32, case-insensitive, spaces ignored, padding optional but never wrong."""
    cleaned = "".join(text.split()).upper()
    if not cleaned or not _B32.match(cleaned):
        raise _fail("The OTP secret is not base32 (letters A–Z and digits 2–7).")
    stripped = cleaned.rstrip("=")
    if len(stripped) % 8 not in (0, 2, 4, 5, 7):
        raise _fail("The OTP secret has an impossible base32 length.")
    if "=" in cleaned and len(cleaned) % 8 != 0:
        raise _fail("The OTP secret has wrong base32 padding.")
    padded = stripped + "=" * (-len(stripped) % 8)
    try:
        key = base64.b32decode(padded)
    except (binascii.Error, ValueError):
        raise _fail("The OTP secret is not valid base32.") from None
    if base64.b32encode(key).decode("ascii").rstrip("=") != stripped:
        raise _fail("The OTP secret has non-zero trailing bits (a truncated or mistyped secret).")
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise _fail(f"The OTP secret must decode to {MIN_KEY_BYTES}–{MAX_KEY_BYTES} bytes.")
    return key


def _int_param(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    if not _NUMBER.match(raw):
        raise _fail(f"The otpauth parameter {name!r} must be a non-negative whole number.")
    value = int(raw)
    if not low <= value <= high:
        raise _fail(f"The otpauth parameter {name!r} must be between {low} and {high}.")
    return value


def _clean_text(value: str, what: str) -> str:
    if len(value) > 256 or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise _fail(f"The otpauth {what} is too long or has control characters.")
    return value.strip()


def parse_otpauth(uri: str, *, expect: str | None = None) -> OtpParams:
    """Parse ``otpauth://totp|hotp/[issuer:]account?secret=…&…``; ``expect`` pins the type."""
    if not isinstance(uri, str) or len(uri) > MAX_URI_LENGTH:
        raise _fail(f"An otpauth URI is at most {MAX_URI_LENGTH} characters.")
    try:
        parts = urlsplit(uri.strip())
        pairs = parse_qsl(parts.query, keep_blank_values=True, max_num_fields=32)
    except ValueError:
        raise _fail("The otpauth URI is malformed.") from None
    if parts.scheme.lower() != "otpauth":
        raise _fail("The URI scheme must be otpauth://.")
    kind = parts.netloc.lower()
    if kind not in ("totp", "hotp"):
        raise _fail("The otpauth type must be totp or hotp.")
    if expect is not None and kind != expect:
        raise _fail(f"Expected an otpauth://{expect}/ URI.")
    if parts.fragment:
        raise _fail("The otpauth URI must not have a fragment.")
    params: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        if key in params:
            raise _fail(f"The otpauth parameter {key!r} appears twice.")
        params[key] = value
    unknown = set(params) - {"secret", "issuer", "algorithm", "digits", "period", "counter"} - _COSMETIC
    if unknown:
        raise _fail(f"Unknown otpauth parameter {sorted(unknown)[0][:40]!r}.")
    if "secret" not in params:
        raise _fail("The otpauth URI has no secret.")
    key_bytes = decode_base32(params["secret"])
    algorithm = params.get("algorithm", "SHA1").upper()
    if algorithm not in ALGORITHMS:
        raise _fail("The otpauth algorithm must be SHA1, SHA256 or SHA512.")
    digits = _int_param(params, "digits", 6, DIGITS[0], DIGITS[-1])
    if kind == "totp":
        if "counter" in params:
            raise _fail("A totp URI has no counter.")
        period = _int_param(params, "period", 30, 1, MAX_PERIOD)
        counter = 0
    else:
        if "period" in params:
            raise _fail("An hotp URI has no period.")
        if "counter" not in params:
            raise _fail("An hotp URI needs a counter.")
        period = 30
        counter = _int_param(params, "counter", 0, 0, MAX_COUNTER - 1)
    label = _clean_text(unquote(parts.path.lstrip("/")), "label")
    issuer_label, sep, account = label.partition(":")
    if not sep:
        issuer_label, account = "", label
    issuer_param = _clean_text(params.get("issuer", ""), "issuer")
    if issuer_param and issuer_label and issuer_param != issuer_label.strip():
        raise _fail("The otpauth issuer parameter and the label's issuer disagree.")
    return OtpParams(
        kind=kind,
        key=key_bytes,
        algorithm=algorithm,
        digits=digits,
        period=period,
        counter=counter,
        issuer=issuer_param or issuer_label.strip(),
        account=account.strip(),
    )
