"""canonical_bytes through msgspec and the exact-class walk (issue 32) gives byte for byte what
the former json.dumps encoder gave, which every stored signature was made over (docs/formats.md)."""

from __future__ import annotations

import base64
import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.crypto.canonical import b64e, canonical_bytes, decode_canonical


def _reference_prepare(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.urlsafe_b64encode(bytes(value)).rstrip(b"=").decode("ascii")}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError("canonical objects take string keys only")
            out[key] = _reference_prepare(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_reference_prepare(item) for item in value]
    raise TypeError(f"type {type(value).__name__} has no canonical encoding")


def reference(value: Any) -> bytes:
    """The encoder as it was before issue 32."""
    prepared = _reference_prepare(value)
    return json.dumps(prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40)
_scalar = st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | _text | st.binary(max_size=70)
_values = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=30,
)


@given(_values)
@settings(max_examples=400, deadline=None)
def test_same_bytes_as_the_former_encoder(value: Any) -> None:
    assert canonical_bytes(value) == reference(value)


def test_every_code_point_is_escaped_as_before() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert canonical_bytes({"k": text}) == reference({"k": text})


def test_subclasses_encode_by_value() -> None:
    class Level(enum.IntEnum):
        HIGH = 3

    class Name(enum.StrEnum):
        A = "alpha"

    value = {"level": Level.HIGH, "name": Name.A, Name.A: bytearray(b"\x00\xff"), "view": memoryview(b"ab")}
    assert canonical_bytes(value) == reference(value)
    assert decode_canonical(canonical_bytes(value)) == {"level": 3, "name": "alpha", "alpha": b"\x00\xff", "view": b"ab"}


@pytest.mark.parametrize("bad", [1.5, {1: "x"}, {"k": {2}}, [object()]])
def test_refuses_what_has_no_canonical_form(bad: Any) -> None:
    with pytest.raises(TypeError):
        canonical_bytes(bad)


def test_lone_surrogate_is_refused_as_before() -> None:
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes({"k": "\ud800"})


@given(st.binary(max_size=100))
def test_b64e_is_urlsafe_without_padding(data: bytes) -> None:
    assert b64e(data) == base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
