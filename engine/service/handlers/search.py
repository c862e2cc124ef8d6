"""Search, retrieve (cited passages), ask (answers with validated citations), rag status / index.

These ops are ``lock_free``: they take the service lock only for short phases and
run model work (embedding, rerank, generation) outside it. After every phase
that ran without the lock they re-check the lock generation and, before
delivery, each source's revision stamp (RAG-1). ``ask`` commits a signed intent
before inference and an audit of the outcome and delivered source IDs after it,
never the prompt or any key (RAG-2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.rag.citations import check_citations
from engine.rag.config import RagConfig, load_rag_config
from engine.rag.prompt import Source, build_messages
from engine.rag.providers import chat, embed, rerank_scores, run_sync
from engine.search.eligibility import INDEXED_KINDS
from engine.search.index import Mode, VaultIndex
from engine.search.query import MAX_QUERY_CHARS, ParsedQuery, parse_query
from engine.search.rerank import RERANK_WINDOW
from engine.search.segment import SEGMENTER_VERSION
from engine.search.snippets import snippet
from engine.search.vectors import normalize
from engine.search.window import Filters
from engine.service.caller import Caller
from engine.service.handlers.vaults import vault_for
from engine.service.registry import op
from engine.service.requests import Kind, Request
from engine.service.search_runtime import SearchRuntime, runtime_of
from engine.service.service import Service, Unlocked
from engine.service.vector_runtime import vectors_of

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Search", "Retrieve", "Ask", "RagStatus", "RagIndex", "HIT_DETAILS", "HIT_ORDER", "Found", "retrieve_hits", "snapshot"]

QueryText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY_CHARS)]
ModeName = Literal["auto", "lexical", "vector", "hybrid"]
WaitMs = Annotated[int, msgspec.Meta(ge=0, le=600_000)]
When = Annotated[str, msgspec.Meta(min_length=1, max_length=40)]
# Chunks embedded on demand by one query; `memories rag index` embeds the rest.
EMBED_ON_DEMAND = 512
PASSAGE_CHARS = 1200
# kind -> fields a hit of that kind adds to its result (a transcript turn: ``turn`` with its
# session, the turn as the user saw it, its time and a handle, AG-8; a superseded conclusion:
# ``superseded_by``, AG-9); called under the service lock.
HIT_DETAILS: dict[str, Callable[[Service, Unlocked, Caller, bytes], dict[str, Any] | None]] = {}
# Reorderings of a search's hits, under the service lock (a transcript turn that a later turn
# corrects: the later one first, AG-9). Each may add hits (``snapshot``) and must keep the rest.
HIT_ORDER: list[Callable[[Service, Unlocked, list[Found]], list[Found]]] = []
# Per-caller limits on which assets a search may return, under the service lock: each gives a
# predicate over asset IDs, or None for no limit (a grant whose transcripts are one project's
# drops the other projects' turns, AG-11).
ASSET_GATES: list[Callable[[Service, Unlocked, Caller], Callable[[bytes], bool] | None]] = []


def _gate(service: Service, state: Unlocked, caller: Caller | None) -> Callable[[bytes], bool] | None:
    if caller is None:
        return None
    gates = [g for g in (make(service, state, caller) for make in ASSET_GATES) if g is not None]
    if not gates:
        return None
    return lambda asset_id: all(g(asset_id) for g in gates)


def _gated(service: Service, state: Unlocked, caller: Caller, hits: list[Found]) -> list[Found]:
    """Hits the caller may see (after reorderings, which may add hits)."""
    gate = _gate(service, state, caller)
    return hits if gate is None else [h for h in hits if gate(h.asset_id)]


MAX_SEARCH_LIMIT = 500
MAX_SEARCH_OFFSET = 100_000
# DT-7: a search looks this many passages deep for words, so its total and its pages cover
# every match in a large vault (a filtered search already looks 2,000 deep).
TOTAL_DEPTH = 5000


class Search(Request, tag="search"):
    query: QueryText
    mode: ModeName = "auto"
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_SEARCH_LIMIT)] = 10
    # DT-7: a page of the matches; the answer's ``total`` says how many there are.
    offset: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEARCH_OFFSET)] = 0
    kind: Kind | None = None
    wait_ms: WaitMs = 5000
    # A vault by name (`memories vaults`); without it, the default vault.
    vault: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    # Issue 18 filters (engine/search/window.py): when it last changed, which device wrote it, its source.
    since: When | None = None
    until: When | None = None
    author: Annotated[str, msgspec.Meta(min_length=4, max_length=64)] | None = None
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None


class Retrieve(Request, tag="retrieve"):
    query: QueryText
    mode: ModeName = "auto"
    limit: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    wait_ms: WaitMs = 5000
    # Issue 18 filters (engine/search/window.py): when it last changed, which device wrote it, its source.
    since: When | None = None
    until: When | None = None
    author: Annotated[str, msgspec.Meta(min_length=4, max_length=64)] | None = None
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None


class Ask(Request, tag="ask"):
    query: QueryText
    mode: ModeName = "auto"
    limit: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    wait_ms: WaitMs = 5000


class RagStatus(Request, tag="rag_status"):
    pass


class RagIndex(Request, tag="rag_index"):
    rebuild: bool = False
    vectors: bool = True
    wait_ms: WaitMs = 600_000


@dataclass
class Found:
    """One hit, snapshotted under the lock so delivery never reads the index again."""

    asset_id: bytes
    rev_id: bytes
    kind: str
    title: str
    tags: list[str]
    passage: str
    score: float


@dataclass
class Retrieved:
    vault_id: bytes
    generation: int
    mode: Mode
    parsed: ParsedQuery
    partial: bool
    truncated: int
    hits: list[Found] = field(default_factory=list)
    total: int = 0  # every match the search found (DT-7), not only this page
    vectors_missing: int = 0


# -- phases ----------------------------------------------------------------------------------
def _checked_state(service: Service, generation: int) -> Unlocked:
    """Under the lock: the vault is still unlocked under the same generation (ST-10, RAG-1)."""
    state = service.require_unlocked()
    if service.session.generation != generation:
        raise MemoriesError("locked", "The vault was locked while this request ran; the result was dropped.")
    return state


def _resolve_mode(requested: str, config: RagConfig) -> Mode:
    if requested == "auto":
        return "hybrid" if config.embedding is not None else "lexical"
    if requested in ("vector", "hybrid") and config.embedding is None:
        raise MemoriesError(
            "provider_not_configured",
            f"{requested.capitalize()} search needs an embedding provider: add [rag.embedding] "
            "(kind, url, model, api_key_env) to config.toml; lexical search works without one.",
        )
    mode: Mode = "vector" if requested == "vector" else "hybrid" if requested == "hybrid" else "lexical"
    return mode


def _retrieve(
    service: Service,
    runtime: SearchRuntime,
    config: RagConfig,
    query: str,
    requested_mode: str,
    limit: int,
    kinds: frozenset[str] | None,
    wait_ms: int,
    vault_name: str | None = None,
    filters: Filters | None = None,
    offset: int | None = None,
    caller: Caller | None = None,
) -> Retrieved:
    """The best ``limit`` hits; with ``offset`` (the search op), the page at ``offset`` of all
    matches, and ``total`` counts them (``retrieve``/``ask`` leave it None: top hits only)."""
    if vault_name is not None:
        with service.lock:  # the named vault's index must exist (and be building) before waiting
            state = service.require_unlocked()
            runtime.current_index(state, vault_for(state, vault_name).vault_id)
    runtime.wait_ready(wait_ms / 1000)
    with service.lock:
        state = service.require_unlocked()
        service.session.touch()
        generation = service.session.generation
        mode = _resolve_mode(requested_mode, config)
        vault_id = vault_for(state, vault_name).vault_id
        index = runtime.current_index(state, vault_id)
        parsed = parse_query(query, runtime.segmenter)
        missing: list[tuple[bytes, str]] = []
        if mode != "lexical" and config.embedding is not None:
            index.vectors.reset_if_model_changed(config.embedding.model_id)
            # AG-12: the packaged model embeds passages in the background (vector_runtime.py); a
            # search embeds only its query and uses the vectors there are so far (see below).
            if config.embedding.kind != "local":
                missing = index.missing_vectors(EMBED_ON_DEMAND)
    query_vector: npt.NDArray[np.float32] | None = None
    if mode != "lexical":
        # Model work outside the service lock; the query goes first in the batch.
        vectors = run_sync(embed(config, [query] + [text for _, text in missing], queries=1))
        try:
            query_vector = normalize(vectors[0])
        except ValueError:
            raise MemoriesError("provider_error", "The provider returned an unusable query vector.") from None
    with service.lock:
        state = _checked_state(service, generation)
        index = runtime.current_index(state, vault_id)
        if missing:
            index.vectors.reset_if_model_changed(config.embedding.model_id if config.embedding else "")
            try:
                index.store_vectors(zip([k for k, _ in missing], vectors[1:], strict=True))
            except ValueError:
                raise MemoriesError("provider_error", "The provider returned vectors of inconsistent size.") from None
        window = max(limit, RERANK_WINDOW) if config.rerank is not None else limit
        keep = _keeper(state, index, filters)
        gate = _gate(service, state, caller)
        if gate is not None:
            keep = gate if keep is None else (lambda asset_id, k=keep, g=gate: k(asset_id) and g(asset_id))
        paging = offset is not None
        # Paging: every match is counted, but hits are built only up to the page's end.
        hits, total = index.search_counted(
            parsed,
            mode=mode,
            query_vector=query_vector,
            limit=max(window, (offset or 0) + limit) if paging else window,
            kinds=kinds,
            keep=keep,
            lexical_depth=TOTAL_DEPTH if paging else None,
        )
        if not paging:
            total = len(hits)
        elif config.rerank is None:
            hits = hits[(offset or 0) : (offset or 0) + limit]  # only the page needs its passage
        found = [_snapshot(index, h.asset_id, h.rowid, h.score) for h in hits]
        result = Retrieved(
            vault_id=vault_id,
            generation=generation,
            mode=mode,
            parsed=parsed,
            partial=not index.complete,
            truncated=len(index.truncated),
            hits=found,
            vectors_missing=len(index.missing_vectors(1)) if mode != "lexical" else 0,
            total=total,
        )
        if result.vectors_missing and config.embedding is not None and config.embedding.kind == "local":
            background = vectors_of(service)
            if background.idle.is_set():  # enabled since the unlock, or a job that stopped: start one
                background.schedule()
    if config.rerank is not None and len(result.hits) > 1:
        head, tail = result.hits[:window], result.hits[window:]  # the model reorders the top window
        scores = run_sync(rerank_scores(config, query, [f"{h.title}\n{h.passage}" for h in head]))
        order = sorted(range(len(head)), key=lambda i: scores[i], reverse=True)
        result.hits = [head[i] for i in order] + tail
    if offset is not None and config.rerank is not None:
        result.hits = result.hits[offset:]  # without a reranker the page was cut before the snapshots
    result.hits = result.hits[:limit]
    return result


def retrieve_hits(
    service: Service, query: str, kinds: frozenset[str], limit: int, wait_ms: int = 5000, caller: Caller | None = None
) -> Retrieved:
    """Ranked hits of ``kinds`` for ``query`` (lexical, or hybrid with an embedding provider), without
    the service lock held: the engine behind ``search``, for other ops that rank (recall_turn)."""
    return _retrieve(service, runtime_of(service), _config(service), query, "auto", limit, kinds, wait_ms, caller=caller)


def snapshot(service: Service, state: Unlocked, asset_id: bytes, score: float) -> Found | None:
    """A hit on ``asset_id`` (its first passage) from the default vault's index, or None if it is not indexed."""
    index = runtime_of(service).cache.peek(state.default_vault)
    info = index.assets.get(asset_id) if index is not None else None
    if index is None or info is None or not info.rowids:
        return None
    return _snapshot(index, asset_id, info.rowids[0], score)


