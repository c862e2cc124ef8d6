"""Session ops: status, init, unlock, lock, sudo, shutdown."""

from __future__ import annotations

import os
from typing import Any

from engine import __version__
from engine.crypto.kdf import DerivationAhead, calibrate
from engine.crypto.keys import new_identity
from engine.errors import MemoriesError
from engine.service import requests as rq
from engine.service.caller import Caller
from engine.service.memory import refuse_dumps, release_free_memory
from engine.service.registry import op
from engine.service.service import Service
from engine.store.database import StoreFile, create_store
from engine.store.footprint import footprint
from engine.vault.policy import owner_policy


@op(rq.DesktopStatus, needs_unlock=False, lock_free=True, touches_idle=False)
def desktop_status(service: Service, request: rq.DesktopStatus, caller: Caller) -> dict[str, Any]:
    """DT-1: counts and types only; never identifiers; locked says only "locked".

    Runs without the service lock and never touches idle or elevation timers.
    """
    if service.store is None:
        return {"state": "uninitialized", "initialized": False, "locked": True}
    state = service.state
    if state is None:
        return {"state": "locked"}
    status: dict[str, Any] = {
        "state": "unlocked",
        "initialized": True,
        "locked": False,
        "vaults": len(state.vaults),
        "assets": state.index.visible_count,
        "conflicts": state.index.conflict_count,
        "connections": 0,
        "providers": [],
        "sync_queue": {"outbox": 0, "inbox": 0},
        # CL-5: devices whose cloud writes are not arriving here / that have not taken ours.
        "cloud_delivery": {"not_arriving": 0, "not_taken": 0},
        "busy": _busy(service),
        "attention": state.index.conflict_count > 0,
        # Background work (issue 16): names, states and counts only (engine/jobs/background.py).
        "jobs": service.background.snapshot(),
    }
    if service.store.keeps_packs:  # a store of local files (a hosted PostgreSQL store has no size here)
        status["storage"] = footprint(service.store.path).to_json()
    reasons = {"conflicts"} if state.index.conflict_count else set()
    for contribute in service.status_contributors:
        extra = contribute()
        # DT-7: why attention is asked for, as fixed codes the status page names.
        reasons.update(code for code in ATTENTION_REASONS if extra.get("reason_" + code))
        status["connections"] += int(extra.get("connections", 0))
        status["attention"] = bool(status["attention"] or extra.get("attention", False))
        status["sync_queue"]["outbox"] += int(extra.get("sync_outbox", 0))  # engine/service/handlers/sync.py
        status["sync_queue"]["inbox"] += int(extra.get("sync_inbox", 0))
        status["cloud_delivery"]["not_arriving"] += int(extra.get("cloud_not_arriving", 0))  # handlers/cloud.py
        status["cloud_delivery"]["not_taken"] += int(extra.get("cloud_not_taken", 0))
        kinds = (k.removeprefix("provider_") for k, v in extra.items() if k.startswith("provider_") and v)
        status["providers"] = sorted({*status["providers"], *kinds})  # handlers/cloud.py
    if status["cloud_delivery"]["not_arriving"] or status["cloud_delivery"]["not_taken"]:
        reasons.add("cloud_delivery")
    status["attention_reasons"] = [code for code in ATTENTION_REASONS if code in reasons]
    return status


# Why the status asks for attention (DT-7), in the order the status page names them.
ATTENTION_REASONS = ("conflicts", "quarantine", "forks", "cloud_delivery", "tickets")


def _busy(service: Service) -> bool:
    """True while another op holds the service lock (a write, an import): a try, never a wait."""
    if not service.lock.acquire(blocking=False):
        return True
    service.lock.release()
    return False


@op(rq.DaemonInfo, needs_unlock=False, lock_free=True, touches_idle=False)
def daemon_info(service: Service, request: rq.DaemonInfo, caller: Caller) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "version": __version__,
        "home": str(service.paths.home),
        "initialized": service.store is not None,
        "locked": service.state is None,
    }


