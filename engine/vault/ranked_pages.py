"""A page of sorted groups: the ranks [offset, offset + limit) of one vault's items of some
kinds, where each (vault, kind) keeps its own sorted list and the vault one of all its items.

Both list orders (by change time, engine/vault/listing.py, whose lists hold their keys; by
title, engine/vault/title_order.py, whose lists hold IDs compared by a key computed when
compared) page the same way through here.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["ranked_page", "rank_window"]

_Item = TypeVar("_Item")


def rank_window(
    groups: Mapping[tuple[bytes, str], list[_Item]],
    vault_id: bytes,
    kinds: Iterable[str],
    offset: int,
    limit: int,
    *,
    descending: bool,
) -> tuple[list[list[_Item]], int, int]:
    """The sorted lists of the vault's ``kinds`` (each kind once) and the ranks [start, stop) of a
    page among all of them; a descending page counts its ranks from the end, read ascending,
    then reversed by the caller."""
    lists = [items for kind in dict.fromkeys(kinds) if (items := groups.get((vault_id, kind)))]
    total = sum(map(len, lists))
    if descending:
        return lists, max(0, total - offset - limit), max(0, total - offset)
    return lists, min(offset, total), min(offset + limit, total)


def ranked_page(
    groups: Mapping[tuple[bytes, str], list[_Item]],
    vaults: Mapping[bytes, list[_Item]],
    vault_id: bytes,
    kinds: Iterable[str],
    offset: int,
    limit: int,
    *,
    descending: bool,
    key: Callable[[_Item], Any] | None = None,
) -> list[_Item]:
    """The page's items in ascending order (the caller reverses a descending one); the lists
    are sorted by ``key`` (None: the items themselves)."""
    lists, start, stop = rank_window(groups, vault_id, kinds, offset, limit, descending=descending)
    if start >= stop:
        return []
    everything = vaults[vault_id]
    if len(lists) == 1:
        return lists[0][start:stop]
    if sum(map(len, lists)) == len(everything):  # no other kind in this vault: the vault's list is the answer
        return everything[start:stop]
    return _select(everything, lists, start, stop, key)


def _select(everything: Sequence[Any], lists: list[list[Any]], start: int, stop: int, key: Any) -> list[Any]:
    """Ranks [start, stop) of the merge of ``lists`` (each sorted by ``key``, every item in
    ``everything``). Typed loosely: bisect and heapq type a key that may be None per call.

    Binary search over ``everything`` for the first item with exactly ``start`` chosen items
    before it (the count grows by at most one per position), then merge from there:
    O(log² n + page) instead of walking the ``start`` items before the page.
    """
    lo, hi = 0, len(everything)
    while lo < hi:
        mid = (lo + hi) // 2
        probe = everything[mid] if key is None else key(everything[mid])
        if sum(bisect.bisect_left(items, probe, key=key) for items in lists) >= start:
            hi = mid
        else:
            lo = mid + 1
    first = everything[lo] if key is None else key(everything[lo])
    size = stop - start
    heads = []
    for items in lists:
        at = bisect.bisect_left(items, first, key=key)
        heads.append(items[at : at + size])
    return list(itertools.islice(heapq.merge(*heads, key=key), size))
