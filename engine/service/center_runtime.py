"""The daemon's side of a Center (CT-1, saas mode; docs/center.md): one runtime per Service.

It holds what the `[[centers]]` entries imply for this engine:

* **center_managed** — with any entry, local self-bootstrap (approving a device without a
  device ticket) and local MCP grant creation are refused, naming the Center's URL;
* **ticket-made grants** — before an agent's call under such a grant runs, its expiry and
  generation are checked and the Center is asked whether the ticket still stands
  (``GET /v1/tickets/{id}`` on every call; only "revoked"/"expired" are remembered), so a
  revocation is refused on the next call. **Fail closed**: if the Center cannot be asked, the
  call is refused with ``center_unavailable``; a grant the Center may have revoked is never
  honoured on a guess. The price is that agents stop working while the Center is down;
* **saas routing** — with a ``mode = "saas"`` entry, the content ops (the MCP allowlist) are
  sent to the Center's ``POST /v1/rpc`` with the bearer from the entry's ``token_env``, and
  the ops that would read or write content in the local store otherwise are refused: there
  is no parallel local content path.

The network is used outside the service lock; callers re-check the lock generation.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final

import msgspec

from engine.agents import grants as g
from engine.center import applied
from engine.center.link import CenterLink, TicketStatus
from engine.config import CenterConfig
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError

if TYPE_CHECKING:
    from engine.service.caller import Caller
    from engine.service.registry import OpSpec
    from engine.service.requests import Request
    from engine.service.service import Service

__all__ = ["CenterRuntime", "runtime_of", "LOCAL_OPS_IN_SAAS", "AGENT_NOTEBOOK_OPS"]

# Request fields that name one item (asset IDs are global: the item decides the vault).
_ITEM_FIELDS: Final = ("id", "src", "dst")

# The agent's own notebook tools (MCP-allowlisted, but never routed to the Center).
AGENT_NOTEBOOK_OPS: Final = frozenset(
    {"notebook_write", "notebook_read", "notebook_list", "notebook_search", "notebook_forget", "scratch_read", "scratch_write"}
)

# In saas mode these unlock-needing ops still run here: they manage this device, its grants
# and its own records, never hosted content. Every other unlock-needing op that is not routed
# to the Center (not on the MCP allowlist) is refused, so a content op added later cannot
# quietly open a local content path (closed by default).
LOCAL_OPS_IN_SAAS: Final = frozenset(
    {
        # AG-13: an agent's notebook is its own device-local record under a key derived from
        # its token, not hosted content: it stays here in saas mode too (the Center has none).
        *AGENT_NOTEBOOK_OPS,
        "notebook_show",
        "notebook_delete",
        "whoami",
        "devices",
        "device_request_show",
        "device_approve",
        "device_revoke",
        "invite_new",
        "vaults",
        "vault_members",
        "audit",
        "mcp_grant",
        "mcp_grants",
        "mcp_revoke",
        "mcp_whoami",
        "mcp_call",
        "local_config",
        "local_config_get",
        "settings_set",  # DT-9: this device's config.toml
        "dashboard_activity",
        "center_ticket_apply",
        "center_tickets",
    }
)


class CenterRuntime:
    def __init__(self, service: Service) -> None:
        self._service = service
        self._links: dict[str, CenterLink] = {}
        self._links_lock = threading.Lock()
        self.statuses = applied.StatusCache()

    # -- configuration ---------------------------------------------------------------------
    def centers(self) -> tuple[CenterConfig, ...]:
        return self._service.config.require_centers()

    def managing(self) -> CenterConfig | None:
        centers = self.centers()
        return centers[0] if centers else None

    def saas(self) -> CenterConfig | None:
        return next((c for c in self.centers() if c.mode == "saas"), None)

    def refuse_if_managed(self, what: str) -> None:
        """``center_managed`` naming the Center when any `[[centers]]` entry exists."""
        center = self.managing()
        if center is not None:
            raise MemoriesError(
                "center_managed",
                f"This device is managed by the Center at {center.url}: {what} comes from its signed tickets "
                "(`memories center ticket apply TICKET`).",
                center=center.url,
            )

    def by_fingerprint(self, center_fp: str) -> CenterConfig:
        for center in self.centers():
            if fingerprint(center.key) == center_fp:
                return center
        raise MemoriesError("ticket_invalid", "The Center ticket names a Center this device is not configured for.")

    def link(self, center: CenterConfig) -> CenterLink:
        with self._links_lock:
            link = self._links.get(center.url)
            if link is None:
                link = self._links[center.url] = CenterLink(center.url, center.ca)
            return link

    # -- ticket status and generations -------------------------------------------------------
    def ticket_status(self, center: CenterConfig, ticket_id: str, *, fresh: bool = False) -> tuple[str, int]:
        """The Center's word on a ticket (final answers remembered); ``center_unavailable`` if it cannot be asked."""
        if not fresh:
            cached = self.statuses.get(ticket_id)
            if cached is not None:
                return cached
        answer: TicketStatus = self.link(center).ticket_status(ticket_id)
        self.statuses.put(ticket_id, answer.status, answer.generation)
        self._learn_generation(fingerprint(center.key), answer.generation)
        return answer.status, answer.generation

    def _learn_generation(self, center_fp: str, generation: int) -> None:
        """Remember a newer generation (CT-4) so older tickets are refused even when offline."""
        service = self._service
        with service.lock:
            state = service.state
            if state is None:
                return
            if generation > applied.newest_generations(state.extra_records).get(center_fp, 0):
                service.vault.commit(state, [], [], [applied.generation_record(center_fp, generation)])

    def check_ticket_grant(self, grant: g.Grant) -> None:
        """A ticket-made grant is honoured only while unexpired, current and valid at the Center."""
        if grant.ticket_id is None:
            return
        center_fp = grant.center or ""
        if grant.expires_ms is None or int(time.time() * 1000) >= grant.expires_ms:
            raise MemoriesError("ticket_expired", "This grant's Center ticket has expired; ask the Center for another.")
        center = self.by_fingerprint(center_fp)
        with self._service.lock:
            state = self._service.require_unlocked()
            newest = applied.newest_generations(state.extra_records)
        applied.require_current_generation(newest, center_fp, grant.generation or 0)
        status, generation = self.ticket_status(center, grant.ticket_id)
        if (grant.generation or 0) < generation:
            raise MemoriesError(
                "stale_generation", "This grant's ticket is from an older credential generation of the Center; it was refused."
            )
        if status == "revoked":
            raise MemoriesError("ticket_revoked")
        if status == "expired":
            raise MemoriesError("ticket_expired")
        if status != "valid":
            raise MemoriesError("ticket_revoked", "The Center does not know this grant's ticket; it was refused.")

    # -- saas routing ----------------------------------------------------------------------
    def claims(self, op_name: str, spec: OpSpec) -> bool:
        """True: send to the Center. False: run here. Raises for a local content op in saas mode."""
        center = self.saas()
        if center is None:
            return False
        if spec.mcp_allowed and op_name not in AGENT_NOTEBOOK_OPS:
            return True
        if spec.needs_unlock and op_name not in LOCAL_OPS_IN_SAAS:
            raise MemoriesError(
                "center_managed",
                f"In saas mode content lives on the Center at {center.url}; `{op_name}` has no hosted form, "
                "so it does not run on a local copy either.",
                center=center.url,
            )
        return False

    def forward(self, request: Request, caller: Caller) -> dict[str, Any]:
        center = self.saas()
        if center is None:  # the router is only installed for a saas entry
            raise MemoriesError("center_unavailable")
        body = msgspec.to_builtins(request)
        result = self.link(center).rpc(body, self._token(center))
        if not isinstance(result, dict):
            raise MemoriesError("center_unavailable", "The Center answered a content request with an unexpected result.")
        return _without_hidden(result, caller.hidden_kinds) if caller.hidden_kinds else result

    def bind_agent_request(self, grant: g.Grant, spec: OpSpec, op_name: str, inner: dict[str, Any]) -> dict[str, Any]:
        """saas mode: confine an agent's request to the Center vaults its local grant names.

        The local grant's vault set is checked here, before the Center sees the request: a
        ``vault`` field must name one of them (filled in when the grant has exactly one), and
        an item named by ID must live in one of them (asked at the Center with ``get`` confined
        to each vault in turn). An op that names neither cannot be confined, so agents cannot
        use it in saas mode. Grants made before the Center was configured name local vaults
        only and reach no hosted content.
        """
        names = grant.vault_names
        if grant.ticket_id is None or not names:
            raise MemoriesError(
                "scope_denied", "In saas mode an agent reaches hosted content only through a grant applied from a Center ticket."
            )
        fields = spec.request.__struct_fields__
        bound = dict(inner)
        items = [value for f in _ITEM_FIELDS if f in fields and isinstance(value := inner.get(f), str)]
        if "vault" in fields:
            vault = inner.get("vault")
            if vault is None:
                if len(names) != 1:
                    raise MemoriesError("invalid_request", "This grant covers several vaults; name one (`vault`).")
                bound["vault"] = names[0]
            elif vault not in names:
                raise MemoriesError("scope_denied", "This grant does not cover that vault.")
            if op_name == "get":
                return bound  # get's own `vault` confines the item to that vault at the Center
        elif not items:
            raise MemoriesError(
                "scope_denied", f"In saas mode `{op_name}` cannot be confined to this grant's vaults, so agents cannot use it."
            )
        for ref in items:
            self._require_item_in(ref, names)
        return bound

    def _require_item_in(self, ref: str, names: tuple[str, ...]) -> None:
        for name in names:
            try:
                self.rpc({"op": "get", "id": ref, "vault": name})
            except MemoriesError as exc:
                if exc.code == "not_found":
                    continue
                raise
            return
        raise MemoriesError("scope_denied", "This grant does not cover the vault that item is in.")

    def rpc(self, body: dict[str, Any]) -> Any:
        center = self.saas()
        if center is None:
            raise MemoriesError("center_unavailable")
        return self.link(center).rpc(body, self._token(center))

    @staticmethod
    def _token(center: CenterConfig) -> str:
        token = os.environ.get(center.token_env or "", "")
        if not token:
            raise MemoriesError(
                "unauthorized",
                f"saas mode: the environment variable {center.token_env} (token_env) holding the Center's bearer "
                "token is not set in the engine's environment.",
            )
        return token


def _without_hidden(result: dict[str, Any], hidden: frozenset[str]) -> dict[str, Any]:
    """Kinds an agent's grant hides (transcripts without the grant's leave, files) never reach it
    from the Center either: a hidden item is refused, hidden rows are left out of lists."""
    if result.get("kind") in hidden:
        raise MemoriesError("scope_denied", "This grant does not include that kind of item.")
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, list):
            value = [x for x in value if not (isinstance(x, dict) and x.get("kind") in hidden)]
        out[key] = value
    return out


_RUNTIMES: weakref.WeakKeyDictionary[Service, CenterRuntime] = weakref.WeakKeyDictionary()
_RUNTIMES_LOCK = threading.Lock()


def runtime_of(service: Service) -> CenterRuntime:
    with _RUNTIMES_LOCK:
        runtime = _RUNTIMES.get(service)
        if runtime is None:
            runtime = _RUNTIMES[service] = CenterRuntime(service)
        return runtime
