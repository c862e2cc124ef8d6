"""Daemon ops of the Center feature (CT-1, saas mode; docs/center.md).

``center_ticket_apply`` (elevated) turns a Center-signed grant ticket into a local MCP grant
bound to the ticket: its id, scope, vault set, expiry, generation and Center. In order:
the ticket is verified against the key pinned in `[[centers]]` (``ticket_invalid``,
``ticket_expired``), then checked against what this device remembers (``ticket_replayed``:
an id applied before; ``stale_generation``: older than the newest generation seen), then the
Center is asked whether it still stands (``ticket_revoked``; ``center_unavailable`` when it
cannot be asked: fail closed), and only then are the grant, the applied-ticket record and an
audit entry committed in one transaction. The grant's token is returned once, like
``mcp grant``'s. The setup installs the saas content router when config.toml asks for it.
"""

from __future__ import annotations

import os
import re
import time
from typing import Annotated, Any

import msgspec

from engine.agents import grants as g
from engine.center import applied
from engine.center.tickets import MAX_TICKET_CHARS, Ticket, verify_ticket
from engine.config import CenterConfig
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.center_runtime import runtime_of
from engine.service.handlers.mcp_grants import grant_view, vault_ids
from engine.service.registry import op
from engine.service.requests import Request
from engine.service.service import EXTENSIONS, Service, Unlocked

__all__ = ["CenterTicketApply", "CenterTickets", "verify_pinned", "device_ticket"]

_GRANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


class CenterTicketApply(Request, tag="center_ticket_apply"):
    """Apply a Center grant ticket (elevated): a local MCP grant bound to it; the token once."""

    ticket: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TICKET_CHARS)]
    # The local grant's name (defaults to the ticket's name when that is a valid grant name).
    name: Annotated[str, msgspec.Meta(pattern="^[a-z0-9][a-z0-9_-]{0,31}$")] | None = None
    transcripts: bool = False


class CenterTickets(Request, tag="center_tickets"):
    """The configured Centers and the grants made from their tickets (elevated)."""


def _setup(service: Service) -> None:
    config = service.config
    if config.centers_error is not None or any(c.mode == "saas" for c in config.centers):
        # An unreadable [[centers]] section installs the router too: it then refuses every
        # content op with invalid_config instead of letting them run on the local store.
        service.content_router = runtime_of(service)


EXTENSIONS.append(_setup)


def _now_ms() -> int:
    return int(time.time() * 1000)


def verify_pinned(service: Service, text: str) -> tuple[Ticket, CenterConfig]:
    """The ticket verified against the pinned key of the configured Center that signed it."""
    centers = runtime_of(service).centers()
    if not centers:
        raise MemoriesError("invalid_config", "config.toml has no [[centers]] entry, so a Center ticket cannot be checked.")
    first: MemoriesError | None = None
    now = _now_ms()
    for center in centers:
        try:
            return verify_ticket(text, center.key, now), center
        except MemoriesError as exc:
            if exc.code != "ticket_invalid":
                raise  # signed by this Center (e.g. expired): no other Center's key applies
            first = first or exc
    assert first is not None
    raise first


def _require_elevated(service: Service, caller: Caller) -> None:
    if caller.surface == "mcp" or not service.session.is_elevated(caller.namespace):
        raise MemoriesError("elevation_required")


# Lock-free (the Center is asked outside the service lock): elevation is checked inside, first.
@op(CenterTicketApply, lock_free=True)
def center_ticket_apply(service: Service, request: CenterTicketApply, caller: Caller) -> dict[str, Any]:
    with service.lock:
        _require_elevated(service, caller)
        state = service.require_unlocked()
        ticket, center = verify_pinned(service, request.ticket)
        if ticket.kind != "grant":
            raise MemoriesError("ticket_invalid", "This is a device ticket; use it with `device approve --ticket`.")
        own = state.identity.device_pub
        if ticket.device is not None and ticket.device not in (fingerprint(own), own.hex()):
            raise MemoriesError("ticket_invalid", "The Center ticket is bound to another device; nothing was changed.")
        name = request.name or ticket.name
        if _GRANT_NAME.fullmatch(name) is None:
            raise MemoriesError("invalid_input", "The ticket's name is not a valid local grant name; give one with --name.")
        applied.require_fresh(state.extra_records, ticket.ticket_id)
        applied.require_current_generation(applied.newest_generations(state.extra_records), ticket.center, ticket.generation)
        generation = service.session.generation
    _require_valid_at_center(service, ticket, center)
    with service.lock:
        state = service.require_unlocked()
        if service.session.generation != generation:
            raise MemoriesError("locked")
        _require_elevated(service, caller)
        # Re-checked under the lock: two applies of one ticket racing each other.
        applied.require_fresh(state.extra_records, ticket.ticket_id)
        applied.require_current_generation(applied.newest_generations(state.extra_records), ticket.center, ticket.generation)
        if any(x.active and x.name == name for x in g.load_grants(state.extra_records)):
            raise MemoriesError("grant_exists")
        saas = center.mode == "saas"
        token = g.new_token()
        grant = g.Grant(
            grant_id=os.urandom(16),
            name=name,
            scope=ticket.scope,
            # tickets mode: this device's vaults of those names (all must exist here);
            # saas mode: the Center's vaults, by name, checked on every agent call.
            vaults=() if saas else tuple(vault_ids(state, list(ticket.vaults))),
            token_hash=g.token_digest(token),
            hint=g.token_hint(token),
            created_ms=_now_ms(),
            transcripts=request.transcripts,
            ticket_id=ticket.ticket_id,
            expires_ms=ticket.expires_ms,
            generation=ticket.generation,
            center=ticket.center,
            vault_names=tuple(ticket.vaults) if saas else (),
        )
        record = _applied_record(ticket)
        audit = service.vault.audit_record(
            state, "center_ticket_apply", caller, outcome="ok", grant=grant.grant_id, scope=grant.scope
        )
        service.vault.commit(state, [], [], [grant.to_record(), record, audit])
        view = grant_view(state, grant, None)
    return {**view, "token": token, "center": center.url, "ticket_id": ticket.ticket_id, "expires_ms": ticket.expires_ms}


