"""The Service: the one dispatcher, its gates, the session and the feature hooks (API-1, ST-10).

The open store, the keys, the decoded state and every write belong to the vault core
(``engine/vault/core.py``, ``service.vault``); the service decides *whether* an op may run
(unlock, elevation, MCP allowlist, lock generation), runs it under the service lock and
tells the truth about what it committed. Ops run under the service lock except the few
registered ``lock_free`` (status, info, and the password ops, which run the slow KDF
outside the lock and take it afterwards). All state hangs off one ``Service`` (no globals).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from engine import lazy_import
from engine.config import EngineConfig, Paths
from engine.crypto.kdf import DerivationAhead
from engine.crypto.keys import SignatureError
from engine.errors import MemoriesError
from engine.jobs.background import BackgroundWork
from engine.service.caller import Caller
from engine.service.integrity import BackgroundVerifier, UnlockWork, verify_all
from engine.service.memory import gc_paused, release_free_memory, release_kept
from engine.service.registry import OPS, OpSpec
from engine.service.requests import Request
from engine.service.session import Session
from engine.store.database import StoreFile
from engine.vault.core import AUDIT_TAG, Unlocked, VaultCore, VaultKeys
from engine.vault.revision import Revision

__all__ = ["Service", "Unlocked", "VaultKeys", "AUDIT_TAG", "EXTENSIONS", "UNLOCK_ATTEMPTS_FILE"]

log = logging.getLogger("memories.engine")

# Spent password-attempt slots (timestamps only), so a restart does not reset the budget.
UNLOCK_ATTEMPTS_FILE = "password-attempts.json"
INDEX_WARNING = (
    "The change was saved, but updating an in-memory index failed; "
    "search or links may miss it until the next unlock. Do not repeat the change."
)
RESTARTING = "The vault was just locked and the engine is clearing its memory; try again in a moment."
SAVED_PARTLY = "The engine hit an unexpected error after saving part of this request; check before repeating it."

# Setup functions of feature packages, called once per Service (register with
# ``EXTENSIONS.append(setup)`` at import time of the feature's handler module).
EXTENSIONS: list[Callable[[Service], None]] = []


class ContentRouter(Protocol):
    """Where content ops go instead of the local store (saas mode, engine/service/center_runtime.py)."""

    def claims(self, op_name: str, spec: OpSpec) -> bool:
        """True: forward; False: run here; raises to refuse the op outright."""
        ...

    def forward(self, request: Request, caller: Caller) -> dict[str, Any]: ...


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
        # The vault core owns the store, keys, decoded state and every write.
        self.vault = VaultCore(paths.store)
        self.vault.durable.append(self._record_durable)
        self.vault.committed.append(self._run_commit_hooks)
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
        # The third-party modules imported on first use (engine/lazy_import.py) come first.
        self.before_unlock: list[Callable[[], None]] = [lazy_import.warm_in_background]
        self.on_commit: list[Callable[[Unlocked, list[Revision], list[dict[str, Any]]], None]] = []
        self.on_lock: list[Callable[[], None]] = []
        # Called by the daemon (any thread) before it stops serving, to exit or to re-execute:
        # a request waiting for news (the change feed, DT-7) answers now instead of holding it up.
        self.on_stop: list[Callable[[], None]] = []
        # DesktopStatus contributors: each returns counts only, e.g. {"connections": 2,
        # "attention": True}; called without the service lock, so they read snapshots.
        self.status_contributors: list[Callable[[], dict[str, int | bool]]] = []
        # Every long-running piece of engine work starts here and is cancelled by a lock (issue 16).
        self.background = BackgroundWork()
        self.verifier = BackgroundVerifier(self.background)
        # Work an unlock starts that users wait for; the background signature check yields to it.
        self.unlock_work = UnlockWork()
        # ST-12: a lock of a process that has held decrypted state asks the daemon to drain
        # and re-execute itself (engine/daemon.py), so no plaintext outlives the lock in this
        # address space. Set under the service lock by ``lock_now``; an unlock arriving
        # before the exec is refused (its state would be lost by the exec).
        self.restart_pending = threading.Event()
        self.held_plaintext = False
        # Set by the daemon, which does the re-execution (an in-process Service has no one to).
        self.restart_on_lock = False
        # An unlock's KDF that a re-executed engine started while it loaded (engine/daemon.py):
        # the next unlock takes it (or derives its own); a lock drops it.
        self.kdf_ahead: DerivationAhead | None = None
        # Called (from any thread) when a restart or shutdown was asked for: wakes the daemon.
        self.wake: Callable[[], None] = lambda: None
        # What outlives the re-execution, by name: (save -> JSON value, restore(value)). Only
        # facts without content (a sticky integrity flag, how recent job runs ended).
        self.carried: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
            "verify_failed": (lambda: self.verifier.failed, self._restore_verify_failed),
            "started": (lambda: self.started, self._restore_started),
            "jobs": (self.background.save, self.background.restore),
        }
        # saas mode: set by the Center feature's setup when config.toml has a saas entry.
        self.content_router: ContentRouter | None = None
        for setup in EXTENSIONS:
            setup(self)

    # The core's store and state, for the session ops that create, unlock and report them.
    @property
    def store(self) -> StoreFile | None:
        return self.vault.store

    @store.setter
    def store(self, store: StoreFile | None) -> None:
        self.vault.store = store

    @property
    def state(self) -> Unlocked | None:
        return self.vault.state

    @state.setter
    def state(self, state: Unlocked | None) -> None:
        self.vault.state = state

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
            if isinstance(exc, MemoriesError) and exc.code == "ambiguous_id" and caller.surface != "mcp":
                self._title_candidates(exc)
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

    def _title_candidates(self, exc: MemoriesError) -> None:
        """An ambiguous ID prefix: add each candidate's title (never a body) for the person
        choosing; agents get IDs and kinds only (titles of other kinds are not theirs)."""
        state = self.state
        candidates = exc.details.get("candidates")
        if state is None or not isinstance(candidates, list):
            return
        with self.lock:
            for item in candidates:
                entry = state.index.assets.get(bytes.fromhex(item["id"]))
                if entry is None:
                    continue
                head = max(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq))
                try:
                    item["title"] = str(self.vault.summary_of(state, head).get("title", ""))
                except MemoriesError:
                    item["title"] = ""

    @staticmethod
    def _short_id(state: Unlocked | None, asset_id: bytes) -> str:
        if state is not None and asset_id in state.index.assets:
            return state.index.short_id(asset_id)
        return asset_id.hex()[:12]

    def _run(self, spec: OpSpec, request: Request, caller: Caller) -> dict[str, Any]:
        router = self.content_router
        if router is not None:
            name = type(request).__struct_config__.tag
            assert isinstance(name, str)  # every op's request has a string tag (registry.op checks it)
            if router.claims(name, spec):
                return self._run_routed(router, spec, request, caller)
        if spec.lock_free:
            return spec.handler(self, request, caller)
        return self.run_gated(spec, caller, lambda: spec.handler(self, request, caller))

    def run_gated(self, spec: OpSpec, caller: Caller, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``run`` under the service lock behind the op's gates (unlocked, elevated, idle timer).

        Ops register as ``lock_free`` and call this themselves when they must first ask
        something slow outside the lock (the Center, about a ticket).
        """
        with self.lock:
            generation = self.session.generation
            if spec.needs_unlock:
                self.require_unlocked()
            if spec.needs_elevation and not self.session.is_elevated(caller.namespace):
                raise MemoriesError("elevation_required")
            if spec.touches_idle:
                self.session.touch()
            result = run()
            if spec.needs_unlock and self.session.generation != generation:
                # ST-10: the vault was locked while this ran; drop the result.
                raise MemoriesError("locked")
            return result

    def _run_routed(self, router: ContentRouter, spec: OpSpec, request: Request, caller: Caller) -> dict[str, Any]:
        """The op's own gates here, the op itself at the Center, outside the service lock."""
        with self.lock:
            generation = self.session.generation
            if spec.needs_unlock:
                self.require_unlocked()
            if spec.needs_elevation and not self.session.is_elevated(caller.namespace):
                raise MemoriesError("elevation_required")
            if spec.touches_idle:
                self.session.touch()
        result = router.forward(request, caller)
        if spec.needs_unlock and self.session.generation != generation:
            raise MemoriesError("locked")  # ST-10: locked while the Center answered; not delivered
        return result

    # -- state helpers -------------------------------------------------------------------
    def require_unlocked(self) -> Unlocked:
        return self.vault.require_unlocked()

    def require_store(self) -> StoreFile:
        return self.vault.require_store()

    def _restore_verify_failed(self, value: Any) -> None:
        self.verifier.failed = value is True

    def _restore_started(self, value: Any) -> None:
        if isinstance(value, float | int):
            self.started = float(value)

    def refuse_while_restarting(self) -> None:
        """An unlock (or init) between a lock and the engine's re-execution would be lost."""
        if self.restart_pending.is_set():
            raise MemoriesError("busy", RESTARTING)

    def lock_now(self, reason: str) -> None:
        with self.lock:
            if self.held_plaintext and reason != "shutdown" and self.restart_on_lock:
                self.restart_pending.set()
            self.vault.wipe()
            ahead, self.kdf_ahead = self.kdf_ahead, None
            if ahead is not None:
                ahead.drop()
            self.session.bump_generation()
            self.background.cancel_on_lock()
            for listener in self.on_lock:
                listener()
            release_kept()  # the decoded state's objects: back to the cyclic collector
            release_free_memory()
            log.info("locked (%s)", reason)
        if self.restart_pending.is_set():
            self.wake()

    def check_idle(self) -> None:
        """Called periodically by the daemon: idle auto-lock (ST-10)."""
        if self.state is not None and self.session.idle_expired():
            self.lock_now("idle")

    # -- loading -------------------------------------------------------------------------
    def load_state(
        self, store: StoreFile, written: Mapping[bytes, Revision] | None = None, bodies: dict[bytes, str] | None = None
    ) -> Unlocked:
        """Decrypt and authenticate every record; check certificate and policy of each revision.
        ``written``: revisions this engine just stored, by signed bytes (VaultCore.decode);
        ``bodies``: their bodies, opened and checked already (``Unlocked.opened_bodies``)."""
        with gc_paused(keep=True):
            return self._load_state(store, written, bodies)

    def _load_state(
        self, store: StoreFile, written: Mapping[bytes, Revision] | None, bodies: dict[bytes, str] | None
    ) -> Unlocked:
        # After an integrity failure in this process (a bad signature, or a deferred row that
        # failed its AEAD), every row is opened and every signature checked before answering,
        # until such a full check passes again (see engine/service/integrity.py).
        self.refuse_while_restarting()
        self.held_plaintext = True  # from here on this address space has held decrypted rows
        decoded = self.vault.decode(store, open_deferred=self.verifier.failed, written=written)
        state = decoded.state
        if bodies:  # before the listeners below start the index build that takes them
            state.opened_bodies = bodies
        if self.verifier.failed:
            try:
                verify_all(state.identity, decoded.revisions, decoded.audits)
            except (SignatureError, KeyError, TypeError, ValueError) as exc:
                raise MemoriesError("store_corrupt", "A signed record failed verification.") from exc
            self.verifier.failed = False
        for listener in self.on_unlock:
            listener(state)
        # The AEAD and the checkpoint chain authenticated every row above; the Ed25519
        # re-check is defence in depth and runs after unlock answers (integrity.py says why).
        generation = self.session.generation
        self.verifier.start(
            state.identity,
            decoded.revisions,
            decoded.audits,
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

    def deferred_row_failure(self, state: Unlocked) -> None:
        """A deferred row (engine/store/database.py) failed its AEAD when its reader opened it
        after the unlock: like a failed signature check, lock now and check everything at the
        next unlock, which refuses with store_corrupt while the row is still there."""
        log.error("integrity: a deferred state row failed authentication; locking")
        self.verifier.failed = True
        self._integrity_failure(state)

    # -- what a request committed (honest answers) and feature hooks -----------------------
    def _record_durable(self, revisions: list[Revision], extra_records: list[dict[str, Any]]) -> None:
        """The store transaction is durable: the request's answer must say so, whatever fails next."""
        current: _Dispatch | None = getattr(self._current, "dispatch", None)
        if current is not None:
            current.revisions.extend(revisions)
            current.other_records += sum(1 for r in extra_records if r.get("t") != "audit")

    def _run_commit_hooks(self, state: Unlocked, revisions: list[Revision], extra_records: list[dict[str, Any]]) -> None:
        current: _Dispatch | None = getattr(self._current, "dispatch", None)
        for listener in self.on_commit:
            try:
                listener(state, revisions, extra_records)
            except Exception as exc:  # a feature hook must not turn a saved change into an error
                log.error("on_commit hook failed type=%s", type(exc).__name__)
                if current is not None and not any(w["code"] == "index_update_failed" for w in current.warnings):
                    current.warnings.append({"code": "index_update_failed", "message": INDEX_WARNING})
