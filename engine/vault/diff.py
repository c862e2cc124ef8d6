"""Unified text projection of a revision and diffs between two of them (HI-3)."""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["text_projection", "unified_diff"]


def text_projection(summary: dict[str, Any], body: str, tombstone: bool = False) -> list[str]:
    """Title, structured metadata (sorted), a blank line, then the body."""
    if tombstone:
        return ["(deleted)"]
    lines = [f"title: {summary.get('title', '')}"]
    tags = summary.get("tags") or []
    lines.append("tags: " + ", ".join(tags))
    meta = summary.get("meta") or {}
    lines.extend(f"meta.{key}: {meta[key]}" for key in sorted(meta))
    lines.append("")
    lines.extend(body.splitlines())
    return lines


def unified_diff(old: list[str], new: list[str], old_name: str, new_name: str) -> str:
    return "\n".join(difflib.unified_diff(old, new, fromfile=old_name, tofile=new_name, lineterm=""))
