"""``json.loads``/``json.dumps`` for the CLI's start-up path, without importing :mod:`json`.

``import json`` compiles regular expressions at import (so it imports :mod:`re` and
:mod:`enum`): about a third of a bare interpreter's start, paid by every ``memories``
call (issue 20). The work itself is done by CPython's C accelerator :mod:`_json`, which
``json`` wraps; this module wraps the same two objects (``make_scanner``, ``make_encoder``)
with the few lines of ``json.decoder``/``json.encoder`` around them, so the results are
the same (tests/unit/test_json_codec.py compares both on generated values). An interpreter
whose ``_json`` lacks them gets the :mod:`json` module's own functions.

Only the options the engine uses exist: ``loads`` with ``parse_constant`` and
``object_pairs_hook``; ``dumps`` with ``ensure_ascii``, ``sort_keys``, ``separators`` and
``allow_nan``. Errors are :class:`ValueError` (JSON syntax, NaN refused) or
:class:`TypeError` (a value that is not JSON), as with :mod:`json`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs the CLI's start more than this module does
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["loads", "dumps"]

_WHITESPACE = " \t\n\r"  # RFC 8259's insignificant whitespace (what json.decoder skips)

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # pragma: no cover - CPython always has them
    make_scanner = None  # type: ignore[assignment, misc]


class _ScanContext:
    """The attributes ``_json.make_scanner`` reads (what a ``json.JSONDecoder`` carries)."""

    strict = True
    object_hook = None
    array_hook = None  # read by Python 3.15's scanner

    def __init__(self, parse_constant: Callable[[str], Any] | None, object_pairs_hook: Callable[..., Any] | None) -> None:
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = parse_constant if parse_constant is not None else _CONSTANTS.__getitem__
        self.object_pairs_hook = object_pairs_hook
        self.memo: dict[str, str] = {}


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _loads(
    text: str,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    object_pairs_hook: Callable[..., Any] | None = None,
) -> Any:
    """One JSON value from ``text`` (a ``str``), as ``json.loads`` returns it."""
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    scan = make_scanner(_ScanContext(parse_constant, object_pairs_hook))  # type: ignore[arg-type]
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        raise ValueError(f"Expecting value at character {stop.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data at character {end}")
    return value


def _not_serializable(value: object) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _dumps(
    value: object,
    *,
    ensure_ascii: bool = True,
    sort_keys: bool = False,
    separators: tuple[str, str] | None = None,
    allow_nan: bool = True,
) -> str:
    """``value`` as JSON text, as ``json.dumps`` writes it (no indent)."""
    escape = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(value, str):
        return escape(value)
    item_separator, key_separator = separators if separators is not None else (", ", ": ")
    encode = make_encoder({}, _not_serializable, escape, None, key_separator, item_separator, sort_keys, False, allow_nan)
    return "".join(encode(value, 0))


if make_scanner is not None:
    loads, dumps = _loads, _dumps
else:  # pragma: no cover
    from json import dumps, loads  # type: ignore[assignment]
