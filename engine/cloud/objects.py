"""What cloud sync writes to storage, and how a receiver checks it (CL-3).

Layout under an account's prefix ``P``:

* ``P/o/<sha256 hex>`` — one object: a bundle chunk sealed with
  :func:`engine.crypto.envelope.seal_envelope` from the sending device to one receiving
  device (purpose ``cloud-object``). Its name is the SHA-256 of its exact bytes.
* ``P/d/<H(to)>/<H(from)>/<seq, 12 digits>`` — the descriptor of one bundle for one device:
  ``MAGIC || msgpack({"body": canonical bytes, "sig": Ed25519})`` signed by the sending
  device, naming the receiver, the sender's sequence number and the object IDs and sizes.
  ``H(device)`` is a keyed-by-nothing hash of the device key (32 hex digits), so paths do
  not print device keys.

The sealed payload of each object names its vault, sequence number and index, so an object
cannot be moved under another descriptor; the first one also says which policy heads,
revisions and audit entries the bundle carries (what the receiver then holds).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.envelope import EnvelopeError, open_envelope, seal_envelope
from engine.crypto.keys import SignatureError, sign, verify
from engine.errors import MemoriesError

__all__ = [
    "OBJECT_PURPOSE",
    "MAX_DESCRIPTOR_BYTES",
    "MAX_OBJECTS_PER_DESCRIPTOR",
    "Covers",
    "Descriptor",
    "SealedBundle",
    "device_dir",
    "object_key",
    "descriptor_key",
    "descriptor_prefix",
    "parse_seq",
    "seal_bundle",
    "make_descriptor",
    "parse_descriptor",
    "open_object",
]

OBJECT_PURPOSE = "cloud-object"
DESCRIPTOR_MAGIC = b"MEMCLDD\x01"
DESCRIPTOR_TAG = "memories.cloud-descriptor"
MAX_DESCRIPTOR_BYTES = 256 * 1024
MAX_OBJECTS_PER_DESCRIPTOR = 4096
_SEQ = re.compile(r"^[0-9]{12}$")
_ID = 32


def device_dir(device: bytes) -> str:
    return hashlib.sha256(b"memories.cloud-dir\x00" + bytes(device)).hexdigest()[:32]


def _join(prefix: str, rest: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{rest}" if prefix else rest


def object_key(prefix: str, object_id: bytes) -> str:
    return _join(prefix, f"o/{object_id.hex()}")


def descriptor_prefix(prefix: str, to: bytes, sender: bytes) -> str:
    return _join(prefix, f"d/{device_dir(to)}/{device_dir(sender)}/")


def descriptor_key(prefix: str, to: bytes, sender: bytes, seq: int) -> str:
    return descriptor_prefix(prefix, to, sender) + f"{seq:012d}"


def parse_seq(name: str) -> int | None:
    """The sequence number of a descriptor key's last part; None for anything else."""
    last = name.rsplit("/", 1)[-1]
    return int(last) if _SEQ.match(last) else None


@dataclass(frozen=True)
class Covers:
    """What a bundle carries: after merging it, the receiver holds these."""

    heads: list[bytes]
    revs: list[bytes]
    audits: list[bytes]

    def to_wire(self) -> dict[str, Any]:
        return {"heads": list(self.heads), "revs": list(self.revs), "audits": list(self.audits)}

    @classmethod
    def from_wire(cls, obj: object) -> Covers:
        if not isinstance(obj, dict) or set(obj) != {"heads", "revs", "audits"}:
            raise MemoriesError("sync_invalid", "A cloud object's list of contents is malformed.")
        out: list[list[bytes]] = []
        for name in ("heads", "revs", "audits"):
            value = obj[name]
            if not isinstance(value, list) or not all(isinstance(v, bytes) and len(v) == _ID for v in value):
                raise MemoriesError("sync_invalid", "A cloud object's list of contents is malformed.")
            out.append([bytes(v) for v in value])
        return cls(*out)


@dataclass(frozen=True)
class SealedBundle:
    objects: list[bytes]  # exact envelope bytes, in order
    object_ids: list[bytes]  # SHA-256 of each


def seal_bundle(
    device_key: Any, recipient_exchange: bytes, vault_id: bytes, seq: int, chunks: list[bytes], covers: Covers
) -> SealedBundle:
    """Seal each bundle chunk to the receiving device; the first object also carries ``covers``."""
    objects: list[bytes] = []
    for index, chunk in enumerate(chunks):
        payload: dict[str, Any] = {"v": 1, "vault": vault_id, "seq": seq, "i": index, "n": len(chunks), "chunk": chunk}
        if index == 0:
            payload["covers"] = covers.to_wire()
        sealed = seal_envelope(device_key, recipient_exchange, msgspec.msgpack.encode(payload), purpose=OBJECT_PURPOSE)
        objects.append(sealed)
    return SealedBundle(objects, [hashlib.sha256(o).digest() for o in objects])


