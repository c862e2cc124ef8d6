"""``memories mcp`` (serve, grant, grants, revoke, config) and ``memories inject`` (AG-1, AG-2, AG-4).

Lean at import time: the MCP SDK is imported only when a server actually starts, and
``inject`` imports only the stdlib-only ``engine.skills.inject``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError

TOKEN_ENV = "MEMORIES_MCP_TOKEN"  # noqa: S105  (a variable name, not a secret)
_SCOPES = ("read", "write", "read_write", "read_write_delete", "allow_all")
_CLIENTS = ("claude-code", "codex", "opencode")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve MCP to agents (stdio, or --http on 127.0.0.1); manage grants",
        description=f"Without an action: serve MCP over stdio with the grant token from ${TOKEN_ENV}.",
    )
    p.add_argument("--http", action="store_true", help="serve Streamable HTTP on 127.0.0.1 instead of stdio")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (0 picks a free one; default 8765)")
    p.add_argument("--agent", metavar="NAME", help="use the token `memories agent connect` stored for this agent")
    p.set_defaults(func=cmd_serve)
    actions = p.add_subparsers(dest="mcp_command", metavar="ACTION", parser_class=type(p))

    a = actions.add_parser("grant", parents=[common], help="create a grant (needs `memories sudo`); prints the token once")
    a.add_argument("--name", required=True, help="a label for the agent, e.g. claude")
    a.add_argument("--scope", required=True, choices=_SCOPES, help="what the agent may do")
    a.add_argument("--vault", action="append", dest="vaults", metavar="NAME", help="repeatable (default: default)")
    a.add_argument("--transcripts", action="store_true", help="let the agent read imported agent transcripts")
    a.set_defaults(func=cmd_grant)

    a = actions.add_parser("grants", parents=[common], help="list grants (needs `memories sudo`)")
    a.add_argument("--all", action="store_true", help="include revoked grants")
    a.set_defaults(func=cmd_grants)

    a = actions.add_parser("revoke", parents=[common], help="revoke a grant (needs `memories sudo`)")
    a.add_argument("name", help="the grant's name (see `memories mcp grants`)")
    a.set_defaults(func=cmd_revoke)

    a = actions.add_parser("config", parents=[common], help="print the config snippet for an agent client")
    a.add_argument("--client", required=True, choices=_CLIENTS, help="the agent client to configure")
    a.add_argument("--http", action="store_true", dest="config_http", help="connect over HTTP instead of stdio")
    a.add_argument("--port", type=int, default=8765, dest="config_port", help="with --http: the port (default 8765)")
    a.set_defaults(func=cmd_config)

    p = sub.add_parser("inject", parents=[common], help="install the Memories SKILL.md for agent clients")
    p.add_argument("--client", required=True, choices=(*_CLIENTS, "all"), help="the agent client, or all")
    p.add_argument("--scope", choices=("user", "project"), default="user", help="for your user (default) or one project")
    p.add_argument("--dir", help="project directory for --scope project (default: the current directory)")
    p.add_argument("--force", action="store_true", help="replace a SKILL.md whose content differs")
    p.set_defaults(func=cmd_inject)


# -- serving ------------------------------------------------------------------------------
def _token() -> str:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise MemoriesError("unauthorized", f"Set {TOKEN_ENV} to a grant token (`memories mcp grant`).")
    return token


def _agent_token(ctx: Context, name: str) -> str:
    from pathlib import Path

    from engine.agents.connect import load_token, reconnect_command

    home = Path(ctx.paths.home)
    token = load_token(home, name)
    if not token:
        raise MemoriesError(
            "unauthorized",
            f"No token is stored for agent {name} in this data home (or the OS keyring is out of reach); "
            f"run `{reconnect_command(home, name)}`.",
        )
    return token


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    early = None
    if not args.http:
        # AG-11: answer `initialize` first, before the token lookup and the SDK's imports
        # (seconds on a busy machine; a client waits only so long). Stdlib only.
        from engine.mcp_handshake import answer_initialize

        early = answer_initialize()
    args.early_init = early
    if args.agent:
        token = _agent_token(ctx, args.agent)
        try:
            return _serve(ctx, args, token)
        except MemoriesError as exc:
            if exc.code != "unauthorized":
                raise
            from pathlib import Path

            from engine.agents.connect import reconnect_command

            fix = reconnect_command(Path(ctx.paths.home), args.agent)
            raise MemoriesError(
                "unauthorized", f"The grant of agent {args.agent} is revoked or unknown here; run `{fix}`."
            ) from None
    return _serve(ctx, args, _token())


def _serve(ctx: Context, args: argparse.Namespace, token: str) -> int:
    if args.http:
        if not 0 <= args.port <= 65535:
            raise UsageError("--port must be 0..65535")
        from engine.mcp.http import serve_http  # the SDK, Starlette and uvicorn load only here

        return serve_http(ctx.paths.socket, token, args.port)
    from engine.mcp.server import serve_stdio

    return serve_stdio(ctx.paths.socket, token, getattr(args, "early_init", None))


# -- grants -------------------------------------------------------------------------------
def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "never"


def cmd_grant(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "mcp_grant", "name": args.name, "scope": args.scope}
    if args.vaults:
        body["vaults"] = args.vaults
    if args.transcripts:
        body["transcripts"] = True
    result = ctx.request(body)
    text = (
        f"grant {result['name']} ({result['scope']}, vaults: {', '.join(result['vaults'])})\n"
        f"token (shown once, store it now): {result['token']}\n"
        f"use: export {TOKEN_ENV}=<token>; then `memories mcp config --client ...`"
    )
    ctx.emit(result, text)
    return 0


def cmd_grants(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "mcp_grants", "include_revoked": args.all})
    lines = []
    for item in result["grants"]:
        status = "" if item["active"] else f"  revoked {_when(item['revoked_ms'])}"
        lines.append(
            f"{item['name']:<16} {item['scope']:<18} {item['hint']}  created {_when(item['created_ms'])}"
            f"  last used {_when(item['last_used_ms'])}  vaults {','.join(item['vaults'])}{status}"
        )
    ctx.emit(result, "\n".join(lines) or "(no grants)")
    return 0


def cmd_revoke(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "mcp_revoke", "name": args.name})
    ctx.emit(result, f"revoked {result['name']}")
    return 0


def cmd_config(ctx: Context, args: argparse.Namespace) -> int:
    import sys

    from engine.mcp.clients import CONFIG_FILES, config_snippet

    home = getattr(args, "home", None)
    url = f"http://127.0.0.1:{args.config_port}/mcp" if args.config_http else None
    text = config_snippet(args.client, home=str(ctx.paths.home) if home else None, url=url)
    if not ctx.json_output:
        print(f"# add to {CONFIG_FILES[args.client]}; the token comes from $MEMORIES_MCP_TOKEN", file=sys.stderr)
    ctx.emit({"client": args.client, "file": CONFIG_FILES[args.client], "config": text}, text.rstrip("\n"))
    return 0


# -- inject -------------------------------------------------------------------------------
def cmd_inject(ctx: Context, args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.skills.inject import CLIENTS, inject

    clients = list(CLIENTS) if args.client == "all" else [args.client]
    project = Path(args.dir).resolve() if args.dir else None
    results = inject(clients, args.scope, force=args.force, project=project)
    lines = [f"{r['action']:<9} {r['client']:<11} {r['path']}" for r in results]
    ctx.emit({"installed": results}, "\n".join(lines))
    return 0
