"""vault new, vaults, vault members, vault member add|role|remove, vault transfer, vault rotate (PO-1, PO-2)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "parse_user_id"]

ROLES = ("owner", "admin", "editor", "reader")
_USER_ID = re.compile(r"[0-9a-f]{64}")
INVITE_PREFIX = "memories-invite-v1."  # engine/vault/invite.py; repeated to keep the CLI free of crypto imports


def parse_user_id(text: str) -> str:
    """A user ID is the 64 hex digits of a user public key (`memories whoami` prints it)."""
    value = text.strip().lower()
    if not _USER_ID.fullmatch(value):
        raise UsageError(
            "USER_ID is the 64 hex digits `memories whoami` prints on the member's device (to add a person with their "
            "devices, give their invitation: `memories whoami --invite` there)"
        )
    return value


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("vaults", parents=[common], help="list this device's vaults: role, members, epoch, items")
    p.set_defaults(func=cmd_vaults)

    vault = sub.add_parser("vault", parents=[common], help="create vaults; manage members, roles and keys")
    vsub = vault.add_subparsers(dest="vault_command", metavar="COMMAND", parser_class=vault.__class__)
    vault.set_defaults(func=_usage)

    p = vsub.add_parser("new", parents=[common], help="a new shared vault with its own key; you are its Owner")
    p.add_argument("name", help="1–64 printable characters, unique on this device")
    p.set_defaults(func=cmd_new)

    p = vsub.add_parser("members", parents=[common], help="the members of a vault and their roles")
    _vault_option(p)
    p.set_defaults(func=cmd_members)

    member = vsub.add_parser("member", parents=[common], help="add, re-role or remove a member (needs sudo)")
    msub = member.add_subparsers(dest="member_command", metavar="COMMAND", parser_class=vault.__class__)
    member.set_defaults(func=_usage)
    p = msub.add_parser("add", parents=[common], help="add a person (their invitation) with a role (needs sudo)")
    p.add_argument(
        "user_id",
        metavar="INVITATION|FILE|USER_ID",
        help="the invitation from `memories whoami --invite` on their device (or a file holding it); a bare user ID "
        "adds a member without devices",
    )
    p.add_argument(
        "--role", choices=ROLES, required=True, help="owner, admin, editor or reader (see `memories help` for what each may do)"
    )
    p.add_argument("--yes", action="store_true", help="do not ask; only after checking the full fingerprints")
    _vault_option(p)
    p.set_defaults(func=cmd_member_add)
    p = msub.add_parser("role", parents=[common], help="change a member's role (needs sudo)")
    p.add_argument("user_id", metavar="USER_ID", help="the member's user ID (64 hex, from `memories whoami` on their device)")
    p.add_argument(
        "--role", choices=ROLES, required=True, help="owner, admin, editor or reader (see `memories help` for what each may do)"
    )
    _vault_option(p)
    p.set_defaults(func=cmd_member_role)
    p = msub.add_parser(
        "remove", parents=[common], help="remove a member and their devices; later writes use a new key (needs sudo)"
    )
    p.add_argument("user_id", metavar="USER_ID", help="the member's user ID (64 hex, from `memories whoami` on their device)")
    _vault_option(p)
    p.set_defaults(func=cmd_member_remove)

    p = vsub.add_parser("transfer", parents=[common], help="make a member the Owner; you become Admin (needs sudo)")
    p.add_argument("user_id", metavar="USER_ID", help="the member's user ID (64 hex, from `memories whoami` on their device)")
    _vault_option(p)
    p.set_defaults(func=cmd_transfer)

    p = vsub.add_parser("rotate", parents=[common], help="start a new epoch with a new vault key (Owner; needs sudo)")
    _vault_option(p)
    p.set_defaults(func=cmd_rotate)

    from engine.cli.quarantine_commands import register_vault_forks

    register_vault_forks(vsub, common, _vault_option)


def _vault_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vault", metavar="NAME", help="the vault (default: the default vault)")


def _usage(ctx: Context, args: argparse.Namespace) -> int:
    raise UsageError("vault needs a command: new, members, member add|role|remove, transfer or rotate")


def _with_vault(body: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    if args.vault is not None:
        body["vault"] = args.vault
    return body


def cmd_vaults(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "vaults"})
    lines = []
    for v in result["vaults"]:
        flags = [f for f, on in (("default", v["default"]), ("device-only", v["device_only"])) if on]
        note = f"  ({', '.join(flags)})" if flags else ""
        lines.append(
            f"{one_line(v['name']):<20} {v['short_id']}  {v['role'] or 'not a member':<8} "
            f"members {v['members']}  epoch {v['epoch']}  items {v['assets']}{note}"
        )
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "vault_new", "name": args.name})
    ctx.emit(result, f"vault {one_line(result['name'])} ({result['short_id']}): you are its Owner; use --vault to write to it")
    return 0


def cmd_members(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request(_with_vault({"op": "vault_members"}, args))
    lines = [f"vault {one_line(result['vault'])}  policy {result['policy_seq']}  epoch {result['epoch']}"]
    for m in result["members"]:
        me = "  (you)" if m["me"] else ""
        lines.append(f"{m['user']}  {m['role']:<6}  devices {m['devices']}{me}")
    ctx.emit(result, "\n".join(lines))
    return 0


def _changed(ctx: Context, result: dict[str, Any], what: str) -> None:
    text = f"{what} in vault {one_line(result['vault'])}: policy {result['policy_seq']}, epoch {result['epoch']}"
    if result["new_epoch"]:
        text += "\nlater writes are sealed with the new epoch key; earlier content keeps its old key"
    ctx.emit(result, text)


def _invitation(value: str) -> str | None:
    """The invitation text the argument is or names, or None for a user ID."""
    text = value.strip()
    if text.startswith(INVITE_PREFIX):
        return text
    if _USER_ID.fullmatch(text.lower()) or not Path(text).is_file():
        return None  # a user ID, or parse_user_id says what was expected
    from engine.cli.device_commands import _text_or_file

    return _text_or_file(value, INVITE_PREFIX, 20 * 1024, "invitation")


def _member_add_invite(ctx: Context, args: argparse.Namespace, invite: str) -> int:
    from engine.cli.device_commands import grouped

    body = _with_vault({"op": "vault_member_add", "invite": invite, "role": args.role}, args)
    if not args.yes:
        if ctx.json_output or not sys.stdin.isatty():
            raise MemoriesError("confirmation_required")
        shown = ctx.request({**body, "check": True})
        print(f"person:            {one_line(shown['name'])}", file=sys.stderr)
        print(f"user fingerprint:  {grouped(shown['user_fingerprint'])}", file=sys.stderr)
        for device in shown["devices"]:
            print(f"device:            {grouped(device['fingerprint'])}", file=sys.stderr)
        answer = input(f"Add {one_line(shown['name'])} as {args.role}, user fingerprint {shown['user_fingerprint']}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise UsageError("not added; nothing was changed")
    result = ctx.request(body, timeout=120)
    lines = [
        f"added {one_line(result['name'])} as {args.role} in vault {one_line(result['vault'])}: "
        f"policy {result['policy_seq']}, epoch {result['epoch']}",
        f"user fingerprint:  {grouped(result['user_fingerprint'])}",
    ]
    lines += [f"device:            {grouped(d['fingerprint'])}" for d in result["devices"]]
    lines += [
        f"your fingerprint:  {grouped(result['owner_fingerprint'])} (the one their invitation pins)",
        "Their devices receive the vault on their next sync with a device of this vault (a sync token for their",
        "device from `memories sync token new` and `memories serve`, or both on a relay room).",
    ]
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_member_add(ctx: Context, args: argparse.Namespace) -> int:
    invite = _invitation(args.user_id)
    if invite is not None:
        return _member_add_invite(ctx, args, invite)
    user = parse_user_id(args.user_id)
    result = ctx.request(_with_vault({"op": "vault_member_add", "user": user, "role": args.role}, args))
    _changed(ctx, result, f"added {user[:12]}… as {args.role}")
    return 0


def cmd_member_role(ctx: Context, args: argparse.Namespace) -> int:
    user = parse_user_id(args.user_id)
    result = ctx.request(_with_vault({"op": "vault_member_role", "user": user, "role": args.role}, args))
    _changed(ctx, result, f"{user[:12]}… is now {args.role}")
    return 0


def cmd_member_remove(ctx: Context, args: argparse.Namespace) -> int:
    user = parse_user_id(args.user_id)
    result = ctx.request(_with_vault({"op": "vault_member_remove", "user": user}, args))
    _changed(ctx, result, f"removed {user[:12]}… and revoked their devices")
    return 0


def cmd_transfer(ctx: Context, args: argparse.Namespace) -> int:
    user = parse_user_id(args.user_id)
    result = ctx.request(_with_vault({"op": "vault_transfer", "user": user}, args))
    _changed(ctx, result, f"{user[:12]}… is now the Owner and you are an Admin")
    return 0


def cmd_rotate(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request(_with_vault({"op": "vault_rotate"}, args))
    _changed(ctx, result, "rotated the vault key")
    return 0
