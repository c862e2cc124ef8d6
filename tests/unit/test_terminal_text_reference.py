"""The table-driven escaper (no `re` on the CLI's start path, issue 20) escapes exactly what
the regular expressions it replaced escaped, on generated text of every kind."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.terminal_text import block, one_line

# The definition before issue 20, kept as the reference.
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_BLOCK = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# Text dense in what matters: controls, CR/LF pairs, C1, bidi controls, surrogates, wide text.
_tricky = st.sampled_from(
    ["\r\n", "\r", "\n", "\t", "\x1b", "\x00", "\x7f", "\x85", "\x9b", "\u202e", "\u2066", "\u2069", "\ud800", "\udfff"]
)
texts = st.lists(st.text(max_size=6) | _tricky, max_size=12).map("".join) | st.text()


@settings(max_examples=1000)
@given(texts)
def test_one_line_escapes_what_the_reference_escapes(text: str) -> None:
    assert one_line(text) == _UNSAFE_LINE.sub(_escape, text)


@settings(max_examples=1000)
@given(texts)
def test_block_escapes_what_the_reference_escapes(text: str) -> None:
    assert block(text) == _UNSAFE_BLOCK.sub(_escape, text)
