"""`memories` entry point: global options, subcommand registration, typed error output.

Registering a command: add its word to COMMAND_TABLE (word -> module) and, for a new
module, the module to COMMAND_MODULES; the module's ``register(subparsers, common)`` adds
its argparse parsers (tests/unit/test_cli_table.py checks the table against them).

Start-up cost (issue 20): this module imports no argparse, json, re or typing. The
everyday reads (get, list, search, status) in their plain form are read by
engine/cli/fast_args.py; every other call builds the argparse parser of its command only
(engine/cli/parser.py). tests/unit/test_cli_imports.py lists what a call may import.
"""

from __future__ import annotations

import os
import sys

from engine.cli.context import JSON_VERSION, Context, UsageError
from engine.errors import MemoriesError
from engine.ipc import json_codec
from engine.terminal_text import one_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any, NoReturn

__all__ = ["main", "build_parser", "exit_after"]

EXIT_ERROR = 1
EXIT_USAGE = 2

# Command modules, in help order. Each has `register(subparsers, common)`.
COMMAND_MODULES = (
    "session_commands",
    "asset_commands",
    "transfer_commands",
    "search_commands",
    "card_commands",
    "desktop_commands",
    "integration_commands",
    "mcp_commands",
    "remote_commands",
    "audit_commands",
    "login_commands",
    "password_commands",
    "meta_commands",
    "vault_commands",
    "device_commands",
    "sync_commands",
    "cloud_commands",
    "quarantine_commands",
    "transcript_commands",
    "memory_commands",
    "agent_commands",
    "file_commands",
    "run_commands",
    "job_commands",
    "backup_commands",
    "center_commands",
    "config_commands",
)
# Top-level command → its module, so one call imports only what it runs (a CLI call must
# stay well under 150 ms). tests/unit/test_cli_table.py keeps this in step with the modules;
# an unknown word falls back to importing every module.
COMMAND_TABLE = {
    "init": "session_commands",
    "unlock": "session_commands",
    "sudo": "session_commands",
    "lock": "session_commands",
    "status": "session_commands",
    "daemon": "session_commands",
    "put": "asset_commands",
    "list": "asset_commands",
    "get": "asset_commands",
    "edit": "asset_commands",
    "delete": "asset_commands",
    "history": "asset_commands",
    "trash": "asset_commands",
    "diff": "asset_commands",
    "import": "transfer_commands",
    "export": "transfer_commands",
    "wikilinks": "transfer_commands",
    "search": "search_commands",
    "retrieve": "search_commands",
    "ask": "search_commands",
    "rag": "search_commands",
    "card": "card_commands",
    "graph": "card_commands",
    "protected": "card_commands",
    "otp": "card_commands",
    "secret": "card_commands",
    "local-config": "card_commands",
    "copy": "card_commands",
    "tray": "desktop_commands",
    "dashboard": "desktop_commands",
    "autostart": "integration_commands",
    "desktop": "integration_commands",
    "mcp": "mcp_commands",
    "inject": "mcp_commands",
    "agent": "agent_commands",
    "credential": "remote_commands",
    "remote": "remote_commands",
    "proxy": "remote_commands",
    "audit": "audit_commands",
    "quarantine": "quarantine_commands",
    "transcript": "transcript_commands",
    "memory": "memory_commands",
    "login": "login_commands",
    "password": "password_commands",
    "help": "meta_commands",
    "completion": "meta_commands",
    "__complete": "meta_commands",
    "vault": "vault_commands",
    "vaults": "vault_commands",
    "whoami": "device_commands",
    "devices": "device_commands",
    "device": "device_commands",
    "serve": "sync_commands",
    "sync": "sync_commands",
    "relay": "sync_commands",
    "cloud": "cloud_commands",
    "file": "file_commands",
    "run": "run_commands",
    "job": "job_commands",
    "backup": "backup_commands",
    "restore": "backup_commands",
    "center": "center_commands",
    "config": "config_commands",
}


