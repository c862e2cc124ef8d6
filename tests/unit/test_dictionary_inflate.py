"""A row compressed with its kind's dictionary opens through a raw inflater primed with the
dictionary once (issue 32: zlib's own path checksums and copies the 32 KiB dictionary per row).
It gives what zlib gives, and refuses what zlib refuses, with the same error."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import pytest

from engine.store.database import _Dictionary, _inflate


def _book() -> _Dictionary:
    rng = random.Random(32)
    zdict = bytes(rng.choice(b'abcdefgh {}":,0123456789') for _ in range(32 * 1024))
    return _Dictionary(7, zdict)


def _rows(book: _Dictionary) -> list[bytes]:
    rng = random.Random(1)
    plains = [b"", b"x", book.zdict[100:900], book.zdict[-50:] + bytes(rng.randrange(256) for _ in range(3000))]
    return [book.compress(plain) for plain in plains]


def test_what_zlib_opens_opens_the_same() -> None:
    book = _book()
    for row in _rows(book):
        assert book.inflate(row) == _inflate(row, book.zdict) == zlib.decompressobj(zdict=book.zdict).decompress(row)


def _flip(row: bytes, at: int) -> bytes:
    return row[:at] + bytes([row[at] ^ 0x01]) + row[at + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        lambda row: row[:-1],  # the checksum cut short
        lambda row: row + b"\x00",  # a byte past the end
        lambda row: row[:-4] + b"\x00\x00\x00\x00",  # another checksum
        lambda row: _flip(row, 1),  # the header's check bits
        lambda row: _flip(row, 3),  # another dictionary's ID
        lambda row: _flip(row, len(row) // 2),  # the deflate data
        lambda row: row[:6],  # no data
        lambda row: b"",
    ],
)
def test_what_zlib_refuses_is_refused_the_same(damage: Callable[[bytes], bytes]) -> None:
    book = _book()
    row = damage(_rows(book)[2])
    with pytest.raises(ValueError) as by_zlib:
        _inflate(row, book.zdict)
    with pytest.raises(ValueError) as here:
        book.inflate(row)
    assert str(here.value) == str(by_zlib.value)


def test_a_stream_of_another_dictionary_is_refused() -> None:
    book, other = _book(), _Dictionary(8, b"another dictionary" * 100)
    with pytest.raises(ValueError):
        book.inflate(other.compress(b"another dictionary, and more"))
