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

    p = sub.add_parser(
        "wikilinks",
        parents=[common],
        help="read every note again: [[wikilinks]] become graph links; list the names no item has",
    )
    p.add_argument("--vault", metavar="NAME", help="this vault (default: the default vault)")
    p.set_defaults(func=cmd_wikilinks)


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
    relink_ids: list[str] = []
    attachments: set[str] = set()
    linked_in_batches = 0
    show_progress = sys.stderr.isatty() and not ctx.json_output
    if total:
        ctx.client()
    sent = 0
    for batch in _batches(loaded.notes):
        sent += len(batch)
        try:
            request: dict[str, Any] = {"op": "import_batch", "items": [note.item for note in batch]}
            if args.vault is not None:
                request["vault"] = args.vault
            # The engine indexes once the last batch is in.
            result = ctx.request_with_hints(request, {"more": True} if sent < total else {}, timeout=300)
        except MemoriesError as exc:
            raise _stopped(exc, batch, created, skipped, total) from None
        created += result["created"]
        skipped += result["skipped"]
        batch_links = result.get("wikilinks")
        if isinstance(batch_links, dict):
            linked_in_batches += int(batch_links.get("linked", 0))
            # Notes naming what was not there yet: linked again once every batch is in.
            relink_ids.extend(str(i) for i in batch_links.get("unresolved_ids", []))
            attachments.update(str(n) for n in batch_links.get("attachments", []))
        # Warnings from the engine (the batch was saved, a follow-up step failed): once each.
        fresh = [w for w in result.get("warnings", []) if isinstance(w, dict) and w not in warnings]
        warnings.extend(fresh)
        if show_progress:
            print(f"\rimported {created + skipped}/{total}", end="", file=sys.stderr, flush=True)
        _print_warnings(ctx, fresh)
    if show_progress:
        print(file=sys.stderr)
    links = _link_imported(ctx, relink_ids, args.vault, attachments) if linked_in_batches or relink_ids or attachments else None
    if links:
        warnings.extend(links.pop("warnings"))
        links["linked"] += linked_in_batches
    summary = {"created": created, "skipped": skipped, "total": total, **({"wikilinks": links} if links else {})}
    text = f"imported {created}, already present {skipped}" + (f", {len(loaded.warnings)} skipped" if loaded.warnings else "")
    # Text mode printed the warnings as they came (also when a later batch fails).
    ctx.emit({**summary, "warnings": warnings} if ctx.json_output else summary, text)
    return 0


SYNC_BATCH = 5000


