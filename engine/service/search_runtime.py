"""The search runtime of one Service: builds the vault index after unlock, keeps it current on
every commit, and wipes it on lock (SR-1 … SR-3, SR-6, ST-10).

Hooked in through ``EXTENSIONS``; the core never calls search code directly.
Segmenting is the dominant cost (SR-6), so each revision is segmented once — at
write time, or lazily for revisions written before — and its token stream is kept
as an encrypted ``search_tokens`` record in device-local state, from which the
next unlock rebuilds the index without re-segmenting. The build runs as a
background job (engine/jobs/background.py: a lock cancels it, `memories status` shows its
progress) in batches that hold the service lock only to read and to insert; segmentation
happens outside the lock, and search answers meanwhile, saying the index is partial.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.errors import MemoriesError
from engine.files import FILE_KIND, TEXT_SAMPLE_BYTES, is_searchable, open_file_chunk, text_of_sample
from engine.jobs.background import JobContext, JobHandle
from engine.search import snapshot
from engine.search.cache import IndexCache
from engine.search.documents import TOKENS_KIND, Document, Prepared, prepare
from engine.search.eligibility import INDEXED_KINDS, exclusion_reason
from engine.search.index import Limits, VaultIndex
from engine.search.segment import Segmenter
from engine.service.memory import gc_paused, keep_built, release_free_memory
from engine.service.projections import visible_body
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.store.database import SealedRows, SnapshotRef, decode_record
from engine.vault.index import AssetEntry
from engine.vault.revision import Revision, held

__all__ = ["SearchRuntime", "runtime_of", "BUILD_BATCH", "SNAPSHOT_KIND", "SNAPSHOT_MIN_CHANGES"]

log = logging.getLogger("memories.search")
BUILD_BATCH = 256
TOKEN_COMMIT_BATCH = 1000
TOKEN_FLUSH_SECONDS = 2.0
TOKEN_FLUSH_NOW = 32
# A commit of at least this many assets (an import batch, a large merge) is indexed by a
# background catch-up job instead of inside the commit: the write answers as soon as its
# sealed content is durable, and searches say "partial" until the job has caught up (issue 20).
CATCH_UP_MIN = 64
# A catch-up waits until bulk commits have paused this long (an import's batches arrive back
# to back), so that its segmenting does not share the GIL and the cores with the import's
# sealing and signing: a 10k-note import answered ~1.5x sooner (issue 32). It waits at most
# CATCH_UP_MAX_WAIT at a time, so a steady stream of bulk commits still gets indexed.
CATCH_UP_QUIET = 0.4
CATCH_UP_MAX_WAIT = 5.0
# An import that says more of its batches follow (``import_batch`` with ``more``) is waited for
# longer: the next batch may take this long to arrive before the catch-up starts anyway (a CLI
# that died mid-import), and the whole import up to CATCH_UP_IMPORT_MAX_WAIT. A 10k-note import
# on a loaded machine ran past CATCH_UP_MAX_WAIT and then shared the cores with its own indexing
# (issue 32); searches meanwhile answer and say "partial", as during any catch-up.
CATCH_UP_IMPORT_QUIET = 5.0
CATCH_UP_IMPORT_MAX_WAIT = 120.0
# Seconds after a build or catch-up has completed its index before its rows join the word
# postings (engine/search/postings.py; FTS5 ranks meanwhile): that work then stays out of the
# way of a bulk import's next batches and of the first requests after an unlock.
POSTINGS_DELAY = 1.0
# The sealed snapshot of the default vault's index (issue 32): a state record of this kind names
# it (engine/store/database.py keeps the sealed chunks), and the next unlock loads it, then
# indexes only what changed since its watermark. A new one is saved once the index has moved
# this many assets (indexed or removed) away from the last, SNAPSHOT_DELAY seconds after the
# build or catch-up that moved it ended: small vaults, which rebuild in a blink, never pay it.
SNAPSHOT_KIND = "search_snapshot"
SNAPSHOT_MIN_CHANGES = 256
SNAPSHOT_DELAY = 2.0

# One runtime per Service, held weakly so the registry never keeps a Service alive.
_RUNTIMES: weakref.WeakKeyDictionary[Service, SearchRuntime] = weakref.WeakKeyDictionary()


def runtime_of(service: Service) -> SearchRuntime:
    runtime = _RUNTIMES.get(service)
    if runtime is None:
        raise MemoriesError("internal", "The search extension is not installed.")
    return runtime


def expect_more_commits(service: Service, more: bool) -> None:
    """The next commit is an import batch after which ``more`` batches of the same import follow
    (call under the service lock, before the commit); nothing without the search extension."""
    runtime = _RUNTIMES.get(service)
    if runtime is not None:
        runtime.more_follow = more


@dataclass
class BuildJob:
    state: Unlocked
    vault_id: bytes
    generation: int
    index: VaultIndex
    # Set when the build ends or is cancelled: a waiting search stops waiting at once.
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    handle: JobHandle | None = None  # the background job; a lock cancels it too
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    segmented: int = 0
    reused: int = 0
    # A catch-up job: assets still to index into an existing index, in commit order.
    backlog: dict[bytes, None] = field(default_factory=dict)
    drained: bool = False  # a catch-up found its backlog empty (under the service lock) and ended
    last_added: float = 0.0  # monotonic time a bulk commit last added to a catch-up's backlog
    more_follow: bool = False  # the last commit was an import batch that said more follow
    built: bool = False  # a full build filled its index (under the service lock)

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()
        self.done.set()


@dataclass
class BuildStats:
    builds: int = 0
    last_seconds: float | None = None
    segmented: int = 0
    reused_tokens: int = 0
    token_records_written: int = 0
    # Documents segmented for any reason since this engine started (builds, catch-ups, commits):
    # what a fresh snapshot spares an unlock (tests count it rather than time it).
    documents_segmented: int = 0
    from_snapshot: int = 0  # assets the last build took from a sealed snapshot
    snapshot_refused: int = 0  # snapshots that did not match their record or failed to open
    snapshots_saved: int = 0
    snapshot_bytes: int = 0  # sealed size of the newest snapshot this engine saved or loaded
    token_rows_opened: int = 0  # sealed token-stream rows the builds opened
    bodies_from_restore: int = 0  # bodies a restore handed over, not read from the store again


def _newest_live_head(state: Unlocked, entry: AssetEntry) -> Revision:
    if len(entry.heads) == 1:  # the common case, and index builds call this per asset
        return state.index.revisions[entry.heads[0]]
    heads = state.index.head_revisions(entry)
    live = [r for r in heads if not r.tombstone] or heads
    return max(live, key=lambda r: (r.created_ms, r.seq))


class SearchRuntime:
    def __init__(self, service: Service, limits: Limits | None = None) -> None:
        self.service = service
        self.segmenter = Segmenter()
        self.cache = IndexCache(limits)
        # rev_id -> prepared token stream (decrypted from search_tokens records); wiped on lock.
        self.tokens: dict[bytes, Prepared] = {}
        self.job: BuildJob | None = None
        # vault_id -> the running catch-up job of that vault's index (bulk commits; see CATCH_UP_MIN).
        self.catch_ups: dict[bytes, BuildJob] = {}
        self.stats = BuildStats()
        # Token streams segmented but not yet committed (see _persist_tokens); wiped on lock.
        self.pending: list[Prepared] = []
        self._flush: JobHandle | None = None  # the deferred token commit (a delayed background job)
        self._postings: JobHandle | None = None  # the delayed catch-up of the word postings
        self._postings_guard = threading.Lock()
        # Stored token streams (SR-6) are most of an unlock's bytes and only the build reads
        # them: the unlock leaves them undecoded and the build decodes them off the lock.
        service.vault.deferred_kinds.add(TOKENS_KIND)
        self._undecoded: list[tuple[int, bytes]] = []
        # Those written as deferred rows are not even opened by the unlock: the build opens them.
        self._sealed: SealedRows | None = None
        # The newest search_snapshot record (its reference and watermark), and its saving job.
        self._snapshot: dict[str, Any] | None = None
        self._restore_from: dict[str, Any] | None = None  # taken by the unlock's build
        self._snapshot_job: JobHandle | None = None
        self._snapshot_guard = threading.Lock()
        # Set by an import batch for its own commit (expect_more_commits), read by _catch_up.
        self.more_follow = False
        service.before_unlock.append(self._warm_segmenter)
        service.on_unlock.append(self._on_unlock)
        service.on_commit.append(self._on_commit)
        service.on_lock.append(self._on_lock)

    def _warm_segmenter(self) -> None:
        # Loading Jieba's dictionary takes ~0.7 s of one core; run it while the unlock's KDF
        # (which releases the GIL) occupies the other, instead of at the start of the build.
        if not self.segmenter.ready:
            # Not bound to a lock: the dictionary holds no vault data.
            self.service.background.start("segmenter-warm", lambda _: self.segmenter.warm(), cancel_on_lock=False)

    # -- hooks (all called under the service lock) --------------------------------------
    def _on_unlock(self, state: Unlocked) -> None:
        self._undecoded = state.deferred.pop(TOKENS_KIND, [])
        self._sealed, state.sealed = state.sealed, None
        snapshots = state.extra_records.pop(SNAPSHOT_KIND, [])
        self._snapshot = self._restore_from = snapshots[-1][1] if snapshots else None
        for _, record in state.extra_records.pop(TOKENS_KIND, []):
            prepared = Prepared.from_record(record)
            if prepared is not None:  # another segmenter version: re-segmented lazily
                self.tokens[prepared.rev_id] = prepared
        self.start_build(state, state.default_vault)

    def _on_lock(self) -> None:
        if self.job is not None:
            self.job.cancel()
        self.job = None
        for catch_up in self.catch_ups.values():
            catch_up.cancel()
        self.catch_ups.clear()
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        with self._postings_guard:  # cancelled with the lock, maybe before it began
            self._postings = None
        with self._snapshot_guard:
            if self._snapshot_job is not None:
                self._snapshot_job.cancel()
            self._snapshot_job = None
        self._snapshot = self._restore_from = None
        self.pending = []
        self._undecoded = []
        self._sealed = None  # it holds the master key
        self.cache.wipe()
        self.tokens.clear()

    def _on_commit(self, state: Unlocked, revisions: list[Revision], extra: list[dict[str, Any]]) -> None:
        # Our own token records need no in-memory copy beyond self.tokens.
        state.extra_records.pop(TOKENS_KIND, None)
        if not revisions:
            return
        fresh: list[Prepared] = []
        for vault_id in {r.vault_id for r in revisions}:
            index = self.cache.peek(vault_id)
            if index is None:
                continue
            if index.policy_head != state.vaults[vault_id].policy.head:
                self.start_build(state, vault_id)  # a policy change invalidates the whole index
                continue
            assets = dict.fromkeys(r.asset_id for r in revisions if r.vault_id == vault_id)
            running = self.catch_ups.get(vault_id)
            if running is not None:
                # Any commit says whether more of an import follow: an import's last batch may be
                # too small for the catch-up, and still ends its long wait.
                running.more_follow = self.more_follow
            if len(assets) >= CATCH_UP_MIN:
                self._catch_up(state, index, assets)
            else:
                for asset_id in assets:
                    self.refresh_asset(state, index, asset_id, fresh)
            index.revisions_seen = len(state.index.revisions)
        # The index of a vault this commit did not touch stays current if it was before: else the
        # next search there would reconcile it item by item, a walk over the whole vault (issue 20).
        # A revision applied twice makes ``before`` too small, which only costs that walk.
        touched = {r.vault_id for r in revisions}
        before = len(state.index.revisions) - len(revisions)
        for other in self.cache.indexes():
            if other.vault_id not in touched and other.revisions_seen == before:
                other.revisions_seen = len(state.index.revisions)
        self._persist_tokens(state, fresh)
        default = self.cache.peek(state.default_vault)
        if default is not None and self._snapshot_due(state, default):
            self._schedule_snapshot()

    # -- documents -----------------------------------------------------------------------
    def document(self, state: Unlocked, entry: AssetEntry, index: VaultIndex | None = None) -> Document | None:
        """The indexable document of an asset's current head, or None if excluded (SR-3)."""
        deleted = state.index.is_deleted(entry)
        conflict = entry.in_conflict
        cheap = exclusion_reason(kind=entry.kind, deleted=deleted, conflict=conflict, quarantined=False, summary={})
        if cheap is not None:
            if index is not None:
                index.excluded[entry.asset_id] = cheap
            return None
        head = _newest_live_head(state, entry)
        file = entry.kind == FILE_KIND
        # SR-6: a stored record carries the revision's own summary and body: no decryption needed.
        # Not for a file: whether its text may be indexed is in its own summary (issue 27), and a
        # record stored before that rule may hold text that must not be indexed any more.
        cached = None if file else self.tokens.get(head.rev_id)
        kept = True
        if cached is not None:
            summary = cached.summary
        else:
            kept = head.summary_kept
            summary = self.service.vault.summary_of(state, head)
        reason = exclusion_reason(kind=entry.kind, deleted=False, conflict=False, quarantined=False, summary=summary)
        if reason is not None:
            if index is not None:
                index.excluded[entry.asset_id] = reason
            if cached is None and not kept:
                head.summary_cache = None
            return None
        if cached is not None:
            return cached.document(entry.asset_id, entry.kind, head.changed_ms)
        # CD-7: a value protected later never reaches the index, even from an old head.
        if head.rev_id in state.opened_bodies:
            self.stats.bodies_from_restore += 1  # body_of takes it (Unlocked.opened_bodies)
        body = self._file_text(state, head, summary) if file else visible_body(self.service, state, head)
        if not kept:
            # Kept only while the redactors read it: the index keeps what it shows, and a build
            # would otherwise leave every summary it decrypted in memory until the lock (issue 32).
            head.summary_cache = None
        return Document.from_summary(entry.asset_id, head.rev_id, entry.kind, summary, body, head.changed_ms)

    def _file_text(self, state: Unlocked, head: Revision, summary: dict[str, Any]) -> str:
        """A file is found by its title and tags only, unless the user made it searchable (issue 27:
        files are where `.env` files, keys and exports end up); then a text file also by its first
        TEXT_SAMPLE_BYTES.

        Only the first chunk is opened (one decryption per file, whatever its size); a binary
        file contributes no body text at all.
        """
        info = summary.get("file") or {}
        if not is_searchable(summary) or not info.get("text") or not head.body_seqs:
            return ""
        vault = state.vaults[head.vault_id]
        chunk = open_file_chunk(head, vault.epoch_keys[head.epoch], self.service.vault.require_store(), 0)
        return text_of_sample(chunk[:TEXT_SAMPLE_BYTES]) or ""

    def prepared_for(self, doc: Document, fresh: list[Prepared]) -> Prepared:
        cached = self.tokens.get(doc.rev_id)
        if cached is not None and cached.fits(doc):
            return cached
        prepared = self._prepare(doc)
        fresh.append(prepared)
        return prepared

    def _prepare(self, doc: Document) -> Prepared:
        self.stats.documents_segmented += 1  # a plain int add: exact enough across the two threads
        return prepare(doc, self.segmenter)

    def refresh_asset(self, state: Unlocked, index: VaultIndex, asset_id: bytes, fresh: list[Prepared]) -> None:
        entry = state.index.assets.get(asset_id)
        doc = self.document(state, entry, index) if entry is not None else None
        if doc is None:
            index.remove(asset_id)
            return
        current = index.assets.get(asset_id)
        if current is not None and current.doc.rev_id == doc.rev_id:
            return
        index.upsert(doc, self.prepared_for(doc, fresh))
        self.tokens.pop(doc.rev_id, None)

    def _persist_tokens(self, state: Unlocked, fresh: list[Prepared]) -> None:
        """SR-6: queue new token streams for encrypted local state.

        A single edit must not pay a second fsync, so small amounts wait: they ride
        along with the next search/retrieve/ask intent commit, or a timer commits them
        shortly after the last write. A lock before that only costs a re-segment of
        those few revisions at the next unlock. Large amounts are committed at once.
        """
        self.pending.extend(fresh)
        # A batch write (import, build) amortizes the extra commit over many revisions.
        if len(fresh) >= TOKEN_FLUSH_NOW or len(self.pending) >= TOKEN_COMMIT_BATCH:
            self.flush_tokens(state)
        elif self.pending and self._flush is None:
            generation = self.service.session.generation
            self._flush = self.service.background.start(
                "search-tokens", lambda _: self._timer_flush(generation), delay=TOKEN_FLUSH_SECONDS
            )

    def take_pending_records(self) -> list[dict[str, Any]]:
        """Queued token records for a commit the caller is about to make anyway (under the lock)."""
        records = [p.to_record() for p in self.pending]
        self.stats.token_records_written += len(records)
        self.pending = []
        return records

    def flush_tokens(self, state: Unlocked) -> None:
        while self.pending:
            batch, self.pending = self.pending[:TOKEN_COMMIT_BATCH], self.pending[TOKEN_COMMIT_BATCH:]
            try:
                self.service.vault.commit(state, [], [], [p.to_record() for p in batch])
            except MemoriesError as exc:
                log.warning("search tokens not persisted (%s)", exc.code)
                self.pending = []
                return
            self.stats.token_records_written += len(batch)

    def _timer_flush(self, generation: int) -> None:
        with self.service.lock:
            self._flush = None
            state = self.service.state
            if state is not None and self.service.session.generation == generation:
                self.flush_tokens(state)

    # -- building ------------------------------------------------------------------------
    def start_build(self, state: Unlocked, vault_id: bytes) -> BuildJob:
        """Replace the vault's index with an empty one and fill it in the background."""
        # A build of another vault's index keeps running (it goes stale by itself on lock).
        if self.job is not None and self.job.vault_id == vault_id:
            self.job.cancel()
        vault = state.vaults[vault_id]
        index = VaultIndex(vault_id, vault.policy.head, self.cache.limits)
        self.cache.put(index)
        job = BuildJob(state, vault_id, self.service.session.generation, index)
        self.job = job
        self.stats.builds += 1
        self.service.unlock_work.begin()  # before the job starts: the check must not slip in first
        # Called under the service lock, which the build takes first: it sees ``handle`` set.
        job.handle = self.service.background.start("search-build", lambda context: self._run_build(job, context))
        return job

    def _stale(self, job: BuildJob) -> bool:
        return (
            job.cancelled
            or (job.handle is not None and job.handle.cancelled.is_set())
            or self.service.state is not job.state
            or self.service.session.generation != job.generation
            or self.cache.peek(job.vault_id) is not job.index
        )

    def _run_build(self, job: BuildJob, context: JobContext) -> None:
        # A failure is logged (type or code only) and reported by the background runtime.
        try:
            # No upfront segmenter.warm(): a build from stored token streams segments nothing,
            # and it should not wait for Jieba's dictionary (loading since the unlock began).
            # A document that must be segmented loads it in prepare(), outside the service lock.
            self._build(job, context)
        finally:
            self.service.unlock_work.end()
            job.done.set()
        self._schedule_postings()

    def _build(self, job: BuildJob, context: JobContext) -> None:
        state = job.state
        with self.service.lock:
            if self._stale(job):
                return
            undecoded, self._undecoded = self._undecoded, []
            sealed, self._sealed = self._sealed, None
            # Only the build an unlock starts may load the snapshot: a later one (a policy
            # change, `rag index --rebuild`) builds from the revisions.
            record, self._restore_from = self._restore_from, None
        restored = self._restore(job, record) if record is not None else None
        if self._stale(job):
            return
        if restored is not None:
            order, watermark = restored
            # The token streams written before the snapshot describe what it holds already:
            # only the later ones are opened and decoded (at 100k notes, ~0.1% of them).
            undecoded = [row for row in undecoded if row[0] > watermark]
            sealed = sealed.since(watermark) if sealed is not None else None
        else:
            with self.service.lock:
                if self._stale(job):
                    return
                entries = [e for e in state.index.assets.values() if e.vault_id == job.vault_id]
                # Newest first: when content exceeds the bounds the most recent content is kept (SR-2).
                entries.sort(key=lambda e: _newest_live_head(state, e).changed_ms, reverse=True)
                order = [e.asset_id for e in entries]
        if sealed is not None and len(sealed):
            self.stats.token_rows_opened += len(sealed)
            try:
                undecoded = [*undecoded, *sealed.open()]
            except MemoriesError:
                # The chain matched, so only our own writer (or someone holding the master key)
                # can have made this row: lock like a failed signature check (integrity.py).
                self.service.deferred_row_failure(job.state)
                return
        sealed = None
        if undecoded and not self._take_stored_tokens(job, undecoded):
            return
        del undecoded
        context.progress(0, len(order))
        for start in range(0, len(order), BUILD_BATCH):
            # One collector pause per batch (engine/service/memory.py): otherwise it rescans the
            # whole unlocked state many times per batch and finds nothing to free.
            with gc_paused():
                # A snapshot's index is live already: its changes evict by age like any commit's.
                if not self._build_batch(job, order[start : start + BUILD_BATCH], fresh_index=restored is None):
                    return
            context.progress(min(start + BUILD_BATCH, len(order)))
        with self.service.lock:
            if self._stale(job):
                return
            index = job.index
            # Streams of revisions that were not indexed (superseded, excluded) are not needed again.
            self.tokens.clear()
            state.opened_bodies.clear()  # bodies a restore handed over that no document took
            self.flush_tokens(state)
            job.built = True
            catch_up = self.catch_ups.get(job.vault_id)
            # Assets committed in bulk during the build may still be on their way in.
            index.complete = catch_up is None or catch_up.drained or catch_up.index is not index
            index.revisions_seen = len(state.index.revisions)
            job.seconds = time.monotonic() - job.started
            self.stats.last_seconds = job.seconds
            release_free_memory()
            self.stats.segmented += job.segmented
            self.stats.reused_tokens += job.reused
            if self._snapshot_due(state, index):
                self._schedule_snapshot()

    # -- the sealed snapshot (issue 32) ----------------------------------------------------
    def _restore(self, job: BuildJob, record: dict[str, Any]) -> tuple[list[bytes], int] | None:
        """Put the snapshot ``record`` names in place of the job's empty index; the assets that
        changed since its watermark (to index now) and that watermark. None when it cannot be
        used: another version, vault or policy head (then nothing is read), or bytes that do not
        match the chained record or fail to open (refused, counted, and the index is rebuilt)."""
        state = job.state
        vault = state.vaults[job.vault_id]
        if (
            record.get("v") != snapshot.SNAPSHOT_VERSION
            or record.get("vault") != job.vault_id
            or record.get("policy") != vault.policy.head
            or type(record.get("watermark")) is not int
        ):
            return None
        watermark = int(record["watermark"])
        ref = SnapshotRef.from_fields(record)
        try:
            if ref is None:
                raise ValueError("malformed snapshot record")
            # Read as the store opens it, frame by frame: never the whole payload at once (issue 32).
            pieces = self.service.vault.require_store().read_snapshot_stream(ref)
            restored = snapshot.load(pieces, job.vault_id, vault.policy.head, self.cache.limits)
        except (MemoriesError, ValueError) as exc:
            if isinstance(exc, MemoriesError) and exc.code == "locked":
                return None
            self.stats.snapshot_refused += 1
            log.warning("search snapshot refused (%s); rebuilding the index", getattr(exc, "code", "malformed"))
            return None
        if restored is None:
            return None
        with self.service.lock:
            if self._stale(job):
                restored.close()
                return None
            job.index = restored
            self.cache.put(restored)  # closes the empty index searches used meanwhile
            restored.snapshot_changes = restored.changes
            changed: list[bytes] = []
            for entry in state.index.assets.values():
                if entry.vault_id != job.vault_id:
                    continue
                known = restored.assets.get(entry.asset_id)
                if known is not None:
                    if state.index.is_deleted(entry) or entry.in_conflict:
                        changed.append(entry.asset_id)
                        continue
                    head = _newest_live_head(state, entry)
                    doc = known.doc
                    if doc.rev_id != head.rev_id:
                        changed.append(entry.asset_id)
                    elif doc.rev_id is not head.rev_id:
                        # The revision's own ID and time objects instead of the snapshot's equal
                        # copies: ~100 bytes an asset (issue 32).
                        changed_ms = head.changed_ms
                        known.doc = doc.with_revision(head.rev_id, changed_ms if changed_ms == doc.updated_ms else doc.updated_ms)
                elif any(state.index.revisions[head].seq > watermark for head in entry.heads):
                    changed.append(entry.asset_id)  # new since, or changed (an excluded or truncated one)
            self.stats.from_snapshot = len(restored.assets)
            self.stats.snapshot_bytes = ref.size if ref is not None else 0
        return changed, watermark

    def _snapshot_due(self, state: Unlocked, index: VaultIndex) -> bool:
        """Whether the default vault's index is complete, current and far enough from its last
        snapshot to save a new one (call under the service lock)."""
        if index.vault_id != state.default_vault or not index.complete or self._building(index):
            return False
        if not self.service.require_store().keeps_snapshots:
            return False
        catch_up = self.catch_ups.get(index.vault_id)
        if catch_up is not None and catch_up.index is index and not catch_up.drained:
            return False
        if index.revisions_seen != len(state.index.revisions) or index.policy_head != state.vaults[index.vault_id].policy.head:
            return False
        return index.changes - (index.snapshot_changes or 0) >= SNAPSHOT_MIN_CHANGES

    def _schedule_snapshot(self) -> None:
        with self._snapshot_guard:
            if self._snapshot_job is None:
                self._snapshot_job = self.service.background.start("search-snapshot", self._run_snapshot, delay=SNAPSHOT_DELAY)

    def _run_snapshot(self, context: JobContext) -> None:
        """Seal the default vault's index into the store and name it by a chained record.

        The image is taken under the service lock (no commit can slip between the index and its
        watermark); compressing, sealing and writing it run outside it, then the record is
        committed under it again if the same unlock still stands. A lock meanwhile drops it all.
        """
        try:
            self._save_snapshot()
        finally:
            with self._snapshot_guard:
                self._snapshot_job = None

    def _save_snapshot(self) -> None:
        store = self.service.vault.require_store()
        with self.service.lock:
            state = self.service.state
            index = self.cache.peek(state.default_vault) if state is not None else None
            if state is None or index is None or not self._snapshot_due(state, index):
                return
            generation = self.service.session.generation
            watermark = store.last_seq
            changes = index.changes
            with gc_paused():
                pieces = snapshot.dump_pieces(index)
        try:
            ref = store.write_snapshot(_handed_over(pieces))
        except MemoriesError as exc:
            log.warning("search snapshot not saved (%s)", exc.code)
            return
        finally:
            del pieces
        record = {
            "t": SNAPSHOT_KIND,
            "v": snapshot.SNAPSHOT_VERSION,
            "vault": index.vault_id,
            "policy": index.policy_head,
            "watermark": watermark,
            **ref.to_fields(),
        }
        with self.service.lock:
            if self.service.state is not state or self.service.session.generation != generation:
                return
            try:
                # Straight to the store: a cache's record, which no feature hook needs to see.
                store.commit([record])
            except MemoriesError as exc:
                log.warning("search snapshot not saved (%s)", exc.code)
                return
            index.snapshot_changes = changes
            self._snapshot = record
            self.stats.snapshots_saved += 1
            self.stats.snapshot_bytes = ref.size
        store.prune_snapshot(ref)

    def _take_stored_tokens(self, job: BuildJob, undecoded: list[tuple[int, bytes]]) -> bool:
        """Decode the token records the unlock left undecoded (without the lock); False if stale."""
        decoded: list[Prepared] = []
        with gc_paused():
            for _, plain in undecoded:
                try:
                    prepared = Prepared.from_record(decode_record(plain))
                except ValueError:  # authenticated but unreadable: re-segmented like a missing one
                    prepared = None
                if prepared is not None:  # another segmenter version: re-segmented lazily
                    decoded.append(prepared)
        with self.service.lock:
            if self._stale(job):
                return False
            for prepared in decoded:
                self.tokens.setdefault(prepared.rev_id, prepared)
        return True

    # -- catching up after bulk commits ----------------------------------------------------
    def _catch_up(self, state: Unlocked, index: VaultIndex, assets: dict[bytes, None]) -> None:
        """Queue committed assets for the vault's catch-up job, starting one if none is running.

        Called under the service lock, like the job's own checks: an asset is either taken by
        a running job or starts a new one, never lost between the two.
        """
        job = self.catch_ups.get(index.vault_id)
        if job is None or job.drained or self._stale(job):
            job = BuildJob(state, index.vault_id, self.service.session.generation, index)
            self.catch_ups[index.vault_id] = job
            job.backlog.update(assets)
            job.handle = self.service.background.start("search-catch-up", lambda context: self._run_catch_up(job, context))
        else:
            job.backlog.update(assets)
        job.last_added = time.monotonic()
        job.more_follow = self.more_follow
        index.complete = False  # searches answer meanwhile and say "partial"

    def _building(self, index: VaultIndex) -> bool:
        job = self.job
        return job is not None and job.index is index and not job.built and not job.done.is_set()

    def _wait_quiet(self, job: BuildJob, context: JobContext) -> bool:
        """Wait while bulk commits keep adding to ``job`` (at most CATCH_UP_MAX_WAIT, or
        CATCH_UP_IMPORT_MAX_WAIT while an import says more follow); False if cancelled."""
        start = time.monotonic()
        while True:
            now = time.monotonic()
            if job.more_follow:
                wait = min(job.last_added + CATCH_UP_IMPORT_QUIET, start + CATCH_UP_IMPORT_MAX_WAIT) - now
            else:
                wait = min(job.last_added + CATCH_UP_QUIET, start + CATCH_UP_MAX_WAIT) - now
            if wait <= 0:
                return True
            # Looked at again at least every CATCH_UP_QUIET: an import's last batch ends the long wait.
            if context.cancelled.wait(min(wait, CATCH_UP_QUIET)):
                return False

    def _run_catch_up(self, job: BuildJob, context: JobContext) -> None:
        try:
            while True:
                if not self._wait_quiet(job, context):
                    return
                with self.service.lock:
                    if self._stale(job):
                        return
                    if not job.backlog:
                        job.drained = True
                        self.flush_tokens(job.state)  # what the batches left below TOKEN_COMMIT_BATCH
                        if not self._building(job.index):  # else the full build completes it
                            job.index.complete = True
                            job.index.revisions_seen = len(job.state.index.revisions)
                            if self._snapshot_due(job.state, job.index):
                                self._schedule_snapshot()
                        self.stats.segmented += job.segmented
                        self.stats.reused_tokens += job.reused
                        break
                    batch = list(itertools.islice(job.backlog, BUILD_BATCH))
                    for asset_id in batch:
                        del job.backlog[asset_id]
                    context.progress(job.segmented + job.reused, job.segmented + job.reused + len(batch) + len(job.backlog))
                with gc_paused():
                    if not self._build_batch(job, batch, fresh_index=False):
                        return
        finally:
            job.done.set()
        self._schedule_postings()

    def _build_batch(self, job: BuildJob, batch: list[bytes], *, fresh_index: bool = True) -> bool:
        """Index one batch of assets; False when the job went stale (lock, newer build).

        ``fresh_index`` False (a catch-up into a live index): an asset now excluded leaves the
        index, and the bounds evict the oldest content as for any commit instead of refusing this.
        """
        index, state = job.index, job.state
        docs: list[tuple[Document, Prepared | None]] = []
        with self.service.lock:
            if self._stale(job):
                return False
            entries = [state.index.assets[asset_id] for asset_id in batch]
            heads = [_newest_live_head(state, entry) for entry in entries]
            # The signed bytes of the heads whose summary and body will be opened (no stored token
            # stream carries them), read back in one query for the batch, not one each (issue 32).
            # Nor those whose summary is kept and whose body a restore handed over (issue 32).
            opened = [
                h
                for h, e in zip(heads, entries, strict=True)
                if (e.kind == FILE_KIND or h.rev_id not in self.tokens)
                and not (h.summary_kept and h.rev_id in state.opened_bodies)
            ]
            with held(opened):
                for entry, head in zip(entries, heads, strict=True):
                    asset_id = entry.asset_id
                    if asset_id in index.assets and index.assets[asset_id].doc.rev_id == head.rev_id:
                        continue  # a commit during the build already indexed it
                    doc = self.document(state, entry, index)
                    if doc is None:
                        if not fresh_index:
                            index.remove(asset_id)
                        continue
                    size = len(doc.body.encode()) + len(doc.title.encode())
                    if fresh_index and not index.would_fit(len(doc.body) // 1000 + 1, size):
                        index.truncated.add(asset_id)
                        continue
                    cached = self.tokens.get(doc.rev_id)
                    docs.append((doc, cached if cached is not None and cached.fits(doc) else None))
        # The costly part runs without the service lock.
        fresh: list[Prepared] = []
        ready: list[tuple[Document, Prepared]] = []
        for doc, cached in docs:
            if cached is None:
                prepared = self._prepare(doc)
                fresh.append(prepared)
                job.segmented += 1
            else:
                prepared = cached
                job.reused += 1
            ready.append((doc, prepared))
        with self.service.lock:
            if self._stale(job):
                return False
            current = []
            for doc, prepared in ready:
                entry = state.index.assets[doc.asset_id]
                if state.index.is_deleted(entry) or entry.in_conflict or _newest_live_head(state, entry).rev_id != doc.rev_id:
                    continue  # changed meanwhile; the commit hook indexed the new state
                current.append((doc, prepared))
                # The stream now lives in the FTS table; keeping a second copy would double memory.
                self.tokens.pop(doc.rev_id, None)
            index.upsert_many(current, defer_postings=True)
            if fresh_index:
                self._persist_tokens(state, fresh)
            else:
                # One token commit per TOKEN_COMMIT_BATCH streams, not per batch: each commit is a
                # synced transaction, and the catch-up commits the rest when it ends.
                self.pending.extend(fresh)
                if len(self.pending) >= TOKEN_COMMIT_BATCH:
                    self.flush_tokens(state)
        return True

    # -- queries -------------------------------------------------------------------------
    def _schedule_postings(self) -> None:
        """Bring the word postings of every index up to date, POSTINGS_DELAY from now, on one
        job at a time and without the service lock (each index batch under its own lock)."""
        with self._postings_guard:
            if self._postings is None:
                self._postings = self.service.background.start("search-postings", self._run_postings, delay=POSTINGS_DELAY)

    def _run_postings(self, context: JobContext) -> None:
        try:
            while True:
                indexes = self.cache.indexes()  # a copy; a lock closes them, which ends their catch-up
                total, done = sum(index.fts.postings_waiting for index in indexes), 0
                context.progress(0, total)
                for index in indexes:
                    done += index.fts.postings_waiting
                    index.fts.catch_up_postings()
                    context.progress(done, total)
                with self._postings_guard:  # rows added after their index was passed: once more
                    if not any(index.fts.postings_waiting for index in self.cache.indexes()):
                        self._postings = None
                        keep_built()  # the index is complete: it lives until the lock
                        return
        except BaseException:
            with self._postings_guard:
                self._postings = None
            raise

    def wait_postings(self, timeout_seconds: float) -> bool:
        """Wait for the word postings' catch-up, if one is scheduled (benchmarks, tests)."""
        handle = self._postings
        return handle is None or handle.wait(timeout_seconds)

    def wait_ready(self, timeout_seconds: float) -> bool:
        """Wait (at most the timeout in all) for the index build and any catch-up to end."""
        deadline = time.monotonic() + timeout_seconds
        for job in [self.job, *list(self.catch_ups.values())]:
            if job is not None and not job.done.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def current_index(self, state: Unlocked, vault_id: bytes) -> VaultIndex:
        """The vault's index, checked against its key: policy head and revision set (SR-2).

        Call under the service lock. A policy change starts a rebuild; revisions that
        arrived without a commit hook (e.g. a merge path) are reconciled asset by asset.
        """
        vault = state.vaults[vault_id]
        index = self.cache.get(vault_id, vault.policy.head)
        if index is None:
            return self.start_build(state, vault_id).index
        if index.complete and index.revisions_seen != len(state.index.revisions):
            fresh: list[Prepared] = []
            for entry in list(state.index.assets.values()):
                if entry.vault_id != vault_id or entry.kind not in INDEXED_KINDS:
                    continue
                known = index.assets.get(entry.asset_id)
                if (
                    known is None
                    or state.index.is_deleted(entry)
                    or entry.in_conflict
                    or (known.doc.rev_id != _newest_live_head(state, entry).rev_id)
                ):
                    self.refresh_asset(state, index, entry.asset_id, fresh)
            index.revisions_seen = len(state.index.revisions)
            self._persist_tokens(state, fresh)
        return index


def _handed_over(pieces: list[bytes]) -> Iterator[bytes]:
    """The pieces in order, each dropped from the list as it is handed over: the payload is not
    held whole beside its compressed form while the store compresses it (issue 32)."""
    pieces.reverse()
    while pieces:
        yield pieces.pop()


def _limits(service: Service) -> Limits:
    from engine.rag.config import load_rag_config

    try:
        bounds = load_rag_config(service.paths.config_file).bounds
    except MemoriesError as exc:
        log.warning("[rag] config ignored for index bounds (%s)", exc.code)
        return Limits()
    mib = 1024 * 1024
    return Limits(bounds.max_chunks, int(bounds.max_text_mib * mib), int(bounds.max_vector_mib * mib))


def _setup(service: Service) -> None:
    _RUNTIMES[service] = SearchRuntime(service, _limits(service))


EXTENSIONS.append(_setup)
