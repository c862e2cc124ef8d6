"""Remote session and ticket ops (RM-1, RM-5): open, propose, approve, reject, exec, close, list.

``remote_open`` and ``remote_exec`` are ``lock_free``: they check and commit their
intent under the service lock, do network I/O outside it, then re-take the lock
and re-check the lock generation before anything is registered or delivered
(ST-5, ST-10). None of these ops is reachable over MCP (AG-2).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import msgspec

from engine.errors import MemoriesError
from engine.remote import targets
from engine.remote.manager import RemoteManager, SessionEntry
from engine.remote.proxy.listener import ProxyLimits
from engine.remote.sessions import session_for
from engine.remote.sessions.base import CONNECT_TIMEOUT, exec_deadline
from engine.remote.tickets import normalize
from engine.service.caller import Caller
from engine.service.handlers.live import bus_of
from engine.service.registry import op
from engine.service.requests import Request
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.vault.credentials import read_credential

__all__ = [
    "RemoteOpen",
    "RemotePropose",
    "RemoteApprove",
    "RemoteReject",
    "RemoteExec",
    "RemoteClose",
    "RemoteList",
    "ProxyStart",
    "ProxyStop",
    "ProxyList",
    "resolve_target",
]

_ATTR = "remote_manager"


def manager_of(service: Service) -> RemoteManager:
    manager = getattr(service, _ATTR, None)
    if not isinstance(manager, RemoteManager):
        raise RuntimeError("remote extension not installed")
    return manager


def install(service: Service) -> None:
    """EXTENSIONS hook: one manager per Service, wiped on every lock (incl. idle and shutdown)."""
    config = service.config
    manager = RemoteManager(
        ProxyLimits.shortened(config.proxy_handshake_seconds, config.proxy_lifetime_seconds),
        exec_deadline(config.remote_exec_seconds),
    )
    setattr(service, _ATTR, manager)
    service.on_lock.append(manager.drop_all)

    def tickets_changed(pending: int) -> None:
        # The change feed (handlers/live.py) carries the count only; the page reads the
        # tickets themselves through its own authenticated route.
        bus_of(service).publish({"type": "tickets", "pending": pending}, coalesce="tickets")

    manager.tickets.on_change = tickets_changed

    def contribute() -> dict[str, int | bool]:
        connections, pending = manager.status_counts()
        return {"connections": connections, "attention": pending, "reason_tickets": pending}

    service.status_contributors.append(contribute)


EXTENSIONS.append(install)

Ref = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Id = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{8,32}$")]


class RemoteOpen(Request, tag="remote_open"):
    credential: Ref
    host: Annotated[str, msgspec.Meta(min_length=1, max_length=253)] | None = None


class RemotePropose(Request, tag="remote_propose"):
    session: Id
    instruction: Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
    data_b64: Annotated[str, msgspec.Meta(max_length=1_500_000)] | None = None


class RemoteApprove(Request, tag="remote_approve"):
    ticket: Id
    fingerprint: Annotated[str, msgspec.Meta(pattern="^[0-9a-fA-F]{64}$")] | None = None


class RemoteReject(Request, tag="remote_reject"):
    ticket: Id


class RemoteExec(Request, tag="remote_exec"):
    ticket: Id


class RemoteClose(Request, tag="remote_close"):
    session: Id


class RemoteList(Request, tag="remote_list"):
    pass


def resolve_target(service: Service, state: Unlocked, ref: str, host: str | None) -> tuple[targets.Target, str]:
    """Decrypt a remote credential (plus its CA / key / client certificate references) and check the allowlist (RM-1)."""
    cred = read_credential(service.vault, state, ref)
    if cred.ctype not in targets.REMOTE_TYPES:
        raise MemoriesError("invalid_input", "That credential is not a remote target.")
    secret = dict(cred.secret)
    ca_pem = ""
    if cred.public.get("tls_ca"):
        ca = read_credential(service.vault, state, str(cred.public["tls_ca"]))
        ca_pem = str(ca.public.get("pem", ""))
    if cred.public.get("key_ref"):
        key = read_credential(service.vault, state, str(cred.public["key_ref"]))
        secret["private_key"] = key.secret.get("private_key", "")
    tls_client = ("", "")
    if cred.public.get("tls_cert"):  # mTLS: the referenced tls_cert's certificate and key
        client = read_credential(service.vault, state, str(cred.public["tls_cert"]))
        tls_client = (str(client.public.get("certificate", "")), str(client.secret.get("private_key", "")))
    target = targets.target_from(cred.asset_id, cred.name, cred.ctype, cred.public, secret, ca_pem, tls_client)
    return target, targets.check_allowed(target, host)


def _audit(service: Service, op_name: str, caller: Caller, **fields: Any) -> None:
    """Commit one audit entry if the vault is still unlocked (callers hold the service lock)."""
    state = service.state
    if state is not None:
        service.vault.commit(state, [], [], [service.vault.audit_record(state, op_name, caller, **fields)])


def _session(service: Service, session_id: str) -> SessionEntry:
    """A session by its ID or a unique prefix of it (4+ characters), like every other ID."""
    sessions = manager_of(service).sessions
    entry = sessions.get(session_id)
    if entry is None and len(session_id) >= 4:
        found = [e for sid, e in sessions.items() if sid.startswith(session_id.lower())]
        if len(found) > 1:
            raise MemoriesError("ambiguous_id", "That session ID prefix matches more than one open session; type more.")
        entry = found[0] if found else None
    if entry is None:
        raise MemoriesError("session_closed")
    return entry


@op(RemoteOpen, lock_free=True)
def remote_open(service: Service, request: RemoteOpen, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    with service.lock:
        state = service.require_unlocked()
        service.session.touch()
        target, host = resolve_target(service, state, request.credential, request.host)
        # RM-1: the connection intent is durable before any packet leaves.
        _audit(service, "remote.open", caller, phase="intent", assets=[target.asset_id], type=target.ctype)
        generation = service.session.generation
    session = session_for(target, host, manager.exec_seconds)
    try:
        manager.runtime.call(session.connect(), CONNECT_TIMEOUT + 5)
    except MemoriesError as exc:
        with service.lock:
            if service.session.generation == generation:
                _audit(service, "remote.open", caller, phase="result", outcome=exc.code, assets=[target.asset_id])
        raise
    with service.lock:
        if service.session.generation != generation:
            manager.runtime.call(session.close(), 10)
            raise MemoriesError("locked")
        entry = SessionEntry(manager.new_id(), session, target.name, target.ctype, target.asset_id, host, caller.namespace)
        manager.sessions[entry.session_id] = entry
        _audit(service, "remote.open", caller, phase="result", outcome="ok", assets=[target.asset_id], session=entry.session_id)
        return entry.view()


@op(RemotePropose)
def remote_propose(service: Service, request: RemotePropose, caller: Caller) -> dict[str, Any]:
    """RM-5: the engine normalizes the instruction and fingerprints session, sequence and instruction."""
    entry = _session(service, request.session)
    data = None
    if request.data_b64 is not None:
        try:
            data = base64.b64decode(request.data_b64, validate=True)
        except ValueError as exc:
            raise MemoriesError("invalid_input", "data_b64 is not base64.") from exc
    instruction = normalize(entry.ctype, request.instruction, data)
    ticket = manager_of(service).tickets.propose(entry.session_id, entry.next_seq, instruction, caller.namespace)
    entry.next_seq += 1
    return ticket.view(entry.target_name)


@op(RemoteApprove, needs_elevation=True)
def remote_approve(service: Service, request: RemoteApprove, caller: Caller) -> dict[str, Any]:
    """Single use, bound to the elevated caller's namespace: only it can execute the ticket."""
    manager = manager_of(service)
    ticket = manager.tickets.get(request.ticket)
    entry = _session(service, ticket.session_id)
    manager.tickets.approve(request.ticket, caller.namespace, request.fingerprint)
    _audit(service, "remote.approve", caller, assets=[entry.asset_id], ticket=ticket.ticket_id, fingerprint=ticket.fingerprint)
    return ticket.view(entry.target_name)


