"""The in-memory SQLite FTS5 table with BM25 field weights title/body/metadata = 5/1/2 (SR-2, SR-4).

``:memory:`` with ``temp_store=MEMORY``: nothing of the index ever reaches a file (ST-2).

It runs on APSW's own, current SQLite rather than the one Python was built with (3.40 in
Python 3.11 here): FTS5 has become faster since, and ranking every match of a word most notes
hold (BM25 over ~9.6k rows) takes 4.0 instead of 6.6 ms, inserting 10k rows 60 instead of 89
ms, measured side by side on this machine (issue 20). The store itself stays on ``sqlite3``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from typing import NamedTuple, cast

import apsw

from engine.search.postings import WordPostings

__all__ = ["FtsIndex", "FtsRow", "BM25_WEIGHTS", "MAX_PREFIX_WORDS"]

# title, body, metadata; then the same three as CJK bigram columns, at half weight so
# that an exact Jieba word match outranks a bigram-only (context-split) match.
BM25_WEIGHTS = (5.0, 1.0, 2.0, 2.5, 0.5, 1.0)
# A prefix standing for more indexed words than this is ranked by FTS5 itself: walking the
# vocabulary word by word would cost more than it saves.
MAX_PREFIX_WORDS = 64
# Rows an index build inserted that are not yet in the word postings: a query brings up to this
# many in itself (~40 µs each); with more waiting, FTS5 ranks until the build has caught up.
ABSORB_AT_QUERY = 256
_ABSORB_BATCH = 1024  # rows per hold of the index's lock while a build catches the postings up


class FtsRow(NamedTuple):
    """One FTS5 row; a tuple, so a batch goes to executemany as it is (index builds insert 10k)."""

    rowid: int
    title: str
    body: str
    meta: str
    title_bg: str
    body_bg: str
    meta_bg: str


class FtsIndex:
    def __init__(self, image: bytes | bytearray | memoryview | None = None) -> None:
        """``image``: the bytes of :meth:`image` (a sealed snapshot's, issue 32): the table as it
        was, loaded into memory instead of built again; the word postings come separately."""
        self._conn = apsw.Connection(":memory:")
        self._conn.execute("PRAGMA temp_store=MEMORY")
        if image is not None:
            # Still a :memory: database: SQLite copies the image into memory it owns (ST-2).
            self._conn.deserialize("main", image)
        else:
            # unicode61 splits our pre-segmented, space-joined tokens; diacritics are kept
            # as written (folding is done before, identically for documents and queries).
            # Contentless (issue 32): nothing reads a column back (bm25, phrases and the vocabulary
            # need only the index; snippets come from the chunk texts VaultIndex keeps), and the
            # token texts were 70% of the table's memory (18 of 26 MiB at 10k notes).
            # ``contentless_delete`` lets a row be deleted by its rowid alone.
            self._conn.execute(
                "CREATE VIRTUAL TABLE chunks USING fts5("
                "title, body, meta, title_bg, body_bg, meta_bg, content='', contentless_delete=1, "
                "tokenize = 'unicode61 remove_diacritics 0')"
            )
        # Pages FTS5 frees as it merges segments (and deleted cells) are zeroed (issue 32): the sealed
        # snapshot holds this database's image, whose free pages otherwise kept stale index data,
        # tokens of edited and deleted notes included, which also compressed poorly (at 10k notes the
        # image deflated to 3.92 MB, 3.55 MB with its 190 free pages zeroed). Set after ``deserialize``,
        # which gives ``main`` a new b-tree.
        self._conn.execute("PRAGMA secure_delete=ON")
        # Every indexed word once per occurrence, in byte order: a range lookup in it stops at
        # the first row, so asking for the word after a prefix costs microseconds.
        self._conn.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, chunks, instance)")
        self._lock = threading.Lock()
        tokenizer = self._conn.fts5_tokenizer("unicode61", ["remove_diacritics", "0"])

        def tokenize(text: str, flags: int = apsw.FTS5_TOKENIZE_DOCUMENT) -> list[str]:
            return cast(list[str], tokenizer(text.encode(), flags, None, include_offsets=False, include_colocated=False))

        self._tokenize = tokenize
        self._closed = False
        # Row ID -> word-column texts of rows in FTS5 but not yet in the postings (in insertion order).
        self._pending: dict[int, tuple[int, str, str, str]] = {}
        self._postings = WordPostings(tokenize, (BM25_WEIGHTS[0], BM25_WEIGHTS[1], BM25_WEIGHTS[2]))
        # The postings read each row's token count (bm25's D) from FTS5's own docsize record, in
        # the layout of FTS5 data version 4 (one varint per column); another version: FTS5 ranks.
        version = self._conn.execute("SELECT v FROM chunks_config WHERE k = 'version'").fetchone()
        self._postings.usable = version is not None and version[0] == 4
        weights = ", ".join(str(w) for w in BM25_WEIGHTS)
        self._query_sql = (
            f"SELECT rowid, bm25(chunks, {weights}) AS score FROM chunks "  # noqa: S608 - constants only
            "WHERE chunks MATCH ? ORDER BY score LIMIT ?"
        )

    def add(self, rows: Iterable[FtsRow], *, defer_postings: bool = False) -> None:
        """``defer_postings``: an index build's batch, whose rows join the word postings at
        ``catch_up_postings`` (the search runtime's job, outside the service lock), not now under it."""
        # One transaction per batch (``with`` the connection): APSW does not open one
        # implicitly, and a commit per row would double the cost of an index build.
        batch = list(rows)
        with self._lock:
            with self._conn:
                self._conn.executemany(
                    "INSERT INTO chunks (rowid, title, body, meta, title_bg, body_bg, meta_bg) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    batch,
                )
            if not self._postings.usable or not batch:
                return
            if defer_postings:
                self._pending.update((row.rowid, (row.rowid, row.title, row.body, row.meta)) for row in batch)
            else:  # a build's rows still waiting stay for its catch-up
                self._postings.add([row[:4] for row in batch], self._row_lengths([row.rowid for row in batch]))

    @property
    def postings_waiting(self) -> int:
        """Rows waiting for ``catch_up_postings`` (a build's, deferred): bare-word queries are
        ranked by FTS5 while more than ABSORB_AT_QUERY wait."""
        return 0 if self._closed else len(self._pending)

    def catch_up_postings(self) -> None:
        """Bring the word postings up to date with FTS5, a batch per hold of the index's lock."""
        while True:
            with self._lock:
                if self._closed or not self._pending:
                    return
                self._absorb(_ABSORB_BATCH)

    def _absorb(self, limit: int) -> None:
        taken = list(itertools.islice(self._pending.values(), limit))
        for row in taken:
            del self._pending[row[0]]
        if taken:
            self._postings.add(taken, self._row_lengths([row[0] for row in taken]))

    def _row_lengths(self, rowids: list[int]) -> list[int]:
        """Each row's tokens over all columns as FTS5 counted them (its docsize record)."""
        low, high = min(rowids), max(rowids)
        if high - low < 2 * len(rowids):
            sizes = dict(self._conn.execute("SELECT id, sz FROM chunks_docsize WHERE id BETWEEN ? AND ?", (low, high)))
        else:  # scattered (rows deleted in between): one lookup each rather than a long range
            lookup = "SELECT id, sz FROM chunks_docsize WHERE id = ?"
            sizes = dict(row for rowid in rowids for row in self._conn.execute(lookup, (rowid,)))
        return [_varint_sum(cast(bytes, sizes[rowid])) for rowid in rowids]

    def delete(self, rowids: Iterable[int]) -> None:
        gone = list(rowids)
        with self._lock:
            with self._conn:
                self._conn.executemany("DELETE FROM chunks WHERE rowid = ?", [(r,) for r in gone])
            if self._postings.usable:
                self._postings.delete([r for r in gone if self._pending.pop(r, None) is None])

    def only_word_with_prefix(self, word: str) -> bool:
        """Whether ``word`` is an indexed word and no other indexed word begins with it, so that
        the FTS5 prefix query ``word *`` matches exactly what ``word`` matches."""
        with self._lock:
            if self._next_word(word) != word:
                return False  # not a word of the index as written (or not one token): keep the prefix
            after = self._next_word(word + "\x00")
        return after is None or not after.startswith(word)

    def _next_word(self, bound: str) -> str | None:
        """The first indexed word at or after ``bound`` in byte order. A range lookup in the
        instance table stops at its first row, so this costs microseconds; ``word + "\x00"``
        (which sorts before every longer word) asks for the word after ``word``, where an
        ``> word`` bound would step over each of its occurrences instead."""
        row = self._conn.execute("SELECT term FROM temp.words WHERE term >= ? LIMIT 1", (bound,)).fetchone()
        return None if row is None else str(row[0])

    def query_words(self, clauses: list[tuple[str, bool]], limit: int, *, lone: bool) -> list[tuple[int, float]] | None:
        """What ``query`` answers for the OR of ``clauses`` (a word, and whether its SR-7 prefix
        clause is kept), from the word postings: the same rows, order and scores without scoring
        every match in FTS5. ``lone``: the query is one word, whose prefix clause is dropped when
        no longer word begins with it (as ``only_word_with_prefix`` decides for ``query``). None
        when FTS5 must answer: a word its tokenizer would split, or a prefix of too many words."""
        with self._lock:
            if not self._postings.usable or len(self._pending) > ABSORB_AT_QUERY:
                return None
            self._absorb(len(self._pending))
            phrases: list[list[str]] = []
            for term, with_prefix in clauses:
                tokens = self._tokenize(term, apsw.FTS5_TOKENIZE_QUERY)
                if len(tokens) != 1:
                    return None  # FTS5 would match a phrase of several tokens: positions needed
                word = tokens[0]
                phrases.append([word])
                if with_prefix:
                    expansion = self._words_with_prefix(word)
                    if expansion is None:
                        return None
                    if lone and expansion == [word]:
                        continue
                    phrases.append(expansion)
            return self._postings.rank(phrases, limit)

    def _words_with_prefix(self, prefix: str) -> list[str] | None:
        """The indexed words that begin with ``prefix`` (FTS5's prefix query), in byte order."""
        words: list[str] = []
        word = self._next_word(prefix)
        while word is not None and word.startswith(prefix):
            if len(words) == MAX_PREFIX_WORDS:
                return None
            words.append(word)
            word = self._next_word(word + "\x00")
        return words

    def query(self, match: str, limit: int) -> list[tuple[int, float]]:
        """Best ``limit`` rows, best first; scores are negated BM25 (higher is better)."""
        if not match:
            return []
        with self._lock:
            try:
                rows = self._conn.execute(self._query_sql, (match, limit)).fetchall()
            except apsw.SQLError:
                # Our expressions quote every token, so this means an FTS5 limit; treat as no hit.
                return []
        return [(int(cast(int, rowid)), -float(cast(float, score))) for rowid, score in rows]

    # -- snapshots (issue 32) -------------------------------------------------------------
    def image(self) -> tuple[bytes, bytes]:
        """The FTS5 database's bytes and the word postings' (see WordPostings.dump), with every
        row a build deferred absorbed first, so that both describe the same rows."""
        with self._lock:
            self._absorb(len(self._pending))
            return self._conn.serialize("main"), self._postings.dump()

    def load_postings(self, data: bytes | bytearray | memoryview) -> None:
        """The word postings of the same snapshot as this table's image (see ``image``)."""
        with self._lock:
            self._postings.load(data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
            self._postings.clear()
            self._pending.clear()


def _varint_sum(blob: bytes) -> int:
    """The sum of the SQLite varints in ``blob`` (big-endian 7-bit groups; a column's token
    count never needs the 9-byte form)."""
    total = value = 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            total += value
            value = 0
    return total
