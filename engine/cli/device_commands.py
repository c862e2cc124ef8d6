"""whoami, devices, device request|approve|join|revoke: a user's devices join and leave (ID-1..ID-5)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.cli.context import Context, UsageError
from engine.cli.password import read_password
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "grouped"]

# The text forms (engine/vault/joining.py); repeated here so the CLI stays free of crypto imports.
REQUEST_PREFIX = "memories-join-request-v1."
APPROVAL_PREFIX = "memories-join-approval-v1."
_MAX_REQUEST_FILE = 8 * 1024
_MAX_APPROVAL_FILE = 64 * 1024 * 1024 + 1024


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("whoami", parents=[common], help="this user's ID and this device's ID and fingerprint")
    p.add_argument(
        "--invite",
        action="store_true",
        help="print an invitation for another person's vault (needs sudo and --owner): send it to its Owner",
    )
    p.add_argument(
        "--owner",
        metavar="FINGERPRINT",
        help="with --invite: the full user fingerprint `memories whoami` shows on the inviting Owner's device",
    )
    p.add_argument("--name", help="with --invite: the name the Owner sees (default: this device's name)")
    p.add_argument("--hours", type=int, default=24, help="with --invite: how long the invitation is valid (1–168, default 24)")
    p.add_argument("--output", "-o", "--out", dest="out", metavar="FILE", help="with --invite: also write it to FILE (0600)")
    p.set_defaults(func=cmd_whoami)

    p = sub.add_parser("devices", parents=[common], help="the devices of the default vault: name, fingerprint, added, last seen")
    p.set_defaults(func=cmd_devices)

    device = sub.add_parser("device", parents=[common], help="add a device of yours (request, approve, join) or revoke one")
    dsub = device.add_subparsers(dest="device_command", metavar="ACTION", parser_class=type(device))

    dp = dsub.add_parser("request", parents=[common], help="on the new device (an empty home): make a join request")
    dp.add_argument(
        "--approver", required=True, metavar="DEVICE_ID", help="the device ID `memories whoami` shows on the approving device"
    )
    dp.add_argument("--name", help="this device's name (default: the host name)")
    dp.add_argument("--output", "-o", "--out", dest="out", metavar="FILE", help="also write the request to FILE (0600)")
    dp.add_argument("--password-stdin", action="store_true", help="read the new vault password from standard input")
    dp.set_defaults(func=cmd_request)

    dp = dsub.add_parser("approve", parents=[common], help="on a trusted device (needs sudo): approve a join request")
    dp.add_argument("request", metavar="REQUEST|FILE", help="the request text, or a file holding it")
    dp.add_argument("--yes", action="store_true", help="do not ask; only after checking the full fingerprint")
    dp.add_argument("--output", "-o", "--out", dest="out", metavar="FILE", help="also write the approval to FILE (0600)")
    dp.add_argument("--ticket", metavar="TICKET", help="with a [[centers]] entry: the Center's device ticket for this device")
    dp.set_defaults(func=cmd_approve)

    dp = dsub.add_parser("join", parents=[common], help="on the new device: join with the approval")
    dp.add_argument("approval", metavar="APPROVAL|FILE", help="the approval text, or a file holding it")
    dp.add_argument("--password-stdin", action="store_true", help="read the password chosen at `device request` from stdin")
    dp.set_defaults(func=cmd_join)

    dp = dsub.add_parser("revoke", parents=[common], help="revoke a device (Owner, needs sudo); starts a new epoch")
    dp.add_argument("device", metavar="NAME|FINGERPRINT", help="a device name, or at least 8 hex digits of its fingerprint or ID")
    dp.set_defaults(func=cmd_revoke)

    device.set_defaults(func=lambda ctx, args: (device.print_help(), 2)[1])


def grouped(hex_text: str) -> str:
    """A full fingerprint in groups of four hex digits, for reading aloud (ID-4: never shortened)."""
    return " ".join(hex_text[i : i + 4] for i in range(0, len(hex_text), 4))


def _time(ms: int | None, none: str) -> str:
    if ms is None:
        return none
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def _text_or_file(value: str, prefix: str, limit: int, what: str) -> str:
    """The argument itself if it is the text form, else the text in the file it names."""
    if value.strip().startswith(prefix):
        return value.strip()
    path = Path(value)
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise MemoriesError("invalid_input", f"The {what} is neither a `{prefix}` text nor a file that exists.") from None
    except OSError:
        raise MemoriesError("io_error", f"The {what} file could not be read.") from None
    if len(data) > limit:
        raise MemoriesError("invalid_input", f"The {what} file is larger than any {what}.")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise MemoriesError("invalid_input", f"The {what} file does not hold a {what} text.") from None


def _write_out(path_text: str, text: str) -> None:
    """Write ``text`` to a new 0600 file (replacing an older one of ours atomically)."""
    path = Path(path_text)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (text + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise MemoriesError("io_error", f"Could not write {one_line(path_text)}.") from None


def cmd_whoami(ctx: Context, args: argparse.Namespace) -> int:
    if args.invite:
        return _invite(ctx, args)
    if args.owner is not None or args.out is not None:
        raise UsageError("--owner and --output go with --invite")
    result = ctx.request({"op": "whoami"})
    text = "\n".join(
        [
            f"user ID:            {result['user_id']}",
            f"user fingerprint:   {grouped(result['user_fingerprint'])}",
            f"device name:        {one_line(result['device_name'])}",
            f"device ID:          {result['device_id']}",
            f"device fingerprint: {grouped(result['device_fingerprint'])}",
            "(give the device ID to `memories device request --approver` on a new device;",
            " give the user fingerprint to a person who invites you with `memories whoami --invite --owner`)",
        ]
    )
    ctx.emit(result, text)
    return 0


def _invite(ctx: Context, args: argparse.Namespace) -> int:
    """PO-3: an invitation for another person's vault, pinning that Owner's full fingerprint."""
    if args.owner is None:
        raise UsageError("--invite needs --owner FINGERPRINT: the user fingerprint `memories whoami` shows on the Owner's device")
    body: dict[str, Any] = {"op": "invite_new", "owner": args.owner, "hours": args.hours}
    if args.name is not None:
        body["name"] = args.name
    result = ctx.request(body)
    if args.out:
        _write_out(args.out, result["invite"])
    lines = [
        result["invite"],
        "",
        f"your user fingerprint:  {grouped(result['user_fingerprint'])}",
        f"for the Owner:          {grouped(result['owner_fingerprint'])}",
        f"expires:                {_time(result['expires_ms'], '')}",
    ]
    for device in result["devices"]:
        lines.append(f"device {one_line(device['name'] or '(unnamed)')}: {grouped(device['fingerprint'])}")
    lines += [
        "Send the invitation to the Owner; they run `memories vault member add INVITATION --role ROLE` and must see",
        "these fingerprints. Then sync with them: their vault arrives here (only from that Owner, until it expires).",
    ]
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_devices(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "devices"})
    lines = []
    for row in result["devices"]:
        marks = [m for m, on in (("this device", row["this_device"]), ("REVOKED", row["revoked"])) if on]
        name = one_line(row["name"]) if row["name"] else "(unnamed)"
        lines.append(f"{name}{'  [' + ', '.join(marks) + ']' if marks else ''}")
        lines.append(f"  fingerprint {grouped(row['fingerprint'])}")
        lines.append(f"  user {row['user_id'][:12] + '…' if row['user_id'] else '(unknown)'}")
        lines.append(
            f"  added {_time(row['added_ms'], 'with the vault')}, last synced {_time(row['last_seen_ms'], 'never here')}, "
            f"last write {_time(row.get('last_write_ms'), 'none')}"
        )
    lines.append(f"(policy {result['policy_seq']}, epoch {result['epoch']})")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_request(ctx: Context, args: argparse.Namespace) -> int:
    if ctx.paths.store.exists():
        raise MemoriesError("already_initialized", "This data home already holds a vault; a new device needs an empty home.")
    password = read_password(args.password_stdin, confirm=True, prompt="New password for this device's vault: ")
    ctx.ensure_engine()
    body: dict[str, Any] = {"op": "device_request", "approver": args.approver, "password": password}
    if args.name is not None:
        body["name"] = args.name
    result = ctx.request(body, timeout=120)
    if args.out:
        _write_out(args.out, result["request"])
    text = "\n".join(
        [
            result["request"],
            "",
            f"device name:        {one_line(result['name'])}",
            f"device fingerprint: {grouped(result['fingerprint'])}",
            f"expires:            {_time(result['expires_ms'], '')}",
            "On the approving device run `memories sudo` and `memories device approve REQUEST` and check that it",
            "shows this fingerprint; then run `memories device join APPROVAL` here.",
        ]
    )
    ctx.emit(result, text)
    return 0


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    text = _text_or_file(args.request, REQUEST_PREFIX, _MAX_REQUEST_FILE, "request")
    shown = ctx.request({"op": "device_request_show", "request": text})
    if not args.yes:
        if ctx.json_output or not sys.stdin.isatty():
            raise MemoriesError("confirmation_required")
        print(f"device name:        {one_line(shown['name'])}", file=sys.stderr)
        print(f"device fingerprint: {grouped(shown['fingerprint'])}", file=sys.stderr)
        print(f"request expires:    {_time(shown['expires_ms'], '')}", file=sys.stderr)
        answer = input(f"Approve {one_line(shown['name'])}, fingerprint {shown['fingerprint']}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise UsageError("not approved; nothing was changed")
    body: dict[str, Any] = {"op": "device_approve", "request": text}
    if args.ticket:
        body["ticket"] = args.ticket
    result = ctx.request(body, timeout=120)
    if args.out:
        _write_out(args.out, result["approval"])
    if result.get("warning") and not ctx.json_output:
        print(f"warning: {result['warning']}", file=sys.stderr)
    lines = [
        result["approval"],
        "",
        f"Approved {one_line(result['name'])} ({grouped(result['fingerprint'])}) in {result['vaults']} vault(s).",
        "Run `memories device join APPROVAL` on the new device. This approval is shown only once; if it is lost,",
        "make a new request there.",
    ]
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_join(ctx: Context, args: argparse.Namespace) -> int:
    if ctx.paths.store.exists():
        raise MemoriesError("already_initialized")
    text = _text_or_file(args.approval, APPROVAL_PREFIX, _MAX_APPROVAL_FILE, "approval")
    password = read_password(args.password_stdin, prompt="Password chosen at `device request`: ")
    ctx.ensure_engine()
    result = ctx.request({"op": "device_join", "approval": text, "password": password}, timeout=120)
    ctx.emit(
        result,
        f"Joined as {one_line(result['name'])} ({grouped(result['fingerprint'])}); {result['vaults']} vault(s), unlocked.\n"
        "The vaults' notes are not here yet: they arrive with sync. On the approving device run\n"
        "`memories sudo && memories sync token new --device NAME` and `memories serve`; then here\n"
        "`MEMORIES_SYNC_TOKEN=… memories sync http://HOST:7700` (or `memories cloud sync`).",
    )
    return 0


def cmd_revoke(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "device_revoke", "device": args.device}, timeout=120)
    name = one_line(result["name"]) if result["name"] else "(unnamed)"
    ctx.emit(
        result,
        f"Revoked {name} ({grouped(result['fingerprint'])}) in {result['vaults']} vault(s); new epoch {result['epoch']}.",
    )
    return 0
