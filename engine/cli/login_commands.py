"""`memories login new|show|list|copy-password|copy-username|copy-otp` (CD-10), and the
moving-in imports `memories import keepassxc|bitwarden|1password FILE` (IM-1).

Secrets come only from stdin (``--password-stdin``, ``--totp-uri-stdin``) or are generated;
they leave the engine only through the copy commands, straight to the clipboard, which
clears itself (engine/cli/clipboard.py). Outside files are parsed and every entry is checked
here, in the CLI process (like note import), before anything is sent to the engine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError
from engine.terminal_text import one_line

if TYPE_CHECKING:
    from engine.moving.entry import Loaded

__all__ = ["register", "cmd_import_moving", "MOVING_SOURCES"]

MOVING_SOURCES = ("keepassxc", "bitwarden", "1password")
BATCH_ENTRIES = 500
BATCH_BYTES = 4 * 1024 * 1024


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    login = sub.add_parser("login", parents=[common], help="login cards: username, URLs, password, TOTP")
    lsub = login.add_subparsers(dest="login_command", metavar="SUBCOMMAND", parser_class=type(login))

    p = lsub.add_parser("new", parents=[common], help="create a login card and its credential together")
    p.add_argument("--title", required=True, help="the login's name, e.g. the site (visible to other users in `ps`)")
    p.add_argument("--username", help="the account name or e-mail used to sign in")
    p.add_argument("--url", action="append", dest="urls", metavar="URL", default=[], help="the site's address (repeatable)")
    secret = p.add_mutually_exclusive_group()
    secret.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    secret.add_argument("--generate", action="store_true", help="generate a random password")
    p.add_argument("--length", type=int, help="with --generate: characters (default 24)")
    p.add_argument("--no-symbols", action="store_true", help="with --generate: letters and digits only")
    p.add_argument(
        "--otp-stdin",
        "--totp-uri-stdin",
        dest="totp_uri_stdin",
        action="store_true",
        help="read an otpauth://totp URI from standard input (the same flag as `protected new`)",
    )
    p.add_argument("--notes", help="non-secret notes (the card's body)")
    p.add_argument("--tag", action="append", dest="tags", metavar="TAG", default=[], help="a tag (repeatable)")
    p.set_defaults(func=cmd_new)

    p = lsub.add_parser("show", parents=[common], help="show a login (the password only as a cred: reference)")
    p.add_argument("id", help="the login's ID or a unique prefix (from `memories login list`)")
    p.set_defaults(func=cmd_show)

    p = lsub.add_parser("list", parents=[common], help="list login cards, or those matching words")
    p.add_argument("query", nargs="*", help="words to find in the title, username, URLs or tags (any case)")
    p.add_argument("--tag", help="only logins with this tag")
    p.set_defaults(func=cmd_list)

    p = lsub.add_parser(
        "history", parents=[common], help="list a login's earlier passwords (when each was replaced; never the passwords)"
    )
    p.add_argument("id", help="the login's ID or a unique prefix (from `memories login list`)")
    p.set_defaults(func=cmd_history)

    for what, text in (("password", "the password"), ("username", "the username"), ("otp", "the current TOTP code")):
        p = lsub.add_parser(f"copy-{what}", parents=[common], help=f"copy {text} to the clipboard (auto-clears)")
        p.add_argument("id", help="the login's ID or a unique prefix (from `memories login list`)")
        p.add_argument("--clear-after", type=int, help="seconds before the clipboard is cleared (default 30)")
        if what == "password":
            p.add_argument(
                "--previous",
                type=int,
                default=0,
                metavar="N",
                help="an earlier password instead: 1 is the one before the current (see `memories login history ID`)",
            )
        p.set_defaults(func=cmd_copy, what=what)


def _stdin_lines(count: int) -> list[str]:
    lines = []
    for _ in range(count):
        line = sys.stdin.readline()
        value = line[:-1] if line.endswith("\n") else line
        value = value[:-1] if value.endswith("\r") else value
        if not value:
            raise UsageError("standard input ended before every value was read (one value per line)")
        lines.append(value)
    return lines


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    if (args.length is not None or args.no_symbols) and not args.generate:
        raise UsageError("--length and --no-symbols apply to --generate")
    # One value per line, in this order: the password, then the otpauth URI.
    values = _stdin_lines(int(args.password_stdin) + int(args.totp_uri_stdin))
    body: dict[str, Any] = {"op": "login_new", "title": args.title, "urls": args.urls, "tags": args.tags}
    if args.username:
        body["username"] = args.username
    if args.notes:
        body["notes"] = args.notes
    if args.password_stdin:
        body["password"] = values.pop(0)
    elif args.generate:
        from engine.cli.password_commands import DEFAULT_LENGTH, generate_password

        body["password"] = generate_password(args.length or DEFAULT_LENGTH, not args.no_symbols)
    if args.totp_uri_stdin:
        body["totp"] = values.pop(0).strip()
    result = ctx.request(body)
    features = ", ".join(result["features"]) or "username only"
    ctx.emit(result, f"{result['short_id']}  login ({features}); password in {result['credential']}")
    return 0


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "card_read", "id": args.id})
    if result.get("kind") != "login":
        raise MemoriesError("invalid_input", "That item is not a login; use `memories card show`.")
    meta = result.get("meta", {})
    lines = [f"{result['short_id']}  {one_line(result['title'])}"]
    if meta.get("username"):
        lines.append(f"username: {one_line(meta['username'])}")
    for url in str(meta.get("urls", "")).split("\n"):
        if url:
            lines.append(f"url: {one_line(url)}")
    prot = result.get("protected") or {}
    if prot:
        lines.append(f"secrets: {one_line(', '.join(prot['features']) or 'none')} in {one_line(prot['credential'])}")
        names = [n for n in prot.get("fields", []) if isinstance(n, str)]
        if names:
            # Names only (IM-2): each value is reached with `memories copy ID:NAME` or `run --env`.
            lines.append("protected fields: " + ", ".join(one_line(n) for n in names))
            lines.append(f"  copy one: memories copy {result['short_id']}:NAME   (run: --env VAR=card:{result['short_id']}#NAME)")
    earlier = ctx.request({"op": "login_history", "id": args.id})["earlier"] if prot else []
    if earlier:
        lines.append(
            f"password history: {len(earlier)} earlier password(s); `memories login history {result['short_id']}` lists them"
        )
    for key, value in sorted(meta.items()):
        if key.startswith("x_"):
            lines.append(f"{one_line(key[2:])}: {one_line(value)}")
    if result.get("tags"):
        lines.append("tags: " + one_line(", ".join(result["tags"])))
    if result.get("body"):
        lines += ["", result["body"]]
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "login_history", "id": args.id})
    rows = result["earlier"]
    if not rows:
        ctx.emit(result, "no earlier passwords: this login's password was never changed here or in the app it came from")
        return 0
    lines = [f"{len(rows)} earlier password(s), newest first:"]
    for row in rows:
        when = row["replaced"] or time.strftime("%Y-%m-%d %H:%M", time.localtime(row["recorded_ms"] / 1000))
        how = "replaced" if row["replaced"] else "recorded"
        lines.append(f"  {row['number']:>3}  {how} {one_line(when)}")
    lines.append(f"copy one: memories login copy-password {result['short_id']} --previous N   (needs `memories sudo`)")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "login_list"}
    query = " ".join(args.query).strip()
    if query:
        body["query"] = query
    if args.tag:
        body["tag"] = args.tag
    result = ctx.request(body)
    rows = [
        f"{item['short_id']}  {one_line(item['title'])}"
        + (f"  {one_line(item['username'])}" if item.get("username") else "")
        + (f"  {one_line(item['urls'][0])}" if item.get("urls") else "")
        + ("  (secure note)" if "note" in item.get("features", []) else "")
        for item in result["items"]
    ]
    if rows:
        text = "\n".join(rows)
    elif query or args.tag:
        asked = ([f"'{one_line(query)}'"] if query else []) + ([f"tag '{one_line(args.tag)}'"] if args.tag else [])
        text = "no logins match " + " with ".join(asked)
    else:
        text = "no logins"
    ctx.emit(result, text)
    return 0


def cmd_copy(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.card_commands import _clear_seconds
    from engine.cli.clipboard import copy_with_clear, detect

    seconds = _clear_seconds(ctx, args.clear_after)
    detect()  # fail before asking the engine (and auditing) if there is no clipboard
    if args.what == "username":
        card = ctx.request({"op": "card_read", "id": args.id})
        if card.get("kind") != "login":
            raise MemoriesError("invalid_input", "That item is not a login.")
        value = card.get("meta", {}).get("username")
        if not value:
            raise MemoriesError("nothing_to_copy", "That login has no username.")
    else:
        body: dict[str, Any] = {"op": "login_secret", "id": args.id, "what": args.what}
        previous = getattr(args, "previous", 0)
        if previous < 0:
            raise UsageError("--previous is 1 or more (1 is the password before the current one)")
        if previous:
            body["previous"] = previous
        value = ctx.request(body).pop("secret")
    backend = copy_with_clear(value, seconds)
    del value
    ctx.emit({"copied": True}, f"copied to the clipboard ({backend.name}); cleared in {seconds} s if unchanged")
    return 0


# -- moving in (IM-1) ----------------------------------------------------------------------
def add_moving_options(p: argparse.ArgumentParser) -> None:
    """Options of `import keepassxc|bitwarden|1password FILE` (added to the `import` parser)."""
    p.add_argument("--dry-run", action="store_true", help="with a password manager's export: show what would be created")
    p.add_argument("--kdbx-password-stdin", action="store_true", help="read the KDBX password from standard input")
    p.add_argument("--keyfile", help="a KDBX key file")
    p.add_argument(
        "--kdbx-no-password",
        action="store_true",
        help="the KDBX database has no password (a key file only, or an empty password): do not ask for one",
    )


def _load(source: str, path: Path, args: argparse.Namespace) -> Loaded:
    from engine.moving import bitwarden, keepassxc, onepassword

    suffix = path.suffix.lower()
    if source == "keepassxc" and suffix == ".kdbx":
        if not path.is_file():
            raise MemoriesError("not_found", f"{path} is not a file.")
        keyfile = Path(args.keyfile) if args.keyfile else None
        if keyfile is not None and not keyfile.is_file():
            raise MemoriesError("not_found", f"The key file {keyfile} is not a file.")
        if args.kdbx_no_password and args.kdbx_password_stdin:
            raise UsageError("--kdbx-no-password and --kdbx-password-stdin do not go together")
        password: str | None = None
        if args.kdbx_no_password:
            password = ""
        elif args.kdbx_password_stdin or keyfile is None or sys.stdin.isatty():
            password = _kdbx_password(args.kdbx_password_stdin, keyfile is not None)
        return keepassxc.parse_kdbx(path, password, keyfile)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MemoriesError("not_found", f"Cannot read {path} ({exc.__class__.__name__}).") from None
    if source == "keepassxc":
        if suffix == ".xml":
            return keepassxc.parse_keepass_xml(data)
        if suffix == ".csv":
            return keepassxc.parse_keepassxc_csv(data)
        raise UsageError("import keepassxc reads FILE.kdbx, FILE.xml or FILE.csv")
    if source == "bitwarden":
        return bitwarden.parse_bitwarden(data)
    if suffix == ".1pux":
        return onepassword.parse_1pux(data)
    if suffix == ".csv":
        return onepassword.parse_1password_csv(data)
    raise UsageError("import 1password reads FILE.1pux or FILE.csv")


def _kdbx_password(from_stdin: bool, has_keyfile: bool) -> str:
    """The KDBX password; an empty answer means "none" (a key-file-only or empty-password database)."""
    if from_stdin:
        line = sys.stdin.readline()
        value = line[:-1] if line.endswith("\n") else line
        return value[:-1] if value.endswith("\r") else value
    if not sys.stdin.isatty():
        raise UsageError("no terminal to ask at; use --kdbx-password-stdin, or --kdbx-no-password for a database without one")
    import getpass

    hint = " (Enter if the key file is all it needs)" if has_keyfile else " (Enter if it has none)"
    return getpass.getpass(f"KDBX password{hint}: ")


def cmd_import_moving(ctx: Context, args: argparse.Namespace, source: str, path: Path) -> int:
    """Parse and check every entry first; then batches, each one transaction in the engine."""

    from engine.moving.entry import check_all, wire, wire_size

    loaded = _load(source, path, args)
    logins, skipped = check_all(loaded)
    items = [wire(login, where) for login, where in logins]
    warnings = loaded.warnings
    if not ctx.json_output:
        for line in skipped:
            print(f"skipped: {one_line(line)}", file=sys.stderr)
        for line in warnings:
            print(f"warning: {one_line(line)}", file=sys.stderr)
    created = would = present = 0
    ids: list[str] = []
    batch: list[dict[str, Any]] = []
    size = 0
    batches: list[list[dict[str, Any]]] = []
    for item in items:
        encoded = wire_size(item)
        if batch and (len(batch) >= BATCH_ENTRIES or size + encoded > BATCH_BYTES):
            batches.append(batch)
            batch, size = [], 0
        batch.append(item)
        size += encoded
    if batch:
        batches.append(batch)
    show_progress = sys.stderr.isatty() and not ctx.json_output and not args.dry_run
    for number, chunk in enumerate(batches):
        try:
            request: dict[str, Any] = {"op": "login_import_batch", "entries": chunk, "dry_run": args.dry_run}
            hints = {"more": True} if number < len(batches) - 1 else {}  # the engine indexes once the last batch is in
            result = ctx.request_with_hints(request, hints, timeout=600)
        except MemoriesError as exc:
            done = f"{created} login(s) were committed by earlier batches" if created else "nothing was imported"
            raise MemoriesError(
                exc.code,
                f"{exc.message} The import stopped at batch {number + 1} of {len(batches)}; {done}. "
                "Running the same import again is safe: logins already in the vault are skipped.",
            ) from None
        created += result["created"]
        would += result["would_create"]
        present += result["skipped"]
        ids += result["ids"]
        if show_progress:
            print(f"\rimported {created + present}/{len(items)}", end="", file=sys.stderr, flush=True)
    if show_progress:
        print(file=sys.stderr)
    summary: dict[str, Any] = {
        "source": loaded.source,
        "dry_run": bool(args.dry_run),
        "entries": len(items),
        "created": created,
        "would_create": would,
        "already_present": present,
        "skipped": skipped,
        "warnings": warnings,
        "ids": ids,
    }
    if args.dry_run:
        titles = "\n".join(
            f"  {one_line(item['title'])}" + ("  (protected note)" if "note" in item else "") for item in items[:50]
        )
        more = f"\n  … and {len(items) - 50} more" if len(items) > 50 else ""
        text = f"would create {would} login(s), {present} already present, {len(skipped)} skipped\n{titles}{more}" + _warned(
            warnings, block=True
        )
    else:
        text = f"imported {created} login(s) from {loaded.source}, {present} already present, {len(skipped)} skipped"
        text += _warned(warnings)
        notes = sum(1 for item in items if "note" in item)
        if notes:
            text += f"\n{notes} of the entries are secure notes, kept as protected notes (`memories copy ID` copies one)"
    ctx.emit(summary, text.rstrip())
    return 0


def _warned(warnings: list[str], *, block: bool = False) -> str:
    """The summary's list of entries imported with a warning (IM-2): each by name, with why."""
    if not warnings:
        return ""
    head = f"\n{len(warnings)} warning(s):" if block else f", {len(warnings)} imported with a warning:"
    return head + "\n" + "\n".join(f"  {one_line(w)}" for w in warnings)
