"""Note bodies compressed before their data key seals them (issue 32; revision format 2).

A body is sealed under its revision's own data key, so nothing after that can compress it: the
store's rows and the sync's chunks hold its ciphertext. Deflating the plaintext first takes a
10k-note vault's bodies (mixed English/Chinese, ~740 bytes each) from 7.4 to 4.5 MB (4.9 MB
sealed), in the store, in every first sync and in backups.

The revision says so in what it signs (docs/formats.md): format 2 (``memories.revision`` with
version byte 2 and ``"v": 2``) and ``body_z``, the body's length once inflated; ``body_len`` and
the chunk digests cover the zlib stream as stored. A reader inflates at most ``body_z`` bytes and
accepts only exactly that many from exactly one whole stream, so a stream that claims a small
body and inflates to a large one (a bomb) is refused before it is allocated, and a stream cut
short, with bytes after its end, or of another length is refused too (``BodyEncodingError``).
A writer's ``body_z`` is at most what deflate can expand ``body_len`` bytes into.

Only kinds whose bodies hold no secrets are compressed (``core.COMPRESSED_BODY_KINDS``):
compression before encryption makes the stored length depend on how much of the text repeats
itself, which SECURITY.md says and which must not apply to a password beside text an attacker
chose.
"""

from __future__ import annotations

import zlib

__all__ = ["BodyEncodingError", "compress_body", "inflate_body", "max_inflated", "MIN_COMPRESSED_BODY", "MAX_INFLATED_BODY"]

# Smaller bodies are kept as they are: deflate's header and the signed ``body_z`` field would eat
# what it saves.
MIN_COMPRESSED_BODY = 96
# What compression must save at least (bytes) to be used: ``"body_z": N`` in the signed bytes and
# the format change cost about this much in the revision row.
_MIN_SAVING = 16
_LEVEL = 9
# Deflate cannot expand one input byte into more than 1032 (RFC 1951: a 258-byte match per two
# bits at best); with zlib's 2-byte header and 4-byte checksum, never more than this.
_MAX_RATIO = 1032
# The largest body written compressed, and read as such (a note arrives in one IPC frame of at
# most 16 MiB): a signed ``body_z`` beyond it is refused before anything is inflated, so a
# revision from a peer cannot make a reader allocate more than this for one body.
MAX_INFLATED_BODY = 64 * 1024 * 1024


class BodyEncodingError(ValueError):
    """A compressed body that does not inflate to exactly the length its revision signs."""


def max_inflated(stream_len: int) -> int:
    """The most a zlib stream of ``stream_len`` bytes may inflate to here."""
    return min(MAX_INFLATED_BODY, max(0, stream_len - 6) * _MAX_RATIO)


def compress_body(plain: bytes) -> bytes | None:
    """``plain`` deflated, or None when that does not pay (small or incompressible bodies)."""
    if not MIN_COMPRESSED_BODY <= len(plain) <= MAX_INFLATED_BODY:
        return None
    # A window no larger than the body: zlib sets up and clears a 32 KiB window's tables per call,
    # which costs more than compressing a short note (issue 32, as the store's rows).
    packed = zlib.compress(plain, _LEVEL, max(9, min(15, len(plain).bit_length())))
    return packed if len(packed) + _MIN_SAVING <= len(plain) else None


def inflate_body(stream: bytes, inflated_len: int) -> bytes:
    """The body a compressed stream holds: exactly ``inflated_len`` bytes from one whole zlib
    stream, never allocating more than that; BodyEncodingError otherwise."""
    if not 0 < inflated_len <= max_inflated(len(stream)):
        raise BodyEncodingError("a compressed body's signed length is impossible for its stream")
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(stream, inflated_len)
        # The body's bytes are all out; what is left may only be the stream's end (its checksum),
        # which yields nothing: one more byte of output means a longer body.
        if not inflater.eof and inflater.decompress(inflater.unconsumed_tail, 1):
            raise BodyEncodingError("a compressed body inflates to more than its signed length")
    except zlib.error as exc:
        raise BodyEncodingError("a compressed body is not a valid zlib stream") from exc
    if not inflater.eof or inflater.unused_data or len(plain) != inflated_len:
        raise BodyEncodingError("a compressed body is cut short, of another length or followed by other bytes")
    return plain
