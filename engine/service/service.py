"""The Service: owns the store, the unlocked state and the one dispatcher (API-1, ST-5, ST-10).

All state hangs off one ``Service`` object (no globals). Ops run under the
service lock except the few registered ``lock_free`` (status, info, and the
password ops, which run the slow KDF outside the lock and take it afterwards).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.config import EngineConfig, Paths
from engine.crypto.canonical import domain_bytes
from engine.crypto.chunks import ChunkError
from engine.crypto.keys import DeviceIdentity, SignatureError, sign
from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.integrity import AUDIT_TAG, BackgroundVerifier, UnlockWork, verify_all
from engine.service.memory import gc_paused, release_free_memory
from engine.service.registry import OPS, OpSpec
from engine.service.requests import Request
from engine.service.session import Session
from engine.store.database import StoreFile
from engine.vault.index import AssetEntry, AssetIndex
from engine.vault.policy import Policy
from engine.vault.revision import Revision

__all__ = ["Service", "Unlocked", "VaultKeys", "AUDIT_TAG", "EXTENSIONS", "UNLOCK_ATTEMPTS_FILE"]

log = logging.getLogger("memories.engine")

# Spent password-attempt slots (timestamps only), so a restart does not reset the budget.
UNLOCK_ATTEMPTS_FILE = "password-attempts.json"
INDEX_WARNING = (
    "The change was saved, but updating an in-memory index failed; "
    "search or links may miss it until the next unlock. Do not repeat the change."
)
SAVED_PARTLY = "The engine hit an unexpected error after saving part of this request; check before repeating it."

# Setup functions of feature packages, called once per Service (register with
# ``EXTENSIONS.append(setup)`` at import time of the feature's handler module).
EXTENSIONS: list[Callable[[Service], None]] = []


@dataclass
class VaultKeys:
    vault_id: bytes
    name: str
    policy: Policy
    epoch_keys: dict[int, bytes]

    @property
    def current_key(self) -> bytes:
        return self.epoch_keys[self.policy.epoch]


@dataclass
class Unlocked:
    """Everything that exists only while the vault is unlocked; dropped by lock."""

    identity: DeviceIdentity
    vaults: dict[bytes, VaultKeys]
    default_vault: bytes
    index: AssetIndex = field(default_factory=AssetIndex)
    audit_entries: int = 0
    extra_records: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)

    @property
    def vault(self) -> VaultKeys:
        return self.vaults[self.default_vault]


@dataclass
class _Dispatch:
    """What one request committed and which follow-up steps failed (an honest answer)."""

    op: str
    revisions: list[Revision] = field(default_factory=list)
    other_records: int = 0  # non-audit records committed (grants, links, sessions …)
    warnings: list[dict[str, str]] = field(default_factory=list)


class Service:
    def __init__(self, paths: Paths, config: EngineConfig) -> None:
        self.paths = paths
        self.config = config
        self.session = Session(
            idle_seconds=config.idle_lock_seconds,
            sudo_seconds=config.sudo_seconds,
            max_failures_per_minute=config.max_password_failures_per_minute,
            failures_file=paths.home / UNLOCK_ATTEMPTS_FILE,
        )
        self.lock = threading.RLock()
        self.store: StoreFile | None = None
        self.state: Unlocked | None = None
        self.started = time.time()
        self.shutdown_event = threading.Event()
        self._decoder_cache: tuple[int, Any] | None = None
        # The request each worker thread is running (None outside dispatch, e.g. timers).
        self._current = threading.local()
        # Feature packages (search, cards, mcp, remote …) subscribe here instead of the
        # core calling them: the core stays ignorant of features (imports point down).
        self.on_unlock: list[Callable[[Unlocked], None]] = []
        # Called (without the service lock) when an unlock starts, before the KDF, and once by
        # the daemon shortly after it starts: a feature can warm what it will need (the KDF
        # leaves the other core idle for ~0.5 s). Must return at once (start a thread).
        self.before_unlock: list[Callable[[], None]] = []
        self.on_commit: list[Callable[[Unlocked, list[Revision], list[dict[str, Any]]], None]] = []
        self.on_lock: list[Callable[[], None]] = []
        # DesktopStatus contributors: each returns counts only, e.g. {"connections": 2,
        # "attention": True}; called without the service lock, so they read snapshots.
        self.status_contributors: list[Callable[[], dict[str, int | bool]]] = []
        self.verifier = BackgroundVerifier()
        # Work an unlock starts that users wait for; the background signature check yields to it.
        self.unlock_work = UnlockWork()
        for setup in EXTENSIONS:
            setup(self)
        if paths.store.exists():
            self.store = StoreFile.open(paths.store)

    # -- dispatch ----------------------------------------------------------------------
    def _decoder(self) -> Any:
        if self._decoder_cache is None or self._decoder_cache[0] != len(OPS):
            union = tuple(spec.request for spec in OPS.values())
            self._decoder_cache = (len(OPS), union)
        return self._decoder_cache[1]

    def decode(self, body: dict[str, Any]) -> tuple[OpSpec, Request]:
        op_name = body.get("op")
        if not isinstance(op_name, str):
            raise MemoriesError("invalid_request", "The request has no `op` string.")
        spec = OPS.get(op_name)
        if spec is None:
            raise MemoriesError("unknown_op", "The request names an operation this engine does not know.")
        try:
            request = msgspec.convert(body, type=spec.request)
        except msgspec.ValidationError as exc:
            text = str(exc)
            # msgspec's messages name the field and the expected type, never the value.
            if text.startswith("Object contains unknown field"):
                raise MemoriesError("unknown_field", text.replace("Object contains", "The request contains") + ".") from None
            raise MemoriesError("invalid_request", f"Invalid request: {text}.") from None
        return spec, request

    def dispatch(self, body: dict[str, Any], caller: Caller) -> dict[str, Any]:
        spec, request = self.decode(body)
        if caller.surface == "mcp" and not spec.mcp_allowed:
            raise MemoriesError("permission_denied", "This operation is not available to agents.")
        current = _Dispatch(op=str(body["op"]))
        outer = getattr(self._current, "dispatch", None)
        self._current.dispatch = current
        try:
            result = self._run(spec, request, caller)
        except Exception as exc:
            raise self._after_commit_error(current, exc) from None
        finally:
            self._current.dispatch = outer
            if outer is not None:  # a nested dispatch (MCP's call_op): the outer request saved it too
                outer.revisions.extend(current.revisions)
                outer.other_records += current.other_records
                outer.warnings.extend(w for w in current.warnings if w not in outer.warnings)
            else:
                self.session.settle_thread_attempt()  # refund a password slot the handler did not spend
        if current.warnings:
            shown = result.get("warnings", [])
            result = {**result, "warnings": [*shown, *(w for w in current.warnings if w not in shown)]}
        return result

    def _after_commit_error(self, current: _Dispatch, exc: Exception) -> Exception:
        """The error a caller gets: it never says "nothing was changed" after a commit."""
        if current.revisions:
            code = exc.code if isinstance(exc, MemoriesError) else "internal"
            log.error("op=%s failed after commit error=%s type=%s", current.op, code, type(exc).__name__)
            state = self.state
            committed = [{"id": rev.asset_id.hex(), "revision": rev.rev_id.hex()} for rev in current.revisions]
            shown = ", ".join(
                f"{self._short_id(state, rev.asset_id)} revision {rev.rev_id.hex()[:12]}" for rev in current.revisions[:3]
            )
            more = f" and {len(current.revisions) - 3} more" if len(current.revisions) > 3 else ""
            return MemoriesError(
                "committed_with_errors",
                f"The change was saved ({shown}{more}), but a follow-up step failed ({code}); do not repeat it.",
                committed=committed,
                cause=code,
            )
        if isinstance(exc, MemoriesError):
            return exc
        # Only the type: an exception's text could carry request data.
        log.error("op=%s internal error type=%s", current.op, type(exc).__name__)
        return MemoriesError("internal", SAVED_PARTLY if current.other_records else None)

    @staticmethod
    def _short_id(state: Unlocked | None, asset_id: bytes) -> str:
        if state is not None and asset_id in state.index.assets:
            return state.index.short_id(asset_id)
        return asset_id.hex()[:12]

    def _run(self, spec: OpSpec, request: Request, caller: Caller) -> dict[str, Any]:
        if spec.lock_free:
            return spec.handler(self, request, caller)
        with self.lock:
            generation = self.session.generation
            if spec.needs_unlock:
                self.require_unlocked()
            if spec.needs_elevation and not self.session.is_elevated(caller.namespace):
                raise MemoriesError("elevation_required")
            if spec.touches_idle:
                self.session.touch()
            result = spec.handler(self, request, caller)
            if spec.needs_unlock and self.session.generation != generation:
                # ST-10: the vault was locked while this ran; drop the result.
                raise MemoriesError("locked")
            return result

    # -- state helpers -------------------------------------------------------------------
    def require_unlocked(self) -> Unlocked:
        if self.store is None:
            raise MemoriesError("not_initialized")
        if self.state is None or not self.store.unlocked:
            raise MemoriesError("locked")
        return self.state

    def require_store(self) -> StoreFile:
        if self.store is None:
            raise MemoriesError("not_initialized")
        return self.store

    def lock_now(self, reason: str) -> None:
        with self.lock:
            if self.store is not None:
                self.store.wipe()
            self.state = None
            self.session.bump_generation()
            for listener in self.on_lock:
                listener()
            release_free_memory()
            log.info("locked (%s)", reason)

    def check_idle(self) -> None:
        """Called periodically by the daemon: idle auto-lock (ST-10)."""
        if self.state is not None and self.session.idle_expired():
            self.lock_now("idle")

    # -- loading -------------------------------------------------------------------------
    def load_state(self, store: StoreFile) -> Unlocked:
        """Decrypt and authenticate every record; check certificate and policy of each revision."""
        with gc_paused():
            return self._load_state(store)

    def _load_state(self, store: StoreFile) -> Unlocked:
        loaded = store.load()
        identity: DeviceIdentity | None = None
        vaults: dict[bytes, VaultKeys] = {}
        default_vault = b""
        index = AssetIndex()
        audit = 0
        extra: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        revisions: list[Revision] = []
        audits: list[dict[str, Any]] = []
        try:
            for seq, record in loaded.records:
                kind = record.get("t")
                if kind == "identity":
                    identity = DeviceIdentity.from_record(record)
                elif kind == "vault":
                    policy = Policy.from_record(record["policy"])
                    keys = {int(e["epoch"]): bytes(e["key"]) for e in record["epoch_keys"]}
                    vault = VaultKeys(bytes(record["vault_id"]), str(record["name"]), policy, keys)
                    vaults[vault.vault_id] = vault
                    if record.get("default"):
                        default_vault = vault.vault_id
                elif kind == "revision":
                    if identity is None:
                        raise MemoriesError("store_corrupt", "A revision precedes the device identity.")
                    rev = Revision.from_record(record, seq)
                    self._check_revision(rev, identity, vaults)
                    revisions.append(rev)
                elif kind == "audit":
                    audits.append(record)
                else:
                    extra.setdefault(str(kind), []).append((seq, record))
            if identity is None:
                raise MemoriesError("store_corrupt", "The store has no device identity.")
            if self.verifier.failed:
                # An earlier background check in this process found a bad signature: no
                # unlock until a full check passes again (see engine/service/integrity.py).
                verify_all(identity, revisions, audits)
                self.verifier.failed = False
            index.begin_bulk_load()
            for rev in revisions:
                index.apply(rev)
            audit = len(audits)
        except (SignatureError, KeyError, TypeError, ValueError) as exc:
            raise MemoriesError("store_corrupt", "A signed record failed verification.") from exc
        if identity is None or default_vault not in vaults:
            raise MemoriesError("store_corrupt", "The store has no identity or default vault.")
        state = Unlocked(identity, vaults, default_vault, index, audit, extra)
        for listener in self.on_unlock:
            listener(state)
        # The AEAD and the checkpoint chain authenticated every row above; the Ed25519
        # re-check is defence in depth and runs after unlock answers (integrity.py says why).
        generation = self.session.generation
        self.verifier.start(
            identity,
            revisions,
            audits,
            # A lock bumps the generation: the check then stops and drops its references to the
            # revisions (with their decrypted summary caches) instead of holding them (ST-10).
            still_current=lambda: self.session.generation == generation,
            on_failure=lambda: self._integrity_failure(state),
            after=self.unlock_work,
        )
        return state

    def _integrity_failure(self, state: Unlocked) -> None:
        """Background verification found a bad signature: lock now (ST-10 wipes everything)."""
        with self.lock:  # waits for the unlock handler to publish ``state``
            if self.state is state:
                self.lock_now("integrity check failed")

    @staticmethod
    def _check_revision(rev: Revision, identity: DeviceIdentity, vaults: dict[bytes, VaultKeys]) -> None:
        """Policy, device and certificate checks (the signature is verified in bulk)."""
        vault = vaults.get(bytes(rev.body["vault"]))
        if vault is None:
            raise SignatureError("revision of an unknown vault")
        if rev.body["policy"] != vault.policy.head or not vault.policy.authorizes_device(rev.author):
            raise SignatureError("revision not authorized by the vault policy")
        if rev.author == identity.device_pub and rev.body["cert"] != identity.certificate_hash:
            raise SignatureError("revision names a different device certificate")

    def summary_of(self, state: Unlocked, rev: Revision) -> dict[str, Any]:
        vault = state.vaults[bytes(rev.body["vault"])]
        try:
            return rev.open_summary(vault.epoch_keys[int(rev.body["epoch"])])
        except (ChunkError, KeyError) as exc:
            raise MemoriesError("store_corrupt", "A revision summary failed authentication.") from exc

    def body_of(self, state: Unlocked, rev: Revision) -> str:
        store = self.require_store()
        vault = state.vaults[bytes(rev.body["vault"])]
        try:
            plain = rev.open_body(vault.epoch_keys[int(rev.body["epoch"])], store.read_content(rev.body_seqs))
        except (ChunkError, KeyError) as exc:
            raise MemoriesError("store_corrupt", "A revision body failed authentication.") from exc
        return plain.decode("utf-8")

    def _remember_content_key(self, state: Unlocked, entry: AssetEntry) -> None:
        if state.index.content_keys is None or state.index.is_deleted(entry):
            return
        for rev in state.index.head_revisions(entry):
            key = self.summary_of(state, rev).get("content_key")
            if isinstance(key, str):
                state.index.content_keys[key] = entry.asset_id

    def _content_keys(self, state: Unlocked) -> dict[str, bytes]:
        if state.index.content_keys is None:
            state.index.content_keys = {}
            for entry in state.index.assets.values():
                self._remember_content_key(state, entry)
        return state.index.content_keys

    def has_content(self, state: Unlocked, key: str) -> bool:
        """Is there a current asset whose head has exactly this content key?"""
        asset_id = self._content_keys(state).get(key)
        entry = state.index.assets.get(asset_id) if asset_id else None
        if entry is None or state.index.is_deleted(entry):
            return False
        return any(self.summary_of(state, r).get("content_key") == key for r in state.index.head_revisions(entry))

    # -- committing ----------------------------------------------------------------------
    def audit_record(self, state: Unlocked, op: str, caller: Caller, **fields: Any) -> dict[str, Any]:
        """An encrypted, signed audit entry. It records ops and asset IDs, never content."""
        entry = {
            "v": 1,
            "op": op,
            "caller": caller.namespace,
            "surface": caller.surface,
            "ts_ms": int(time.time() * 1000),
            "nonce": os.urandom(8),
            **fields,
        }
        signed = domain_bytes(AUDIT_TAG, 1, entry)
        return {"t": "audit", "signed": signed, "sig": sign(state.identity.device_key, signed)}

    def commit(
        self,
        state: Unlocked,
        revisions: list[Revision],
        content_rows: list[tuple[int, bytes]],
        extra_records: list[dict[str, Any]],
    ) -> None:
        """Persist in one transaction, then (only then) update memory (ST-5)."""
        store = self.require_store()
        records = [rev.to_record() for rev in revisions] + extra_records
        seqs = store.commit(records, content_rows)
        # Durable from here on: the request's answer must say so, whatever fails next.
        current: _Dispatch | None = getattr(self._current, "dispatch", None)
        if current is not None:
            current.revisions.extend(revisions)
            current.other_records += sum(1 for r in extra_records if r.get("t") != "audit")
        for rev, seq in zip(revisions, seqs, strict=False):
            rev.seq = seq
            state.index.apply(rev)
            self._remember_content_key(state, state.index.assets[rev.asset_id])
        state.audit_entries += sum(1 for r in extra_records if r.get("t") == "audit")
        for record, seq in zip(extra_records, seqs[len(revisions) :], strict=True):
            kind = str(record.get("t"))
            if kind != "audit":
                state.extra_records.setdefault(kind, []).append((seq, record))
        for listener in self.on_commit:
            try:
                listener(state, revisions, extra_records)
            except Exception as exc:  # a feature hook must not turn a saved change into an error
                log.error("on_commit hook failed type=%s", type(exc).__name__)
                if current is not None and not any(w["code"] == "index_update_failed" for w in current.warnings):
                    current.warnings.append({"code": "index_update_failed", "message": INDEX_WARNING})

    def commit_intent(self, state: Unlocked, op: str, caller: Caller, assets: list[bytes]) -> None:
        """Read/execution intents are committed before delivery: a disk failure blocks it."""
        self.commit(state, [], [], [self.audit_record(state, op, caller, phase="intent", assets=assets)])
