"""help [TOPIC|COMMAND], completion bash|zsh|fish, and the hidden __complete used by those scripts."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError
from engine.terminal_text import one_line

COMPLETE_TIMEOUT = 2.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("help", parents=[common], help="explain a topic (ids, conflicts, search, secrets) or a command")
    p.add_argument("topic", nargs="*", help="a topic (ids, conflicts, search, secrets) or a command, e.g. `edit`")
    p.set_defaults(func=cmd_help)

    p = sub.add_parser("completion", parents=[common], help="print the shell completion script for bash, zsh or fish")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")
    p.set_defaults(func=cmd_completion)

    # Hidden (no help=): what the completion scripts call for IDs and tags.
    p = sub.add_parser("__complete", parents=[common])
    p.add_argument("what", choices=("ids", "tags"), help="what to complete")
    p.add_argument("prefix", nargs="?", default="", help="what has been typed so far")
    p.set_defaults(func=cmd_complete)


def _full_parser() -> argparse.ArgumentParser:
    from engine.cli.help_text import apply_examples
    from engine.cli.main import build_parser

    parser = build_parser()
    apply_examples(parser)
    return parser


def cmd_help(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.help_text import TOPICS, topic_text

    words = list(args.topic)
    if not words:
        text = _full_parser().format_help() + "\nTOPICS (memories help TOPIC)\n  " + ", ".join(TOPICS) + "\n"
        ctx.emit({"topics": list(TOPICS)}, text.rstrip("\n"))
        return 0
    if len(words) == 1 and (page := topic_text(words[0])) is not None:
        ctx.emit({"topic": words[0].lower(), "text": page}, page.rstrip("\n"))
        return 0
    parser = _full_parser()
    node: argparse.ArgumentParser = parser
    for word in words:
        subs = _subcommands(node)
        if word not in subs:
            known = sorted(set(TOPICS) | set(subs)) if node is parser else sorted(subs)
            close = difflib.get_close_matches(word, known, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f"; topics: {', '.join(TOPICS)}"
            raise UsageError(f"no help topic or command {word[:40]!r}{hint}")
        node = subs[word]
    ctx.emit({"command": " ".join(words), "text": node.format_help()}, node.format_help().rstrip("\n"))
    return 0


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {k: v for k, v in action.choices.items() if not k.startswith("__")}
    return {}


def cmd_completion(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.completion import script
    from engine.cli.main import build_parser

    print(script(args.shell, build_parser()), end="")
    return 0


def cmd_complete(ctx: Context, args: argparse.Namespace) -> int:
    """IDs or tags starting with PREFIX, one a line (ID, tab, title); nothing at all when the
    engine is not running or the vault is locked. Never starts the engine."""
    if not ctx.paths.socket.exists():
        return 0
    try:
        result = ctx.client().request({"op": "list", "limit": 100_000}, timeout=COMPLETE_TIMEOUT)
    except (MemoriesError, OSError):
        return 0
    prefix = args.prefix
    lines: list[str] = []
    if args.what == "ids":
        lower = prefix.lower()
        for item in result.get("items", []):
            if item["id"].startswith(lower):
                title = " ".join(str(item.get("title", "")).split())[:60]
                lines.append(f"{item['short_id']}\t{one_line(title)}")
    else:
        tags = sorted({t for item in result.get("items", []) for t in item.get("tags", []) if t.startswith(prefix)})
        lines = [one_line(t) for t in tags if not any(c.isspace() for c in t)]
    if lines:
        print("\n".join(lines))
    return 0
