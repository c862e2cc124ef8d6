"""Background embedding with the packaged local model (AG-12): every passage gets its vector
without a search waiting for it, and vectors survive a lock sealed like the token streams.

With ``[rag.embedding] kind = "local"`` a background job ("search-embed") embeds the passages
the index has no vector for: after the unlock's index build, and shortly after each commit
(a new transcript turn costs one passage). Each batch of new vectors is committed as an
encrypted ``search_vectors`` record in device-local state (never synced or backed up), so
the next unlock reads them back instead of running the model again; a lock cancels the job
and drops every vector from memory (ST-10). Remote providers keep their on-demand behaviour:
nothing is sent to them unless a search or `memories rag index` asks.

Vectors are keyed by the chunk's content key (title + passage digest), so an edit re-embeds
only the passages that changed, and a record of another model is ignored.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.errors import MemoriesError
from engine.jobs.background import JobContext, JobHandle
from engine.rag.config import Endpoint, load_rag_config
from engine.service.search_runtime import SearchRuntime, runtime_of
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.vault.revision import Revision

__all__ = ["VECTORS_KIND", "VectorRuntime", "vectors_of"]

log = logging.getLogger("memories.search")
VECTORS_KIND = "search_vectors"
RECORD_VERSION = 1
# Passages embedded per step; each step's vectors are one sealed record (one synced commit).
# Small enough that a lock waits for at most a few seconds of model work before the job drops its texts.
STEP = 32
# Seconds after a commit before the job looks for new passages: a burst of writes (an import,
# `transcript watch`) is embedded in one pass.
COMMIT_DELAY = 0.5

_RUNTIMES: weakref.WeakKeyDictionary[Service, VectorRuntime] = weakref.WeakKeyDictionary()


def vectors_of(service: Service) -> VectorRuntime:
    runtime = _RUNTIMES.get(service)
    if runtime is None:
        raise MemoriesError("internal", "The vector extension is not installed.")
    return runtime


def local_endpoint(service: Service) -> Endpoint | None:
    """The configured embedding endpoint when it is the packaged local model, else None."""
    try:
        ep = load_rag_config(service.paths.config_file).embedding
    except MemoriesError:
        return None
    return ep if ep is not None and ep.kind == "local" else None


class VectorRuntime:
    def __init__(self, service: Service, search: SearchRuntime) -> None:
        self.service = service
        self.search = search
        # chunk key -> vector (float16, as stored) of ``self.model``: what the sealed records
        # hold, kept so that an index rebuild (a policy change) needs no model run; wiped on lock.
        self.stored: dict[bytes, npt.NDArray[np.float16]] = {}
        self.model = ""
        self._records: list[dict[str, Any]] = []  # read at unlock, decoded by the job
        self.job: JobHandle | None = None
        self._again = False
        self.idle = threading.Event()
        self.idle.set()
        self.embedded = 0  # passages the model embedded since the unlock
        self.reused = 0  # passages whose vector came from a sealed record
        self.limit_reached = False
        self.error: MemoriesError | None = None  # the last failure (the model package missing ...)
        service.on_unlock.append(self._on_unlock)
        service.on_commit.append(self._on_commit)
        service.on_lock.append(self._on_lock)

    # -- hooks (under the service lock) ---------------------------------------------------
    def _on_unlock(self, state: Unlocked) -> None:
        self._records = [r for _, r in state.extra_records.pop(VECTORS_KIND, [])]
        self.embedded = self.reused = 0
        self.limit_reached = False
        self.error = None
        if local_endpoint(self.service) is not None:
            self.schedule()

    def _on_commit(self, state: Unlocked, revisions: list[Revision], extra: list[dict[str, Any]]) -> None:
        state.extra_records.pop(VECTORS_KIND, None)  # ours: the job already holds them
        if revisions and (self.model or self._records or self.job is not None):
            self.schedule(COMMIT_DELAY)

    def _on_lock(self) -> None:
        if self.job is not None:
            self.job.cancel()
        self.job = None
        self._again = False
        self.stored.clear()
        self._records = []
        self.model = ""
        self.idle.set()

    # -- the job ----------------------------------------------------------------------------
    def schedule(self, delay: float = 0.0) -> None:
        """Start the embedding job, or have the running one look again when it ends its pass.
        Call under the service lock."""
        self.idle.clear()
        if self.job is not None and not self.job.cancelled.is_set() and self.job.state in ("waiting", "running"):
            self._again = True
            return
        generation = self.service.session.generation
        self.job = self.service.background.start("search-embed", lambda context: self._run(context, generation), delay=delay)

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Wait until no passage is waiting for the job (benchmarks, tests, `rag index`)."""
        return self.idle.wait(timeout_seconds)

    def _run(self, context: JobContext, generation: int) -> None:
        try:
            while True:
                self._pass(context, generation)
                with self.service.lock:
                    # Decided under the lock that schedule() takes: a commit either sees this job
                    # still running (and sets _again) or finds it gone and starts another.
                    if self.service.session.generation != generation:
                        return  # locked meanwhile: _on_lock reset everything
                    if not self._again or context.cancelled.is_set():
                        self.job = None
                        self.idle.set()
                        return
                    self._again = False
        except Exception as exc:  # any failure must end the wait of `rag index`, not leave it hanging
            failed = MemoriesError("provider_error", "The local embedding model failed.")
            error = exc if isinstance(exc, MemoriesError) else failed
            log.warning("background embedding stopped (%s)", error.code)
            with self.service.lock:
                self.error = error
                if self.service.session.generation == generation:
                    self.job = None
                    self._again = False
                    self.idle.set()

    def _current(self, context: JobContext, generation: int) -> tuple[Unlocked, Any] | None:
        """The unlocked state and default vault's index, or None when the job is stale. Under the lock."""
        state = self.service.state
        if context.cancelled.is_set() or state is None or self.service.session.generation != generation:
            return None
        index = self.search.cache.peek(state.default_vault)
        return (state, index) if index is not None else None

    def _pass(self, context: JobContext, generation: int) -> None:
        ep = local_endpoint(self.service)
        if ep is None:
            return
        from engine.rag.local_model import embed_packaged  # lazy: the model package is an optional extra

        self.search.wait_ready(3600)  # the index build fills the passages first
        self._take_records(ep.model_id, generation)
        while True:
            with self.service.lock:
                current = self._current(context, generation)
                if current is None:
                    return
                state, index = current
                index.vectors.reset_if_model_changed(ep.model_id)
                missing = index.missing_vectors(STEP)
                if not missing:
                    return
                known = [(k, self.stored[k]) for k, _ in missing if k in self.stored]
                if known:
                    if index.store_vectors(known) < len(known):
                        self.limit_reached = True
                        return
                    self.reused += len(known)
                todo = [(k, t) for k, t in missing if k not in self.stored]
            if not todo:
                continue
            # The model runs without the service lock: searches and writes go on meanwhile.
            vectors = np.asarray(embed_packaged(ep, [t for _, t in todo]), dtype=np.float32)
            keys = [k for k, _ in todo]
            with self.service.lock:
                current = self._current(context, generation)
                if current is None:
                    return
                state, index = current
                index.vectors.reset_if_model_changed(ep.model_id)
                half = vectors.astype(np.float16)
                for key, row in zip(keys, half, strict=True):
                    self.stored[key] = row
                stored = index.store_vectors(zip(keys, half, strict=True))
                self.embedded += len(keys)
                record = {"t": VECTORS_KIND, "v": RECORD_VERSION, "m": ep.model_id, "k": keys, "x": half.tobytes()}
                try:
                    self.service.vault.commit(state, [], [], [record])
                except MemoriesError as exc:
                    log.warning("embedded vectors not persisted (%s)", exc.code)
                if stored < sum(1 for k in keys if k in index.by_key):
                    self.limit_reached = True  # [rag.index] max_vector_mib: `rag status` says so
                    return
            context.progress(self.embedded + self.reused)

    def _take_records(self, model_id: str, generation: int) -> None:
        """Decode the sealed records read at unlock (off the lock): those of this model only."""
        with self.service.lock:
            if self.service.session.generation != generation:
                return
            records, self._records = self._records, []
            if model_id != self.model:
                self.stored.clear()
                self.model = model_id
        decoded: dict[bytes, npt.NDArray[np.float16]] = {}
        for record in records:
            try:
                if record.get("v") != RECORD_VERSION or record.get("m") != model_id:
                    continue
                keys = record["k"]
                matrix = np.frombuffer(bytes(record["x"]), dtype=np.float16)
                if not isinstance(keys, list) or not keys or matrix.size % len(keys):
                    continue
                for key, row in zip(keys, matrix.reshape(len(keys), -1), strict=True):
                    decoded[bytes(key)] = row
            except (KeyError, TypeError, ValueError):
                continue  # an unreadable record only costs a model run for its passages
        with self.service.lock:
            if self.service.session.generation != generation:
                return  # locked meanwhile: nothing of this unlock stays in memory
            for key, row in decoded.items():
                self.stored.setdefault(key, row)

    def status(self) -> dict[str, Any]:
        return {
            "background": True,
            "embedded": self.embedded,
            "reused": self.reused,
            "running": not self.idle.is_set(),
            "limit_reached": self.limit_reached,
            "error": {"code": self.error.code, "message": self.error.message} if self.error is not None else None,
        }


def _setup(service: Service) -> None:
    _RUNTIMES[service] = VectorRuntime(service, runtime_of(service))


EXTENSIONS.append(_setup)
