"""Malformed exports never crash a parser (IM-1): any bytes give entries or a typed error naming a place.

These drive the parsers of engine/moving directly with hypothesis: the behaviour under test
is the parser's own handling of outside bytes, which runs in the CLI process before anything
reaches the engine (the end-to-end "nothing is imported" checks are in test_moving_in.py).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import MemoriesError
from engine.moving.bitwarden import parse_bitwarden
from engine.moving.entry import Loaded, check_all
from engine.moving.keepassxc import parse_keepass_xml
from engine.moving.onepassword import parse_1password_csv, parse_1pux

DATA = Path(__file__).resolve().parents[1] / "data" / "moving"
BITWARDEN = (DATA / "bitwarden.json").read_bytes()
ONEPUX = (DATA / "1password.1pux").read_bytes()
ONEPUX_DATA = json.loads(zipfile.ZipFile(io.BytesIO(ONEPUX)).read("export.data"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)


def _parse_and_check(parse: Any, data: bytes) -> None:
    """Either parsed entries that all pass (or fail) the login checks with a typed error, or a typed error."""
    try:
        loaded: Loaded = parse(data)
        check_all(loaded)
    except MemoriesError as exc:
        assert exc.code == "invalid_input"
        assert "Nothing was imported" in exc.message
        assert ":" in exc.message  # "<where>: <what is wrong>"


def _mutate(doc: Any, path: list[Any], value: Any) -> Any:
    """Replace one node (picked by a path of indices) of a JSON document with ``value``."""
    if not path:
        return value
    if isinstance(doc, dict) and doc:
        key = sorted(doc)[path[0] % len(doc)]
        return {**doc, key: _mutate(doc[key], path[1:], value)}
    if isinstance(doc, list) and doc:
        index = path[0] % len(doc)
        return [*doc[:index], _mutate(doc[index], path[1:], value), *doc[index + 1 :]]
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_bitwarden_random_bytes(data: bytes) -> None:
    """IM-1: arbitrary bytes as a Bitwarden export: a typed error, never a traceback."""
    _parse_and_check(parse_bitwarden, data)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=6), json_values)
def test_bitwarden_mutated_documents(path: list[int], value: Any) -> None:
    """IM-1: the sample export with any one node replaced by any JSON value: entries or a typed error."""
    doc = _mutate(json.loads(BITWARDEN), path, value)
    _parse_and_check(parse_bitwarden, json.dumps(doc).encode())


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(BITWARDEN)))
def test_bitwarden_truncated(cut: int) -> None:
    """IM-1: every truncation of the sample export is a typed error (or, uncut, parses)."""
    _parse_and_check(parse_bitwarden, BITWARDEN[:cut])


def _zip(export_data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("export.data", export_data)
    return buffer.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=9), json_values)
def test_1pux_mutated_documents(path: list[int], value: Any) -> None:
    """IM-1: the sample 1PUX with any one node of export.data replaced: entries or a typed error."""
    doc = _mutate(ONEPUX_DATA, path, value)
    _parse_and_check(parse_1pux, _zip(json.dumps(doc, ensure_ascii=False).encode()))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(ONEPUX) - 1), st.integers(0, 255))
def test_1pux_flipped_and_truncated_zip_bytes(position: int, byte: int) -> None:
    """IM-1: a 1PUX with one byte changed, or cut there, is a typed error (or still parses)."""
    flipped = ONEPUX[:position] + bytes([byte]) + ONEPUX[position + 1 :]
    _parse_and_check(parse_1pux, flipped)
    _parse_and_check(parse_1pux, ONEPUX[:position])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_1pux_and_csv_and_xml_random_bytes(data: bytes) -> None:
    """IM-1: arbitrary bytes as 1PUX, 1Password CSV or KeePass XML: a typed error or entries."""
    for parse in (parse_1pux, parse_1password_csv, parse_keepass_xml):
        _parse_and_check(parse, data)


_BOMB_DTD = '<!DOCTYPE k [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
_EXPORT = (
    "<KeePassFile><Root><Group><Name>Root</Name><Entry><String><Key>Title</Key><Value>&b;</Value></String>"
    "<String><Key>UserName</Key><Value>ana</Value></String></Entry></Group></Root></KeePassFile>"
)


def _xml(encoding: str, prolog_padding: str = "", dtd: str = _BOMB_DTD, body: str = _EXPORT) -> bytes:
    text = f'<?xml version="1.0" encoding="{encoding}"?>{prolog_padding}{dtd}{body}'
    return text.encode(encoding if encoding != "UTF-16" else "utf-16")


@pytest.mark.parametrize(
    "data",
    [
        _xml("UTF-16"),  # with a BOM: the old byte search saw "<\0!\0D\0..."
        _xml("UTF-16BE"),
        _xml("UTF-8", prolog_padding="<!--" + "x" * 8000 + "-->"),  # DOCTYPE after the first 4 KiB
        _xml("UTF-8", prolog_padding="\n" * 5000),
        _xml("UTF-16", prolog_padding=" " * 5000, dtd='<!DOCTYPE KeePassFile SYSTEM "file:///etc/passwd">'),
        _xml("UTF-8", dtd="<!DOCTYPE KeePassFile>", body=_EXPORT.replace("&b;", "plain")),
    ],
    ids=["utf16-bom", "utf16be", "after-4k-comment", "after-4k-blank", "utf16-external", "bare-doctype"],
)
def test_a_doctype_is_refused_whatever_the_encoding_or_offset(data: bytes) -> None:
    """IM-1, issue 27: the parser itself refuses any DOCTYPE (so no entity is ever declared or
    expanded), also in UTF-16 or after a long prolog, where a search of the raw bytes missed it."""
    with pytest.raises(MemoriesError) as caught:
        parse_keepass_xml(data)
    assert caught.value.code == "invalid_input" and "DOCTYPE" in caught.value.message


def test_an_honest_utf16_export_still_imports() -> None:
    """The refusal is about the DOCTYPE, not the encoding: the same export without one parses."""
    loaded = parse_keepass_xml(_xml("UTF-16", dtd="", body=_EXPORT.replace("&b;", "Mail")))
    assert [(e.title, e.username) for e in loaded.entries] == [("Mail", "ana")]


def test_entity_declarations_are_refused() -> None:
    """IM-1: an XML export with entity declarations is refused before parsing (no expansion)."""
    bomb = b'<?xml version="1.0"?><!DOCTYPE k [<!ENTITY a "aaaaaaaa">]><KeePassFile><Root/></KeePassFile>'
    try:
        parse_keepass_xml(bomb)
    except MemoriesError as exc:
        assert "DOCTYPE" in exc.message
    else:
        raise AssertionError("an XML file with a DOCTYPE was accepted")
