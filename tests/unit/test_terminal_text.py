"""The terminal escaper, search highlighting, the tray tooltip builder and frame-size sentences."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from desktop.prober import Probe
from desktop.status import TOOLTIP_CHARS, TrayState, tooltip_text
from engine.errors import MemoriesError
from engine.ipc.framing import MAX_FRAME_BYTES, encode_frame, frame_too_large, size_text
from engine.terminal_text import BOLD, RESET, Escaped, block, bold_highlights, one_line

# What a terminal may act on: C0 controls, DEL, C1 controls; plus bidi overrides/isolates
# (reorder what is read) and lone surrogates (unprintable).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
EVIL = "A\x1b]52;c;aGVsbG8=\x07B\x1b[2JC\x9bD\x07E\x7fF\rG\x00H\u202eI\ud800J"


def test_one_line_escapes_every_control_visibly() -> None:
    assert one_line(EVIL) == "A\\x1b]52;c;aGVsbG8=\\x07B\\x1b[2JC\\x9bD\\x07E\\x7fF\\rG\\x00H\\u202eI\\ud800J"
    assert one_line("two\nlines\tand tab") == "two\\nlines\\tand tab"
    assert one_line("plain ünïcode 记忆 🙂 \\x1b") == "plain ünïcode 记忆 🙂 \\x1b"  # literal backslashes stay
    assert one_line(42) == "42"


def test_block_keeps_line_feeds_and_tabs_only() -> None:
    assert block("a\n\tb\r\nc\rd\x1b[2J") == "a\n\tb\nc\\rd\\x1b[2J"
    styled = Escaped(BOLD + "kept" + RESET)
    assert block(styled) is styled  # already escaped by its builder: printed as is


@given(st.text())
def test_no_control_character_survives(text: str) -> None:
    assert CONTROL.search(one_line(text)) is None and "\n" not in one_line(text)
    rest = block(text).replace("\n", "").replace("\t", "")
    assert CONTROL.search(rest) is None


def test_bold_highlights_only_balanced_markers() -> None:
    snippet = one_line("…the **GPU** \x1b[2J and **fan**, a stray ** here")
    styled = bold_highlights(snippet, True)
    assert styled == f"…the {BOLD}GPU{RESET} \\x1b[2J and {BOLD}fan{RESET}, a stray ** here"
    assert styled.count(BOLD) == styled.count(RESET) == 2
    assert bold_highlights(snippet, False) == snippet  # not a terminal: markers kept, no sequences
    assert bold_highlights("no markers", True) == "no markers"


@pytest.mark.parametrize("state", list(TrayState))
def test_tooltip_is_one_escaped_line(state: TrayState) -> None:
    """The tooltip builder escapes what came from the probe and stays one short line."""
    text = tooltip_text(state, Probe("error", error="bad\x1b]52;c;eA==\x07\ncode" + "x" * 300))
    assert CONTROL.search(text) is None and "\n" not in text
    assert text.startswith(state.tooltip) and len(text) <= TOOLTIP_CHARS
    assert tooltip_text(state) == state.tooltip


def test_attention_tooltip_names_the_error_code() -> None:
    assert tooltip_text(TrayState.ATTENTION, Probe("error", error="invalid_status")) == (
        "Memories: needs attention (invalid_status)"
    )


def test_sizes_read_as_people_read_them() -> None:
    assert [size_text(n) for n in (900, 3584, MAX_FRAME_BYTES, 18_035_507)] == ["900 bytes", "3.5 KiB", "16 MiB", "17.2 MiB"]


def test_frame_too_large_names_size_and_limit() -> None:
    """API-8: the sentence says how big and the limit; near the limit it falls back to bytes."""
    with pytest.raises(MemoriesError) as err:
        encode_frame({"body": "x" * 2048}, max_bytes=1024)
    assert err.value.code == "frame_too_large"
    assert "is 2 KiB; one message may carry at most 1 KiB" in err.value.message
    near = frame_too_large(MAX_FRAME_BYTES + 10, MAX_FRAME_BYTES)
    assert f"{MAX_FRAME_BYTES + 10:,} bytes" in near.message and f"{MAX_FRAME_BYTES:,} bytes" in near.message
    assert near.details == {"size": MAX_FRAME_BYTES + 10, "limit": MAX_FRAME_BYTES}
