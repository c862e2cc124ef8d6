"""THE merge entry point of sync (SY-1, SY-2, SY-3; design in docs/sync.md).

:func:`merge` takes the chunks :func:`engine.sync.bundle.make_bundle` made on a peer, decodes
them within fixed bounds, verifies the complete incoming policy, revision and audit history
against what this device holds *into a candidate state*, and only when everything verifies
commits it all in one :meth:`VaultCore.commit`. Anything that fails raises a typed
:class:`MemoriesError` (``sync_invalid``: malformed or oversized input; ``sync_rejected``:
a check failed, naming the check, never bytes; ``policy_fork``: two signed policy branches)
and changes nothing — except that a fork is recorded for ``memories vault fork resolve``.
Items this device already holds are skipped, so merging the same bundle twice is a no-op.
Cloud object sync will reuse this function unchanged (SY-4).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.cards.device_vaults import is_device_only
from engine.crypto.aead import AeadError
from engine.crypto.canonical import decode_canonical
from engine.crypto.chunks import ChunkError
from engine.crypto.envelope import open_envelope
from engine.crypto.keys import SignatureError, verify
from engine.errors import MemoriesError
from engine.sync.bundle import EPOCH_KEY_PURPOSE, MAGIC, PEER_AUDIT_RECORD
from engine.sync.forks import FORK_RECORD, RESOLUTION_RECORD, Resolution, parse_resolution
from engine.sync.quarantine import QUARANTINE_RECORD, quarantined_ids
from engine.vault.body_encoding import max_inflated
from engine.vault.core import AUDIT_TAG, Actor, Unlocked, VaultCore, VaultKeys
from engine.vault.index import HIDE_FIELD
from engine.vault.invite import pinned_user
from engine.vault.policy import Policy, verify_chain
from engine.vault.revision import Revision

__all__ = ["MergeReport", "merge", "MAX_CHUNK_BYTES", "MAX_CHUNKS", "MAX_TOTAL_BYTES"]

# Bounds on what one merge reads (configurable here; the transport has its own deadline).
MAX_CHUNK_BYTES = 8 * 1024 * 1024
MAX_CHUNKS = 20_000
MAX_TOTAL_BYTES = 2 * 1024 * 1024 * 1024
_ID = 32
_AUDIT_PREFIX = AUDIT_TAG.encode("ascii") + b"\x00\x01"


@dataclass
class MergeReport:
    vault_id: bytes
    revisions_added: int = 0
    policies_added: int = 0
    audits_added: int = 0
    quarantined: int = 0
    conflicts: list[str] = field(default_factory=list)  # short IDs now in conflict
    # Policies of this device's branch an Owner's fork resolution discarded (SY-3): told, not
    # dropped silently (issue 29). Revisions written under them still verify and stay.
    discarded_policies: int = 0

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "vault": self.vault_id.hex(),
            "revisions_added": self.revisions_added,
            "policies_added": self.policies_added,
            "audits_added": self.audits_added,
            "quarantined": self.quarantined,
            "conflicts": list(self.conflicts),
        }
        if self.discarded_policies:
            wire["discarded_policies"] = self.discarded_policies
        return wire


# -- decoding (bounded, strict) --------------------------------------------------------------


class _PolicyItem(msgspec.Struct, tag_field="k", tag="policy", forbid_unknown_fields=True):
    rec: dict[str, Any]


class _ResolutionItem(msgspec.Struct, tag_field="k", tag="resolution", forbid_unknown_fields=True):
    rec: dict[str, Any]


class _KeyItem(msgspec.Struct, tag_field="k", tag="key", forbid_unknown_fields=True):
    env: bytes


class _RevItem(msgspec.Struct, tag_field="k", tag="rev", forbid_unknown_fields=True):
    signed: bytes
    sig: bytes
    parts: int


class _PartItem(msgspec.Struct, tag_field="k", tag="part", forbid_unknown_fields=True):
    rev: bytes
    i: int
    data: bytes


class _AuditItem(msgspec.Struct, tag_field="k", tag="audit", forbid_unknown_fields=True):
    signed: bytes
    sig: bytes
    device: bytes


class _NameItem(msgspec.Struct, tag_field="k", tag="name", forbid_unknown_fields=True):
    name: str


_Item = _PolicyItem | _ResolutionItem | _KeyItem | _RevItem | _PartItem | _AuditItem | _NameItem


class _Chunk(msgspec.Struct, forbid_unknown_fields=True):
    v: int
    vault: bytes
    items: list[_Item]


_decoder = msgspec.msgpack.Decoder(_Chunk)


def _invalid(message: str) -> MemoriesError:
    return MemoriesError("sync_invalid", message)


def _rejected(message: str) -> MemoriesError:
    return MemoriesError("sync_rejected", f"{message}; nothing was merged.")


@dataclass
class _Bundle:
    vault_id: bytes
    policies: list[Policy] = field(default_factory=list)
    resolutions: list[Resolution] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    revisions: list[Revision] = field(default_factory=list)
    parts: dict[bytes, list[bytes]] = field(default_factory=dict)
    audits: list[_AuditItem] = field(default_factory=list)
    name: str | None = None


def _decode(chunks: Sequence[bytes], max_chunk_bytes: int, max_chunks: int, max_total: int) -> _Bundle:
    if not isinstance(chunks, (list, tuple)):
        raise _invalid("A sync bundle is a list of chunks.")
    if len(chunks) > max_chunks:
        raise _invalid(f"The sync bundle has more than {max_chunks} chunks.")
    total = 0
    bundle: _Bundle | None = None
    expected: dict[bytes, int] = {}
    for chunk in chunks:
        if not isinstance(chunk, (bytes, bytearray)):
            raise _invalid("A sync chunk is not bytes.")
        if len(chunk) > max_chunk_bytes:
            raise _invalid(f"A sync chunk is larger than {max_chunk_bytes} bytes.")
        total += len(chunk)
        if total > max_total:
            raise _invalid(f"The sync bundle is larger than {max_total} bytes.")
        if not bytes(chunk[: len(MAGIC)]) == MAGIC:
            raise _invalid("A sync chunk is not in the version-1 format.")
        try:
            decoded = _decoder.decode(bytes(chunk[len(MAGIC) :]))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise _invalid("A sync chunk is malformed.") from None
        if decoded.v != 1 or not 1 <= len(decoded.vault) <= _ID:
            raise _invalid("A sync chunk is of an unknown version or names no vault.")
        if bundle is None:
            bundle = _Bundle(bytes(decoded.vault))
        elif bundle.vault_id != decoded.vault:
            raise _invalid("The chunks of one sync bundle name different vaults.")
        for item in decoded.items:
            _collect(bundle, item, expected)
    if bundle is None:
        raise _invalid("A sync bundle needs at least one chunk.")
    for rev in bundle.revisions:
        if len(bundle.parts.get(rev.rev_id, [])) != expected[rev.rev_id]:
            raise _invalid("A revision's content chunks are missing from the bundle.")
    return bundle


def _collect(bundle: _Bundle, item: _Item, expected: dict[bytes, int]) -> None:
    if isinstance(item, _PolicyItem):
        try:
            bundle.policies.append(Policy.parse(item.rec))
        except (MemoriesError, KeyError, TypeError, ValueError):
            raise _invalid("A policy in the bundle is malformed.") from None
    elif isinstance(item, _ResolutionItem):
        bundle.resolutions.append(parse_resolution(item.rec))
    elif isinstance(item, _KeyItem):
        bundle.keys.append(item.env)
    elif isinstance(item, _NameItem):
        if bundle.name is not None or len(item.name) > 256:
            raise _invalid("The bundle names its vault twice or at length.")
        bundle.name = item.name
    elif isinstance(item, _RevItem):
        try:
            rev = Revision(item.signed, item.sig, [])
            _check_shape(rev)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
            raise _invalid("A revision in the bundle is malformed.") from None
        if rev.rev_id in expected:
            raise _invalid("The bundle carries the same revision twice.")
        if not 0 < item.parts <= 1_000_000:
            raise _invalid("A revision in the bundle announces an impossible number of content chunks.")
        expected[rev.rev_id] = item.parts
        bundle.revisions.append(rev)
        bundle.parts[rev.rev_id] = []
    elif isinstance(item, _PartItem):
        parts = bundle.parts.get(item.rev)
        if parts is None or item.i != len(parts) or len(parts) >= expected[item.rev]:
            raise _invalid("A content chunk in the bundle is out of order or belongs to no revision.")
        parts.append(item.data)
    else:
        if len(item.device) != _ID or len(item.sig) != 64:
            raise _invalid("An audit entry in the bundle is malformed.")
        bundle.audits.append(item)


_REV_TYPES: dict[str, type | tuple[type, ...]] = {
    "vault": bytes,
    "asset": bytes,
    "kind": str,
    "parents": list,
    "policy": bytes,
    "tombstone": bool,
    "epoch": int,
    "wrapped_key": bytes,
    "summary": list,
    "body": list,
    "device": bytes,
    "cert": bytes,
    "created_ms": int,
}


def _check_shape(rev: Revision) -> None:
    body = rev.body
    # Format 2 (issue 32): the signed version and the body's own agree, and its inflated length is
    # one a stream of body_len bytes can hold (engine/vault/body_encoding.py); the body itself is
    # inflated, and checked to be exactly that long, when merge opens it.
    z = rev.body_z
    if not isinstance(body, dict) or body.get("v") != (1 if z is None else 2):
        raise ValueError("revision version")
    if z is not None and not (isinstance(body.get("body_len"), int) and z <= max_inflated(body["body_len"])):
        raise ValueError("body_z")
    for key, kind in _REV_TYPES.items():
        if not isinstance(body.get(key), kind):
            raise ValueError(key)
    if not 1 <= len(body["vault"]) <= _ID or not 1 <= len(body["asset"]) <= _ID:
        raise ValueError("vault or asset")
    for key in ("policy", "device"):
        if len(body[key]) != _ID:
            raise ValueError(key)
    if any(not isinstance(p, bytes) or len(p) != _ID for p in body["parents"]):
        raise ValueError("parents")
    if any(not isinstance(d, bytes) for d in [*body["summary"], *body["body"]]) or len(rev.signature) != 64:
        raise ValueError("chunks")


# -- policies --------------------------------------------------------------------------------


@dataclass
class _PolicyOutcome:
    history: list[Policy]
    added: int
    resolution: Resolution | None = None
    replaced: bool = False  # our branch was discarded by a valid resolution
    discarded: list[Policy] = field(default_factory=list)
    fork_id: bytes = b""


def _verify(chain: list[Policy]) -> None:
    try:
        verify_chain(chain)
    except MemoriesError as exc:
        raise _rejected(f"The incoming policy history fails verification ({exc.message.rstrip('.')})") from None
    except (SignatureError, KeyError, TypeError, ValueError):
        raise _rejected("The incoming policy history fails verification") from None


def _merge_policies(state: Unlocked, vault: VaultKeys, bundle: _Bundle) -> tuple[_PolicyOutcome, dict[str, Any] | None]:
    """The merged history, or (ours, fork record) when the bundle carries another signed branch."""
    ours = vault.history
    incoming = bundle.policies
    if not incoming:
        return _PolicyOutcome(ours, 0), None
    start = incoming[0].seq
    if not 1 <= start <= len(ours) + 1 or [p.seq for p in incoming] != list(range(start, start + len(incoming))):
        raise _rejected("The incoming policy history is not contiguous with this device's")
    candidate = [*ours[: start - 1], *incoming]
    split = next((i for i in range(start - 1, min(len(ours), len(candidate))) if ours[i].head != candidate[i].head), None)
    _verify(candidate)  # a forged signature anywhere is refused before anything else
    if split is None:
        if len(candidate) <= len(ours):
            return _PolicyOutcome(ours, 0), None  # an old prefix, replayed: nothing new
        for vault_id in (bytes(candidate[-1].body["vault"]),):
            if vault_id != vault.vault_id:
                raise _rejected("The incoming policy history is of another vault")
        return _PolicyOutcome(candidate, len(candidate) - len(ours)), None
    theirs_branch, our_branch = candidate[split:], ours[split:]
    base = ours[split - 1].head if split > 0 else b""
    # A resolution we hold decides: the peer's discarded branch is refused for good.
    for _, record in state.extra_records.get(RESOLUTION_RECORD, []):
        held = Resolution(dict(record["resolution"]["body"]), bytes(record["resolution"]["sig"]))
        same_fork = held.vault_id == vault.vault_id and held.base == base
        if same_fork and held.discard == [p.head for p in theirs_branch[: len(held.discard)]]:
            raise _rejected("The incoming policy branch was discarded by an Owner's fork resolution")
    for resolution in bundle.resolutions:
        if resolution.vault_id != vault.vault_id or resolution.base != base:
            continue
        if resolution.discard == [p.head for p in our_branch] and resolution.keep in {p.head for p in theirs_branch}:
            kept_upto = next(i for i, p in enumerate(theirs_branch) if p.head == resolution.keep)
            resolution.check(theirs_branch[: kept_upto + 1], our_branch)
            fork_id = hashlib.sha256(base + our_branch[0].head + theirs_branch[0].head).digest()
            return _PolicyOutcome(candidate, len(theirs_branch), resolution, True, our_branch, fork_id), None
    fork = {
        "t": FORK_RECORD,
        "fork": hashlib.sha256(base + our_branch[0].head + theirs_branch[0].head).digest(),
        "vault": vault.vault_id,
        "base": base,
        "ours": [p.to_record() for p in our_branch],
        "theirs": [p.to_record() for p in theirs_branch],
    }
    return _PolicyOutcome(ours, 0), fork


# -- epoch keys ------------------------------------------------------------------------------


def _merge_keys(state: Unlocked, vault: VaultKeys, head: Policy, envelopes: list[bytes]) -> dict[int, bytes]:
    keys = dict(vault.epoch_keys)
    for env in envelopes:
        try:
            opened = open_envelope(state.identity.exchange_key, env, purpose=EPOCH_KEY_PURPOSE)
            payload = decode_canonical(opened.payload)
        except MemoriesError as exc:
            raise _rejected(f"An epoch key in the bundle does not open for this device ({exc.code})") from None
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _rejected("An epoch key in the bundle is malformed") from None
        if not head.authorizes_device(opened.sender_device_pub):
            raise _rejected("An epoch key in the bundle comes from a device the vault policy does not authorize")
        if not isinstance(payload, dict) or set(payload) != {"vault", "epoch", "key"}:
            raise _rejected("An epoch key in the bundle is malformed")
        epoch, key = payload["epoch"], payload["key"]
        if payload["vault"] != vault.vault_id or not isinstance(epoch, int) or not isinstance(key, bytes) or len(key) != 32:
            raise _rejected("An epoch key in the bundle is malformed or of another vault")
        if not 1 <= epoch <= head.epoch:
            raise _rejected("An epoch key in the bundle is for an epoch the policy never started")
        if epoch in keys and keys[epoch] != key:
            raise _rejected("An epoch key in the bundle differs from the one this device holds (key substitution)")
        keys[epoch] = key
    return keys


# -- revisions -------------------------------------------------------------------------------


def _order(revisions: list[Revision], held: dict[bytes, Revision]) -> list[Revision]:
    """Parents first; a parent neither held nor in the bundle is a dropped revision."""
    pending = {rev.rev_id: rev for rev in revisions}
    done: set[bytes] = set()
    out: list[Revision] = []

    def visit(rev: Revision) -> None:
        stack = [(rev, False)]
        while stack:
            node, expanded = stack.pop()
            if node.rev_id in done:
                continue
            if expanded:
                done.add(node.rev_id)
                out.append(node)
                continue
            stack.append((node, True))
            for parent in node.parents:
                if parent in held:
                    if held[parent].asset_id != node.asset_id:
                        raise _rejected("A revision names a parent of another item")
                elif parent in pending:
                    if pending[parent].asset_id != node.asset_id:
                        raise _rejected("A revision names a parent of another item")
                    if parent not in done:
                        stack.append((pending[parent], False))
                else:
                    raise _rejected("A revision's parent is missing (a dropped revision in its chain)")

    for rev in revisions:
        visit(rev)
    return out


def _verify_revision(
    core: VaultCore, state: Unlocked, candidate: dict[bytes, VaultKeys], rev: Revision, parts: list[bytes]
) -> None:
    try:
        rev.verify_signature()
    except SignatureError:
        raise _rejected("A revision's signature does not verify") from None
    try:
        core.check_revision(rev, state.identity, candidate)
    except SignatureError as exc:
        raise _rejected(f"A revision fails the policy check ({exc})") from None
    vault = candidate[rev.vault_id]
    # check_revision asks only that the device was authorized; a Reader's device is, so without
    # this a demoted device could name the newest policy and skip the quarantine below (SY-2).
    named = vault.policy_at(rev.policy_head)
    if named is None or not _lets_write(named, rev.author):
        raise _rejected("A revision's author was not allowed to write under the policy it names (a Reader)")
    key = vault.epoch_keys.get(rev.epoch)
    if key is None:
        raise _rejected("A revision is sealed under an epoch key this device does not hold")
    if [hashlib.sha256(p).digest() for p in parts] != list(rev.body["body"]):
        raise _rejected("A revision's content does not match its signed digests (tampered ciphertext)")
    try:
        rev.summary_cache = None
        rev.open_summary(key)
        rev.open_body(key, parts)
    except (ChunkError, AeadError, ValueError, UnicodeDecodeError, RecursionError):
        raise _rejected("A revision's ciphertext does not authenticate (tampered ciphertext)") from None


# -- one item ID in two vaults --------------------------------------------------------------


def _first_ms(revisions: list[Revision]) -> int | None:
    """When the oldest first revision (no parents) of these was written, by its author's clock."""
    times = [rev.created_ms for rev in revisions if not rev.parents]
    return min(times) if times else None