def _ordered(service: Service, state: Unlocked, hits: list[Found], limit: int) -> list[Found]:
    for reorder in HIT_ORDER:
        hits = reorder(service, state, hits)
    return hits[:limit]


def _snapshot(index: VaultIndex, asset_id: bytes, rowid: int, score: float) -> Found:
    doc = index.assets[asset_id].doc
    return Found(
        asset_id=asset_id,
        rev_id=doc.rev_id,
        kind=doc.kind,
        title=doc.title,
        tags=list(doc.tags),
        passage=index.chunks[rowid].text,
        score=score,
    )


def _filters(request: Search | Retrieve) -> Filters | None:
    return Filters.parse(request.since, request.until, request.author, request.source)


def _keeper(state: Unlocked, index: VaultIndex, filters: Filters | None) -> Callable[[bytes], bool] | None:
    """Under the lock: does an indexed asset pass the filters (time of its current revision, its author, source)?"""
    if filters is None:
        return None

    def keep(asset_id: bytes) -> bool:
        info = index.assets.get(asset_id)
        if info is None:
            return False
        head = state.index.revisions.get(info.doc.rev_id)
        author = fingerprint(head.author) if head is not None else ""
        return filters.keeps(info.doc.updated_ms, author, dict(info.doc.meta))

    return keep


