"""In-memory view of the revision DAG: per-asset heads, conflicts, short IDs (HI-1, HI-4).

It is only ever updated *after* the SQLite commit that persisted a change
succeeded, so a failed commit leaves memory exactly as before (ST-5).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import Counter
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass

from engine.errors import MemoriesError
from engine.vault.listing import ListOrder
from engine.vault.revision import Revision

__all__ = ["AssetIndex", "AssetEntry", "MIN_SHORT_ID", "REV_SHORT", "HIDE_FIELD"]

MIN_SHORT_ID = 8
REV_SHORT = 12
AMBIGUOUS_SHOWN = 10
# A sealed extra record carrying this field hides that stored revision from the view
# (VaultCore applies it at commit and at unlock; sync's local quarantine writes it, SY-2).
HIDE_FIELD = "hide_rev"  # candidates listed with an ambiguous_id error


@dataclass(slots=True)  # one per item of an unlocked vault (issue 32: no __dict__ each)
class AssetEntry:
    asset_id: bytes
    vault_id: bytes
    kind: str
    # Tuples, not lists (issue 32): nearly every item has one revision and one head, and a list
    # of one, grown by append, is ~90 bytes where a tuple of one is 48.
    revisions: tuple[bytes, ...] = ()
    heads: tuple[bytes, ...] = ()

    @property
    def in_conflict(self) -> bool:
        return len(self.heads) > 1


def _common_hex_digits(one: bytes, other: bytes) -> int:
    """How many leading hex digits ``one`` shares with ``other`` (as long as ``one`` at most):
    from the highest differing bit of the two as integers, not digit by digit (a list page
    asks twice per row, issue 32)."""
    if len(one) != len(other):  # IDs of one length in practice; compared as text otherwise
        full, text = one.hex(), other.hex()
        common = 0
        while common < len(full) and common < len(text) and full[common] == text[common]:
            common += 1
        return common
    differ = int.from_bytes(one, "big") ^ int.from_bytes(other, "big")
    return (len(one) * 8 - differ.bit_length()) // 4


class AssetIndex:
    def __init__(self) -> None:
        self.revisions: dict[bytes, Revision] = {}
        self.assets: dict[bytes, AssetEntry] = {}
        # Asset IDs in order (bytes sort as their hex does), the same objects ``assets`` keys by:
        # not a hex string per item beside them (issue 32: 11 MiB at 100k items).
        self._sorted_ids_list: list[bytes] = []
        # While loading a whole store, IDs are appended and sorted once on first use:
        # insort per asset is O(n) each, i.e. quadratic over a 100k-asset unlock.
        self._hex_unsorted = False
        # content key (digest of title/body/tags/meta) → asset, for idempotent import.
        # Built lazily on the first import (decrypting every head summary at unlock would
        # slow every unlock for a feature used rarely); kept current afterwards.
        self.content_keys: dict[str, bytes] | None = None
        # Kept incrementally so that status answers in O(1) in a 100k-asset vault.
        self.visible_count = 0
        self.conflict_count = 0
        # Stored revisions hidden from heads, listings and search (SY-2: this device's own
        # offline writes quarantined by sync), with every revision built on one of them.
        self.hidden: set[bytes] = set()
        # Items all of whose revisions are hidden: out of ``assets`` (no ID resolves to them).
        self.hidden_assets: dict[bytes, AssetEntry] = {}
        # The orders `list` pages through, updated wherever heads change (issue 20); after a
        # bulk load (unlock) built on first use instead, which keeps that work off the unlock.
        self._listing = ListOrder(head_of=lambda asset_id: self.newest_head(self.assets[asset_id]))
        self._listing_stale = False
        # Revisions held per (vault, author device), counted on first use and then only for the
        # revisions added since: ``revisions`` only grows, in order (see revision_tally).
        self._tally: Counter[tuple[bytes, bytes]] = Counter()
        self._tallied = 0
        self._tally_guard = threading.Lock()

    def __len__(self) -> int:
        return len(self.assets)

    def revision_tally(self) -> Counter[tuple[bytes, bytes]]:
        """How many revisions are held per (vault ID, author's device key), hidden ones included.

        A status probe asks for the sync outbox, which counted every revision at every probe
        (~30 ms of the engine at 100k notes, several times a minute with the tray open). Only
        the revisions added since the last call are counted now. Status reads run beside
        commits: a dictionary that grows while it is read raises RuntimeError, with nothing
        counted, as the full count did. The answer is a copy."""
        with self._tally_guard:
            revisions = self.revisions
            added: Counter[tuple[bytes, bytes]] = Counter()
            seen = 0
            for rev in itertools.islice(revisions.values(), self._tallied, None):
                added[(rev.vault_id, rev.author)] += 1
                seen += 1
            self._tally.update(added)
            self._tallied += seen
            return Counter(self._tally)

    # -- updates -----------------------------------------------------------------
    def check_parents(self, asset_id: bytes, parents: list[bytes]) -> None:
        for parent in parents:
            rev = self.revisions.get(parent)
            if rev is None or rev.asset_id != asset_id:
                raise MemoriesError("store_corrupt", "A revision names a parent that is not in its item's history.")

    def apply(self, rev: Revision) -> None:
        """Add a verified revision: heads become (heads − parents) ∪ {rev}."""
        # An unlock applies every stored revision: each property below decodes from the body,
        # so it is read once here.
        rev_id, asset_id, parents = rev.rev_id, rev.asset_id, rev.parents
        if rev_id in self.revisions:
            return
        self.check_parents(asset_id, parents)
        gone = self.hidden_assets.get(asset_id)
        if gone is not None:  # every revision of this item is hidden, so its parents are
            self.revisions[rev_id] = rev
            gone.revisions = (*gone.revisions, rev_id)
            self.hidden.add(rev_id)
            return
        entry = self.assets.get(asset_id)
        if entry is not None:
            self._count(entry, -1)
        if entry is None:
            if parents:
                raise MemoriesError("store_corrupt", "A first revision has parents.")
            entry = AssetEntry(asset_id, rev.vault_id, rev.kind)
            self.assets[asset_id] = entry
            if self._hex_unsorted:
                self._sorted_ids_list.append(entry.asset_id)
            else:
                bisect.insort(self._sorted_ids_list, entry.asset_id)
        self.revisions[rev_id] = rev
        entry.revisions = (*entry.revisions, rev_id)
        consumed = set(parents)
        if consumed & self.hidden:  # built on a hidden revision: hidden with it
            self.hidden.add(rev_id)
        else:
            heads = entry.heads
            if not heads or (len(heads) == 1 and heads[0] in consumed):  # a first or a next revision
                entry.heads = (rev_id,)
            else:
                entry.heads = (*(h for h in heads if h not in consumed), rev_id)
        entry.kind = rev.kind
        self._count(entry, +1)
        self._relist(entry)

    def hide(self, rev_ids: Iterable[bytes]) -> None:
        """Take stored revisions (and their descendants) out of the view: heads are recomputed
        over the rest; an item left with no visible revision is out of every listing."""
        wanted = {r for r in rev_ids if r in self.revisions and r not in self.hidden}
        for asset_id in dict.fromkeys(self.revisions[r].asset_id for r in wanted):
            entry = self.assets[asset_id]
            self._count(entry, -1)
            for rid in entry.revisions:  # parents first: a child of a hidden revision is hidden
                if rid in wanted or any(p in self.hidden for p in self.revisions[rid].parents):
                    self.hidden.add(rid)
            visible = [r for r in entry.revisions if r not in self.hidden]
            consumed = {p for r in visible for p in self.revisions[r].parents}
            entry.heads = tuple(r for r in visible if r not in consumed)
            if not entry.heads:
                self.hidden_assets[asset_id] = self.assets.pop(asset_id)
                if not self._listing_stale:
                    self._listing.unlisted(asset_id)
                self._sorted_ids_list.remove(asset_id)
                if self.content_keys is not None:
                    self.content_keys = {k: v for k, v in self.content_keys.items() if v != asset_id}
                continue
            self._count(entry, +1)
            self._relist(entry)

    def _count(self, entry: AssetEntry, sign: int) -> None:
        if not self.is_deleted(entry):
            self.visible_count += sign
            if entry.in_conflict:
                self.conflict_count += sign

    def _relist(self, entry: AssetEntry) -> None:
        if self._listing_stale:
            return
        if self.is_deleted(entry):
            self._listing.unlisted(entry.asset_id)
        else:
            newest = self.newest_head(entry)
            self._listing.listed(entry.asset_id, entry.vault_id, entry.kind, newest.changed_ms, entry.in_conflict)

    @property
    def listing(self) -> ListOrder:
        if self._listing_stale:
            self._listing_stale = False
            self._listing.load(self._listed_rows())
        return self._listing

    def _listed_rows(self) -> Iterator[tuple[bytes, bytes, str, int, bool]]:
        """What ``_relist`` tells the list order of each item not deleted, for all of them at once
        (the first list after an unlock: issue 32, a few microseconds an item at 100k)."""
        revisions = self.revisions
        for entry in self.assets.values():
            heads = entry.heads
            if len(heads) == 1:  # no conflict (nearly always)
                head = revisions[heads[0]]
                if not head.tombstone:
                    yield entry.asset_id, entry.vault_id, entry.kind, head.changed_ms, False
            elif not self.is_deleted(entry):
                yield entry.asset_id, entry.vault_id, entry.kind, self.newest_head(entry).changed_ms, True

    def begin_bulk_load(self) -> None:
        """Many ``apply`` calls follow (unlock): defer keeping the ID list sorted and the list orders."""
        self._hex_unsorted = True
        self._listing_stale = True

    def _sorted_ids(self) -> list[bytes]:
        if self._hex_unsorted:
            self._sorted_ids_list.sort()
            self._hex_unsorted = False
        return self._sorted_ids_list

    # -- queries -------------------------------------------------------------------
    def vault_of(self, asset_id: bytes) -> bytes | None:
        """The vault of the item with this ID on this device, visible or hidden whole by
        quarantine (None: no such item).

        ``assets`` alone forgets a hidden item: a write or merge that took "not in assets" for
        "new" would give it another first revision (in another vault, too). Its vault ID is
        fixed at the first revision, so the next unlock would show the item again in the
        quarantined item's place and vault, past the quarantine review (SY-2)."""
        entry = self.entry_of(asset_id)
        return entry.vault_id if entry is not None else None

    def entry_of(self, asset_id: bytes) -> AssetEntry | None:
        """The item with this ID, visible or hidden whole by quarantine (see :meth:`vault_of`)."""
        return self.assets.get(asset_id) or self.hidden_assets.get(asset_id)

    def shown_revisions(self, vault_ids: Container[bytes]) -> list[Revision]:
        """The revisions of these vaults in the order they were applied here (parents first),
        without those quarantine hides (SY-2): what sync offers and sends, what its marks count
        and what a backup carries, so all of them agree on one set."""
        hidden = self.hidden
        return [rev for rid, rev in self.revisions.items() if rev.vault_id in vault_ids and rid not in hidden]

    def holds(self, asset_id: bytes) -> bool:
        """Is an item with this ID on this device, visible or hidden (see :meth:`vault_of`)?"""
        return self.vault_of(asset_id) is not None

    def head_revisions(self, entry: AssetEntry) -> list[Revision]:
        return [self.revisions[h] for h in entry.heads]

    def newest_head(self, entry: AssetEntry) -> Revision:
        """The head a summary shows: the newest live head (the newest tombstone if all are)."""
        if len(entry.heads) == 1:  # no conflict (nearly always)
            return self.revisions[entry.heads[0]]
        heads = self.head_revisions(entry)
        return max([r for r in heads if not r.tombstone] or heads, key=lambda r: (r.created_ms, r.seq))

    def is_deleted(self, entry: AssetEntry) -> bool:
        """Deleted when every head is a tombstone (a tombstone removes it from the view)."""
        heads = entry.heads
        if len(heads) == 1:  # no conflict, nearly always: no generator per call
            return self.revisions[heads[0]].tombstone
        return all(self.revisions[h].tombstone for h in heads)

    def visible(self) -> Iterator[AssetEntry]:
        for entry in self.assets.values():
            if not self.is_deleted(entry):
                yield entry

    def short_id(self, asset_id: bytes) -> str:
        """Shortest unique hex prefix (at least MIN_SHORT_ID characters)."""
        full = asset_id.hex()
        ids = self._sorted_ids()
        pos = bisect.bisect_left(ids, asset_id)
        need = MIN_SHORT_ID
        for neighbour in (pos - 1, pos + 1):
            if 0 <= neighbour < len(ids):
                need = max(need, _common_hex_digits(asset_id, ids[neighbour]) + 1)
        return full[:need]

    def resolve(self, prefix: str) -> AssetEntry:
        """Accept any unique hex prefix of an asset ID."""
        text = prefix.strip().lower()
        if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
            raise MemoriesError(
                "invalid_input",
                "An ID is a hex prefix of at least 4 characters, as list and search show it; a title is not an ID.",
            )
        ids = self._sorted_ids()
        # The first ID whose hex could begin with ``text``: its whole bytes, then (odd length) the
        # last digit as the high half of the next byte. Those that match follow one another.
        low = bytes.fromhex(text[: len(text) // 2 * 2]) + (bytes([int(text[-1], 16) << 4]) if len(text) % 2 else b"")
        pos = bisect.bisect_left(ids, low)
        matches: list[str] = []
        while pos < len(ids) and (hexed := ids[pos].hex()).startswith(text):
            matches.append(hexed)
            pos += 1
        if not matches:
            raise MemoriesError("not_found")
        if len(matches) > 1:
            # The candidates (ID and kind; the service adds titles, never bodies) so the user
            # can type a longer prefix; deleted items are not offered.
            visible = [m for m in matches if not self.is_deleted(self.assets[bytes.fromhex(m)])]
            shown = visible[:AMBIGUOUS_SHOWN]
            candidates = [
                {"id": m, "short_id": self.short_id(bytes.fromhex(m)), "kind": self.assets[bytes.fromhex(m)].kind} for m in shown
            ]
            raise MemoriesError(
                "ambiguous_id",
                f"That ID prefix matches {len(matches)} items; type more characters.",
                candidates=candidates,
                more=len(visible) - len(shown),
            )
        return self.assets[bytes.fromhex(matches[0])]

    def resolve_revision(self, entry: AssetEntry, prefix: str) -> Revision:
        text = prefix.strip().lower()
        if len(text) < 4 or any(c not in "0123456789abcdef" for c in text):
            raise MemoriesError("invalid_input", "A revision ID is a hex prefix of at least 4 characters.")
        found = [r for r in entry.revisions if r.hex().startswith(text)]
        if not found:
            raise MemoriesError("not_found", "No revision of this item matches that ID.")
        if len(found) > 1:
            raise MemoriesError("ambiguous_id", "That revision prefix matches more than one revision.")
        return self.revisions[found[0]]

    def history(self, entry: AssetEntry) -> list[Revision]:
        """Revisions oldest first (creation time, then store order)."""
        revs = [self.revisions[r] for r in entry.revisions]
        return sorted(revs, key=lambda r: (r.created_ms, r.seq))