def _link_imported(ctx: Context, ids: list[str], vault: str | None, attachments: set[str]) -> dict[str, Any]:
    """DT-8: once every note is in, read again the new notes that named something not there
    yet, so a link to a note of a later batch resolves too; say which names no item has, and
    which attachments the notes name (only Markdown notes are imported)."""
    linked = 0
    unresolved: list[dict[str, Any]] = []
    for start in range(0, len(ids), SYNC_BATCH):
        request: dict[str, Any] = {"op": "wikilinks_sync", "ids": ids[start : start + SYNC_BATCH]}
        if vault is not None:
            request["vault"] = vault
        result = ctx.request(request, timeout=300)
        linked += int(result["linked"])
        unresolved.extend(result["unresolved"])
        attachments.update(result["attachments"])
    warnings: list[dict[str, str]] = []
    if unresolved:
        names = sorted({n for row in unresolved for n in row["names"]})
        shown = ", ".join(f"[[{n}]]" for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        warnings.append(
            {
                "code": "unresolved_wikilinks",
                "message": f"{len(names)} wikilink name(s) match no item: {shown} (`memories wikilinks` lists them).",
            }
        )
    if attachments:
        names = sorted(attachments)
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        warnings.append(
            {
                "code": "attachments_not_imported",
                "message": f"{len(names)} attachment(s) the notes link to stay outside the vault "
                f"(only Markdown notes are imported): {shown}.",
            }
        )
    _print_warnings(ctx, warnings)
    return {"linked": linked, "unresolved": len({n for row in unresolved for n in row["names"]}), "warnings": warnings}


def cmd_wikilinks(ctx: Context, args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"op": "wikilinks_sync"}
    if args.vault is not None:
        request["vault"] = args.vault
    result = ctx.request(request, timeout=300)
    lines = [f"checked {result['checked']} note(s): {result['linked']} link(s) added, {result['removed']} removed"]
    for row in result["unresolved"]:
        names = ", ".join(f"[[{n}]]" for n in row["names"])
        lines.append(f"  {row['short_id']}  {one_line(str(row['title']))}: no item is called {one_line(names)}")
    if result["attachments"]:
        lines.append("attachments named (not notes): " + one_line(", ".join(result["attachments"])))
    ctx.emit(result, "\n".join(lines))
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


# A recorded path is used only when no part could mean something else on any system.
_UNSAFE_IN_PATH = re.compile(r'[\x00-\x1f\x7f\\:*?"<>|]')


def _recorded_path(meta: dict[str, Any]) -> list[str] | None:
    """The folder path an import recorded (``meta["path"]``), if it is a safe relative Markdown path."""
    from engine.cli.importers import MARKDOWN_SUFFIXES, MAX_PATH_CHARS, PATH_META

    path = meta.get(PATH_META)
    if not isinstance(path, str) or not path.lower().endswith(MARKDOWN_SUFFIXES) or len(path) > MAX_PATH_CHARS:
        return None
    parts = path.split("/")
    for part in parts:
        if not part or part in (".", "..") or part.startswith(".") or _UNSAFE_IN_PATH.search(part):
            return None
    return parts


def export_path(item: dict[str, Any], used: set[str]) -> list[str]:
    """Where a note goes in a Markdown export: the path its import recorded, else its title as
    the file name (what a ``[[Title]]`` names); a second note at the same place gets its short ID."""
    from engine.cli.importers import file_name_for

    parts = _recorded_path(item["meta"]) or [file_name_for(str(item["title"]))]
    key = "/".join(parts).casefold()
    if key in used:
        stem, dot, suffix = parts[-1].rpartition(".")
        parts = [*parts[:-1], f"{stem} ({item['short_id']}){dot}{suffix}"]
        key = "/".join(parts).casefold()
    used.add(key)
    return parts


def _create_exclusive(path: Path, text: str) -> None:
    """Never overwrite: O_EXCL, owner-only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _yaml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


# Keys Obsidian reads as lists; meta keeps them as "a, b" text and they go back as lists.
_LIST_KEYS = ("aliases", "cssclasses")


_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w\-]*$")


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else _yaml_string(key)


def _as_list(key: str, value: str) -> list[str] | None:
    """A meta value that was a front-matter list: a JSON array of strings (an item held a
    comma), or "a, b" under a key Obsidian reads as a list."""
    if value.startswith("[") and value.endswith("]"):
        try:
            items = json.loads(value)
        except ValueError:
            return None
        if isinstance(items, list) and items and all(isinstance(i, str) for i in items):
            return items
        return None
    if key in _LIST_KEYS:
        return [v for v in value.split(", ") if v]
    return None


def markdown_file(item: dict[str, Any]) -> str:
    """Front matter (title, tags, meta except the recorded path), then the body as stored."""
    from engine.cli.importers import PATH_META

    lines = ["---", f"title: {_yaml_string(item['title'])}"]
    if item["tags"]:
        lines.append("tags: [" + ", ".join(_yaml_string(t) for t in item["tags"]) + "]")
    for key, value in sorted(item["meta"].items()):
        if key == PATH_META and _recorded_path(item["meta"]) is not None:
            continue  # where the file is says it
        items = _as_list(key, value)
        if items is not None:
            lines.append(f"{_yaml_key(key)}: [" + ", ".join(_yaml_string(v) for v in items) + "]")
        else:
            lines.append(f"{_yaml_key(key)}: {_yaml_string(value)}")
    lines.append("---")
    body = str(item["body"])
    return "\n".join(lines) + "\n" + body + ("" if body.endswith("\n") else "\n")


def _write_note(target: Path, parts: list[str], text: str) -> None:
    folder = target
    for part in parts[:-1]:
        folder = folder / part
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if folder.is_symlink() or not folder.is_dir():
                raise MemoriesError(
                    "io_error", f"{folder} is not a folder this export made; export never follows links."
                ) from None
    _create_exclusive(folder / parts[-1], text)


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
        used: set[str] = set()
        try:
            while True:
                more = {"op": "export", "offset": offset, "limit": 500, **scope}
                page = first if offset == 0 else ctx.request(more, timeout=300)
                for item in page["items"]:
                    if handle is not None:
                        record = {"title": item["title"], "body": item["body"], "tags": item["tags"], "meta": item["meta"]}
                        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    else:
                        _write_note(target, export_path(item, used), markdown_file(item))
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
