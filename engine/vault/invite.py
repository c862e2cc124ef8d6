"""Invitations: how another person's devices become members of a vault (PO-3, ID-1, ID-6; issue 29).

1. The person to invite runs ``memories whoami --invite --owner FINGERPRINT`` on one of their
   devices. The **invitation** names their user key, the user-signed certificate of every
   device of theirs that device knows (device key + X25519 exchange key, ID-1), a display
   name, the full SHA-256 fingerprint of the inviting Owner's user key it pins (what
   ``memories whoami`` shows on the Owner's device), a creation time, an expiry (24 hours by
   default, at most 7 days) and 16 random bytes, signed by their *user* key. Text form:
   ``memories-invite-v1.<base64url>`` of the canonical encoding of ``{"body", "sig"}``.
2. The Owner (or an Admin) runs ``memories vault member add INVITATION --role ROLE``:
   :func:`parse_invite` checks the format, every signature, the pin (the invitation must be
   meant for this user), the clock, then the engine adds the user with the role and each
   device in one signed policy change; sync seals the epoch keys to those devices (PO-3).
3. The invitee's device keeps the pin (a sealed ``invite_pin`` record): until the invitation
   expires it accepts a sync peer of the pinned user, and a vault that peer sends which
   authorizes this device (engine/sync/merge.py). Full fingerprints are shown at both ends
   (ID-6): the Owner sees the invitee's user and device fingerprints, the invitee typed the
   Owner's.

Errors are :class:`~engine.errors.MemoriesError` with the ``invite_*`` codes; messages never
contain key bytes (a 12-character fingerprint prefix at most).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

from engine.crypto.canonical import canonical_bytes, domain_bytes
from engine.crypto.keys import CERT_TAG, fingerprint, sign
from engine.crypto.libsodium import ed25519_verify_detached
from engine.errors import MemoriesError
from engine.vault.joining import (
    _decode_signed_body,
    _encode_text,
    _is_ms,
    _usable_exchange_key,
    _valid_name,
)

__all__ = [
    "INVITE_PREFIX",
    "INVITE_TAG",
    "DEFAULT_LIFETIME_MS",
    "MAX_LIFETIME_MS",
    "MAX_DEVICES",
    "MAX_INVITE_TEXT",
    "Invite",
    "make_invite",
    "invite_text",
    "decode_invite",
    "parse_invite",
    "invite_id",
    "parse_fingerprint",
    "PIN_RECORD",
    "pinned_user",
]

INVITE_PREFIX = "memories-invite-v1."
INVITE_TAG = "memories.invite"
DEFAULT_LIFETIME_MS = 24 * 60 * 60 * 1000
MAX_LIFETIME_MS = 7 * 24 * 60 * 60 * 1000
CLOCK_SKEW_MS = 5 * 60 * 1000
MAX_DEVICES = 16
MAX_INVITE_TEXT = 16 * 1024
_KEY = 32
_NONCE = 16
_FIELDS = frozenset({"v", "user", "name", "owner", "devices", "created_ms", "expires_ms", "nonce"})
_CERT_FIELDS = frozenset({"v", "user", "device", "exchange", "created_ms"})
_HEX = frozenset("0123456789abcdef")
# An invitation made here pins the inviting Owner's user (a sealed state record): until it
# expires, a sync peer of that user is accepted and may bring a vault that authorizes this
# device (engine/sync/merge.py).
PIN_RECORD = "invite_pin"


@dataclass(frozen=True)
class Invite:
    """A verified invitation: ``devices`` are (certificate body, user signature) pairs."""

    user_pub: bytes
    name: str
    owner_fp: bytes  # SHA-256 of the pinned inviting user's key
    devices: tuple[tuple[dict[str, Any], bytes], ...]
    created_ms: int
    expires_ms: int
    nonce: bytes
    signature: bytes

    def body(self) -> dict[str, Any]:
        return {
            "v": 1,
            "user": self.user_pub,
            "name": self.name,
            "owner": self.owner_fp,
            "devices": [{"cert": cert, "sig": sig} for cert, sig in self.devices],
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
            "nonce": self.nonce,
        }

    def signed_bytes(self) -> bytes:
        return domain_bytes(INVITE_TAG, 1, self.body())

    def device_keys(self) -> list[bytes]:
        return [bytes(cert["device"]) for cert, _ in self.devices]


def invite_id(invite: Invite) -> bytes:
    """SHA-256 of the signed invitation bytes."""
    return hashlib.sha256(invite.signed_bytes()).digest()


def parse_fingerprint(text: str, what: str = "--owner") -> bytes:
    """A full 64-hex-digit SHA-256 fingerprint (ID-4: never a shortened one) as 32 bytes."""
    value = "".join(str(text).split()).lower()  # `whoami` prints it in groups of four
    if len(value) != 64 or not set(value) <= _HEX:
        raise MemoriesError(
            "invalid_input",
            f"{what} takes the full 64-hex-digit user fingerprint that `memories whoami` shows on the Owner's device.",
        )
    return bytes.fromhex(value)


def _invalid(detail: str) -> MemoriesError:
    return MemoriesError("invite_invalid", f"The invitation is invalid: {detail}; nothing was changed.")


def make_invite(
    user_key: Any,
    devices: list[tuple[dict[str, Any], bytes]],
    name: str,
    owner_fp: bytes,
    now_ms: int,
    lifetime_ms: int = DEFAULT_LIFETIME_MS,
) -> tuple[Invite, str]:
    """Make and sign an invitation with the user key; returns it and its one-line text."""
    if not _valid_name(name):
        raise MemoriesError("invalid_input", "The name in an invitation must be 1–64 printable characters.")
    if not isinstance(owner_fp, bytes) or len(owner_fp) != _KEY:
        raise MemoriesError("invalid_input", "The Owner's fingerprint must be the full 64 hex digits.")
    if not (isinstance(lifetime_ms, int) and 0 < lifetime_ms <= MAX_LIFETIME_MS):
        raise MemoriesError("invalid_input", "An invitation lives between 1 ms and 7 days.")
    if not _is_ms(now_ms) or not _is_ms(now_ms + lifetime_ms):
        raise MemoriesError("invalid_input", "The clock reading is out of range.")
    user_pub = bytes(user_key.verify_key)
    if hmac.compare_digest(hashlib.sha256(user_pub).digest(), owner_fp):
        raise MemoriesError("invalid_input", "That fingerprint is your own; give the inviting Owner's (their `memories whoami`).")
    if not 1 <= len(devices) <= MAX_DEVICES:
        raise MemoriesError("invalid_input", f"An invitation names 1–{MAX_DEVICES} devices.")
    unsigned = Invite(
        user_pub,
        name,
        owner_fp,
        tuple((dict(c), bytes(s)) for c, s in devices),
        now_ms,
        now_ms + lifetime_ms,
        os.urandom(_NONCE),
        b"",
    )
    invite = Invite(**{**unsigned.__dict__, "signature": sign(user_key, unsigned.signed_bytes())})
    return invite, invite_text(invite)


def invite_text(invite: Invite) -> str:
    return _encode_text(INVITE_PREFIX, canonical_bytes({"body": invite.body(), "sig": invite.signature}))


def _check_device(user: bytes, entry: object) -> tuple[dict[str, Any], bytes]:
    if not isinstance(entry, dict) or set(entry) != {"cert", "sig"}:
        raise _invalid("a device entry is malformed")
    cert, sig = entry["cert"], entry["sig"]
    if not isinstance(cert, dict) or set(cert) != _CERT_FIELDS or cert["v"] != 1 or isinstance(cert["v"], bool):
        raise _invalid("a device certificate is malformed")
    if not all(isinstance(cert[k], bytes) and len(cert[k]) == _KEY for k in ("user", "device", "exchange")):
        raise _invalid("a device certificate has a key that is not 32 bytes")
    if not _is_ms(cert["created_ms"]) or not isinstance(sig, bytes) or len(sig) != 64:
        raise _invalid("a device certificate is malformed")
    if not hmac.compare_digest(cert["user"], user):
        raise _invalid("a device certificate names another user")
    if not ed25519_verify_detached(user, domain_bytes(CERT_TAG, 1, cert), sig):
        raise _invalid("a device certificate is not signed by the inviting user's key")
    if not _usable_exchange_key(cert["exchange"]):
        raise _invalid("a device's exchange key is not a usable X25519 key")
    return cert, sig


def decode_invite(text: str) -> Invite:
    """Check an invitation's format and every signature (no pin, no clock)."""
    body, sig = _decode_signed_body(text, INVITE_PREFIX, MAX_INVITE_TEXT, _FIELDS, "invitation", _invalid)
    for field in ("user", "owner"):
        if not isinstance(body[field], bytes) or len(body[field]) != _KEY:
            raise _invalid(f"its {field} key is not 32 bytes")
    if not isinstance(body["nonce"], bytes) or len(body["nonce"]) != _NONCE:
        raise _invalid("its nonce is not 16 bytes")
    if not _valid_name(body["name"]):
        raise _invalid("its name is not 1–64 printable characters")
    created, expires = body["created_ms"], body["expires_ms"]
    if not (_is_ms(created) and _is_ms(expires) and 0 < expires - created <= MAX_LIFETIME_MS):
        raise _invalid("its lifetime is not between 1 ms and 7 days")
    entries = body["devices"]
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_DEVICES:
        raise _invalid(f"it does not name 1–{MAX_DEVICES} devices")
    if not isinstance(sig, bytes) or len(sig) != 64:
        raise _invalid("its signature is missing")
    user = body["user"]
    if not ed25519_verify_detached(user, domain_bytes(INVITE_TAG, 1, body), sig):
        raise _invalid("it is not signed by the user it names")
    devices = tuple(_check_device(user, entry) for entry in entries)
    if len({bytes(c["device"]) for c, _ in devices}) != len(devices):
        raise _invalid("it names a device twice")
    return Invite(user, body["name"], body["owner"], devices, created, expires, body["nonce"], sig)