def _still_current(runtime: SearchRuntime, state: Unlocked, hits: list[Found], vault_id: bytes | None = None) -> list[Found]:
    """Hits whose source is still indexed at the same revision (not edited, deleted or excluded)."""
    # current_index reconciles the index with the vault first (and restarts it on a policy change).
    index = runtime.current_index(state, state.default_vault if vault_id is None else vault_id)
    return [h for h in hits if (a := index.assets.get(h.asset_id)) is not None and a.doc.rev_id == h.rev_id]


def _source_view(state: Unlocked, hit: Found) -> dict[str, Any]:
    """A safe summary projection (SR-5): asset ID and short ID, never a chunk hash."""
    return {
        "id": hit.asset_id.hex(),
        "short_id": state.index.short_id(hit.asset_id),
        "kind": hit.kind,
        "title": hit.title,
        "tags": hit.tags,
        "revision": hit.rev_id.hex()[:12],
    }


def _commit_intent(
    service: Service, runtime: SearchRuntime, state: Unlocked, op_name: str, caller: Caller, assets: list[bytes]
) -> None:
    """The read intent (ST-5, RAG-2), carrying queued search-token records in the same commit (SR-6)."""
    intent = service.vault.audit_record(state, op_name, caller, phase="intent", assets=assets)
    # Essential, like every read's intent: search keeps working on a full disk (FI-2).
    service.vault.commit(state, [], [], [intent, *runtime.take_pending_records()], essential=True)


