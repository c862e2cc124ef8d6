"""Pack files on a real filesystem (issue 32, engine/store/packs.py): appends, reads, sweeps."""

from __future__ import annotations

import mmap
import stat
from pathlib import Path

import pytest

from engine.errors import MemoriesError
from engine.store.packs import ALIGN, MAX_CHUNK, PackDir, aligned, packs_path


def _batch(data: bytes) -> mmap.mmap:
    buffer = mmap.mmap(-1, aligned(len(data)))
    buffer[: len(data)] = data
    return buffer


def test_batches_are_appended_at_aligned_offsets_and_read_back(tmp_path: Path) -> None:
    """A pack is 0600 in a 0700 folder beside the store; each batch lands after the last at a
    multiple of ALIGN; reads return exactly the places asked for, across batches."""
    folder = PackDir(packs_path(tmp_path / "store.db"))
    writer = folder.create(7)
    first, second = _batch(b"a" * 5000), _batch(b"b" * 10)
    with memoryview(first) as one, memoryview(second) as two:
        assert writer.append(one) == 0
        assert writer.append(two) == 2 * ALIGN
    writer.sync()
    writer.close()
    pack = tmp_path / "store.db-packs" / f"{7:016x}.pack"
    assert stat.S_IMODE(pack.stat().st_mode) == 0o600 and stat.S_IMODE(pack.parent.stat().st_mode) == 0o700
    assert pack.stat().st_size == 3 * ALIGN
    assert folder.read([(7, 4990, 10), (7, 2 * ALIGN, 10), (7, 0, 3)]) == [b"a" * 10, b"b" * 10, b"aaa"]
    with pytest.raises(ValueError):
        folder.create(8).append(memoryview(bytearray(100)))


def test_memory_the_disk_cannot_take_directly_is_written_through_the_cache(tmp_path: Path) -> None:
    """A batch in memory O_DIRECT refuses (not page-aligned) is still written, the same bytes."""
    folder = PackDir(tmp_path / "packs")
    writer = folder.create(1)
    unaligned = bytearray(b"x" * (ALIGN + 1))
    with memoryview(unaligned)[1:] as view:
        assert writer.append(view) == 0
    aligned_batch = _batch(b"y" * 10)
    with memoryview(aligned_batch) as view:
        assert writer.append(view) == ALIGN
    writer.close()
    assert folder.read([(1, 0, ALIGN), (1, ALIGN, 10)]) == [b"x" * ALIGN, b"y" * 10]


@pytest.mark.parametrize(
    ("place", "why"),
    [((2, 0, 10), "missing pack"), ((1, ALIGN - 5, 10), "short"), ((1, 0, MAX_CHUNK + 1), "too long"), ((1, -1, 5), "negative")],
)
def test_a_place_that_is_not_in_a_pack_is_store_corrupt(tmp_path: Path, place: tuple[int, int, int], why: str) -> None:
    folder = PackDir(tmp_path / "packs")
    writer = folder.create(1)
    batch = _batch(b"z" * ALIGN)
    with memoryview(batch) as view:
        writer.append(view)
    writer.close()
    with pytest.raises(MemoriesError) as refused:
        folder.read([(1, 0, 5), place])
    assert refused.value.code == "store_corrupt", why


def test_the_sweep_removes_only_packs_no_row_names_and_no_upload_writes(tmp_path: Path) -> None:
    folder = PackDir(tmp_path / "packs")
    for pack in (1, 2):
        folder.create(pack).close()
    writing = folder.create(3)  # an upload still writing it, no rows yet
    (folder.path / "notes.txt").write_text("not a pack")
    assert folder.sweep(lambda: {1}) == 1
    assert folder.on_disk() == [1, 3] and (folder.path / "notes.txt").exists()
    writing.close()
    assert folder.sweep(lambda: {1}) == 1 and folder.on_disk() == [1]
    assert PackDir(tmp_path / "none").sweep(lambda: set()) == 0  # no folder yet: nothing to do


def test_a_commits_pack_never_takes_a_name_in_use(tmp_path: Path) -> None:
    """A commit's pack (``write_whole``) is refused, writing nothing, while an upload writes a pack
    of that name or a file of that name is there; otherwise its blobs read back at their places,
    each 8 MiB piece starting on a page."""
    folder = PackDir(tmp_path / "packs")
    upload = folder.create(5)
    with memoryview(_batch(b"u" * 10)) as view:
        upload.append(view)
    assert folder.write_whole(5, [b"c" * 100]) is None
    upload.close()
    assert folder.write_whole(5, [b"c" * 100]) is None  # the file is still there
    assert folder.read([(5, 0, 10)]) == [b"u" * 10]
    blobs = [bytes([n]) * (MAX_CHUNK - n) for n in range(40)]  # over 8 MiB: two pieces
    places = folder.write_whole(6, blobs)
    assert places is not None and [length for _, length in places] == [len(b) for b in blobs]
    pieces = [offset for (offset, _), (before, length) in zip(places[1:], places, strict=False) if offset != before + length]
    assert places[0][0] == 0 and len(pieces) == 1 and pieces[0] % ALIGN == 0  # the second piece starts on a page
    assert folder.read([(6, offset, length) for offset, length in places]) == blobs
    with pytest.raises(ValueError):
        folder.write_whole(7, [b"x" * (MAX_CHUNK + 1)])
    assert 7 not in folder.on_disk()
