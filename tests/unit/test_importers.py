"""Malformed-input tests for the import parsers (outside bytes)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli.importers import (
    ImportFormatError,
    Note,
    check_item,
    load_source,
    parse_jsonl_line,
    parse_markdown,
    read_markdown_note,
)
from engine.service.requests import ImportItem


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


# -- issue 12: no truncation, BOM, byte-level fuzzing, encodability ----------------------


def test_markdown_parser_never_truncates() -> None:
    """The parser keeps everything; the limits of `put` are checked (and named) by check_item."""
    tags = ", ".join(f"t{i}" for i in range(65))
    item = parse_markdown(f"---\ntitle: {'T' * 1001}\ntags: [{tags}]\n---\n", "x.md", "f")
    assert len(item["title"]) == 1001 and len(item["tags"]) == 65
    with pytest.raises(ImportFormatError, match=r"^dir/x\.md: .*\$\.title"):
        check_item(item, "dir/x.md")
    with pytest.raises(ImportFormatError, match=r"^dir/x\.md: .*\$\.tags"):
        check_item({**item, "title": "ok"}, "dir/x.md")


def test_bom_before_front_matter() -> None:
    note = read_markdown_note(b"\xef\xbb\xbf---\ntitle: T\ntags: [a]\n---\nbody\n", "x.md", "fallback")
    assert note.item == {"title": "T", "body": "body", "tags": ["a"], "meta": {}}


def test_lone_surrogate_from_jsonl_is_a_typed_error() -> None:
    item = parse_jsonl_line('{"title": "t", "body": "\\ud800"}', "x.jsonl", 3)
    assert item is not None
    with pytest.raises(ImportFormatError, match=r"^x\.jsonl: line 3: .*surrogate"):
        check_item(item, "x.jsonl: line 3")


@given(st.binary(max_size=600))
def test_markdown_bytes_give_a_valid_note_or_a_typed_error_naming_the_file(data: bytes) -> None:
    """API-8: arbitrary bytes give a note the engine will accept, or ImportFormatError naming the file; never a traceback."""
    try:
        note = read_markdown_note(data, "folder/x.md", "fallback")
    except ImportFormatError as exc:
        assert str(exc).startswith("folder/x.md")
        return
    msgspec.convert(note.item, type=ImportItem)  # what the engine decodes: must not raise
    assert note.wire_bytes > 0


_KEY = st.sampled_from(["title", "tags", "tag", "author", "x" * 101, ""])
_VALUE = st.one_of(st.text(max_size=30), st.just("[a, b, c]"), st.just("t" * 1001), st.just(""))


@given(st.lists(st.tuples(_KEY, _VALUE), max_size=70), st.booleans(), st.text(max_size=50))
def test_front_matter_shapes_give_a_valid_note_or_a_typed_error(pairs: list[tuple[str, str]], bom: bool, body: str) -> None:
    """Front matter built from keys and values near the limits: the same two outcomes, never a traceback."""
    text = "---\n" + "".join(f"{k}: {v}\n" for k, v in pairs) + "---\n" + body
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", "surrogatepass")
    try:
        note = read_markdown_note(data, "x.md", "fallback")
    except ImportFormatError as exc:
        assert str(exc).startswith("x.md")
        return
    msgspec.convert(note.item, type=ImportItem)


# -- issue 32: JSONL lines are decoded in one pass (msgspec) when they are valid --------------
_KEYS = st.sampled_from(["title", "body", "tags", "meta", "colour"])
_VALUES = st.one_of(
    st.text(max_size=30),
    st.lists(st.text(max_size=8), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers()), max_size=2),
    st.integers(),
    st.none(),
)
_LINES = st.one_of(
    st.dictionaries(_KEYS, _VALUES).map(lambda obj: json.dumps(obj, ensure_ascii=False).encode("utf-8")),
    st.fixed_dictionaries({"title": st.text(min_size=1, max_size=20), "body": st.text(max_size=40)}).map(
        lambda obj: json.dumps(obj, ensure_ascii=bool(len(obj["body"]) % 2)).encode("utf-8")
    ),
    st.binary(max_size=80),
)


def _line_the_slow_way(raw: bytes, number: int) -> Note | str | None:
    """What the checks without the one-pass decoder make of a line: a note, an error, or nothing."""
    where = f"in.jsonl: line {number}"
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError:
        return f"{where}: not UTF-8 text."
    try:
        item = parse_jsonl_line(text, "in.jsonl", number)
        return check_item(item, where) if item is not None else None
    except ImportFormatError as exc:
        return str(exc)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, min_size=1, max_size=4), st.booleans())
def test_jsonl_lines_give_the_notes_and_errors_the_full_checks_give(tmp_path_factory: Any, lines: list[bytes], bom: bool) -> None:
    """A JSONL file gives the notes (item and encoded size) the line-by-line checks give, or the
    same typed error naming the same line, whatever its lines hold."""
    lines = [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]
    path = tmp_path_factory.mktemp("jsonl") / "in.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n")
    expected: list[Note] = []
    error: str | None = None
    for number, raw in enumerate(lines, start=1):
        got = _line_the_slow_way((b"\xef\xbb\xbf" if bom and number == 1 else b"") + raw + b"\n", number)
        if isinstance(got, str):
            error = got
            break
        if got is not None:
            expected.append(got)
    try:
        loaded = load_source(path)
    except ImportFormatError as exc:
        assert str(exc) == error
        return
    assert error is None
    assert loaded.notes == expected
