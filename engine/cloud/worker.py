"""One cloud sync of one account, in four steps (CL-3, CL-5; docs/cloud.md):

1. :func:`enqueue` (under the service lock): for every shared vault and every other device
   its policy authorizes, the bundle that device lacks (as far as this account's traffic
   shows) is made, sealed to that device, hashed and signed into a descriptor, and committed
   as a ``cloud_out`` record BEFORE any transport I/O. A retry re-sends exactly these bytes.
2. :func:`transfer` (no lock held): read each peer's delivery marks (what it took of ours,
   where it is stuck, what it sent us); upload what is not acknowledged plus, again, every
   bundle a peer reports it could not take (objects first, then the descriptor, each
   receiver's descriptors in sequence order); then, per sender, walk its sequence from the
   first number not taken: fetch the descriptor at that slot (or retry the one kept), check
   its signature, fetch and check its objects, open them.
3. :func:`acknowledge` (under the service lock, after the caller re-checked the session
   generation): commit upload flags, each sender's first slot not taken with why (missing,
   refused, absent) and since when, and for each complete bundle the vault merge
   (engine.sync.merge.merge) and its ``cloud_done``; then sign this device's marks for every
   peer.
4. :func:`publish` (no lock): put the marks.

Per sender, bundles merge in sequence order: the first one not taken holds back the later
ones, and is a **gap** (CL-5): reported by ``cloud sync`` on this device (non-zero exit) and,
through the marks, on the sender's. Nothing closes a gap but taking that bundle: a refused or
missing slot is looked at again on every later sync (the descriptor at the slot is fetched
again, unless this device already holds one its sender signed; objects are fetched by their
content address), so a good descriptor that appears later at the slot, or an object that
appears under its name, is taken.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from engine.cloud import objects as ob
from engine.cloud import state as cs
from engine.cloud.intro import MAX_INTRO_BYTES, intro_key, intro_prefix, make_intro, parse_intro, sender_dir
from engine.cloud.transport import ObjectStore
from engine.errors import MemoriesError
from engine.vault.core import Actor, Unlocked, VaultCore

__all__ = [
    "Plan",
    "Transferred",
    "enqueue",
    "transfer",
    "acknowledge",
    "publish",
    "gaps_of",
    "MAX_PENDING",
    "CHUNK_BYTES",
]

CHUNK_BYTES = 4 * 1024 * 1024  # one bundle chunk per object
MAX_PENDING = 256  # descriptors listed and taken per sender and sync (back-pressure)
_CONCURRENCY = 8
_MISSING = {"missing": "cloud_object_missing", "absent": "cloud_bundle_missing"}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Upload:
    out_id: bytes | None  # None: an upload again of a bundle a peer reports not taken (CL-5)
    to: bytes
    seq: int
    objects: list[tuple[str, bytes]]
    descriptor: tuple[str, bytes]


@dataclass
class Plan:
    account: bytes
    prefix: str
    me: bytes
    exchange_key: Any
    device_key: Any
    uploads: list[Upload]
    peers: list[bytes]  # other devices a shared vault authorizes: we send to them and take from them
    floors: dict[bytes, int]  # sender -> highest seq taken
    open: dict[bytes, dict[int, dict[str, Any]]]  # sender -> seq -> latest cloud_in record (not taken)
    sent: dict[bytes, int]  # receiver -> highest seq whose upload is acknowledged
    out_records: dict[tuple[bytes, int], dict[str, Any]]  # (receiver, seq) -> cloud_out record
    enqueued: int = 0
    # PO-3 (engine/cloud/intro.py): peers of another user we introduce ourselves to until they
    # publish marks for us, with our certificate; and the user fingerprints a live invitation
    # made here pins (whose devices' introductions this device follows).
    introduce: list[bytes] = field(default_factory=list)
    certificate: tuple[dict[str, Any], bytes] | None = None
    pinned: set[bytes] = field(default_factory=set)


@dataclass
class Slot:
    """One sequence number of one sender as this sync found it."""

    sender: bytes
    seq: int
    record: dict[str, Any] | None  # the slot's latest cloud_in record, if any
    state: str = "ready"  # ready | missing | refused | absent | waiting | clear
    stage: str = ""  # refused: "descriptor" (what is at the slot), "object" or "merge" (the bundle)
    descriptor: bytes = b""  # the signature-checked descriptor, kept for retries
    digest: bytes = b""  # SHA-256 of the descriptor bytes found (or kept)
    vault: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    covers: ob.Covers | None = None
    error: MemoriesError | None = None
    attempts: int = 0
    tried: bool = False  # an attempt was made now (counted in attempts, back-off restarts)
    missing_ids: list[bytes] = field(default_factory=list)  # objects not found (looked for on every sync)
    unchanged: bool = False  # the same refused bytes as last time: nothing new to record


@dataclass
class NotTaken:
    """A bundle of ours a peer's marks say it has not taken (CL-5)."""

    peer: bytes
    seq: int
    why: str
    code: str
    since_ms: int
    ours: bool  # the bytes the peer found are the descriptor we wrote (so it refused our bundle)
    uploaded_again: bool