def _in_two_vaults(state: Unlocked, asset_id: bytes, here: bytes, incoming: VaultKeys, sent: list[Revision]) -> MemoriesError:
    """The refusal of a revision whose item this device holds in another vault, in words a
    person can act on (docs/user-guide.md and docs/sync.md, "One item in two vaults").

    An item's vault is fixed by its first revision, so merge cannot take the revision; the
    usual cause is a memories-json export imported into another vault on a device that did not
    yet hold the item. Which copy is the later one (the import) tells which device to set up
    again; each first revision's time is its author's word, which is enough to advise. Names
    only what this device shows anyway: the item's ID and vault names, never content.
    """
    held = state.index.entry_of(asset_id)
    ours = _first_ms([state.index.revisions[r] for r in held.revisions]) if held is not None else None
    theirs = _first_ms([rev for rev in sent if rev.asset_id == asset_id])
    local = state.vaults.get(here)
    where = f"vault '{local.name}'" if local is not None else "another vault"
    if ours is not None and theirs is not None and ours != theirs:
        which = "this device" if ours > theirs else "the peer device"
        act = f"{which} made the later copy: set it up again"
    else:
        act = "set up again the device that made the later copy (see `memories history`)"
    return _rejected(
        f"Item {asset_id.hex()[:16]} is in {where} here and the peer sends it in another vault, "
        f"'{incoming.name}' (an import of an export into another vault copies IDs); an item lives in one "
        f"vault, so sync stops until one copy is gone: {act} (user guide: One item in two vaults)"
    )


