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
    "kind_table",
    "project_summary",
    "project_card",
    "parse_save",
    "check_asset_id",
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


def check_asset_id(value: str) -> str:
    if not _ASSET_ID.match(value):
        raise MemoriesError("invalid_input", "An asset ID is 6 to 64 lowercase hex characters.")
    return value


def project_summary(item: dict[str, Any]) -> dict[str, Any]:
    spec = spec_for(item.get("kind"))
    allowed = {f.name for f in spec.fields}
    return {k: item[k] for k in _SUMMARY_KEYS if k in item and (k not in ("title", "tags") or k in allowed)}


def project_card(raw: dict[str, Any]) -> dict[str, Any]:
    """A card as the editor may see it; refuses kinds outside the allowlist."""
    spec = spec_for(raw.get("kind"))
    fields = {f.name: raw.get(f.name, [] if f.widget == "tags" else "") for f in spec.fields}
    heads = raw.get("head_contents") or []
    return {
        "id": raw.get("id"),
        "short_id": raw.get("short_id"),
        "kind": spec.kind,
        "revision": raw.get("revision"),
        "short_revision": raw.get("short_revision"),
        "conflict": bool(raw.get("conflict")),
        "heads": len(heads) if heads else 1,
        "fields": fields,
    }


def parse_save(kind: str, payload: object) -> tuple[str, dict[str, Any]]:
    """Validate a save: ``{"base": REV, "fields": {...}}`` with allowlisted fields only."""
    spec = spec_for(kind)
    if not isinstance(payload, dict):
        raise MemoriesError("invalid_input", "A save is a JSON object.")
    unknown = set(payload) - {"base", "fields"}
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