@dataclass
class Transferred:
    uploaded: list[bytes] = field(default_factory=list)
    uploaded_again: list[tuple[bytes, int]] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    marks: dict[bytes, ob.Marks] = field(default_factory=dict)  # peer -> its marks for us
    marks_refused: list[tuple[bytes, MemoriesError]] = field(default_factory=list)
    not_taken: list[NotTaken] = field(default_factory=list)
    ignored: int = 0  # keys under a sender's prefix that are no descriptor
    corrupt: int = 0  # objects whose bytes do not hash to their ID (treated as missing)
    introduced: list[bytes] = field(default_factory=list)  # senders followed for the first time (PO-3)
    introductions: int = 0  # introductions of ours put for peers that have not answered yet


# -- 1. enqueue -------------------------------------------------------------------------------------


def _pinned(state: Unlocked, now: int) -> set[bytes]:
    """Fingerprints of the users a live invitation made here pins (PO-3)."""
    from engine.vault.invite import PIN_RECORD

    return {bytes(r["owner"]) for _, r in state.extra_records.get(PIN_RECORD, []) if int(r["expires_ms"]) >= now}


def _other_users(state: Unlocked, peers: list[bytes]) -> list[bytes]:
    """The peers that are devices of another person (they may not know this device yet)."""
    from engine.sync.bundle import shared_vault_ids

    own = state.identity.user_pub
    others: set[bytes] = set()
    for vault_id in shared_vault_ids(state):
        policy = state.vaults[vault_id].policy
        others.update(d for d in peers if policy.authorizes_device(d) and policy.device_user(d) not in (None, own))
    return sorted(others)


def _peers(state: Unlocked) -> list[bytes]:
    """Every other device a shared vault authorizes (a revoked device is no peer: the merge
    refuses whatever it sends from then on, so its sequence is not followed)."""
    from engine.sync.bundle import shared_vault_ids

    me = state.identity.device_pub
    peers: set[bytes] = set()
    for vault_id in shared_vault_ids(state):
        policy = state.vaults[vault_id].policy
        peers.update(d for d in policy.devices() if d != me and policy.authorizes_device(d))
    return sorted(peers)


def _upload(prefix: str, me: bytes, record: dict[str, Any], out_id: bytes | None) -> Upload:
    return Upload(
        out_id,
        bytes(record["to"]),
        int(record["seq"]),
        [(ob.object_key(prefix, hashlib.sha256(o).digest()), bytes(o)) for o in record["objects"]],
        (ob.descriptor_key(prefix, bytes(record["to"]), me, int(record["seq"])), bytes(record["descriptor"])),
    )


