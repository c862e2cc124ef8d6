"""The title order and tag sets `list --sort title` and `list --tag` read, held compactly (issue 32).

Built on the first list that needs them (engine/vault/listing.py), from the summaries the list
rows show. At 100k items the former structures held, per item, the case-folded title, its tags,
and three tuples around them (~61 MiB resident). Here an item holds one reference: the head
revision whose summary was read, whose title and tags a listing keeps packed anyway
(Revision.list_fields, engine/vault/revision.py), or, for the few whose summary is not kept that
way (one that maps secrets), a small tuple of what was read. Sort keys (case-folded title, ID)
are computed when compared, never stored: the sorted lists hold the asset IDs the item index
already holds. So nothing here holds decrypted text beyond what the listing design keeps, and a
lock, which drops the item index, drops it all.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from engine.vault.ranked_pages import ranked_page
from engine.vault.revision import Revision

__all__ = ["TitleOrder", "Read", "folded_title", "tag_names"]

# What one item's summary said, as an order records it when the head does not keep it packed:
# (vault ID, kind, case-folded title, tags).
Read = tuple[bytes, str, str, tuple[str, ...]]
TitleKey = tuple[str, bytes]  # (case-folded title, asset ID): the ID breaks ties


def folded_title(title: Any) -> str:
    return str(title).casefold()


def tag_names(tags: Any) -> tuple[str, ...]:
    """The distinct tag names of a summary's ``tags`` field, in order (non-strings skipped)."""
    return tuple(dict.fromkeys(t for t in tags if isinstance(t, str)))


