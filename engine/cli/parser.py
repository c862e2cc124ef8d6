"""The full `memories` parser (argparse): every command's options, help and friendly errors.

Built for a call the fast path (engine/cli/fast_args.py) does not take: help, a command
that is not an everyday read, or arguments it leaves to argparse. With ``argv`` only the
module of its command is imported (COMMAND_TABLE in engine/cli/main.py).
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Sequence
from typing import Any

from engine import __version__
from engine.cli.context import UsageError
from engine.cli.main import COMMAND_MODULES, COMMAND_TABLE, command_word

__all__ = ["build_parser", "chosen_parser"]


class _Parser(argparse.ArgumentParser):
    # The words being parsed: an unknown option is reported by the top parser, which names
    # the subcommand they chose.
    words: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:  # type: ignore[override]
        if args is not None:
            self.words = list(args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(_friendlier(self, message))


def _friendlier(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's message, with "did you mean" for a mistyped choice, command or option."""
    import difflib

    choice = re.match(r"argument (\S+): invalid choice: '?([^' ]*)'? \(choose from (.*)\)$", message)
    if choice:
        name, word, listed = choice.groups()
        options = [c.strip(" '\"") for c in listed.split(",")]
        options = [o for o in options if not o.startswith("__")]
        close = difflib.get_close_matches(word, options, n=1, cutoff=0.5)
        if any(isinstance(a, argparse._SubParsersAction) and a.metavar == name for a in parser._actions):
            where = " ".join(parser.prog.split()[1:])
            what = f"unknown command {word[:40]!r}" if not where else f"unknown `{where}` action {word[:40]!r}"
            more = f"`{parser.prog} --help` lists them"
        else:
            what, more = f"argument {name}: invalid choice {word[:40]!r}", "choose from " + ", ".join(options)
        return f"{what}; did you mean `{close[0]}`?" if close else f"{what}; {more}"
    missing = re.match(r"the following arguments are required: (\S+)$", message)
    group = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if missing and group is not None and missing.group(1) == group.metavar:
        # A group command typed alone (`memories file`): name what may follow it.
        actions = ", ".join(name for name in group.choices if not name.startswith("__"))
        return f"`{parser.prog}` needs one of: {actions}; `{parser.prog} --help` explains them"
    unknown = re.match(r"unrecognized arguments: (.*)$", message)
    if unknown:
        known = _option_strings(parser)
        for word in unknown.group(1).split():
            if word.startswith("--"):
                name = word.split("=", 1)[0]
                if name in known:  # another command's option (`agent disconnect --project`)
                    prog = _parser_of_words(parser, getattr(parser, "words", ())).prog
                    return f"`{prog}` has no option {name[:40]!r}; `{prog} --help` lists its options"
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                if close:
                    return f"unknown option {word[:40]!r}; did you mean `{close[0]}`?"
    return message


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest (sub)parser the parsed words chose: `memories login` alone is login's."""
    while True:
        group = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        word = getattr(args, group.dest, None) if group is not None and group.dest != argparse.SUPPRESS else None
        if group is None or word not in group.choices:
            return parser
        parser = group.choices[word]


def _parser_of_words(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)parser that the command words among ``words`` lead to."""
    for word in words:
        group = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if group is not None and word in group.choices:
            parser = group.choices[word]
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_option_strings(sub))
        else:
            found.extend(o for o in action.option_strings if o.startswith("--"))
    return sorted(set(found))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the module of its command is imported."""
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
    parser.add_argument("--version", action="version", version=f"memories {__version__}", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    word = command_word(argv) if argv is not None else None
    modules: tuple[str, ...] = (COMMAND_TABLE[word],) if word in COMMAND_TABLE else COMMAND_MODULES
    if word is None and argv is not None and "--version" in argv:
        modules = ()  # the answer needs no command module
    for name in modules:
        importlib.import_module(f"engine.cli.{name}").register(sub, common)
    if argv is not None and ("-h" in argv or "--help" in argv):
        from engine.cli.help_text import apply_examples  # only when help is shown

        apply_examples(parser)
    return parser
