"""Recall quality through the real daemon (issue 18): prefix matches (SR-7), Traditional and
Simplified Chinese finding each other (SR-8), and the search filters (time window, author,
source). One daemon serves the whole module: every test here only reads."""

from __future__ import annotations

from collections.abc import Iterator

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


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    cli = Cli(home=tmp_path_factory.mktemp("recall") / "home")
    cli.init()
    for title, body in NOTES:
        cli.put(title, body)
    handle = Engine(cli)
    handle.wait_ready()
    yield handle
    handle.close()
    cli.stop()


def test_prefix_finds_words_it_begins_and_exact_word_ranks_first(engine: Engine) -> None:
    """SR-7: `cab` finds cabin and cabinet (an unfinished word), and the note with the exact word ranks first."""
    titles = engine.search_titles("cab")
    assert titles[0] == "Taxi"
    assert set(titles) == {"Taxi", "Cabin trip", "Cabinet"}
    # A longer prefix narrows; an unrelated prefix finds nothing.
    assert set(engine.search_titles("cabi")) == {"Cabin trip", "Cabinet"}
    assert engine.search_titles("cabz") == []


def test_prefix_highlights_and_two_letter_prefixes_stay_exact(engine: Engine) -> None:
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
def test_traditional_and_simplified_find_each_other(engine: Engine, query: str, title: str) -> None:
    """SR-8: a query in either script finds notes written in the other (OpenCC's t2s data)."""
    assert engine.search_titles(query)[:1] == [title]


def test_highlights_show_the_text_as_stored(engine: Engine) -> None:
    """SR-8: the highlighted snippet is the stored Traditional text, not its Simplified index form."""
    result = engine("search", query="护照", wait_ms=120_000)
    hit = result["results"][0]
    assert hit["title"] == "護照"
    assert "**護照**" in hit["snippet"]
    assert "护照" not in hit["snippet"]
