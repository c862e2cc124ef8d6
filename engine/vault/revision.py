"""Signed revisions: the one content-addressed DAG every asset kind shares (HI-1, HI-2).

A revision's signature covers asset ID, parents, policy head, tombstone flag, the
ciphertext (summary chunks inline, body chunk digests) and the device certificate
hash. Its ID is the SHA-256 of the signed bytes.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from dataclasses import dataclass
from typing import Any

from engine.crypto.aead import open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical, decode_canonical_flat, domain_bytes
from engine.crypto.chunks import open_chunks, seal_chunks
from engine.crypto.keys import DeviceIdentity, sign, sign_many, verify

__all__ = ["Revision", "REVISION_TAG", "build_revision", "NewContent", "Restored", "sign_revisions"]

REVISION_TAG = "memories.revision"
_DEK_AAD = b"memories.dek\x00\x01"


def _dek_aad(vault_id: bytes, asset_id: bytes, epoch: int) -> bytes:
    return _DEK_AAD + vault_id + asset_id + struct.pack(">I", epoch)


_PREFIX = REVISION_TAG.encode("ascii") + b"\x00\x01"


class Revision:
    """A signed revision. ``signed`` holds the exact signed bytes (never re-encoded)."""

    __slots__ = ("body", "body_seqs", "rev_id", "seq", "signature", "signed", "summary_cache")

    def __init__(
        self,
        signed: bytes,
        signature: bytes,
        body_seqs: list[int],
        *,
        seq: int = 0,
        body: dict[str, Any] | None = None,
        summary_cache: dict[str, Any] | None = None,
    ) -> None:
        if not signed.startswith(_PREFIX):
            raise ValueError("not a version-1 revision")
        self.signed = signed
        self.signature = signature
        self.body_seqs = body_seqs
        self.seq = seq
        self.body: dict[str, Any] = body if body is not None else decode_canonical_flat(signed[len(_PREFIX) :])
        self.rev_id = hashlib.sha256(signed).digest()
        self.summary_cache = summary_cache

    @property
    def signed_bytes(self) -> bytes:
        return self.signed

    @property
    def asset_id(self) -> bytes:
        return bytes(self.body["asset"])

    @property
    def parents(self) -> list[bytes]:
        return list(self.body["parents"])

    @property
    def tombstone(self) -> bool:
        return bool(self.body["tombstone"])

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def created_ms(self) -> int:
        return int(self.body["created_ms"])

    @property
    def changed_ms(self) -> int:
        """When the content this revision holds was last changed: its own time, or for a
        restore's copy of a head the original head's time (BK-2). What lists sort by."""
        return self._restored_time("restored_changed_ms")

    @property
    def item_created_ms(self) -> int:
        """When the item was created, as its first revision says: its own time, or for a
        restore's copy the original item's first revision's time (BK-2)."""
        return self._restored_time("restored_created_ms")

    def _restored_time(self, key: str) -> int:
        # Signed by the restoring device, but a revision from sync could carry anything: only
        # a time no later than the revision itself counts, else the revision's own time.
        value = self.body.get(key)
        created = self.created_ms
        if value.__class__ is int and 0 <= value <= created:
            return int(value)
        return created

    @property
    def author(self) -> bytes:
        return bytes(self.body["device"])

    def verify_signature(self) -> None:
        verify(self.author, self.signed_bytes, self.signature)

    def data_key(self, epoch_key: bytes) -> bytes:
        b = self.body
        return open_sealed(epoch_key, b["wrapped_key"], _dek_aad(b["vault"], b["asset"], b["epoch"]))

    def open_summary(self, epoch_key: bytes) -> dict[str, Any]:
        if self.summary_cache is None:
            return self.open_summary_with(self.data_key(epoch_key))
        return self.summary_cache

    def open_summary_with(self, dek: bytes) -> dict[str, Any]:
        """The summary opened with the data key itself (a caller that needs the key anyway)."""
        if self.summary_cache is None:
            plain = open_chunks(dek, list(self.body["summary"]), self.asset_id + b"summary")
            self.summary_cache = decode_canonical(plain)
        return self.summary_cache

    def open_body(self, epoch_key: bytes, chunks: list[bytes]) -> bytes:
        digests = [hashlib.sha256(c).digest() for c in chunks]
        if digests != list(self.body["body"]):
            from engine.crypto.chunks import ChunkError

            raise ChunkError("body chunks do not match the signed digests")
        return open_chunks(self.data_key(epoch_key), chunks, self.asset_id + b"body")

    def to_record(self) -> dict[str, Any]:
        if not self.signature:
            raise ValueError("a revision built unsigned was not signed (sign_revisions)")
        return {"t": "revision", "signed": self.signed, "sig": self.signature, "body_seqs": self.body_seqs}

    @classmethod
    def from_record(cls, record: dict[str, Any], seq: int) -> Revision:
        return cls(record["signed"], record["sig"], list(record["body_seqs"]), seq=seq)


@dataclass(frozen=True)
class Restored:
    """What a restore's copy of a head signs about the original (BK-2, docs/formats.md): the
    original revision's ID, the item's first creation time and the head's change time."""

    rev_id: bytes
    created_ms: int
    changed_ms: int

    def fields(self) -> dict[str, Any]:
        return {"restored_from": self.rev_id, "restored_created_ms": self.created_ms, "restored_changed_ms": self.changed_ms}


@dataclass
class NewContent:
    """A revision ready to commit, with the content rows it needs."""

    revision: Revision
    content_rows: list[tuple[int, bytes]]


