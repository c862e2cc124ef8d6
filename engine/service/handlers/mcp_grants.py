"""Daemon ops of the MCP feature: grant create/list/revoke (elevated) and ``mcp_call`` (AG-2).

``mcp_call`` is how the ``memories mcp`` process (an ordinary IPC client) acts for an
agent. The daemon — never the MCP process — decides:

1. the token matches an active grant (constant-time digest compare);
2. the inner request decodes to a known op that is on the registry's MCP allowlist
   (``mcp_allowed``); no scope, not even ``allow_all``, gets around that list;
3. the grant's scope gives the capability that op needs, and the grant covers the vault;

and only then dispatches the inner request through ``Service.dispatch`` as
``Caller(surface="mcp", namespace="mcp:{grant}")`` — a namespace ``sudo`` never elevates.
After the op ran (outside the service lock, so slow ops do not hold it), the grant is
checked again: a grant revoked meanwhile gets no result. Writes are idempotent per grant and
content within a window (``engine.agents.replay``): a client's retry of a write it cancelled
gets the first write's answer (``"replayed": true``), not a duplicate.
"""

from __future__ import annotations

import os
import time
import weakref
from pathlib import PurePath
from typing import Any

from engine.agents import grants as g
from engine.agents import notebook as nb
from engine.agents.replay import REPLAYED_OPS, Replays
from engine.errors import MemoriesError
from engine.service import requests_mcp as rq
from engine.service.caller import Caller
from engine.service.center_runtime import runtime_of as center_runtime
from engine.service.handlers.notebook import NOTEBOOK_OPS, handover_records
from engine.service.handlers.transcripts import asset_in_scope
from engine.service.registry import OPS, op
from engine.service.service import EXTENSIONS, Service, Unlocked

__all__ = [
    "scrub_result",
    "LAST_USED_PERSIST_MS",
    "grant_view",
    "vault_ids",
    "check_grant_vault",
    "check_grant_transcripts",
]

# Last use is exact in memory and persisted at most this often per grant (no commit,
# hence no fsync, on the hot path of every agent call).
LAST_USED_PERSIST_MS = 60 * 60 * 1000
# Transcript reads (AG-5); the kind name is that of engine/transcripts/session.py.
TRANSCRIPT_KIND = "transcript"
TRANSCRIPT_OPS = frozenset({"recall_turn", "recall_session", "transcript_list", "transcript_show", "transcript_known"})
# Keys that never leave the daemon towards an agent, whatever op produced them (CD-7, CD-8).
_SCRUBBED_KEYS = frozenset({"secret", "secrets"})
# Ops that act on the one item their `id` names (get: when no `vault` is given): the item's vault decides.
ITEM_OPS = frozenset({"get", "edit", "delete", "history", "diff", "annotate", "card_read", "card_write"})


class _McpRuntime:
    """Per-Service, in-memory only: exact last-use times and the parsed grants (wiped on lock
    like every cache)."""

    def __init__(self) -> None:
        self.last_used: dict[bytes, int] = {}
        self._grants: tuple[object, tuple[int, int, int], list[g.Grant]] | None = None
        self.replays = Replays()

    def grants(self, state: Unlocked) -> list[g.Grant]:
        """``load_grants`` over the state's records, re-parsed only when a grant record was added.

        Every agent call authenticates twice, and the records only grow (one
        ``mcp_grant_used`` per grant per hour of use): parsing them each time cost ~0.4 ms
        per thousand records per check. The extra records are append-only while unlocked,
        so the list lengths tell whether anything changed.
        """
        records = state.extra_records
        key = (len(records.get(g.GRANT_KIND, ())), len(records.get(g.REVOKE_KIND, ())), len(records.get(g.USED_KIND, ())))
        cached = self._grants
        if cached is None or cached[0] is not records or cached[1] != key:
            cached = self._grants = (records, key, g.load_grants(records))
        return cached[2]

    def clear(self) -> None:
        self.last_used.clear()
        self._grants = None
        self.replays.clear()


_RUNTIME: weakref.WeakKeyDictionary[Service, _McpRuntime] = weakref.WeakKeyDictionary()


def _setup(service: Service) -> None:
    runtime = _McpRuntime()
    _RUNTIME[service] = runtime
    service.on_lock.append(runtime.clear)


EXTENSIONS.append(_setup)


