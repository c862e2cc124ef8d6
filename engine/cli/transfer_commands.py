"""import PATH and export --format jsonl|markdown DIR."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.cli.importers import ImportFormatError, iter_source
from engine.errors import MemoriesError

BATCH_ITEMS = 500
BATCH_BYTES = 4 * 1024 * 1024


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("import", parents=[common], help="import Markdown (file or folder) or JSONL")
    p.add_argument("path")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", parents=[common], help="export ordinary content (needs sudo)")
    p.add_argument("--format", choices=("jsonl", "markdown"), required=True)
    p.add_argument("dir")
    p.set_defaults(func=cmd_export)


def _batches(items: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    for item in items:
        item_size = len(item["body"].encode("utf-8")) + len(item["title"]) + 64
        if batch and (len(batch) >= BATCH_ITEMS or size + item_size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item_size
    if batch:
        yield batch


def cmd_import(ctx: Context, args: argparse.Namespace) -> int:
    source = Path(args.path)
    try:
        # First pass validates everything, so malformed input changes nothing.
        total = sum(1 for _ in iter_source(source))
        ctx.client()
        created = skipped = done = 0
        show_progress = sys.stderr.isatty() and not ctx.json_output
        for batch in _batches(iter_source(source)):
            result = ctx.request({"op": "import_batch", "items": batch}, timeout=300)
            created += result["created"]
            skipped += result["skipped"]
            done += len(batch)
            if show_progress:
                print(f"\rimported {done}/{total}", end="", file=sys.stderr, flush=True)
        if show_progress:
            print(file=sys.stderr)
    except ImportFormatError as exc:
        raise MemoriesError("invalid_input", str(exc)) from None
    ctx.emit({"created": created, "skipped": skipped, "total": total}, f"imported {created}, already present {skipped}")
    return 0


def _slug(title: str) -> str:
    slug = re.sub(r"[^\w\-]+", "-", title.lower(), flags=re.UNICODE).strip("-")
    return slug[:60] or "untitled"


def _create_exclusive(path: Path, text: str) -> None:
    """Never overwrite: O_EXCL, owner-only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _markdown(item: dict[str, Any]) -> str:
    lines = ["---", f"title: {json.dumps(item['title'], ensure_ascii=False)}"]
    if item["tags"]:
        lines.append("tags: [" + ", ".join(json.dumps(t, ensure_ascii=False) for t in item["tags"]) + "]")
    lines.extend(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(item["meta"].items()))
    lines.append("---")
    body = str(item["body"])
    return "\n".join(lines) + "\n" + body + ("" if body.endswith("\n") else "\n")


def cmd_export(ctx: Context, args: argparse.Namespace) -> int:
    target = Path(args.dir)
    first = ctx.request({"op": "export", "offset": 0, "limit": 500}, timeout=300)  # elevation checked first
    try:
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        jsonl = target / "memories.jsonl"
        handle = None
        if args.format == "jsonl":
            fd = os.open(jsonl, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            handle = os.fdopen(fd, "w", encoding="utf-8")
        offset = count = 0
        try:
            while True:
                page = first if offset == 0 else ctx.request({"op": "export", "offset": offset, "limit": 500}, timeout=300)
                for item in page["items"]:
                    if handle is not None:
                        record = {"title": item["title"], "body": item["body"], "tags": item["tags"], "meta": item["meta"]}
                        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    else:
                        _create_exclusive(target / f"{_slug(item['title'])}-{item['short_id']}.md", _markdown(item))
                    count += 1
                offset += len(page["items"])
                if not page["items"] or offset >= page["total"]:
                    break
        finally:
            if handle is not None:
                handle.close()
    except FileExistsError as exc:
        raise MemoriesError("io_error", f"{exc.filename} already exists; export never overwrites.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"Cannot write to {target} ({exc.__class__.__name__}).") from None
    ctx.emit({"exported": count, "dir": str(target), "format": args.format}, f"exported {count} to {target}")
    return 0