def enqueue(core: VaultCore, state: Unlocked, account: cs.Account, actor: Actor) -> Plan:
    from engine.sync.bundle import Inventory, audit_entries, make_bundle, shared_vault_ids

    me = state.identity.device_pub
    records = state.extra_records
    rows: list[dict[str, Any]] = []
    next_seq: dict[bytes, int] = {}
    for vault_id in shared_vault_ids(state):
        vault = state.vaults[vault_id]
        for device in vault.policy.devices():
            exchange = vault.policy.exchange_key(device)
            if device == me or exchange is None:
                continue
            held = cs.holds(records, account.account_id, vault_id, device)
            peer = Inventory(vault_id, held.heads, held.revs, held.audits, device)
            chunks = make_bundle(core, state, vault_id, peer, max_bytes=CHUNK_BYTES)
            held_revs = set(held.revs)
            revs = sorted(
                rev.rev_id for rev in state.index.revisions.values() if rev.vault_id == vault_id and rev.rev_id not in held_revs
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
    uploads = [_upload(account.prefix, me, r, bytes(r["id"])) for r in cs.outbox(records, account.account_id)]
    peers = _peers(state)
    open_slots: dict[bytes, dict[int, dict[str, Any]]] = {}
    for (sender, seq), r in cs.inbox(records, account.account_id).items():
        open_slots.setdefault(sender, {})[seq] = r
    return Plan(
        account=account.account_id,
        prefix=account.prefix,
        me=me,
        exchange_key=state.identity.exchange_key,
        device_key=state.identity.device_key,
        uploads=uploads,
        peers=peers,
        floors=cs.floors(records, account.account_id),
        open=open_slots,
        sent=cs.sent_seqs(records, account.account_id),
        out_records=cs.sent_out(records, account.account_id),
        enqueued=len(rows),
        introduce=_other_users(state, peers),
        certificate=(state.identity.certificate, state.identity.certificate_sig),
        pinned=_pinned(state, now_ms()),
    )


# -- 2. transfer (no lock) ------------------------------------------------------------------------


async def transfer(store: ObjectStore, plan: Plan, now: int) -> Transferred:
    out = Transferred()
    limit = asyncio.Semaphore(_CONCURRENCY)

    if plan.pinned:
        # PO-3: the devices of a person whose invitation this device made may be holding a
        # vault for it; follow them from now on (acknowledge and the marks use plan.peers).
        out.introduced = await _introductions(store, plan)
        plan.peers = sorted({*plan.peers, *out.introduced})

    # Marks first: they say what to upload again, and what each peer has sent us.
    marks = await asyncio.gather(*(_read_marks(store, plan, peer) for peer in plan.peers))
    for peer, (found, error) in zip(plan.peers, marks, strict=True):
        if error is not None:
            out.marks_refused.append((peer, error))
        elif found is not None:
            out.marks[peer] = found
    await _introduce(store, plan, out)
    again = _not_taken(plan, out)

    queued = {(u.to, u.seq) for u in plan.uploads}
    uploads = plan.uploads + [u for u in again if (u.to, u.seq) not in queued]
    chains: dict[bytes, list[Upload]] = {}
    for item in uploads:
        chains.setdefault(item.to, []).append(item)

    async def put_chain(items: list[Upload]) -> None:
        # Per receiver in sequence order, each descriptor after its objects: a receiver that
        # lists number n+1 can rely on n being there, so a hole is never an upload in flight.
        for item in sorted(items, key=lambda u: u.seq):
            # An upload again replaces whatever is under those names now (a provider that
            # skips a name it already holds would otherwise keep the bytes that were refused).
            replace = item.out_id is None

            async def put(key: str, data: bytes, replace: bool) -> None:
                async with limit:
                    await store.put(key, data, replace=replace)

            await asyncio.gather(*(put(key, data, replace) for key, data in item.objects))
            async with limit:
                await store.put(*item.descriptor, replace=replace)
            if item.out_id is not None:
                out.uploaded.append(item.out_id)
            else:
                out.uploaded_again.append((item.to, item.seq))

    await asyncio.gather(*(put_chain(items) for items in chains.values()))
    for sender in plan.peers:
        await _receive(store, plan, sender, now, out, limit)
    return out


async def _introductions(store: ObjectStore, plan: Plan) -> list[bytes]:
    """Senders not followed yet whose introduction for this device checks and whose user a live
    invitation made here pins (engine/cloud/intro.py). Anything else under the prefix is ignored."""
    known = {ob.device_dir(p) for p in plan.peers}
    prefix = intro_prefix(plan.prefix, plan.me)
    found: list[bytes] = []
    for key in await store.list_after(prefix, None, MAX_PENDING):
        dirname = sender_dir(key)
        if dirname in known:
            continue
        try:
            data = await store.get(key, MAX_INTRO_BYTES)
            if data is None:
                continue
            introduced = parse_intro(data, to=plan.me, dirname=dirname)
        except MemoriesError as exc:
            if exc.code not in ("sync_rejected", "sync_invalid"):
                raise
            continue
        if introduced.user_fingerprint in plan.pinned and introduced.device != plan.me:
            found.append(introduced.device)
    return found


async def _introduce(store: ObjectStore, plan: Plan, out: Transferred) -> None:
    """Put this device's introduction for each peer of another user that has published no marks
    for it yet (it may not know this device); once it answers, nothing more is written."""
    if plan.certificate is None:
        return
    cert, cert_sig = plan.certificate
    waiting = [p for p in plan.introduce if p not in out.marks and all(p != r for r, _ in out.marks_refused)]
    intros = [(intro_key(plan.prefix, p, plan.me), make_intro(plan.device_key, p, cert, cert_sig)) for p in waiting]
    await asyncio.gather(*(store.put(key, data, replace=True) for key, data in intros))
    out.introductions = len(waiting)


async def _read_marks(store: ObjectStore, plan: Plan, peer: bytes) -> tuple[ob.Marks | None, MemoriesError | None]:
    try:
        data = await store.get(ob.marks_key(plan.prefix, plan.me, peer), ob.MAX_MARKS_BYTES)
        if data is None:
            return None, None  # that peer has not published any yet (or they were removed)
        return ob.parse_marks(data, sender=peer, to=plan.me), None
    except MemoriesError as exc:
        if exc.code not in ("sync_rejected", "sync_invalid"):
            raise
        return None, exc


def _not_taken(plan: Plan, out: Transferred) -> list[Upload]:
    """What each peer's marks say it could not take of ours; the uploads that may repair it."""
    again: list[Upload] = []
    for peer, marks in out.marks.items():
        stuck = marks.stuck
        if stuck is None or stuck.seq > plan.sent.get(peer, 0):
            continue  # stuck on a number we have not uploaded yet: our next upload writes it
        record = plan.out_records.get((peer, stuck.seq))
        ours = record is not None and stuck.digest == hashlib.sha256(bytes(record["descriptor"])).digest()
        # Our own descriptor refused by the peer's merge: the same bytes again would not help.
        repair = record is not None and not (ours and stuck.why == "refused")
        if repair:
            assert record is not None
            upload = _upload(plan.prefix, plan.me, record, None)
            if stuck.why == "refused":
                upload.objects = []  # it never got past the descriptor: only that is replaced
            again.append(upload)
        out.not_taken.append(NotTaken(peer, stuck.seq, stuck.why, stuck.code, stuck.since_ms, ours, repair))
    return again


async def _receive(store: ObjectStore, plan: Plan, sender: bytes, now: int, out: Transferred, limit: asyncio.Semaphore) -> None:
    """Walk ``sender``'s sequence from the first number not taken, until one is not ready."""
    floor = plan.floors.get(sender, 0)
    kept = plan.open.get(sender, {})
    marks = out.marks.get(sender)
    claimed = marks.sent if marks is not None else 0  # the sender says it uploaded up to here
    prefix = ob.descriptor_prefix(plan.prefix, plan.me, sender)
    listed: set[int] = set()
    for key in await store.list_after(prefix, prefix + f"{floor:012d}" if floor else None, MAX_PENDING):
        seq = ob.parse_seq(key)
        if seq is None or seq <= floor:
            out.ignored += 1
            continue
        listed.add(seq)
    seq = floor + 1
    while seq - floor <= MAX_PENDING:
        record = kept.get(seq)
        if seq not in listed and record is None and claimed < seq:
            if any(s > seq for s in listed) or any(s > seq for s in kept):
                # A hole: nothing at this number though a later one is there.
                out.slots.append(Slot(sender, seq, None, state="absent"))
            return
        slot = Slot(sender, seq, record, attempts=int(record["attempts"]) if record else 0)
        out.slots.append(slot)
        later = claimed >= seq or any(s > seq for s in listed)
        await _take(store, plan, slot, now, later, out, limit)
        if slot.state != "ready":
            return
        seq += 1


def _listed(descriptor: ob.Descriptor) -> list[tuple[bytes, int]]:
    return list(zip(descriptor.object_ids, descriptor.sizes, strict=True))


async def _known(data: bytes) -> bytes | None:
    return data


async def _object(
    store: ObjectStore, plan: Plan, object_id: bytes, size: int, out: Transferred, limit: asyncio.Semaphore
) -> bytes | None:
    """The object named ``object_id``, or None when it is not there or is not those bytes."""
    async with limit:
        try:
            data = await store.get(ob.object_key(plan.prefix, object_id), size)
        except MemoriesError as exc:
            if exc.code != "sync_invalid":
                raise
            data = b""  # larger than its descriptor says: not the object
    if data is not None and hashlib.sha256(data).digest() != object_id:
        out.corrupt += 1
        return None  # not the object: whatever is there is ignored, the real one may come
    return data


def _refused(slot: Slot, stage: str, error: MemoriesError) -> None:
    slot.state, slot.stage, slot.error = "refused", stage, error
    slot.chunks = []


async def _take(
    store: ObjectStore, plan: Plan, slot: Slot, now: int, later: bool, out: Transferred, limit: asyncio.Semaphore
) -> None:
    record = slot.record
    kept = bytes(record.get("descriptor") or b"") if record is not None else b""
    fetched: dict[bytes, bytes] = {}  # objects already read this sync, by ID
    if kept:
        # Its sender signed it (checked when it was kept): only the objects, or the merge, failed.
        slot.descriptor, slot.digest = kept, hashlib.sha256(kept).digest()
        if record is not None and int(record["next_ms"]) > now:
            # Not due yet: still look for the objects that were missing, by content address (a
            # not-found is one cheap request); when all are there, take the bundle now.
            missing = [bytes(i) for i in record.get("missing_ids") or []]
            try:
                sizes = dict(_listed(ob.parse_descriptor(kept, sender=slot.sender, to=plan.me, seq=slot.seq)))
            except MemoriesError:
                sizes = {}
            if not missing or record.get("why") != "missing" or not set(missing) <= set(sizes):
                slot.state = "waiting"
                return
            found = await asyncio.gather(*(_object(store, plan, i, sizes[i], out, limit) for i in missing))
            if any(data is None for data in found):
                slot.state = "waiting"
                return
            fetched.update((i, data) for i, data in zip(missing, found, strict=True) if data is not None)
    else:
        try:
            data = await store.get(ob.descriptor_key(plan.prefix, plan.me, slot.sender, slot.seq), ob.MAX_DESCRIPTOR_BYTES)
        except MemoriesError as exc:
            if exc.code != "sync_invalid":
                raise
            _refused(slot, "descriptor", MemoriesError("sync_rejected", "A cloud descriptor is over the size bound."))
            return
        if data is None:
            # Nothing at the slot: a gap when something later is there or its sender says it
            # sent it; otherwise there is simply nothing new (and a gap seen before is over).
            slot.state = "absent" if later else "clear"
            return
        slot.digest = hashlib.sha256(data).digest()
        if record is not None and record.get("stage") == "descriptor" and bytes(record.get("hash") or b"") == slot.digest:
            # The same bytes that were refused before: still refused, nothing new to record.
            _refused(slot, "descriptor", MemoriesError(str(record["code"]), str(record.get("message") or "")))
            slot.unchanged = True
            return
        slot.descriptor = data
    try:
        descriptor = ob.parse_descriptor(slot.descriptor, sender=slot.sender, to=plan.me, seq=slot.seq)
    except MemoriesError as exc:
        slot.descriptor = b""
        _refused(slot, "descriptor", exc)
        return
    slot.tried = True
    slot.attempts += 1

    ids = _listed(descriptor)
    got = await asyncio.gather(
        *(_known(fetched[oid]) if oid in fetched else _object(store, plan, oid, size, out, limit) for oid, size in ids)
    )
    if any(data is None for data in got):
        slot.state = "missing"
        slot.missing_ids = [oid for (oid, _), data in zip(ids, got, strict=True) if data is None]
        slot.error = MemoriesError("cloud_object_missing")
        return
    try:
        for index, data in enumerate(got):
            assert data is not None
            vault, chunk, covers = ob.open_object(plan.exchange_key, data, descriptor=descriptor, index=index)
            if index == 0:
                slot.vault, slot.covers = vault, covers
            elif vault != slot.vault:
                raise MemoriesError(
                    "sync_rejected", "The objects of one cloud descriptor name different vaults; nothing was merged."
                )
            slot.chunks.append(chunk)
    except MemoriesError as exc:
        _refused(slot, "object", exc)
    else:
        slot.state = "ready"


# -- 3. acknowledge (under the lock, generation re-checked by the caller) -----------------------------


@dataclass
class Gap:
    """The first bundle of ``sender`` this device has not taken, and why (CL-5)."""

    sender: bytes
    seq: int
    why: str  # missing | refused | absent
    code: str
    message: str
    digest: bytes
    since_ms: int
    attempts: int
    next_ms: int

    def stuck(self) -> ob.Stuck:
        return ob.Stuck(self.seq, self.why, self.code, self.digest, self.since_ms)


def _gap_record(plan: Plan, slot: Slot, now: int) -> dict[str, Any] | None:
    """The ``cloud_in`` record for a slot that is not taken, or None when nothing changed."""
    previous = slot.record
    if slot.state == "waiting" or slot.unchanged:
        return None
    if slot.state == "clear":
        if previous is None:
            return None
        return {"t": cs.SEEN, "account": plan.account, "from": slot.sender, "seq": slot.seq, "why": "clear", "ts_ms": now}
    if slot.state == "absent" and previous is not None and previous.get("why") == "absent":
        return None
    since = int(previous.get("since_ms") or now) if previous is not None else now
    error = slot.error or MemoriesError(_MISSING.get(slot.state, "sync_rejected"))
    return {
        "t": cs.SEEN,
        "account": plan.account,
        "from": slot.sender,
        "seq": slot.seq,
        "why": slot.state,
        "stage": slot.stage,
        "descriptor": slot.descriptor if slot.state != "absent" else b"",
        "hash": slot.digest,
        "code": error.code,
        "message": error.message,
        "attempts": slot.attempts,
        "missing_ids": slot.missing_ids,
        # A signed descriptor whose objects or merge failed is retried with back-off (CL-3);
        # what is at a slot (or nothing) is looked at again on every sync.
        "next_ms": now + cs.backoff_ms(slot.attempts) if slot.tried else now,
        "since_ms": since,
        "ts_ms": now,
    }


def gaps_of(records: cs.Records, account: bytes, peers: list[bytes] | None = None) -> list[Gap]:
    """Per sender, its first open slot (CL-5): what ``cloud sync`` and ``status`` report."""
    first: dict[bytes, dict[str, Any]] = {}
    for (sender, _seq), r in sorted(cs.inbox(records, account).items()):
        if sender not in first and (peers is None or sender in peers):
            first[sender] = r
    out = []
    for sender, r in first.items():
        why = str(r.get("why", "missing"))
        out.append(
            Gap(
                sender,
                int(r["seq"]),
                why,
                str(r.get("code") or _MISSING.get(why, "sync_rejected")),
                str(r.get("message") or ""),
                bytes(r.get("hash") or b""),
                int(r.get("since_ms") or r.get("ts_ms") or r.get("next_ms") or 0),
                int(r.get("attempts") or 0),
                int(r.get("next_ms") or 0),
            )
        )
    return out


def acknowledge(
    core: VaultCore,
    state: Unlocked,
    plan: Plan,
    moved: Transferred,
    actor: Actor,
    now: int,
) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """Commit what the transfer found; the answer, and the signed marks to publish."""
    from engine.sync.merge import merge

    rows: list[dict[str, Any]] = [{"t": cs.SENT, "account": plan.account, "out": out_id} for out_id in moved.uploaded]
    reports: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    blocked: set[bytes] = set()
    for slot in moved.slots:
        if slot.sender in blocked:
            continue  # after a slot not taken: fetched again next time, in order
        if slot.state == "ready":
            try:
                if rows:
                    core.commit(state, [], [], rows)
                    rows = []
                report = merge(core, state, slot.chunks, peer_device=slot.sender, actor=actor)
            except MemoriesError as exc:
                if exc.code in ("locked", "io_error", "disk_full"):
                    raise
                _refused(slot, "merge", exc)
            else:
                reports.append(report.to_wire())
                done: dict[str, Any] = {
                    "t": cs.DONE,
                    "account": plan.account,
                    "from": slot.sender,
                    "seq": slot.seq,
                    "ts_ms": now,
                    "outcome": "merged",
                    "vault": slot.vault,
                }
                if slot.covers is not None:
                    done["covers"] = slot.covers.to_wire()
                rows.append(done)
                continue
        blocked.add(slot.sender)
        record = _gap_record(plan, slot, now)
        if record is not None:
            rows.append(record)
        if slot.state == "refused" and slot.error is not None:
            rejected.append(
                {"from": slot.sender.hex()[:16], "seq": slot.seq, "code": slot.error.code, "message": slot.error.message}
            )
        if slot.state in ("missing", "waiting") or (slot.state == "refused" and slot.descriptor):
            next_ms = int(record["next_ms"]) if record is not None else int((slot.record or {}).get("next_ms", now))
            pending.append(
                {"from": slot.sender.hex()[:16], "seq": slot.seq, "attempts": slot.attempts, "retry_in_ms": max(0, next_ms - now)}
            )
    if rows:
        core.commit(state, [], [], rows)
    records = state.extra_records
    gaps = gaps_of(records, plan.account, plan.peers)
    result = {
        "uploaded": len(moved.uploaded),
        "uploaded_again": len(moved.uploaded_again),
        "merged": reports,
        "pending": pending,
        "rejected": rejected,
        "ignored": moved.ignored,
        "corrupt": moved.corrupt,
        "gaps": gaps,
        "not_taken": moved.not_taken,
        "marks_refused": moved.marks_refused,
        "introduced": len(moved.introduced),
        "introductions": moved.introductions,
    }
    floors = cs.floors(records, plan.account)
    sent = cs.sent_seqs(records, plan.account)
    stuck = {g.sender: g.stuck() for g in gaps}
    marks: list[tuple[str, bytes]] = []
    for peer in plan.peers:
        taken, ours = floors.get(peer, 0), sent.get(peer, 0)
        if not taken and not ours and peer not in stuck:
            continue  # nothing exchanged with that device yet: nothing to say
        body = ob.Marks(plan.me, peer, now, taken, ours, stuck.get(peer))
        marks.append((ob.marks_key(plan.prefix, peer, plan.me), ob.make_marks(plan.device_key, body)))
    return result, marks


# -- 4. publish the marks (no lock) ---------------------------------------------------------------


async def publish(store: ObjectStore, marks: list[tuple[str, bytes]]) -> None:
    """Put this device's marks; the one key per peer is rewritten on every sync."""
    await asyncio.gather(*(store.put(key, data, replace=True) for key, data in marks))