def _runtime(service: Service) -> _McpRuntime:
    runtime = _RUNTIME.get(service)
    if runtime is None:  # a Service built before this module was imported
        _setup(service)
        runtime = _RUNTIME[service]
    return runtime


def _now_ms() -> int:
    return int(time.time() * 1000)


def _vault_ids(state: Unlocked, names: list[str]) -> list[bytes]:
    by_name = {v.name: v.vault_id for v in state.vaults.values()}
    ids: list[bytes] = []
    for name in names:
        vault_id = by_name.get(name)
        if vault_id is None:
            raise MemoriesError("invalid_input", "A named vault does not exist here.")
        if vault_id not in ids:
            ids.append(vault_id)
    return ids


def _vault_names(state: Unlocked, ids: tuple[bytes, ...]) -> list[str]:
    return [state.vaults[v].name if v in state.vaults else "(unknown)" for v in ids]


def _grant_view(state: Unlocked, grant: g.Grant, last_used: int | None) -> dict[str, Any]:
    used = max(filter(None, (grant.used_ms, last_used)), default=None)
    return {
        "name": grant.name,
        "scope": grant.scope,
        "vaults": _vault_names(state, grant.vaults),
        "hint": grant.hint,
        "created_ms": grant.created_ms,
        "last_used_ms": used,
        "revoked_ms": grant.revoked_ms,
        "active": grant.active,
        "transcripts": grant.transcripts,
        "transcripts_project": grant.transcripts_project,
    }


# For the Center feature (engine/service/handlers/centers.py), which makes grants from tickets.
vault_ids = _vault_ids
grant_view = _grant_view


