"""Note bodies compressed before their data key seals them (issue 32, revision format 2): the
signed format, the reader's checks (a bomb, a cut stream, bytes after it, a wrong length) and
format 1 read as before (HI-2, ST-4)."""

from __future__ import annotations

import hashlib
import os
import zlib

import pytest

from engine.crypto.chunks import ChunkError, seal_chunks
from engine.crypto.keys import new_identity, verify
from engine.sync.merge import _check_shape
from engine.vault.body_encoding import MAX_INFLATED_BODY, BodyEncodingError, compress_body, inflate_body, max_inflated
from engine.vault.revision import COMPRESSED_FORMAT_PREFIX, REVISION_TAG, Revision, build_revision, build_streamed_revision

EPOCH_KEY = b"\x22" * 32
ASSET = b"\x33" * 16
TEXT = ("Meeting notes: the passport office in Kyoto opens at nine. 京都の事務所は九時に開く。 " * 8).encode()
_IDENTITY = new_identity()


def _built(body: bytes, *, compress: bool, kind: str = "memory") -> tuple[Revision, list[bytes]]:
    made = build_revision(
        identity=_IDENTITY,
        vault_id=b"\x11" * 16,
        policy_head=b"\x44" * 32,
        epoch=1,
        epoch_key=EPOCH_KEY,
        asset_id=ASSET,
        kind=kind,
        parents=[],
        tombstone=False,
        summary={"title": "t", "tags": []},
        body=body,
        content_seqs=[1, 2, 3],
        compress=compress,
    )
    return made.revision, [chunk for _, chunk in made.content_rows]


def _claiming(stream: bytes, body_z: int) -> tuple[Revision, list[bytes]]:
    """A validly signed format-2 revision whose chunks hold ``stream`` and which signs ``body_z``:
    what a faulty or hostile device of the vault could send."""
    dek = os.urandom(32)
    chunks = seal_chunks(dek, stream, ASSET + b"body")
    rev = build_streamed_revision(
        identity=_IDENTITY,
        vault_id=b"\x11" * 16,
        policy_head=b"\x44" * 32,
        epoch=1,
        epoch_key=EPOCH_KEY,
        asset_id=ASSET,
        kind="memory",
        parents=[],
        summary={"title": "t", "tags": []},
        dek=dek,
        body_digests=[hashlib.sha256(c).digest() for c in chunks],
        body_len=len(stream),
        content_seqs=list(range(1, len(chunks) + 1)),
        body_z=body_z,
    )
    return rev, chunks


def test_a_compressible_body_is_a_signed_format_2_revision_that_reads_back() -> None:
    rev, chunks = _built(TEXT, compress=True)
    assert rev.signed.startswith(COMPRESSED_FORMAT_PREFIX) and rev.body["v"] == 2
    assert rev.body_z == len(TEXT) and rev.body["body_len"] < len(TEXT) // 2
    assert sum(len(c) for c in chunks) < len(TEXT) // 2
    verify(rev.author, rev.signed, rev.signature)  # the signature covers body_z and the stream's digests
    assert rev.open_body(EPOCH_KEY, chunks) == TEXT
    again = Revision(rev.signed, rev.signature, [1])  # as read back from its state row
    assert again.body_z == len(TEXT) and again.open_body(EPOCH_KEY, chunks) == TEXT
    _check_shape(again)


@pytest.mark.parametrize("body", [b"", b"short", os.urandom(4096)])
def test_small_or_incompressible_bodies_and_kinds_not_asked_stay_format_1(body: bytes) -> None:
    for compress in (True, False):
        rev, chunks = _built(body, compress=compress)
        assert rev.signed.startswith(REVISION_TAG.encode() + b"\x00\x01") and rev.body["v"] == 1 and "body_z" not in rev.body
        assert rev.body_z is None and rev.open_body(EPOCH_KEY, chunks) == body
        _check_shape(rev)
    rev, _ = _built(TEXT, compress=False)
    assert rev.body_z is None and "body_z" not in rev.body


def test_a_format_1_revision_that_names_body_z_is_read_as_it_is() -> None:
    """Only format 2 means a compressed body: a format-1 revision is never inflated."""
    rev, chunks = _built(TEXT, compress=False)
    assert Revision(rev.signed, rev.signature, [1]).open_body(EPOCH_KEY, chunks) == TEXT


@pytest.mark.parametrize(
    ("stream", "body_z", "why"),
    [
        # a bomb: 64 KiB of zeros in ~100 bytes, signed as a 100-byte body; inflated no further than that
        (zlib.compress(bytes(64 * 1024), 9), 100, "more than its signed length"),
        (zlib.compress(TEXT, 9)[:-5], len(TEXT), "cut short"),
        (zlib.compress(TEXT, 9) + b"after", len(TEXT), "followed by other bytes"),
        (zlib.compress(TEXT, 9), len(TEXT) + 1, "cut short"),
        (b"not a zlib stream, just words", 10, "not a valid zlib stream"),
    ],
)
def test_a_compressed_body_that_is_not_exactly_its_signed_length_is_refused(stream: bytes, body_z: int, why: str) -> None:
    rev, chunks = _claiming(stream, body_z)
    verify(rev.author, rev.signed, rev.signature)  # signed and sealed correctly: only the stream is wrong
    with pytest.raises(ChunkError, match=why):
        rev.open_body(EPOCH_KEY, chunks)


def test_a_signed_length_beyond_what_the_stream_can_hold_is_refused_before_inflating() -> None:
    """A body_z beyond deflate's ratio (or the cap) for the stream's length is refused by the sync
    shape check and by the reader, before any byte is inflated."""
    stream = zlib.compress(TEXT, 9)
    rev, chunks = _claiming(stream, max_inflated(len(stream)) + 1)
    with pytest.raises(ValueError, match="body_z"):
        _check_shape(rev)
    with pytest.raises(ChunkError, match="impossible"):
        rev.open_body(EPOCH_KEY, chunks)
    with pytest.raises(BodyEncodingError):
        inflate_body(stream, MAX_INFLATED_BODY + 1)
    assert max_inflated(10**9) == MAX_INFLATED_BODY


def test_format_and_version_field_must_agree_for_sync() -> None:
    """A format-1 revision saying "v": 2 (or the reverse) is malformed to the sync shape check."""
    from engine.crypto.canonical import domain_bytes
    from engine.crypto.keys import sign

    rev, _ = _built(TEXT, compress=True)
    body = dict(rev.body)
    signed = domain_bytes(REVISION_TAG, 1, body)  # "v": 2 and body_z, under the format-1 prefix
    with pytest.raises(ValueError, match="version"):
        _check_shape(Revision(signed, sign(_IDENTITY.device_key, signed), []))
    body = {k: v for k, v in rev.body.items() if k != "body_z"}
    signed = domain_bytes(REVISION_TAG, 2, body)
    with pytest.raises(ValueError, match="body_z"):
        _check_shape(Revision(signed, sign(_IDENTITY.device_key, signed), []))


def test_compress_body_keeps_only_what_pays() -> None:
    assert compress_body(b"x" * 95) is None
    assert compress_body(os.urandom(2000)) is None
    packed = compress_body(TEXT)
    assert packed is not None and inflate_body(packed, len(TEXT)) == TEXT
