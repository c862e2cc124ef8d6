"""Join requests and approvals for a user's new device (SPEC ID-3, ID-4, ID-5; docs/formats.md).

1. The new device makes a **join request**: its Ed25519 device key, its X25519 exchange key,
   a name, the approving device's Ed25519 key it pins (from ``memories whoami`` there), a
   creation time, an expiry (15 minutes by default, at most 24 hours) and 16 random bytes,
   signed by the new device key. Text form: ``memories-join-request-v1.<base64url>``.
2. The approving device parses it against its own device key (:func:`parse_request`), shows
   the full SHA-256 fingerprint of the new device key (:func:`request_fingerprint`), and on
   approval makes an **approval** (:func:`make_approval`): the grant (user signing key, the new
   device's certificate, vault records — filled by the engine) inside an envelope
   (engine/crypto/envelope.py) sealed to the request's exchange key, signed by the approving
   device key, purpose ``join-approval``. Text form: ``memories-join-approval-v1.<base64url>``.
   The engine records :func:`request_id` as consumed in the same commit as the approval, so
   the same request is refused afterwards (``consumed=`` of :func:`parse_request`).
3. The new device opens the approval (:func:`open_approval`) only if it is sealed to it, signed
   by the pinned approving device, bound to its pending request and not expired.

Errors are :class:`~engine.errors.MemoriesError` with the ``join_*`` codes; messages never
contain key bytes (a 12-character fingerprint prefix at most).
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import hmac
import os
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, Protocol

from nacl import bindings
from nacl.exceptions import CryptoError

from engine.crypto.canonical import b64e, canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.envelope import EnvelopeError, open_envelope, seal_envelope
from engine.crypto.keys import CERT_TAG, certificate_body, fingerprint, sign
from engine.crypto.libsodium import ed25519_verify_detached
from engine.errors import MemoriesError

__all__ = [
    "REQUEST_PREFIX",
    "APPROVAL_PREFIX",
    "REQUEST_TAG",
    "APPROVAL_PURPOSE",
    "DEFAULT_LIFETIME_MS",
    "MAX_LIFETIME_MS",
    "CLOCK_SKEW_MS",
    "JoinRequest",
    "Approver",
    "make_request",
    "request_text",
    "decode_request",
    "parse_request",
    "request_id",
    "request_fingerprint",
    "short_fingerprint",
    "make_approval",
    "open_approval",
    "make_certificate",
]

REQUEST_PREFIX = "memories-join-request-v1."
APPROVAL_PREFIX = "memories-join-approval-v1."
REQUEST_TAG = "memories.join-request"
APPROVAL_PURPOSE = "join-approval"
DEFAULT_LIFETIME_MS = 15 * 60 * 1000
MAX_LIFETIME_MS = 24 * 60 * 60 * 1000
CLOCK_SKEW_MS = 5 * 60 * 1000
MAX_NAME_CHARS = 64
MAX_REQUEST_TEXT = 4096
MAX_APPROVAL_TEXT = 64 * 1024 * 1024
_KEY = 32
_NONCE = 16
_REQUEST_FIELDS = frozenset({"v", "device", "exchange", "name", "approver", "created_ms", "expires_ms", "nonce"})
_APPROVAL_FIELDS = frozenset({"v", "request_id", "grant", "issued_ms", "expires_ms"})
_MAX_MS = 2**63 - 1


class Approver(Protocol):
    """What :func:`make_approval` needs of a ``DeviceIdentity``: its device signing key."""

    @property
    def device_key(self) -> Any: ...


@dataclass(frozen=True)
class JoinRequest:
    """A verified join request; ``signature`` is the new device key's over :func:`request_id`'s bytes."""

    device_pub: bytes
    exchange_pub: bytes
    device_name: str
    approver_pub: bytes
    created_ms: int
    expires_ms: int
    nonce: bytes
    signature: bytes

    def body(self) -> dict[str, Any]:
        return {
            "v": 1,
            "device": self.device_pub,
            "exchange": self.exchange_pub,
            "name": self.device_name,
            "approver": self.approver_pub,
            "created_ms": self.created_ms,
            "expires_ms": self.expires_ms,
            "nonce": self.nonce,
        }

    def signed_bytes(self) -> bytes:
        return domain_bytes(REQUEST_TAG, 1, self.body())


def short_fingerprint(public_key: bytes) -> str:
    """A 12-hex-digit display prefix; never the only check before approval (ID-4)."""
    return fingerprint(public_key)[:12]


def request_id(req: JoinRequest) -> bytes:
    """SHA-256 of the signed request bytes: what the approver records as consumed."""
    return hashlib.sha256(req.signed_bytes()).digest()


def request_fingerprint(req: JoinRequest) -> str:
    """The full SHA-256 fingerprint (64 hex digits) of the new device key (ID-4)."""
    return fingerprint(req.device_pub)


def _valid_name(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= MAX_NAME_CHARS and name.isprintable() and name.strip() != ""


def _is_ms(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_MS


def _usable_exchange_key(public: bytes) -> bool:
    # A low-order X25519 point gives an all-zero shared secret, which libsodium refuses.
    try:
        bindings.crypto_scalarmult(os.urandom(32), public)
    except CryptoError:
        return False
    return True


def _encode_text(prefix: str, raw: bytes) -> str:
    return prefix + b64e(raw)


def _decode_text(text: object, prefix: str, limit: int) -> bytes | None:
    """The bytes of a ``prefix.<base64url>`` text, or None. Only the exact canonical text decodes."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if len(text) > limit or not text.startswith(prefix) or not text.isascii():
        return None
    tail = text[len(prefix) :]
    if not tail or any(c in "=+/" for c in tail):
        return None
    padded = (tail + "=" * (-len(tail) % 4)).encode("ascii").translate(bytes.maketrans(b"-_", b"+/"))
    try:
        raw = binascii.a2b_base64(padded, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if b64e(raw) != tail:  # unused low bits set: another spelling of the same bytes
        return None
    return raw


def _decode_canonical_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = decode_canonical(raw)
        if not isinstance(value, dict) or canonical_bytes(value) != raw:
            return None
    except (ValueError, TypeError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return value


def _decode_signed_body(
    text: str, prefix: str, limit: int, fields: frozenset[str], kind: str, invalid: Callable[[str], MemoriesError]
) -> tuple[dict[str, Any], object]:
    """The version-1 ``body`` (exactly ``fields``) and ``sig`` of a ``prefix.`` text; raises ``invalid(...)``.

    Shared by join requests and invitations, whose outer form is the same: canonical
    ``{"body": ..., "sig": ...}``. The signature is checked by the caller.
    """
    raw = _decode_text(text, prefix, limit)
    if raw is None:
        raise invalid(f"it is not a complete `{prefix}` line")
    outer = _decode_canonical_object(raw)
    if outer is None or set(outer) != {"body", "sig"} or not isinstance(outer["body"], dict):
        raise invalid("its contents are damaged")
    body, sig = outer["body"], outer["sig"]
    if set(body) != fields or body["v"] != 1 or isinstance(body["v"], bool):
        raise invalid(f"it is not a version-1 {kind}")
    return body, sig


def _invalid_request(detail: str) -> MemoriesError:
    return MemoriesError("join_request_invalid", f"The join request is invalid: {detail}; nothing was changed.")


def make_request(
    device_key: Any,
    exchange_key: Any,
    name: str,
    approver_pub: bytes,
    now_ms: int,
    lifetime_ms: int = DEFAULT_LIFETIME_MS,
) -> tuple[JoinRequest, str]:
    """Make and sign a join request on the new device; returns it and its one-line text form.

    ``device_key`` is a ``nacl.signing.SigningKey``, ``exchange_key`` a ``nacl.public.PrivateKey``,
    ``approver_pub`` the approving device's Ed25519 key as ``memories whoami`` shows it there.
    """
    if not _valid_name(name):
        raise MemoriesError("invalid_input", f"The device name must be 1–{MAX_NAME_CHARS} printable characters.")
    if not isinstance(approver_pub, bytes) or len(approver_pub) != _KEY:
        raise MemoriesError("invalid_input", "The approving device key must be 32 bytes (see `memories whoami` there).")
    if not (isinstance(lifetime_ms, int) and 0 < lifetime_ms <= MAX_LIFETIME_MS):
        raise MemoriesError("invalid_input", "A join request lives between 1 ms and 24 hours.")
    if not _is_ms(now_ms) or not _is_ms(now_ms + lifetime_ms):
        raise MemoriesError("invalid_input", "The clock reading is out of range.")
    device_pub = bytes(device_key.verify_key)
    if hmac.compare_digest(device_pub, approver_pub):
        raise MemoriesError("invalid_input", "A device cannot approve its own join request.")
    unsigned = JoinRequest(
        device_pub=device_pub,
        exchange_pub=bytes(exchange_key.public_key),
        device_name=name,
        approver_pub=approver_pub,
        created_ms=now_ms,
        expires_ms=now_ms + lifetime_ms,
        nonce=os.urandom(_NONCE),
        signature=b"",
    )
    req = dataclasses.replace(unsigned, signature=sign(device_key, unsigned.signed_bytes()))
    return req, request_text(req)


def request_text(req: JoinRequest) -> str:
    """The single-line, copy-pastable text of a request (the CLI writes the same text to a file)."""
    return _encode_text(REQUEST_PREFIX, canonical_bytes({"body": req.body(), "sig": req.signature}))


def decode_request(text: str) -> JoinRequest:
    """Check a request's format and its self-signature only (no approver pin, no clock).

    The new device uses this to reload its own pending request; an approver uses
    :func:`parse_request`.
    """
    body, sig = _decode_signed_body(text, REQUEST_PREFIX, MAX_REQUEST_TEXT, _REQUEST_FIELDS, "request", _invalid_request)
    for field in ("device", "exchange", "approver"):
        if not isinstance(body[field], bytes) or len(body[field]) != _KEY:
            raise _invalid_request(f"its {field} key is not 32 bytes")
    if not isinstance(body["nonce"], bytes) or len(body["nonce"]) != _NONCE:
        raise _invalid_request("its nonce is not 16 bytes")
    if not _valid_name(body["name"]):
        raise _invalid_request(f"its device name is not 1–{MAX_NAME_CHARS} printable characters")
    created, expires = body["created_ms"], body["expires_ms"]
    if not (_is_ms(created) and _is_ms(expires) and 0 < expires - created <= MAX_LIFETIME_MS):
        raise _invalid_request("its lifetime is not between 1 ms and 24 hours")
    if not isinstance(sig, bytes):
        raise _invalid_request("its signature is missing")
    req = JoinRequest(
        device_pub=body["device"],
        exchange_pub=body["exchange"],
        device_name=body["name"],
        approver_pub=body["approver"],
        created_ms=created,
        expires_ms=expires,
        nonce=body["nonce"],
        signature=sig,
    )
    if not ed25519_verify_detached(req.device_pub, req.signed_bytes(), req.signature):
        raise _invalid_request("it is not signed by the device it names")
    if hmac.compare_digest(req.device_pub, req.approver_pub):
        raise _invalid_request("it names its own device as the approver")
    if not _usable_exchange_key(req.exchange_pub):
        raise _invalid_request("its exchange key is not a usable X25519 key")
    return req


def parse_request(text: str, *, approver_pub: bytes, now_ms: int, consumed: Container[bytes] = frozenset()) -> JoinRequest:
    """Verify a join request on the approving device (format, signature, pin, clock, replay).

    ``approver_pub`` is THIS device's Ed25519 key; ``consumed`` is a container of request IDs
    already approved here (:func:`request_id`).
    """
    req = decode_request(text)
    if not hmac.compare_digest(req.approver_pub, bytes(approver_pub)):
        raise MemoriesError(
            "join_wrong_approver",
            f"The join request pins approving device {short_fingerprint(req.approver_pub)}…, not this one "
            f"({short_fingerprint(bytes(approver_pub))}…); make it again with this device's key from `memories whoami`.",
        )
    if now_ms > req.expires_ms:
        raise MemoriesError("join_request_expired")
    if req.created_ms > now_ms + CLOCK_SKEW_MS:
        raise _invalid_request("it was made more than 5 minutes in the future; check both clocks")
    if request_id(req) in consumed:
        raise MemoriesError("join_request_used")
    return req


def make_certificate(user_key: Any, device_pub: bytes, exchange_pub: bytes, now_ms: int) -> tuple[dict[str, Any], bytes]:
    """The new device's certificate (ID-1), signed by the user key: ``(body, signature)``."""
    if len(device_pub) != _KEY or len(exchange_pub) != _KEY:
        raise MemoriesError("invalid_input", "Device and exchange keys must be 32 bytes.")
    cert = certificate_body(bytes(user_key.verify_key), bytes(device_pub), bytes(exchange_pub), now_ms)
    return cert, sign(user_key, domain_bytes(CERT_TAG, 1, cert))


def make_approval(
    approver: Approver,
    request: JoinRequest,
    grant: dict[str, Any],
    now_ms: int,
    lifetime_ms: int = DEFAULT_LIFETIME_MS,
) -> str:
    """Seal ``grant`` to the requesting device, signed by this (the pinned) approving device.

    ``grant`` is any canonical-encodable dict; the engine fills it (user signing key, the new
    device's certificate and signature, vault records). Returns the one-line approval text.
    """
    device_pub = bytes(approver.device_key.verify_key)
    if not hmac.compare_digest(request.approver_pub, device_pub):
        raise MemoriesError("join_wrong_approver")
    if now_ms > request.expires_ms:
        raise MemoriesError("join_request_expired")
    if not (isinstance(lifetime_ms, int) and 0 < lifetime_ms <= MAX_LIFETIME_MS) or not _is_ms(now_ms + lifetime_ms):
        raise MemoriesError("invalid_input", "An approval lives between 1 ms and 24 hours.")
    if not isinstance(grant, dict):
        raise MemoriesError("invalid_input", "The grant must be a record.")
    payload = canonical_bytes(
        {"v": 1, "request_id": request_id(request), "grant": grant, "issued_ms": now_ms, "expires_ms": now_ms + lifetime_ms}
    )
    envelope = seal_envelope(approver.device_key, request.exchange_pub, payload, purpose=APPROVAL_PURPOSE)
    return _encode_text(APPROVAL_PREFIX, envelope)


_ENVELOPE_SENTENCES = {
    "recipient": "The approval was made for another device's request; nothing was changed.",
    "sender": "The approval was not made by the approving device this request pinned; nothing was changed.",
}


def open_approval(text: str, *, device_key: Any, exchange_key: Any, pending: JoinRequest, now_ms: int) -> dict[str, Any]:
    """Open an approval on the new device and return its grant.

    Checks that it opens for this device, is signed by ``pending.approver_pub`` (the pinned
    key) for the ``join-approval`` purpose, names ``pending``'s request ID and has not expired.
    """
    if not hmac.compare_digest(bytes(device_key.verify_key), pending.device_pub) or not hmac.compare_digest(
        bytes(exchange_key.public_key), pending.exchange_pub
    ):
        raise MemoriesError("join_approval_invalid", "The pending request is not this device's; nothing was changed.")
    raw = _decode_text(text, APPROVAL_PREFIX, MAX_APPROVAL_TEXT)
    if raw is None:
        raise MemoriesError(
            "join_approval_invalid", "The approval is not a complete `memories-join-approval-v1.` line; nothing was changed."
        )
    try:
        opened = open_envelope(exchange_key, raw, purpose=APPROVAL_PURPOSE, expected_sender=pending.approver_pub)
    except EnvelopeError as exc:
        raise MemoriesError("join_approval_invalid", _ENVELOPE_SENTENCES.get(exc.reason)) from None
    payload = _decode_canonical_object(opened.payload)
    if payload is None or set(payload) != _APPROVAL_FIELDS or payload["v"] != 1 or isinstance(payload["v"], bool):
        raise MemoriesError("join_approval_invalid")
    rid, grant, issued, expires = payload["request_id"], payload["grant"], payload["issued_ms"], payload["expires_ms"]
    if not isinstance(rid, bytes) or not hmac.compare_digest(rid, request_id(pending)):
        raise MemoriesError("join_approval_invalid", "The approval is for a different join request; nothing was changed.")
    if not (isinstance(grant, dict) and _is_ms(issued) and _is_ms(expires) and 0 < expires - issued <= MAX_LIFETIME_MS):
        raise MemoriesError("join_approval_invalid")
    if now_ms > expires:
        raise MemoriesError("join_approval_expired")
    if issued > now_ms + CLOCK_SKEW_MS:
        raise MemoriesError(
            "join_approval_invalid", "The approval was made more than 5 minutes in the future; check both clocks."
        )
    return grant