@op(RemoteReject)
def remote_reject(service: Service, request: RemoteReject, caller: Caller) -> dict[str, Any]:
    ticket = manager_of(service).tickets.reject(request.ticket)
    return {"ticket": ticket.ticket_id, "state": ticket.state}


@op(RemoteExec, lock_free=True)
def remote_exec(service: Service, request: RemoteExec, caller: Caller) -> dict[str, Any]:
    """Run exactly the approved ticket on its session; intent before, result audit after (ST-5)."""
    manager = manager_of(service)
    with service.lock:
        service.require_unlocked()
        service.session.touch()
        ticket = manager.tickets.get(request.ticket)
        entry = _session(service, ticket.session_id)
        manager.tickets.claim(request.ticket, caller.namespace)
        try:
            _audit(
                service,
                "remote.exec",
                caller,
                phase="intent",
                assets=[entry.asset_id],
                ticket=ticket.ticket_id,
                fingerprint=ticket.fingerprint,
            )
        except BaseException:
            ticket.state = "approved"  # the intent did not commit: nothing ran, the approval stands
            raise
        generation = service.session.generation

    async def run() -> dict[str, Any]:
        async with entry.busy:
            return await entry.session.execute(ticket.instruction)

    try:
        result = manager.runtime.call(run(), entry.session.exec_timeout + 10)
    except MemoriesError as exc:
        with service.lock:
            ticket.state = "done"
            if entry.session.closed and manager.sessions.get(entry.session_id) is entry:
                # A timeout or a broken stream ended the connection: the session is gone, and so are
                # its pending tickets (as after `remote close`), so `remote list` never shows a dead one.
                del manager.sessions[entry.session_id]
                manager.tickets.drop_session(entry.session_id)
            if service.session.generation == generation:
                _audit(service, "remote.exec", caller, phase="result", outcome=exc.code, ticket=ticket.ticket_id)
        raise
    with service.lock:
        ticket.state = "done"
        if service.session.generation != generation:
            raise MemoriesError("locked")  # ST-10: work from before a lock is never delivered
        _audit(
            service,
            "remote.exec",
            caller,
            phase="result",
            outcome="ok",
            ticket=ticket.ticket_id,
            truncated=bool(result.get("truncated", False)),
        )
    return {**ticket.view(entry.target_name), "result": result}