class TitleOrder:
    """Listed items by case-folded title, per (vault, kind) and per vault; the items of each tag."""

    def __init__(self) -> None:
        # asset ID -> the head whose kept list fields were read, or what was read (see Read)
        self._held: dict[bytes, Revision | Read] = {}
        self._groups: dict[tuple[bytes, str], list[bytes]] = {}
        self._vaults: dict[bytes, list[bytes]] = {}
        # tag -> the items carrying it, sorted by ID: a list of the index's IDs (8 bytes an item),
        # not a set (~70 bytes an item at 100k items, issue 32)
        self.tagged: dict[str, list[bytes]] = {}
        # Items put since the sorted lists were last read, placed in them in one merge when they
        # are (``_place``): an import puts thousands between two title-sorted listings, and
        # inserting each into lists of 100k items moved most of each list every time (issue 32).
        self._unplaced: dict[bytes, None] = {}

    def __contains__(self, asset_id: object) -> bool:
        return asset_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def items(self) -> Iterable[bytes]:
        return self._held.keys()

    # -- what each item holds ----------------------------------------------------------------
    @staticmethod
    def _hold(head: Revision | None, vault_id: bytes, kind: str, folded: str, tags: tuple[str, ...]) -> Revision | Read:
        """The head itself when its kept list fields say what was read (nearly always), else a copy.
        The summaries a listing reads are its heads' (engine/service/projections.listed_summaries):
        the head's kept fields are the ones read."""
        if head is not None and head.list_fields_kept and head.kind == kind and head.vault_id == vault_id:
            return head
        return (vault_id, kind, folded, tags)

    def read(self, asset_id: bytes) -> Read:
        """(vault ID, kind, case-folded title, tags) of a held item, as they were read."""
        held = self._held[asset_id]
        if isinstance(held, tuple):
            return held
        fields = held.list_fields
        assert fields is not None  # held only when kept, and kept fields are never dropped
        return held.vault_id, held.kind, folded_title(fields[0]), tag_names(fields[1])

    def _place_of(self, asset_id: bytes) -> tuple[bytes, str]:
        held = self._held[asset_id]
        if isinstance(held, tuple):
            return held[0], held[1]
        return held.vault_id, held.kind

    def title(self, asset_id: bytes) -> str:
        held = self._held[asset_id]
        if isinstance(held, tuple):
            return held[2]
        fields = held.list_fields
        assert fields is not None
        return folded_title(fields[0])

    def key(self, asset_id: bytes) -> TitleKey:
        """The sort key of a held item, computed from what it holds (not stored: issue 32)."""
        return self.title(asset_id), asset_id

    # -- updates ------------------------------------------------------------------------------
    def load(self, rows: Iterable[tuple[bytes, bytes, str, dict[str, Any], Revision | None]]) -> None:
        """Every listed item at once into an empty order: (asset, vault, kind, fields read, head).
        Sorted once: the keys exist only during the sort."""
        keys: list[TitleKey] = []
        held, tagged = self._held, self.tagged
        for asset_id, vault_id, kind, fields, head in rows:
            folded, tags = folded_title(fields.get("title", "")), tag_names(fields.get("tags", []))
            held[asset_id] = self._hold(head, vault_id, kind, folded, tags)
            keys.append((folded, asset_id))
            for tag in tags:
                tagged.setdefault(tag, []).append(asset_id)
        keys.sort()
        ids = [asset_id for _, asset_id in keys]
        del keys  # the titles go before the lists grow
        for asset_id in ids:
            vault_id, kind = self._place_of(asset_id)
            self._groups.setdefault((vault_id, kind), []).append(asset_id)
            self._vaults.setdefault(vault_id, []).append(asset_id)
        for holders in tagged.values():
            holders.sort()

    def put(self, asset_id: bytes, vault_id: bytes, kind: str, fields: dict[str, Any], head: Revision | None) -> None:
        self.drop(asset_id)
        folded, tags = folded_title(fields.get("title", "")), tag_names(fields.get("tags", []))
        self._held[asset_id] = self._hold(head, vault_id, kind, folded, tags)
        self._unplaced[asset_id] = None
        for tag in tags:
            bisect.insort(self.tagged.setdefault(tag, []), asset_id)

    def drop(self, asset_id: bytes) -> None:
        if asset_id not in self._held:
            return
        vault_id, kind, folded, tags = self.read(asset_id)
        if asset_id in self._unplaced:
            del self._unplaced[asset_id]
        else:
            self._remove(self._groups, (vault_id, kind), asset_id, (folded, asset_id))
            self._remove(self._vaults, vault_id, asset_id, (folded, asset_id))
        for tag in tags:
            holders = self.tagged.get(tag)
            if holders is not None:
                at = bisect.bisect_left(holders, asset_id)
                if at < len(holders) and holders[at] == asset_id:
                    del holders[at]
                if not holders:
                    del self.tagged[tag]
        del self._held[asset_id]

    def _remove(self, lists: dict[Any, list[bytes]], name: Any, asset_id: bytes, key: TitleKey) -> None:
        items = lists[name]
        at = bisect.bisect_left(items, key, key=self.key)
        if at < len(items) and items[at] == asset_id:
            del items[at]
        else:  # not where its key puts it: cannot happen while held items keep their fields
            items.remove(asset_id)
        if not items:
            del lists[name]

    def _place(self) -> None:
        """The items put since the last read, into the sorted lists: each list merged once with
        its new items, sorted (keys computed for them and for the few items they are compared with)."""
        if not self._unplaced:
            return
        fresh = sorted(self._unplaced, key=self.key)
        self._unplaced = {}
        groups: dict[tuple[bytes, str], list[bytes]] = {}
        vaults: dict[bytes, list[bytes]] = {}
        for asset_id in fresh:
            vault_id, kind = self._place_of(asset_id)
            groups.setdefault((vault_id, kind), []).append(asset_id)
            vaults.setdefault(vault_id, []).append(asset_id)
        for group, items in groups.items():
            self._groups[group] = _merged(self._groups.get(group, []), items, self.key)
        for vault_id, items in vaults.items():
            self._vaults[vault_id] = _merged(self._vaults.get(vault_id, []), items, self.key)

    # -- queries ------------------------------------------------------------------------------
    def count(self, vault_id: bytes, kinds: Iterable[str]) -> int:
        self._place()
        return sum(len(self._groups.get((vault_id, kind), ())) for kind in kinds)

    def page(self, vault_id: bytes, kinds: Iterable[str], offset: int, limit: int, *, descending: bool) -> list[bytes]:
        """Asset IDs at ranks [offset, offset + limit) of the vault's items of ``kinds``."""
        self._place()
        ids = ranked_page(self._groups, self._vaults, vault_id, kinds, offset, limit, descending=descending, key=self.key)
        return ids[::-1] if descending else ids


def _merged(items: list[bytes], fresh: list[bytes], key: Callable[[bytes], TitleKey]) -> list[bytes]:
    """``items`` and ``fresh`` (each sorted by ``key``, no item in both) as one sorted list, built
    once: each fresh item's place found by bisection from the previous one's."""
    if not items:
        return fresh
    merged: list[bytes] = []
    at = 0
    for asset_id in fresh:
        place = bisect.bisect_left(items, key(asset_id), lo=at, key=key)
        merged += items[at:place]
        merged.append(asset_id)
        at = place
    merged += items[at:]
    return merged
