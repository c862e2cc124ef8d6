"""A row compressed with its kind's dictionary opens through a raw inflater primed with the
dictionary once (issue 32: zlib's own path checksums and copies the 32 KiB dictionary per row).
It gives what zlib gives, and refuses what zlib refuses, with the same error."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import pytest

from engine.store.database import _Dictionary, _inflate


def _book(kind: str = "") -> _Dictionary:
    rng = random.Random(32)
    zdict = bytes(rng.choice(b'abcdefgh {}":,0123456789') for _ in range(32 * 1024))
    return _Dictionary(7, zdict, kind)


def _rows(book: _Dictionary) -> list[bytes]:
    rng = random.Random(1)
    plains = [b"", b"x", book.zdict[100:900], book.zdict[-50:] + bytes(rng.randrange(256) for _ in range(3000))]
    return [book.compress(plain) for plain in plains]


@pytest.mark.parametrize("kind", ["token", "revision"])
def test_what_zlib_opens_opens_the_same(kind: str) -> None:
    """Also a revision row's, compressed with a 4 KiB window of the dictionary (its tail)."""
    book = _book(kind)
    for row in _rows(book):
        assert row[0] >> 4 == (4 if kind == "revision" else 7)  # the window the header names
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


def _naming_window(row: bytes, bits: int) -> bytes:
    """``row`` with a header that names a ``bits`` window (its check bits made right again)."""
    first = (bits - 8) << 4 | zlib.DEFLATED
    second = row[1] & 0xE0
    second |= (31 - (first << 8 | second) % 31) % 31
    return bytes([first, second]) + row[2:]


def test_a_stream_reaching_past_the_window_it_names_opens_as_zlib_opens_it() -> None:
    """A row's stream opens through the inflater of the window its header names (4 KiB for a
    revision's: a copy of a 32 KiB one cost more than the rest of copying). A stream that names
    4 KiB and refers to the dictionary's start anyway opens as zlib opens it: the small inflater
    fails on it and zlib's own path, whose window is 32 KiB, takes it."""
    book = _book()
    row = _naming_window(book.compress(book.zdict[100:900]), 12)
    assert row[0] >> 4 == 4 and not (row[0] << 8 | row[1]) % 31
    assert book.inflate(row) == zlib.decompressobj(zdict=book.zdict).decompress(row) == book.zdict[100:900]
