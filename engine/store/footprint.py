"""How much disk a store takes, by part: for ``status`` (issue 32: a 100k vault's size was
visible only with ``du``, and since large files moved to pack files not even in ``store.db``).

Only sizes and counts of files that anyone who can list the data directory sees anyway; read
with ``stat``, never opened, so it costs the same locked or unlocked and reveals nothing the
file system does not. The caller decides when to show it (``status`` shows it when unlocked).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from engine.store.packs import is_pack_name, packs_path
from engine.store.room import reserve_path

__all__ = ["Footprint", "footprint"]


@dataclass(frozen=True)
class Footprint:
    store_bytes: int  # the database and its write-ahead log: every record, note body and small file
    pack_bytes: int  # large files' sealed chunks (engine/store/packs.py)
    packs: int
    reserve_bytes: int  # zeros kept for a full disk (engine/store/room.py): not data, but disk all the same

    @property
    def total_bytes(self) -> int:
        """The vault's own bytes. The reserve is apart: a constant few MiB that would make a new,
        nearly empty vault look like 8 MiB of data."""
        return self.store_bytes + self.pack_bytes

    def to_json(self) -> dict[str, int]:
        return {
            "total_bytes": self.total_bytes,
            "store_bytes": self.store_bytes,
            "pack_bytes": self.pack_bytes,
            "packs": self.packs,
            "reserve_bytes": self.reserve_bytes,
        }


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # not there (no log right after a checkpoint, no reserve on a full disk)
        return 0


def footprint(store: Path) -> Footprint:
    """The sizes of ``store`` and the files beside it that belong to it."""
    pack_bytes = packs = 0
    with contextlib.suppress(OSError), os.scandir(packs_path(store)) as entries:
        for entry in entries:
            if is_pack_name(entry.name):
                with contextlib.suppress(OSError):  # removed meanwhile (an aborted upload, the sweep)
                    pack_bytes += entry.stat(follow_symlinks=False).st_size
                    packs += 1
    return Footprint(
        store_bytes=_size(store) + _size(f"{store}-wal"),
        pack_bytes=pack_bytes,
        packs=packs,
        reserve_bytes=_size(reserve_path(store)),
    )