@op(RemoteClose)
def remote_close(service: Service, request: RemoteClose, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    entry = manager.sessions.pop(_session(service, request.session).session_id)
    manager.tickets.drop_session(entry.session_id)
    manager.runtime.call(entry.session.close(), 10)
    _audit(service, "remote.close", caller, assets=[entry.asset_id], session=entry.session_id)
    return {"session": entry.session_id, "closed": True}


@op(RemoteList)
def remote_list(service: Service, request: RemoteList, caller: Caller) -> dict[str, Any]:
    manager = manager_of(service)
    names = {s.session_id: s.target_name for s in manager.sessions.values()}
    return {
        "sessions": [s.view() for s in manager.sessions.values()],
        "tickets": [
            t.view(names.get(t.session_id, "")) for t in manager.tickets.tickets.values() if t.state in {"pending", "approved"}
        ],
        "proxies": [p.view() for p in manager.proxies.values()],
    }


# -- proxies (PX-1 … PX-4) ---------------------------------------------------------------
MAX_PROXIES = 16


class ProxyStart(Request, tag="proxy_start"):
    credential: Ref
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    host: Annotated[str, msgspec.Meta(min_length=1, max_length=253)] | None = None
    # ssh only: the destination the tunnel reaches, as seen from the SSH server.
    forward_host: Annotated[str, msgspec.Meta(min_length=1, max_length=253)] | None = None
    forward_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None


class ProxyStop(Request, tag="proxy_stop"):
    proxy: Id


class ProxyList(Request, tag="proxy_list"):
    pass


def _prune(service: Service) -> None:
    """Forget proxies that ended on their own (30-minute lifetime)."""
    proxies = manager_of(service).proxies
    for key in [k for k, p in proxies.items() if getattr(p, "stopped", False)]:
        del proxies[key]


@op(ProxyStart)
def proxy_start(service: Service, request: ProxyStart, caller: Caller) -> dict[str, Any]:
    """PX-1: same credential and allowlist checks as a session, a start intent, then a loopback bind."""
    from engine.remote.proxy import proxy_for

    manager = manager_of(service)
    state = service.require_unlocked()
    _prune(service)
    if len(manager.proxies) >= MAX_PROXIES:
        raise MemoriesError("proxy_limit")
    target, host = resolve_target(service, state, request.credential, request.host)
    forward = None
    if request.forward_host is not None and request.forward_port is not None:
        forward = (request.forward_host, request.forward_port)
    listener = proxy_for(manager.new_id(), target, host, forward, manager.proxy_limits)
    _audit(service, "proxy.start", caller, phase="intent", assets=[target.asset_id], type=target.ctype)
    manager.runtime.call(listener.start(request.port), 10)
    manager.proxies[listener.proxy_id] = listener
    return listener.view()


@op(ProxyStop)
def proxy_stop(service: Service, request: ProxyStop, caller: Caller) -> dict[str, Any]:
    """PX-4: the answer comes only after every client worker of the proxy has finished."""
    manager = manager_of(service)
    listener = manager.proxies.get(request.proxy)
    if listener is None:
        raise MemoriesError("not_found", "No running proxy has that ID.")
    _audit(service, "proxy.stop", caller, phase="intent", proxy=listener.proxy_id)
    del manager.proxies[request.proxy]
    manager.runtime.call(listener.stop(), 30)
    return {"proxy": listener.proxy_id, "stopped": True}


@op(ProxyList)
def proxy_list(service: Service, request: ProxyList, caller: Caller) -> dict[str, Any]:
    _prune(service)
    return {"proxies": [p.view() for p in manager_of(service).proxies.values()]}


# -- dashboard approval (DT-5) --------------------------------------------------------------
class RemotePending(Request, tag="remote_pending"):
    pass


class RemoteApproveConfirm(Request, tag="remote_approve_confirm"):
    ticket: Id
    fingerprint: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    password: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]


