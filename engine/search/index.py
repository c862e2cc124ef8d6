"""One vault's in-memory index: FTS5 rows, chunk texts, vectors, bounds and the query pipeline."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from engine.search.documents import Document, Prepared, chunk_key
from engine.search.fts import FtsIndex, FtsRow
from engine.search.fusion import rrf
from engine.search.normalize import fold, fold_fast
from engine.search.query import ParsedQuery
from engine.search.rerank import RERANK_WINDOW, Candidate, rerank
from engine.search.script import to_simplified
from engine.search.segment import has_cjk
from engine.search.vectors import VectorStore

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["Limits", "VaultIndex", "Hit", "Mode", "CANDIDATES", "folded_head", "compact_rowids"]

Mode = Literal["lexical", "vector", "hybrid"]
CANDIDATES = 100  # chunk rows fetched per retriever before grouping by asset
# A low-weight row's BM25 score counts this much (AG-8: a transcript turn's tool output is
# searchable, but a reply that matches as well ranks above it).
AUX_WEIGHT = 0.3
FILTERED_CANDIDATES = 2000  # the same with a filter (time window, author, source), which drops many


@dataclass(frozen=True)
class Limits:
    """SR-2 per-index bounds (configurable in [rag.index]; the defaults are engine/rag/config.py's)."""

    max_chunks: int = 100_000
    max_text_bytes: int = 128 * 1024 * 1024
    max_vector_bytes: int = 96 * 1024 * 1024


@dataclass(slots=True)
class ChunkInfo:
    """One indexed chunk. Its text is kept as UTF-8 (issue 32): a chunk holding one Han character
    is stored by Python as two or four bytes per character, and only the few chunks a query
    reranks or shows are read back (``text``)."""

    asset_id: bytes
    ordinal: int
    utf8: bytes
    aux: bool = False

    @property
    def text(self) -> str:
        return self.utf8.decode()


@dataclass(slots=True)
class AssetInfo:
    doc: Document
    # Its chunks' row IDs, consecutive as ``_stage`` numbers them: a range (48 bytes) instead of
    # a list of int objects (~110 bytes an asset at 100k notes, issue 32).
    rowids: Sequence[int]
    text_bytes: int
    stamp: int = 0  # eviction order among equal ``doc.updated_ms`` (unique, increasing)

    @property
    def folded_title(self) -> str:
        return folded_head(self.doc)[0]


def compact_rowids(rowids: list[int]) -> Sequence[int]:
    """``rowids`` as a range when they are consecutive (always, as the index numbers them)."""
    if rowids and rowids == list(range(rowids[0], rowids[0] + len(rowids))):
        return range(rowids[0], rowids[0] + len(rowids))
    return tuple(rowids)


def folded_head(doc: Document) -> tuple[str, str]:
    """The folded title, and the folded title, a line break and the folded metadata: what
    reranking compares a query with besides the chunk. Folded per query for the candidates only
    (~30 us each): kept for every asset they were 27 MiB at 100k notes (issue 32)."""
    title = to_simplified(fold(doc.title))
    return title, title + "\n" + to_simplified(fold(doc.meta_text))


@dataclass(slots=True)
class Hit:
    asset_id: bytes
    rowid: int
    score: float
    lexical_rank: int | None = None
    vector_rank: int | None = None


@dataclass
class VaultIndex:
    vault_id: bytes
    policy_head: bytes
    limits: Limits = field(default_factory=Limits)
    complete: bool = False
    revisions_seen: int = 0
    excluded: dict[bytes, str] = field(default_factory=dict)  # asset ID -> reason (SR-3), counted in status

    def __post_init__(self) -> None:
        self.fts = FtsIndex()
        self.chunks: dict[int, ChunkInfo] = {}
        self.assets: dict[bytes, AssetInfo] = {}
        # chunk key -> rows, for vectors (kept by chunk key): built on first use, so an index whose
        # vault embeds nothing (the default) holds no key per chunk (issue 32).
        self._by_key: dict[bytes, list[int]] | None = None
        self._simplified: dict[int, str | None] = {}  # rowid -> Simplified folded chunk text if it differs (SR-8)
        self.vectors = VectorStore(self.limits.max_vector_bytes)
        self.text_bytes = 0
        self.truncated: set[bytes] = set()
        self._next_rowid = 1
        self.aux_rows = 0  # rows of low-weight text (documents.AUX_MARK)
        # Eviction order (least recently changed first) as a lazy min-heap: entries of
        # removed or re-indexed assets are skipped when popped. Sorting every asset on each
        # write would make one edit cost O(n log n) in a large vault (ST-6). Built the first
        # time the bounds are exceeded and kept from then on: an index within its bounds (the
        # common case) does not hold a heap entry per asset (issue 32).
        self._age_heap: list[tuple[int, int, bytes]] | None = None
        # Assets indexed or removed since the index was first built, snapshots included: how
        # far the index has moved from its last sealed snapshot (issue 32, search_runtime.py).
        self.changes = 0
        self.snapshot_changes: int | None = None  # ``changes`` when its last snapshot was taken

    # -- updates ------------------------------------------------------------------------
    def upsert(self, doc: Document, prepared: Prepared) -> None:
        """Replace the asset's rows; evict the least recently changed assets if over the bounds."""
        self.upsert_many([(doc, prepared)])

    def upsert_many(self, items: list[tuple[Document, Prepared]], *, defer_postings: bool = False) -> None:
        """Like upsert for several documents, with one FTS5 insert call (index builds, which
        defer the word postings to ``fts.catch_up_postings``)."""
        rows: list[FtsRow] = []
        for doc, prepared in items:
            rows.extend(self._stage(doc, prepared))
        self.fts.add(rows, defer_postings=defer_postings)
        self._enforce_bounds()

    def _stage(self, doc: Document, prepared: Prepared) -> list[FtsRow]:
        if doc.asset_id in self.assets:
            self.remove(doc.asset_id)
        self.truncated.discard(doc.asset_id)
        self.excluded.pop(doc.asset_id, None)
        self.changes += 1
        rows: list[FtsRow] = []
        rowids: list[int] = []
        title_bytes = doc.title.encode()
        size = len(title_bytes) + len(doc.meta_text.encode())
        for ordinal, chunk in enumerate(prepared.chunks):
            text = doc.body[chunk.start : chunk.end]
            text_bytes = text.encode()
            size += len(text_bytes)
            rowid = self._next_rowid
            self._next_rowid += 1
            self.chunks[rowid] = ChunkInfo(doc.asset_id, ordinal, text_bytes, chunk.aux)
            self.aux_rows += chunk.aux
            if self._by_key is not None:
                self._by_key.setdefault(chunk_key(title_bytes, text_bytes), []).append(rowid)
            rowids.append(rowid)
            rows.append(
                FtsRow(
                    rowid,
                    prepared.title.words,
                    chunk.words,
                    prepared.meta.words,
                    prepared.title.bigrams,
                    chunk.bigrams,
                    prepared.meta.bigrams,
                )
            )
        # The chunk texts hold the body; keeping the whole body too would double memory.
        kept = Document(doc.asset_id, doc.rev_id, doc.kind, doc.title, "", doc.tags, doc.meta, doc.updated_ms)
        stamp = self._next_rowid  # unique and increasing: ties on updated_ms keep insertion order
        self.assets[doc.asset_id] = AssetInfo(kept, compact_rowids(rowids), size, stamp)
        self.text_bytes += size
        if self._age_heap is not None:
            heapq.heappush(self._age_heap, (doc.updated_ms, stamp, doc.asset_id))
            if len(self._age_heap) > 2 * len(self.assets) + 64:
                self._age_heap = None  # mostly stale entries: built again from the assets when needed
        return rows

    def _current(self, entry: tuple[int, int, bytes]) -> bool:
        info = self.assets.get(entry[2])
        return info is not None and info.stamp == entry[1]

    def remove(self, asset_id: bytes) -> None:
        info = self.assets.pop(asset_id, None)
        self.truncated.discard(asset_id)
        if info is None:
            return
        self.changes += 1
        self.fts.delete(info.rowids)
        title = info.doc.title.encode()
        for rowid in info.rowids:
            chunk = self.chunks.pop(rowid)
            self.aux_rows -= chunk.aux
            self._simplified.pop(rowid, None)
            if self._by_key is None:
                continue  # no vector was stored, as storing one builds the keys
            key = chunk_key(title, chunk.utf8)
            keyed = self._by_key.get(key, [])
            if rowid in keyed:
                keyed.remove(rowid)
            if not keyed:
                self._by_key.pop(key, None)
                self.vectors.discard(key)
        self.text_bytes -= info.text_bytes

    @property
    def by_key(self) -> dict[bytes, list[int]]:
        if self._by_key is None:
            self._by_key = {}
            for rowid, chunk in self.chunks.items():
                self._by_key.setdefault(self.key_of(chunk), []).append(rowid)
        return self._by_key

    def key_of(self, chunk: ChunkInfo) -> bytes:
        """The chunk's key (its vector's name): its asset's title and its text, hashed."""
        return chunk_key(self.assets[chunk.asset_id].doc.title.encode(), chunk.utf8)

    def would_fit(self, chunks: int, text_bytes: int) -> bool:
        return len(self.chunks) + chunks <= self.limits.max_chunks and self.text_bytes + text_bytes <= self.limits.max_text_bytes

    def _enforce_bounds(self) -> None:
        """Keep the most recently changed content; what is dropped is reported as truncation."""
        if len(self.chunks) <= self.limits.max_chunks and self.text_bytes <= self.limits.max_text_bytes:
            return
        if self._age_heap is None:
            self._age_heap = [(info.doc.updated_ms, info.stamp, asset_id) for asset_id, info in self.assets.items()]
            heapq.heapify(self._age_heap)
        while self._age_heap and (len(self.chunks) > self.limits.max_chunks or self.text_bytes > self.limits.max_text_bytes):
            entry = heapq.heappop(self._age_heap)
            if not self._current(entry):
                continue  # stale entry: removed or re-indexed since
            self.remove(entry[2])
            self.truncated.add(entry[2])

    def close(self) -> None:
        self._age_heap = None
        self.fts.close()
        self.chunks.clear()
        self.assets.clear()
        self._by_key = None
        self._simplified.clear()
        self.vectors.clear()

    # -- vectors ------------------------------------------------------------------------
    def missing_vectors(self, limit: int) -> list[tuple[bytes, str]]:
        """(chunk key, text to embed) for chunks without a vector, newest assets first."""
        out: list[tuple[bytes, str]] = []
        seen: set[bytes] = set()
        for info in sorted(self.assets.values(), key=lambda a: a.doc.updated_ms, reverse=True):
            for rowid in info.rowids:
                chunk = self.chunks[rowid]
                if chunk.aux:
                    continue  # tool output is found by its words; embedding it would crowd out replies
                key = self.key_of(chunk)
                if not self.vectors.has(key) and key not in seen:
                    seen.add(key)
                    out.append((key, f"{info.doc.title}\n\n{chunk.text}"))
                    if len(out) >= limit:
                        return out
        return out

    def store_vectors(self, items: Iterable[tuple[bytes, list[float] | npt.NDArray[Any]]]) -> int:
        stored = 0
        for key, values in items:
            if key in self.by_key and self.vectors.put(key, values):
                stored += 1
        return stored

    # -- queries ------------------------------------------------------------------------
    def search(
        self,
        query: ParsedQuery,
        *,
        mode: Mode,
        query_vector: npt.NDArray[np.float32] | None = None,
        limit: int = 10,
        kinds: frozenset[str] | None = None,
        keep: Callable[[bytes], bool] | None = None,
        lexical_depth: int | None = None,
    ) -> list[Hit]:
        """``keep`` (asset ID → bool) filters candidates (time window, author, source); with it,
        each retriever looks deeper, so that a narrow filter still finds its matches.
        ``lexical_depth`` lets the word retriever look deeper still, so that a search can
        count and page through every match (issue 31, DT-7)."""
        hits, _ = self.search_counted(
            query, mode=mode, query_vector=query_vector, limit=limit, kinds=kinds, keep=keep, lexical_depth=lexical_depth
        )
        return hits

    def search_counted(
        self,
        query: ParsedQuery,
        *,
        mode: Mode,
        query_vector: npt.NDArray[np.float32] | None = None,
        limit: int = 10,
        kinds: frozenset[str] | None = None,
        keep: Callable[[bytes], bool] | None = None,
        lexical_depth: int | None = None,
    ) -> tuple[list[Hit], int]:
        """:meth:`search`'s best ``limit`` hits, and how many items matched in all (DT-7).

        The count is the distinct items among the retrieved rows; only the first ``limit``
        (and the rerank window) become candidates and hits, and for a search by words alone the
        rows past them only add their item to a set. Building a hit for every match of a common
        word, only to count them, cost ≈45 ms at 5,000 matches (bench/search.py)."""
        lexical: list[tuple[bytes, int, float]] = []
        vector: list[tuple[bytes, int, float]] = []
        lexical_total = 0
        depth = CANDIDATES if keep is None else FILTERED_CANDIDATES
        if mode in ("vector", "hybrid") and query_vector is not None:
            rows: list[tuple[int, float]] = []
            for key, score in self.vectors.nearest(query_vector, None, depth):
                rows.extend((rowid, score) for rowid in self.by_key.get(key, []))
            vector = self._best_per_asset(rows, kinds, keep)
        if mode in ("lexical", "hybrid") and not query.empty:
            found = self._lexical_rows(query, max(depth, lexical_depth or 0))
            if mode == "hybrid" and vector:
                lexical = self._best_per_asset(found, kinds, keep)  # fusion ranks every match
                lexical_total = len(lexical)
            else:
                # Words alone: the hits come from the first items; the rest are only counted.
                lexical, lexical_total = self._first_per_asset(found, kinds, keep, max(limit, RERANK_WINDOW))
        best_row: dict[bytes, int] = {}
        lex_rank = {a: i for i, (a, _, _) in enumerate(lexical, start=1)}
        vec_rank = {a: i for i, (a, _, _) in enumerate(vector, start=1)}
        if mode == "hybrid" and vector:
            for asset, rowid, _ in vector + lexical:  # lexical wins the passage choice when both found it
                best_row[asset] = rowid
            fused = rrf([[a for a, _, _ in lexical], [a for a, _, _ in vector]])
        else:
            source = vector if mode == "vector" else lexical
            for asset, rowid, _ in source:
                best_row[asset] = rowid
            fused = [(a, s) for a, _, s in source]
        # Only the reranked window needs text; the tail keeps its retrieval order.
        han_query = any(has_cjk(t) for t in (*query.terms, *query.phrases))
        # rerank reorders the first RERANK_WINDOW and keeps the tail's order below them, so the
        # best ``limit`` come from the first max(limit, RERANK_WINDOW) candidates alone.
        candidates = []
        for i, (asset, score) in enumerate(fused[: max(limit, RERANK_WINDOW)]):
            title, head = folded_head(self.assets[asset].doc)
            text = self._candidate_text(head, best_row[asset], han_query) if i < RERANK_WINDOW else ""
            candidates.append(Candidate(asset, score, text, title))
        ranked = rerank(query, candidates) if query.terms or query.phrases else candidates
        hits = [Hit(c.key, best_row[c.key], c.score, lex_rank.get(c.key), vec_rank.get(c.key)) for c in ranked[:limit]]
        total = len(fused) if mode == "vector" or (mode == "hybrid" and vector) else lexical_total
        return hits, total

    def _lexical_rows(self, query: ParsedQuery, depth: int) -> list[tuple[int, float]]:
        """The best ``depth`` chunk rows by BM25: from the word postings for a query of bare words
        (the common case, and the costly one when a word is in most notes), else from FTS5."""
        if self.aux_rows:
            # Low-weight rows count AUX_WEIGHT of their score: look deeper, then reorder.
            rows = self._raw_rows(query, depth * 3)
            scaled = [(r, s * AUX_WEIGHT if (c := self.chunks.get(r)) is not None and c.aux else s) for r, s in rows]
            scaled.sort(key=lambda item: -item[1])
            return scaled
        return self._raw_rows(query, depth)

    def _raw_rows(self, query: ParsedQuery, depth: int) -> list[tuple[int, float]]:
        words = query.bare_words()
        if words is not None:
            rows = self.fts.query_words(words, depth, lone=query.lone_prefix is not None)
            if rows is not None:
                return rows
        return self.fts.query(self.match_expression(query), depth)

    def match_expression(self, query: ParsedQuery) -> str:
        """The query's FTS5 expression for this index: a lone word typed to its end ("sourdough",
        which no longer indexed word extends) is not matched a second time as a prefix (SR-7)."""
        prefix = query.lone_prefix
        return query.match_expression(prefix_is_word=prefix is not None and self.fts.only_word_with_prefix(prefix))

    def _best_per_asset(
        self,
        rows: Iterable[tuple[int, float]],
        kinds: frozenset[str] | None,
        keep: Callable[[bytes], bool] | None = None,
        *,
        stop: int | None = None,
        skip: Collection[bytes] = (),
    ) -> list[tuple[bytes, int, float]]:
        # The best row per item, in row order (dicts keep insertion order). Runs over every
        # retrieved row (5,000 for a counted search), so the common case is kept short.
        chunks, assets = self.chunks, self.assets
        seen: dict[bytes, tuple[bytes, int, float]] = {}
        dropped: set[bytes] = set()
        for rowid, score in rows:
            chunk = chunks.get(rowid)
            if chunk is None:
                continue
            asset_id = chunk.asset_id
            if asset_id in seen or asset_id in dropped or asset_id in skip:
                continue
            if (kinds is not None and assets[asset_id].doc.kind not in kinds) or (keep is not None and not keep(asset_id)):
                dropped.add(asset_id)
                continue
            seen[asset_id] = (asset_id, rowid, score)
            if stop is not None and len(seen) >= stop:
                break  # the caller goes on with the same iterator
        return list(seen.values())

    def _first_per_asset(
        self,
        rows: list[tuple[int, float]],
        kinds: frozenset[str] | None,
        keep: Callable[[bytes], bool] | None,
        first: int,
    ) -> tuple[list[tuple[bytes, int, float]], int]:
        """:meth:`_best_per_asset`'s first ``first`` entries, and how many items it would list
        in all: past the first ones a row only adds its item to a set."""
        iterator = iter(rows)
        picked = self._best_per_asset(iterator, kinds, keep, stop=first)
        counted = {asset_id for asset_id, _, _ in picked}
        chunks = self.chunks
        if kinds is None and keep is None:
            counted.update(chunk.asset_id for rowid, _ in iterator if (chunk := chunks.get(rowid)) is not None)
        else:
            counted.update(asset_id for asset_id, _, _ in self._best_per_asset(iterator, kinds, keep, skip=counted))
        return picked, len(counted)

    def _candidate_text(self, head: str, rowid: int, han_query: bool = False) -> str:
        # Folded per query for the few candidates only: a folded copy of every chunk would double memory.
        text = fold_fast(self.chunks[rowid].text)
        if not han_query:
            return head + "\n" + text
        # SR-8: Han query terms are Simplified; compare with the chunk's Simplified form, converted
        # once per chunk and kept only where it differs (Traditional text).
        if rowid not in self._simplified:
            converted = to_simplified(text)
            self._simplified[rowid] = converted if converted != text else None
        return head + "\n" + (self._simplified[rowid] or text)