def _config(service: Service) -> RagConfig:
    return load_rag_config(service.paths.config_file)


def _visible_kinds(kinds: frozenset[str] | None, caller: Caller) -> frozenset[str] | None:
    """The kinds a search may return to this caller (an MCP grant may hide transcripts, AG-5)."""
    if not caller.hidden_kinds:
        return kinds
    return (kinds if kinds is not None else INDEXED_KINDS) - caller.hidden_kinds


# -- ops ---------------------------------------------------------------------------------------
@op(Search, lock_free=True, mcp_allowed=True)
def search(service: Service, request: Search, caller: Caller) -> dict[str, Any]:
    runtime = runtime_of(service)
    kinds = _visible_kinds(frozenset({request.kind}) if request.kind else None, caller)
    found = _retrieve(
        service,
        runtime,
        _config(service),
        request.query,
        request.mode,
        request.limit,
        kinds,
        request.wait_ms,
        request.vault,
        _filters(request),
        request.offset,
        caller,
    )
    with service.lock:
        state = _checked_state(service, found.generation)
        hits = _ordered(service, state, _still_current(runtime, state, found.hits, found.vault_id), request.limit)
        hits = _gated(service, state, caller, hits)
        _commit_intent(service, runtime, state, "search", caller, [h.asset_id for h in hits])
        terms = found.parsed.terms + found.parsed.phrases
        results = [
            {
                "rank": rank,
                **_source_view(state, hit),
                "snippet": snippet(hit.passage or hit.title, terms),
                "score": round(hit.score, 4),
                **_details(service, state, caller, hit),
            }
            for rank, hit in enumerate(hits, start=request.offset + 1)
        ]
    return {
        "query": request.query,
        "total": found.total,
        "offset": request.offset,
        "limit": request.limit,
        "mode": found.mode,
        "partial": found.partial,
        "truncated": found.truncated,
        "vectors_missing": found.vectors_missing,
        "results": results,
    }


def _details(service: Service, state: Unlocked, caller: Caller, hit: Found) -> dict[str, Any]:
    detail = HIT_DETAILS.get(hit.kind)
    found = detail(service, state, caller, hit.asset_id) if detail is not None else None
    return found or {}


def _passages(service: Service, state: Unlocked, caller: Caller, hits: list[Found]) -> list[dict[str, Any]]:
    return [
        {
            "label": f"S{i}",
            **_source_view(state, hit),
            "text": hit.passage[:PASSAGE_CHARS],
            **_details(service, state, caller, hit),
        }
        for i, hit in enumerate(hits, start=1)
    ]


