"""`memories` entry point: global options, subcommand registration, typed error output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from engine.cli import (
    asset_commands,
    card_commands,
    desktop_commands,
    mcp_commands,
    remote_commands,
    search_commands,
    session_commands,
    transfer_commands,
)
from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError

__all__ = ["main", "build_parser"]

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    # SUPPRESS defaults: the options may stand before or after the subcommand, and a
    # subparser must not reset a value given before it.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--home", help="data directory (default: $MEMORIES_HOME or the platform's)")
    common.add_argument("--json", action="store_true", help="print stable JSON instead of text")
    parser = _Parser(
        prog="memories",
        description="Memories: a local-first, end-to-end encrypted vault.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in (
        session_commands,
        asset_commands,
        transfer_commands,
        desktop_commands,
        card_commands,
        remote_commands,
        mcp_commands,
        search_commands,
    ):
        module.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    json_output = "--json" in (argv if argv is not None else sys.argv[1:])
    ctx: Context | None = None
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        ctx = Context.create(getattr(args, "home", None), getattr(args, "json", False))
        code: int = args.func(ctx, args)
        return code
    except UsageError as exc:
        _report("usage", str(exc), json_output)
        return EXIT_USAGE
    except MemoriesError as exc:
        _report(exc.code, exc.message, json_output)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    finally:
        if ctx is not None:
            ctx.close()


def _report(code: str, message: str, json_output: bool) -> None:
    if json_output:
        print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
    else:
        print(f"memories: error [{code}]: {message}", file=sys.stderr)


def console_main() -> None:
    sys.exit(main())
