"""quarantine [list|show|reapply|discard] and vault forks / vault fork resolve (SY-2, SY-3).

Quarantine holds revisions a sync did not apply (written by a device the newer policy
revoked, under a superseded policy); they are reviewed and re-applied on this device only.
A policy fork is resolved by the Owner's signature over the kept head (docs/sync.md).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from engine.cli.context import Context
from engine.terminal_text import one_line

__all__ = ["register", "register_vault_forks"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    q = sub.add_parser("quarantine", parents=[common], help="review revisions a sync held back")
    qsub = q.add_subparsers(dest="quarantine_command", metavar="COMMAND", parser_class=q.__class__)
    q.set_defaults(func=cmd_list)
    p = qsub.add_parser("list", parents=[common], help="every held-back revision: why, by which device, when")
    p.set_defaults(func=cmd_list)
    p = qsub.add_parser("show", parents=[common], help="one held-back revision with its text (never a secret body)")
    p.add_argument("id", help="the quarantine ID (or a unique prefix) from `memories quarantine list`")
    p.set_defaults(func=cmd_show)
    p = qsub.add_parser("reapply", parents=[common], help="write it again as a new revision of this device (needs sudo)")
    p.add_argument("id", help="the quarantine ID (or a unique prefix) from `memories quarantine list`")
    p.set_defaults(func=cmd_reapply)
    p = qsub.add_parser("discard", parents=[common], help="drop it from the review list (needs sudo)")
    p.add_argument("id", help="the quarantine ID (or a unique prefix) from `memories quarantine list`")
    p.set_defaults(func=cmd_discard)


def register_vault_forks(vsub: Any, common: argparse.ArgumentParser, vault_option: Any) -> None:
    """`vault forks` and `vault fork resolve`, added to the `vault` command by vault_commands."""
    p = vsub.add_parser("forks", parents=[common], help="policy forks a sync found in a vault")
    vault_option(p)
    p.set_defaults(func=cmd_forks)
    fork = vsub.add_parser("fork", parents=[common], help="resolve a policy fork (Owner; needs sudo)")
    fsub = fork.add_subparsers(dest="fork_command", metavar="COMMAND", parser_class=fork.__class__)
    fork.set_defaults(func=cmd_forks)
    p = fsub.add_parser("resolve", parents=[common], help="keep one branch by an Owner signature; starts a new epoch")
    p.add_argument("--keep", required=True, metavar="HEAD", help="the kept branch's head (≥ 8 hex digits, `vault forks`)")
    vault_option(p)
    p.set_defaults(func=cmd_fork_resolve)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def _line(entry: dict[str, Any]) -> str:
    title = one_line(entry["title"]) if entry.get("title") is not None else "(cannot be opened here)"
    return (
        f"{entry['id'][:12]}  {_when(entry['created_ms'])}  {one_line(entry['kind'])}  "
        f"device {entry['author'][:12]}  {one_line(entry['reason'])}  {title}"
    )


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "quarantine_list"})
    entries = result["entries"]
    text = "\n".join(["ID            WRITTEN           KIND  AUTHOR  REASON  TITLE", *map(_line, entries)])
    ctx.emit(result, text if entries else "Nothing is in quarantine.")
    return 0


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "quarantine_show", "id": args.id})
    body = result.get("body")
    shown = body if body is not None else "(no body shown: not readable here, or a secret kind)"
    ctx.emit(result, _line(result) + "\n\n" + shown)
    return 0


def cmd_reapply(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "quarantine_reapply", "id": args.id})
    ctx.emit(result, f"re-applied as revision {result['revision'][:12]} of {result['asset'][:12]}")
    return 0


def cmd_discard(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "quarantine_discard", "id": args.id})
    ctx.emit(result, f"discarded {result['id'][:12]} (it stays in the store, out of the review list)")
    return 0


def cmd_forks(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "vault_forks"}
    if getattr(args, "vault", None):
        body["vault"] = args.vault
    result = ctx.request(body)
    lines = [
        f"fork after policy {f['base_seq']}: ours {f['ours']['head'][:16]} ({f['ours']['policies']} policies), "
        f"theirs {f['theirs']['head'][:16]} ({f['theirs']['policies']} policies)"
        for f in result["forks"]
    ]
    hint = "resolve with `memories vault fork resolve --keep HEAD` (Owner, needs sudo)"
    ctx.emit(result, "\n".join([*lines, hint]) if lines else f"Vault {one_line(result['vault'])} has no policy fork.")
    return 0


def cmd_fork_resolve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "vault_fork_resolve", "keep": args.keep}
    if args.vault:
        body["vault"] = args.vault
    result = ctx.request(body)
    ctx.emit(
        result,
        f"kept {result['kept'][:16]} in {one_line(result['vault'])}; {result['discarded']} policies discarded; "
        f"policy {result['policy_seq']}, epoch {result['epoch']} (later writes use a new key)",
    )
    return 0
