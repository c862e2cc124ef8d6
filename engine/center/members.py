"""Named grants of a Center, kept in DIR/members.json (owner-only; CT-2).

A grant is what a team member's daemon (saas mode) or agent presents as its bearer token.
Like an MCP grant (engine/agents/grants.py) only the token's SHA-256 and a masked hint are
kept: the token is 256 random bits, shown once. Each grant names its scope (one of
``engine.agents.grants.SCOPES``), its vault set, its expiry, the credential generation it was
issued in, and the id of the signed ticket issued with it (``/v1/tickets/{id}``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from engine.agents.grants import SCOPES
from engine.center.datadir import check_owner_only, write_private
from engine.errors import MemoriesError

__all__ = ["Member", "Members", "GRANT_TOKEN_PREFIX", "new_grant_token"]

GRANT_TOKEN_PREFIX = "mcg_"  # noqa: S105 (a public prefix)
_MAX_GRANTS = 10_000


def new_grant_token() -> str:
    return GRANT_TOKEN_PREFIX + secrets.token_urlsafe(32)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Member:
    name: str
    scope: str
    vaults: tuple[str, ...]
    token_sha256: str
    hint: str
    generation: int
    created_ms: int
    ticket_id: str
    kind: str = "grant"
    expires_ms: int | None = None
    revoked_ms: int | None = None
    device: str | None = None

    def status(self, now_ms: int) -> str:
        if self.revoked_ms is not None:
            return "revoked"
        if self.expires_ms is not None and now_ms >= self.expires_ms:
            return "expired"
        return "valid"

    def view(self) -> dict[str, Any]:
        """What ``grant list`` shows: never the token or its digest."""
        return {
            "name": self.name,
            "kind": self.kind,
            "scope": self.scope,
            "vaults": list(self.vaults),
            "expires_ms": self.expires_ms,
            "revoked": self.revoked_ms is not None,
            "hint": self.hint,
            "generation": self.generation,
            "ticket_id": self.ticket_id,
        }

    @classmethod
    def from_json(cls, data: Any) -> Member:
        if not isinstance(data, dict):
            raise ValueError("a grant is not an object")
        vaults = data["vaults"]
        if data["scope"] not in SCOPES or not isinstance(vaults, list) or not all(isinstance(v, str) for v in vaults):
            raise ValueError("a grant has an invalid scope or vault list")

        def opt_int(key: str) -> int | None:
            value = data.get(key)
            if value is not None and not isinstance(value, int):
                raise ValueError(key)
            return value

        return cls(
            name=str(data["name"]),
            scope=str(data["scope"]),
            vaults=tuple(vaults),
            token_sha256=str(data["token_sha256"]),
            hint=str(data["hint"]),
            generation=int(data["generation"]),
            created_ms=int(data["created_ms"]),
            ticket_id=str(data["ticket_id"]),
            kind=str(data.get("kind", "grant")),
            expires_ms=opt_int("expires_ms"),
            revoked_ms=opt_int("revoked_ms"),
            device=data.get("device") if isinstance(data.get("device"), str) else None,
        )


class Members:
    """members.json, read at start (permissions checked) and rewritten on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._members: list[Member] = self._read()

    def _read(self) -> list[Member]:
        check_owner_only(self.path, "The members file")
        try:
            data = json.loads(self.path.read_text("utf-8"))
            if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("grants"), list):
                raise ValueError("shape")
            return [Member.from_json(item) for item in data["grants"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MemoriesError("invalid_input", f"members.json could not be read ({type(exc).__name__}).") from None

    def _save(self, members: list[Member]) -> None:
        body = {"v": 1, "grants": [asdict(m) | {"vaults": list(m.vaults)} for m in members]}
        write_private(self.path, (json.dumps(body, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        self._members = members

    def all(self) -> list[Member]:
        return list(self._members)

    def replace_all(self, members: list[Member]) -> None:
        """A standby's copy of its primary's grants (CT-4)."""
        with self._lock:
            self._save(members)

    def add(self, member: Member) -> None:
        with self._lock:
            if any(m.name == member.name and m.revoked_ms is None for m in self._members):
                raise MemoriesError("grant_exists", "An active Center grant with that name already exists; revoke it first.")
            if len(self._members) >= _MAX_GRANTS:
                raise MemoriesError("invalid_input", "The Center holds too many grants; remove revoked ones first.")
            self._save([*self._members, member])

    def revoke(self, name: str, now_ms: int) -> Member:
        with self._lock:
            found = [m for m in self._members if m.name == name and m.revoked_ms is None]
            if not found:
                raise MemoriesError("not_found", "No active Center grant has that name.")
            self._save([replace(m, revoked_ms=now_ms) if m in found else m for m in self._members])
            return found[0]

    def authenticate(self, token: str) -> Member:
        """The grant whose digest matches ``token`` (revoked and expired ones included: the
        caller says which refusal applies). Every grant is compared, no early exit."""
        digest = _digest(token)
        match: Member | None = None
        for member in self._members:
            if hmac.compare_digest(member.token_sha256, digest) and (match is None or member.revoked_ms is None):
                match = member
        if match is None:
            raise MemoriesError("unauthorized", "The Center grant token is missing, wrong or revoked.")
        return match

    def by_ticket(self, ticket_id: str) -> Member | None:
        return next((m for m in self._members if m.ticket_id == ticket_id), None)


def token_sha256(token: str) -> str:
    return _digest(token)


def token_hint(token: str) -> str:
    return f"{token[: len(GRANT_TOKEN_PREFIX) + 4]}…{token[-4:]}"
