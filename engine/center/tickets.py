"""Center-signed tickets (CT-1): the one-line text a Center issues and a daemon verifies.

A ticket is ``mct1.<base64url(body)>.<base64url(signature)>`` (docs/center.md, Tickets):
``body`` is the canonical JSON of a fixed set of fields and ``signature`` is Ed25519 by the
Center's key over ``b"memories.center.ticket\\x00\\x01" + body``. The Center issues them
(``engine.center`` admin routes) and a daemon in tickets mode verifies them against the key it
pinned in ``[[centers]]``; both use this module, so the two sides cannot disagree on the format.

Verification is strict because the text comes from outside: one prefix, three parts,
unpadded base64url, a signature by the pinned key, a body that is *exactly* its own canonical
encoding (so a ticket has one byte form and one id), no unknown fields, and typed values.
Anything else is ``ticket_invalid``; a well-formed ticket past its expiry is ``ticket_expired``.
Replay, revocation and generation checks need state (what this device applied, what the
Center says now) and belong to the caller; their codes are registered in ``engine.errors``.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass
from typing import Any, Final

from nacl.signing import SigningKey

from engine.crypto.canonical import b64e, canonical_bytes, decode_canonical
from engine.crypto.keys import SignatureError, fingerprint, sign, verify
from engine.errors import MemoriesError

__all__ = [
    "Ticket",
    "TICKET_PREFIX",
    "TICKET_DOMAIN",
    "TICKET_KINDS",
    "MAX_TICKET_CHARS",
    "issue_ticket",
    "verify_ticket",
    "ticket_body",
]

TICKET_PREFIX: Final = "mct1"
TICKET_DOMAIN: Final = b"memories.center.ticket\x00\x01"
TICKET_KINDS: Final[tuple[str, ...]] = ("grant", "device")
# The scopes of engine.agents.grants.SCOPES, repeated here so that this module (imported by
# the daemon and the Center alike) stays a leaf; tests/center/test_tickets.py keeps them equal.
TICKET_SCOPES: Final[tuple[str, ...]] = ("read", "write", "read_write", "read_write_delete", "allow_all")
# A ticket is pasted on a command line or sent in one JSON field: a few hundred bytes. The
# bound keeps a hostile input from costing more than a small parse.
MAX_TICKET_CHARS: Final = 8192
MAX_VAULTS: Final = 64

_REQUIRED: Final = frozenset({"v", "kind", "id", "center", "generation", "name", "scope", "vaults", "issued_ms", "expires_ms"})
_OPTIONAL: Final = frozenset({"device"})
_HEX32: Final = re.compile(r"[0-9a-f]{32}")
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
# Grant and vault names as the engine accepts them elsewhere: printable, no control characters.
_NAME: Final = re.compile(r"[^\x00-\x1f\x7f]{1,128}")
_B64URL: Final = re.compile(r"[A-Za-z0-9_-]*")
_MAX_INT: Final = 2**53  # JSON-safe; also far beyond any millisecond timestamp or generation


@dataclass(frozen=True)
class Ticket:
    """A verified ticket: every field typed, plus its original text."""

    kind: str
    ticket_id: str
    center: str
    generation: int
    name: str
    scope: str
    vaults: tuple[str, ...]
    issued_ms: int
    expires_ms: int
    device: str | None
    text: str

    def body(self) -> dict[str, Any]:
        """The signed body as a dict (the canonical form the signature covers)."""
        out: dict[str, Any] = {
            "v": 1,
            "kind": self.kind,
            "id": self.ticket_id,
            "center": self.center,
            "generation": self.generation,
            "name": self.name,
            "scope": self.scope,
            "vaults": list(self.vaults),
            "issued_ms": self.issued_ms,
            "expires_ms": self.expires_ms,
        }
        if self.device is not None:
            out["device"] = self.device
        return out


def _invalid(reason: str) -> MemoriesError:
    # The reason names a field or a step, never the ticket's bytes.
    return MemoriesError("ticket_invalid", f"The Center ticket is invalid ({reason}); nothing was changed.")


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int:
    value = body[key]
    if value.__class__ is not int or not minimum <= value <= _MAX_INT:
        raise _invalid(f"field {key}")
    return int(value)


def _str_field(body: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = body[key]
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise _invalid(f"field {key}")
    return value


def _check_body(body: object) -> dict[str, Any]:
    """The body's fields, typed and checked; ``ticket_invalid`` naming the first bad field."""
    if not isinstance(body, dict):
        raise _invalid("body is not an object")
    keys = set(body)
    if not keys >= _REQUIRED:
        raise _invalid("missing field " + sorted(_REQUIRED - keys)[0])
    if keys - _REQUIRED - _OPTIONAL:
        raise _invalid("unknown field")
    if body["v"].__class__ is not int or body["v"] != 1:
        raise _invalid("unsupported version")
    if body["kind"] not in TICKET_KINDS:
        raise _invalid("unknown kind")
    if body["scope"] not in TICKET_SCOPES:
        raise _invalid("unknown scope")
    _str_field(body, "id", _HEX32)
    _str_field(body, "center", _HEX64)
    _str_field(body, "name", _NAME)
    _int_field(body, "generation", 1)
    issued = _int_field(body, "issued_ms", 0)
    expires = _int_field(body, "expires_ms", 0)
    if expires <= issued:
        raise _invalid("expiry is not after issue")
    vaults = body["vaults"]
    if not isinstance(vaults, list) or not 1 <= len(vaults) <= MAX_VAULTS:
        raise _invalid("field vaults")
    for vault in vaults:
        if not isinstance(vault, str) or _NAME.fullmatch(vault) is None:
            raise _invalid("field vaults")
    if len(set(vaults)) != len(vaults):
        raise _invalid("duplicate vault")
    if "device" in body:
        _str_field(body, "device", _HEX64)
    elif body["kind"] == "device":
        raise _invalid("a device ticket names no device")
    return body


