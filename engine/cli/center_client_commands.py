"""The daemon side of ``memories center`` (CT-1): ``ticket apply`` and ``ticket list``.

``ticket apply`` sends the ticket to the engine, which verifies it against the key pinned in
`[[centers]]` and makes a local MCP grant bound to it (needs ``memories sudo``); the grant's
token is printed once. (``center info URL``, which prints the key to pin, is the server's
module's: engine/cli/center_commands.py.)
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from engine.cli.context import Context

TOKEN_ENV = "MEMORIES_MCP_TOKEN"  # noqa: S105  (a variable name, not a secret)


def add_actions(actions: Any, common: argparse.ArgumentParser) -> None:
    """Adds ``ticket`` under ``memories center``."""
    t = actions.add_parser("ticket", parents=[common], help="Center tickets on this device: apply, list")
    tsub = t.add_subparsers(dest="center_ticket_command", metavar="ACTION", parser_class=type(t))
    a = tsub.add_parser("apply", parents=[common], help="apply a Center grant ticket (needs sudo); prints the token once")
    a.add_argument("ticket", metavar="TICKET|-", help="the ticket text (mct1.…), or - to read it from standard input")
    a.add_argument("--name", help="the local grant's name (default: the ticket's name)")
    a.add_argument("--transcripts", action="store_true", help="let the agent read imported agent transcripts")
    a.set_defaults(func=cmd_ticket_apply)
    a = tsub.add_parser("list", parents=[common], help="the configured Centers and grants made from tickets (needs sudo)")
    a.set_defaults(func=cmd_ticket_list)
    t.set_defaults(func=lambda ctx, args: (t.print_help(), 2)[1])


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "never"


def cmd_ticket_apply(ctx: Context, args: argparse.Namespace) -> int:
    text = sys.stdin.read().strip() if args.ticket == "-" else args.ticket
    body: dict[str, Any] = {"op": "center_ticket_apply", "ticket": text}
    if args.name:
        body["name"] = args.name
    if args.transcripts:
        body["transcripts"] = True
    result = ctx.request(body, timeout=60)
    vaults = result.get("vaults") or []
    lines = [
        f"grant {result['name']} ({result['scope']}, vaults: {', '.join(vaults) or '(hosted)'}) from {result['center']}",
        f"expires {_when(result['expires_ms'])}; the Center is asked on every use, so a revocation there applies at once",
        f"token (shown once, store it now): {result['token']}",
        f"use: export {TOKEN_ENV}=<token>; then `memories mcp config --client ...`",
    ]
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_ticket_list(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "center_tickets"})
    lines = [f"center {c['url']}  mode {c['mode']}  fingerprint {c['fingerprint']}" for c in result["centers"]]
    for item in result["grants"]:
        state = "active" if item["active"] else "revoked here"
        lines.append(f"  {item['name']:<16} {item['scope']:<18} expires {_when(item['expires_ms'])}  {state}")
    ctx.emit(result, "\n".join(lines) or "(no [[centers]] entry in config.toml)")
    return 0