# -- audit entries ---------------------------------------------------------------------------


def _audit_prev(signed: bytes) -> bytes | None:
    if not signed.startswith(_AUDIT_PREFIX):
        raise _rejected("An audit entry is not in the version-1 format")
    try:
        entry = decode_canonical(signed[len(_AUDIT_PREFIX) :])
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _rejected("An audit entry cannot be decoded") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("ts_ms"), int):
        raise _rejected("An audit entry is malformed")
    prev = entry.get("prev")
    if prev is not None and (not isinstance(prev, bytes) or len(prev) != _ID):
        raise _rejected("An audit entry names a malformed previous entry")
    return prev


def _merge_audits(state: Unlocked, head: Policy, history: list[Policy], audits: list[_AuditItem]) -> list[dict[str, Any]]:
    from engine.sync.bundle import audit_entries

    known = {hashlib.sha256(signed).digest() for signed, _, _ in audit_entries(state)}
    own = state.identity.device_pub
    listed = {d for p in history for d in p.devices()}
    records: list[dict[str, Any]] = []
    for item in audits:
        digest = hashlib.sha256(item.signed).digest()
        if digest in known:
            continue
        device = bytes(item.device)
        if device == own:
            raise _rejected("An audit entry claims to be this device's but this device never wrote it")
        if device not in listed or head.device_user(device) != state.identity.user_pub:
            raise _rejected("An audit entry comes from a device that is not one of this user's in the vault policy")
        try:
            verify(device, item.signed, item.sig)
        except SignatureError:
            raise _rejected("An audit entry's signature does not verify") from None
        prev = _audit_prev(item.signed)
        # Each device's entries form a hash chain: an entry follows one we hold or one sent
        # before it, so a reordered or gapped chain is refused.
        if prev is not None and prev not in known:
            raise _rejected("An audit chain is out of order or has a gap")
        known.add(digest)
        records.append({"t": PEER_AUDIT_RECORD, "signed": item.signed, "sig": item.sig, "device": device})
    return records


