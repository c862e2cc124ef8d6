"""Signed revisions: the one content-addressed DAG every asset kind shares (HI-1, HI-2).

A revision's signature covers asset ID, parents, policy head, tombstone flag, the
ciphertext (summary chunks inline, body chunk digests) and the device certificate
hash. Its ID is the SHA-256 of the signed bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import os
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.crypto.aead import open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical, decode_canonical_flat, domain_bytes
from engine.crypto.canonical import unb64_strict as _unb64
from engine.crypto.chunks import open_chunks, seal_chunks
from engine.crypto.keys import DeviceIdentity, sign, sign_many, verify
from engine.errors import MemoriesError
from engine.vault.body_encoding import BodyEncodingError, compress_body, inflate_body

__all__ = [
    "Revision",
    "REVISION_TAG",
    "COMPRESSED_FORMAT_PREFIX",
    "build_revision",
    "NewContent",
    "Restored",
    "sign_revisions",
    "StoredRevisions",
    "holding",
    "held",
    "keep_list_fields",
]

REVISION_TAG = "memories.revision"
_DEK_AAD = b"memories.dek\x00\x01"


def _dek_aad(vault_id: bytes, asset_id: bytes, epoch: int) -> bytes:
    return _DEK_AAD + vault_id + asset_id + struct.pack(">I", epoch)


_PREFIX = REVISION_TAG.encode("ascii") + b"\x00\x01"
# Format 2 (issue 32): the body is deflated before it is sealed, and ``body_z`` signs its length
# once inflated (engine/vault/body_encoding.py). A revision without a compressed body stays format
# 1, readable by every engine; an engine from before format 2 refuses a format-2 revision
# ("not a version-1 revision"), which is why sync sends them only under protocol 4.
_PREFIX_Z = REVISION_TAG.encode("ascii") + b"\x00\x02"
COMPRESSED_FORMAT_PREFIX = _PREFIX_Z
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder().decode


_MISSING: Any = object()
# Values most revisions of a vault share (its ID, the policy head, the device and its
# certificate): one bytes object each instead of one per revision (issue 32). Bounded, so that a
# stream of foreign revisions cannot grow it; it holds identifiers, never content.
_SHARED: dict[bytes, bytes] = {}
_SHARED_MAX = 4096


def _shared(value: Any) -> Any:
    if value.__class__ is not bytes or len(value) > 64:
        return value
    kept = _SHARED.get(value)
    if kept is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        kept = _SHARED[value] = value
    return kept


def _need(value: Any, key: str) -> Any:
    if value is _MISSING:
        raise KeyError(key)
    return value


class _Tagged(msgspec.Struct, forbid_unknown_fields=True):
    """A tagged bytes value ``{"$b": "..."}`` (engine/crypto/canonical.py)."""

    b: str = msgspec.field(name="$b")


class _Kept(msgspec.Struct):
    """The fields a revision keeps (see Revision), as they must be typed in a well-formed one;
    the rest of the body (the sealed summary, the wrapped key, the body digests: most of its
    bytes) is skipped, not decoded (issue 32: an unlock decodes every revision)."""

    asset: _Tagged
    vault: _Tagged
    policy: _Tagged
    device: _Tagged
    cert: _Tagged
    epoch: int
    kind: str
    parents: list[_Tagged]
    tombstone: bool
    created_ms: int
    restored_created_ms: int | None = None
    restored_changed_ms: int | None = None
    body_z: int | None = None  # format 2's inflated body length (checked by Revision)


class _Sealed(msgspec.Struct):
    """What opening a summary or a body reads from the signed body: the wrapped data key, the
    sealed summary chunks and the body chunk digests (each absent in a malformed one)."""

    wrapped_key: _Tagged | None = None
    summary: list[_Tagged] | None = None
    body: list[_Tagged] | None = None


_kept_decoder = msgspec.json.Decoder(_Kept)
_sealed_decoder = msgspec.json.Decoder(_Sealed)
# Base64 text -> bytes of the identifiers most revisions share (vault, policy head, device,
# certificate): decoded once, not once per revision. Bounded like _SHARED.
_DECODED: dict[str, bytes] = {}


def _shared_b64(text: str) -> bytes:
    kept = _DECODED.get(text)
    if kept is None:
        if len(_DECODED) >= _SHARED_MAX:
            _DECODED.clear()
        kept = _DECODED[text] = _shared(_unb64(text))
    return kept


def _kept_fields(signed: bytes) -> tuple[Any, ...] | None:
    """The kept fields of a well-formed signed body, read without decoding the rest (asset,
    vault, policy, device, cert, epoch, kind, parents, tombstone, created_ms, restored_created_ms,
    restored_changed_ms, body_z: the last three None when absent); None when it is not one (the
    caller then decodes the whole body, as before, and fails where it did).

    Equal to what ``decode_canonical_flat`` gives for these keys: the same JSON, the same types
    (a value of another type falls back), the same base64 rules (strict; bad text falls back).
    A tuple the constructor unpacks, not a dict it reads back key by key (issue 32: an unlock
    builds 100k revisions; the dict and its lookups were a fifth of building one)."""
    try:
        kept = _kept_decoder.decode(memoryview(signed)[len(_PREFIX) :])
        return (
            _unb64(kept.asset.b),
            _shared_b64(kept.vault.b),
            _shared_b64(kept.policy.b),
            _shared_b64(kept.device.b),
            _shared_b64(kept.cert.b),
            kept.epoch,
            kept.kind,
            [_unb64(p.b) for p in kept.parents],
            kept.tombstone,
            kept.created_ms,
            kept.restored_created_ms,
            kept.restored_changed_ms,
            kept.body_z,
        )
    except (msgspec.DecodeError, ValueError):
        return None


def _fields_of(body: Any) -> tuple[Any, ...]:
    """A whole decoded body's kept fields as :func:`_kept_fields` gives them (a field it lacks:
    ``_MISSING``, raised as KeyError when read; the optional ones: None)."""
    if body.__class__ is not dict:
        raise TypeError("a revision body is an object")
    get = body.get
    return (
        get("asset", _MISSING),
        _shared(get("vault", _MISSING)),
        _shared(get("policy", _MISSING)),
        _shared(get("device", _MISSING)),
        _shared(get("cert", _MISSING)),
        get("epoch", _MISSING),
        get("kind", _MISSING),
        get("parents", _MISSING),
        get("tombstone", _MISSING),
        get("created_ms", _MISSING),
        get("restored_created_ms"),
        get("restored_changed_ms"),
        get("body_z"),
    )


class StoredRevisions:
    """Reads stored revisions' signed bytes and signatures back from their sealed state rows.

    An unlocked 100k-note vault held ~85 MiB of signed bytes (issue 32), read only when a summary
    or a body is opened, a file is read, or a revision is checked or sent (sync, backup). A
    revision whose row is stored keeps neither: both are read again from its row, which the store
    opens under the master key (its AEAD binds the row's sequence number and version), and are
    accepted only if they hash to the revision's ID, which the unlock took from the row the
    checkpoint's chain covered. So what is read back is exactly what was loaded and checked.
    Holds only the store's reader: a lock, which drops the store's key, ends every read.
    """

    def __init__(self, read: Callable[[Sequence[int]], dict[int, dict[str, Any]]]) -> None:
        # state row seq -> record, every one opened and authenticated (StoreFile.read_records)
        self._read = read

    def read(self, revisions: Sequence[Revision]) -> list[tuple[bytes, bytes]]:
        """(signed bytes, signature) of each revision, read in one batch; store_corrupt if a row
        is not the revision it was at the unlock."""
        records = self._read(sorted({rev.seq for rev in revisions}))
        out: list[tuple[bytes, bytes]] = []
        for rev in revisions:
            record = records.get(rev.seq)
            signed = record.get("signed") if record is not None and record.get("t") == "revision" else None
            sig = record.get("sig") if record is not None else None
            if (
                signed.__class__ is not bytes
                or sig.__class__ is not bytes
                or not hmac.compare_digest(hashlib.sha256(signed).digest(), rev.rev_id)
            ):
                raise MemoriesError("store_corrupt", "A stored revision is not the one the unlock read.")
            out.append((signed, sig))
        return out


_HOLD_BATCH = 256  # revisions read back per query (holding)
_LISTED_COUNT = struct.Struct("<H")  # rows in one blob of kept list fields …
_LISTED_END = struct.Struct("<I")  # … and where each row's packed fields end
_LISTED_BATCH = 256  # rows per blob: a row's place in it is a small int, which Python shares


def keep_list_fields(opened: Iterable[tuple[Revision, dict[str, Any]]]) -> None:
    """Keep the title and tags of these revisions' just opened summaries for the next list rows
    (Revision.list_fields): a listing shows them for every item, and otherwise reads each head's
    signed bytes back from the store and opens its summary again (issue 32). Never for a summary
    that maps secrets (its rows are masked, and read whole each time).

    Packed together, one bytes object per 256 rows: ~50 bytes a row. One small object per row,
    made while a listing's rows came and went, kept ~5x its size resident at 100k items (the
    allocator's arenas stay while any object in them lives)."""
    rows: list[tuple[Revision, bytes]] = []
    for rev, summary in opened:
        if rev._listed is not None or summary.get("secrets"):
            continue
        try:
            rows.append((rev, _pack([summary.get("title", ""), summary.get("tags", [])])))
        except (TypeError, ValueError, OverflowError):  # a value msgpack cannot hold as it is
            continue
    for start in range(0, len(rows), _LISTED_BATCH):
        part = rows[start : start + _LISTED_BATCH]
        ends = list(itertools.accumulate(len(packed) for _, packed in part))
        blob = b"".join([_LISTED_COUNT.pack(len(part)), struct.pack(f"<{len(part)}I", *ends), *(packed for _, packed in part)])
        for at, (rev, _) in enumerate(part):
            rev._listed, rev._listed_at = blob, at


def holding(revisions: Iterable[Revision], batch: int = _HOLD_BATCH) -> Iterator[Revision]:
    """``revisions`` in order, each with its signed bytes and signature held while the caller has
    it: a stored revision's are read back a batch at a time (one query for many, not one each),
    and let go again when the caller moves past the batch. For callers that read many revisions'
    bytes: a list page, a sync bundle, a backup, the signature check."""
    pending: list[Revision] = []
    for rev in revisions:
        pending.append(rev)
        if len(pending) >= batch:
            with held(pending):
                yield from pending
            pending = []
    if pending:
        with held(pending):
            yield from pending


@contextlib.contextmanager
def held(revisions: Sequence[Revision]) -> Iterator[None]:
    """Within the block, these revisions hold their signed bytes and signatures (those stored
    are read back together, :class:`StoredRevisions`); afterwards they let them go again."""
    taken = [rev for rev in revisions if rev._signed is None and rev._rows is not None]
    groups: dict[int, tuple[StoredRevisions, list[Revision]]] = {}
    for rev in taken:
        rows = rev._rows
        assert rows is not None
        groups.setdefault(id(rows), (rows, []))[1].append(rev)
    try:
        for rows, group in groups.values():
            for start in range(0, len(group), _HOLD_BATCH):
                part = group[start : start + _HOLD_BATCH]
                for rev, (signed, sig) in zip(part, rows.read(part), strict=True):
                    rev._signed, rev._sig = signed, sig
        yield
    finally:
        for rev in taken:
            if rev._rows is not None:  # another thread may hold it too: it then reads its own copy
                rev._signed = rev._sig = None


class Revision:
    """A signed revision. ``signed`` is the exact signed bytes (never re-encoded).

    An unlocked 100k-note vault holds 100k of these, so only the fields read per revision on
    common paths (listing, indexing, checks at unlock) are kept, as they were decoded and without
    conversion (a malformed foreign revision fails where it used to: when a field is read, after
    the shape check sync runs first). ``body`` decodes the signed bytes again for the rest (issue
    32: the decoded dict was 1.4 KB a revision, more than the signed bytes). A decrypted summary
    is kept packed (``summary_cache``), not as a dict of Python objects. Once its row is stored
    (:meth:`stored`), neither the signed bytes nor the signature are kept: they are read back
    from the row when needed (:class:`StoredRevisions`, :func:`holding` for many).
    """

    __slots__ = (
        "_asset",
        "_cert",
        "_created",
        "_device",
        "_epoch",
        "_kind",
        "_listed",
        "_listed_at",
        "_parents",
        "_policy",
        "_restored_changed",
        "_restored_created",
        "_rows",
        "_seqs",
        "_sig",
        "_signed",
        "_summary",
        "_tombstone",
        "_vault",
        "_z",
        "rev_id",
        "seq",
    )

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
        if not signed.startswith(_PREFIX) and not signed.startswith(_PREFIX_Z):
            raise ValueError("not a revision of a known format")
        self._signed: bytes | None = signed
        self._sig: bytes | None = signature
        self._rows: StoredRevisions | None = None
        self.body_seqs = body_seqs
        self.seq = seq
        kept = _kept_fields(signed) if body is None else None
        if kept is None:
            kept = _fields_of(decode_canonical_flat(signed[len(_PREFIX) :]) if body is None else body)
        (
            self._asset,
            self._vault,
            self._policy,
            self._device,
            self._cert,
            self._epoch,
            kind,
            parents,
            self._tombstone,
            self._created,
            self._restored_created,
            self._restored_changed,
            z,
        ) = kept
        self._kind = sys.intern(kind) if kind.__class__ is str else kind
        # Most revisions have no parent or one: a tuple, and the empty one is shared.
        self._parents = tuple(parents) if parents.__class__ is list else parents
        # Only format 2 has a compressed body; a format-1 revision's "body_z", if any, means nothing.
        # Checked here, so that every reader (sync's shape check, a restore, an unlock) refuses a
        # format-2 revision without a valid one where it refuses any malformed revision.
        self._z: int | None = None
        if signed[len(_PREFIX) - 1] == 2:
            if z.__class__ is not int or z <= 0:
                raise ValueError("a format-2 revision without a valid body_z")
            self._z = z
        self.rev_id = hashlib.sha256(signed).digest()
        self._summary: bytes | dict[str, Any] | None = None
        self._listed: bytes | None = None  # see keep_list_fields
        self._listed_at = 0
        self.summary_cache = summary_cache

    @property
    def body_seqs(self) -> list[int]:
        """The content rows of the body, in order (a fresh list on each read)."""
        seqs = self._seqs
        return [seqs] if isinstance(seqs, int) else list(seqs)

    @body_seqs.setter
    def body_seqs(self, seqs: list[int]) -> None:
        # Kept compact (issue 32): nearly every body is one row, or rows numbered one after
        # another; a list of ints was ~90 bytes a revision, one int is 28.
        if len(seqs) == 1 and seqs[0].__class__ is int:
            self._seqs: int | range | tuple[int, ...] = seqs[0]
        elif len(seqs) > 1 and all(s.__class__ is int for s in seqs) and seqs == list(range(seqs[0], seqs[0] + len(seqs))):
            self._seqs = range(seqs[0], seqs[0] + len(seqs))
        else:
            self._seqs = tuple(seqs)

    def stored(self, rows: StoredRevisions) -> None:
        """Its row is stored (``seq``) and ``rows`` reads it back: let the signed bytes and the
        signature go (issue 32). A revision not signed yet keeps them."""
        if self.seq > 0 and self._sig:
            self._rows = rows
            self._signed = self._sig = None

    @property
    def signed_kept(self) -> bool:
        """Whether the signed bytes are held in memory now (else read back from the stored row)."""
        return self._signed is not None

    @property
    def signed(self) -> bytes:
        signed = self._signed
        if signed is None:
            signed = self._read_back()[0]
        return signed

    @property
    def signature(self) -> bytes:
        sig = self._sig
        if sig is None:
            sig = self._read_back()[1]
        return sig

    @signature.setter
    def signature(self, value: bytes) -> None:
        self._sig = value

    def signed_pair(self) -> tuple[bytes, bytes]:
        """(signed bytes, signature), with at most one read back for both."""
        signed, sig = self._signed, self._sig
        if signed is not None and sig is not None:
            return signed, sig
        return self._read_back()

    def _read_back(self) -> tuple[bytes, bytes]:
        rows = self._rows
        signed, sig = self._signed, self._sig
        if signed is not None and sig is not None:  # held meanwhile by another thread
            return signed, sig
        if rows is None:
            raise MemoriesError("store_corrupt", "A revision's signed bytes are not held.")
        return rows.read([self])[0]

    def _decode(self) -> Any:
        return decode_canonical_flat(self.signed[len(_PREFIX) :])

    @classmethod
    def with_body(cls, signed: bytes, signature: bytes, body_seqs: list[int]) -> tuple[Revision, dict[str, Any]]:
        """The revision and its signed body decoded once, for a caller that reads several of the
        body's other fields (a restore: ``body`` decodes again on every read)."""
        if not signed.startswith(_PREFIX) and not signed.startswith(_PREFIX_Z):
            raise ValueError("not a revision of a known format")
        body = decode_canonical_flat(signed[len(_PREFIX) :])
        return cls(signed, signature, body_seqs, body=body), body

    @property
    def body(self) -> dict[str, Any]:
        """The signed body, decoded from ``signed`` on each call (a fresh dict)."""
        fields: dict[str, Any] = self._decode()
        return fields

    @property
    def summary_cache(self) -> dict[str, Any] | None:
        """The decrypted summary once opened (a fresh dict on each read), else None."""
        packed = self._summary
        if isinstance(packed, bytes):
            summary: dict[str, Any] = _unpack(packed)
            return summary
        return packed

    @summary_cache.setter
    def summary_cache(self, summary: dict[str, Any] | None) -> None:
        if summary is None:
            self._summary = None
            return
        try:
            self._summary = _pack(summary)
        except (TypeError, ValueError, OverflowError):  # a value msgpack cannot hold as it is
            self._summary = summary

    @property
    def list_fields(self) -> tuple[Any, Any] | None:
        """(title, tags) of its summary as read once, for list rows (None: not read yet, or the
        summary maps secrets, whose rows are masked and read whole each time): see
        :func:`keep_list_fields`."""
        blob = self._listed
        if blob is None:
            return None
        at = self._listed_at
        (count,) = _LISTED_COUNT.unpack_from(blob)
        start = _LISTED_END.unpack_from(blob, _LISTED_COUNT.size + 4 * (at - 1))[0] if at else 0
        (end,) = _LISTED_END.unpack_from(blob, _LISTED_COUNT.size + 4 * at)
        base = _LISTED_COUNT.size + 4 * count
        title, tags = _unpack(memoryview(blob)[base + start : base + end])
        return title, tags

    @property
    def list_fields_kept(self) -> bool:
        """Whether :attr:`list_fields` holds them (without unpacking them)."""
        return self._listed is not None

    @property
    def summary_kept(self) -> bool:
        """Whether the decrypted summary is kept (without unpacking it)."""
        return self._summary is not None

    @property
    def signed_bytes(self) -> bytes:
        return self.signed

    @property
    def asset_id(self) -> bytes:
        return bytes(_need(self._asset, "asset"))

    @property
    def vault_id(self) -> bytes:
        return bytes(_need(self._vault, "vault"))

    @property
    def policy_head(self) -> bytes:
        return bytes(_need(self._policy, "policy"))

    @property
    def cert(self) -> Any:
        return _need(self._cert, "cert")

    @property
    def epoch(self) -> int:
        return int(_need(self._epoch, "epoch"))

    @property
    def parents(self) -> list[bytes]:
        return list(_need(self._parents, "parents"))

    @property
    def tombstone(self) -> bool:
        return bool(_need(self._tombstone, "tombstone"))

    @property
    def kind(self) -> str:
        return str(_need(self._kind, "kind"))

    @property
    def created_ms(self) -> int:
        return int(_need(self._created, "created_ms"))

    @property
    def changed_ms(self) -> int:
        """When the content this revision holds was last changed: its own time, or for a
        restore's copy of a head the original head's time (BK-2). What lists sort by."""
        return self._restored_time(self._restored_changed)

    @property
    def item_created_ms(self) -> int:
        """When the item was created, as its first revision says: its own time, or for a
        restore's copy the original item's first revision's time (BK-2)."""
        return self._restored_time(self._restored_created)

    def _restored_time(self, value: Any) -> int:
        # Signed by the restoring device, but a revision from sync could carry anything: only
        # a time no later than the revision itself counts, else the revision's own time.
        created = self.created_ms
        if value.__class__ is int and 0 <= value <= created:
            return int(value)
        return created

    @property
    def author(self) -> bytes:
        return bytes(_need(self._device, "device"))

    def verify_signature(self) -> None:
        signed, signature = self.signed_pair()
        verify(self.author, signed, signature)

    def _sealed_fields(self) -> dict[str, Any]:
        """What opening its summary or body reads from the signed body (wrapped key, sealed
        summary, body digests, and the vault, asset and epoch they are bound to), without
        decoding the rest; the whole body, decoded as before, if it is not well formed."""
        try:
            sealed = _sealed_decoder.decode(memoryview(self.signed)[len(_PREFIX) :])
            if sealed.wrapped_key is None or sealed.summary is None or sealed.body is None:
                return self.body
            return {
                "wrapped_key": _unb64(sealed.wrapped_key.b),
                "summary": [_unb64(chunk.b) for chunk in sealed.summary],
                "body": [_unb64(digest.b) for digest in sealed.body],
                # Read from the same signed bytes when the revision was made.
                "vault": self.vault_id,
                "asset": self.asset_id,
                "epoch": self.epoch,
            }
        except (msgspec.DecodeError, ValueError, KeyError):
            return self.body

    def data_key(self, epoch_key: bytes, body: dict[str, Any] | None = None) -> bytes:
        """``body``: this revision's signed body if the caller holds it decoded (:meth:`with_body`)."""
        return self._data_key(epoch_key, self._sealed_fields() if body is None else body)

    @staticmethod
    def _data_key(epoch_key: bytes, b: dict[str, Any]) -> bytes:
        return open_sealed(epoch_key, b["wrapped_key"], _dek_aad(b["vault"], b["asset"], b["epoch"]))

    def open_summary(self, epoch_key: bytes, *, keep: bool = True) -> dict[str, Any]:
        """The decrypted summary; ``keep`` False: not kept for the next call if not kept already
        (a listing of every item would otherwise keep every summary until the lock)."""
        cached = self.summary_cache
        if cached is None:
            b = self._sealed_fields()  # read once for both the data key and the summary's chunks
            return self._open_summary(self._data_key(epoch_key, b), b, keep=keep)
        return cached

    def open_summary_with(self, dek: bytes, body: dict[str, Any] | None = None, *, keep: bool = True) -> dict[str, Any]:
        """The summary opened with the data key itself (a caller that needs the key anyway);
        ``body`` as for :meth:`data_key`, ``keep`` as for :meth:`open_summary`."""
        cached = self.summary_cache
        if cached is None:
            return self._open_summary(dek, self._sealed_fields() if body is None else body, keep=keep)
        return cached

    def _open_summary(self, dek: bytes, b: dict[str, Any], *, keep: bool = True) -> dict[str, Any]:
        plain = open_chunks(dek, list(b["summary"]), self.asset_id + b"summary")
        summary: dict[str, Any] = decode_canonical(plain)
        if keep:
            self.summary_cache = summary
        return summary

    @property
    def body_z(self) -> int | None:
        """Format 2: the body's length once inflated (its chunks hold a zlib stream); else None."""
        return self._z

    def open_body(self, epoch_key: bytes, chunks: list[bytes]) -> bytes:
        """The body's plaintext (inflated for format 2); ChunkError when anything does not check."""
        from engine.crypto.chunks import ChunkError

        digests = [hashlib.sha256(c).digest() for c in chunks]
        b = self._sealed_fields()  # read once for the digests and the data key
        if digests != list(b["body"]):
            raise ChunkError("body chunks do not match the signed digests")
        stream = open_chunks(self._data_key(epoch_key, b), chunks, self.asset_id + b"body")
        if self._z is None:
            return stream
        try:
            return inflate_body(stream, self._z)
        except BodyEncodingError as exc:
            raise ChunkError(str(exc)) from exc

    def to_record(self) -> dict[str, Any]:
        signed, signature = self.signed_pair()
        if not signature:
            raise ValueError("a revision built unsigned was not signed (sign_revisions)")
        return {"t": "revision", "signed": signed, "sig": signature, "body_seqs": self.body_seqs}

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
    compress: bool = False,
) -> NewContent:
    """Encrypt and sign a new revision. ``content_seqs`` must hold enough row numbers.

    ``unsigned``: laid out but not signed yet; the caller signs it with others in one
    :func:`sign_revisions` before it is stored or shown anywhere. ``compress``: the body may be
    deflated before it is sealed (format 2, when that pays; only for bodies without secrets)."""
    dek = os.urandom(32)
    packed = compress_body(body) if compress and not tombstone else None
    body_z = None if packed is None else len(body)
    if packed is not None:
        body = packed
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
        body_z=body_z,
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
    body_z: int | None = None,
) -> Revision:
    """Sign a revision whose body chunks were sealed one by one with ``dek`` and are already
    written (a streamed file, FI-1). The signed fields are exactly those of :func:`build_revision`.
    ``body_z``: the chunks hold a compressed body of this length (a restore's copy of a format-2
    head, whose chunks it names as they are).

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
        body_z=body_z,
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
    body_z: int | None = None,
) -> Revision:
    """The one place the signed revision body is laid out (HI-2), for whole and streamed bodies.
    ``unsigned``: its signature is left empty, for :func:`sign_revisions` to fill. ``body_z``:
    format 2, the body chunks hold a zlib stream of a body of this many bytes."""
    if sealed_summary is None:
        sealed_summary = seal_chunks(dek, canonical_bytes(summary), asset_id + b"summary")
    signed: dict[str, Any] = {
        "v": 1 if body_z is None else 2,
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
        **({"body_z": body_z} if body_z is not None else {}),
    }
    signed_bytes = domain_bytes(REVISION_TAG, signed["v"], signed)
    signature = b"" if unsigned else sign(identity.device_key, signed_bytes)
    return Revision(signed_bytes, signature, list(content_seqs), body=signed, summary_cache=summary)
