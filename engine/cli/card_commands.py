"""card new/show/edit/link/unlink/connections/recall, graph, protected new, otp, secret protect, copy.

Secrets are read from stdin only (``--token-stdin``, ``--otp-stdin``, ``--value-stdin``;
from a terminal, a prompt that does not echo). ``--totp URI``/``--hotp URI`` are refused
with a sentence that names ``--otp-stdin``: an argument is visible in ``ps`` and kept in
shell history (issue 27). The copy command is the only path on which a secret crosses IPC, and it goes straight to
the clipboard, never to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.cli.content_options import add_content_options, body_from, meta_pairs
from engine.cli.context import Context, UsageError
from engine.terminal_text import one_line

CARD_TYPES = ("knowledge", "brain", "persona")


def _stdin_value(prompt: str = "Value (not shown): ") -> str:
    if sys.stdin.isatty():  # typed, not piped: ask without echo instead of waiting for Ctrl-D
        import getpass

        data = getpass.getpass(prompt)
    else:
        data = sys.stdin.read()
    value = data[:-1] if data.endswith("\n") else data
    value = value[:-1] if value.endswith("\r") else value
    if not value:
        raise UsageError("standard input was empty")
    return value


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    card = sub.add_parser("card", parents=[common], help="typed cards and links")
    csub = card.add_subparsers(dest="card_command", metavar="SUBCOMMAND", parser_class=type(card))

    p = csub.add_parser("new", parents=[common], help="create a knowledge, brain or persona card")
    p.add_argument("--type", required=True, choices=CARD_TYPES, help="the kind of card")
    add_content_options(p, meta_help="typed metadata, repeatable")
    p.set_defaults(func=cmd_new)

    p = csub.add_parser("show", parents=[common], help="show a card (credential references stay opaque)")
    p.add_argument("id", help="the card's ID or a unique prefix of it")
    p.set_defaults(func=cmd_show)

    p = csub.add_parser("edit", parents=[common], help="write a new revision of a card")
    p.add_argument("id", help="the card's ID or a unique prefix of it")
    add_content_options(p, meta_help="typed metadata, repeatable")
    p.add_argument("--base", help="the revision you are editing (default: the current head)")
    p.set_defaults(func=cmd_edit)

    p = csub.add_parser("link", parents=[common], help="add a directed link SRC -> DST")
    p.add_argument("src", help="the ID the link starts from")
    p.add_argument("dst", help="the ID the link points to")
    p.add_argument("--rel", default="", help="relation label, e.g. depends_on")
    p.add_argument("--confidence", type=float, default=1.0, help="in (0, 1], default 1")
    p.add_argument("--valid-till", help="ISO date or date-time after which the link is ignored")
    p.set_defaults(func=cmd_link)

    p = csub.add_parser("unlink", parents=[common], help="remove links SRC -> DST (optionally one relation)")
    p.add_argument("src", help="the ID the link starts from")
    p.add_argument("dst", help="the ID the link points to")
    p.add_argument("--rel", help="only links with this relation label")
    p.set_defaults(func=cmd_unlink)

    p = csub.add_parser("connections", parents=[common], help="neighbours of a card or memory")
    p.add_argument("id", help="the card's or memory's ID or a unique prefix of it")
    p.add_argument("--depth", type=int, default=1, help="how many links away to go (default 1)")
    p.add_argument("--direction", choices=("out", "in", "both"), default="both", help="follow links out, in or both")
    p.add_argument("--rel", help="only links with this relation label")
    p.set_defaults(func=cmd_connections)

    p = csub.add_parser("recall", parents=[common], help="spreading activation from one or more nodes")
    p.add_argument("ids", nargs="+", help="the IDs to start from")
    p.add_argument("--hops", type=int, default=2, help="how many links activation spreads (default 2)")
    p.add_argument("--decay", type=float, default=0.5, help="the share of activation kept per hop (default 0.5)")
    p.add_argument("--limit", type=int, default=20, help="at most this many results (default 20)")
    p.set_defaults(func=cmd_recall)

    p = sub.add_parser("graph", parents=[common], help="the link graph, or one node's neighbourhood")
    p.add_argument("id", nargs="?", help="show only this node's neighbourhood (default: the whole graph)")
    p.add_argument("--depth", type=int, default=2, help="with an ID: how many links away (default 2)")
    p.add_argument("--limit", type=int, default=10_000, help="at most this many nodes (default 10000)")
    p.set_defaults(func=cmd_graph)

    prot = sub.add_parser("protected", parents=[common], help="protected cards (account, token, TOTP/HOTP)")
    psub = prot.add_subparsers(dest="protected_command", metavar="SUBCOMMAND", parser_class=type(prot))
    p = psub.add_parser("new", parents=[common], help="create a protected card and its credential together")
    p.add_argument("--title", required=True, help="the card's title")
    p.add_argument("--account", help="the account name or login")
    p.add_argument("--env", help="environment variable name the token is used as")
    p.add_argument("--url", help="the service's address")
    p.add_argument("--token-stdin", action="store_true", help="read the token from standard input")
    # The old forms, kept only to answer with what to use instead (the seed would sit in argv).
    p.add_argument("--totp", metavar="URI", help=argparse.SUPPRESS)
    p.add_argument("--hotp", metavar="URI", help=argparse.SUPPRESS)
    p.add_argument(
        "--otp-stdin",
        action="store_true",
        help="read an otpauth://totp/ or otpauth://hotp/ URI from standard input (a hidden prompt in a terminal)",
    )
    p.add_argument("--body", help="non-secret notes")
    p.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="a tag (repeatable)")
    p.set_defaults(func=cmd_protected_new)

    p = sub.add_parser("otp", parents=[common], help="print the current TOTP / next HOTP code of a card")
    p.add_argument("card", help="the protected card's ID or a unique prefix of it")
    p.add_argument("--at", type=int, metavar="UNIX_SECONDS", help="TOTP only: the code at another moment")
    p.set_defaults(func=cmd_otp)

    secret = sub.add_parser("secret", parents=[common], help="secret references in memories and cards")
    ssub = secret.add_subparsers(dest="secret_command", metavar="SUBCOMMAND", parser_class=type(secret))
    p = ssub.add_parser("protect", parents=[common], help="move a value from the body into a credential")
    p.add_argument("id", help="the memory's or card's ID or a unique prefix of it")
    p.add_argument("--label", required=True, help="the name the value is referred to by in the body")
    p.add_argument("--value-stdin", action="store_true", required=True, help="read the value from standard input")
    p.set_defaults(func=cmd_secret_protect)

    lc = sub.add_parser("local-config", parents=[common], help="this client's version and directories (device-only)")
    lsub = lc.add_subparsers(dest="local_config_command", metavar="SUBCOMMAND", parser_class=type(lc))
    p = lsub.add_parser("record", parents=[common], help="record the client version and directories")
    p.set_defaults(func=cmd_local_config_record)
    p = lsub.add_parser("show", parents=[common], help="show what was recorded")
    p.set_defaults(func=cmd_local_config_show)

    p = sub.add_parser("copy", parents=[common], help="copy a secret to the clipboard (needs sudo)")
    p.add_argument("ref", help="secret label (or ID:LABEL), protected card, or credential")
    p.add_argument("--clear-after", type=int, help="seconds before the clipboard is cleared (default 30)")
    p.set_defaults(func=cmd_copy)


# -- cards -------------------------------------------------------------------------------
def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    if not args.title:
        raise UsageError("card new needs --title")
    body = {
        "op": "card_write",
        "type": args.type,
        "title": args.title,
        "body": body_from(args) or "",
        "tags": args.tags or [],
        "meta": meta_pairs(args.meta) or {},
    }
    result = ctx.request(body)
    ctx.emit(result, f"{result['short_id']}  {args.type}  (revision {result['short_revision']})")
    return 0


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "card_read", "id": args.id})
    lines = [f"id:       {result['short_id']}  ({result['kind']})", f"revision: {result['short_revision']}"]
    lines.append(f"title:    {one_line(result['title'])}")
    if result["tags"]:
        lines.append(f"tags:     {', '.join(one_line(t) for t in result['tags'])}")
    lines.extend(f"{one_line(k)}: {one_line(v)}" for k, v in sorted(result["meta"].items()))
    if result.get("protected"):
        prot = result["protected"]
        lines.append(f"protected: {one_line(', '.join(prot['features']))}  credential {one_line(prot['credential'])}")
    lines.extend(f"secret {one_line(label)}: {one_line(ref)}" for label, ref in result["secrets"].items())
    lines.append(f"links:    {result['links']['out']} out, {result['links']['in']} in")
    if result["conflict"]:
        lines.insert(0, f"CONFLICT: {result['heads']} heads")
    ctx.emit(result, "\n".join(lines) + "\n\n" + result["body"])
    return 0


def cmd_edit(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "card_write", "id": args.id}
    for key in ("title", "base"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    text = body_from(args)
    if text is not None:
        body["body"] = text
    if args.tags is not None:
        body["tags"] = args.tags
    meta = meta_pairs(args.meta)
    if meta is not None:
        body["meta"] = meta
    result = ctx.request(body)
    note = "  CONFLICT: the base was stale; both versions are kept" if result["conflict"] else ""
    ctx.emit(result, f"{result['short_id']}  (revision {result['short_revision']}){note}")
    return 0


def cmd_link(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "card_link", "src": args.src, "dst": args.dst, "rel": args.rel}
    body["confidence"] = args.confidence
    if args.valid_till:
        body["valid_till"] = args.valid_till
    result = ctx.request(body)
    rel = f" [{one_line(result['rel'])}]" if result["rel"] else ""
    ctx.emit(result, f"linked {one_line(args.src)} -> {one_line(args.dst)}{rel} (confidence {result['confidence']:g})")
    return 0


def cmd_unlink(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "card_unlink", "src": args.src, "dst": args.dst}
    if args.rel is not None:
        body["rel"] = args.rel
    result = ctx.request(body)
    ctx.emit(result, f"removed {result['unlinked']} link(s)")
    return 0


def _edge_line(edge: dict[str, Any]) -> str:
    rel = f" [{one_line(edge['rel'])}]" if edge["rel"] else ""
    return f"{edge['src_short']} -> {edge['dst_short']}{rel}  {edge['confidence']:g}"


def cmd_connections(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "connections", "id": args.id, "depth": args.depth, "direction": args.direction}
    if args.rel is not None:
        body["rel"] = args.rel
    result = ctx.request(body)
    lines = [f"{n['distance']}  {n['short_id']}  {n['kind']:<9}  {one_line(n['title'])}" for n in result["neighbours"]]
    ctx.emit(result, "\n".join(lines) or "(no connections)")
    return 0


def cmd_recall(ctx: Context, args: argparse.Namespace) -> int:
    body = {"op": "recall_connected", "ids": args.ids, "hops": args.hops, "decay": args.decay, "limit": args.limit}
    result = ctx.request(body)
    lines = [f"{r['activation']:.3f}  {r['short_id']}  {r['kind']:<9}  {one_line(r['title'])}" for r in result["results"]]
    ctx.emit(result, "\n".join(lines) or "(nothing connected)")
    return 0


def cmd_graph(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "graph", "depth": args.depth, "limit": args.limit}
    if args.id:
        body["id"] = args.id
    result = ctx.request(body, timeout=120)
    nodes = [f"{n['short_id']}  {n['kind']:<9}  {one_line(n['title'])}" for n in result["nodes"]]
    edges = [_edge_line(e) for e in result["edges"]]
    text = f"{len(nodes)} nodes, {len(edges)} edges\n" + "\n".join([*nodes, "", *edges])
    ctx.emit(result, text.rstrip())
    return 0


# -- protected cards, otp, secrets, copy --------------------------------------------------
def cmd_protected_new(ctx: Context, args: argparse.Namespace) -> int:
    if args.totp is not None or args.hotp is not None:
        flag = "--totp" if args.totp is not None else "--hotp"
        raise UsageError(
            f"{flag} would put the one-time-password seed on the command line, where other programs (ps) and "
            "shell history can read it; nothing was saved. Give the otpauth:// URI on standard input instead: "
            "memories protected new --title TITLE --otp-stdin < uri.txt (or type it at the hidden prompt)"
        )
    if args.token_stdin and args.otp_stdin:
        raise UsageError("only one of --token-stdin and --otp-stdin can read standard input")
    body: dict[str, Any] = {"op": "protected_card", "title": args.title, "tags": args.tags or []}
    for key in ("account", "env", "url", "body"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    if args.token_stdin:
        body["token"] = _stdin_value("Token (not shown): ")
    if args.otp_stdin:
        uri = _stdin_value("otpauth:// URI (not shown): ").strip()
        body["hotp" if uri.lower().startswith("otpauth://hotp") else "totp"] = uri
    result = ctx.request(body)
    ctx.emit(result, f"{result['short_id']}  protected ({', '.join(result['features'])})")
    return 0


def cmd_otp(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "otp_code", "id": args.card}
    if args.at is not None:
        body["at"] = args.at
    result = ctx.request(body)
    ctx.emit(result, result["code"])
    return 0


def cmd_secret_protect(ctx: Context, args: argparse.Namespace) -> int:
    value = _stdin_value()
    result = ctx.request({"op": "protect_secret", "id": args.id, "label": args.label, "value": value})
    fields = result.get("fields") or {}
    where = ", ".join(f"{one_line(str(name))} {count}" for name, count in fields.items())
    ctx.emit(
        result,
        f"{result['short_id']}: replaced {result['replaced']} occurrence(s) with {{{{secret:{one_line(result['label'])}}}}}"
        + (f" (in {where})" if where else ""),
    )
    return 0


def _clear_seconds(ctx: Context, flag: int | None) -> int:
    """--clear-after, else `[clipboard] clear_seconds` in config.toml (`memories config`), else 30."""
    from engine.settings import read_settings

    if flag is not None:
        if flag < 1:
            raise UsageError("--clear-after must be at least 1 second")
        return flag
    return int(read_settings(ctx.paths.config_file)["clipboard_clear_seconds"])


def cmd_copy(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.clipboard import copy_with_clear, detect

    seconds = _clear_seconds(ctx, args.clear_after)
    detect()  # fail before asking the engine (and auditing) if there is no clipboard
    result = ctx.request({"op": "credential_copy", "ref": args.ref})
    secret = result.pop("secret")
    backend = copy_with_clear(secret, seconds)
    del secret
    # Exactly {"copied": true} (CD-8): the output never describes the value.
    ctx.emit({"copied": True}, f"copied to the clipboard ({backend.name}); cleared in {seconds} s if unchanged")
    return 0


# -- device-only local config (CD-9) -----------------------------------------------------
def cmd_local_config_record(ctx: Context, args: argparse.Namespace) -> int:
    from engine import __version__

    directories = {
        "home": str(ctx.paths.home),
        "config_file": str(ctx.paths.config_file),
        "log_dir": str(ctx.paths.log_dir),
        "socket": str(ctx.paths.socket),
    }
    result = ctx.request({"op": "local_config", "client_version": __version__, "directories": directories})
    ctx.emit(result, "recorded in the device-only vault" + (" (created)" if result["created_vault"] else ""))
    return 0


def cmd_local_config_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "local_config_get"})
    lines = [f"client version: {one_line(result['client_version'])}"]
    lines += [f"{one_line(k)}: {one_line(v)}" for k, v in sorted(result["directories"].items())]
    ctx.emit(result, "\n".join(lines))
    return 0
