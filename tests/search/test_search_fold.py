"""fold() is NFKC then lowercase, exactly, on its faster path too (issue 32)."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.search.normalize import fold

# Full-width forms, the ideographic space, combining marks that compose with what a full-width
# letter decomposes to, other compatibility forms (ligatures, circled digits, half-width
# katakana, dakuten), Han and plain ASCII: every branch of fold's quick path and its fallback.
_ALPHABET = st.sampled_from([*"Ａｚ０，：；！？（）\u3000", *"\u0301\u0308\u0327", *"ﬁ①ｶﾞ\u3099\u309aカ", *"记憶庫", *"aZ9 ,.-"])


@given(st.text(_ALPHABET, max_size=40))
@settings(max_examples=400, deadline=None)
def test_fold_is_nfkc_then_lower(text: str) -> None:
    assert fold(text) == unicodedata.normalize("NFKC", text).lower()


def test_fold_examples() -> None:
    assert fold("Ｗｉ－Ｆｉ，密碼") == "wi-fi,密碼"
    assert fold("Ａ\u0301") == "\u00e1"  # a full-width letter with a combining accent composes
    assert fold("ﬁ ①") == "fi 1"