@op(Retrieve, lock_free=True, mcp_allowed=True)
def retrieve(service: Service, request: Retrieve, caller: Caller) -> dict[str, Any]:
    runtime = runtime_of(service)
    kinds = _visible_kinds(None, caller)
    found = _retrieve(
        service,
        runtime,
        _config(service),
        request.query,
        request.mode,
        request.limit,
        kinds,
        request.wait_ms,
        filters=_filters(request),
        caller=caller,
    )
    with service.lock:
        state = _checked_state(service, found.generation)
        hits = _ordered(service, state, _still_current(runtime, state, found.hits), request.limit)
        hits = _gated(service, state, caller, hits)
        _commit_intent(service, runtime, state, "retrieve", caller, [h.asset_id for h in hits])
        return {
            "query": request.query,
            "mode": found.mode,
            "partial": found.partial,
            "truncated": found.truncated,
            "passages": _passages(service, state, caller, hits),
        }


@op(Ask, lock_free=True, mcp_allowed=True)
def ask(service: Service, request: Ask, caller: Caller) -> dict[str, Any]:
    runtime = runtime_of(service)
    config = _config(service)
    if config.generation is None:
        raise MemoriesError(
            "provider_not_configured",
            "`ask` needs a generation provider: add [rag.generation] (url, model, api_key_env) to config.toml; "
            "`memories retrieve` works without one.",
        )
    limit = min(request.limit, config.max_sources)
    found = _retrieve(
        service, runtime, config, request.query, request.mode, limit, _visible_kinds(None, caller), request.wait_ms, caller=caller
    )
    with service.lock:
        state = _checked_state(service, found.generation)
        hits = _gated(service, state, caller, _still_current(runtime, state, found.hits))
        if not hits:
            return {
                "query": request.query,
                "mode": found.mode,
                "answer": None,
                "citations": [],
                "invalid_citations": [],
                "sources": [],
                "partial": found.partial,
                "note": "No authorized memory matches the question; nothing was sent to the model.",
            }
        # RAG-2: the intent names the exact sources about to leave for the model.
        _commit_intent(service, runtime, state, "ask", caller, [h.asset_id for h in hits])
    sources = [Source(f"S{i}", h.title, h.passage[:PASSAGE_CHARS]) for i, h in enumerate(hits, start=1)]
    messages, _ = build_messages(request.query, sources)
    try:
        answer = run_sync(chat(config, messages))
    except MemoriesError as exc:
        _audit_outcome(service, found.generation, caller, "error", [], exc.code)
        raise
    with service.lock:
        state = _checked_state(service, found.generation)
        current = _still_current(runtime, state, hits)
        if len(current) != len(hits):
            service.vault.commit(
                state, [], [], [service.vault.audit_record(state, "ask", caller, phase="result", outcome="dropped", assets=[])]
            )
            raise MemoriesError("sources_changed")
        labels = {s.label: h for s, h in zip(sources, hits, strict=True)}
        checked = check_citations(answer, set(labels))
        delivered = [labels[label].asset_id for label in checked.cited]
        service.vault.commit(
            state, [], [], [service.vault.audit_record(state, "ask", caller, phase="result", outcome="ok", assets=delivered)]
        )
        views = {label: _source_view(state, hit) for label, hit in labels.items()}
        return {
            "query": request.query,
            "mode": found.mode,
            "partial": found.partial,
            "answer": checked.text,
            "citations": [{"label": label, **views[label]} for label in checked.cited],
            "invalid_citations": checked.invalid,
            "sources": [{"label": label, **views[label]} for label in labels],
        }


def _audit_outcome(service: Service, generation: int, caller: Caller, outcome: str, assets: list[bytes], code: str) -> None:
    with service.lock:
        if service.state is None or service.session.generation != generation:
            return  # locked meanwhile: the committed intent records an unknown outcome
        state = service.state
        service.vault.commit(
            state,
            [],
            [],
            [service.vault.audit_record(state, "ask", caller, phase="result", outcome=outcome, assets=assets, error=code)],
        )


