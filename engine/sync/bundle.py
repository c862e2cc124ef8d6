"""What two devices exchange to sync one vault (SY-1, SY-4; design in docs/sync.md).

A sync of one vault is: each side sends its :class:`Inventory` (policy heads, revision IDs,
audit entry IDs), then each side sends :func:`make_bundle` — the items the other lacks, as a
list of self-contained chunks — and the receiver hands them to
:func:`engine.sync.merge.merge`, which verifies everything before it writes anything.

A chunk is ``MAGIC || MessagePack({"v": 1, "vault": id, "items": [...]})``. Items:

* ``policy`` — one signed policy record (body + user signature), in history order;
* ``key`` — one epoch key sealed with :mod:`engine.crypto.envelope` (purpose ``epoch-key``)
  to the receiving device's exchange key as the vault policy certifies it;
* ``rev`` — a revision's exact signed bytes and signature, plus how many content chunks
  follow; ``part`` — one of those content chunks (inner-encrypted by the revision's data
  key; the store's outer sealing never leaves the device);
* ``audit`` — one signed audit entry and the device that signed it (only between devices of
  the same user);
* ``resolution`` — a signed fork resolution (engine/sync/forks.py);
* ``name`` — the vault's name here, only to a peer that lacks its genesis (it does not hold
  the vault yet: PO-3, SY-5); a display name, nothing is decided by it.

Nothing in a chunk is trusted: the receiver re-derives every ID from the signed bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.cards.device_vaults import is_device_only
from engine.crypto.canonical import canonical_bytes
from engine.crypto.envelope import seal_envelope
from engine.errors import MemoriesError
from engine.vault.core import Unlocked, VaultCore, VaultKeys
from engine.vault.revision import COMPRESSED_FORMAT_PREFIX, Revision, holding

__all__ = [
    "MAGIC",
    "carries_compressed_bodies",
    "EPOCH_KEY_PURPOSE",
    "MIN_CHUNK_BYTES",
    "MAX_INVENTORY_IDS",
    "Inventory",
    "inventory",
    "shared_vault_ids",
    "make_bundle",
    "audit_entries",
    "PEER_AUDIT_RECORD",
]

MAGIC = b"MEMSYNC\x01"
EPOCH_KEY_PURPOSE = "epoch-key"
# A content chunk is at most 256 KiB plus its AEAD overhead: a bundle chunk must hold one.
MIN_CHUNK_BYTES = 320 * 1024
MAX_INVENTORY_IDS = 4_000_000
# Audit entries of other devices of this user, received by sync (sealed extra records).
PEER_AUDIT_RECORD = "peer_audit"
_ID = 32
_ITEM_OVERHEAD = 64  # msgpack framing of one item, generously


def _invalid(message: str) -> MemoriesError:
    return MemoriesError("sync_invalid", message)


def _ids(value: object, what: str) -> list[bytes]:
    if not isinstance(value, list) or len(value) > MAX_INVENTORY_IDS:
        raise _invalid(f"The inventory's {what} are not a bounded list.")
    out: list[bytes] = []
    for item in value:
        if not isinstance(item, (bytes, bytearray)) or len(item) != _ID:
            raise _invalid(f"The inventory's {what} hold something that is not a 32-byte ID.")
        out.append(bytes(item))
    return out


@dataclass(frozen=True)
class Inventory:
    """What one side holds of one vault, small enough to send first."""

    vault_id: bytes
    policy_heads: list[bytes]  # heads of its policy history, genesis first
    revision_ids: list[bytes]  # every revision ID it holds (sorted)
    audit_ids: list[bytes]  # sha256 of every audit entry's signed bytes it holds
    # The device that made it: epoch keys in a bundle answering it are sealed to this device's
    # exchange key (from the vault policy), and audit entries go only to a device of our own
    # user. The transport must check it is the authenticated peer device (docs/sync.md).
    device: bytes | None = None
    # Set when revision_ids/audit_ids are only what changed since the last completed sync with
    # the receiver: the digest of that sync's mark (engine/sync/marks.py).
    base: bytes | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "v": 1,
            "vault": self.vault_id,
            "policy_heads": list(self.policy_heads),
            "revision_ids": list(self.revision_ids),
            "audit_ids": list(self.audit_ids),
        }
        if self.device is not None:
            wire["device"] = self.device
        if self.base is not None:
            wire["base"] = self.base
        return wire

    @classmethod
    def from_wire(cls, obj: object) -> Inventory:
        keys = {"v", "vault", "policy_heads", "revision_ids", "audit_ids"}
        if not isinstance(obj, dict) or not keys <= set(obj) or not set(obj) <= keys | {"device", "base"}:
            raise _invalid("The inventory is malformed.")
        base = obj.get("base")
        if base is not None and (not isinstance(base, (bytes, bytearray)) or len(base) != _ID):
            raise _invalid("The inventory's base is not a 32-byte digest.")
        device = obj.get("device")
        if device is not None and (not isinstance(device, (bytes, bytearray)) or len(device) != _ID):
            raise _invalid("The inventory names no valid device ID.")
        if obj["v"] != 1:
            raise _invalid("The inventory is of a version this engine does not read.")
        vault = obj["vault"]
        if not isinstance(vault, (bytes, bytearray)) or not 1 <= len(vault) <= _ID:
            raise _invalid("The inventory names no valid vault ID.")
        return cls(
            bytes(vault),
            _ids(obj["policy_heads"], "policy heads"),
            sorted(_ids(obj["revision_ids"], "revision IDs")),
            _ids(obj["audit_ids"], "audit IDs"),
            None if device is None else bytes(device),
            None if base is None else bytes(base),
        )


def shared_vault_ids(state: Unlocked) -> list[bytes]:
    """Every vault this device holds that is not device-only (CD-9), default vault first."""
    ids = [vault_id for vault_id in state.vaults if not is_device_only(state, vault_id)]
    return sorted(ids, key=lambda v: (v != state.default_vault, v))


def _vault(state: Unlocked, vault_id: bytes) -> VaultKeys:
    vault = state.vaults.get(bytes(vault_id))
    if vault is None or is_device_only(state, vault.vault_id):
        raise MemoriesError("not_found", "This device holds no shared vault with that ID.")
    return vault


def _vault_revisions(state: Unlocked, vault_id: bytes) -> list[Revision]:
    """The vault's revisions in the order they were applied here (parents first), without the
    ones quarantine hides (SY-2): those are this device's own writes that a newer policy no
    longer allowed, and a peer that knows that policy quarantines them as well, so they are
    neither offered nor sent (engine/sync/marks.py lists the same set)."""
    return state.index.shown_revisions({vault_id})


def audit_entries(state: Unlocked) -> list[tuple[bytes, bytes, bytes]]:
    """(signed, signature, device) of every audit entry held: this device's, then peers'."""
    own = state.identity.device_pub
    out: list[tuple[bytes, bytes, bytes]] = []
    for signed in state.audit_log:
        sig = state.audit_sigs.get(hashlib.sha256(signed).digest())
        if sig is not None:
            out.append((signed, sig, own))
    for _, record in state.extra_records.get(PEER_AUDIT_RECORD, []):
        out.append((bytes(record["signed"]), bytes(record["sig"]), bytes(record["device"])))
    return out


def inventory(core: VaultCore, state: Unlocked, vault_id: bytes) -> Inventory:
    vault = _vault(state, vault_id)
    revision_ids = sorted(rev.rev_id for rev in _vault_revisions(state, vault.vault_id))
    audit_ids = [hashlib.sha256(signed).digest() for signed, _, _ in audit_entries(state)]
    return Inventory(vault.vault_id, [p.head for p in vault.history], revision_ids, audit_ids, state.identity.device_pub)


class _Packer:
    def __init__(self, vault_id: bytes, max_bytes: int) -> None:
        self.vault_id = vault_id
        self.max_bytes = max_bytes
        self.chunks: list[bytes] = []
        self.items: list[dict[str, Any]] = []
        self.size = 0
        self.base = len(MAGIC) + len(_encode(vault_id, [])) + 16

    def add(self, item: dict[str, Any]) -> None:
        size = len(msgspec.msgpack.encode(item)) + _ITEM_OVERHEAD
        if self.base + size > self.max_bytes:
            raise MemoriesError("invalid_input", "One sync item is larger than the chunk limit; raise max_bytes.")
        if self.items and self.base + self.size + size > self.max_bytes:
            self.flush()
        self.items.append(item)
        self.size += size

    def flush(self) -> None:
        if self.items:
            self.chunks.append(MAGIC + _encode(self.vault_id, self.items))
            self.items, self.size = [], 0


def _encode(vault_id: bytes, items: list[dict[str, Any]]) -> bytes:
    return msgspec.msgpack.encode({"v": 1, "vault": vault_id, "items": items})


def _common_prefix(ours: list[bytes], theirs: list[bytes]) -> int:
    n = 0
    while n < len(ours) and n < len(theirs) and ours[n] == theirs[n]:
        n += 1
    return n


def make_bundle(core: VaultCore, state: Unlocked, vault_id: bytes, peer: Inventory, *, max_bytes: int) -> list[bytes]:
    """The items ``peer`` lacks of one vault, as encoded chunks of at most ``max_bytes`` each."""
    if max_bytes < MIN_CHUNK_BYTES:
        raise MemoriesError("invalid_input", f"A sync chunk limit must be at least {MIN_CHUNK_BYTES} bytes.")
    vault = _vault(state, vault_id)
    if peer.vault_id != vault.vault_id:
        raise MemoriesError("invalid_input", "The peer's inventory is of another vault.")
    if peer.base is not None:
        raise MemoriesError("invalid_input", "A delta inventory must be expanded first (engine/sync/marks.py expand).")
    store = core.require_store()
    packer = _Packer(vault.vault_id, max_bytes)
    # Policies from the first one the peer does not hold (the whole history if it lacks the
    # genesis); a diverging peer gets our branch from the fork point and detects the fork.
    ours = [p.head for p in vault.history]
    start = _common_prefix(ours, peer.policy_heads)
    if start == 0:
        # A peer without the genesis does not hold the vault: it names the vault as we do
        # (a local display name, nothing trusted; engine/sync/merge.py makes it unique there).
        packer.add({"k": "name", "name": vault.name})
    for policy in vault.history[start:]:
        packer.add({"k": "policy", "rec": policy.to_record()})
    from engine.sync.forks import resolutions_for

    for record in resolutions_for(state, vault.vault_id):
        packer.add({"k": "resolution", "rec": record})
    held = set(peer.revision_ids)
    missing = [rev for rev in _vault_revisions(state, vault.vault_id) if rev.rev_id not in held]
    # Epoch keys are sealed to the one device that sent the inventory.
    if start < len(ours) or missing:
        epochs = {rev.epoch for rev in missing} | {vault.policy.epoch}
        for item in _epoch_key_items(state, vault, epochs, peer.device):
            packer.add(item)
    for rev in holding(missing):  # signed bytes read back a batch at a time (issue 32)
        content = store.read_content(rev.body_seqs)
        signed, sig = rev.signed_pair()
        packer.add({"k": "rev", "signed": signed, "sig": sig, "parts": len(content)})
        for index, data in enumerate(content):
            packer.add({"k": "part", "rev": rev.rev_id, "i": index, "data": data})
    if _same_user_peer(vault, state, peer):
        have = set(peer.audit_ids)
        for signed, sig, device in audit_entries(state):
            if hashlib.sha256(signed).digest() not in have:
                packer.add({"k": "audit", "signed": signed, "sig": sig, "device": device})
    packer.flush()
    return packer.chunks


def carries_compressed_bodies(chunk: bytes) -> bool:
    """Does this chunk (one of :func:`make_bundle`'s) carry a revision of format 2, whose body is
    compressed (issue 32)? An engine from before sync protocol 4 refuses such a revision."""
    items = msgspec.msgpack.decode(chunk[len(MAGIC) :]).get("items", [])
    return any(item.get("k") == "rev" and bytes(item.get("signed", b"")).startswith(COMPRESSED_FORMAT_PREFIX) for item in items)


def _same_user_peer(vault: VaultKeys, state: Unlocked, peer: Inventory) -> bool:
    return peer.device is not None and vault.policy.device_user(peer.device) == state.identity.user_pub


def _epoch_key_items(state: Unlocked, vault: VaultKeys, epochs: set[int], device: bytes | None) -> list[dict[str, Any]]:
    if device is None:
        return []
    exchange = vault.policy.exchange_key(device)
    if exchange is None:  # not an authorized, certified device of this vault: it gets no key
        return []
    items = []
    for epoch in sorted(epochs):
        key = vault.epoch_keys.get(epoch)
        if key is None:
            continue
        payload = canonical_bytes({"vault": vault.vault_id, "epoch": epoch, "key": key})
        items.append({"k": "key", "env": seal_envelope(state.identity.device_key, exchange, payload, purpose=EPOCH_KEY_PURPOSE)})
    return items
