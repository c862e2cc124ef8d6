"""Canonical encoding of signed and encrypted records (docs/formats.md).

The bytes that are signed or hashed must not depend on dict order, JSON spacing
or how a caller built the record. We use a deliberately small canonical JSON:

* objects with string keys, sorted by UTF-8 bytes; no duplicate keys;
* strings as UTF-8 (no ``\\u`` escapes except the ones JSON requires);
* integers only (floats are refused: their text form is not canonical);
* ``bytes`` values are tagged objects ``{"$b": "<base64url, no padding>"}``;
* no insignificant white space.

A domain-separated record is ``tag || 0x00 || version byte || canonical JSON``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

__all__ = ["canonical_bytes", "domain_bytes", "decode_canonical", "b64e", "b64d"]


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64d(text: str) -> bytes:
    pad = "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(text + pad)


def _prepare(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": b64e(bytes(value))}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError("canonical objects take string keys only")
            out[key] = _prepare(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_prepare(item) for item in value]
    raise TypeError(f"type {type(value).__name__} has no canonical encoding")


def canonical_bytes(value: Any) -> bytes:
    """Encode ``value`` canonically (sorted keys, compact, UTF-8, tagged bytes)."""
    prepared = _prepare(value)
    # sort_keys sorts by code point, which for str equals UTF-8 byte order
    # except for surrogates, which cannot occur in valid UTF-8 text.
    return json.dumps(
        prepared, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def domain_bytes(tag: str, version: int, value: Any) -> bytes:
    """Domain-separated, versioned canonical bytes: what gets signed or hashed."""
    if not 0 <= version <= 255:
        raise ValueError("version must fit one byte")
    return tag.encode("ascii") + b"\x00" + bytes([version]) + canonical_bytes(value)


_URLSAFE_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


def _restore_bytes(obj: dict[str, Any]) -> Any:
    # object_hook runs per decoded object from C: much faster than walking the tree.
    # Unlock decodes every revision body through here (~9 tagged values each), so this
    # calls binascii directly instead of base64.urlsafe_b64decode's generic wrapper.
    if len(obj) == 1:
        text = obj.get("$b")
        if text.__class__ is str:
            padded = (text + "=" * (-len(text) % 4)).encode("ascii").translate(_URLSAFE_TO_STANDARD)
            return binascii.a2b_base64(padded, strict_mode=True)
    return obj


def _reject_floats(text: str) -> Any:
    raise ValueError("floats are not canonical")


_decoder = json.JSONDecoder(parse_float=_reject_floats, object_hook=_restore_bytes)


def decode_canonical(data: bytes) -> Any:
    """Decode canonical JSON, restoring tagged bytes; refuses floats."""
    return _decoder.decode(data.decode("utf-8"))
