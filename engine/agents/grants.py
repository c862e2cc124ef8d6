"""MCP grants (AG-2): tokens, scopes, capabilities, and the records that store them.

A grant is created under local elevation and stored as encrypted extra records in
the vault's store (``{"t": "mcp_grant", ...}``); only a SHA-256 digest of the token is
kept (the token is 256 random bits, so a slow KDF would add nothing) plus a masked
hint (``mem_ab12…wxyz``). Revocation appends ``{"t": "mcp_grant_revoke", ...}``;
last use is kept in memory and persisted lazily as ``{"t": "mcp_grant_used", ...}``.

Nothing here talks to a socket or the SDK: this module is pure logic over records,
used by the daemon's handlers (``engine.service.handlers.mcp_grants``) and by unit tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from engine.errors import MemoriesError

__all__ = [
    "Scope",
    "SCOPES",
    "CAPABILITIES",
    "OP_CAPABILITY",
    "Grant",
    "new_token",
    "token_digest",
    "token_hint",
    "capability_of",
    "require_capability",
    "load_grants",
    "authenticate",
    "GRANT_KIND",
    "REVOKE_KIND",
    "USED_KIND",
    "TOKEN_PREFIX",
]

GRANT_KIND: Final = "mcp_grant"
REVOKE_KIND: Final = "mcp_grant_revoke"
USED_KIND: Final = "mcp_grant_used"
TOKEN_PREFIX: Final = "mem_"  # noqa: S105  (the public token prefix)

Scope = Literal["read", "write", "read_write", "read_write_delete", "allow_all"]
SCOPES: Final[tuple[str, ...]] = ("read", "write", "read_write", "read_write_delete", "allow_all")

# What each scope may do. "other" covers ops on the MCP allowlist that this table does
# not classify (a feature added later): only allow_all reaches them, so a new op is
# never silently granted to a narrower scope.
# "notebook": the agent's own private notebook (AG-13), which every scope has: it changes
# nothing in the user's memories and no one else reads it but the user.
CAPABILITIES: Final[dict[str, frozenset[str]]] = {
    "read": frozenset({"read", "notebook"}),
    "write": frozenset({"write", "notebook"}),
    "read_write": frozenset({"read", "write", "notebook"}),
    "read_write_delete": frozenset({"read", "write", "delete", "notebook"}),
    "allow_all": frozenset({"read", "write", "delete", "other", "notebook"}),
}

# Engine op → the capability an MCP grant needs for it. The op must *also* be on the
# registry's MCP allowlist (``mcp_allowed=True``): that check comes first and no scope,
# not even allow_all, gets around it (DesktopStatus, credentials, jobs, proxies, remote).
OP_CAPABILITY: Final[dict[str, str]] = {
    # reads
    "get": "read",
    "list": "read",
    "history": "read",
    "diff": "read",
    "search": "read",
    "retrieve": "read",
    "ask": "read",
    "rag_status": "read",
    "card_read": "read",
    "connections": "read",
    "graph": "read",
    "recall_connected": "read",
    "recall_turn": "read",  # AG-5, when transcripts land
    "recall_session": "read",
    # writes
    "put": "write",
    "edit": "write",
    "card_write": "write",
    "card_link": "write",
    "card_link_many": "write",
    "card_unlink": "write",
    "annotate": "write",  # AG-7: a note on a memory or card (a new revision, body unchanged)
    "conclusion_write": "write",  # AG-9: a conclusion citing transcript turns (MCP memory_conclude)
    # deletes
    "delete": "delete",
    # the agent's own notebook (AG-13)
    "notebook_write": "notebook",
    "notebook_read": "notebook",
    "notebook_list": "notebook",
    "notebook_search": "notebook",
    "notebook_forget": "notebook",
    "scratch_read": "notebook",
    "scratch_write": "notebook",
}


def capability_of(op_name: str) -> str:
    return OP_CAPABILITY.get(op_name, "other")


def require_capability(scope: str, op_name: str) -> None:
    """AG-2: raise ``scope_denied`` unless ``scope`` grants what ``op_name`` needs."""
    needed = capability_of(op_name)
    if needed not in CAPABILITIES.get(scope, frozenset()):
        raise MemoriesError("scope_denied", f"This grant's scope ({scope}) does not allow {needed} operations.")


def new_token() -> str:
    """A fresh grant token: the prefix plus 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def token_hint(token: str) -> str:
    """The masked display form: prefix plus four characters, an ellipsis, the last four."""
    head = token[: len(TOKEN_PREFIX) + 4]
    return f"{head}…{token[-4:]}"