# -- quarantine (SY-2) -----------------------------------------------------------------------


_WRITER_ROLES = frozenset({"owner", "admin", "editor"})
REVOKED_REASON = "written under a superseded policy by a device the current policy no longer authorizes"
READER_REASON = "written under a superseded policy by a device whose user the current policy makes a Reader"
OWN_REASON = "written on this device under a superseded policy; the newer policy no longer lets this device write here"


def _lets_write(policy: Policy, device: bytes) -> bool:
    """May ``device`` write in the vault under ``policy``: authorized, and its user a writer.

    The same rule :meth:`VaultCore.writable_vault` applies to this device's own writes; an
    authorized device's user is always a member (``verify_chain`` checks it).
    """
    user = policy.device_user(device)
    return policy.authorizes_device(device) and user is not None and policy.role_of(user) in _WRITER_ROLES


def _quarantine_reason(rev: Revision, vault: VaultKeys, adopted: set[bytes]) -> str | None:
    """Why an incoming revision is quarantined instead of applied (None: it is applied).

    A revision written under a superseded policy by a device the merged head no longer lets
    write here (revoked, or its user removed or made a Reader) may have been written after
    that change: neither this device nor the sender can tell. Unless a device the head lets
    write built on it (``adopted``: that device's signature covers its parents), it is held
    back for review (SY-2). The author's own device quarantines the same writes when it learns
    of the policy (:func:`_own_offline`), so both sides of a sync hold back the same set.
    """
    head = vault.policy
    if rev.policy_head == head.head or rev.rev_id in adopted:
        return None
    if not head.authorizes_device(rev.author):
        return REVOKED_REASON
    if not _lets_write(head, rev.author):
        return READER_REASON
    return None


