"""The orders `list` pages through, kept current with the index (issue 20).

A page of a 10k-item vault must cost what the page costs, not what the vault holds. The
asset index (engine/vault/index.py) tells this module whenever an item's heads change
(commit, sync merge, hide); it keeps, per vault and kind, the listed items sorted by when
they last changed. Titles and tags live in encrypted summaries, which only the service can
open: those orders are built on the first list that needs them and afterwards brought up to
date for the items that changed since, through the summary reader the caller passes.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from engine.vault.ranked_pages import ranked_page
from engine.vault.revision import Revision
from engine.vault.title_order import TitleOrder

__all__ = ["SortedGroups", "ListOrder", "Key", "Summaries", "SUMMARY_BATCH"]

# (sort value, asset ID): the ID breaks ties, and its bytes sort as its hex does.
Key = tuple[Any, bytes]
# The summaries the list rows of these items show, in the same order.
Summaries = Callable[[Sequence[bytes]], list[dict[str, Any]]]
SUMMARY_BATCH = 256  # items whose summaries are asked for together (read back in one query)
Name = TypeVar("Name", bytes, tuple[bytes, str])


class SortedGroups:
    """Items sorted by one key, per (vault, kind) and per vault over all kinds.

    Lists are sorted lazily after a bulk load (an unlock applies every revision: inserting
    each into a sorted list would be quadratic) and kept sorted by bisection afterwards.
    """

    def __init__(self) -> None:
        self.keys: dict[bytes, tuple[bytes, str, Key]] = {}
        self._groups: dict[tuple[bytes, str], list[Key]] = {}
        self._vaults: dict[bytes, list[Key]] = {}
        self._sorted = False

    def put(self, asset_id: bytes, vault_id: bytes, kind: str, value: Any) -> None:
        self.drop(asset_id)
        key = (value, asset_id)
        self.keys[asset_id] = (vault_id, kind, key)
        if self._sorted:
            bisect.insort(self._groups.setdefault((vault_id, kind), []), key)
            bisect.insort(self._vaults.setdefault(vault_id, []), key)

    def drop(self, asset_id: bytes) -> None:
        old = self.keys.pop(asset_id, None)
        if old is None or not self._sorted:
            return
        vault_id, kind, key = old
        _remove(self._groups, (vault_id, kind), key)
        _remove(self._vaults, vault_id, key)

    def _ensure_sorted(self) -> None:
        if self._sorted:
            return
        self._groups, self._vaults = {}, {}
        for vault_id, kind, key in self.keys.values():
            self._groups.setdefault((vault_id, kind), []).append(key)
            self._vaults.setdefault(vault_id, []).append(key)
        for items in itertools.chain(self._groups.values(), self._vaults.values()):
            items.sort()
        self._sorted = True

    def kinds_in(self, vault_id: bytes) -> list[str]:
        self._ensure_sorted()
        return [kind for vault, kind in self._groups if vault == vault_id]

    def count(self, vault_id: bytes, kinds: Iterable[str]) -> int:
        self._ensure_sorted()
        return sum(len(self._groups.get((vault_id, kind), ())) for kind in kinds)

    def page(self, vault_id: bytes, kinds: Iterable[str], offset: int, limit: int, *, descending: bool) -> list[bytes]:
        """Asset IDs at ranks [offset, offset + limit) of the vault's items of ``kinds``."""
        self._ensure_sorted()
        keys = ranked_page(self._groups, self._vaults, vault_id, kinds, offset, limit, descending=descending)
        ids = [asset_id for _, asset_id in keys]
        return ids[::-1] if descending else ids


def _remove(lists: dict[Name, list[Key]], name: Name, key: Key) -> None:
    items = lists[name]
    del items[bisect.bisect_left(items, key)]
    if not items:
        del lists[name]


