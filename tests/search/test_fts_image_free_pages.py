"""The FTS5 image a search snapshot seals keeps no stale index data in its free pages (issue 32):
pages FTS5 frees as it merges segments are zeroed, in a table built here and in one loaded from an
image, so the sealed snapshot holds no tokens of rows deleted since and deflates smaller (SR-6)."""

from __future__ import annotations

import struct

from engine.search.fts import FtsIndex, FtsRow

STALE = "zqstaletokenzq"


def _free_pages(image: bytes) -> list[bytes]:
    """The contents of every page on the image's SQLite freelist (trunk pages and leaves)."""
    size = struct.unpack_from(">H", image, 16)[0] or 65536
    trunk, pages = struct.unpack_from(">I", image, 32)[0], []
    while trunk:
        at = (trunk - 1) * size
        following, count = struct.unpack_from(">II", image, at)
        for i in range(count):
            leaf = struct.unpack_from(">I", image, at + 8 + 4 * i)[0]
            pages.append(image[(leaf - 1) * size : leaf * size])
        trunk = following
    return pages


def _churn(index: FtsIndex, first: int) -> None:
    """Rows added in many small transactions (many segments, merged as they grow), then deleted."""
    for batch in range(40):
        rows = [
            FtsRow(first + batch * 25 + i, f"title {i}", f"{STALE}{batch} body words {i} " * 20, "", "", "", "")
            for i in range(25)
        ]
        index.add(rows)
    index.delete(range(first, first + 1000))


def test_free_pages_of_the_image_hold_zeros_built_here_and_loaded() -> None:
    index = FtsIndex()
    _churn(index, 1)
    index.add([FtsRow(5000, "kept", "a row that stays", "", "", "", "")])
    image, _ = index.image()
    free = _free_pages(image)
    assert free, "the churn freed no page: the test proves nothing"
    assert all(not any(page) for page in free)
    loaded = FtsIndex(image)
    _churn(loaded, 10_000)
    again, _ = loaded.image()
    free = _free_pages(again)
    assert free and all(not any(page) for page in free)
    assert loaded.query("kept", 5) and not loaded.query(f"{STALE}3", 5)
    index.close()
    loaded.close()
