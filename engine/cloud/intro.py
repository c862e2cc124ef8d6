"""Introductions: how a device of another person finds the vault shared with it in the bucket (PO-3; issue 29).

A receiver follows only senders it already knows (the devices of the vaults it holds), and a
bucket path names a device only by a hash (:func:`engine.cloud.objects.device_dir`). A person
just added to a vault holds nothing of it yet, so they would never look at the Owner's
descriptors. The Owner's device therefore writes, for every device of another user it sends to
and that has not yet published marks for it, one **introduction** under

    ``P/i/<H(to)>/<H(from)>``: ``MAGIC || msgpack({"body": canonical bytes, "sig": Ed25519})``

whose body names the receiving device, the sending device and the sender's user-signed device
certificate, signed by the sending device. A receiver reads introductions only while an
invitation it made pins a user (``memories whoami --invite --owner FINGERPRINT``), and follows
the sender only when everything checks: the path's hash is the sender's key, the body names this
device, the certificate names the sender and is signed by the user key it names, and that user
key's fingerprint is one a live invitation pins. The vault that then arrives is checked whole by
the merge (:func:`engine.sync.merge._arriving_vault`), exactly as one arriving from a direct peer:
an introduction only says where to look, never what to trust.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.cloud.objects import device_dir
from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.keys import CERT_TAG, SignatureError, sign, verify
from engine.errors import MemoriesError

__all__ = ["MAX_INTRO_BYTES", "Introduced", "intro_key", "intro_prefix", "sender_dir", "make_intro", "parse_intro"]

INTRO_MAGIC = b"MEMCLDI\x01"
INTRO_TAG = "memories.cloud-intro"
MAX_INTRO_BYTES = 4096  # a certificate and two keys; anything larger is not an introduction
_KEY = 32


@dataclass(frozen=True)
class Introduced:
    device: bytes
    user: bytes

    @property
    def user_fingerprint(self) -> bytes:
        return hashlib.sha256(self.user).digest()


def _join(prefix: str, rest: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{rest}" if prefix else rest


def intro_prefix(prefix: str, to: bytes) -> str:
    return _join(prefix, f"i/{device_dir(to)}/")


def intro_key(prefix: str, to: bytes, sender: bytes) -> str:
    return intro_prefix(prefix, to) + device_dir(sender)


def sender_dir(key: str) -> str:
    """The sender's path hash at the end of an introduction's key."""
    return key.rsplit("/", 1)[-1]


def make_intro(device_key: Any, to: bytes, certificate: dict[str, Any], certificate_sig: bytes) -> bytes:
    body = {"v": 1, "from": bytes(device_key.verify_key), "to": bytes(to), "cert": certificate, "cert_sig": certificate_sig}
    signed = canonical_bytes(body)
    sig = sign(device_key, domain_bytes(INTRO_TAG, 1, signed))
    return INTRO_MAGIC + msgspec.msgpack.encode({"body": signed, "sig": sig})


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    body: bytes
    sig: bytes


def _bad(what: str) -> MemoriesError:
    return MemoriesError("sync_rejected", f"A cloud introduction {what}; it was ignored.")


def _key(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == _KEY


def parse_intro(data: bytes, *, to: bytes, dirname: str) -> Introduced:
    """Check an introduction found at ``P/i/<H(to)>/<dirname>``: format, size, the sender's
    signature, that it names this receiver and the path's sender, and that its certificate names
    that device and is signed by the user key it names. Anything else is ``sync_rejected``."""
    if len(data) > MAX_INTRO_BYTES or not data.startswith(INTRO_MAGIC):
        raise _bad("is not in the cloud introduction format")
    try:
        wire = msgspec.msgpack.decode(data[len(INTRO_MAGIC) :], type=_Wire)
        body = decode_canonical(wire.body)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, ValueError, TypeError):
        raise _bad("is malformed") from None
    if not isinstance(body, dict) or set(body) != {"v", "from", "to", "cert", "cert_sig"} or body["v"] != 1:
        raise _bad("is malformed")
    sender, cert, cert_sig = body["from"], body["cert"], body["cert_sig"]
    if not _key(sender) or device_dir(sender) != dirname:
        raise _bad("names another sender than its path")
    if body["to"] != to:
        raise _bad("names another receiver than its path")
    named = isinstance(cert, dict) and cert.get("device") == sender and _key(cert.get("user"))
    if not named or not isinstance(cert_sig, bytes):
        raise _bad("carries a certificate that does not name its sender")
    try:
        verify(sender, domain_bytes(INTRO_TAG, 1, wire.body), wire.sig)
        verify(cert["user"], domain_bytes(CERT_TAG, 1, cert), cert_sig)
    except (SignatureError, ValueError, TypeError):
        raise _bad("is not signed by its device, or its certificate not by its user") from None
    return Introduced(bytes(sender), bytes(cert["user"]))
