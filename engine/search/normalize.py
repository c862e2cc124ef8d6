"""Text folding shared by the index and the query side (lowercase + width folding)."""

from __future__ import annotations

import unicodedata

__all__ = ["fold", "is_cjk", "is_cjk_text"]


def fold(text: str) -> str:
    """NFKC folds full-width ASCII (ｈｅｌｌｏ → hello) and compatibility forms; then lowercase.

    Both documents and queries go through this, so either side may use either width.
    """
    return unicodedata.normalize("NFKC", text).lower()


def is_cjk(ch: str) -> bool:
    """Han ideographs (incl. extension A and compatibility), kana and hangul syllables."""
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2FA1F
        or 0x3040 <= code <= 0x30FF
        or 0xAC00 <= code <= 0xD7AF
    )


def is_cjk_text(text: str) -> bool:
    return bool(text) and all(is_cjk(c) for c in text)
