"""Query parsing and the FTS5 MATCH expression (terms OR-ed; BM25 and the reranker order them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engine.search.normalize import fold, is_cjk_text
from engine.search.script import to_simplified
from engine.search.segment import CJK_RUN, STOPWORDS, Segmenter, cjk_bigrams, has_cjk

__all__ = ["ParsedQuery", "parse_query", "MAX_QUERY_CHARS"]

MAX_QUERY_CHARS = 1000
MAX_TERMS = 32
# Shorter prefixes match too much to help: "ca" would find every note with a word in ca….
PREFIX_MIN_CHARS = 3
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」')
WORD_COLS = "{title body meta}"
BIGRAM_COLS = "{title_bg body_bg meta_bg}"


def _fts_string(token: str) -> str:
    """An FTS5 string literal; doubling quotes is the whole escaping rule."""
    return '"' + token.replace('"', '""') + '"'


@dataclass
class ParsedQuery:
    text: str
    terms: list[str] = field(default_factory=list)  # folded, de-duplicated, stopwords removed
    phrases: list[str] = field(default_factory=list)  # folded quoted phrases
    phrase_tokens: list[list[str]] = field(default_factory=list)
    cjk_runs: list[str] = field(default_factory=list)  # CJK runs of 3+ characters
    prefix: str | None = None  # the unfinished last word (SR-7), matched as a prefix too

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases and not self.cjk_runs

    @property
    def lone_prefix(self) -> str | None:
        """The prefix when it is the query's only word (no other term, phrase or CJK run)."""
        if self.prefix is not None and self.terms == [self.prefix] and not self.phrases and not self.cjk_runs:
            return self.prefix
        return None

    def bare_words(self) -> list[tuple[str, bool]] | None:
        """The query as OR-ed bare words, each with whether its SR-7 prefix clause is kept, when
        that is all its match expression holds (no phrase, no CJK run, no word with CJK
        characters, which get column filters and bigram alternatives): what the word postings
        rank without FTS5 (``FtsIndex.query_words``). None otherwise."""
        if self.phrases or self.cjk_runs:
            return None
        if any(CJK_RUN.search(term) is not None or is_cjk_text(term) for term in self.terms):
            return None
        return [(term, term == self.prefix) for term in self.terms]

    def match_expression(self, *, prefix_is_word: bool = False) -> str:
        """``prefix_is_word``: the index holds the prefix as a word and no longer word that begins
        with it. A lone prefix then drops its prefix clause: it would match the same rows and the
        same instances as the word clause, so BM25 of ``w OR w*`` is exactly twice that of ``w``
        on every row (same order, same normalized scores), and FTS5 skips merging a prefix doclist
        and scoring a second phrase for every match. With other clauses the sum would not be
        proportional, so the prefix stays."""
        keep_prefix = not (prefix_is_word and self.lone_prefix is not None)
        clauses: list[str] = []
        for term in self.terms:
            clauses.append(_term_clause(term, prefix=keep_prefix and term == self.prefix))
        for tokens, phrase in zip(self.phrase_tokens, self.phrases, strict=True):
            if not tokens:
                continue
            clause = f"{WORD_COLS} : " + _fts_string(" ".join(tokens))
            bigrams = cjk_bigrams(phrase)
            if bigrams and is_cjk_text(phrase.replace(" ", "")):
                clause = f"({clause} OR {BIGRAM_COLS} : {_fts_string(' '.join(bigrams))})"
            clauses.append(clause)
        for run in self.cjk_runs:
            # The whole CJK run as a bigram phrase: catches words Jieba split differently
            # in the document than in the query (记忆库 vs 记忆/库来).
            clauses.append(f"{BIGRAM_COLS} : " + _fts_string(" ".join(cjk_bigrams(run))))
        return " OR ".join(clauses)


def _term_clause(term: str, *, prefix: bool = False) -> str:
    # The bigram columns hold only tokens of CJK characters, so a term without any matches
    # there neither as a word nor as a prefix: without the column filter FTS5 finds the same
    # rows and instances (the same BM25) and skips filtering each position list by column.
    cols = f"{WORD_COLS} : " if CJK_RUN.search(term) is not None else ""
    word = cols + _fts_string(term)
    if prefix:
        # SR-7: an unfinished word ("cab") also matches the words it begins ("cabin"). A note
        # with the exact word matches both the word and the prefix, so BM25 ranks it first.
        return f"({word} OR {cols}{_fts_string(term)} *)"
    if is_cjk_text(term) and len(term) >= 2:
        return f"({word} OR {BIGRAM_COLS} : {_fts_string(' '.join(cjk_bigrams(term)))})"
    return word


def parse_query(text: str, segmenter: Segmenter) -> ParsedQuery:
    folded = to_simplified(fold(text[:MAX_QUERY_CHARS]))  # SR-8: the index holds Simplified forms too
    parsed = ParsedQuery(text=folded)
    for match in _QUOTED.finditer(folded):
        phrase = next(g for g in match.groups() if g is not None).strip()
        if phrase:
            parsed.phrases.append(phrase)
            parsed.phrase_tokens.append(segmenter.words(phrase))
    rest = _QUOTED.sub(" ", folded)
    seen: set[str] = set()
    for source in [rest, *parsed.phrases]:
        for token in segmenter.words(source):
            if token in STOPWORDS or token in seen:
                continue
            seen.add(token)
            parsed.terms.append(token)
    if not parsed.terms and not parsed.phrases:
        # A query of stopwords only ("what is it") still searches for its words.
        for token in segmenter.words(rest):
            if token not in seen:
                seen.add(token)
                parsed.terms.append(token)
    parsed.terms = parsed.terms[:MAX_TERMS]
    # SR-7: the word being typed is the last one, when the text does not end in a space or a
    # quote; only it is matched as a prefix too (a prefix per word would slow every query).
    last = segmenter.words(rest)[-1:] if folded[-1:].isalnum() else []
    if last and last[0] in parsed.terms and len(last[0]) >= PREFIX_MIN_CHARS and not has_cjk(last[0]):
        parsed.prefix = last[0]
    parsed.cjk_runs = [r for r in dict.fromkeys(CJK_RUN.findall(rest)) if len(r) >= 3][:MAX_TERMS]
    return parsed
