"""Card types and their typed metadata schemas, validated on every write (CD-1).

Metadata is a flat string map stored inside the encrypted revision summary, like a
memory's ``meta``; each card type declares which keys it knows and how each value
is checked. Keys starting with ``x_`` are free-form extensions. Error messages name
keys, never values (a value could be something the user did not mean to echo).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

from engine.cards.login import LOGIN_FIELDS, LOGIN_KIND
from engine.errors import MemoriesError

__all__ = [
    "ORDINARY_CARD_KINDS",
    "PROTECTED_KIND",
    "LOGIN_KIND",
    "CARD_KINDS",
    "GRAPH_KINDS",
    "SCHEMAS",
    "validate_meta",
    "is_env_name",
]

ORDINARY_CARD_KINDS = ("knowledge", "brain", "persona")
PROTECTED_KIND = "protected"
# Login cards (CD-10) are protected cards too: created only by their own ops.
CARD_KINDS = (*ORDINARY_CARD_KINDS, PROTECTED_KIND, LOGIN_KIND)
# Kinds that may be graph nodes: memories and every card (never credentials).
GRAPH_KINDS = frozenset({"memory", *CARD_KINDS})

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_DECIMAL = re.compile(r"^(0(\.\d{1,6})?|1(\.0{1,6})?)$")
_MAX_TEXT = 2000


def is_env_name(value: str) -> bool:
    return bool(_ENV_NAME.match(value))


def _text(limit: int) -> Callable[[str], bool]:
    return lambda v: 0 < len(v) <= limit and not any(ord(c) < 32 and c not in "\t" for c in v)


def _choice(*options: str) -> Callable[[str], bool]:
    return lambda v: v in options


def _iso_date(value: str) -> bool:
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return len(value) == 10


def _unit_decimal(value: str) -> bool:
    return bool(_DECIMAL.match(value))


def _url_or_text(value: str) -> bool:
    return _text(_MAX_TEXT)(value) and not value.lower().startswith(("javascript:", "data:"))


@dataclass(frozen=True)
class Field:
    check: Callable[[str], bool]
    describe: str


SCHEMAS: dict[str, dict[str, Field]] = {
    "knowledge": {
        "source": Field(_url_or_text, "a URL or citation (≤2000 characters)"),
        "domain": Field(_text(200), "a subject area (≤200 characters)"),
        "confidence": Field(_unit_decimal, "a decimal between 0 and 1, e.g. 0.8"),
        "reviewed": Field(_iso_date, "an ISO date YYYY-MM-DD"),
        "language": Field(_text(35), "a language tag"),
    },
    "brain": {
        "category": Field(
            _choice("decision", "lesson", "rule", "preference", "fact", "todo"),
            "one of decision, lesson, rule, preference, fact, todo",
        ),
        "priority": Field(_choice("low", "normal", "high"), "one of low, normal, high"),
        "status": Field(_choice("active", "archived"), "one of active, archived"),
        "scope": Field(_text(200), "a project or area (≤200 characters)"),
    },
    "persona": {
        "name": Field(_text(200), "a display name (≤200 characters)"),
        "role": Field(_text(200), "a role (≤200 characters)"),
        "tone": Field(_text(200), "a tone of voice (≤200 characters)"),
        "language": Field(_text(35), "a language tag"),
        "audience": Field(_text(200), "an audience (≤200 characters)"),
    },
    PROTECTED_KIND: {
        "account": Field(_text(320), "an account name or e-mail (≤320 characters)"),
        "env": Field(is_env_name, "an environment variable name"),
        "issuer": Field(_text(200), "an issuer (≤200 characters)"),
        "url": Field(_url_or_text, "a URL (≤2000 characters)"),
    },
    LOGIN_KIND: {key: Field(check, describe) for key, (check, describe) in LOGIN_FIELDS.items()},
}


def validate_meta(kind: str, meta: dict[str, str]) -> dict[str, str]:
    """Return the metadata if every key is known (or ``x_``) and every value passes its check."""
    schema = SCHEMAS.get(kind)
    if schema is None:
        raise MemoriesError("invalid_input", f"{kind!r} is not a card type; use one of {', '.join(CARD_KINDS)}.")
    for key, value in meta.items():
        if key.startswith("x_") and len(key) > 2:
            if len(value) > 10_000:
                raise MemoriesError("invalid_metadata", f"Metadata {key!r} is longer than 10000 characters.")
            continue
        field = schema.get(key)
        if field is None:
            allowed = ", ".join(sorted(schema)) + ", x_*"
            raise MemoriesError("invalid_metadata", f"A {kind} card has no metadata field {key!r} (known: {allowed}).")
        if not field.check(value):
            raise MemoriesError("invalid_metadata", f"Metadata {key!r} of a {kind} card must be {field.describe}.")
    return dict(meta)
