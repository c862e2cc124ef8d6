"""backup create FILE, backup verify FILE, restore FILE (BK-1, BK-2).

A backup has its own password (asked twice on a terminal, or one line of --password-stdin).
`restore` runs in the data home chosen by --home (a new one): it asks the backup's password,
then the new vault password for this device (with --password-stdin: the first line is the
backup's password, an optional second line the new vault password, else the same one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.cli.password import read_password
from engine.errors import MemoriesError

__all__ = ["register", "export_memories_json", "import_memories_json", "is_memories_json"]

# A backup or restore of a large vault takes a while; the engine answers when it is done.
_TIMEOUT = 3600.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    backup = sub.add_parser("backup", parents=[common], help="write or check a password-protected backup file")
    bsub = backup.add_subparsers(dest="backup_command", metavar="SUBCOMMAND", parser_class=type(backup), required=True)

    p = bsub.add_parser("create", parents=[common], help="write a backup of every shared vault to FILE (needs sudo)")
    p.add_argument("file", help="the new backup file (never overwritten)")
    p.add_argument("--password-stdin", action="store_true", help="read the backup's own password from standard input")
    p.set_defaults(func=cmd_create)

    p = bsub.add_parser("verify", parents=[common], help="read and authenticate a backup file; writes nothing")
    p.add_argument("file", help="the backup file to check")
    p.add_argument("--password-stdin", action="store_true", help="read the backup's password from standard input")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("restore", parents=[common], help="make this data home a new device from a backup file")
    p.add_argument("file", help="the backup file")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the backup's password, then (optional second line) the new vault password, from standard input",
    )
    p.add_argument(
        "--leave-shared",
        action="store_true",
        help="leave out the vaults shared with other people, so their Owner can add this device again (issue 29)",
    )
    p.set_defaults(func=cmd_restore)


def _path(text: str) -> str:
    return str(Path(text).expanduser().resolve())


def _progress_thread(ctx: Context, stop: threading.Event) -> threading.Thread | None:
    """On a terminal (and not --json), show how far the engine is, asking on a second connection."""
    if ctx.json_output or not sys.stderr.isatty():
        return None
    from engine.ipc.client import IpcClient

    def run() -> None:
        shown = False
        try:
            client = IpcClient(ctx.paths.socket, timeout=5.0)
        except Exception:
            return
        try:
            while not stop.wait(0.1):
                try:
                    state = client.request({"op": "backup_progress"})
                except Exception:
                    return
                if state.get("running") and state.get("total"):
                    print(f"\rbacking up {state['done']}/{state['total']} revisions", end="", file=sys.stderr, flush=True)
                    shown = True
        finally:
            if shown:
                print(file=sys.stderr)
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def cmd_create(ctx: Context, args: argparse.Namespace) -> int:
    path = _path(args.file)
    password = read_password(args.password_stdin, confirm=True, prompt="Backup password (its own; keep it safe): ")
    ctx.client()
    stop = threading.Event()
    thread = _progress_thread(ctx, stop)
    try:
        result = ctx.request({"op": "backup_create", "path": path, "password": password}, timeout=_TIMEOUT)
    finally:
        stop.set()
        if thread is not None:
            thread.join(2)
    mib = result["bytes"] / (1024 * 1024)
    ctx.emit(
        result, f"backed up {result['vaults']} vault(s), {result['revisions']} revisions ({mib:.1f} MiB) to {result['path']}"
    )
    return 0


def cmd_verify(ctx: Context, args: argparse.Namespace) -> int:
    path = _path(args.file)
    password = read_password(args.password_stdin, prompt="Backup password: ")
    ctx.ensure_engine()
    result = ctx.request({"op": "backup_verify", "path": path, "password": password}, timeout=_TIMEOUT)
    ctx.emit(
        result,
        f"ok: {result['vaults']} vault(s), {result['items']} items, {result['revisions']} revisions, "
        f"{result['links']} links; every chunk and signature verified",
    )
    return 0


def _shared_words(result: dict[str, Any]) -> str:
    """What a restore did to vaults shared with other people (issue 29, BK-2), in words."""
    shared = result.get("shared_vaults") or []
    if not shared:
        return ""
    kept = ", ".join(str(v["name"]) for v in shared if not v.get("left_out"))
    left = ", ".join(str(v["name"]) for v in shared if v.get("left_out"))
    rejoin = (
        "To rejoin, run here `memories whoami --invite --owner OWNER_FINGERPRINT` (the Owner's `memories whoami`) and "
        "send the printed invitation; after `memories vault member add` there, the vault arrives on the next sync. "
        f"This device's user fingerprint (check it at both ends): {result['user_fingerprint']}"
    )
    words = (
        "\nA restore makes a new device with new keys and new vault IDs and does not claim the old shared "
        "membership: nothing syncs with the other members until a vault's Owner adds this device again."
    )
    if kept:
        words += (
            f"\nshared with other people before, restored as copies that are yours alone: {kept}. A copy keeps the "
            "item IDs, so the shared vault itself cannot arrive on this device while the copy is here (an item lives "
            "in one vault). To rejoin one, restore again into a new data home with `--leave-shared`."
        )
    if left:
        words += f"\nshared with other people before, left out (--leave-shared): {left}. " + rejoin
    return words


def cmd_restore(ctx: Context, args: argparse.Namespace) -> int:
    path = _path(args.file)
    backup_password = read_password(args.password_stdin, prompt="Backup password: ")
    if args.password_stdin:
        line = sys.stdin.readline().rstrip("\r\n")
        password = line or backup_password
    else:
        password = read_password(False, confirm=True, prompt="New vault password for this device: ")
    ctx.ensure_engine()
    request = {
        "op": "restore",
        "path": path,
        "backup_password": backup_password,
        "password": password,
        "leave_shared": bool(args.leave_shared),
    }
    result = ctx.request(request, timeout=_TIMEOUT)
    text = (
        f"restored {result['items']} items in {result['vaults']} vault(s) as a new device; "
        f"the original history ({result['archived_revisions']} revisions) is kept read-only"
    )
    text += _shared_words(result)
    ctx.emit(result, text)
    return 0


# -- export --format memories-json DIR and `import FILE.json` of such a file ----------------------
JSON_FORMAT = "memories-json"
JSON_FILE = "memories.json"
_PAGE = 200


def export_memories_json(ctx: Context, target: Path, vault: str | None, include_secrets: bool) -> int:
    """DIR/memories.json: every item (every card kind, conflict heads), its links; secrets only if asked."""
    scope: dict[str, Any] = {} if vault is None else {"vault": vault}
    request = {"op": "export_memories_json", "offset": 0, "limit": _PAGE, "include_secrets": include_secrets, **scope}
    first = ctx.request(request, timeout=300)  # elevation is checked before anything is written
    items: list[dict[str, Any]] = list(first["items"])
    offset = len(items)
    while first["items"] and offset < first["total"]:
        page = ctx.request({**request, "offset": offset}, timeout=300)
        if not page["items"]:
            break
        items.extend(page["items"])
        offset += len(page["items"])
    document = {"format": JSON_FORMAT, "version": 1, "secrets": include_secrets, "items": items, "links": first["links"]}
    path = target / JSON_FILE
    try:
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, ensure_ascii=False, indent=1)
    except FileExistsError:
        raise MemoriesError("io_error", f"{path} already exists; export never overwrites.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"Cannot write to {target} ({exc.__class__.__name__}).") from None
    result = {"exported": len(items), "links": len(first["links"]), "dir": str(target), "format": JSON_FORMAT}
    ctx.emit(result, f"exported {len(items)} items and {len(first['links'])} links to {path}")
    return 0


def is_memories_json(path: Path) -> bool:
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096)
    return b'"format"' in head and JSON_FORMAT.encode() in head


def import_memories_json(ctx: Context, path: Path, vault: str | None) -> int:
    """Import a memories-json file: every check in the engine, credentials first, then the rest, then links."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise MemoriesError("invalid_input", f"{path.name} is not a readable memories-json file. Nothing was imported.") from None
    if not isinstance(document, dict) or document.get("format") != JSON_FORMAT or document.get("version") != 1:
        raise MemoriesError("invalid_input", f"{path.name} is not a version-1 memories-json file. Nothing was imported.")
    items, links = document.get("items"), document.get("links")
    if not isinstance(items, list) or not isinstance(links, list):
        raise MemoriesError("invalid_input", f"{path.name}: items and links must be lists. Nothing was imported.")
    scope: dict[str, Any] = {} if vault is None else {"vault": vault}
    ordered = sorted(items, key=lambda i: isinstance(i, dict) and i.get("kind") != "credential")
    totals = {"created": 0, "skipped": 0, "without_secret": 0, "links": 0}
    for start in range(0, len(ordered), _PAGE):
        result = ctx.request({"op": "import_memories_json", "items": ordered[start : start + _PAGE], **scope}, timeout=300)
        for key in ("created", "skipped", "without_secret"):
            totals[key] += int(result[key])
    for start in range(0, len(links), 5000):
        result = ctx.request({"op": "import_memories_json", "links": links[start : start + 5000], **scope}, timeout=300)
        totals["links"] += int(result["links"])
    text = f"imported {totals['created']} items and {totals['links']} links, already present {totals['skipped']}"
    if totals["without_secret"]:
        text += f"; {totals['without_secret']} credentials had no secret in the file (exported without --include-secrets)"
    ctx.emit(totals, text)
    return 0
