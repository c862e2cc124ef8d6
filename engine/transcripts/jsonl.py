"""Complete JSON lines from a file that may still be growing (shared by the adapters)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from engine.transcripts.model import MAX_EVENT_TEXT, Parsed

__all__ = ["json_lines", "clip", "MAX_LINE_BYTES"]

# A single line above this is skipped with a warning (a client never writes one).
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
_decode = msgspec.json.Decoder().decode


def json_lines(data: bytes, parsed: Parsed) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every complete line that is a JSON object.

    A last line without its newline is a record the client is still writing: it is not
    read, and ``parsed.pending_bytes`` says how long it is (the next import reads it once
    it is complete). Blank lines are ignored; anything else that is not a JSON object is
    skipped with a warning naming only the line number.
    """
    end = data.rfind(b"\n") + 1
    parsed.consumed = end
    parsed.pending_bytes = len(data) - end
    start = 0
    lineno = 0
    while start < end:
        stop = data.index(b"\n", start)
        raw = data[start:stop]
        start = stop + 1
        lineno += 1
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE_BYTES:
            parsed.warnings.append((lineno, "line too long"))
            continue
        try:
            # msgspec parses a line several times faster than json; whatever it refuses (NaN,
            # a lone surrogate escape, 1e400, invalid UTF-8, deep nesting) is read by json as
            # before, so every line gives the same value or the same warning.
            value = _decode(raw)
        except msgspec.MsgspecError:
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                parsed.warnings.append((lineno, "not valid JSON"))
                continue
        if not isinstance(value, dict):
            parsed.warnings.append((lineno, "not a JSON object"))
            continue
        yield lineno, value
    parsed.lines = lineno


def clip(text: str) -> str:
    if len(text) <= MAX_EVENT_TEXT:
        return text
    return text[:MAX_EVENT_TEXT] + "\n… (cut)"


def text_of(value: Any) -> str:
    """Readable text of a content value: a string, a list of text blocks, or compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                parts.append(item["text"])
            elif isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict) and item.get("type") == "image":
                parts.append("[image]")
        return "\n".join(parts)
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
