"""The restored archive in rows of many revisions (BK-2, issue 32), and the rows of one
revision that stores restored before still hold.

A restore keeps every original revision read-only. It stored one sealed state row per
revision, which cost as much again as the rest of a revision's handling (encoding, deflate
set-up, sealing and chaining at the restore, opening at every unlock); it now stores
``archived_revisions`` rows of many. These tests run the real engine in this process on real
store files: the restore itself, the content sweep an unlock schedules, history and diff.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.backup.archive import ArchiveIndex
from engine.backup.restore import _ARCHIVE_BATCH, ARCHIVED_BATCH, ARCHIVED_REVISION, ARCHIVED_VAULT
from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.handlers.files import _sweep
from engine.service.service import Service
from engine.vault.core import Unlocked
from tests.helpers import PASSWORD

CALLER = Caller("cli:test")
BACKUP_PW = "archive rows backup password"
NOTES = _ARCHIVE_BATCH + 10  # more revisions than one row holds


def _service(home: Path) -> Service:
    home.mkdir(mode=0o700, parents=True)
    return Service(Paths(home), EngineConfig())


@pytest.fixture(scope="module")
def backup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, list[str]]]:
    """A backup of NOTES notes and one note edited twice (its first two revisions are history only)."""
    root = tmp_path_factory.mktemp("archive-rows")
    source = _service(root / "source")
    try:
        source.dispatch({"op": "init", "password": PASSWORD}, CALLER)
        for i in range(NOTES):
            source.dispatch({"op": "put", "title": f"note {i}", "body": f"body {i}"}, CALLER)
        made = source.dispatch({"op": "put", "title": "edited", "body": "first body"}, CALLER)
        edited, base = made["id"], made["revision"]
        for body in ("second body", "third body"):
            base = source.dispatch({"op": "edit", "id": edited, "body": body, "base": base}, CALLER)["revision"]
        history = [r["revision"] for r in source.dispatch({"op": "history", "id": edited}, CALLER)["revisions"]]
        source.dispatch({"op": "sudo", "password": PASSWORD}, CALLER)
        path = root / "source.backup"
        source.dispatch({"op": "backup_create", "path": str(path), "password": BACKUP_PW}, CALLER)
    finally:
        source.lock_now("test")
    yield path, edited, history


def _restored(home: Path, path: Path) -> Service:
    service = _service(home)
    answer = service.dispatch(
        {"op": "restore", "path": str(path), "backup_password": BACKUP_PW, "password": PASSWORD, "leave_shared": False},
        CALLER,
    )
    assert answer["archived_revisions"] == NOTES + 3
    return service


def test_the_archive_is_stored_in_rows_of_many_revisions(backup: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    """BK-2: every original revision is archived, in rows of at most _ARCHIVE_BATCH; no row of one."""
    path, _edited, _history = backup
    service = _restored(tmp_path / "restored", path)
    try:
        extra = service.require_unlocked().extra_records
        assert ARCHIVED_REVISION not in extra
        rows = [record for _seq, record in extra[ARCHIVED_BATCH]]
        assert [len(r["revisions"]) for r in rows] == [_ARCHIVE_BATCH, NOTES + 3 - _ARCHIVE_BATCH]
        assert len(ArchiveIndex(service.require_unlocked())) == NOTES + 3
    finally:
        service.lock_now("test")


def test_every_archived_content_row_survives_the_unlock_sweep(backup: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    """BK-2/FI-2: the unlock's sweep removes content rows no record names; an archived revision's
    rows (the history-only bodies included) are named by its row, so none is swept and the old
    bodies still read after a lock, an unlock and the sweep."""
    path, edited, history = backup
    service = _restored(tmp_path / "restored", path)
    try:
        service.lock_now("test")
        service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
        assert service.require_store().orphan_content(100) == []
        _sweep(service)  # what the unlock schedules a few seconds later, run now
        restored = service.dispatch({"op": "history", "id": edited}, CALLER)["revisions"]
        archived = [r["revision"] for r in restored if r.get("archived")]
        assert archived == history
        diff = service.dispatch({"op": "diff", "id": edited, "rev_a": history[0][:12], "rev_b": history[1][:12]}, CALLER)["diff"]
        assert "-first body" in diff and "+second body" in diff
    finally:
        service.lock_now("test")


def test_a_store_restored_with_a_row_per_revision_reads_the_same_archive(
    backup: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    """Stores restored before the batches hold one ``archived_revision`` row per revision: the
    archive reads them as it reads the batches (same revisions, same order, same summaries)."""
    path, edited, _history = backup
    service = _restored(tmp_path / "restored", path)
    try:
        state = service.require_unlocked()
        batches = state.extra_records[ARCHIVED_BATCH]
        one_each: list[tuple[int, dict[str, Any]]] = [
            (seq * 1000 + i, {"t": ARCHIVED_REVISION, **entry})
            for seq, batch in batches
            for i, entry in enumerate(batch["revisions"])
        ]
        older = Unlocked(
            state.identity,
            state.vaults,
            state.default_vault,
            extra_records={ARCHIVED_VAULT: state.extra_records[ARCHIVED_VAULT], ARCHIVED_REVISION: one_each},
        )
        new, old = ArchiveIndex(state), ArchiveIndex(older)
        assert len(new) == len(old) == NOTES + 3
        asset = bytes.fromhex(edited)
        assert [r.rev_id for r in new.history(asset)] == [r.rev_id for r in old.history(asset)]
        assert [new.summary(r)["title"] for r in new.history(asset)] == [old.summary(r)["title"] for r in old.history(asset)]
    finally:
        service.lock_now("test")
