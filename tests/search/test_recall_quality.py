"""Recall quality through the real daemon (issue 18): prefix matches (SR-7), Traditional and
Simplified Chinese finding each other (SR-8), and the search filters (time window, author,
source). One daemon serves the whole module: every test here only reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.helpers import Cli
from tests.search.conftest import Engine

NOTES = [
    ("Cabin trip", "We rented a cabin by the lake for the summer."),
    ("Taxi", "Took a cab to the airport at dawn."),
    ("Cabinet", "The kitchen cabinet needs a new hinge."),
    ("Lake house", "Nothing about wooden huts here."),
    ("记忆", "我的记忆库存放在加密的保险库里。"),
    ("護照", "我的護照放在抽屜裡，明年到期。"),
    ("頭髮", "理髮店週六營業。"),
]


class RecallEngine(Engine):
    first_ms = 0  # created_ms of "Cabin decision"; "Cabin follow-up" was written after it


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecallEngine]:
    cli = Cli(home=tmp_path_factory.mktemp("recall") / "home")
    cli.init()
    for title, body in NOTES:
        cli.put(title, body)
    first = cli.ok(
        "put", "--title", "Cabin decision", "--body", "We chose the cabin near the pier.", "--meta", "source=chat:claude/42"
    )
    handle = RecallEngine(cli)
    # The window test needs one note strictly newer than the others: after this read, the put below is later.
    handle.first_ms = handle("get", id=first["id"])["created_ms"]
    cli.put("Cabin follow-up", "The cabin deposit is paid.")
    handle.wait_ready()
    yield handle
    handle.close()
    cli.stop()


def test_prefix_finds_words_it_begins_and_exact_word_ranks_first(engine: RecallEngine) -> None:
    """SR-7: `cab` finds cabin and cabinet (an unfinished word), and the note with the exact word ranks first."""
    titles = engine.search_titles("cab")
    assert titles[0] == "Taxi"
    assert set(titles) == {"Taxi", "Cabin trip", "Cabinet", "Cabin decision", "Cabin follow-up"}
    # A longer prefix narrows; an unrelated prefix finds nothing.
    assert set(engine.search_titles("cabi")) == {"Cabin trip", "Cabinet", "Cabin decision", "Cabin follow-up"}
    assert engine.search_titles("cabz") == []
    # Only the word being typed is a prefix: a finished word (followed by a space) matches exactly.
    assert engine.search_titles("cab ") == ["Taxi"]


def test_prefix_highlights_and_two_letter_prefixes_stay_exact(engine: RecallEngine) -> None:
    """SR-7: the snippet marks the matched beginning; prefixes under 3 letters match whole words only."""
    result = engine("search", query="cabi", wait_ms=120_000)
    snippets = {r["title"]: r["snippet"] for r in result["results"]}
    assert "**cabi**n" in snippets["Cabin trip"]
    assert engine.search_titles("ca") == []


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("記憶", "记忆"),  # Traditional query, Simplified note
        ("记忆库", "记忆"),
        ("护照", "護照"),  # Simplified query, Traditional note
        ("抽屉", "護照"),
        ("头发", "頭髮"),  # title match across scripts
        ("理发店", "頭髮"),
    ],
)
def test_traditional_and_simplified_find_each_other(engine: RecallEngine, query: str, title: str) -> None:
    """SR-8: a query in either script finds notes written in the other (OpenCC's t2s data)."""
    assert engine.search_titles(query)[:1] == [title]


def test_highlights_show_the_text_as_stored(engine: RecallEngine) -> None:
    """SR-8: the highlighted snippet is the stored Traditional text, not its Simplified index form."""
    result = engine("search", query="护照", wait_ms=120_000)
    hit = result["results"][0]
    assert hit["title"] == "護照"
    assert "**護照**" in hit["snippet"]
    assert "护照" not in hit["snippet"]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def test_time_window_filters_by_when_an_item_last_changed(engine: RecallEngine) -> None:
    """Issue 18: `since`/`until` keep items whose current revision falls in the window (dates, ISO times, ages)."""
    everything = {"Taxi", "Cabin trip", "Cabinet", "Cabin decision", "Cabin follow-up"}
    assert set(engine.search_titles("cabin", since="1h")) == everything - {"Taxi"}
    assert set(engine.search_titles("cab", since="1d")) == everything
    later = _iso(engine.first_ms + 1)
    assert engine.search_titles("cab", since=later) == ["Cabin follow-up"]
    assert "Cabin follow-up" not in engine.search_titles("cab", until=_iso(engine.first_ms))
    assert engine.search_titles("cab", until="2020-01-01") == []
    assert engine.search_titles("cab", since="2999-01-01") == []


def test_source_and_author_filters(engine: RecallEngine) -> None:
    """Issue 18: `source` matches the start of an item's source metadata; `author` a device fingerprint prefix."""
    assert engine.search_titles("cabin", source="chat:claude/") == ["Cabin decision"]
    assert engine.search_titles("cabin", source="chat:codex/") == []
    result = engine("search", query="cabin", wait_ms=120_000)
    author = engine("history", id=result["results"][0]["id"])["revisions"][-1]["author"]
    assert len(engine.search_titles("cabin", author=author[:8])) == 4
    other = author[:15] + ("0" if author[15] != "0" else "1")
    assert engine.search_titles("cabin", author=other) == []


def test_bad_filters_are_typed_errors_that_echo_nothing(engine: RecallEngine) -> None:
    """Issue 18, API-8: an unreadable time or an empty window is invalid_input with one sentence, not an empty result."""
    cli = engine.cli
    bad = cli.err("search", "cabin", "--since", "next tuesday sk-secret")
    assert bad["code"] == "invalid_input" and "sk-secret" not in bad["message"]
    empty = cli.err("search", "cabin", "--since", "2026-02-01", "--until", "2026-01-01")
    assert empty["code"] == "invalid_input"
    assert cli.err("search", "cabin", "--author", "xyz!")["code"] in ("invalid_input", "invalid_request")
    found = cli.ok("retrieve", "cabin", "--source", "chat:claude")
    assert [p["title"] for p in found["passages"]] == ["Cabin decision"]
