"""Per-peer sync marks: inventories that do not grow with the vault (issue 14; design in docs/sync.md).

After a completed sync with a peer, this device stores a sealed ``sync_mark`` record per
(peer, vault): how long each of its own ordered lists was at that point (the vault's
revisions in the order they were applied here, this device's audit entries, peers' audit
entries) and a digest of the *set* of IDs in those prefixes. Two devices that completed a
sync hold the same set there, so their digests are equal.

The next sync sends only the IDs after those positions plus the digest as ``base``. When
both sides sent a ``base`` and the two are equal, each side knows exactly what the other
holds: its own prefix (same set, same digest) plus the peer's delta. Otherwise (no mark yet,
a failed merge on one side, a revision quarantined on one side, a third device's sync in
between) both sides see the mismatch and send their full inventory in a second round.

Nothing here is trusted for integrity: a peer lying about its base only changes what *it*
is sent; everything it sends still goes through :func:`engine.sync.merge.merge`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from engine.errors import MemoriesError
from engine.sync.bundle import PEER_AUDIT_RECORD, Inventory
from engine.vault.core import Unlocked

__all__ = ["MARK_RECORD", "Lists", "lists", "delta_inventory", "full_inventory", "expand", "mark_record"]

MARK_RECORD = "sync_mark"
_TAG = b"memories.sync.mark\x00\x01"


@dataclass(frozen=True)
class Lists:
    """This device's ordered IDs of one vault, as they stand now."""

    revisions: list[bytes]
    own_audits: list[bytes]  # empty when the peer is another user's device (no audit exchange)
    peer_audits: list[bytes]
    audits: bool

    def position(self) -> tuple[int, int, int]:
        return len(self.revisions), len(self.own_audits), len(self.peer_audits)


def _same_user(state: Unlocked, vault_id: bytes, peer: bytes) -> bool:
    vault = state.vaults.get(vault_id)
    return vault is not None and vault.policy.device_user(peer) == state.identity.user_pub


def lists(state: Unlocked, vault_id: bytes, peer: bytes) -> Lists:
    # Without the revisions quarantine hides, like the inventory and bundle (bundle.py): the
    # peer quarantined them too and does not hold them, so the two sets still agree (SY-2).
    revisions = [rev.rev_id for rev in state.index.shown_revisions({vault_id})]
    audits = _same_user(state, vault_id, peer)
    own: list[bytes] = []
    theirs: list[bytes] = []
    if audits:
        for signed in state.audit_log:
            digest = hashlib.sha256(signed).digest()
            if digest in state.audit_sigs:  # the same entries bundle.audit_entries sends
                own.append(digest)
        theirs = [hashlib.sha256(bytes(r["signed"])).digest() for _, r in state.extra_records.get(PEER_AUDIT_RECORD, [])]
    return Lists(revisions, own, theirs, audits)


def _digest(revisions: list[bytes], audits: list[bytes], with_audits: bool) -> bytes:
    h = hashlib.sha256(_TAG)
    h.update(len(revisions).to_bytes(8, "big"))
    for rid in sorted(set(revisions)):
        h.update(rid)
    h.update(b"\x01" if with_audits else b"\x00")
    for aid in sorted(set(audits)):
        h.update(aid)
    return h.digest()


def _latest_mark(state: Unlocked, peer: bytes, vault_id: bytes) -> dict[str, Any] | None:
    for _, record in reversed(state.extra_records.get(MARK_RECORD, [])):
        if bytes(record["device"]) == peer and bytes(record["vault"]) == vault_id:
            return dict(record)
    return None


def _prefix(current: Lists, mark: dict[str, Any]) -> tuple[list[bytes], list[bytes]] | None:
    """The IDs of our lists up to the mark's positions, or None when they no longer fit it."""
    n_rev, n_own, n_peer = int(mark["revs"]), int(mark["own"]), int(mark["peer"])
    if bool(mark["audits"]) != current.audits:
        return None
    if n_rev > len(current.revisions) or n_own > len(current.own_audits) or n_peer > len(current.peer_audits):
        return None
    revs = current.revisions[:n_rev]
    audits = current.own_audits[:n_own] + current.peer_audits[:n_peer]
    if _digest(revs, audits, current.audits) != bytes(mark["digest"]):
        return None
    return revs, audits


def full_inventory(state: Unlocked, vault_id: bytes, peer: bytes, current: Lists | None = None) -> Inventory:
    current = current or lists(state, vault_id, peer)
    vault = state.vaults[vault_id]
    return Inventory(
        vault_id,
        [p.head for p in vault.history],
        sorted(current.revisions),
        current.own_audits + current.peer_audits,
        state.identity.device_pub,
    )


def delta_inventory(state: Unlocked, vault_id: bytes, peer: bytes) -> tuple[Inventory, Lists]:
    """Only what changed since the last completed sync with ``peer`` (with its base), or the
    full inventory when there is no usable mark; and the lists it was made from."""
    current = lists(state, vault_id, peer)
    mark = _latest_mark(state, peer, vault_id)
    if mark is None or _prefix(current, mark) is None:
        return full_inventory(state, vault_id, peer, current), current
    n_rev, n_own, n_peer = int(mark["revs"]), int(mark["own"]), int(mark["peer"])
    vault = state.vaults[vault_id]
    inv = Inventory(
        vault_id,
        [p.head for p in vault.history],
        sorted(current.revisions[n_rev:]),
        current.own_audits[n_own:] + current.peer_audits[n_peer:],
        state.identity.device_pub,
        base=bytes(mark["digest"]),
    )
    return inv, current


def expand(state: Unlocked, inv: Inventory, peer: bytes) -> Inventory:
    """A peer's delta inventory as the whole set it holds: our prefix (the same set, by the
    equal digest) plus its delta. A full inventory is returned as it is."""
    if inv.base is None:
        return inv
    mark = _latest_mark(state, peer, inv.vault_id)
    prefix = None if mark is None else _prefix(lists(state, inv.vault_id, peer), mark)
    if mark is None or prefix is None or bytes(mark["digest"]) != inv.base:
        raise MemoriesError("sync_invalid", "The peer sent changes since a sync this device does not share with it.")
    revs, audits = prefix
    return Inventory(
        inv.vault_id,
        inv.policy_heads,
        sorted({*revs, *inv.revision_ids}),
        list(dict.fromkeys([*audits, *inv.audit_ids])),
        inv.device,
    )


def mark_record(
    state: Unlocked, vault_id: bytes, peer: bytes, at_inventory: Lists, before_merge: tuple[int, int, int]
) -> dict[str, Any]:
    """The mark after a sync whose merge just committed (call under the service lock).

    Revisions and peers' audit entries added since the inventory were the peer's (it holds
    them) when nothing else was added between the inventory and the merge; otherwise the
    mark stays at the inventory's positions (the next sync re-lists a few IDs, never misses
    one). This device's own audit entries are counted up to the inventory (the merge's own
    entry, written after it, goes to the peer next time).
    """
    now = lists(state, vault_id, peer)
    inv_rev, inv_own, inv_peer = at_inventory.position()
    n_rev = len(now.revisions) if before_merge[0] == inv_rev else inv_rev
    n_peer = len(now.peer_audits) if before_merge[2] == inv_peer else inv_peer
    revs = now.revisions[:n_rev]
    audits = now.own_audits[:inv_own] + now.peer_audits[:n_peer]
    return {
        "t": MARK_RECORD,
        "device": peer,
        "vault": vault_id,
        "revs": n_rev,
        "own": inv_own,
        "peer": n_peer,
        "audits": now.audits,
        "digest": _digest(revs, audits, now.audits),
    }
