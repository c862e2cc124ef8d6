"""The backup file envelope (BK-1): Argon2id-derived key, XChaCha20-Poly1305 chunks, a signed manifest.

Layout (docs/formats.md, "Backup file")::

    magic      16 bytes  b"MEMORIES-BACKUP\\n"
    header     u32 length + canonical bytes {format, version, kdf, created_ms}
    check      u32 length + seal(key, b"", AAD_CHECK + header)       wrong password → wrong_password
    chunk*     u32 length + seal(key, items, AAD_CHUNK + sha256(header) + u64 index + u8 final)

A chunk's plaintext is a run of whole items, each a u32 length and a MessagePack map. The last
item, in the one chunk whose final flag is set, is the manifest: item count and a SHA-256 over
every earlier item's bytes, signed by the device that wrote the backup. Chunks are bound to
their index and the final flag, so a dropped, reordered, appended or truncated chunk fails;
anything after the final chunk fails. Memory stays bounded: one chunk (≤ MAX_CHUNK) at a time.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import msgspec

from engine.crypto.aead import AeadError, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.kdf import KdfParams, derive_key
from engine.crypto.keys import SignatureError, verify
from engine.errors import MemoriesError

__all__ = ["MAGIC", "VERSION", "BackupWriter", "BackupReader", "MANIFEST_TAG"]

MAGIC = b"MEMORIES-BACKUP\n"
FORMAT = "memories-backup"
VERSION = 1
MANIFEST_TAG = "memories.backup-manifest"
CHUNK_TARGET = 1024 * 1024  # plaintext per chunk before it is sealed
MAX_CHUNK = 8 * 1024 * 1024  # a sealed chunk above this is refused (bounded memory)
MAX_HEADER = 4096
# Argon2id parameters a file may ask for: more would let a crafted file exhaust memory or time.
MAX_MEMLIMIT = 1024 * 1024 * 1024
MAX_OPSLIMIT = 20
_AAD_CHECK = b"memories.backup.check\x00\x01"
_AAD_CHUNK = b"memories.backup.chunk\x00\x01"

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def _invalid(detail: str) -> MemoriesError:
    return MemoriesError("backup_invalid", f"The backup file is damaged or truncated ({detail}); nothing was written.")


def _chunk_aad(header_digest: bytes, index: int, final: bool) -> bytes:
    return _AAD_CHUNK + header_digest + struct.pack(">QB", index, 1 if final else 0)


class BackupWriter:
    """Write items into sealed chunks; :meth:`finish` appends the signed manifest."""

    def __init__(self, out: IO[bytes], password: str, kdf: KdfParams) -> None:
        self._out = out
        header = canonical_bytes({"format": FORMAT, "version": VERSION, "kdf": kdf.to_dict(), "created_ms": _now_ms()})
        self._key = derive_key(password, kdf)
        self._header_digest = hashlib.sha256(header).digest()
        self.bytes_written = len(MAGIC)
        out.write(MAGIC)
        self._frame(header)
        self._frame(seal(self._key, b"", _AAD_CHECK + header))
        self._buffer = bytearray()
        self._index = 0
        self._items = 0
        self._digest = hashlib.sha256()

    def _frame(self, data: bytes) -> None:
        self._out.write(struct.pack(">I", len(data)))
        self._out.write(data)
        self.bytes_written += 4 + len(data)

    def add(self, item: dict[str, Any]) -> None:
        data = _encoder.encode(item)
        self._digest.update(struct.pack(">I", len(data)) + data)
        self._items += 1
        self._append(data)
        if len(self._buffer) >= CHUNK_TARGET:
            self._flush(final=False)

    def _append(self, data: bytes) -> None:
        if len(data) + 4 > CHUNK_TARGET * 4:
            raise MemoriesError("io_error", "An item is too large for a backup chunk.")
        if self._buffer and len(self._buffer) + len(data) > CHUNK_TARGET:
            self._flush(final=False)
        self._buffer += struct.pack(">I", len(data)) + data

    def _flush(self, *, final: bool) -> None:
        sealed = seal(self._key, bytes(self._buffer), _chunk_aad(self._header_digest, self._index, final))
        self._frame(sealed)
        self._index += 1
        self._buffer.clear()

    def finish(self, sign: Callable[[bytes], tuple[bytes, dict[str, Any]]]) -> int:
        """``sign(manifest_bytes)`` returns (signature, public identity fields). Returns the item count."""
        body = {"v": 1, "items": self._items, "digest": self._digest.digest(), "created_ms": _now_ms()}
        signed = domain_bytes(MANIFEST_TAG, 1, body)
        signature, who = sign(signed)
        self._append(_encoder.encode({"t": "manifest", "signed": signed, "sig": signature, **who}))
        self._flush(final=True)
        return self._items


class BackupReader:
    """Read, authenticate and yield a backup's items; the manifest is checked after the last one.

    Consumers must treat every item as provisional until iteration ends without an error.
    """

    def __init__(self, src: IO[bytes], password: str) -> None:
        self._src = src
        self.bytes_read = len(MAGIC)
        if src.read(len(MAGIC)) != MAGIC:
            raise MemoriesError("backup_invalid", "This file is not a Memories backup; nothing was written.")
        header = self._frame(MAX_HEADER, "header")
        try:
            fields = decode_canonical(header)
            if not isinstance(fields, dict) or fields.get("format") != FORMAT:
                raise ValueError("format")
            version = fields.get("version")
        except (ValueError, TypeError, KeyError, msgspec.MsgspecError):
            raise _invalid("unreadable header") from None
        if version != VERSION:
            raise MemoriesError(
                "backup_version",
                f"This backup has format version {version!r}; this Memories reads version {VERSION}. Nothing was written.",
            )
        try:
            kdf = KdfParams.from_dict(fields["kdf"])
        except (ValueError, TypeError, KeyError):
            raise _invalid("unsupported key derivation parameters") from None
        if kdf.memlimit > MAX_MEMLIMIT or kdf.opslimit > MAX_OPSLIMIT or kdf.memlimit < 8192 or kdf.opslimit < 1:
            raise _invalid("key derivation parameters out of range")
        self.created_ms = int(fields.get("created_ms", 0))
        check = self._frame(1024, "check")
        self._key = derive_key(password, kdf)
        try:
            open_sealed(self._key, check, _AAD_CHECK + header)
        except AeadError:
            raise MemoriesError("wrong_password", "The backup password is wrong; nothing was written.") from None
        self._header_digest = hashlib.sha256(header).digest()
        self.manifest: dict[str, Any] | None = None

    def _frame(self, limit: int, what: str) -> bytes:
        raw = self._src.read(4)
        if len(raw) != 4:
            raise _invalid(f"the file ends inside the {what}")
        (length,) = struct.unpack(">I", raw)
        if length > limit:
            raise _invalid(f"oversized {what}")
        data = self._src.read(length)
        if len(data) != length:
            raise _invalid(f"the file ends inside the {what}")
        self.bytes_read += 4 + length
        return data

    def items(self) -> Iterator[dict[str, Any]]:
        digest = hashlib.sha256()
        count = 0
        index = 0
        while True:
            sealed = self._frame(MAX_CHUNK, "chunk")
            plain, final = None, False
            for flag in (False, True):
                try:
                    plain = open_sealed(self._key, sealed, _chunk_aad(self._header_digest, index, flag))
                    final = flag
                    break
                except AeadError:
                    continue
            if plain is None:
                raise _invalid(f"chunk {index} failed authentication")
            index += 1
            pos = 0
            while pos < len(plain):
                if pos + 4 > len(plain):
                    raise _invalid("a malformed item")
                (length,) = struct.unpack(">I", plain[pos : pos + 4])
                data = plain[pos + 4 : pos + 4 + length]
                if len(data) != length:
                    raise _invalid("a malformed item")
                pos += 4 + length
                try:
                    item = _decoder.decode(data)
                except msgspec.DecodeError:
                    raise _invalid("a malformed item") from None
                if item.get("t") == "manifest":
                    if not final or pos != len(plain):
                        raise _invalid("the manifest is not the last item")
                    self._check_manifest(item, count, digest.digest())
                    break
                digest.update(struct.pack(">I", length) + data)
                count += 1
                yield item
            if final:
                if self.manifest is None:
                    raise _invalid("the last chunk has no manifest")
                if self._src.read(1):
                    raise _invalid("data after the last chunk")
                return

    def _check_manifest(self, item: dict[str, Any], count: int, digest: bytes) -> None:
        try:
            signed = bytes(item["signed"])
            prefix = MANIFEST_TAG.encode("ascii") + b"\x00\x01"
            if not signed.startswith(prefix):
                raise ValueError("tag")
            body = decode_canonical(signed[len(prefix) :])
            verify(bytes(item["device"]), signed, bytes(item["sig"]))
        except (KeyError, TypeError, ValueError, SignatureError, msgspec.MsgspecError):
            raise _invalid("the manifest signature does not verify") from None
        if body.get("items") != count or body.get("digest") != digest:
            raise _invalid("the manifest does not match the items")
        self.manifest = {**item, "body": body}


def _now_ms() -> int:
    return int(time.time() * 1000)