def parse_invite(text: str, *, owner_pub: bytes, now_ms: int) -> Invite:
    """Verify an invitation on the inviting device: format, signatures, pin and clock.

    ``owner_pub`` is THIS user's key: the invitation must pin its fingerprint.
    """
    invite = decode_invite(text)
    if not hmac.compare_digest(invite.owner_fp, hashlib.sha256(bytes(owner_pub)).digest()):
        raise MemoriesError(
            "invite_wrong_owner",
            f"The invitation is meant for the user with fingerprint {invite.owner_fp.hex()[:12]}…, not this one "
            f"({fingerprint(bytes(owner_pub))[:12]}…); ask for a new one made with your fingerprint from `memories whoami`.",
        )
    if hmac.compare_digest(invite.user_pub, bytes(owner_pub)):
        raise _invalid("it invites you, its own Owner")
    if now_ms > invite.expires_ms:
        raise MemoriesError("invite_expired")
    if invite.created_ms > now_ms + CLOCK_SKEW_MS:
        raise _invalid("it was made more than 5 minutes in the future; check both clocks")
    return invite


def pinned_user(extra_records: dict[str, list[tuple[int, dict[str, Any]]]], user_pub: bytes, now_ms: int) -> bool:
    """Whether an unexpired invitation made on this device pins ``user_pub`` as its inviting Owner."""
    digest = hashlib.sha256(bytes(user_pub)).digest()
    return any(
        hmac.compare_digest(bytes(record["owner"]), digest) and int(record["expires_ms"]) >= now_ms
        for _, record in extra_records.get(PIN_RECORD, [])
    )