def build_revision(
    *,
    identity: DeviceIdentity,
    vault_id: bytes,
    policy_head: bytes,
    epoch: int,
    epoch_key: bytes,
    asset_id: bytes,
    kind: str,
    parents: list[bytes],
    tombstone: bool,
    summary: dict[str, Any],
    body: bytes,
    content_seqs: list[int],
    restored: Restored | None = None,
    unsigned: bool = False,
) -> NewContent:
    """Encrypt and sign a new revision. ``content_seqs`` must hold enough row numbers.

    ``unsigned``: laid out but not signed yet; the caller signs it with others in one
    :func:`sign_revisions` before it is stored or shown anywhere."""
    dek = os.urandom(32)
    body_chunks = seal_chunks(dek, body, asset_id + b"body")
    seqs = content_seqs[: len(body_chunks)]
    if len(seqs) != len(body_chunks):
        raise ValueError("not enough content row numbers reserved")
    revision = _sign_revision(
        identity=identity,
        vault_id=vault_id,
        policy_head=policy_head,
        epoch=epoch,
        epoch_key=epoch_key,
        asset_id=asset_id,
        kind=kind,
        parents=parents,
        tombstone=tombstone,
        summary=summary,
        dek=dek,
        body_digests=[hashlib.sha256(c).digest() for c in body_chunks],
        body_len=len(body),
        content_seqs=seqs,
        restored=restored,
        unsigned=unsigned,
    )
    return NewContent(revision=revision, content_rows=list(zip(seqs, body_chunks, strict=True)))


def chunk_count(body_len: int) -> int:
    from engine.crypto.chunks import CHUNK_BYTES

    return max(1, -(-body_len // CHUNK_BYTES))


def wrap_data_key(epoch_key: bytes, dek: bytes, vault_id: bytes, asset_id: bytes, epoch: int) -> bytes:
    """The data key sealed under the epoch key, as every revision carries it."""
    return seal(epoch_key, dek, _dek_aad(vault_id, asset_id, epoch))


def build_streamed_revision(
    *,
    identity: DeviceIdentity,
    vault_id: bytes,
    policy_head: bytes,
    epoch: int,
    epoch_key: bytes,
    asset_id: bytes,
    kind: str,
    parents: list[bytes],
    summary: dict[str, Any],
    dek: bytes,
    body_digests: list[bytes],
    body_len: int,
    content_seqs: list[int],
    restored: Restored | None = None,
    sealed_summary: list[bytes] | None = None,
    unsigned: bool = False,
) -> Revision:
    """Sign a revision whose body chunks were sealed one by one with ``dek`` and are already
    written (a streamed file, FI-1). The signed fields are exactly those of :func:`build_revision`.

    ``sealed_summary``: ``summary`` already sealed under ``dek`` for this asset (a restore's
    copy of a head, whose original carries it under the same key and asset: the same sealed
    bytes, authenticated when the original was opened), used as it is instead of sealed again."""
    if len(body_digests) != len(content_seqs) or len(body_digests) != chunk_count(body_len):
        raise ValueError("body chunks, row numbers and length do not agree")
    return _sign_revision(
        identity=identity,
        vault_id=vault_id,
        policy_head=policy_head,
        epoch=epoch,
        epoch_key=epoch_key,
        asset_id=asset_id,
        kind=kind,
        parents=parents,
        tombstone=False,
        summary=summary,
        dek=dek,
        body_digests=body_digests,
        body_len=body_len,
        content_seqs=content_seqs,
        restored=restored,
        sealed_summary=sealed_summary,
        unsigned=unsigned,
    )


def sign_revisions(identity: DeviceIdentity, revisions: list[Revision]) -> None:
    """Sign revisions built with ``unsigned=True`` (by this device), all at once (:func:`sign_many`)."""
    for revision, signature in zip(revisions, sign_many(identity.device_key, [r.signed for r in revisions]), strict=True):
        revision.signature = signature


def _sign_revision(
    *,
    identity: DeviceIdentity,
    vault_id: bytes,
    policy_head: bytes,
    epoch: int,
    epoch_key: bytes,
    asset_id: bytes,
    kind: str,
    parents: list[bytes],
    tombstone: bool,
    summary: dict[str, Any],
    dek: bytes,
    body_digests: list[bytes],
    body_len: int,
    content_seqs: list[int],
    restored: Restored | None = None,
    sealed_summary: list[bytes] | None = None,
    unsigned: bool = False,
) -> Revision:
    """The one place the signed revision body is laid out (HI-2), for whole and streamed bodies.
    ``unsigned``: its signature is left empty, for :func:`sign_revisions` to fill."""
    if sealed_summary is None:
        sealed_summary = seal_chunks(dek, canonical_bytes(summary), asset_id + b"summary")
    signed: dict[str, Any] = {
        "v": 1,
        "vault": vault_id,
        "asset": asset_id,
        "kind": kind,
        "parents": sorted(parents),
        "policy": policy_head,
        "tombstone": tombstone,
        "epoch": epoch,
        "wrapped_key": wrap_data_key(epoch_key, dek, vault_id, asset_id, epoch),
        "summary": list(sealed_summary),
        "body": list(body_digests),
        "body_len": body_len,
        "device": identity.device_pub,
        "cert": identity.certificate_hash,
        "created_ms": int(time.time() * 1000),
        **(restored.fields() if restored is not None else {}),
    }
    signed_bytes = domain_bytes(REVISION_TAG, 1, signed)
    signature = b"" if unsigned else sign(identity.device_key, signed_bytes)
    return Revision(signed_bytes, signature, list(content_seqs), body=signed, summary_cache=summary)
