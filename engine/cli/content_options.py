"""Content options shared by commands that write memories and cards (--title, --body…, --tag, --meta)."""

from __future__ import annotations

import os
import stat
import sys

from engine.cli.context import UsageError

TYPE_CHECKING = False  # imported by get/list on the CLI's fast path (issue 20)
if TYPE_CHECKING:
    import argparse

__all__ = ["add_content_options", "body_from", "meta_pairs", "stdin_has_body", "stdin_is_terminal"]


ARGV_VISIBLE = "other users on this machine can see it in `ps` while the command runs"


def add_content_options(
    p: argparse.ArgumentParser,
    *,
    meta_help: str = "a KEY=VALUE metadata pair (repeatable)",
    piped_body: bool = False,
    tag_help: str = "a tag (repeatable)",
) -> None:
    """``piped_body``: the command reads the body from a piped standard input when no body
    option is given (``put``); say so in the help."""
    p.add_argument("--title", help=f"the title ({ARGV_VISIBLE})")
    instead = "pipe it on standard input" if piped_body else "use --body-stdin or --body-file"
    p.add_argument("--body", help=f"the body text ({ARGV_VISIBLE}; for private text {instead})")
    stdin_help = "read the body from standard input" + (
        " (the default when standard input is not a terminal)" if piped_body else ""
    )
    p.add_argument("--body-stdin", action="store_true", help=stdin_help)
    p.add_argument("--body-file", help="read the body from a UTF-8 file")
    p.add_argument("--tag", action="append", dest="tags", metavar="TAG", help=tag_help)
    p.add_argument("--meta", action="append", metavar="KEY=VALUE", help=meta_help)


def meta_pairs(values: list[str] | None) -> dict[str, str] | None:
    """``KEY=VALUE`` options as a dict; None when the option was not given at all."""
    if values is None:
        return None
    meta: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, got a value without '=' for {key[:40]!r}")
        meta[key] = value
    return meta


def body_from(args: argparse.Namespace, *, piped: bool = False) -> str | None:
    """The body from --body, --body-stdin or --body-file (at most one); None if none was given.

    With ``piped``, a standard input that is a pipe or a non-empty file is read when none of
    the three was given (``echo text | memories put --title T``): an explicit option always
    wins, and a terminal or ``/dev/null`` is never read (:func:`engine.cli.editor.stdin_has_body`).
    """
    sources = [args.body is not None, args.body_stdin, args.body_file is not None]
    if sum(sources) > 1:
        raise UsageError("use one of --body, --body-stdin, --body-file")
    if args.body_stdin or (piped and not any(sources) and _stdin_piped()):
        try:
            return sys.stdin.read()
        except UnicodeDecodeError:
            raise UsageError("standard input is not UTF-8 text") from None
    if args.body_file is not None:
        try:
            with open(args.body_file, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.body_file}: {exc.__class__.__name__}") from None
    body: str | None = args.body
    return body


def _stdin_piped() -> bool:
    return stdin_has_body()


def stdin_has_body() -> bool:
    """Standard input is a pipe, or a regular file with content (``< notes.txt``).

    Not a terminal, and not ``/dev/null`` (a character device): a script that runs
    ``memories edit ID </dev/null`` must not replace a body with nothing.
    """
    if sys.stdin is None:
        return False
    try:
        st = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_size > 0)


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False
