"""The sealed snapshot read back row by row (issue 32: an unlock never holds the stored rows, their
opened and joined form and the payload at once), on a real store: the same payload whatever the
pieces it was written in, and rows that are not exactly what the record names are refused."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from engine.store.database import SnapshotRef, StoreFile
from tests.helpers import PASSWORD


@pytest.fixture()
def store(tmp_path: Path) -> StoreFile:
    service = Service(Paths(tmp_path / "home"), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, Caller("cli:test"))
    return service.require_store()


def _payload() -> list[bytes]:
    # Incompressible and compressible parts, over several 1 MiB sealed rows.
    return [os.urandom(700_000), b"word " * 300_000, os.urandom(900_000), b""]


def test_pieces_written_read_back_as_the_whole(store: StoreFile) -> None:
    pieces = _payload()
    ref = store.write_snapshot(iter(pieces))
    assert ref.count > 1
    read = list(store.read_snapshot_stream(ref))
    assert len(read) > 1  # handed over as the rows are opened, not joined first
    assert b"".join(read) == b"".join(pieces) == store.read_snapshot(ref)
    assert store.read_snapshot(store.write_snapshot(b"".join(pieces))) == b"".join(pieces)


@pytest.mark.parametrize(
    "change",
    [
        # rows intact, but not the ones the record hashed: refused at the end
        lambda ref: dataclasses.replace(ref, digest=bytes(32)),
        # fewer rows than written: the AEAD binds the count
        lambda ref: dataclasses.replace(ref, count=1),
    ],
    ids=["digest", "count"],
)
def test_rows_that_do_not_match_the_record_are_refused(store: StoreFile, change: Callable[[SnapshotRef], SnapshotRef]) -> None:
    wrong = change(store.write_snapshot(_payload()))
    with pytest.raises(MemoriesError) as refused:
        b"".join(store.read_snapshot_stream(wrong))
    assert refused.value.code == "store_corrupt"


def test_a_missing_row_is_refused(store: StoreFile) -> None:
    ref = store.write_snapshot(_payload())
    with pytest.raises(MemoriesError) as refused:
        b"".join(store.read_snapshot_stream(dataclasses.replace(ref, count=ref.count + 1)))
    assert refused.value.code == "store_corrupt"
