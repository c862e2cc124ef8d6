"""Malformed-input tests for the import parsers (outside bytes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cli.importers import ImportFormatError, parse_jsonl_line, parse_markdown


def test_front_matter_forms() -> None:
    text = '---\ntitle: "Quoted: title"\ntags:\n  - a\n  - b\nauthor: Ana\n---\nbody\n'
    item = parse_markdown(text, "x.md", "fallback")
    assert item == {"title": "Quoted: title", "body": "body", "tags": ["a", "b"], "meta": {"author": "Ana"}}


def test_unclosed_front_matter() -> None:
    with pytest.raises(ImportFormatError, match="not closed"):
        parse_markdown("---\ntitle: x\nmore: y\n", "x.md", "f")


def test_bad_front_matter_line() -> None:
    with pytest.raises(ImportFormatError, match="line 2"):
        parse_markdown("---\nno colon here\n---\n", "x.md", "f")


@given(st.text(max_size=300))
def test_markdown_parser_never_crashes(text: str) -> None:
    try:
        item = parse_markdown(text, "x.md", "fallback")
    except ImportFormatError:
        return
    assert isinstance(item["title"], str) and item["title"]


@given(st.text(max_size=200))
def test_jsonl_parser_typed_errors_only(line: str) -> None:
    try:
        parse_jsonl_line(line, "x.jsonl", 1)
    except ImportFormatError as exc:
        assert "line 1" in str(exc)


def test_jsonl_does_not_echo_values() -> None:
    with pytest.raises(ImportFormatError) as info:
        parse_jsonl_line('{"title": "t", "body": 12345678}', "x.jsonl", 7)
    assert "12345678" not in str(info.value) and "line 7" in str(info.value)