def _with_ancestors(start: Iterable[bytes], by_id: dict[bytes, Revision]) -> set[bytes]:
    """``start`` and every ancestor of it, as far as ``by_id`` holds them (an ID it lacks is left out)."""
    out: set[bytes] = set()
    stack = list(start)
    while stack:
        rid = stack.pop()
        if rid in out or rid not in by_id:
            continue
        out.add(rid)
        stack.extend(by_id[rid].parents)
    return out


def _adopted(revisions: list[Revision], held: dict[bytes, Revision], head: Policy) -> set[bytes]:
    """Every revision that is an ancestor of a revision by a device the head lets write."""
    by_id = {**held, **{rev.rev_id: rev for rev in revisions}}
    return _with_ancestors([p for rev in by_id.values() if _lets_write(head, rev.author) for p in rev.parents], by_id)


def _accepted_before_revocation(revisions: list[Revision], held: dict[bytes, Revision], vault: VaultKeys) -> set[bytes]:
    """SY-6: revisions a revocation in the vault's history records as accepted, and their
    ancestors (a revision is applied only with its parents). The Owner's signature over that
    policy vouches for them, so no clock of the revoked device is trusted: a write it made
    after the revocation is in no recorded set and stays quarantined."""
    recorded = [r for policy in vault.history for r in policy.accepted()]
    if not recorded:
        return set()
    by_id = {**held, **{rev.rev_id: rev for rev in revisions}}
    return _with_ancestors(recorded, by_id)