@op(RemotePending, touches_idle=False)
def remote_pending(service: Service, request: RemotePending, caller: Caller) -> dict[str, Any]:
    """Pending tickets with their full normalized instruction and fingerprint (what DT-5 shows)."""
    manager = manager_of(service)
    names = {s.session_id: s.target_name for s in manager.sessions.values()}
    return {"tickets": [t.view(names.get(t.session_id, "")) for t in manager.tickets.tickets.values() if t.state == "pending"]}


@op(RemoteApproveConfirm, lock_free=True)
def remote_approve_confirm(service: Service, request: RemoteApproveConfirm, caller: Caller) -> dict[str, Any]:
    """Approve one ticket by re-entering the vault password (DT-5); no elevation is granted or kept.

    The approval is bound to the namespace that proposed the ticket, so the proposer's
    ``remote exec`` runs it; the fingerprint must match what the approver was shown.
    """
    manager = manager_of(service)
    with service.lock:
        service.require_unlocked()
        ticket = manager.tickets.get(request.ticket)
        if ticket.state != "pending":
            raise MemoriesError("ticket_used")
        if ticket.fingerprint != request.fingerprint:
            raise MemoriesError("invalid_input", "The fingerprint does not match this ticket; nothing was approved.")
        generation = service.session.generation
    # The KDF is slow: run it outside the lock, throttled like unlock and sudo.
    store = service.require_store()
    service.session.check_password_budget()
    try:
        store.check_password(request.password)
    except MemoriesError:
        service.session.record_password_failure()
        raise
    with service.lock:
        if service.session.generation != generation:
            raise MemoriesError("locked")
        entry = _session(service, ticket.session_id)
        manager.tickets.approve(request.ticket, ticket.proposed_by, request.fingerprint)
        _audit(
            service,
            "remote.approve",
            caller,
            assets=[entry.asset_id],
            ticket=ticket.ticket_id,
            fingerprint=ticket.fingerprint,
            via="password",
        )
        return ticket.view(entry.target_name)
