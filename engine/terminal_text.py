"""Text a terminal cannot misread: the one escaper every human-readable output goes through.

Titles, bodies, tags, metadata, snippets and remote instructions may come from agents and
imports. Printed raw, an ESC could start an OSC 52 clipboard write or a CSI screen clear,
a BEL rings, a C1 byte acts as CSI on some terminals, and a carriage return hides what came
before it on the line. So text output shows every such character as a visible backslash
escape, the way Python's ``repr`` and git's path quoting do:

* ``\\n``, ``\\r``, ``\\t`` for line feed, carriage return and tab;
* ``\\xNN`` for the other C0 controls, DEL and the C1 controls (``\\x1b``, ``\\x07``,
  ``\\x7f``, ``\\x9b``);
* ``\\uNNNN`` for Unicode bidirectional embedding/override/isolate controls (they reorder
  what a reader sees, "Trojan Source") and for lone surrogates (not printable at all).

:func:`one_line` is for single-line fields (titles, tags, table cells): it escapes line
feeds and tabs too. :func:`block` is for bodies and diffs: it keeps line feeds and tabs and
shows a CRLF line end as a plain line end. A literal backslash is printed as is, so the
text output is for reading; ``--json`` carries the exact strings.

Stdlib only, no engine imports: the CLI and the tray both use it (a kernel module).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["one_line", "block", "Escaped", "bold_highlights", "use_color", "BOLD", "RESET"]

BOLD = "\x1b[1m"
RESET = "\x1b[0m"


def _escape(code: int) -> str:
    named = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}.get(code)
    if named is not None:
        return named
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0 controls, DEL, C1 controls, bidi embeddings/overrides (U+202A-U+202E) and isolates
# (U+2066-U+2069), each with its escape: tables for str.translate, which (unlike `re`, a
# quarter of the CLI's start-up cost, issue 20) costs nothing to load. Lone surrogates
# (U+D800-U+DFFF) are escaped separately: 2,048 table entries for text that is almost
# never there.
_UNSAFE = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_LINE_TABLE = {code: _escape(code) for code in _UNSAFE}
_BLOCK_TABLE = {code: escape for code, escape in _LINE_TABLE.items() if code not in (0x0A, 0x09)}


def _escape_surrogates(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")  # only a lone surrogate cannot be encoded
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(char):04x}" if "\ud800" <= char <= "\udfff" else char for char in text)
    return text


class Escaped(str):
    """Text already made terminal-safe by the caller (and possibly styled by us)."""

    __slots__ = ()


def one_line(value: object) -> str:
    """A single-line field: every control character, line feeds and tabs included, escaped."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # every character escaped here is unprintable
        return text
    return _escape_surrogates(text.translate(_LINE_TABLE))


def block(value: object) -> str:
    """A multi-line text (body, diff): line feeds and tabs kept, every other control escaped."""
    if isinstance(value, Escaped):
        return value
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    # A CRLF line end reads as a plain line end; a lone CR is escaped by the table.
    return _escape_surrogates(text.replace("\r\n", "\n").translate(_BLOCK_TABLE))


def bold_highlights(escaped: str, color: bool) -> Escaped:
    """Turn ``**word**`` highlight markers of an already escaped snippet into terminal bold.

    Only balanced pairs are styled, so a stray ``**`` stays literal and no bold leaks past
    the line. Without ``color`` the text is returned unchanged (markers kept: they read as
    emphasis in a pipe, a log or Markdown).
    """
    if not color:
        return Escaped(escaped)
    parts = escaped.split("**")
    if len(parts) < 3:
        return Escaped(escaped)
    out = [parts[0]]
    pairs = (len(parts) - 1) // 2
    for i in range(pairs):
        out.append(BOLD + parts[2 * i + 1] + RESET + parts[2 * i + 2])
    if (len(parts) - 1) % 2:
        out.append("**" + parts[-1])
    return Escaped("".join(out))


def use_color(stream: TextIO) -> bool:
    """Style output only for a terminal, and never when NO_COLOR is set (no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