@op(rq.Init, needs_unlock=False, lock_free=True)
def init(service: Service, request: rq.Init, caller: Caller) -> dict[str, Any]:
    with service.lock:
        if service.store is not None or service.paths.store.exists():
            raise MemoriesError("already_initialized")
        refuse_dumps()
        identity = new_identity()
        vault_id = os.urandom(16)
        policy = owner_policy(identity, vault_id)
        vault_record = {
            "t": "vault",
            "vault_id": vault_id,
            "name": "default",
            "default": True,
            "policy": policy.to_record(),
            "epoch_keys": [{"epoch": 1, "key": os.urandom(32)}],
        }
        master = create_store(
            service.paths.store, request.password, calibrate(), [{"t": "identity", **identity.to_record()}, vault_record]
        )
        store = StoreFile.open(service.paths.store)
        store.install_master(master)
        service.store = store
        service.state = service.load_state(store)
        service.session.touch()
        service.vault.commit(service.state, [], [], [service.vault.audit_record(service.state, "init", caller, outcome="ok")])
        return {"initialized": True, "unlocked": True, "kdf": {"opslimit": store.kdf.opslimit, "memlimit": store.kdf.memlimit}}


def _check_password(service: Service, password: str, *, prefetch: bool = False, ahead: DerivationAhead | None = None) -> bytes:
    """Run the KDF outside the service lock, throttled (bounded tries per minute).

    The budget slot is taken before the KDF starts (concurrent attempts cannot overrun it)
    and refunded when the password is right. ``prefetch``: an unlock reads the state rows
    meanwhile (engine/store/database.py), only once the attempt has its slot.
    """
    store = service.require_store()
    with service.session.password_attempt():
        return store.check_password(password, prefetch=prefetch, ahead=ahead)


@op(rq.Unlock, needs_unlock=False, lock_free=True)
def unlock(service: Service, request: rq.Unlock, caller: Caller) -> dict[str, Any]:
    # Whatever happens, a derivation started during the engine's load is used once at most and
    # forgotten when this request ends (refused, rate-limited, already unlocked or done).
    ahead, service.kdf_ahead = service.kdf_ahead, None
    try:
        return _unlock(service, request, ahead)
    finally:
        if ahead is not None:
            ahead.drop()


def _unlock(service: Service, request: rq.Unlock, ahead: DerivationAhead | None) -> dict[str, Any]:
    store = service.require_store()
    if service.state is not None:
        service.session.touch()
        return {"unlocked": True, "already": True}
    service.refuse_while_restarting()
    refuse_dumps()  # before the password arrives in a key (ST-12): no core file, no same-user ptrace
    if ahead is None:
        for warm in service.before_unlock:
            warm()
    # else: the KDF ran during the engine's load, so there is no idle core to warm on; warming
    # now would slow the decoding this unlock waits for (the daemon warms a few seconds later,
    # and the segmenter loads itself if the index build needs it first).
    master = _check_password(service, request.password, prefetch=True, ahead=ahead)
    with service.lock:
        if service.state is None:
            store.install_master(master)
            try:
                service.state = service.load_state(store)
            except MemoriesError:
                store.wipe()
                raise
        service.session.touch()
        release_free_memory()  # decoding every state row was a transient peak
        return {"unlocked": True, "already": False, "assets": service.state.index.visible_count}


@op(rq.Lock, needs_unlock=False, touches_idle=False)
def lock(service: Service, request: rq.Lock, caller: Caller) -> dict[str, Any]:
    service.require_store()
    service.lock_now("request")
    return {"locked": True}


@op(rq.Sudo, needs_unlock=False, lock_free=True)
def sudo(service: Service, request: rq.Sudo, caller: Caller) -> dict[str, Any]:
    service.require_store()
    if service.state is None:
        raise MemoriesError("locked")
    _check_password(service, request.password)
    with service.lock:
        if service.state is None:
            raise MemoriesError("locked")
        seconds = service.session.elevate(caller.namespace)
        service.session.touch()
        return {"elevated": True, "namespace": caller.namespace, "seconds": int(seconds)}


@op(rq.Shutdown, needs_unlock=False, touches_idle=False)
def shutdown(service: Service, request: rq.Shutdown, caller: Caller) -> dict[str, Any]:
    service.lock_now("shutdown")
    service.shutdown_event.set()
    return {"stopping": True}
