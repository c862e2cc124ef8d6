"""Citation labels in an answer are checked against the selected sources (RAG-3).

This validates the *labels*, not the truth of the prose: a label that names no
selected source is removed from the text and reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["CitationCheck", "check_citations"]

_LABEL = re.compile(r"\[(S\d{1,4})\]")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([.,;:!?。，；：！？])")


@dataclass
class CitationCheck:
    text: str
    cited: list[str] = field(default_factory=list)  # valid labels, first-use order
    invalid: list[str] = field(default_factory=list)  # removed labels, first-use order


def check_citations(answer: str, allowed: set[str]) -> CitationCheck:
    cited: list[str] = []
    invalid: list[str] = []

    def keep_or_drop(match: re.Match[str]) -> str:
        label = match.group(1)
        bucket = cited if label in allowed else invalid
        if label not in bucket:
            bucket.append(label)
        return match.group(0) if label in allowed else ""

    text = _LABEL.sub(keep_or_drop, answer)
    if invalid:
        text = _SPACE_BEFORE_PUNCT.sub(r"\1", re.sub(r"[ \t]{2,}", " ", text)).strip()
    return CitationCheck(text=text, cited=cited, invalid=invalid)
