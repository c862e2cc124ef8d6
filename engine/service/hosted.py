"""The Center's hosted store (CT-2, CT-3): the engine's own Service over DIR/store, in-process.

The Center serves content with the daemon's dispatcher, not a second implementation: every
``/v1/rpc`` request goes through ``Service.dispatch`` as a caller of the ``mcp`` surface, after
the very checks an MCP call passes (engine/service/handlers/mcp_grants.py): the op is on the
registry's MCP allowlist, the grant's scope gives its capability (``OP_CAPABILITY``), and the
target vault (or the vault of the item an ID names) is in the grant's vault set. Transcripts
and files stay out of reach, as for an MCP grant without transcripts.

The store is the daemon's format: SQLite in DIR/store/store.db, or the same sealed rows in a
PostgreSQL database (engine/store/postgres.py). It is opened with the operator's password:
this is server-side encryption, and the operator can read hosted content.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from engine.agents import grants as g
from engine.config import EngineConfig, Paths
from engine.crypto.kdf import calibrate
from engine.crypto.keys import new_identity
from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.registry import OPS
from engine.service.service import Service
from engine.store.postgres import PgStoreFile, create_pg_store, is_postgres_url, pg_pool, pg_store_exists
from engine.vault.policy import owner_policy

__all__ = ["HostedStore"]

_ADMIN = Caller(namespace="center:admin", surface="ipc")
# As for an MCP grant without transcripts: these kinds never reach a Center grant.
_HIDDEN = frozenset({"transcript", "file"})


class HostedStore:
    """One Service over the hosted store; thread-safe (the Service serializes its ops)."""

    def __init__(self, store_dir: Path, store_url: str | None) -> None:
        from engine.service import handlers  # noqa: F401  (registers every op)

        self.kind = "postgresql" if store_url and is_postgres_url(store_url) else "sqlite"
        self._pool: Any = pg_pool(store_url) if store_url and self.kind == "postgresql" else None
        # No idle auto-lock: a server stays unlocked until its operator locks it.
        self.service = Service(Paths(store_dir), EngineConfig(idle_lock_seconds=float("inf")))
        self._init_lock = threading.Lock()
        if self._pool is not None and pg_store_exists(self._pool):
            self.service.store = PgStoreFile.open_pool(self._pool, store_dir / "postgresql")

    # -- state -------------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self.service.store is not None

    @property
    def locked(self) -> bool:
        return self.service.state is None

    def counts(self) -> dict[str, int]:
        state = self.service.state
        if state is None:
            return {}
        return {"vaults": len(state.vaults), "items": state.index.visible_count}

    def vault_names(self) -> list[str]:
        state = self.service.state
        return sorted(v.name for v in state.vaults.values()) if state is not None else []

    # -- operator ops ----------------------------------------------------------------------
    def unlock(self, password: str) -> bool:
        """Unlock, creating the store at the first unlock; True when it was just created."""
        with self._init_lock:
            if self.service.store is None:
                self._create(password)
                return True
        self.service.dispatch({"op": "unlock", "password": password}, _ADMIN)
        return False

    def _create(self, password: str) -> None:
        if self._pool is None:
            self.service.dispatch({"op": "init", "password": password}, _ADMIN)
            return
        # PostgreSQL: what the `init` op does for a file, with the store in the database.
        service = self.service
        with service.lock:
            identity = new_identity()
            vault_id = os.urandom(16)
            vault_record = {
                "t": "vault",
                "vault_id": vault_id,
                "name": "default",
                "default": True,
                "policy": owner_policy(identity, vault_id).to_record(),
                "epoch_keys": [{"epoch": 1, "key": os.urandom(32)}],
            }
            master = create_pg_store(self._pool, password, calibrate(), [{"t": "identity", **identity.to_record()}, vault_record])
            store = PgStoreFile.open_pool(self._pool, service.paths.home / "postgresql")
            store.install_master(master)
            service.store = store
            service.state = service.load_state(store)
            service.vault.commit(service.state, [], [], [service.vault.audit_record(service.state, "init", _ADMIN, outcome="ok")])

    def lock(self) -> None:
        if self.service.store is not None:
            self.service.lock_now("center lock")

    def ensure_vaults(self, names: list[str]) -> None:
        """Create the named vaults that do not exist yet (a grant may name a new team vault)."""
        existing = set(self.vault_names())
        for name in names:
            if name not in existing:
                self.service.dispatch({"op": "vault_new", "name": name}, _ADMIN)

    def close(self) -> None:
        self.lock()
        store = self.service.store
        if store is not None:
            store.close()
        if self._pool is not None:
            self._pool.close()

    # -- the content RPC --------------------------------------------------------------------
    def call(self, name: str, scope: str, vaults: tuple[str, ...], body: dict[str, Any]) -> dict[str, Any]:
        """Run ``body`` for a grant, checked exactly as an MCP call is (module docstring)."""
        from engine.service.handlers.mcp_grants import check_grant_transcripts, check_grant_vault, scrub_result

        op_name = body.get("op")
        if not isinstance(op_name, str):
            raise MemoriesError("invalid_request", "The request has no `op` string.")
        spec = OPS.get(op_name)
        if spec is None:
            raise MemoriesError("unknown_op")
        if not spec.mcp_allowed:
            raise MemoriesError("permission_denied", "This operation is not available to a Center grant.")
        g.require_capability(scope, op_name)
        service = self.service
        with service.lock:
            state = service.require_unlocked()
            by_name = {v.name: v.vault_id for v in state.vaults.values()}
            grant = g.Grant(
                grant_id=b"",
                name=name,
                scope=scope,
                vaults=tuple(by_name[v] for v in vaults if v in by_name),
                token_hash=b"",
                hint="",
                created_ms=0,
            )
            ref = body.get("id")
            if "vault" not in body and isinstance(ref, str):
                # An op on one item (get, edit, delete …) acts in that item's vault; a Center's
                # grants rarely cover the default vault, which an MCP call would assume here.
                try:
                    entry = state.index.resolve(ref)
                except MemoriesError:
                    entry = None  # the op itself answers not_found / ambiguous_id
                if entry is not None and entry.vault_id not in grant.vaults:
                    raise MemoriesError("scope_denied", "This grant does not cover the vault that item is in.")
            else:
                check_grant_vault(state, grant, body)
            check_grant_transcripts(service, state, grant, op_name, body)
            generation = service.session.generation
        result = service.dispatch(body, Caller(namespace=f"center:{name}", surface="mcp", hidden_kinds=_HIDDEN))
        if service.session.generation != generation:
            raise MemoriesError("locked")  # locked while it ran: no delivery (ST-10)
        return dict(scrub_result(result))

    # -- replication (CT-4) -----------------------------------------------------------------
    def replica_rows(self, after: int, content_after: int, limit: int) -> dict[str, Any]:
        store = self.service.store
        if store is None:
            raise MemoriesError("not_initialized", "The Center's hosted store does not exist yet.")
        return store.replica_rows(after, content_after, limit)
