"""`memories run` (RN-1), dispatched like RemoteExec (API-7).

``run_bound_prepare`` authorizes (elevation, the local CLI only) and decrypts under the
service lock, committing one intent that names every credential before any value leaves
the engine. The CLI then runs the program itself, without the lock and without a shell.
``run_bound_finish`` audits how it ended. The bindings (NAME=reference) are the command
line's; nothing about them is stored in a vault.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from engine.cards.login import login_field
from engine.errors import MemoriesError
from engine.service import requests_files as rq
from engine.service.caller import Caller
from engine.service.handlers.cards import _by_label, _copy_value, _credential_of, login_field_ref
from engine.service.handlers.reprompt import guard_reprompt
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.vault.core import Unlocked
from engine.vault.credentials import Credential, read_credential

MAX_PENDING = 64


class _Runs:
    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, list[bytes]]] = {}
        self.lock = threading.Lock()


_RUNS: weakref.WeakKeyDictionary[Service, _Runs] = weakref.WeakKeyDictionary()


def _runs(service: Service) -> _Runs:
    found = _RUNS.get(service)
    if found is None:
        found = _RUNS[service] = _Runs()
    return found


def _setup(service: Service) -> None:
    _runs(service)


EXTENSIONS.append(_setup)


def _resolve(service: Service, state: Unlocked, ref: str) -> tuple[Credential, str]:
    """(credential, value) of ``LABEL``, ``ID:LABEL``, ``cred:ID`` or ``card:ID#field``."""
    if ref.startswith("card:"):
        target, sep, wanted = ref.removeprefix("card:").partition("#")
        if not target:
            raise MemoriesError("invalid_input", "A card reference is card:ID#field.")
        if sep and wanted:
            # An ordinary card's protected label (its secret map), as ID:LABEL names it.
            mapped = _by_label(service, state, f"{target}:{wanted}")
            if mapped is not None:
                cred = read_credential(service.vault, state, mapped.hex())
                value = _copy_value(cred)
                if value is None:
                    raise MemoriesError("nothing_to_copy", "That secret has no value to pass to a program.")
                return cred, value
        _, cred = _credential_of(service, state, target)
        value = cred.secret.get(wanted) if sep else _copy_value(cred)
        if sep and not isinstance(value, str):
            value = login_field(cred.secret, wanted)  # a login's protected custom field (IM-2)
        if not isinstance(value, str) or not value:
            raise MemoriesError("not_found", "That card's secret has no such field.")
        return cred, value
    field = login_field_ref(service, state, ref)  # a login's protected field, ID:NAME (IM-2)
    if field is not None:
        return field
    cred_id = _by_label(service, state, ref)
    if cred_id is not None:
        cred = read_credential(service.vault, state, cred_id.hex())
    else:
        try:
            _, cred = _credential_of(service, state, ref)
        except MemoriesError as exc:
            if exc.code in ("not_found", "invalid_input"):
                raise MemoriesError(
                    "not_found", "No secret has that label and no card or credential has that ID (a card's own: ID:LABEL)."
                ) from None
            raise
    value = _copy_value(cred)
    if value is None:
        raise MemoriesError("nothing_to_copy", "That secret has no value to pass to a program.")
    return cred, value


@op(rq.RunBoundPrepare, needs_elevation=True)
def run_bound_prepare(service: Service, request: rq.RunBoundPrepare, caller: Caller) -> dict[str, Any]:
    """RN-1: only a local, elevated CLI caller; one intent naming every credential is committed first."""
    if caller.surface != "ipc" or not caller.namespace.startswith("cli:"):
        raise MemoriesError("permission_denied", "Only the local CLI runs programs with secrets.")
    if not request.env and not request.template:
        raise MemoriesError("invalid_input", "Name at least one secret: --env NAME=LABEL or a --template.")
    state = service.require_unlocked()
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    assets: list[bytes] = []
    for name, ref in request.env.items():
        cred, env[name] = _resolve(service, state, ref)
        assets.append(cred.asset_id)
    for ref in request.template:
        cred, labels[ref] = _resolve(service, state, ref)
        assets.append(cred.asset_id)
    runs = _runs(service)
    with runs.lock:
        if len(runs.pending) >= MAX_PENDING:
            runs.pending.pop(next(iter(runs.pending)))
    guard_reprompt(service, state, caller, assets)
    service.vault.commit_intent(state, "run_bound", caller, list(dict.fromkeys(assets)))
    handle = os.urandom(16).hex()
    with runs.lock:
        runs.pending[handle] = (caller.namespace, list(dict.fromkeys(assets)))
    return {"run": handle, "env": env, "template": labels}


@op(rq.RunBoundFinish)
def run_bound_finish(service: Service, request: rq.RunBoundFinish, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    runs = _runs(service)
    with runs.lock:
        found = runs.pending.get(request.run)
        if found is None or found[0] != caller.namespace:
            raise MemoriesError("not_found", "No run with that handle is waiting to finish.")
        del runs.pending[request.run]
    audit = service.vault.audit_record(
        state,
        "run_bound",
        caller,
        phase="finish",
        outcome="ok" if request.exit_code == 0 else "failed",
        exit_code=request.exit_code,
        assets=found[1],
    )
    service.vault.commit(state, [], [], [audit])
    return {"recorded": True}
