"""The card editor's explicit allowlist of kinds and fields (SPEC DT-5, API-6).

Only kinds listed in ``EDITABLE_KINDS`` are listed, opened or saved, and only their
listed fields leave the engine's answer or enter an edit. Protected cards, credentials
and files are absent on purpose: the dashboard never shows or edits them. When the cards
kind or field becomes editable here, it is a new ``KindSpec``/``FieldSpec`` row (with its
own ops if it needs them); nothing else in the dashboard changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.errors import MemoriesError

__all__ = [
    "FieldSpec",
    "KindSpec",
    "EDITABLE_KINDS",
    "PROTECTED_KINDS",
    "shown_kind",
    "kind_table",
    "project_summary",
    "project_card",
    "parse_save",
    "parse_create",
    "check_asset_id",
    "check_revision",
    "check_tag",
    "project_hit",
    "snippet_parts",
]


@dataclass(frozen=True)
class FieldSpec:
    name: str
    label: str
    widget: str  # "text" | "textarea" | "tags": how the page renders it
    max_length: int
    required: bool = False


@dataclass(frozen=True)
class KindSpec:
    kind: str
    label: str
    fields: tuple[FieldSpec, ...]
    # The engine ops this kind is read and written with (ordinary ops until cards land).
    list_op: str = "list"
    get_op: str = "get"
    edit_op: str = "edit"

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


_TITLE = FieldSpec("title", "Title", "text", 1000, required=True)
_BODY = FieldSpec("body", "Body", "textarea", 1_000_000)
_TAGS = FieldSpec("tags", "Tags", "tags", 64)

# Ordinary kinds only (the engine edits them with the generic ops). "protected" cards,
# credentials and files are deliberately absent. Typed card metadata is not editable
# here: an edit that omits `meta` keeps it unchanged, and the engine keeps secret maps.
EDITABLE_KINDS: dict[str, KindSpec] = {
    "memory": KindSpec("memory", "Memories", (_TITLE, _BODY, _TAGS)),
    "knowledge": KindSpec("knowledge", "Knowledge cards", (_TITLE, _BODY, _TAGS)),
    "brain": KindSpec("brain", "Brain cards", (_TITLE, _BODY, _TAGS)),
    "persona": KindSpec("persona", "Persona cards", (_TITLE, _BODY, _TAGS)),
}

# Kinds the dashboard shows by title and kind only (issue 17): never opened in the editor,
# never diffed, never their body, metadata or secret. Their secret is copied in a terminal.
PROTECTED_KINDS: dict[str, str] = {"protected": "Protected cards", "login": "Logins", "credential": "Credentials"}

MAX_TAG_LENGTH = 100
_ASSET_ID = re.compile(r"^[0-9a-f]{6,64}$")
_REVISION = re.compile(r"^[0-9a-f]{6,64}$")
# What a list row may show: identifiers the editor needs to address a card, and the
# allowlisted summary fields. Never meta, bodies, authors or anything else.
_SUMMARY_KEYS = (
    "id",
    "short_id",
    "kind",
    "title",
    "tags",
    "conflict",
    "heads",
    "updated_ms",
    "revision",
    "short_revision",
)


def kind_table() -> list[dict[str, Any]]:
    """The allowlist as the page sees it: it renders forms from this, not from a card."""
    return [
        {
            "kind": spec.kind,
            "label": spec.label,
            "fields": [
                {
                    "name": f.name,
                    "label": f.label,
                    "widget": f.widget,
                    "max_length": f.max_length,
                    "required": f.required,
                }
                for f in spec.fields
            ],
        }
        for spec in EDITABLE_KINDS.values()
    ]


def spec_for(kind: object) -> KindSpec:
    spec = EDITABLE_KINDS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise MemoriesError("invalid_input", "The dashboard does not edit this kind of asset.")
    return spec


def shown_kind(kind: object) -> str:
    """A kind the dashboard shows at all (editable, or protected by title and kind); else refused."""
    if isinstance(kind, str) and (kind in EDITABLE_KINDS or kind in PROTECTED_KINDS):
        return kind
    raise MemoriesError("invalid_input", "The dashboard does not show this kind of item.")


def check_asset_id(value: str) -> str:
    if not _ASSET_ID.match(value):
        raise MemoriesError("invalid_input", "An asset ID is 6 to 64 lowercase hex characters.")
    return value


def project_summary(item: dict[str, Any]) -> dict[str, Any]:
    spec = spec_for(item.get("kind"))
    allowed = {f.name for f in spec.fields}
    return {k: item[k] for k in _SUMMARY_KEYS if k in item and (k not in ("title", "tags") or k in allowed)}


def _allowlisted(spec: KindSpec, raw: dict[str, Any]) -> dict[str, Any]:
    return {f.name: raw.get(f.name, [] if f.widget == "tags" else "") for f in spec.fields}


def project_card(raw: dict[str, Any]) -> dict[str, Any]:
    """A card as the editor may see it; refuses kinds outside the allowlist.

    A card in conflict also carries each head's allowlisted fields and revision, so the
    page can show both versions side by side and keep one (``versions``)."""
    spec = spec_for(raw.get("kind"))
    fields = _allowlisted(spec, raw)
    heads = raw.get("head_contents") or []
    versions = [
        {"revision": h.get("revision"), "short_revision": h.get("short_revision"), "fields": _allowlisted(spec, h)} for h in heads
    ]
    return {
        "versions": versions,
        "id": raw.get("id"),
        "short_id": raw.get("short_id"),
        "kind": spec.kind,
        "revision": raw.get("revision"),
        "short_revision": raw.get("short_revision"),
        "conflict": bool(raw.get("conflict")),
        "tombstone": bool(raw.get("tombstone")),
        "heads": len(heads) if heads else 1,
        "fields": fields,
    }


def check_revision(value: object) -> str:
    if not isinstance(value, str) or not _REVISION.match(value):
        raise MemoriesError("invalid_input", "A revision is 6 to 64 lowercase hex characters.")
    return value


def check_tag(value: str) -> str:
    if not 0 < len(value.strip()) <= MAX_TAG_LENGTH:
        raise MemoriesError("invalid_input", f"A tag is 1 to {MAX_TAG_LENGTH} characters.")
    return value.strip()


def project_hit(hit: dict[str, Any]) -> dict[str, Any] | None:
    """A search result as the page may show it; None for kinds outside the allowlist."""
    if hit.get("kind") not in EDITABLE_KINDS:
        return None
    return {
        **{k: hit[k] for k in ("id", "short_id", "kind", "title", "tags", "revision") if k in hit},
        "snippet": snippet_parts(str(hit.get("snippet", ""))),
    }


def snippet_parts(text: str) -> list[list[Any]]:
    """The engine's ``**term**`` highlights as ``[text, highlighted]`` pairs.

    The page turns each pair into a text node or a ``<mark>`` holding a text node: stored
    text never becomes markup, whatever it contains."""
    parts: list[list[Any]] = []
    for i, piece in enumerate(text.split("**")):
        if piece:
            parts.append([piece, i % 2 == 1])
    return parts


def parse_create(payload: object) -> tuple[str, dict[str, Any]]:
    """Validate a new item: ``{"kind": K, "fields": {...}}`` with an allowlisted kind and fields."""
    if not isinstance(payload, dict):
        raise MemoriesError("invalid_input", "A new item is a JSON object.")
    if set(payload) - {"kind", "fields"}:
        raise MemoriesError("unknown_field", "The new item contains a field the dashboard does not accept.")
    spec = spec_for(payload.get("kind"))
    fields = payload.get("fields")
    if not isinstance(fields, dict):
        raise MemoriesError("invalid_input", "A new item needs its fields.")
    clean: dict[str, Any] = {}
    for name, value in fields.items():
        field_spec = spec.field(name) if isinstance(name, str) else None
        if field_spec is None:
            raise MemoriesError("unknown_field", "The new item names a field this kind does not allow in the dashboard.")
        clean[name] = _check_value(field_spec, value)
    for field_spec in spec.fields:
        if field_spec.required and field_spec.name not in clean:
            raise MemoriesError("invalid_input", f"{field_spec.label} must not be empty.")
    return spec.kind, clean


def parse_save(kind: str, payload: object) -> tuple[str, dict[str, Any]]:
    """Validate a save: ``{"base": REV, "fields": {...}}`` with allowlisted fields only (and
    ``keep_both``, read by the route: save as a second version over a change made elsewhere)."""
    spec = spec_for(kind)
    if not isinstance(payload, dict):
        raise MemoriesError("invalid_input", "A save is a JSON object.")
    unknown = set(payload) - {"base", "fields", "keep_both"}
    if unknown:
        raise MemoriesError("unknown_field", "The save contains a field the dashboard does not accept.")
    base = payload.get("base")
    if not isinstance(base, str) or not _REVISION.match(base):
        raise MemoriesError("invalid_input", "A save must name the revision the page loaded (`base`).")
    fields = payload.get("fields")
    if not isinstance(fields, dict) or not fields:
        raise MemoriesError("invalid_input", "A save must change at least one field.")
    clean: dict[str, Any] = {}
    for name, value in fields.items():
        field_spec = spec.field(name) if isinstance(name, str) else None
        if field_spec is None:
            raise MemoriesError("unknown_field", "The save names a field this kind does not allow in the dashboard.")
        clean[name] = _check_value(field_spec, value)
    return base, clean


def _check_value(spec: FieldSpec, value: object) -> object:
    if spec.widget == "tags":
        if not isinstance(value, list) or len(value) > spec.max_length:
            raise MemoriesError("invalid_input", f"{spec.label}: a list of at most {spec.max_length} tags.")
        tags = []
        for tag in value:
            if not isinstance(tag, str) or not 0 < len(tag.strip()) <= MAX_TAG_LENGTH:
                raise MemoriesError("invalid_input", f"{spec.label}: each tag is 1 to {MAX_TAG_LENGTH} characters.")
            tags.append(tag.strip())
        return list(dict.fromkeys(tags))
    if not isinstance(value, str) or len(value) > spec.max_length:
        raise MemoriesError("invalid_input", f"{spec.label}: text of at most {spec.max_length} characters.")
    if spec.required and not value.strip():
        raise MemoriesError("invalid_input", f"{spec.label} must not be empty.")
    return value