@op(RagStatus, mcp_allowed=True)
def rag_status(service: Service, request: RagStatus, caller: Caller) -> dict[str, Any]:
    runtime = runtime_of(service)
    state = service.require_unlocked()
    index = runtime.cache.peek(state.default_vault)
    try:
        config: RagConfig | None = _config(service)
        config_error = None
    except MemoriesError as exc:
        config, config_error = None, exc.message
    providers: dict[str, Any] = {}
    if config is not None:
        for name, endpoint in config.endpoints():
            if endpoint is not None:
                providers[name] = {
                    "kind": endpoint.kind,
                    "model": endpoint.model or "(local)",
                    # The variable's name and whether it is set; never its value.
                    "api_key_env": endpoint.api_key_env,
                    "api_key_present": endpoint.api_key() is not None if endpoint.api_key_env else None,
                }
    info: dict[str, Any] = {"state": "missing"}
    if index is not None:
        info = {
            "state": "ready" if index.complete else "building",
            "complete": index.complete,
            "assets": len(index.assets),
            "chunks": len(index.chunks),
            "text_bytes": index.text_bytes,
            "vectors": len(index.vectors),
            "vector_bytes": index.vectors.nbytes,
            "vector_model": index.vectors.model or None,
            "truncated": len(index.truncated),
            "excluded": _count_reasons(index.excluded),
            # Chunk rows not yet in the word postings: bare-word queries are ranked by FTS5 meanwhile.
            "postings_waiting": index.fts.postings_waiting,
            "limits": {
                "max_chunks": index.limits.max_chunks,
                "max_text_bytes": index.limits.max_text_bytes,
                "max_vector_bytes": index.limits.max_vector_bytes,
            },
        }
    stats = runtime.stats
    if config is not None and config.embedding is not None and config.embedding.kind == "local":
        info["embedding"] = vectors_of(service).status()
    return {
        "index": info,
        "cached_indexes": len(runtime.cache),
        "segmenter": SEGMENTER_VERSION,
        "build": {
            "builds": stats.builds,
            "last_seconds": round(stats.last_seconds, 3) if stats.last_seconds is not None else None,
            "segmented": stats.segmented,
            "reused_tokens": stats.reused_tokens,
            "token_records_written": stats.token_records_written,
            "documents_segmented": stats.documents_segmented,
            "token_rows_opened": stats.token_rows_opened,
            "bodies_from_restore": stats.bodies_from_restore,
        },
        # The sealed snapshot of the built index (issue 32): loaded at unlock instead of a rebuild.
        "snapshot": {
            "from_snapshot": stats.from_snapshot,
            "refused": stats.snapshot_refused,
            "saved": stats.snapshots_saved,
            "bytes": stats.snapshot_bytes,
        },
        "providers": providers,
        "config_error": config_error,
        "modes": ["lexical", "vector", "hybrid"] if config and config.embedding else ["lexical"],
    }


def _count_reasons(excluded: dict[bytes, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in excluded.values():
        counts[reason] = counts.get(reason, 0) + 1
    return counts


@op(RagIndex, lock_free=True)
def rag_index(service: Service, request: RagIndex, caller: Caller) -> dict[str, Any]:
    """Bring the lexical index up to date (or rebuild it), then embed every chunk lacking a vector."""
    runtime = runtime_of(service)
    config = _config(service)
    with service.lock:
        state = service.require_unlocked()
        service.session.touch()
        generation = service.session.generation
        if request.rebuild:
            runtime.start_build(state, state.default_vault)
        else:
            runtime.current_index(state, state.default_vault)
    runtime.wait_ready(request.wait_ms / 1000)
    embedded = 0
    stopped = None
    if request.vectors and config.embedding is not None and config.embedding.kind == "local":
        # AG-12: the background job embeds (and seals) every passage; wait for it to be done.
        background = vectors_of(service)
        with service.lock:
            _checked_state(service, generation)
            before = background.embedded + background.reused
            background.schedule()
        background.wait_idle(request.wait_ms / 1000)
        if background.error is not None:
            raise background.error
        embedded = background.embedded + background.reused - before
        stopped = "vector_bytes" if background.limit_reached else None
    elif request.vectors and config.embedding is not None:
        while True:
            with service.lock:
                state = _checked_state(service, generation)
                index = runtime.current_index(state, state.default_vault)
                index.vectors.reset_if_model_changed(config.embedding.model_id)
                missing = index.missing_vectors(config.embedding.batch * 4)
            if not missing:
                break
            vectors = run_sync(embed(config, [text for _, text in missing]))
            with service.lock:
                state = _checked_state(service, generation)
                index = runtime.current_index(state, state.default_vault)
                stored = index.store_vectors(zip([k for k, _ in missing], vectors, strict=True))
                embedded += stored
                if stored < len([k for k, _ in missing if k in index.by_key]):
                    stopped = "vector_bytes"
                    break
    status = rag_status(service, RagStatus(), caller) if service.state is not None else {}
    return {"embedded": embedded, "vector_limit_reached": stopped is not None, "status": status}