class ListOrder:
    """What `list` reads: listed items by change time (always current), by title and by tag
    (derived from summaries on first use, then refreshed for the items changed since).

    ``head_of``: the head whose summary a list row shows (AssetIndex.newest_head), which keeps
    the title and tags a listing read (Revision.list_fields): the title order holds that head,
    not copies of its fields (engine/vault/title_order.py, issue 32)."""

    def __init__(self, head_of: Callable[[bytes], Revision] | None = None) -> None:
        self.by_time = SortedGroups()
        self.conflicted: set[bytes] = set()  # listed items with more than one head
        self._head_of = head_of
        self._by_title: TitleOrder | None = None
        self._changed: set[bytes] = set()  # items whose title and tags must be read again
        # Case-folded title -> the listed items holding it (one ID, or a list when several do):
        # what [[wikilinks]] resolve by. Built on first use, then kept current with the title
        # order (each batch of an import asks again: a rebuild each time was O(vault) per batch).
        self._holders: dict[str, bytes | list[bytes]] | None = None

    def listed(self, asset_id: bytes, vault_id: bytes, kind: str, updated_ms: int, conflict: bool) -> None:
        self.by_time.put(asset_id, vault_id, kind, updated_ms)
        if conflict:
            self.conflicted.add(asset_id)
        else:
            self.conflicted.discard(asset_id)
        self._changed.add(asset_id)

    def load(self, rows: Iterable[tuple[bytes, bytes, str, int, bool]]) -> None:
        """``listed`` for each of many items (asset, vault, kind, change time, conflict): at once
        into an order that lists nothing yet (the first list after an unlock), else one by one."""
        by_time = self.by_time
        if by_time.keys or by_time._sorted or self._by_title is not None:
            for row in rows:
                self.listed(*row)
            return
        # What ``listed`` does to an empty order, without its calls: the lists are sorted on first
        # use, and the title order, not built yet, reads every item when it is.
        keys, conflicted = by_time.keys, self.conflicted
        for asset_id, vault_id, kind, updated_ms, conflict in rows:
            keys[asset_id] = (vault_id, kind, (updated_ms, asset_id))
            if conflict:
                conflicted.add(asset_id)

    def unlisted(self, asset_id: bytes) -> None:
        self.by_time.drop(asset_id)
        self.conflicted.discard(asset_id)
        self._changed.add(asset_id)

    @property
    def derived_built(self) -> bool:
        """Whether the title order and tag sets exist (built by the first list that needed them)."""
        return self._by_title is not None

    def derived(self, summaries: Summaries) -> tuple[TitleOrder, dict[str, list[bytes]]]:
        """Title order and tag sets, current; ``summaries`` gives the summaries the list rows of
        some items show, in their order (asked a batch at a time: the first title sort of a
        100k-item vault read every summary back from the store one query each, issue 32)."""
        by_title = self._by_title
        if by_title is None:
            by_title = self._by_title = TitleOrder()
            self._holders = None  # built again from the new title order when next asked for
            by_title.load(self._read(summaries, list(self.by_time.keys)))
            self._changed = set()
            return by_title, by_title.tagged
        titled = self._holders
        shown: list[bytes] = []  # listed items among the changed
        for asset_id in self._changed:
            if titled is not None and asset_id in by_title:
                _unhold(titled, by_title.title(asset_id), asset_id)
            by_title.drop(asset_id)
            if asset_id in self.by_time.keys:
                shown.append(asset_id)
        for asset_id, vault_id, kind, fields, head in self._read(summaries, shown):
            by_title.put(asset_id, vault_id, kind, fields, head)
            if titled is not None:
                _hold(titled, by_title.title(asset_id), asset_id)
        self._changed = set()
        return by_title, by_title.tagged

    def _read(
        self, summaries: Summaries, asset_ids: Sequence[bytes]
    ) -> Iterator[tuple[bytes, bytes, str, dict[str, Any], Revision | None]]:
        """(asset, vault, kind, fields its row shows, its head) of each listed item, a batch at a time."""
        keys, head_of = self.by_time.keys, self._head_of
        for start in range(0, len(asset_ids), SUMMARY_BATCH):
            part = asset_ids[start : start + SUMMARY_BATCH]
            for asset_id, fields in zip(part, summaries(part), strict=True):
                vault_id, kind, _ = keys[asset_id]
                yield asset_id, vault_id, kind, fields, head_of(asset_id) if head_of is not None else None

    def title_holders(self, summaries: Summaries, folded: str) -> list[bytes]:
        """The listed items (any vault, any kind) whose case-folded title is ``folded``, current."""
        by_title, _ = self.derived(summaries)
        if self._holders is None:
            self._holders = {}
            for asset_id in by_title.items():
                _hold(self._holders, by_title.title(asset_id), asset_id)
        found = self._holders.get(folded)
        if found is None:
            return []
        return [found] if isinstance(found, bytes) else list(found)

    def held_titles(self) -> dict[str, list[bytes]]:
        """The holders map as kept, each entry as a sorted list (tests compare it with a fresh build)."""
        kept = self._holders or {}
        return {title: sorted([ids] if isinstance(ids, bytes) else ids) for title, ids in kept.items()}


def _hold(holders: dict[str, bytes | list[bytes]], title: str, asset_id: bytes) -> None:
    found = holders.get(title)
    if found is None:
        holders[title] = asset_id  # most titles have one holder: no list for it
    elif isinstance(found, bytes):
        if found != asset_id:
            holders[title] = [found, asset_id]
    elif asset_id not in found:
        found.append(asset_id)


def _unhold(holders: dict[str, bytes | list[bytes]], title: str, asset_id: bytes) -> None:
    found = holders.get(title)
    if found is None:
        return
    if isinstance(found, bytes):
        if found == asset_id:
            del holders[title]
        return
    if asset_id in found:
        found.remove(asset_id)
    if len(found) == 1:
        holders[title] = found[0]