# -- grant management (local, elevated, never reachable over MCP) ------------------------
@op(rq.McpGrantCreate, needs_elevation=True)
def mcp_grant(service: Service, request: rq.McpGrantCreate, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    # CT-1: with a Center, grants arrive as its signed tickets (`center ticket apply`).
    center_runtime(service).refuse_if_managed("an MCP grant")
    if any(x.active and x.name == request.name for x in g.load_grants(state.extra_records)):
        raise MemoriesError("grant_exists")
    project = request.transcripts_project
    if project is not None and not PurePath(project).is_absolute():
        raise MemoriesError("invalid_input", "A project for transcripts is an absolute path.")
    token = g.new_token()
    grant = g.Grant(
        grant_id=os.urandom(16),
        name=request.name,
        scope=request.scope,
        vaults=tuple(_vault_ids(state, request.vaults)),
        token_hash=g.token_digest(token),
        hint=g.token_hint(token),
        created_ms=_now_ms(),
        transcripts=request.transcripts or project is not None,
        transcripts_project=project,
    )
    audit = service.vault.audit_record(state, "mcp_grant", caller, outcome="ok", grant=grant.grant_id, scope=grant.scope)
    # AG-13: the agent connected again under the same name keeps its notebook.
    handover = handover_records(state, grant.name, grant.grant_id, token) if request.keep_notebook else []
    service.vault.commit(state, [], [], [grant.to_record(), *handover, audit])
    # The only time the token exists outside the caller: it is returned once, never stored.
    return {**_grant_view(state, grant, None), "token": token}


@op(rq.McpGrantList, needs_elevation=True)
def mcp_grants(service: Service, request: rq.McpGrantList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    runtime = _runtime(service)
    items = [
        _grant_view(state, grant, runtime.last_used.get(grant.grant_id))
        for grant in g.load_grants(state.extra_records)
        if grant.active or request.include_revoked
    ]
    return {"grants": items}


@op(rq.McpGrantRevoke, needs_elevation=True)
def mcp_revoke(service: Service, request: rq.McpGrantRevoke, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    active = [x for x in g.load_grants(state.extra_records) if x.active and x.name == request.name]
    if not active:
        raise MemoriesError("not_found", "No active MCP grant has that name.")
    now = _now_ms()
    records: list[dict[str, Any]] = [{"t": g.REVOKE_KIND, "grant_id": x.grant_id, "revoked_ms": now} for x in active]
    records.append(service.vault.audit_record(state, "mcp_revoke", caller, outcome="ok", grant=active[0].grant_id))
    service.vault.commit(state, [], [], records)
    _runtime(service).last_used.pop(active[0].grant_id, None)
    return {"revoked": True, "name": request.name}


# -- the agent path ---------------------------------------------------------------------
def _authenticate(service: Service, state: Unlocked, token: str) -> g.Grant:
    return g.authenticate(_runtime(service).grants(state), token)


@op(rq.McpWhoami, touches_idle=False)
def mcp_whoami(service: Service, request: rq.McpWhoami, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    grant = _authenticate(service, state, request.token)
    if grant.expires_ms is not None and _now_ms() >= grant.expires_ms:
        raise MemoriesError("ticket_expired", "This grant's Center ticket has expired; ask the Center's operator for a new one.")
    return {
        "name": grant.name,
        "scope": grant.scope,
        "vaults": _vault_names(state, grant.vaults),
        # What the MCP server lists to this agent: only the tools it can call.
        "capabilities": sorted(g.CAPABILITIES.get(grant.scope, frozenset())),
        "transcripts": grant.transcripts,
        "transcripts_project": grant.transcripts_project,
    }


def _check_vault(state: Unlocked, grant: g.Grant, inner: dict[str, Any]) -> None:
    """The grant's vault set bounds where the op may act (today ops act on the default vault)."""
    target = inner.get("vault")
    if target is None:
        vault_id = state.default_vault
    elif isinstance(target, str):
        matches = [v.vault_id for v in state.vaults.values() if v.name == target or v.vault_id.hex() == target]
        if not matches:
            raise MemoriesError("not_found", "No vault has that name.")
        vault_id = matches[0]
    else:
        raise MemoriesError("invalid_request", "`vault` must be a vault name.")
    ref = inner.get("id")
    # An op on one item that names no vault: the item's vault,
    # checked below, is the one it acts in, not the default vault.
    on_item = target is None and isinstance(ref, str) and inner.get("op") in ITEM_OPS
    if vault_id not in grant.vaults and not on_item:
        raise MemoriesError("scope_denied", "This grant does not cover that vault.")
    # Asset IDs are global: an op on one asset acts in the vault that asset lives in.
    if isinstance(ref, str):
        try:
            entry = state.index.resolve(ref)
        except MemoriesError:
            if on_item:
                raise MemoriesError("not_found") from None  # nothing to act on, and no vault was checked
            return  # the op itself answers not_found / ambiguous_id
        if entry.vault_id not in grant.vaults:
            raise MemoriesError("scope_denied", "This grant does not cover the vault that item is in.")


@op(rq.McpCall, lock_free=True)
def mcp_call(service: Service, request: rq.McpCall, caller: Caller) -> dict[str, Any]:
    if caller.surface == "mcp":
        raise MemoriesError("permission_denied", "This operation is not available to agents.")
    inner = request.request
    with service.lock:
        state = service.require_unlocked()
        grant = _authenticate(service, state, request.token)
        op_name = inner.get("op")
        if not isinstance(op_name, str):
            raise MemoriesError("invalid_request", "The request has no `op` string.")
        spec = OPS.get(op_name)
        if spec is None:
            raise MemoriesError("unknown_op")
        # The allowlist first, whatever the scope and whatever the rest of the request says.
        if not spec.mcp_allowed:
            raise MemoriesError("permission_denied", "This operation is not available to agents.")
        g.require_capability(grant.scope, op_name)
        notebook = op_name in NOTEBOOK_OPS
        centers = center_runtime(service)
        routed = centers.claims(op_name, spec)  # saas mode: the op runs at the Center
        if not notebook:  # the agent's own notebook is in no vault and holds no transcript
            if not routed:
                _check_vault(state, grant, inner)
            _check_transcripts(service, state, grant, op_name, inner)
        generation = service.session.generation
    # CT-1: a ticket-made grant stands only while the Center says so (network: outside the lock).
    centers.check_ticket_grant(grant)
    if routed:
        # The local grant bounds the call by the Center vaults its ticket named; the Center's
        # own grant (the daemon's bearer) bounds it again there.
        inner = centers.bind_agent_request(grant, spec, op_name, inner)
    # Files are not open to agents (no file op is MCP-allowed), so search never shows them either.
    hidden = frozenset({"file"}) if grant.transcripts else frozenset({TRANSCRIPT_KIND, "file"})
    # AG-13: the notebook ops act on the notebook of this grant, opened with a key derived
    # from this call's token; no other caller carries either.
    agent = Caller(
        namespace=f"mcp:{grant.name}",
        surface="mcp",
        uid=caller.uid,
        hidden_kinds=hidden,
        transcript_scope=grant.transcripts_project,
        grant_id=grant.grant_id,
        grant_key=nb.grant_wrap_key(request.token, grant.grant_id) if notebook else None,
    )
    # Decoding (unknown fields, types) and the registry's own MCP allowlist check happen
    # in dispatch, exactly as for every other surface.
    if op_name in REPLAYED_OPS:
        replays = _runtime(service).replays
        result = replays.run(
            replays.key(grant.grant_id, inner),
            lambda: service.dispatch(inner, agent),
            lambda answer: _still_current(service, answer),
        )
    else:
        result = service.dispatch(inner, agent)
    with service.lock:
        state = service.require_unlocked()
        if service.session.generation != generation:
            raise MemoriesError("locked")
        current = _authenticate(service, state, request.token)  # revoked while the op ran: no delivery
        _record_use(service, state, current)
    return {"op": op_name, "result": scrub_result(result)}


def _still_current(service: Service, answer: dict[str, Any]) -> bool:
    """A remembered write is answered again only while its item still exists (not deleted)."""
    ref = answer.get("id")
    if not isinstance(ref, str):
        return True
    with service.lock:
        state = service.require_unlocked()
        try:
            entry = state.index.resolve(ref)
        except MemoriesError:
            return False
        return not state.index.is_deleted(entry)


def _check_transcripts(service: Service, state: Unlocked, grant: g.Grant, op_name: str, inner: dict[str, Any]) -> None:
    """AG-5: transcripts reach only agents whose grant includes them (search hides them: hidden_kinds)."""
    if grant.transcripts and grant.transcripts_project is not None:
        _check_project(service, state, grant, inner)
        return
    if grant.transcripts:
        return
    if op_name in TRANSCRIPT_OPS or inner.get("kind") == TRANSCRIPT_KIND:
        raise MemoriesError("scope_denied", "This grant does not include transcripts.")
    ref = inner.get("id")
    if isinstance(ref, str):
        try:
            entry = state.index.resolve(ref)
        except MemoriesError:
            return
        if entry.kind == TRANSCRIPT_KIND:
            raise MemoriesError("scope_denied", "This grant does not include transcripts.")


def _check_project(service: Service, state: Unlocked, grant: g.Grant, inner: dict[str, Any]) -> None:
    """AG-11: a grant whose transcripts are one project's reaches no other project's turn by ID,
    and does not list transcripts (recall_session pages the sessions it may see)."""
    if inner.get("kind") == TRANSCRIPT_KIND:
        raise MemoriesError("scope_denied", "This grant reads transcripts through recall_turn and recall_session.")
    ref = inner.get("id")
    if not isinstance(ref, str):
        return
    try:
        entry = state.index.resolve(ref)
    except MemoriesError:
        return
    scoped = Caller(namespace=f"mcp:{grant.name}", surface="mcp", transcript_scope=grant.transcripts_project)
    if not asset_in_scope(service, state, scoped, entry.asset_id):
        raise MemoriesError("not_found")


def _record_use(service: Service, state: Unlocked, grant: g.Grant) -> None:
    runtime = _runtime(service)
    now = _now_ms()
    runtime.last_used[grant.grant_id] = now
    if grant.used_ms is None or now - grant.used_ms >= LAST_USED_PERSIST_MS:
        service.vault.commit(state, [], [], [{"t": g.USED_KIND, "grant_id": grant.grant_id, "used_ms": now}])


# The same checks for a Center grant (engine/service/hosted.py): one rule for both surfaces.
def check_grant_vault(state: Unlocked, grant: g.Grant, inner: dict[str, Any]) -> None:
    _check_vault(state, grant, inner)


def check_grant_transcripts(service: Service, state: Unlocked, grant: g.Grant, op_name: str, inner: dict[str, Any]) -> None:
    _check_transcripts(service, state, grant, op_name, inner)


def scrub_result(value: Any) -> Any:
    """Drop secret-map and secret keys at any depth (defence in depth for CD-7/CD-8)."""
    if isinstance(value, dict):
        return {k: scrub_result(v) for k, v in value.items() if k not in _SCRUBBED_KEYS}
    if isinstance(value, list):
        return [scrub_result(v) for v in value]
    return value