def _own_offline(
    core: VaultCore, state: Unlocked, vault: VaultKeys, head: Policy, added: int, peer_holds: set[bytes] | None
) -> list[dict[str, Any]]:
    """SY-2, second half: this device's own writes the peer does not hold, made under a policy
    that an incoming newer one superseded and that no longer lets this device write, are
    quarantined locally (hidden from the view, kept with their content for review).

    Without the peer's inventory (``peer_holds`` None) the writes under the last policy this
    device knew before the merge are taken as the offline ones.
    """
    if added == 0 or _lets_write(head, state.identity.device_pub):
        return []
    own = state.identity.device_pub
    held_quarantine = quarantined_ids(state)
    store = core.require_store()
    rows: list[dict[str, Any]] = []
    for rev in list(state.index.revisions.values()):
        if rev.author != own or rev.vault_id != vault.vault_id or rev.policy_head == head.head:
            continue
        if rev.rev_id in held_quarantine or rev.rev_id in state.index.hidden:
            continue
        offline = rev.rev_id not in peer_holds if peer_holds is not None else rev.policy_head == vault.policy.head
        if not offline:
            continue
        signed, sig = rev.signed_pair()  # one read back of the stored row for both (issue 32)
        rows.append(
            {
                "t": QUARANTINE_RECORD,
                "id": os.urandom(8),
                "vault": vault.vault_id,
                "rev": rev.rev_id,
                "reason": OWN_REASON,
                "origin": "local",
                "signed": signed,
                "sig": sig,
                "parts": store.read_content(rev.body_seqs),
                HIDE_FIELD: rev.rev_id,
            }
        )
    return rows


# -- a vault that arrives (PO-3, SY-5) -------------------------------------------------------


def _local_name(state: Unlocked, offered: str | None, vault_id: bytes) -> str:
    """The name a vault that arrives gets here: the sender's (names are local, shown only), made
    printable and unique among this device's vaults."""
    name = " ".join(offered.split())[:48] if isinstance(offered, str) else ""
    if not name or not name.isprintable():
        name = f"shared {vault_id.hex()[:8]}"
    taken = {v.name for v in state.vaults.values()}
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name} ({n})", n + 1
    return candidate


