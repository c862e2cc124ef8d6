"""One cloud sync of one account, in three steps (CL-3; docs/cloud.md):

1. :func:`enqueue` (under the service lock): for every shared vault and every other device
   its policy authorizes, the bundle that device lacks (as far as this account's traffic
   shows) is made, sealed to that device, hashed and signed into a descriptor, and committed
   as a ``cloud_out`` record BEFORE any transport I/O. A retry re-sends exactly these bytes.
2. :func:`transfer` (no lock held): upload what is not acknowledged (objects first, then the
   descriptor), list new descriptors addressed to this device per known sender, fetch the
   objects of every descriptor that is due, check each object's hash and open it.
3. :func:`acknowledge` (under the service lock, after the caller re-checked the session
   generation): commit upload flags, discovered descriptors with their back-off, and for
   each complete descriptor the vault merge (engine.sync.merge.merge) and its ``cloud_done``.

Per sender, descriptors merge in sequence order: one whose objects are missing keeps every
later one from that sender pending.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from engine.cloud import objects as ob
from engine.cloud import state as cs
from engine.cloud.transport import ObjectStore
from engine.errors import MemoriesError
from engine.vault.core import Actor, Unlocked, VaultCore

__all__ = ["Plan", "Transferred", "enqueue", "transfer", "acknowledge", "MAX_PENDING", "CHUNK_BYTES"]

CHUNK_BYTES = 4 * 1024 * 1024  # one bundle chunk per object
MAX_PENDING = 256  # pending descriptors per account: beyond this, listing waits (back-pressure)
_CONCURRENCY = 8


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Upload:
    out_id: bytes
    objects: list[tuple[str, bytes]]
    descriptor: tuple[str, bytes]


@dataclass
class Due:
    """A descriptor to fetch now: known (pending) or to be discovered by listing."""

    sender: bytes
    seq: int
    descriptor: bytes | None  # None: not fetched yet
    attempts: int


@dataclass
class Plan:
    account: bytes
    prefix: str
    me: bytes
    exchange_key: Any
    uploads: list[Upload]
    senders: dict[bytes, int]  # sender -> highest seq already known (list after it)
    pending: dict[bytes, list[Due]]  # sender -> pending descriptors, seq order
    listing: bool  # False when pending capacity is full (back-pressure)
    due_ms: dict[tuple[bytes, int], int] = field(default_factory=dict)  # pending: next try
    enqueued: int = 0


@dataclass
class Fetched:
    sender: bytes
    seq: int
    descriptor: bytes
    vault: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    covers: ob.Covers | None = None
    missing: bool = False
    waiting: bool = False
    attempts: int = 0
    error: MemoriesError | None = None


@dataclass
class Transferred:
    uploaded: list[bytes] = field(default_factory=list)
    fetched: list[Fetched] = field(default_factory=list)
    ignored: int = 0  # keys under a sender's prefix that are no descriptor
    corrupt: int = 0  # objects whose bytes do not hash to their ID (treated as missing)


# -- 1. enqueue -------------------------------------------------------------------------------------


def enqueue(core: VaultCore, state: Unlocked, account: cs.Account, actor: Actor) -> Plan:
    from engine.sync.bundle import Inventory, audit_entries, make_bundle, shared_vault_ids

    me = state.identity.device_pub
    records = state.extra_records
    rows: list[dict[str, Any]] = []
    next_seq: dict[bytes, int] = {}
    devices: set[bytes] = set()
    for vault_id in shared_vault_ids(state):
        vault = state.vaults[vault_id]
        for device in vault.policy.devices():
            exchange = vault.policy.exchange_key(device)
            if device == me or exchange is None:
                continue
            devices.add(device)
            held = cs.holds(records, account.account_id, vault_id, device)
            peer = Inventory(vault_id, held.heads, held.revs, held.audits, device)
            chunks = make_bundle(core, state, vault_id, peer, max_bytes=CHUNK_BYTES)
            held_revs = set(held.revs)
            revs = sorted(
                rev.rev_id
                for rev in state.index.revisions.values()
                if bytes(rev.body["vault"]) == vault_id and rev.rev_id not in held_revs
            )
            heads = [p.head for p in vault.history]
            same_user = vault.policy.device_user(device) == state.identity.user_pub
            audits = (
                sorted({hashlib.sha256(s).digest() for s, _, _ in audit_entries(state)} - set(held.audits)) if same_user else []
            )
            if not revs and not audits and heads == held.heads:
                continue  # nothing new for that device (keys and resolutions ride with changes)
            if not chunks:
                continue
            seq = next_seq.get(device) or cs.next_seq(records, account.account_id, device)
            next_seq[device] = seq + 1
            covers = ob.Covers(heads, revs, audits)
            sealed = ob.seal_bundle(state.identity.device_key, exchange, vault_id, seq, chunks, covers)
            descriptor = ob.make_descriptor(state.identity.device_key, device, seq, sealed)
            rows.append(
                {
                    "t": cs.OUT,
                    "id": hashlib.sha256(descriptor).digest()[:8],
                    "account": account.account_id,
                    "vault": vault_id,
                    "to": device,
                    "seq": seq,
                    "objects": sealed.objects,
                    "descriptor": descriptor,
                    "covers": covers.to_wire(),
                    "ts_ms": now_ms(),
                }
            )
    if rows:
        # CL-3: the exact bytes and their descriptor are durable before any transport I/O.
        core.commit(state, [], [], rows)
    uploads = [
        Upload(
            bytes(r["id"]),
            [(ob.object_key(account.prefix, hashlib.sha256(o).digest()), bytes(o)) for o in r["objects"]],
            (ob.descriptor_key(account.prefix, bytes(r["to"]), me, int(r["seq"])), bytes(r["descriptor"])),
        )
        for r in cs.outbox(records, account.account_id)
    ]
    # Senders: every other device of every shared vault (a revoked device's later objects fail
    # the merge's policy check; its earlier ones are still history).
    for vault_id in shared_vault_ids(state):
        devices.update(d for d in state.vaults[vault_id].policy.devices() if d != me)
    known = cs.known_seqs(records, account.account_id)
    waiting = cs.inbox(records, account.account_id)
    pending: dict[bytes, list[Due]] = {}
    for (sender, seq), r in sorted(waiting.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        pending.setdefault(sender, []).append(Due(sender, seq, bytes(r["descriptor"]), int(r["attempts"])))
    return Plan(
        account=account.account_id,
        prefix=account.prefix,
        me=me,
        exchange_key=state.identity.exchange_key,
        uploads=uploads,
        senders={d: known.get(d, 0) for d in sorted(devices)},
        pending=pending,
        listing=len(waiting) < MAX_PENDING,
        due_ms={key: int(r["next_ms"]) for key, r in waiting.items()},
        enqueued=len(rows),
    )


# -- 2. transfer (no lock) ------------------------------------------------------------------------


async def transfer(store: ObjectStore, plan: Plan, now: int) -> Transferred:
    out = Transferred()
    limit = asyncio.Semaphore(_CONCURRENCY)

    async def upload(item: Upload) -> None:
        async with limit:
            for key, data in item.objects:
                await store.put(key, data)
        # The descriptor goes last: a receiver that sees it finds the objects (unless the
        # storage is only eventually consistent, which the receiver's pending state absorbs).
        await store.put(*item.descriptor)
        out.uploaded.append(item.out_id)

    await asyncio.gather(*(upload(u) for u in plan.uploads))

    for sender, after in plan.senders.items():
        chain = list(plan.pending.get(sender, []))
        if plan.listing:
            prefix = ob.descriptor_prefix(plan.prefix, plan.me, sender)
            start = prefix + f"{after:012d}" if after else None
            keys = await store.list_after(prefix, start, _list_limit(plan))
            for key in keys:
                seq = ob.parse_seq(key)
                if seq is None or seq <= after:
                    out.ignored += 1
                    continue
                chain.append(Due(sender, seq, None, 0))
        blocked = False
        for due in sorted(chain, key=lambda d: d.seq):
            fetched = Fetched(sender, due.seq, due.descriptor or b"", attempts=due.attempts)
            out.fetched.append(fetched)
            if blocked or plan.due_ms.get((sender, due.seq), 0) > now:
                # Held back (an earlier one of this sender is missing) or not due yet: no try.
                fetched.missing = fetched.waiting = blocked = True
                continue
            await _fetch(store, plan, fetched, out, limit)
            if fetched.missing:
                fetched.attempts += 1
                blocked = True
    return out


def _list_limit(plan: Plan) -> int:
    return max(1, MAX_PENDING - sum(len(v) for v in plan.pending.values()))


async def _fetch(store: ObjectStore, plan: Plan, fetched: Fetched, out: Transferred, limit: asyncio.Semaphore) -> None:
    if not fetched.descriptor:
        data = await store.get(ob.descriptor_key(plan.prefix, plan.me, fetched.sender, fetched.seq), ob.MAX_DESCRIPTOR_BYTES)
        if data is None:  # listed, then gone: treat like a missing object
            fetched.missing = True
            return
        fetched.descriptor = data
    try:
        descriptor = ob.parse_descriptor(fetched.descriptor, sender=fetched.sender, to=plan.me, seq=fetched.seq)
    except MemoriesError as exc:
        fetched.error = exc
        return

    async def one(index: int, object_id: bytes, size: int) -> bytes | None:
        async with limit:
            data = await store.get(ob.object_key(plan.prefix, object_id), size)
        if data is not None and hashlib.sha256(data).digest() != object_id:
            out.corrupt += 1
            return None  # not the object: whatever is there is ignored, the real one may come
        return data

    got = await asyncio.gather(
        *(one(i, oid, size) for i, (oid, size) in enumerate(zip(descriptor.object_ids, descriptor.sizes, strict=True)))
    )
    if any(data is None for data in got):
        fetched.missing = True
        return
    try:
        for index, data in enumerate(got):
            assert data is not None
            vault, chunk, covers = ob.open_object(plan.exchange_key, data, descriptor=descriptor, index=index)
            if index == 0:
                fetched.vault, fetched.covers = vault, covers
            elif vault != fetched.vault:
                raise MemoriesError(
                    "sync_rejected", "The objects of one cloud descriptor name different vaults; nothing was merged."
                )
            fetched.chunks.append(chunk)
    except MemoriesError as exc:
        fetched.error = exc
        fetched.chunks = []


# -- 3. acknowledge (under the lock, generation re-checked by the caller) -----------------------------


def acknowledge(
    core: VaultCore,
    state: Unlocked,
    plan: Plan,
    moved: Transferred,
    actor: Actor,
    now: int,
) -> dict[str, Any]:
    from engine.sync.merge import merge

    rows: list[dict[str, Any]] = [{"t": cs.SENT, "account": plan.account, "out": out_id} for out_id in moved.uploaded]
    reports: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for item in moved.fetched:
        if item.missing:
            attempts = item.attempts
            delay = cs.backoff_ms(attempts) if attempts and not item.waiting else 0
            next_ms = now + delay if not item.waiting else int(plan.due_ms.get((item.sender, item.seq), now))
            rows.append(
                {
                    "t": cs.SEEN,
                    "account": plan.account,
                    "from": item.sender,
                    "seq": item.seq,
                    "descriptor": item.descriptor,
                    "attempts": attempts,
                    "next_ms": next_ms,
                }
            )
            pending.append(
                {"from": item.sender.hex()[:16], "seq": item.seq, "attempts": attempts, "retry_in_ms": max(0, next_ms - now)}
            )
            continue
        done: dict[str, Any] = {"t": cs.DONE, "account": plan.account, "from": item.sender, "seq": item.seq, "ts_ms": now}
        if item.error is None:
            try:
                if rows:
                    core.commit(state, [], [], rows)
                    rows = []
                report = merge(core, state, item.chunks, peer_device=item.sender, actor=actor)
                reports.append(report.to_wire())
                done.update(outcome="merged", vault=item.vault)
                if item.covers is not None:
                    done["covers"] = item.covers.to_wire()
            except MemoriesError as exc:
                if exc.code in ("locked", "io_error", "disk_full"):
                    raise
                item.error = exc
        if item.error is not None:
            done.update(outcome="rejected", code=item.error.code)
            rejected.append(
                {"from": item.sender.hex()[:16], "seq": item.seq, "code": item.error.code, "message": item.error.message}
            )
        rows.append(done)
    if rows:
        core.commit(state, [], [], rows)
    return {
        "uploaded": len(moved.uploaded),
        "merged": reports,
        "pending": pending,
        "rejected": rejected,
        "ignored": moved.ignored,
        "corrupt": moved.corrupt,
    }
