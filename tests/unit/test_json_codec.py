"""engine.ipc.json_codec gives what the json module gives, on any JSON value and any text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.ipc import json_codec

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)


def _pairs(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return pairs


@settings(max_examples=300)
@given(values, st.booleans(), st.booleans(), st.sampled_from([None, (",", ":"), (", ", ": ")]))
def test_dumps_writes_what_json_writes(value: Any, ensure_ascii: bool, sort_keys: bool, separators: Any) -> None:
    ours = json_codec.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators)
    assert ours == json.dumps(value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators)


@settings(max_examples=300)
@given(values)
def test_loads_reads_what_json_reads(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), f" \n{json.dumps(value, indent=2)}\t\r "):
        assert json_codec.loads(text) == json.loads(text)
        assert json_codec.loads(text, object_pairs_hook=_pairs) == json.loads(text, object_pairs_hook=_pairs)


@settings(max_examples=500)
@given(st.text(alphabet='{}[]",:0123456789.eE+-tfnrul \\aNIy\ufeff\t\n', max_size=30))
def test_loads_refuses_what_json_refuses(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except ValueError:
        expected = ValueError
    except RecursionError:  # pragma: no cover - not reachable at this size
        return
    try:
        ours: Any = json_codec.loads(text)
    except ValueError:
        ours = ValueError
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(ours, float) and math.isnan(ours)
    else:
        assert ours == expected, text


def test_constants_and_types_are_refused_as_json_refuses_them() -> None:
    def reject(name: str) -> Any:
        raise ValueError(name)

    with pytest.raises(ValueError):
        json_codec.loads("[NaN]", parse_constant=reject)
    with pytest.raises(ValueError):
        json_codec.dumps({"x": float("inf")}, allow_nan=False)
    assert json_codec.dumps([float("inf")]) == json.dumps([float("inf")])
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_codec.dumps({"x": b"bytes"})
    with pytest.raises(ValueError):
        json_codec.loads("\ufeff{}")
    with pytest.raises(TypeError):
        json_codec.dumps([1j])
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        json_codec.dumps(loop)


def test_the_codec_does_not_fall_back_to_the_json_module() -> None:
    """The CLI imports this module to avoid `json`; the C accelerator must be what runs."""
    assert json_codec.loads is json_codec._loads
    assert json_codec.dumps is json_codec._dumps