@dataclass(frozen=True)
class Descriptor:
    sender: bytes
    to: bytes
    seq: int
    object_ids: list[bytes]
    sizes: list[int]


def make_descriptor(device_key: Any, to: bytes, seq: int, sealed: SealedBundle) -> bytes:
    body = {
        "v": 1,
        "from": bytes(device_key.verify_key),
        "to": bytes(to),
        "seq": seq,
        "objects": list(sealed.object_ids),
        "sizes": [len(o) for o in sealed.objects],
    }
    signed = canonical_bytes(body)
    sig = sign(device_key, domain_bytes(DESCRIPTOR_TAG, 1, signed))
    return DESCRIPTOR_MAGIC + msgspec.msgpack.encode({"body": signed, "sig": sig})


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    body: bytes
    sig: bytes


def _bad(what: str) -> MemoriesError:
    return MemoriesError("sync_rejected", f"A cloud descriptor {what}; nothing was merged.")


def parse_descriptor(data: bytes, *, sender: bytes, to: bytes, seq: int) -> Descriptor:
    """Check a descriptor found at the path of (``to``, ``sender``, ``seq``): format, signature,
    and that it names exactly that path's receiver, sender and sequence number."""
    if len(data) > MAX_DESCRIPTOR_BYTES or not data.startswith(DESCRIPTOR_MAGIC):
        raise _bad("is not in the cloud descriptor format")
    try:
        wire = msgspec.msgpack.decode(data[len(DESCRIPTOR_MAGIC) :], type=_Wire)
        verify(sender, domain_bytes(DESCRIPTOR_TAG, 1, wire.body), wire.sig)
        body = decode_canonical(wire.body)
    except (msgspec.DecodeError, msgspec.ValidationError, SignatureError, UnicodeDecodeError, ValueError):
        raise _bad("is malformed or not signed by its sending device") from None
    if not isinstance(body, dict) or set(body) != {"v", "from", "to", "seq", "objects", "sizes"} or body["v"] != 1:
        raise _bad("is malformed")
    if body["from"] != sender or body["to"] != to or body["seq"] != seq:
        raise _bad("names another sender, receiver or sequence number than its path")
    ids, sizes = body["objects"], body["sizes"]
    if (
        not isinstance(ids, list)
        or not isinstance(sizes, list)
        or not 1 <= len(ids) <= MAX_OBJECTS_PER_DESCRIPTOR
        or len(ids) != len(sizes)
        or not all(isinstance(i, bytes) and len(i) == _ID for i in ids)
        or not all(isinstance(s, int) and 0 < s <= 64 * 1024 * 1024 for s in sizes)
    ):
        raise _bad("lists its objects in a malformed way")
    return Descriptor(bytes(sender), bytes(to), seq, [bytes(i) for i in ids], [int(s) for s in sizes])


class _Payload(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    vault: bytes
    seq: int
    i: int
    n: int
    chunk: bytes
    covers: dict[str, Any] | None = None


def open_object(exchange_key: Any, data: bytes, *, descriptor: Descriptor, index: int) -> tuple[bytes, bytes, Covers | None]:
    """(vault ID, bundle chunk, covers of the first object) of one object the descriptor lists.

    The caller has checked that ``sha256(data)`` is the listed object ID.
    """
    try:
        opened = open_envelope(exchange_key, data, purpose=OBJECT_PURPOSE, expected_sender=descriptor.sender)
        payload = msgspec.msgpack.decode(opened.payload, type=_Payload)
    except (EnvelopeError, msgspec.DecodeError, msgspec.ValidationError):
        raise MemoriesError(
            "sync_rejected", "A cloud object is not sealed to this device by its sender; nothing was merged."
        ) from None
    if payload.v != 1 or payload.seq != descriptor.seq or payload.i != index or payload.n != len(descriptor.object_ids):
        raise MemoriesError("sync_rejected", "A cloud object belongs to another descriptor; nothing was merged.")
    covers = Covers.from_wire(payload.covers) if payload.covers is not None else None
    if (index == 0) != (covers is not None):
        raise MemoriesError("sync_rejected", "A cloud object's list of contents is misplaced; nothing was merged.")
    return payload.vault, payload.chunk, covers
