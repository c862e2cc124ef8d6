"""Word postings beside the FTS5 table: FTS5's own bm25 for bare-word queries, best rows only.

FTS5 ranks a query by computing bm25 for every matching row (a document-size lookup and a
position-list decode per row, ~0.4 µs each) and then sorting. A word most notes hold made that
4 ms of a search's 5 ms (issue 20): the cost of a whole-process ``search`` beyond a bare
interpreter. These postings hold, for every word of the title, body and metadata columns, the
rows it occurs in and its field-weighted frequency there (title 5, body 1, metadata 2 per
occurrence, BM25_WEIGHTS), and every row's token count over all six columns as FTS5 recorded
it (its docsize record, read by ``FtsIndex``). That is all
FTS5's bm25 reads for a query of OR-ed single words and prefixes, so :meth:`WordPostings.rank`
computes the same scores (the same floating-point operations in the same order, see
``_phrase_scores``) for all matching rows at once in numpy and sorts only the best ``limit``.

Queries with phrases, column filters or CJK words keep going to FTS5 (``FtsIndex.query``);
tests/search/test_search_postings.py checks rows, order and scores against FTS5 on generated
vaults and queries.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import msgspec

from engine.lazy_import import LazyModule

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    np = LazyModule("numpy")

__all__ = ["WordPostings", "K1", "B", "FREQ_BITS"]

# FTS5's bm25 constants (ext/fts5/fts5_aux.c).
K1 = 1.2
B = 0.75
# FTS5 clamps the IDF of a word more than half the rows hold to this (fts5_aux.c).
_IDF_FLOOR = 1e-6


# A posting is one int64: the row ID above FREQ_BITS, the word's weighted frequency below.
FREQ_BITS = 24
_FREQ_MASK = (1 << FREQ_BITS) - 1


class WordPostings:
    """``tokenize`` must be the FTS5 table's own tokenizer (APSW's handle to it), so that the
    words are FTS5's exactly; ``weights`` are bm25's title, body and metadata weights, whole
    numbers (as BM25_WEIGHTS are), so that a row's weighted frequency is an exact integer."""

    def __init__(self, tokenize: Callable[[str], list[str]], weights: tuple[float, float, float]) -> None:
        if any(w != int(w) or w < 0 for w in weights):
            raise ValueError("word postings need whole-number field weights")
        self._tokenize = tokenize
        self._weights = (int(weights[0]), int(weights[1]), int(weights[2]))
        self.clear()

    def clear(self) -> None:
        self._slot: dict[str, int] = {}  # word -> its postings in _lists
        self._lists: list[array[int]] = []  # postings of one word, ascending row IDs (never reused)
        self._length = np.zeros(1024, np.float64)  # row ID -> FTS5's token count over all six columns
        self._live = np.zeros(1024, np.bool_)
        self._distinct = np.zeros(1024, np.int32)  # row ID -> postings it holds
        self._rows = 0
        self._tokens = 0
        self._postings = 0
        self._dead_postings = 0
        self.usable = True  # False once a frequency could outgrow its bits: FTS5 answers from then on

    # -- updates ------------------------------------------------------------------------
    def add(self, rows: Sequence[tuple[int, str, str, str]], lengths: Sequence[int]) -> None:
        """``rows``: row ID, title, body and metadata text as inserted into FTS5, each row ID
        once (FTS5 refuses a second insert first), in any order; ``lengths``: each row's token count over
        all columns as FTS5 recorded it (bm25's D)."""
        if not rows or not self.usable:
            return
        self._reserve(max(row[0] for row in rows))
        w_title, w_body, w_meta = self._weights
        most = max(self._weights)
        tokenize = self._tokenize
        batch_words: list[str] = []
        batch_postings: list[int] = []
        for (rowid, title, body, meta), length in zip(rows, lengths, strict=True):
            if length * most > _FREQ_MASK:
                self.usable = False  # a word's weighted frequency might not fit: FTS5 ranks
                return
            # Counted in C by Counter: the body is most of the tokens.
            freqs: Counter[str] = Counter(tokenize(body)) if body else Counter()
            if w_body != 1:
                for word in freqs:
                    freqs[word] *= w_body
            for text, weight in ((title, w_title), (meta, w_meta)):
                if text:
                    for word in tokenize(text):
                        freqs[word] += weight
            batch_words += freqs
            base = rowid << FREQ_BITS
            batch_postings += [base | freq for freq in freqs.values()]
            self._length[rowid] = length
            self._live[rowid] = True
            self._distinct[rowid] = len(freqs)
            self._rows += 1
            self._tokens += length
        self._append(batch_words, batch_postings)

    def _append(self, words: list[str], postings: list[int]) -> None:
        """Appends each posting to its word's list: grouped by word in numpy (a stable sort keeps
        each word's rows ascending), one append per word rather than a Python step per posting."""
        if not words:
            return
        slot_of, lists = self._slot, self._lists
        for word in set(words).difference(slot_of):
            slot_of[word] = len(lists)
            lists.append(array("q"))
        slots = np.fromiter(map(slot_of.__getitem__, words), np.int64, count=len(words))
        order = np.argsort(slots, kind="stable")
        slots, values = slots[order], np.array(postings, np.int64)[order]
        starts = np.flatnonzero(np.diff(slots)) + 1
        for slot, part in zip(slots[np.concatenate(([0], starts))].tolist(), np.split(values, starts), strict=True):
            lists[slot].frombytes(part.tobytes())
        self._postings += len(words)

    def delete(self, rowids: Sequence[int]) -> None:
        for rowid in rowids:
            if rowid < len(self._live) and self._live[rowid]:
                self._live[rowid] = False
                self._rows -= 1
                self._tokens -= int(self._length[rowid])
                self._dead_postings += int(self._distinct[rowid])
        # A deleted row's postings stay (rows are not reused, the live mask hides them) until
        # they are half of all: then one pass drops them, so edits cost O(1) amortized.
        if self._dead_postings > 4096 and self._dead_postings * 2 > self._postings:
            self._compact()

    def _compact(self) -> None:
        slot_of: dict[str, int] = {}
        lists: list[array[int]] = []
        for word, slot in self._slot.items():
            packed = np.frombuffer(self._lists[slot], np.int64)
            alive = packed[self._live[packed >> FREQ_BITS]]
            if len(alive):
                slot_of[word] = len(lists)
                lists.append(array("q", alive.tobytes()))
        self._slot, self._lists = slot_of, lists
        self._postings -= self._dead_postings
        self._dead_postings = 0

    def _reserve(self, rowid: int) -> None:
        size = len(self._live)
        if rowid < size:
            return
        while size <= rowid:
            size *= 2
        self._length = np.concatenate([self._length, np.zeros(size - len(self._length), np.float64)])
        self._live = np.concatenate([self._live, np.zeros(size - len(self._live), np.bool_)])
        self._distinct = np.concatenate([self._distinct, np.zeros(size - len(self._distinct), np.int32)])

    # -- snapshots (issue 32) -------------------------------------------------------------
    def dump(self) -> bytes:
        """Everything :meth:`load` needs to answer as these postings do (dead postings dropped)."""
        if self._dead_postings:
            self._compact()
        words = [""] * len(self._lists)
        for word, slot in self._slot.items():
            words[slot] = word
        sizes = np.fromiter((len(part) for part in self._lists), np.int64, count=len(self._lists))
        return msgspec.msgpack.encode(
            {
                "usable": self.usable,
                "words": words,
                "sizes": sizes.tobytes(),
                "postings": b"".join(part.tobytes() for part in self._lists),
                "length": self._length.tobytes(),
                "live": self._live.tobytes(),
                "distinct": self._distinct.tobytes(),
                "rows": self._rows,
                "tokens": self._tokens,
            }
        )

    def load(self, data: bytes | bytearray | memoryview) -> None:
        """Replace these postings with a :meth:`dump`; ValueError if it is not one."""
        try:
            fields = msgspec.msgpack.decode(data, type=_Dump)
            sizes = np.frombuffer(fields.sizes, np.int64)
            postings = np.frombuffer(fields.postings, np.int64)
            length = np.frombuffer(fields.length, np.float64).copy()
            live = np.frombuffer(fields.live, np.bool_).copy()
            distinct = np.frombuffer(fields.distinct, np.int32).copy()
        except (msgspec.DecodeError, ValueError) as exc:
            raise ValueError("not a postings dump") from exc
        if len(sizes) != len(fields.words) or int(sizes.sum()) != len(postings) or not len(length) == len(live) == len(distinct):
            raise ValueError("not a postings dump")
        ends = np.cumsum(sizes).tolist()
        starts = [0, *ends[:-1]]
        self.clear()
        self.usable = fields.usable
        self._slot = {word: slot for slot, word in enumerate(fields.words)}
        self._lists = [array("q", postings[a:b].tobytes()) for a, b in zip(starts, ends, strict=True)]
        self._length, self._live, self._distinct = length, live, distinct
        self._rows, self._tokens, self._postings = fields.rows, fields.tokens, len(postings)

    # -- queries ------------------------------------------------------------------------
    def rank(self, phrases: Sequence[Sequence[str]], limit: int) -> list[tuple[int, float]]:
        """The best ``limit`` rows of the OR of ``phrases``, best first, with FTS5's bm25 negated
        (higher is better), as ``FtsIndex.query`` returns them. A phrase is one word, or the
        words a prefix stands for: each instance of any of them is an instance of the phrase."""
        if self._rows == 0 or limit <= 0:
            return []
        avgdl = self._tokens / self._rows
        found: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
        for words in phrases:
            rows, freqs = self._phrase_rows(words)
            if len(rows):
                found.append((rows, self._phrase_scores(rows, freqs, avgdl)))
        if not found:
            return []
        if len(found) == 1:
            rows, scores = found[0]
        else:
            # A row's score is the sum over phrases in query order, starting from 0.0, as FTS5
            # adds them; bincount adds in index order, which is phrase order here.
            all_rows = np.concatenate([r for r, _ in found])
            rows, slot = np.unique(all_rows, return_inverse=True)
            weights = np.concatenate([s for _, s in found])
            scores = cast("npt.NDArray[np.float64]", np.bincount(slot, weights=weights, minlength=len(rows)))
        return self._best(rows, scores, limit)

    def _phrase_rows(self, words: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        parts = [self._lists[self._slot[w]] for w in dict.fromkeys(words) if w in self._slot]
        if not parts:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        packed = np.concatenate([np.frombuffer(p, np.int64) for p in parts])
        rows = packed >> FREQ_BITS
        alive = self._live[rows]
        rows, freqs = rows[alive], (packed[alive] & _FREQ_MASK).astype(np.float64)
        if len(parts) > 1:
            rows, slot = np.unique(rows, return_inverse=True)
            freqs = np.bincount(slot, weights=freqs, minlength=len(rows))
        return rows, freqs

    def _phrase_scores(
        self, rows: npt.NDArray[np.int64], freqs: npt.NDArray[np.float64], avgdl: float
    ) -> npt.NDArray[np.float64]:
        # fts5Bm25Function, operation for operation:
        #   idf = log((nRow - nHit + 0.5) / (nHit + 0.5)), at least 1e-6
        #   num = aFreq * (k1 + 1.0);  den = aFreq + k1 * (1 - b + b * D / avgdl)
        #   score += idf * (num / den)
        hits = len(rows)
        idf = math.log((self._rows - hits + 0.5) / (hits + 0.5))
        if idf <= 0.0:
            idf = _IDF_FLOOR
        length = self._length[rows]
        num = freqs * (K1 + 1.0)
        den = freqs + K1 * ((1 - B) + (B * length) / avgdl)
        scores: npt.NDArray[np.float64] = idf * (num / den)
        return scores

    @staticmethod
    def _best(rows: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], limit: int) -> list[tuple[int, float]]:
        if len(rows) > limit:
            # Everything scoring above the limit-th best, plus that score's ties, then the order
            # FTS5's ORDER BY gives equal scores: ascending row ID.
            cutoff = np.partition(scores, len(scores) - limit)[len(scores) - limit]
            chosen = scores >= cutoff
            rows, scores = rows[chosen], scores[chosen]
        order = np.lexsort((rows, -scores))[:limit]
        # tolist() gives Python ints and floats already; zip builds the pairs in C (a counted
        # search takes 5,000 of them, DT-7).
        return list(zip(rows[order].tolist(), scores[order].tolist(), strict=True))


class _Dump(msgspec.Struct):
    usable: bool
    words: list[str]
    sizes: bytes
    postings: bytes
    length: bytes
    live: bytes
    distinct: bytes
    rows: int
    tokens: int
