"""Cloud object sync ops (issue 21; CL-2, CL-3; design in docs/cloud.md).

* ``cloud_add`` (sudo) checks the bucket with the given keys, then stores the account with its
  keys in a sealed device-local record. ``cloud_remove`` (sudo) ends it.
* ``cloud_accounts`` shows account metadata and queue counts, never a key (CL-2).
* ``cloud_sync`` runs one account's worker (one at a time per account): enqueue under the
  service lock, transfer without it, acknowledge under it after re-checking the session
  generation. A lock during the transfer voids the acknowledgement: the same objects are
  sent again next time (CL-3).
* DesktopStatus: ``providers`` lists the provider kinds with an account; the sync queue
  counts unacknowledged uploads (outbox) and pending descriptors (inbox); ``cloud_delivery``
  counts the devices whose writes are not arriving here and those that have not taken ours
  (CL-5), and either makes the status ask for attention.
* CL-5: ``cloud sync`` answers, besides what it exchanged, ``gaps`` (per sender whose bundles
  stopped arriving: device name and ID, the first number not taken, why, since when, what to
  do), ``not_taken`` (per peer whose published marks say it has not taken a bundle of ours,
  and whether it was uploaded again) and ``marks_refused``; the CLI exits non-zero on any.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.cloud import oauth
from engine.cloud import state as cs
from engine.cloud.gdrive import DriveTransport
from engine.cloud.onedrive import OneDriveTransport
from engine.cloud.s3 import S3Transport, check_endpoint
from engine.cloud.transport import ObjectStore
from engine.cloud.worker import Gap, NotTaken, acknowledge, enqueue, gaps_of, now_ms, publish, transfer
from engine.errors import MemoriesError
from engine.jobs.background import JobContext
from engine.service import requests_cloud as rq
from engine.service.caller import Caller
from engine.service.handlers.devices import device_names
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service, Unlocked

__all__ = ["CloudManager", "transport_for"]

_ATTR = "cloud_manager"
T = TypeVar("T")
LOCKED_DURING_SYNC = "The vault was locked during the cloud sync; nothing was acknowledged, and the next sync resends it."


@dataclass(frozen=True)
class Ticket:
    """A pending browser sign-in (CL-1): bound to the caller, provider, client and the
    session generation; the PKCE verifier and the state never leave the engine."""

    kind: str
    name: str
    client_id: str
    client_secret: str
    redirect_uri: str
    state: str
    verifier: str
    namespace: str
    generation: int
    expires_ms: int


class CloudManager:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._workers: dict[bytes, threading.Lock] = {}
        self.last: dict[bytes, dict[str, Any]] = {}
        self.tickets: dict[str, Ticket] = {}

    def worker_lock(self, account: bytes) -> threading.Lock:
        with self._guard:
            return self._workers.setdefault(account, threading.Lock())


def _manager(service: Service) -> CloudManager:
    manager = getattr(service, _ATTR, None)
    if not isinstance(manager, CloudManager):
        raise RuntimeError("cloud extension not installed")
    return manager


def _queue(state: Unlocked) -> tuple[int, int, list[str]]:
    outbox = inbox = 0
    kinds: set[str] = set()
    for account in cs.accounts(state.extra_records):
        kinds.add(account.kind)
        outbox += len(cs.outbox(state.extra_records, account.account_id))
        inbox += len(cs.inbox(state.extra_records, account.account_id))
    return outbox, inbox, sorted(kinds)


def _delivery(state: Unlocked, manager: CloudManager) -> tuple[int, int]:
    """(devices whose writes are not arriving here, devices that have not taken ours) over every
    account (CL-5). The first comes from this device's records, so it holds across restarts;
    the second from the last sync's reading of the peers' marks."""
    not_arriving: set[bytes] = set()
    not_taken: set[bytes] = set()
    for account in cs.accounts(state.extra_records):
        not_arriving.update(g.sender for g in gaps_of(state.extra_records, account.account_id, _authorized(state)))
        last = manager.last.get(account.account_id) or {}
        not_taken.update(bytes.fromhex(d) for d in last.get("not_taken_devices", []))
    return len(not_arriving), len(not_taken)


def _authorized(state: Unlocked) -> list[bytes]:
    from engine.sync.bundle import shared_vault_ids

    me = state.identity.device_pub
    out: set[bytes] = set()
    for vault_id in shared_vault_ids(state):
        policy = state.vaults[vault_id].policy
        out.update(d for d in policy.devices() if d != me and policy.authorizes_device(d))
    return sorted(out)


def install(service: Service) -> None:
    manager = CloudManager()
    setattr(service, _ATTR, manager)

    def contribute() -> dict[str, int | bool]:
        state = service.state
        if state is None:
            return {}
        try:
            outbox, inbox, kinds = _queue(state)
            not_arriving, not_taken = _delivery(state, manager)
        except (RuntimeError, KeyError):  # the state changed under us: next poll
            return {}
        # DesktopStatus lists each provider kind with an account (``provider_s3`` -> "s3").
        return {
            "sync_outbox": outbox,
            "sync_inbox": inbox,
            "cloud_not_arriving": not_arriving,
            "cloud_not_taken": not_taken,
            "attention": bool(not_arriving or not_taken),
            **{f"provider_{kind}": True for kind in kinds},
        }

    service.status_contributors.append(contribute)


EXTENSIONS.append(install)


def transport_for(account: cs.Account) -> ObjectStore:
    if account.kind == "s3":
        return S3Transport(
            account.endpoint,
            account.bucket,
            account.region,
            account.secret["access_key_id"],
            account.secret["secret_access_key"],
        )
    if account.kind == "onedrive":
        return OneDriveTransport(oauth.provider("onedrive"), oauth.Tokens.from_secret(account.secret))
    if account.kind == "gdrive":
        return DriveTransport(oauth.provider("gdrive"), oauth.Tokens.from_secret(account.secret))
    raise MemoriesError("invalid_input", "This engine has no transport for that provider yet.")


async def _closing(store: ObjectStore, coro: Any) -> Any:
    try:
        return await coro
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


def _refreshed(store: ObjectStore) -> dict[str, str] | None:
    """The new tokens of an OAuth transport that refreshed them (to persist), else None."""
    client = getattr(store, "client", None)
    if isinstance(client, oauth.OAuthClient) and client.authorizer.changed:
        return client.authorizer.tokens.to_secret()
    return None


def _run(service: Service, name: str, coro: Any) -> Any:
    """One cloud call outside a sync (an account check, a sign-in's exchange), listed as a job
    and cancelled by a lock like a sync, so a hung endpoint cannot hold up the lock."""

    def work(context: JobContext) -> Any:
        io = _IoLoop(context.cancelled)
        try:
            return io.run(coro)
        finally:
            io.close(None)

    return service.background.run_inline(name, work)


def _elevated(service: Service, caller: Caller) -> Unlocked:
    with service.lock:
        state = service.require_unlocked()
        if not service.session.is_elevated(caller.namespace):
            raise MemoriesError("elevation_required")
        return state


@op(rq.CloudAdd, lock_free=True)
def cloud_add(service: Service, request: rq.CloudAdd, caller: Caller) -> dict[str, Any]:
    _elevated(service, caller)
    endpoint = check_endpoint(request.endpoint)
    prefix = request.prefix.strip("/")
    secret = {"access_key_id": request.access_key_id, "secret_access_key": request.secret_access_key}
    probe = S3Transport(endpoint, request.bucket, request.region, request.access_key_id, request.secret_access_key)
    _run(service, "cloud-check", probe.check())  # the keys and bucket work before anything is stored
    with service.lock:
        state = service.require_unlocked()
        if not service.session.is_elevated(caller.namespace):
            raise MemoriesError("elevation_required")
        if any(a.name == request.name for a in cs.accounts(state.extra_records)):
            raise MemoriesError("invalid_input", "A cloud account already has that name; remove it first or pick another.")
        record = cs.new_account_record(
            request.name, request.kind, endpoint, request.bucket, prefix, request.region, secret, now_ms()
        )
        audit = service.vault.audit_record(state, "cloud_add", caller, outcome="ok", account=request.name, kind=request.kind)
        service.vault.commit(state, [], [], [record, audit])
        account = cs.accounts(state.extra_records)[-1]
        return {"added": account.view(), "renewed": False}


@op(rq.CloudAccounts)
def cloud_accounts(service: Service, request: rq.CloudAccounts, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    manager = _manager(service)
    rows = []
    for account in cs.accounts(state.extra_records):
        pending = cs.inbox(state.extra_records, account.account_id)
        rows.append(
            {
                **account.view(),
                "outbox": len(cs.outbox(state.extra_records, account.account_id)),
                "inbox": len(pending),
                "pending": [
                    {"from": sender.hex()[:16], "seq": seq, "attempts": int(r["attempts"]), "next_ms": int(r["next_ms"])}
                    for (sender, seq), r in sorted(pending.items())
                ],
                "not_arriving": len(gaps_of(state.extra_records, account.account_id, _authorized(state))),
                "last": manager.last.get(account.account_id),
            }
        )
    return {"accounts": rows}


@op(rq.CloudRemove, needs_elevation=True)
def cloud_remove(service: Service, request: rq.CloudRemove, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    account = cs.find_account(state.extra_records, request.name)
    audit = service.vault.audit_record(state, "cloud_remove", caller, outcome="ok", account=account.name)
    service.vault.commit(state, [], [], [{"t": cs.REMOVED, "id": account.account_id, "ts_ms": now_ms()}, audit])
    return {"removed": account.name}


@op(rq.CloudSync, lock_free=True)
def cloud_sync(service: Service, request: rq.CloudSync, caller: Caller) -> dict[str, Any]:
    manager = _manager(service)
    with service.lock:
        service.require_unlocked()
        generation = service.session.generation
        service.session.touch()

    def locked(fn: Callable[[Unlocked], T]) -> T:
        with service.lock:
            current = service.state
            if current is None or service.session.generation != generation:
                raise MemoriesError("locked", LOCKED_DURING_SYNC)
            return fn(current)

    account = locked(lambda current: cs.find_account(current.extra_records, request.name))

    def work(context: JobContext) -> dict[str, Any]:
        """The worker, listed in `status` as `cloud-sync` with its phase (enqueued, transferred,
        acknowledged, marks published) and signalled by a lock (issue 16); the generation
        checks in ``locked`` decide what a lock voids, as before."""
        with manager.worker_lock(account.account_id):  # one worker per account
            plan = locked(lambda current: enqueue(service.vault, current, account, caller))
            context.progress(1, 4)
            store = transport_for(account)
            now = now_ms()
            io = _IoLoop(context.cancelled)
            try:
                moved = io.run(transfer(store, plan, now))
                context.progress(2, 4)
                # On the request's thread, under the service lock (what the service tracks per
                # request, such as commits for an honest answer, stays with this request).
                acked, marks, names = locked(
                    lambda current: (*acknowledge(service.vault, current, plan, moved, caller, now), device_names(current))
                )
                result: dict[str, Any] = _wire(acked, names)
                context.progress(3, 4)
                try:
                    io.run(publish(store, marks))
                except MemoriesError as exc:
                    if exc.code not in ("cloud_unreachable", "cloud_denied"):
                        raise
                    result["warnings"] = [
                        {
                            "code": exc.code,
                            "message": "This device's delivery marks were not published; the next sync publishes them.",
                        }
                    ]
                io.close(store)
                tokens = _refreshed(store)
                if tokens is not None:  # a rotated refresh token must outlive this sync
                    record = {"t": cs.TOKENS, "id": account.account_id, "secret": tokens, "ts_ms": now}
                    locked(lambda current: service.vault.commit(current, [], [], [record]))
                context.progress(4, 4)
            except MemoriesError as exc:
                manager.last[account.account_id] = {"ts_ms": now, "error": exc.code}
                raise
            finally:
                io.close(store)
        result.update(account=account.name, enqueued=plan.enqueued, requests=store.counters.to_wire())
        manager.last[account.account_id] = {
            "ts_ms": now,
            "uploaded": result["uploaded"],
            "merged": len(result["merged"]),
            "pending": len(result["pending"]),
            "rejected": len(result["rejected"]),
            "gaps": len(result["gaps"]),
            "not_taken": len(result["not_taken"]),
            "not_taken_devices": sorted({row["device_id"] for row in result["not_taken"]}),
        }
        return result

    # On this request's thread (its commits count for its answer), listed as background work.
    result = service.background.run_inline("cloud-sync", work)
    service.session.touch()
    return result


# How often a waiting sync looks at its cancel signal, and how long an abandoned transfer's
# clean-up may take before the request answers anyway (its loop thread ends with the process).
_CANCEL_POLL_S = 0.1
_ABANDON_S = 2.0


class _IoLoop:
    """One event loop on its own thread for one sync's transport (CL-5): the transfer and then
    the marks run on it, with the acknowledgement on the request's thread in between; the
    provider clients (aiohttp sessions) stay bound to this one loop.

    A lock cancels the sync's job (``cancelled``): the request's thread, which waits here,
    cancels the transfer's task at once, so a request stuck on a hung bucket endpoint (an
    accepted connection that never answers) ends within moments instead of holding up the
    lock's re-execution (ST-12) until its drain gives up. Nothing half-done is kept: what was
    not acknowledged stays in the outbox, and the next sync sends it again by content address.
    """

    def __init__(self, cancelled: threading.Event | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="memories-cloud-io", daemon=True)
        self.thread.start()
        self.closed = False
        self.cancelled = cancelled if cancelled is not None else threading.Event()

    def run(self, coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(_bounded(coro), self.loop)
        while True:
            try:
                return future.result(_CANCEL_POLL_S)
            except concurrent.futures.TimeoutError:
                if self.cancelled.is_set():
                    future.cancel()  # cancels the task on the loop: every await in it ends
                    raise MemoriesError("locked", LOCKED_DURING_SYNC) from None

    def close(self, store: ObjectStore | None) -> None:
        if self.closed:
            return
        self.closed = True
        # After a cancel, do not wait long for a transport that is stuck on the network.
        patience = _ABANDON_S if self.cancelled.is_set() else 30.0
        try:
            close = getattr(store, "aclose", None)
            if close is not None:
                asyncio.run_coroutine_threadsafe(close(), self.loop).result(patience)
        except concurrent.futures.TimeoutError:
            pass  # the daemon thread and its sockets go with the loop (or the process's exec)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(patience)
            if not self.thread.is_alive():
                self.loop.close()


async def _bounded(coro: Any) -> Any:
    deadline = float(os.environ.get("MEMORIES_CLOUD_DEADLINE_S", "1800"))
    try:
        return await asyncio.wait_for(coro, deadline)
    except TimeoutError:
        raise MemoriesError("cloud_unreachable", "The storage did not finish in time; what was sent stays queued.") from None


def _device(device: bytes, names: dict[bytes, str]) -> dict[str, Any]:
    return {"device_id": device.hex(), "name": names.get(device)}


def _wire(result: dict[str, Any], names: dict[bytes, str]) -> dict[str, Any]:
    """The answer of ``cloud sync`` with devices named (CL-5): what is not arriving here, what a
    peer has not taken of ours, and whose marks were refused."""
    gaps: list[Gap] = result["gaps"]
    not_taken: list[NotTaken] = result["not_taken"]
    refused: list[tuple[bytes, MemoriesError]] = result["marks_refused"]
    return {
        **result,
        "gaps": [
            {
                **_device(g.sender, names),
                "seq": g.seq,
                "taken": g.seq - 1,
                "why": g.why,
                "code": g.code,
                "message": g.message,
                "since_ms": g.since_ms,
                "attempts": g.attempts,
                "next_ms": g.next_ms,
            }
            for g in gaps
        ],
        "not_taken": [
            {
                **_device(n.peer, names),
                "seq": n.seq,
                "why": n.why,
                "code": n.code,
                "since_ms": n.since_ms,
                "found_ours": n.ours,
                "uploaded_again": n.uploaded_again,
            }
            for n in not_taken
        ],
        "marks_refused": [{**_device(peer, names), "code": exc.code, "message": exc.message} for peer, exc in refused],
    }


_TICKET_MS = 10 * 60 * 1000


@op(rq.CloudBegin, needs_elevation=True)
def cloud_login_begin(service: Service, request: rq.CloudBegin, caller: Caller) -> dict[str, Any]:
    """CL-1: a ticket for one browser sign-in, voided by a lock, a logout or a restart."""
    state = service.require_unlocked()
    if any(a.name == request.name and a.kind != request.kind for a in cs.accounts(state.extra_records)):
        raise MemoriesError("invalid_input", "A cloud account of another provider has that name; pick another.")
    redirect = oauth.check_redirect(request.redirect_uri)
    provider = oauth.provider(request.kind)
    verifier, challenge = oauth.pkce_pair()
    ticket_id, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(24)
    manager = _manager(service)
    now = now_ms()
    manager.tickets = {k: t for k, t in manager.tickets.items() if t.expires_ms > now}
    manager.tickets[ticket_id] = Ticket(
        request.kind,
        request.name,
        request.client_id,
        request.client_secret,
        redirect,
        nonce,
        verifier,
        caller.namespace,
        service.session.generation,
        now + _TICKET_MS,
    )
    url = oauth.authorize_url(provider, request.client_id, redirect, challenge, nonce)
    return {"ticket": ticket_id, "authorize_url": url, "expires_ms": now + _TICKET_MS}


@op(rq.CloudComplete, lock_free=True)
def cloud_login_complete(service: Service, request: rq.CloudComplete, caller: Caller) -> dict[str, Any]:
    """CL-1: check the ticket and the state, exchange the code with the verifier (no lock
    held), re-check the ticket's session and the caller's sudo, then store the tokens sealed
    on this device (CL-2). A ticket is used once, whatever the outcome."""
    manager = _manager(service)
    refused = MemoriesError("cloud_login_refused", "This sign-in is unknown, expired, voided by a lock, or not yours.")
    with service.lock:
        service.require_unlocked()
        ticket = manager.tickets.pop(request.ticket, None)
        if (
            ticket is None
            or ticket.namespace != caller.namespace
            or ticket.generation != service.session.generation
            or ticket.expires_ms <= now_ms()
        ):
            raise refused
        if not hmac.compare_digest(ticket.state.encode(), request.state.encode()):
            raise MemoriesError("cloud_login_refused", "The browser came back with another state; nothing was stored.")
        if not service.session.is_elevated(caller.namespace):
            raise MemoriesError("elevation_required")
    provider = oauth.provider(ticket.kind)

    async def sign_in() -> oauth.Tokens:
        tokens = await oauth.exchange_code(
            provider, ticket.client_id, ticket.client_secret, ticket.redirect_uri, request.code, ticket.verifier
        )
        store: ObjectStore = (
            OneDriveTransport(provider, tokens) if ticket.kind == "onedrive" else DriveTransport(provider, tokens)
        )
        await _closing(store, store.check())  # the app folder answers before anything is stored
        return tokens

    tokens = _run(service, "cloud-login", sign_in())
    with service.lock:
        state = service.require_unlocked()
        if service.session.generation != ticket.generation:
            raise refused
        if not service.session.is_elevated(caller.namespace):
            raise MemoriesError("elevation_required")
        same = [a for a in cs.accounts(state.extra_records) if a.name == ticket.name]
        if same and same[0].kind != ticket.kind:
            raise MemoriesError("invalid_input", "A cloud account of another provider has that name; pick another.")
        if same:  # signing in again: new tokens for the same account, its queue kept
            renewed = {"t": cs.TOKENS, "id": same[0].account_id, "secret": tokens.to_secret(), "ts_ms": now_ms()}
            audit = service.vault.audit_record(state, "cloud_login", caller, outcome="ok", account=ticket.name, kind=ticket.kind)
            service.vault.commit(state, [], [], [renewed, audit])
            return {"added": same[0].view(), "renewed": True}
        bucket = "approot" if ticket.kind == "onedrive" else "appDataFolder"
        record = cs.new_account_record(ticket.name, ticket.kind, provider.api, bucket, "", "", tokens.to_secret(), now_ms())
        audit = service.vault.audit_record(state, "cloud_add", caller, outcome="ok", account=ticket.name, kind=ticket.kind)
        service.vault.commit(state, [], [], [record, audit])
        account = cs.accounts(state.extra_records)[-1]
        return {"added": account.view(), "renewed": False}
