"""The index cache (SR-2): at most two vault indexes, keyed by vault and policy head, wiped on lock."""

from __future__ import annotations

from collections import OrderedDict

from engine.search.index import Limits, VaultIndex

__all__ = ["IndexCache", "MAX_INDEXES"]

MAX_INDEXES = 2


class IndexCache:
    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._indexes: OrderedDict[bytes, VaultIndex] = OrderedDict()

    def get(self, vault_id: bytes, policy_head: bytes) -> VaultIndex | None:
        """The cached index if it was built under this policy head; a stale one is dropped."""
        index = self._indexes.get(vault_id)
        if index is None:
            return None
        if index.policy_head != policy_head:
            self.drop(vault_id)
            return None
        self._indexes.move_to_end(vault_id)
        return index

    def peek(self, vault_id: bytes) -> VaultIndex | None:
        return self._indexes.get(vault_id)

    def indexes(self) -> list[VaultIndex]:
        return list(self._indexes.values())

    def put(self, index: VaultIndex) -> None:
        self.drop(index.vault_id)
        self._indexes[index.vault_id] = index
        while len(self._indexes) > MAX_INDEXES:
            _, evicted = self._indexes.popitem(last=False)
            evicted.close()

    def drop(self, vault_id: bytes) -> None:
        index = self._indexes.pop(vault_id, None)
        if index is not None:
            index.close()

    def wipe(self) -> None:
        """Lock: release every index and its plaintext (ST-10)."""
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()

    def __len__(self) -> int:
        return len(self._indexes)
