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

import msgspec

__all__ = ["canonical_bytes", "domain_bytes", "decode_canonical", "decode_canonical_flat", "b64e", "b64d", "unb64_strict"]


_STANDARD_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")


def b64e(data: bytes) -> str:
    # binascii directly: base64.urlsafe_b64encode's wrapper costs more than the encoding
    # for the short values (keys, digests, nonces) every signed record carries.
    return binascii.b2a_base64(data, newline=False).translate(_STANDARD_TO_URLSAFE).rstrip(b"=").decode("ascii")


def b64d(text: str) -> bytes:
    pad = "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(text + pad)


def _prepare(value: Any) -> Any:
    # Exact-class checks first: every signed record is built from plain str/int/bool/None,
    # bytes, dicts and lists, and a revision is encoded several times when it is built
    # (issue 32: this walk was the largest cost of a bulk import). Subclasses take the
    # general path below, which gives the same result as before.
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:
        return value
    if cls is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key.__class__ is not str:
                if not isinstance(key, str):
                    raise TypeError("canonical objects take string keys only")
                key = str.__str__(key)
            kind = item.__class__
            if kind is str or kind is int or kind is bool or item is None:
                out[key] = item
            elif kind is bytes:  # keys, nonces, digests: most of a signed record's values
                out[key] = {"$b": b64e(item)}
            else:
                out[key] = _prepare(item)
        return out
    if cls is bytes:
        return {"$b": b64e(value)}
    if cls is list or cls is tuple:
        return [{"$b": b64e(item)} if item.__class__ is bytes else _prepare(item) for item in value]
    return _prepare_other(value)


def _prepare_other(value: Any) -> Any:
    """Subclasses and the rarer types, as json.dumps saw them: an int or str subclass by its value."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": b64e(bytes(value))}
    if isinstance(value, dict):
        return _prepare(dict(value))
    if isinstance(value, (list, tuple)):
        return [_prepare(item) for item in value]
    raise TypeError(f"type {type(value).__name__} has no canonical encoding")


# msgspec writes exactly json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)'s
# bytes for the prepared tree (keys sorted by code point, the same escapes for every code point,
# arbitrary-size integers; tests/unit/test_canonical_fast.py checks it against json), in C.
_encoder = msgspec.json.Encoder(order="sorted")


def canonical_bytes(value: Any) -> bytes:
    """Encode ``value`` canonically (sorted keys, compact, UTF-8, tagged bytes)."""
    prepared = _prepare(value)
    # Sorted by code point, which for str equals UTF-8 byte order except for surrogates,
    # which cannot occur in valid UTF-8 text (encoding one raises UnicodeEncodeError, as before).
    return _encoder.encode(prepared)


def domain_bytes(tag: str, version: int, value: Any) -> bytes:
    """Domain-separated, versioned canonical bytes: what gets signed or hashed."""
    if not 0 <= version <= 255:
        raise ValueError("version must fit one byte")
    return tag.encode("ascii") + b"\x00" + bytes([version]) + canonical_bytes(value)


_URLSAFE_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


def _unb64(text: str) -> bytes:
    padded = (text + "=" * (-len(text) % 4)).encode("ascii").translate(_URLSAFE_TO_STANDARD)
    return binascii.a2b_base64(padded, strict_mode=True)


# The bytes of a tagged value's text exactly as the decoders here read them (strict; ValueError
# when it is not base64url): for a reader that decodes only some fields of a record.
unb64_strict = _unb64


def _restore_bytes(obj: dict[str, Any]) -> Any:
    # object_hook runs per decoded object from C: much faster than walking the tree.
    # Unlock decodes every revision body through here (~9 tagged values each), so this
    # calls binascii directly instead of base64.urlsafe_b64decode's generic wrapper.
    if len(obj) == 1:
        text = obj.get("$b")
        if text.__class__ is str:
            return _unb64(text)
    return obj


def _reject_floats(text: str) -> Any:
    raise ValueError("floats are not canonical")


_decoder = json.JSONDecoder(parse_float=_reject_floats, object_hook=_restore_bytes)
# The same result in C for records without tagged bytes (a summary: title, tags, metadata),
# which a listing opens one per row (issue 32). Anything it refuses (a float, a lone surrogate,
# NaN, …) goes to the decoder above, which accepts or refuses it as it always did.
_plain_decoder = msgspec.json.Decoder(float_hook=_reject_floats)


def decode_canonical(data: bytes) -> Any:
    """Decode canonical JSON, restoring tagged bytes; refuses floats."""
    # A tagged value's key is "$b", written as is or with a \u escape: either sends it to the
    # general decoder, whose object hook restores the bytes.
    if b'"$b"' not in data and b"\\u" not in data:
        try:
            return _plain_decoder.decode(data)
        except msgspec.DecodeError:
            pass
    return _decoder.decode(data.decode("utf-8"))


class _Tagged(msgspec.Struct, forbid_unknown_fields=True):
    """A tagged bytes value ``{"$b": "..."}`` as msgspec sees it."""

    b: str = msgspec.field(name="$b")


# Revision bodies are flat: scalars, tagged bytes and lists of tagged bytes. msgspec parses
# that shape in C about 3x faster than json + object_hook; unlock decodes one per revision.
_flat_decoder = msgspec.json.Decoder(dict[str, int | str | bool | _Tagged | list[_Tagged] | None])


def decode_canonical_flat(data: bytes) -> Any:
    """Same result as ``decode_canonical`` for any input; fast for flat objects.

    Anything else (a nested object, a float, a list of scalars, a non-object) falls back
    to the general decoder, which also gives the same errors.
    """
    try:
        obj: dict[str, Any] = _flat_decoder.decode(data)
    except msgspec.DecodeError:
        return decode_canonical(data)
    if len(obj) == 1 and "$b" in obj:  # the whole value is one tagged bytes object
        return decode_canonical(data)
    try:
        for key, value in obj.items():
            if value.__class__ is _Tagged:
                obj[key] = _unb64(value.b)
            elif value.__class__ is list:
                obj[key] = [_unb64(item.b) for item in value]
    except ValueError:  # bad base64: let the general decoder raise its own error
        return decode_canonical(data)
    return obj