def _require_valid_at_center(service: Service, ticket: Ticket, center: CenterConfig) -> None:
    """The Center's word on ``ticket``, asked now (never from the cache); call it outside the
    service lock (an HTTP request). Anything but "valid" at the current generation is refused."""
    status, center_generation = runtime_of(service).ticket_status(center, ticket.ticket_id, fresh=True)
    if ticket.generation < center_generation:
        raise MemoriesError("stale_generation", "This ticket is from an older credential generation of the Center; refused.")
    if status == "revoked":
        raise MemoriesError("ticket_revoked")
    if status == "expired":
        raise MemoriesError("ticket_expired")
    if status != "valid":
        raise MemoriesError("ticket_revoked", "The Center does not know this ticket; nothing was changed.")


def require_device_ticket_valid(service: Service, text: str) -> None:
    """Before a device approval: the Center still stands by this device ticket (not revoked,
    not expired there, current generation). Outside the service lock; the approval itself
    checks the ticket's signature, device, replay and generation again under it."""
    ticket, center = verify_pinned(service, text)
    if ticket.kind != "device":
        raise MemoriesError("ticket_invalid", "This is a grant ticket; apply it with `memories center ticket apply`.")
    _require_valid_at_center(service, ticket, center)


def _applied_record(ticket: Ticket) -> dict[str, Any]:
    """The sealed record that uses a ticket up on this device (replays are refused by its id)."""
    return {
        "t": applied.APPLIED_KIND,
        "id": ticket.ticket_id,
        "kind": ticket.kind,
        "center": ticket.center,
        "generation": ticket.generation,
        "applied_ms": _now_ms(),
    }


def device_ticket(service: Service, state: Unlocked, text: str, device_pub: bytes) -> tuple[frozenset[str], dict[str, Any]]:
    """A device ticket for ``device_pub``: the vault names it allows and the record that consumes it.

    Checked here, under the service lock: the pinned key's signature, expiry, the device it
    names (its key's fingerprint or its device ID), replay and generation. The Center's own word
    (revoked?) was asked just before, outside the lock (:func:`require_device_ticket_valid`).
    """
    ticket, _center = verify_pinned(service, text)
    if ticket.kind != "device":
        raise MemoriesError("ticket_invalid", "This is a grant ticket; apply it with `memories center ticket apply`.")
    if ticket.device not in (fingerprint(device_pub), device_pub.hex()):
        raise MemoriesError("ticket_invalid", "The device ticket names another device than this join request's.")
    applied.require_fresh(state.extra_records, ticket.ticket_id)
    applied.require_current_generation(applied.newest_generations(state.extra_records), ticket.center, ticket.generation)
    record = _applied_record(ticket)
    return frozenset(ticket.vaults), record


@op(CenterTickets, needs_elevation=True)
def center_tickets(service: Service, request: CenterTickets, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    centers = runtime_of(service).centers()
    newest = applied.newest_generations(state.extra_records)
    grants = [
        {**grant_view(state, x, None), "ticket_id": x.ticket_id, "expires_ms": x.expires_ms, "generation": x.generation}
        for x in g.load_grants(state.extra_records)
        if x.ticket_id is not None
    ]
    return {
        "centers": [
            {"url": c.url, "mode": c.mode, "fingerprint": fingerprint(c.key), "generation_seen": newest.get(fingerprint(c.key))}
            for c in centers
        ],
        "grants": grants,
    }
