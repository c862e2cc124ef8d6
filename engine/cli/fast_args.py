"""The everyday reads (get, list, search, status) without argparse (issue 20).

Importing argparse and building a parser costs about as much as a bare interpreter start,
more than the request itself. For the commands people and scripts run all the time this
module reads the plain forms: the command word, its positionals, and its options written
out in full with their value in the next word (``--limit 5``), in any order, with the
global ``--home DIR`` and ``--json``. Everything else (``-h``, ``--opt=value``, an
abbreviated option, a value outside the choices, a word that does not convert, a missing
or extra positional, ``--``) returns ``None``, and the full argparse parser
(engine/cli/parser.py) takes the call with its usual help and errors.

:data:`FAST_COMMANDS` repeats each command's options and defaults from its ``register``;
tests/unit/test_cli_fast_args.py checks on generated command lines that this reading gives
exactly argparse's namespace (the same function, values and defaults), so a new option
added to one of these commands fails that test until it is added here too.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["FAST_COMMANDS", "FastCommand", "Args", "parse_fast"]


class Args:
    """What argparse.Namespace offers the command functions: attributes, ``vars()``, ``==``."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __repr__(self) -> str:
        return f"Args({self.__dict__!r})"


class FastCommand:
    """One command's plain form: ``module:function``, positionals, options, flags, defaults."""

    def __init__(
        self,
        target: str,
        positionals: tuple[str, ...] = (),
        options: dict[str, Callable[[str], Any]] | None = None,
        flags: tuple[str, ...] = (),
        choices: dict[str, tuple[str, ...]] | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.target = target
        self.positionals = positionals
        self.options = options or {}
        self.flags = flags
        self.choices = choices or {}
        self.defaults = defaults or {}


_SEARCH_MODES = ("auto", "lexical", "vector", "hybrid")  # engine/cli/search_commands.py MODES

FAST_COMMANDS: dict[str, FastCommand] = {
    "get": FastCommand(
        "asset_commands:cmd_get",
        positionals=("id",),
        options={"--rev": str, "--vault": str},
        defaults={"rev": None, "vault": None},
    ),
    "list": FastCommand(
        "asset_commands:cmd_list",
        options={"--limit": int, "--offset": int, "--tag": str, "--sort": str, "--vault": str},
        flags=("--all",),
        choices={"--sort": ("updated", "oldest", "title")},
        defaults={"limit": 100, "offset": 0, "all": False, "tag": None, "sort": "updated", "vault": None},
    ),
    "search": FastCommand(
        "search_commands:cmd_search",
        positionals=("query",),
        options={
            "--mode": str,
            "--limit": int,
            "--offset": int,
            "--wait": float,
            "--kind": str,
            "--vault": str,
            "--since": str,
            "--until": str,
            "--author": str,
            "--source": str,
        },
        choices={"--mode": _SEARCH_MODES},
        defaults={
            "mode": "auto",
            "limit": 10,
            "offset": 0,
            "wait": 5.0,
            "kind": None,
            "vault": None,
            "since": None,
            "until": None,
            "author": None,
            "source": None,
        },
    ),
    "status": FastCommand("session_commands:cmd_status"),
}

_GLOBAL_OPTIONS = {"--home"}
_GLOBAL_FLAGS = {"--json"}


def parse_fast(argv: Sequence[str]) -> Args | None:
    """argparse's namespace for a plain everyday command line, or ``None`` to use argparse."""
    command: FastCommand | None = None
    values: dict[str, Any] = {}
    positionals: list[str] = []
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            if command is None:
                command = FAST_COMMANDS.get(word)
                if command is None:
                    return None
                values["command"] = word
            else:
                positionals.append(word)
            continue
        if word in _GLOBAL_FLAGS or (command is not None and word in command.flags):
            values[word[2:]] = True
            continue
        convert = _option(command, word)
        value = next(words, None)
        if convert is None or value is None or value.startswith("-"):
            return None
        try:
            converted = convert(value)
        except ValueError:
            return None
        if command is not None and value not in command.choices.get(word, (value,)):
            return None
        values[word[2:].replace("-", "_")] = converted
    if command is None or len(positionals) != len(command.positionals):
        return None
    module, function = command.target.split(":")
    __import__(f"engine.cli.{module}")  # not importlib: it imports `warnings`
    func = getattr(sys.modules[f"engine.cli.{module}"], function)
    return Args(**{**command.defaults, **dict(zip(command.positionals, positionals, strict=True)), **values, "func": func})


def _option(command: FastCommand | None, word: str) -> Callable[[str], Any] | None:
    if word in _GLOBAL_OPTIONS:
        return str
    if command is None:  # a command's own option before the command: argparse says why not
        return None
    return command.options.get(word)