@dataclass(frozen=True)
class Grant:
    grant_id: bytes
    name: str
    scope: str
    vaults: tuple[bytes, ...]
    token_hash: bytes
    hint: str
    created_ms: int
    revoked_ms: int | None = None
    used_ms: int | None = None
    # AG-5: may this agent read imported transcripts (recall_turn/recall_session, and transcript
    # hits in search/retrieve/ask)? Off unless the grant was created with it.
    transcripts: bool = False
    # AG-11: with transcripts, only the sessions whose working directory is inside this project
    # (an absolute path); None: every session.
    transcripts_project: str | None = None
    # CT-1: a grant made from a Center ticket (`memories center ticket apply`) is bound to the
    # ticket: its id (asked at the Center on use, so a revocation there reaches it), expiry,
    # credential generation and the Center's fingerprint. In saas mode its vaults are the
    # Center's, kept by name (``vault_names``; ``vaults`` is empty).
    ticket_id: str | None = None
    expires_ms: int | None = None
    generation: int | None = None
    center: str | None = None
    vault_names: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.revoked_ms is None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Grant:
        return cls(
            grant_id=bytes(record["grant_id"]),
            name=str(record["name"]),
            scope=str(record["scope"]),
            vaults=tuple(bytes(v) for v in record["vaults"]),
            token_hash=bytes(record["token_hash"]),
            hint=str(record["hint"]),
            created_ms=int(record["created_ms"]),
            transcripts=record.get("transcripts") is True,
            transcripts_project=str(record["transcripts_project"]) if record.get("transcripts_project") else None,
            ticket_id=str(record["ticket_id"]) if "ticket_id" in record else None,
            expires_ms=int(record["expires_ms"]) if "expires_ms" in record else None,
            generation=int(record["generation"]) if "generation" in record else None,
            center=str(record["center"]) if "center" in record else None,
            vault_names=tuple(str(v) for v in record.get("vault_names", ())),
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "t": GRANT_KIND,
            "grant_id": self.grant_id,
            "name": self.name,
            "scope": self.scope,
            "vaults": list(self.vaults),
            "token_hash": self.token_hash,
            "hint": self.hint,
            "created_ms": self.created_ms,
            **({"transcripts": True} if self.transcripts else {}),
            **({"transcripts_project": self.transcripts_project} if self.transcripts_project else {}),
            **(
                {
                    "ticket_id": self.ticket_id,
                    "expires_ms": self.expires_ms,
                    "generation": self.generation,
                    "center": self.center,
                    "vault_names": list(self.vault_names),
                }
                if self.ticket_id is not None
                else {}
            ),
        }


def load_grants(extra_records: dict[str, list[tuple[int, dict[str, Any]]]]) -> list[Grant]:
    """Every grant ever created (oldest first), with revocation and persisted last use."""
    revoked: dict[bytes, int] = {}
    for _seq, record in extra_records.get(REVOKE_KIND, []):
        gid = bytes(record["grant_id"])
        revoked.setdefault(gid, int(record["revoked_ms"]))
    used: dict[bytes, int] = {}
    for _seq, record in extra_records.get(USED_KIND, []):
        gid = bytes(record["grant_id"])
        used[gid] = max(used.get(gid, 0), int(record["used_ms"]))
    grants = []
    for _seq, record in extra_records.get(GRANT_KIND, []):
        base = Grant.from_record(record)
        grants.append(dataclasses.replace(base, revoked_ms=revoked.get(base.grant_id), used_ms=used.get(base.grant_id)))
    return grants


def authenticate(grants: Iterable[Grant], token: str) -> Grant:
    """The active grant whose digest matches ``token``, compared in constant time.

    Every active grant is compared (no early exit), so timing does not reveal which
    grant, if any, came close. Errors say only ``unauthorized``: never which part failed.
    """
    if not token.startswith(TOKEN_PREFIX):
        raise MemoriesError("unauthorized")
    digest = token_digest(token)
    found: Grant | None = None
    for grant in grants:
        if grant.active and hmac.compare_digest(digest, grant.token_hash) and found is None:
            found = grant
    if found is None:
        raise MemoriesError("unauthorized")
    return found
