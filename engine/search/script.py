"""Traditional → Simplified Chinese with OpenCC's data (SR-8), for the index and queries alike.

Both sides of a match are brought to one script: a query typed as 記憶 or 護照 then finds
notes written as 记忆 or 护照, and the other way round. Only the token streams and the
comparison copies are converted; stored text (and so every highlight) stays as written.

The converter is OpenCC itself (the ``opencc`` package from PyPI: its C++ library and its
maintained dictionaries), loaded once on first use (about 7 ms). ``t2s`` converts by
phrases then characters; it almost always keeps the length, and callers that map offsets
back to the stored text check that it did.
"""

from __future__ import annotations

import re
import threading

import opencc

__all__ = ["to_simplified", "SCRIPT_VERSION"]

# Part of the segmenter version: a new converter or dictionary re-segments stored token streams.
SCRIPT_VERSION = f"opencc-{opencc.__version__}-t2s"

_lock = threading.Lock()
_converter: opencc.OpenCC | None = None


def _get() -> opencc.OpenCC:
    global _converter
    if _converter is None:
        with _lock:
            if _converter is None:
                _converter = opencc.OpenCC("t2s")
    return _converter


_HAN = re.compile("[\u3400-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def to_simplified(text: str) -> str:
    """``text`` with Traditional Chinese characters and phrases in Simplified form; other text unchanged."""
    if text.isascii() or _HAN.search(text) is None:
        return text
    return str(_get().convert(text))
