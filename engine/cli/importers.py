"""Parsers for `memories import`: Markdown with front matter, and JSONL (outside bytes).

Both yield plain dicts ``{"title", "body", "tags", "meta"}`` and raise
``ImportFormatError`` naming the file and line for anything malformed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ImportFormatError", "parse_markdown", "parse_jsonl_line", "iter_source", "MARKDOWN_SUFFIXES"]

MARKDOWN_SUFFIXES = (".md", ".markdown")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
_JSONL_KEYS = {"title", "body", "tags", "meta"}


class ImportFormatError(ValueError):
    """The input is malformed; the message names where (never echoes content)."""


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _inline_list(text: str) -> list[str]:
    inner = text.strip()[1:-1]
    return [_scalar(part) for part in inner.split(",") if _scalar(part)]


def _front_matter(lines: list[str], where: str) -> tuple[dict[str, Any], int]:
    """Parse a small YAML subset: `key: value`, `key: [a, b]`, and `key:` + `- item` lists."""
    data: dict[str, Any] = {}
    current_list: list[str] | None = None
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r\n")
        if line.strip() == "---":
            return data, number
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("- ") and current_list is not None:
            current_list.append(_scalar(stripped[2:]))
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key or line[0].isspace():
            raise ImportFormatError(f"{where}: line {number}: front matter expects `key: value`.")
        value = value.strip()
        if not value:
            current_list = []
            data[key] = current_list
        elif value.startswith("[") and value.endswith("]"):
            data[key] = _inline_list(value)
            current_list = None
        else:
            data[key] = _scalar(value)
            current_list = None
    raise ImportFormatError(f"{where}: the front matter is not closed with `---`.")


def parse_markdown(text: str, where: str, fallback_title: str) -> dict[str, Any]:
    lines = text.splitlines(keepends=True)
    meta: dict[str, str] = {}
    tags: list[str] = []
    title = ""
    body_start = 0
    if lines and lines[0].strip() == "---":
        data, end = _front_matter(lines, where)
        body_start = end
        for key, value in data.items():
            if key == "title":
                title = value if isinstance(value, str) else ", ".join(value)
            elif key in ("tags", "tag"):
                tags = [value] if isinstance(value, str) else list(value)
                tags = [t for tag in tags for t in (tag.split(",") if "," in tag else [tag])]
                tags = [t.strip() for t in tags if t.strip()]
            else:
                meta[key] = value if isinstance(value, str) else ", ".join(value)
    body = "".join(lines[body_start:]).strip("\n")
    if not title:
        for line in body.splitlines():
            if line.startswith("# "):
                title = line[2:].strip()
                break
    return {"title": (title or fallback_title)[:1000], "body": body, "tags": tags[:64], "meta": meta}


def parse_jsonl_line(line: str, where: str, number: int) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        raise ImportFormatError(f"{where}: line {number}: not valid JSON.") from None
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{where}: line {number}: expected a JSON object.")
    unknown = sorted(set(obj) - _JSONL_KEYS)
    if unknown:
        names = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise ImportFormatError(f"{where}: line {number}: unknown key(s) {names}; allowed: title, body, tags, meta.")
    title, body = obj.get("title"), obj.get("body")
    tags, meta = obj.get("tags", []), obj.get("meta", {})
    if not isinstance(title, str) or not title:
        raise ImportFormatError(f"{where}: line {number}: `title` must be a non-empty string.")
    if not isinstance(body, str):
        raise ImportFormatError(f"{where}: line {number}: `body` must be a string.")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ImportFormatError(f"{where}: line {number}: `tags` must be a list of strings.")
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ImportFormatError(f"{where}: line {number}: `meta` must map strings to strings.")
    return {"title": title, "body": body, "tags": tags, "meta": meta}


def _markdown_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found.extend(Path(directory) / f for f in sorted(filenames) if f.lower().endswith(MARKDOWN_SUFFIXES))
    return found


def iter_source(path: Path) -> Iterator[dict[str, Any]]:
    """Yield items from a Markdown file, a folder of Markdown files, or a JSONL file."""
    if path.is_dir():
        for file in _markdown_files(path):
            yield _read_markdown(file, str(file.relative_to(path)))
        return
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or folder.")
    if path.name.lower().endswith(JSONL_SUFFIXES):
        try:
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    item = parse_jsonl_line(line, path.name, number)
                    if item is not None:
                        yield item
        except UnicodeDecodeError:
            raise ImportFormatError(f"{path.name}: not UTF-8 text.") from None
        return
    if path.name.lower().endswith(MARKDOWN_SUFFIXES):
        yield _read_markdown(path, path.name)
        return
    raise ImportFormatError(f"{path.name}: import takes .md/.markdown files, folders of them, or .jsonl.")


def _read_markdown(file: Path, where: str) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ImportFormatError(f"{where}: not UTF-8 text.") from None
    except OSError as exc:
        raise ImportFormatError(f"{where}: cannot be read ({exc.__class__.__name__}).") from None
    return parse_markdown(text, where, file.stem)