def _arriving_vault(state: Unlocked, bundle: _Bundle, peer_device: bytes) -> VaultKeys:
    """A vault this device does not hold yet, from a peer it trusts for it: checked whole.

    Taken only when the bundle carries its complete signed history from genesis, that history
    verifies, its head authorizes this device for this user (a member), authorizes the peer,
    and the peer is a device of this user (SY-5: vaults follow a user's devices) or of the user
    an invitation made here pins (PO-3). Anything else is the old refusal.
    """
    policies = bundle.policies
    if not policies or policies[0].seq != 1:
        raise _rejected("The bundle is of a vault this device does not hold")
    _verify(policies)
    head = policies[-1]
    if bytes(head.body["vault"]) != bundle.vault_id:
        raise _rejected("The incoming policy history is of another vault")
    own = state.identity
    if not head.authorizes_device(own.device_pub) or head.device_user(own.device_pub) != own.user_pub:
        raise _rejected("The bundle is of a vault whose policy does not authorize this device")
    if not head.authorizes_device(bytes(peer_device)):
        raise _rejected("The peer device is not authorized by the vault policy")
    # A revoked device keeps the user key (ID-5): a vault it made, handed on by a device that had
    # not heard of the revocation, authorizes it. Such a vault is not taken.
    revoked_here = {d for held in state.vaults.values() for d in held.policy.revoked()}
    if any(head.authorizes_device(d) for d in revoked_here):
        raise _rejected("The bundle is of a vault whose policy authorizes a device revoked here")
    peer_user = head.device_user(bytes(peer_device))
    if peer_user is None or (
        peer_user != own.user_pub and not pinned_user(state.extra_records, peer_user, int(time.time() * 1000))
    ):
        raise _rejected(
            "The bundle is of a vault this device does not hold, from another person no invitation made here "
            "names (`memories whoami --invite --owner FINGERPRINT`)"
        )
    name = _local_name(state, bundle.name, bundle.vault_id)
    return VaultKeys(bundle.vault_id, name, head, {}, list(policies))


# -- the entry point -------------------------------------------------------------------------


