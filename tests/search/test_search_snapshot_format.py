"""The snapshot payload (engine/search/snapshot.py, issue 32) in process: a dump loads into an
index that answers as the original does, and bytes that are not a dump of this vault, policy head
and bounds are refused (ValueError) or not used (None), never half-loaded."""

from __future__ import annotations

import random

import pytest

from bench.search import note
from engine.search.documents import Document, prepare
from engine.search.index import Limits, VaultIndex
from engine.search.query import parse_query
from engine.search.segment import Segmenter
from engine.search.snapshot import dump, dump_pieces, load

VAULT, POLICY = b"v" * 16, b"p" * 32
SEGMENTER = Segmenter()


def _index(count: int) -> VaultIndex:
    rng = random.Random(7)
    index = VaultIndex(VAULT, POLICY)
    items = []
    for i in range(count):
        n = note(rng, i)
        doc = Document(
            i.to_bytes(16, "big"), (i + 1).to_bytes(32, "big"), "memory", str(n["title"]), str(n["body"]), ("t",), (), i
        )
        items.append((doc, prepare(doc, SEGMENTER)))
    index.upsert_many(items, defer_postings=True)  # a build's rows, absorbed by the dump
    index.remove((3).to_bytes(16, "big"))
    return index


def test_a_dump_loads_into_an_index_that_answers_the_same() -> None:
    """Issue 32: same hits and scores for word, prefix, phrase and Chinese queries; same bookkeeping."""
    index = _index(300)
    loaded = load(dump(index), VAULT, POLICY, Limits())
    assert loaded is not None
    for text in ["mattered", "passport marathon kyoto", "记忆", "kyo", '"the passport"', "Note 42"]:
        query = parse_query(text, SEGMENTER)
        want = [(h.asset_id, h.rowid, h.score) for h in index.search(query, mode="lexical", limit=50)]
        got = [(h.asset_id, h.rowid, h.score) for h in loaded.search(query, mode="lexical", limit=50)]
        assert got == want and want, text
    assert set(loaded.assets) == set(index.assets) and loaded.chunks.keys() == index.chunks.keys()
    assert loaded.text_bytes == index.text_bytes and loaded.changes == index.changes
    assert loaded.by_key == index.by_key
    # Later changes work on the loaded index as on any other.
    loaded.remove((5).to_bytes(16, "big"))
    assert (5).to_bytes(16, "big") not in loaded.assets


def test_a_dump_of_another_vault_policy_or_bounds_is_not_used() -> None:
    data = dump(_index(20))
    assert load(data, b"w" * 16, POLICY, Limits()) is None
    assert load(data, VAULT, b"q" * 32, Limits()) is None
    assert load(data, VAULT, POLICY, Limits(max_chunks=5)) is None


@pytest.mark.parametrize("cut", [0, 1, 10, 1000, -1])
def test_bytes_that_are_not_a_dump_are_refused(cut: int) -> None:
    data = dump(_index(20))
    broken = data[:cut] if cut >= 0 else data[:-1]
    with pytest.raises(ValueError):
        load(broken, VAULT, POLICY, Limits())


def _with_frame(pieces: list[bytes], frame: int, data: bytes) -> bytes:
    """The payload with its ``frame``-th frame (0: the head) replaced by ``data``."""
    pieces = list(pieces)
    pieces[2 * frame : 2 * frame + 2] = [len(data).to_bytes(8, "big"), data]
    return b"".join(pieces)


def test_a_dump_with_a_damaged_database_image_is_refused() -> None:
    pieces = dump_pieces(_index(20))  # head, bookkeeping, FTS5 image, postings, assets, chunks
    with pytest.raises(ValueError):
        load(_with_frame(pieces, 2, b"SQLite format 3\x00" + b"\x00" * 100), VAULT, POLICY, Limits())
    with pytest.raises(ValueError):
        load(_with_frame(pieces, 3, b"\x01\x02"), VAULT, POLICY, Limits())


def test_a_dump_read_in_pieces_of_any_size_loads_the_same() -> None:
    """Issue 32: the unlock loads the payload as the store opens it, piece by piece, without ever
    holding it whole; where the pieces are cut does not matter, and trailing bytes are refused."""
    index = _index(120)
    data = dump(index)
    for size in (1, 7, 4096, len(data)):
        loaded = load((data[i : i + size] for i in range(0, len(data), size)), VAULT, POLICY, Limits())
        assert loaded is not None
        assert loaded.chunks.keys() == index.chunks.keys() and loaded.by_key == index.by_key
        assert [loaded.chunks[r].text for r in loaded.chunks] == [index.chunks[r].text for r in index.chunks]
        assert {a: (i.doc, i.folded_title, i.stamp) for a, i in loaded.assets.items()} == {
            a: (i.doc, i.folded_title, i.stamp) for a, i in index.assets.items()
        }
    with pytest.raises(ValueError):
        load([data, b"\x00"], VAULT, POLICY, Limits())


def test_a_version_1_snapshot_is_not_used() -> None:
    """A snapshot saved before the payload was framed (one msgpack map) is rebuilt, not refused."""
    import msgspec

    old = msgspec.msgpack.encode({"version": "x/snapshot-1", "vault": VAULT, "policy": POLICY, "fts": b"", "postings": b""})
    assert load(old, VAULT, POLICY, Limits()) is None