def command_word(argv: Sequence[str]) -> str | None:
    """The first positional word, skipping the global options (and --home's value)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--home":
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The full parser (engine/cli/parser.py); with ``argv``, only its command's module is imported."""
    from engine.cli.parser import build_parser as build

    return build(argv)


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `… | head` in other tools


# Set when the command just run was an everyday read on the fast path (get, list, search,
# status): such a run starts no thread, registers no atexit work and holds no temp file, so
# its process may end without the interpreter's teardown (see ``exit_after``).
_ran_fast: list[bool] = []


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a reader that goes away (``memories list | head``) ends it quietly."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows up here, not at exit
    except BrokenPipeError:
        # Point stdout at devnull so the interpreter's final flush cannot fail again and
        # print "Exception ignored … BrokenPipeError" on stderr.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _run(argv: Sequence[str] | None) -> int:
    args_list = list(argv) if argv is not None else sys.argv[1:]
    json_output = "--json" in args_list
    word = command_word(args_list)
    if word is not None and word not in COMMAND_TABLE:
        import difflib

        close = difflib.get_close_matches(word, [c for c in COMMAND_TABLE if not c.startswith("__")], n=1, cutoff=0.5)
        hint = f"did you mean `{close[0]}`?" if close else "`memories --help` lists the commands"
        _report("usage", f"unknown command {word[:40]!r}; {hint}", json_output)
        return EXIT_USAGE
    from engine.cli.fast_args import parse_fast

    ctx: Context | None = None
    if word is None and not any(a in ("-h", "--help", "--version") for a in args_list):
        from engine.cli.help_text import overview_text

        print(overview_text())  # `memories` alone: the grouped overview, one screen (issue 31)
        return EXIT_USAGE
    try:
        args: Any = parse_fast(args_list)
        if args is not None:
            _ran_fast.append(True)
        else:
            parser = build_parser(args_list)
            args = parser.parse_args(args_list)
            if not getattr(args, "func", None):
                from engine.cli.parser import chosen_parser

                chosen_parser(parser, args).print_help()  # `memories login` alone: login's actions
                return EXIT_USAGE
        ctx = Context.create(getattr(args, "home", None), getattr(args, "json", False))
        code: int = args.func(ctx, args)
        return code
    except UsageError as exc:
        _report("usage", str(exc), json_output)
        return EXIT_USAGE
    except MemoriesError as exc:
        _report(exc.code, exc.message, json_output, exc.details)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    finally:
        if ctx is not None:
            ctx.close()


def _report(code: str, message: str, json_output: bool, details: dict[str, Any] | None = None) -> None:
    candidates = (details or {}).get("candidates")
    if json_output:
        error: dict[str, Any] = {"code": code, "message": message}
        if isinstance(candidates, list):
            error["candidates"] = candidates
        print(json_codec.dumps({"v": JSON_VERSION, "error": error}, ensure_ascii=False))
        return
    print(f"memories: error [{code}]: {one_line(message)}", file=sys.stderr)
    if isinstance(candidates, list):
        for item in candidates:
            if isinstance(item, dict):
                kind, title = one_line(str(item.get("kind", ""))), one_line(str(item.get("title", "")))
                print(f"  {one_line(str(item.get('short_id', '')))}  {kind:<10}  {title}", file=sys.stderr)
        more = (details or {}).get("more")
        if isinstance(more, int) and more > 0:
            print(f"  … and {more} more", file=sys.stderr)


def exit_after(code: int) -> NoReturn:
    """End the process with ``code``. After a fast-path read, skip the interpreter's teardown:
    finalizing every imported module cost 2.4–3 ms per call, a sixth of a whole `memories get`
    (bench/cli.py, issue 20). Output is flushed first; nothing else is left to run."""
    if _ran_fast:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader gone after main() already said so
                code = code or EXIT_BROKEN_PIPE
        os._exit(code)
    sys.exit(code)


def console_main() -> None:
    exit_after(main())
