"""A document to index, and its prepared (chunked + segmented) form, which is the costly part (SR-6)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.search.chunker import CHUNKER_VERSION, Chunk, chunk_text
from engine.search.segment import SEGMENTER_VERSION, Segmented, Segmenter

__all__ = ["Document", "Prepared", "PreparedChunk", "prepare", "PREPARED_VERSION", "TOKENS_KIND", "AUX_MARK", "AUX_INDEX_CHARS"]

PREPARED_VERSION = f"{SEGMENTER_VERSION}/chunker-{CHUNKER_VERSION}/record-2"
TOKENS_KIND = "search_tokens"
# A body may put low-weight text after this line (AG-8: a transcript turn's tool calls, tool
# output and client-injected events after the conversation). Its chunks are indexed as rows of
# their own, flagged ``aux``, whose scores count AUX_WEIGHT (engine/search/index.py): searchable,
# but never drowning the conversation. Invisible separators, so that typed text never holds it.
AUX_MARK = "\n\n\u2063\u2063\u2063\n\n"
# Low-weight text indexed per document (the stored item keeps all of it): a tool that printed
# a megabyte is not worth a thousand rows.
AUX_INDEX_CHARS = 12_000


@dataclass(frozen=True, slots=True)  # one per indexed asset is kept (VaultIndex.assets): no __dict__
class Document:
    asset_id: bytes
    rev_id: bytes
    kind: str
    title: str
    body: str
    tags: tuple[str, ...]
    meta: tuple[tuple[str, str], ...]
    updated_ms: int

    aux: bool = False  # the body may hold AUX_MARK (only where the summary says so)

    def with_revision(self, rev_id: bytes, updated_ms: int) -> Document:
        """This document under another revision ID object and time: what ``dataclasses.replace``
        gives, built directly (issue 32: an unlock swaps one per asset of its snapshot, and
        ``replace`` inspects the fields each time, ~1.5 us of the 2 a swap cost at 100k)."""
        return Document(self.asset_id, rev_id, self.kind, self.title, self.body, self.tags, self.meta, updated_ms, self.aux)

    @property
    def meta_text(self) -> str:
        """Tags and metadata values, searched in the metadata field (weight 2). Joined when asked
        (twice per indexed note), not kept: the index keeps a Document per asset (issue 32)."""
        parts = list(self.tags)
        parts.extend(f"{key} {value}" for key, value in self.meta if key != "private")
        return "\n".join(parts)

    @classmethod
    def from_summary(
        cls, asset_id: bytes, rev_id: bytes, kind: str, summary: Mapping[str, Any], body: str, updated_ms: int
    ) -> Document:
        raw_meta = summary.get("meta")
        meta = raw_meta if isinstance(raw_meta, Mapping) else {}
        return cls(
            asset_id=asset_id,
            rev_id=rev_id,
            kind=kind,
            title=str(summary.get("title", "")),
            body=body,
            # Interned: the index keeps each asset's tags, and a vault has few distinct ones.
            tags=tuple(sys.intern(str(t)) for t in summary.get("tags", []) if isinstance(t, str)),
            meta=tuple(sorted((str(k), str(v)) for k, v in meta.items())),
            updated_ms=updated_ms,
            aux=summary.get("aux") is True,
        )

    def parts(self) -> tuple[str, int]:
        """(conversation part, offset of the low-weight part or len(body) if none)."""
        if not self.aux:
            return self.body, len(self.body)
        at = self.body.find(AUX_MARK)
        if at < 0:
            return self.body, len(self.body)
        return self.body[:at], at + len(AUX_MARK)


@dataclass(frozen=True)
class PreparedChunk:
    start: int
    end: int
    words: str
    bigrams: str
    aux: bool = False  # a chunk of the low-weight part (AUX_MARK)


@dataclass(frozen=True)
class Prepared:
    """One revision's indexable text and token streams.

    It carries the revision's own title, tags, metadata and body, so an unlock
    rebuilds the index from these records alone, without decrypting or
    segmenting any revision (SR-6). They are immutable facts of that revision.
    """

    rev_id: bytes
    version: str
    title: Segmented
    meta: Segmented
    chunks: tuple[PreparedChunk, ...]
    summary: dict[str, Any]  # {"title", "tags", "meta"} of the revision, for exclusion and display
    body: str

    def to_record(self) -> dict[str, Any]:
        """An encrypted extra record (device-local state, never synced or backed up)."""
        return {
            "t": TOKENS_KIND,
            "rev": self.rev_id,
            "v": self.version,
            "title": [self.title.words, self.title.bigrams],
            "meta": [self.meta.words, self.meta.bigrams],
            "chunks": [[c.start, c.end, c.words, c.bigrams, *((1,) if c.aux else ())] for c in self.chunks],
            "summary": self.summary,
            "body": self.body,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Prepared | None:
        """None for a record of another segmenter/chunker version or of an unknown shape.

        Unlock turns every stored record into a Prepared (10k per 10k notes), so the shape is
        checked with exact type tests rather than by converting every field.
        """
        try:
            if record.get("v") != PREPARED_VERSION:
                return None
            summary, body = record["summary"], record["body"]
            title, meta = record["title"], record["meta"]
            if type(summary) is not dict or type(body) is not str:
                return None
            chunks = tuple(PreparedChunk(c[0], c[1], c[2], c[3], len(c) > 4 and c[4] == 1) for c in record["chunks"])
            if not all(
                type(c.start) is int
                and type(c.end) is int
                and type(c.words) is str
                and type(c.bigrams) is str
                and 0 <= c.start <= c.end <= len(body)
                for c in chunks
            ):
                return None
            if not all(type(x) is str for x in (*title, *meta)):
                return None
            raw_meta = summary.get("meta", {})
            return cls(
                rev_id=bytes(record["rev"]),
                version=PREPARED_VERSION,
                title=Segmented(*title),
                meta=Segmented(*meta),
                chunks=chunks,
                summary={
                    "title": str(summary.get("title", "")),
                    "tags": [str(t) for t in summary.get("tags", [])],
                    "meta": {str(k): str(v) for k, v in dict(raw_meta).items()},
                    **({"aux": True} if summary.get("aux") is True else {}),
                },
                body=body,
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None

    def fits(self, doc: Document) -> bool:
        return self.rev_id == doc.rev_id and self.body == doc.body

    def document(self, asset_id: bytes, kind: str, updated_ms: int) -> Document:
        return Document.from_summary(asset_id, self.rev_id, kind, self.summary, self.body, updated_ms)


def prepare(doc: Document, segmenter: Segmenter) -> Prepared:
    main, aux_at = doc.parts()
    chunks = tuple(
        PreparedChunk(c.start, c.end, seg.words, seg.bigrams)
        # An empty body still gets one (empty) chunk so the title and tags are findable.
        for c in (chunk_text(main) or [Chunk(0, 0, "")])
        for seg in (segmenter.segment(c.text),)
    )
    if aux_at < len(doc.body):
        aux = doc.body[aux_at : aux_at + AUX_INDEX_CHARS]
        chunks += tuple(
            PreparedChunk(aux_at + c.start, aux_at + c.end, seg.words, seg.bigrams, True)
            for c in chunk_text(aux)
            for seg in (segmenter.segment(c.text),)
        )
    return Prepared(
        rev_id=doc.rev_id,
        version=PREPARED_VERSION,
        title=segmenter.segment(doc.title),
        meta=segmenter.segment(doc.meta_text),
        chunks=chunks,
        summary={"title": doc.title, "tags": list(doc.tags), "meta": dict(doc.meta), **({"aux": True} if doc.aux else {})},
        body=doc.body,
    )


def chunk_key(title: bytes, text: bytes) -> bytes:
    """Identity of a chunk's embedded text (UTF-8 title + passage); not an asset ID and never shown as one."""
    return hashlib.sha256(title + b"\x00" + text).digest()
