"""Disk space for an upload (FI-2): checked before it starts and before every batch it writes.

A file that does not fit used to fill the disk and then jam the vault. Now ``file_begin``
refuses it at once, saying how much it needs and how much is free, and a running upload
stops while ``FLOOR`` is still free when something else fills the disk meanwhile.
"""

from __future__ import annotations

from engine.crypto.aead import NONCE_BYTES, TAG_BYTES
from engine.errors import MemoriesError
from engine.store.checkpointer import JOURNAL_SIZE_LIMIT
from engine.store.database import StoreFile
from engine.store.room import FLOOR, free_bytes
from engine.vault.revision import chunk_count

__all__ = ["check_room_for_upload", "check_room_for_batch"]

_MIB = 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / _MIB:,.1f} MiB"


def _room(store: StoreFile) -> tuple[int, int]:
    """(bytes free on the disk, bytes of free pages inside the store file)."""
    try:
        free = free_bytes(store.path.parent)
    except OSError:
        raise MemoriesError("io_error", "The free space on the disk holding the vault could not be read.") from None
    return free, store.reusable_bytes()


def upload_need(size: int, *, packed: bool = False) -> int:
    """Bytes an upload of ``size`` takes, about: the sealed chunks in the store, as much again in
    the write-ahead log up to its usual size after a checkpoint (``JOURNAL_SIZE_LIMIT``), and
    ``FLOOR`` left over. An estimate: the log may grow further while checkpoints lag behind,
    and then the check before each batch stops the upload in time. A ``packed`` upload writes
    its chunks once, to its pack file, and only their places (a few bytes each) to the log."""
    sealed = size + chunk_count(size) * (NONCE_BYTES + TAG_BYTES)
    return sealed + (0 if packed else min(sealed, JOURNAL_SIZE_LIMIT)) + FLOOR


def check_room_for_upload(store: StoreFile, size: int, *, packed: bool = False) -> None:
    free, reusable = _room(store)
    need = upload_need(size, packed=packed)
    if packed:
        reusable = 0  # a pack is a file of its own
    if free + reusable < need:
        raise MemoriesError(
            "disk_full",
            f"Adding this file needs about {_mib(need)} free on the disk holding the vault, "
            f"and {_mib(free + reusable)} is free; nothing was changed. Free some space and try again.",
        )


def check_room_for_batch(store: StoreFile, size: int, *, packed: bool = False) -> None:
    """Before a batch of ``size`` bytes is written: stop while ``FLOOR`` is still free."""
    free, reusable = _room(store)
    # Rows go to the log and later to the file (whose free pages take them); a pack is written
    # once, beside the store, where free pages inside it are no use.
    room, need = (free, size + FLOOR) if packed else (free + reusable, 2 * size + FLOOR)
    if room < need:
        raise MemoriesError(
            "disk_full",
            "The disk holding the vault is filling up, so the upload stopped before it was full; "
            "nothing was saved. Free some space and try again.",
        )
