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
* ``P/m/<H(to)>/<H(from)>`` — the delivery marks (CL-5) that device ``from`` publishes for
  device ``to``, in the descriptor's signed format: up to which sequence number it has taken
  ``to``'s bundles, where it is stuck and why (with the content address of what it found),
  and the highest sequence number it has itself uploaded for ``to``. The one key is
  rewritten on every sync.
* ``P/i/<H(to)>/<H(from)>`` — the introduction of device ``from`` to a device of another
  person (PO-3): engine/cloud/intro.py.

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
    "MARKS_WHY",
    "MAX_MARKS_BYTES",
    "Stuck",
    "Marks",
    "marks_key",
    "make_marks",
    "parse_marks",
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


# -- delivery marks (CL-5) ----------------------------------------------------------------------

MARKS_MAGIC = b"MEMCLDM\x01"
MARKS_TAG = "memories.cloud-marks"
MAX_MARKS_BYTES = 16 * 1024
MARKS_WHY = ("missing", "refused", "absent")  # objects missing; bytes refused; nothing at the slot
_MAX_SEQ = 10**12 - 1  # what 12 digits hold
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def marks_key(prefix: str, to: bytes, sender: bytes) -> str:
    return _join(prefix, f"m/{device_dir(to)}/{device_dir(sender)}")


@dataclass(frozen=True)
class Stuck:
    """Where a receiver stopped taking a sender's bundles: the first sequence number it has
    not taken, why, the error code, the SHA-256 of the bytes it found at that slot (empty when
    there were none) and since when (the receiver's clock)."""

    seq: int
    why: str
    code: str
    digest: bytes
    since_ms: int

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "why": self.why, "code": self.code, "hash": self.digest, "since": self.since_ms}


@dataclass(frozen=True)
class Marks:
    """What ``sender`` publishes for ``to``: every bundle of ``to`` up to ``taken`` is merged,
    ``stuck`` says why the next one is not, and ``sent`` is the highest sequence number
    ``sender`` has uploaded for ``to`` (so ``to`` notices a deleted newest descriptor)."""

    sender: bytes
    to: bytes
    at_ms: int
    taken: int
    sent: int
    stuck: Stuck | None


def make_marks(device_key: Any, marks: Marks) -> bytes:
    body = {
        "v": 1,
        "from": bytes(device_key.verify_key),
        "to": bytes(marks.to),
        "at": marks.at_ms,
        "taken": marks.taken,
        "sent": marks.sent,
        "stuck": None if marks.stuck is None else marks.stuck.to_wire(),
    }
    signed = canonical_bytes(body)
    sig = sign(device_key, domain_bytes(MARKS_TAG, 1, signed))
    return MARKS_MAGIC + msgspec.msgpack.encode({"body": signed, "sig": sig})


def _bad_marks(what: str) -> MemoriesError:
    return MemoriesError("sync_rejected", f"A device's cloud delivery marks {what}; they were not used.")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SEQ


def parse_marks(data: bytes, *, sender: bytes, to: bytes) -> Marks:
    """Check marks found at the path of (``to``, ``sender``): format, size, the sending device's
    signature, that they name exactly that path's devices, and every field's type and range.
    Anything else is a typed refusal (``sync_rejected``), never an exception of another kind."""
    if len(data) > MAX_MARKS_BYTES or not data.startswith(MARKS_MAGIC):
        raise _bad_marks("are not in the cloud marks format")
    try:
        wire = msgspec.msgpack.decode(data[len(MARKS_MAGIC) :], type=_Wire)
        verify(sender, domain_bytes(MARKS_TAG, 1, wire.body), wire.sig)
        body = decode_canonical(wire.body)
    except (msgspec.DecodeError, msgspec.ValidationError, SignatureError, UnicodeDecodeError, ValueError, TypeError):
        raise _bad_marks("are malformed or not signed by their device") from None
    if not isinstance(body, dict) or set(body) != {"v", "from", "to", "at", "taken", "sent", "stuck"} or body["v"] != 1:
        raise _bad_marks("are malformed")
    if body["from"] != sender or body["to"] != to:
        raise _bad_marks("name other devices than their path")
    at = body["at"]
    if not (_count(body["taken"]) and _count(body["sent"]) and isinstance(at, int) and not isinstance(at, bool) and at >= 0):
        raise _bad_marks("carry a malformed count")
    stuck = body["stuck"]
    parsed: Stuck | None = None
    if stuck is not None:
        if (
            not isinstance(stuck, dict)
            or set(stuck) != {"seq", "why", "code", "hash", "since"}
            or not _count(stuck["seq"])
            or stuck["seq"] != body["taken"] + 1
            or stuck["why"] not in MARKS_WHY
            or not isinstance(stuck["code"], str)
            or not _CODE.match(stuck["code"])
            or not isinstance(stuck["hash"], bytes)
            or len(stuck["hash"]) not in (0, _ID)
            or not isinstance(stuck["since"], int)
            or isinstance(stuck["since"], bool)
            or stuck["since"] < 0
        ):
            raise _bad_marks("say where they are stuck in a malformed way")
        parsed = Stuck(int(stuck["seq"]), str(stuck["why"]), str(stuck["code"]), bytes(stuck["hash"]), int(stuck["since"]))
    return Marks(bytes(sender), bytes(to), int(body["at"]), int(body["taken"]), int(body["sent"]), parsed)
