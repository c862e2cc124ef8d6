"""import PATH and export --format jsonl|markdown DIR."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cli.context import Context
from engine.errors import MemoriesError
from engine.terminal_text import one_line

if TYPE_CHECKING:
    from engine.cli.importers import Note

BATCH_ITEMS = 500
BATCH_BYTES = 4 * 1024 * 1024  # encoded; well under the frame limit


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    from engine.cli.login_commands import add_moving_options

    p = sub.add_parser(
        "import",
        parents=[common],
        help="import Markdown (file or folder) or JSONL; or `import keepassxc|bitwarden|1password FILE`",
    )
    p.add_argument("path", help="notes to import, or keepassxc, bitwarden or 1password followed by FILE")
    p.add_argument("file", nargs="?", help="with keepassxc|bitwarden|1password: the export file")
    add_moving_options(p)
    p.add_argument("--vault", metavar="NAME", help="import into this vault (default: the default vault)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", parents=[common], help="export ordinary content (needs sudo)")
    p.add_argument(
        "--format",
        choices=("jsonl", "markdown", "memories-json"),
        required=True,
        help="one JSONL file, one Markdown file per memory, or memories-json: every card kind and link (DIR/memories.json)",
    )
    p.add_argument(
        "--include-secrets", action="store_true", help="memories-json only: include credential secrets (passwords, OTP seeds)"
    )
    p.add_argument("dir", help="a new or empty directory to write into")
    p.add_argument("--vault", metavar="NAME", help="export this vault (default: the default vault)")
    p.set_defaults(func=cmd_export)


def _batches(notes: list[Note]) -> Iterator[list[Note]]:
    """At most BATCH_ITEMS notes and BATCH_BYTES encoded per batch; a larger single note goes alone (it fits a frame)."""
    batch: list[Note] = []
    size = 0
    for note in notes:
        if batch and (len(batch) >= BATCH_ITEMS or size + note.wire_bytes > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(note)
        size += note.wire_bytes + 1
    if batch:
        yield batch


# Errors after which the engine may have committed the batch in flight (no answer came back).
_OUTCOME_UNKNOWN = {"timeout", "daemon_unavailable"}


def cmd_import(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.login_commands import MOVING_SOURCES, cmd_import_moving

    if args.file is not None:
        if args.path not in MOVING_SOURCES:
            raise MemoriesError("invalid_input", f"`import SOURCE FILE` takes one of {', '.join(MOVING_SOURCES)} as SOURCE.")
        return cmd_import_moving(ctx, args, args.path, Path(args.file))
    if args.dry_run or args.kdbx_password_stdin or args.keyfile:
        raise MemoriesError("invalid_input", "--dry-run, --kdbx-password-stdin and --keyfile apply to `import SOURCE FILE`.")
    from engine.cli.importers import ImportFormatError, load_source  # msgspec: only `import` needs it

    source = Path(args.path)
    from engine.cli.backup_commands import import_memories_json, is_memories_json

    if is_memories_json(source):
        return import_memories_json(ctx, source, args.vault)
    try:
        # Read and check every note first (the same limits as `put`): an invalid file imports nothing.
        loaded = load_source(source)
    except ImportFormatError as exc:
        raise MemoriesError("invalid_input", f"{exc} Nothing was imported.") from None
    # Like every command's warnings: {code, message}; files left out are "skipped".
    warnings: list[dict[str, str]] = [{"code": "skipped", "message": text} for text in loaded.warnings]
    _print_warnings(ctx, warnings)
    total = len(loaded.notes)
    created = skipped = 0
    show_progress = sys.stderr.isatty() and not ctx.json_output
    if total:
        ctx.client()
    for batch in _batches(loaded.notes):
        try:
            request: dict[str, Any] = {"op": "import_batch", "items": [note.item for note in batch]}
            if args.vault is not None:
                request["vault"] = args.vault
            result = ctx.request(request, timeout=300)
        except MemoriesError as exc:
            raise _stopped(exc, batch, created, skipped, total) from None
        created += result["created"]
        skipped += result["skipped"]
        # Warnings from the engine (the batch was saved, a follow-up step failed): once each.
        fresh = [w for w in result.get("warnings", []) if isinstance(w, dict) and w not in warnings]
        warnings.extend(fresh)
        if show_progress:
            print(f"\rimported {created + skipped}/{total}", end="", file=sys.stderr, flush=True)
        _print_warnings(ctx, fresh)
    if show_progress:
        print(file=sys.stderr)
    summary = {"created": created, "skipped": skipped, "total": total}
    text = f"imported {created}, already present {skipped}" + (f", {len(loaded.warnings)} skipped" if loaded.warnings else "")
    # Text mode printed the warnings as they came (also when a later batch fails).
    ctx.emit({**summary, "warnings": warnings} if ctx.json_output else summary, text)
    return 0


def _print_warnings(ctx: Context, warnings: list[dict[str, str]]) -> None:
    if ctx.json_output:
        return
    for warning in warnings:
        print(f"warning: {one_line(warning.get('code', 'warning'))}: {one_line(warning.get('message', ''))}", file=sys.stderr)


def _stopped(exc: MemoriesError, batch: list[Note], created: int, skipped: int, total: int) -> MemoriesError:
    """A batch failed: say exactly what was committed (before it, or by it), and that running the import again is safe."""
    saved = exc.details.get("committed") if exc.code == "committed_with_errors" else None
    if isinstance(saved, list):
        created += len(saved)  # the engine saved this batch, then a follow-up step failed
    if created or skipped:
        done = f"{created} new note(s) were committed ({skipped} were already present) of {total}"
    else:
        done = f"none of the {total} note(s) was imported"
    if exc.code in _OUTCOME_UNKNOWN:
        done += f"; the {len(batch)} note(s) of that batch may also have been committed (no answer came back)"
    message = (
        f"{exc.message} The import stopped at the batch starting with {batch[0].where}; {done}. "
        "Run the same import again to finish: notes already in the vault are skipped."
    )
    return MemoriesError(exc.code, message, created=created, skipped=skipped, total=total)


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
    if args.format == "memories-json":
        from engine.cli.backup_commands import export_memories_json

        return export_memories_json(ctx, target, args.vault, args.include_secrets)
    if args.include_secrets:
        raise MemoriesError("invalid_input", "--include-secrets applies to --format memories-json only.")
    scope: dict[str, Any] = {} if args.vault is None else {"vault": args.vault}
    first = ctx.request({"op": "export", "offset": 0, "limit": 500, **scope}, timeout=300)  # elevation checked first
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
                more = {"op": "export", "offset": offset, "limit": 500, **scope}
                page = first if offset == 0 else ctx.request(more, timeout=300)
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
