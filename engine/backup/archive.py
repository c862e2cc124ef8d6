"""The read-only archive of a restored store: the original signed history (BK-2).

A restore (engine/backup/restore.py) keeps the backed-up vaults' policy histories and epoch
keys as ``archived_vault`` rows and every original revision with its content rows, in
``archived_revisions`` rows of many revisions (one ``archived_revision`` row per revision in
stores restored before issue 32's third pass; both are read). They are outside the live DAG
(new writes, sync and the index never see them); history and diff read them through this
index. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.backup.restore import ARCHIVED_BATCH, ARCHIVED_REVISION, ARCHIVED_VAULT
from engine.crypto.chunks import ChunkError
from engine.errors import MemoriesError
from engine.vault.core import Unlocked
from engine.vault.revision import Revision

__all__ = ["ArchiveIndex"]


class ArchiveIndex:
    def __init__(self, state: Unlocked) -> None:
        self._keys: dict[bytes, dict[int, bytes]] = {}
        for _seq, record in state.extra_records.get(ARCHIVED_VAULT, []):
            self._keys[bytes(record["old"])] = {int(e["epoch"]): bytes(e["key"]) for e in record["epoch_keys"]}
        self._by_asset: dict[bytes, list[Revision]] = {}
        # A store holds one of the two kinds. In a batch, revisions share its row number and keep
        # the file's order (parents first), which history's stable sort keeps for equal times.
        entries = [(seq, record) for seq, record in state.extra_records.get(ARCHIVED_REVISION, [])]
        entries += [(seq, entry) for seq, batch in state.extra_records.get(ARCHIVED_BATCH, []) for entry in batch["revisions"]]
        for seq, entry in entries:
            rev = Revision(bytes(entry["signed"]), bytes(entry["sig"]), list(entry["body_seqs"]), seq=seq)
            self._by_asset.setdefault(rev.asset_id, []).append(rev)

    def __len__(self) -> int:
        return sum(len(revs) for revs in self._by_asset.values())

    def history(self, asset_id: bytes) -> list[Revision]:
        """The archived revisions of one item, oldest first."""
        return sorted(self._by_asset.get(asset_id, []), key=lambda r: (r.created_ms, r.seq))

    def resolve(self, asset_id: bytes, prefix: str) -> Revision | None:
        text = prefix.strip().lower()
        found = [r for r in self._by_asset.get(asset_id, []) if r.rev_id.hex().startswith(text)]
        if len(found) > 1:
            raise MemoriesError("ambiguous_id", "That revision prefix matches more than one archived revision.")
        return found[0] if found else None

    def _epoch_key(self, rev: Revision) -> bytes:
        try:
            return self._keys[rev.vault_id][rev.epoch]
        except KeyError:
            raise MemoriesError("store_corrupt", "An archived revision has no key in the archive.") from None

    def summary(self, rev: Revision) -> dict[str, Any]:
        try:
            return rev.open_summary(self._epoch_key(rev))
        except ChunkError as exc:
            raise MemoriesError("store_corrupt", "An archived revision failed authentication.") from exc

    def body(self, rev: Revision, read_content: Callable[[list[int]], list[bytes]]) -> str:
        try:
            return rev.open_body(self._epoch_key(rev), read_content(rev.body_seqs)).decode("utf-8")
        except (ChunkError, UnicodeDecodeError) as exc:
            raise MemoriesError("store_corrupt", "An archived revision failed authentication.") from exc