def ticket_body(
    *,
    kind: str,
    ticket_id: str,
    center_public_key: bytes,
    generation: int,
    name: str,
    scope: str,
    vaults: list[str],
    issued_ms: int,
    expires_ms: int,
    device: str | None = None,
) -> dict[str, Any]:
    """A ticket body with the protocol's field names (the Center's side builds it here)."""
    body: dict[str, Any] = {
        "v": 1,
        "kind": kind,
        "id": ticket_id,
        "center": fingerprint(center_public_key),
        "generation": generation,
        "name": name,
        "scope": scope,
        "vaults": list(vaults),
        "issued_ms": issued_ms,
        "expires_ms": expires_ms,
    }
    if device is not None:
        body["device"] = device
    return body


def issue_ticket(signing_key: SigningKey, body: dict[str, Any]) -> str:
    """Sign ``body`` as a ticket; refuses a body a verifier would refuse (``ticket_invalid``)."""
    _check_body(body)
    if body["center"] != fingerprint(bytes(signing_key.verify_key)):
        raise _invalid("the body names another Center")
    raw = canonical_bytes(body)
    signature = sign(signing_key, TICKET_DOMAIN + raw)
    text = f"{TICKET_PREFIX}.{b64e(raw)}.{b64e(signature)}"
    if len(text) > MAX_TICKET_CHARS:
        raise _invalid("too long")
    return text


def _unb64(part: str, what: str) -> bytes:
    # Strict unpadded base64url: one text form per byte string (no padding, no stray bits).
    if _B64URL.fullmatch(part) is None or len(part) % 4 == 1:
        raise _invalid(f"{what} encoding")
    try:
        raw = binascii.a2b_base64(
            (part + "=" * (-len(part) % 4)).encode("ascii").translate(bytes.maketrans(b"-_", b"+/")),
            strict_mode=True,
        )
    except binascii.Error:
        raise _invalid(f"{what} encoding") from None
    if b64e(raw) != part:
        raise _invalid(f"{what} encoding")
    return raw


def verify_ticket(text: str, pinned_public_key: bytes, now_ms: int) -> Ticket:
    """The ticket in ``text`` if the pinned key signed it and it has not expired.

    Raises ``ticket_invalid`` (syntax, signature, wrong key, unknown fields, kind or scope)
    or ``ticket_expired``. Nothing is echoed back from ``text``.
    """
    if not isinstance(text, str):
        raise _invalid("not text")
    text = text.strip()
    if len(text) > MAX_TICKET_CHARS:
        raise _invalid("too long")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != TICKET_PREFIX:
        raise _invalid("not a Memories Center ticket")
    raw = _unb64(parts[1], "body")
    signature = _unb64(parts[2], "signature")
    if len(signature) != 64:
        raise _invalid("signature length")
    pinned = bytes(pinned_public_key)
    if len(pinned) != 32:
        raise _invalid("the pinned Center key is not an Ed25519 public key")
    try:
        verify(pinned, TICKET_DOMAIN + raw, signature)
    except SignatureError:
        raise _invalid("the signature is not the pinned Center's") from None
    try:
        decoded = decode_canonical(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid("body is not canonical JSON") from None
    body = _check_body(decoded)
    try:
        canonical = canonical_bytes(body)
    except TypeError:  # a tagged-bytes value decoded from {"$b": …}
        raise _invalid("body is not canonical JSON") from None
    if canonical != raw:
        raise _invalid("body is not canonical JSON")
    if body["center"] != fingerprint(pinned):
        raise _invalid("the ticket names another Center")
    ticket = Ticket(
        kind=body["kind"],
        ticket_id=body["id"],
        center=body["center"],
        generation=body["generation"],
        name=body["name"],
        scope=body["scope"],
        vaults=tuple(body["vaults"]),
        issued_ms=body["issued_ms"],
        expires_ms=body["expires_ms"],
        device=body.get("device"),
        text=text,
    )
    if now_ms >= ticket.expires_ms:
        raise MemoriesError("ticket_expired", "The Center ticket has expired; ask the Center's operator for a new one.")
    return ticket