def merge(
    core: VaultCore,
    state: Unlocked,
    chunks: list[bytes],
    *,
    peer_device: bytes,
    actor: Actor,
    max_chunk_bytes: int = MAX_CHUNK_BYTES,
    max_chunks: int = MAX_CHUNKS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    peer_holds: set[bytes] | None = None,
) -> MergeReport:
    """Verify a peer's bundle of one vault completely, then commit it in one transaction.

    No chunks (the peer had nothing we lack) is an empty report with an empty vault ID.
    ``peer_holds``: the revision IDs the peer holds of this vault, when known (its inventory);
    it decides which of this device's own writes were offline (SY-2).
    """
    if isinstance(chunks, (list, tuple)) and not chunks:
        return MergeReport(b"")
    bundle = _decode(chunks, max_chunk_bytes, max_chunks, max_total_bytes)
    vault = state.vaults.get(bundle.vault_id)
    arriving = vault is None
    if vault is None:
        vault = _arriving_vault(state, bundle, bytes(peer_device))
        outcome, fork = _PolicyOutcome(vault.history, len(vault.history)), None
    elif is_device_only(state, vault.vault_id):
        raise _rejected("The bundle is of a vault this device does not hold")
    else:
        outcome, fork = _merge_policies(state, vault, bundle)
    if fork is not None:
        # Nothing of the bundle is merged; the other branch is kept for `vault fork resolve`.
        known = {bytes(r["fork"]) for _, r in state.extra_records.get(FORK_RECORD, [])}
        if fork["fork"] not in known:
            core.commit(state, [], [], [fork, core.audit_record(state, "sync_fork", actor, outcome="fork")])
        raise MemoriesError(
            "policy_fork",
            "The peer holds another signed branch of this vault's policy; an Owner must run "
            "`memories vault fork resolve`. Nothing was merged.",
        )
    head = outcome.history[-1]
    if not head.authorizes_device(bytes(peer_device)):
        raise _rejected("The peer device is not authorized by the vault policy")
    keys = _merge_keys(state, vault, head, bundle.keys)
    if head.authorizes_device(state.identity.device_pub) and head.epoch not in keys:
        raise _rejected("The bundle lacks the vault's current epoch key for this device")
    merged = VaultKeys(vault.vault_id, vault.name, head, keys, outcome.history, [*vault.discarded, *outcome.discarded])
    candidate = {**state.vaults, vault.vault_id: merged}

    held = state.index.revisions
    skipped_quarantine = quarantined_ids(state)
    fresh = [rev for rev in bundle.revisions if rev.rev_id not in held and rev.rev_id not in skipped_quarantine]
    ordered = _order(fresh, held)
    for rev in ordered:
        if rev.vault_id != vault.vault_id:
            raise _rejected("A revision in the bundle belongs to another vault")
        # Also an item quarantine hides here: its vault is fixed by its first revision (SY-2).
        existing = state.index.vault_of(rev.asset_id)
        if existing is not None and existing != vault.vault_id:
            raise _in_two_vaults(state, rev.asset_id, existing, vault, bundle.revisions)
        _verify_revision(core, state, candidate, rev, bundle.parts[rev.rev_id])
    audit_rows = _merge_audits(state, head, outcome.history, bundle.audits)

    adopted = _adopted(ordered, held, head) | _accepted_before_revocation(ordered, held, merged)
    applied: list[Revision] = []
    quarantine_rows: list[dict[str, Any]] = []
    dropped: set[bytes] = set()
    for rev in ordered:
        reason = _quarantine_reason(rev, merged, adopted)
        if reason is None and any(p in dropped for p in rev.parents):
            reason = "built on a quarantined revision"
        if reason is not None:
            dropped.add(rev.rev_id)
            quarantine_rows.append(
                {
                    "t": QUARANTINE_RECORD,
                    "id": os.urandom(8),
                    "vault": vault.vault_id,
                    "rev": rev.rev_id,
                    "reason": reason,
                    "origin": "incoming",
                    "signed": rev.signed,
                    "sig": rev.signature,
                    "parts": bundle.parts[rev.rev_id],
                }
            )
        else:
            applied.append(rev)

    quarantine_rows += _own_offline(core, state, vault, head, outcome.added, peer_holds)

    vault_rows: list[dict[str, Any]] = []
    default = vault.vault_id == state.default_vault
    if outcome.replaced:
        # Our branch was discarded: the vault's history is stored again, whole (decode reads
        # a row with ``history`` as a replacement; the discarded policies stay in the fork record).
        row = merged.record(default=default)
        row["history"] = [p.to_record() for p in outcome.history]
        vault_rows.append(row)
    else:
        for i in range(len(outcome.history) - outcome.added, len(outcome.history)):
            step = VaultKeys(vault.vault_id, vault.name, outcome.history[i], keys, outcome.history[: i + 1])
            vault_rows.append(step.record(default=default))
        if not vault_rows and keys != vault.epoch_keys:
            vault_rows.append(merged.record(default=default))
    if outcome.resolution is not None:
        vault_rows.append(
            {
                "t": RESOLUTION_RECORD,
                "vault": vault.vault_id,
                "fork": outcome.fork_id,
                "resolution": outcome.resolution.to_record(),
            }
        )

    report = MergeReport(vault.vault_id, len(applied), outcome.added, len(audit_rows), len(quarantine_rows))
    report.discarded_policies = len(outcome.discarded) if outcome.replaced else 0
    if not (applied or vault_rows or audit_rows or quarantine_rows):
        return report  # everything was already here: idempotent, nothing written
    store = core.require_store()
    seqs = store.reserve_content(sum(len(bundle.parts[rev.rev_id]) for rev in applied))
    content: list[tuple[int, bytes]] = []
    taken = 0  # an index, not the list re-sliced: that copied the rest per revision (issue 32)
    for rev in applied:
        parts = bundle.parts[rev.rev_id]
        rev.body_seqs = seqs[taken : taken + len(parts)]
        taken += len(parts)
        content.extend(zip(rev.body_seqs, parts, strict=True))
    # Merging only other devices' audit entries writes no entry of its own: two devices that
    # sync repeatedly would otherwise never run out of new entries to send each other.
    audit = (
        []
        if not (applied or vault_rows or quarantine_rows)
        else [
            core.audit_record(
                state,
                "sync_merge",
                actor,
                outcome="ok",
                vaults=[vault.vault_id],
                peer=bytes(peer_device),
                revisions=len(applied),
                policies=outcome.added,
                quarantined=len(quarantine_rows),
            )
        ]
    )
    previous = state.vaults.get(vault.vault_id)
    # The committed hooks (search index, links) read revisions with the merged epoch keys.
    state.vaults[vault.vault_id] = merged
    try:
        if arriving:  # its rows before its revisions: unlock reads a vault before its revisions
            core.commit(state, applied, content, [*quarantine_rows, *audit_rows, *audit], lead=vault_rows)
        else:
            core.commit(state, applied, content, [*vault_rows, *quarantine_rows, *audit_rows, *audit])
    except MemoriesError as exc:
        if exc.code in ("io_error", "disk_full", "locked"):
            # nothing was written (ST-5)
            if previous is None:
                state.vaults.pop(vault.vault_id, None)
            else:
                state.vaults[vault.vault_id] = previous
        raise
    touched = {rev.asset_id for rev in applied}
    report.conflicts = sorted(state.index.short_id(asset_id) for asset_id in touched if state.index.assets[asset_id].in_conflict)
    return report
