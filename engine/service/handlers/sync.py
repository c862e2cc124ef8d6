"""Sync ops (SY-4, API-4, API-5; issue 14): the listener, device-bound tokens, a sync run, status.

* ``sync_serve`` starts the `/v1/channel` listener (engine/sync/transport.py) on a private
  event loop in this daemon: loopback by default; another address only with
  ``allow_non_loopback`` and then only with TLS. Locking the vault stops it (ST-10).
* ``sync_token_new`` (elevated) binds a fresh token to one device of the policy and stores only
  its digest in a sealed record; the token is shown once. A token stops working when revoked
  or when its device is no longer authorized (checked at every connection).
* ``sync_run`` connects to a peer (or a relay room) as the initiator. Network I/O runs
  outside the service lock; each step that touches the vault (inventories, bundles, merge)
  takes the lock and re-checks the lock generation, and the merge of each vault is one
  ``engine.sync.merge.merge`` call with everything the peer sent (SY-1).
* ``sync_status`` and DesktopStatus's ``sync_queue``: the outbox is what changed here since
  the last completed sync with any peer (revisions and policies, from a sealed watermark
  record per peer); the inbox is received chunks not merged yet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.cards.device_vaults import is_device_only
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.jobs.background import JobContext
from engine.remote.runtime import Runtime
from engine.service import requests_sync as rq
from engine.service.caller import Caller
from engine.service.handlers.devices import device_names, own_devices
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.sync import tokens as tk
from engine.sync.transport import (
    CHUNK_BYTES,
    Limits,
    LocalSide,
    SessionResult,
    SyncServer,
    deadline_call,
    is_loopback,
    server_ssl,
    sync_via_relay,
    sync_with,
)
from engine.vault.invite import pinned_user
from engine.vault.policy import AddDevice, Change

__all__ = ["SyncManager", "manager_of", "outbox_count", "WATERMARK_RECORD"]

log = logging.getLogger("memories.sync")

WATERMARK_RECORD = "sync_peer"
_ATTR = "sync_manager"
_HISTORY = 20
_HEX = frozenset("0123456789abcdef")
T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _plain(value: Any) -> Any:
    """A wire value made JSON-safe for IPC (bytes as hex)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class SyncManager:
    runtime: Runtime = field(default_factory=Runtime)
    server: SyncServer | None = None
    listen: str = ""
    inbox: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, entry: dict[str, Any]) -> None:
        with self.guard:
            self.history = [*self.history[-(_HISTORY - 1) :], entry]

    def stop_server(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            try:
                deadline_call(self.runtime.loop, server.stop(), 20)
            except MemoriesError:
                log.error("sync listener did not stop in time")
        self.inbox = 0


def manager_of(service: Service) -> SyncManager:
    manager = getattr(service, _ATTR, None)
    if not isinstance(manager, SyncManager):
        raise RuntimeError("sync extension not installed")
    return manager


# -- counting the queue ---------------------------------------------------------------------------


def _totals(state: Unlocked) -> int:
    """Revisions plus policies of every shared vault held here."""
    shared = {v for v in state.vaults if not is_device_only(state, v)}
    revisions = sum(n for (vault_id, _), n in state.index.revision_tally().items() if vault_id in shared)
    policies = sum(len(state.vaults[v].history) for v in shared)
    return revisions + policies


def outbox_count(state: Unlocked) -> int:
    """What a peer does not have yet: changes since the last completed sync (or, before any
    sync, every revision this device wrote)."""
    marks = state.extra_records.get(WATERMARK_RECORD, [])
    own = state.identity.device_pub
    held = [v for v in state.vaults.values() if not is_device_only(state, v.vault_id)]
    if not any(device != own and v.policy.authorizes_device(device) for v in held for device in v.policy.devices()):
        return 0  # nobody to sync with: a single device has no queue
    if not marks:
        shared = {v for v in state.vaults if not is_device_only(state, v)}
        tally = state.index.revision_tally()
        return sum(n for (vault_id, author), n in tally.items() if author == own and vault_id in shared)
    return max(0, _totals(state) - int(marks[-1][1]["totals"]))


def install(service: Service) -> None:
    manager = SyncManager()
    setattr(service, _ATTR, manager)
    service.on_lock.append(manager.stop_server)  # ST-10: locking stops serving

    def contribute() -> dict[str, int | bool]:
        state = service.state
        server = manager.server
        outbox = 0
        if state is not None:
            try:
                outbox = outbox_count(state)
            except (RuntimeError, KeyError):  # the state changed under us: next poll
                outbox = 0
        return {
            "connections": server.sessions if server is not None else 0,
            "sync_outbox": outbox,
            "sync_inbox": manager.inbox,
        }

    service.status_contributors.append(contribute)


EXTENSIONS.append(install)


# -- this device, lent to one session --------------------------------------------------------------


def _authorized_peer(state: Unlocked, device: bytes, user: bytes | None = None) -> bool:
    for vault_id, vault in state.vaults.items():
        if is_device_only(state, vault_id):
            continue
        policy = vault.policy
        if policy.authorizes_device(device) and (user is None or policy.device_user(device) == user):
            return True
    return False


def _local_side(service: Service, actor: Caller) -> LocalSide:
    """Keys and the domain steps for one session; every step re-checks the lock generation."""
    from engine.sync.bundle import Inventory, make_bundle, shared_vault_ids
    from engine.sync.marks import Lists, delta_inventory, expand, full_inventory, lists, mark_record

    manager = manager_of(service)
    with service.lock:
        state = service.require_unlocked()
        generation = service.session.generation
        identity = state.identity

    def locked(fn: Callable[[Unlocked], T]) -> T:
        with service.lock:
            current = service.state
            if current is None or service.session.generation != generation:
                raise MemoriesError("locked", "The vault was locked during the sync; nothing more was merged.")
            return fn(current)

    def peer_vaults(current: Unlocked, peer: bytes) -> list[bytes]:
        return [v for v in shared_vault_ids(current) if current.vaults[v].policy.authorizes_device(peer)]

    def check_peer(peer: bytes, user: bytes) -> None:
        def allowed(current: Unlocked) -> bool:
            # A device of the user an invitation made here pins may bring the vault (PO-3).
            return _authorized_peer(current, peer, user) or pinned_user(current.extra_records, user, _now_ms())

        if not locked(allowed):
            raise MemoriesError(
                "sync_unauthorized", "The peer device is not authorized by this vault's current policy (revoked or unknown)."
            )

    # What each vault's inventory was made from: the marks recorded after the merge use it.
    at_inventory: dict[bytes, Lists] = {}
    # What the peer holds of each vault (its expanded inventory): which own writes were offline (SY-2).
    peer_holds: dict[bytes, set[bytes]] = {}

    def inventories(peer: bytes) -> list[dict[str, Any]]:
        def build(current: Unlocked) -> list[dict[str, Any]]:
            follow_devices(service, current, peer, actor)
            out = []
            for vault_id in peer_vaults(current, peer):
                inv, lists_now = delta_inventory(current, vault_id, peer)
                at_inventory[vault_id] = lists_now
                out.append(inv.to_wire())
            return out

        return locked(build)

    def full_inventories(peer: bytes, vault_ids: list[bytes]) -> list[dict[str, Any]]:
        def build(current: Unlocked) -> list[dict[str, Any]]:
            wanted = set(vault_ids)
            out = []
            for vault_id in peer_vaults(current, peer):
                if vault_id in wanted and vault_id in at_inventory:
                    out.append(full_inventory(current, vault_id, peer, at_inventory[vault_id]).to_wire())
            return out

        return locked(build)

    def bundles(peer: bytes, wires: list[dict[str, Any]]) -> list[tuple[bytes, list[bytes]]]:
        theirs: dict[bytes, Inventory] = {}
        for wire in wires:
            inv = Inventory.from_wire(wire)
            if inv.device is not None and inv.device != peer:
                raise MemoriesError("sync_invalid", "The peer sent an inventory made by another device.")
            theirs[inv.vault_id] = Inventory(inv.vault_id, inv.policy_heads, inv.revision_ids, inv.audit_ids, peer, inv.base)

        def build(current: Unlocked) -> list[tuple[bytes, list[bytes]]]:
            out = []
            for vault_id in peer_vaults(current, peer):
                inv = expand(current, theirs.get(vault_id) or Inventory(vault_id, [], [], [], peer), peer)
                peer_holds[vault_id] = set(inv.revision_ids)
                chunks = make_bundle(service.vault, current, vault_id, inv, max_bytes=CHUNK_BYTES)
                if chunks:
                    out.append((vault_id, chunks))
            return out

        return locked(build)

    def merge_all(peer: bytes, received: dict[bytes, list[bytes]]) -> list[dict[str, Any]]:
        from engine.sync.merge import merge

        def run(current: Unlocked) -> list[dict[str, Any]]:
            reports = []
            refused: set[bytes] = set()
            before = {v: lists(current, v, peer).position() for v in at_inventory if v in current.vaults}
            arriving = [v for v in received if v not in current.vaults]
            for vault_id, chunks in received.items():
                try:
                    report = merge(
                        service.vault, current, chunks, peer_device=peer, actor=actor, peer_holds=peer_holds.get(vault_id)
                    )
                except MemoriesError as exc:
                    # Each vault's merge is all or nothing on its own (SY-1): one vault that fails
                    # verification changes nothing of itself and does not hold the others back, in
                    # whatever order they came. Anything else (a full disk, a lock) ends the sync.
                    if exc.code not in _VAULT_REFUSALS:
                        raise
                    refused.add(vault_id)
                    reports.append({"vault": vault_id.hex(), "error": {"code": exc.code, "message": exc.message}})
                    continue
                reports.append(report.to_wire())
            for vault_id in arriving:
                # A vault that arrived whole (PO-3, SY-5): this side's inventory of it was empty, so
                # the mark is the peer's set; without one the next sync would list every ID again.
                if vault_id in current.vaults and vault_id not in refused:
                    at_inventory[vault_id] = Lists([], [], [], lists(current, vault_id, peer).audits)
                    before[vault_id] = (0, 0, 0)
            marks = [
                mark_record(current, v, peer, at_inventory[v], position)
                for v, position in before.items()
                if v not in refused and current.vaults[v].policy.authorizes_device(peer)
            ]
            # The watermark says the peer holds what we hold: only true when every vault merged.
            records = marks if refused else [_watermark(current, peer), *marks]
            if records:
                service.vault.commit(current, [], [], records)
            return reports

        return locked(run)

    def inbox(count: int) -> None:
        manager.inbox = count

    return LocalSide(
        device_key=identity.device_key,
        exchange_key=identity.exchange_key,
        certificate=identity.certificate,
        certificate_sig=identity.certificate_sig,
        check_peer=check_peer,
        inventories=inventories,
        bundles=bundles,
        merge=merge_all,
        inbox=inbox,
        full_inventories=full_inventories,
    )


def follow_devices(service: Service, state: Unlocked, peer: bytes, actor: Caller) -> None:
    """SY-5: a vault this user is a member of follows the user's devices. When ``peer`` is an
    authorized device of this user that a shared vault held here does not list yet (a vault
    made before this fix, or one that arrived from another member), this device adds it with
    the user's signature (PO-2 lets any member authorize a device of their own); the session
    then sends that vault. A device any vault here revokes is never added."""
    own = state.identity.user_pub
    if not _authorized_peer(state, peer, own):
        return
    cert = next((pair for pair in own_devices(state) if bytes(pair[0]["device"]) == peer), None)
    if cert is None:
        return
    changes: list[tuple[bytes, Change]] = [
        (vault_id, AddDevice(cert[0], cert[1]))
        for vault_id, vault in state.vaults.items()
        if not is_device_only(state, vault_id)
        and vault.policy.role_of(own) is not None
        and vault.policy.authorizes_device(state.identity.device_pub)
        and peer not in vault.policy.devices()
    ]
    if changes:
        service.vault.change_policies(state, changes, actor)


def _watermark(state: Unlocked, peer: bytes) -> dict[str, Any]:
    """After a completed sync the peer holds what we hold: remember how much that was."""
    return {"t": WATERMARK_RECORD, "device": peer, "totals": _totals(state), "ts_ms": _now_ms()}


def _finish(
    service: Service, peer: bytes | None, result: SessionResult | None, error: MemoriesError | None, how: str
) -> dict[str, Any]:
    """Remember the outcome; a session with nothing to merge still moves the watermark."""
    entry: dict[str, Any] = {"ts_ms": _now_ms(), "via": how, "peer": peer.hex() if peer else None}
    if error is not None:
        entry["error"] = {"code": error.code, "message": error.message}
    if result is not None:
        entry.update(_plain(result.to_wire()))
        if not result.merged:
            with service.lock:
                state = service.state
                if state is not None:
                    marks = state.extra_records.get(WATERMARK_RECORD, [])
                    if not marks or int(marks[-1][1]["totals"]) != _totals(state):
                        service.vault.commit(state, [], [], [_watermark(state, result.peer_device)])
    manager_of(service).remember(entry)
    return entry


# What one vault's merge refuses without ending the session for the other vaults.
_VAULT_REFUSALS = frozenset({"sync_rejected", "sync_invalid"})

REMOTE = Caller(namespace="ws:remote", surface="sync")
RELAY = Caller(namespace="relay:remote", surface="sync")


# -- the listener -----------------------------------------------------------------------------------


def _parse_listen(text: str) -> tuple[str, int]:
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise MemoriesError("invalid_input", "--listen takes HOST:PORT, e.g. 127.0.0.1:7700 or [::1]:7700.")
    return host.strip("[]"), int(port_text)


@op(rq.SyncServe)
def sync_serve(service: Service, request: rq.SyncServe, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    service.require_unlocked()
    if manager.server is not None:
        return {"serving": True, "already": True, "url": manager.server.url}
    host, port = _parse_listen(request.listen)
    if not is_loopback(host):
        if not request.allow_non_loopback:
            raise MemoriesError(
                "invalid_input",
                "Listening on a non-loopback address was refused; pass --allow-non-loopback with --tls-cert and --tls-key.",
            )
        if not (request.tls_cert and request.tls_key):
            raise MemoriesError("invalid_input", "A non-loopback listener needs TLS: pass --tls-cert and --tls-key.")
    tls = server_ssl(request.tls_cert, request.tls_key)

    def authorize(token: str | None) -> bytes:
        with service.lock:
            state = service.state
            if state is None:
                raise MemoriesError("locked")
            info = tk.find_token(state.extra_records, token)
            if not _authorized_peer(state, info.device):
                raise MemoriesError("sync_unauthorized")
            return info.device

    def on_result(peer: bytes | None, result: SessionResult | None, error: MemoriesError | None) -> None:
        _finish(service, peer, result, error, "listener")

    server = SyncServer(authorize, lambda: _local_side(service, REMOTE), Limits.from_env(), on_result)
    url = deadline_call(manager.runtime.loop, server.start(host, port, tls), 20)
    manager.server = server
    manager.listen = request.listen
    state = service.require_unlocked()
    service.vault.commit(state, [], [], [service.vault.audit_record(state, "sync_serve", caller, outcome="ok")])
    warning = None if is_loopback(host) else "The sync listener accepts connections from other machines (TLS on)."
    return {"serving": True, "already": False, "url": url, "tls": tls is not None, "warning": warning}


@op(rq.SyncServeStop, touches_idle=False)
def sync_serve_stop(service: Service, request: rq.SyncServeStop, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    was = manager.server is not None
    manager.stop_server()
    return {"stopped": was}


@op(rq.SyncStatus, needs_unlock=False, lock_free=True, touches_idle=False)
def sync_status(service: Service, request: rq.SyncStatus, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    state = service.state
    server = manager.server
    with manager.guard:
        history = list(manager.history)
    return {
        "locked": state is None,
        "serving": server is not None,
        "url": server.url if server is not None else None,
        "sessions": server.sessions if server is not None else 0,
        "outbox": outbox_count(state) if state is not None else 0,
        "inbox": manager.inbox,
        "recent": history[-5:],
    }


# -- tokens ----------------------------------------------------------------------------------------------


def _resolve_peer(state: Unlocked, ref: str) -> bytes:
    devices = {d for v, vault in state.vaults.items() if not is_device_only(state, v) for d in vault.policy.devices()}
    names = device_names(state)
    matches = {d for d in devices if names.get(d) == ref}
    key = ref.strip().lower()
    if not matches and len(key) >= 8 and set(key) <= _HEX:
        matches = {d for d in devices if d.hex().startswith(key) or fingerprint(d).startswith(key)}
    if not matches:
        raise MemoriesError("device_not_found")
    if len(matches) > 1:
        raise MemoriesError("device_ambiguous")
    return matches.pop()


@op(rq.SyncTokenNew, needs_elevation=True)
def sync_token_new(service: Service, request: rq.SyncTokenNew, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    device = _resolve_peer(state, request.device)
    if device == state.identity.device_pub:
        raise MemoriesError("invalid_input", "A sync token is for another device; this one does not sync with itself.")
    if not _authorized_peer(state, device):
        raise MemoriesError("invalid_input", "That device is revoked; it gets no sync token. Nothing was changed.")
    name = request.name or device_names(state).get(device) or device.hex()[:12]
    text, record = tk.new_token(device, name, _now_ms())
    audit = service.vault.audit_record(state, "sync_token_new", caller, outcome="ok", token_id=record["token_id"])
    service.vault.commit(state, [], [], [record, audit])
    return {
        "token": text,
        "token_id": bytes(record["token_id"]).hex(),
        "device_id": device.hex(),
        "fingerprint": fingerprint(device),  # what `memories devices` shows for that device
        "name": name,
        "shown_once": True,
    }


@op(rq.SyncTokenList)
def sync_token_list(service: Service, request: rq.SyncTokenList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    rows = []
    for info in tk.tokens(state.extra_records):
        row = info.view()
        row["device_authorized"] = _authorized_peer(state, info.device)
        row["fingerprint"] = fingerprint(info.device)
        rows.append(row)
    return {"tokens": rows}


@op(rq.SyncTokenRevoke, needs_elevation=True)
def sync_token_revoke(service: Service, request: rq.SyncTokenRevoke, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    found = [t for t in tk.tokens(state.extra_records) if t.token_id.hex().startswith(request.token_id)]
    if not found:
        raise MemoriesError("not_found", "No sync token has that ID (see `memories sync token list`).")
    if len(found) > 1:
        raise MemoriesError("ambiguous_id", "That token ID prefix matches more than one token; type more.")
    info = found[0]
    if info.revoked:
        return {"revoked": info.token_id.hex(), "already": True}
    audit = service.vault.audit_record(state, "sync_token_revoke", caller, outcome="ok", token_id=info.token_id)
    service.vault.commit(state, [], [], [tk.revoke_record(info.token_id, _now_ms()), audit])
    return {"revoked": info.token_id.hex(), "already": False}


# -- one sync as the initiator ------------------------------------------------------------------------


def _lost_fork(result: SessionResult) -> bool:
    """Whether this side took a fork resolution that discarded its branch while the peer refused
    the bundle this side had made from that branch."""
    lost = {str(r.get("vault")) for r in result.merged if r.get("discarded_policies")}
    return any(
        isinstance(r, dict) and str(r.get("vault")) in lost and isinstance(r.get("error"), dict) for r in result.peer_merged
    )


def _joined(first: SessionResult, second: SessionResult) -> SessionResult:
    """The second session's answer, keeping what the first merged here (the adopted resolution)."""
    counts = ("revisions_added", "policies_added", "audits_added", "quarantined", "discarded_policies")
    later = {str(r.get("vault")): r for r in second.merged}
    merged = list(second.merged)
    for report in first.merged:
        if "error" in report:
            continue
        same = later.get(str(report.get("vault")))
        if same is None or "error" in same:
            merged.append(report)
            continue
        for key in counts:
            same[key] = int(same.get(key) or 0) + int(report.get(key) or 0)
    second.merged = merged
    second.sent_bytes += first.sent_bytes
    second.received_bytes += first.received_bytes
    second.chunks_sent += first.chunks_sent
    second.chunks_received += first.chunks_received
    return second


@op(rq.SyncRun, lock_free=True)
def sync_run(service: Service, request: rq.SyncRun, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    if (request.url is None) == (request.relay is None):
        raise MemoriesError("invalid_input", "Give a peer URL, or --relay URL with --room ID.")
    if request.relay is not None and request.room is None:
        raise MemoriesError("invalid_input", "--relay needs --room ID (the same on both devices).")
    if request.url is not None and not request.token:
        raise MemoriesError(
            "sync_unauthorized", "No sync token: set MEMORIES_SYNC_TOKEN (made by `memories sync token new` on the peer)."
        )
    service.session.touch()
    local = _local_side(service, caller if request.relay is None else RELAY)
    limits = Limits.from_env()
    if request.url is not None:
        coro = sync_with(request.url, request.token or "", local, limits, ca_file=request.ca_file)
        how, budget = "direct", limits.session_seconds + limits.message_seconds + 10
    else:
        assert request.relay is not None and request.room is not None
        coro = sync_via_relay(
            request.relay,
            request.room,
            local,
            limits,
            relay_token=request.relay_token,
            ca_file=request.ca_file,
            wait_seconds=request.wait_seconds,
        )
        how, budget = "relay", request.wait_seconds + limits.session_seconds + limits.message_seconds + 10

    def session(context: JobContext) -> SessionResult:
        context.progress(0, 1)
        done: SessionResult = deadline_call(manager.runtime.loop, coro, budget)
        if request.url is not None and _lost_fork(done):
            # This device was on a policy branch an Owner's fork resolution discarded: it took the
            # kept branch in this session, but its bundle (made before) carried the discarded one
            # and the peer refused it. One more session sends its writes on the kept branch, so
            # the sync after a resolution does not fail once (issue 29). A relay room is used up
            # by one session: there the words say to sync once more.
            again = sync_with(request.url, request.token or "", local, limits, ca_file=request.ca_file)
            done = _joined(done, deadline_call(manager.runtime.loop, again, budget))
        context.progress(1, 1)
        return done

    try:
        # Listed in `status` as `sync` while it runs (issue 16), on this request's thread as before.
        result = service.background.run_inline("sync", session)
    except MemoriesError as exc:
        _finish(service, None, None, exc, how)
        raise
    entry = _finish(service, result.peer_device, result, None, how)
    service.session.touch()
    return {"synced": result.peer_error is None, **{k: v for k, v in entry.items() if k != "ts_ms"}}
