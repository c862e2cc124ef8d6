"""Content options shared by commands that write memories and cards (--title, --body…, --tag, --meta)."""

from __future__ import annotations

import argparse
import sys

from engine.cli.context import UsageError

__all__ = ["add_content_options", "body_from", "meta_pairs"]


def add_content_options(p: argparse.ArgumentParser, *, meta_help: str = "repeatable") -> None:
    p.add_argument("--title")
    p.add_argument("--body")
    p.add_argument("--body-stdin", action="store_true", help="read the body from standard input")
    p.add_argument("--body-file", help="read the body from a UTF-8 file")
    p.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="repeatable")
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


def body_from(args: argparse.Namespace) -> str | None:
    """The body from --body, --body-stdin or --body-file (at most one); None if none was given."""
    sources = [args.body is not None, args.body_stdin, args.body_file is not None]
    if sum(sources) > 1:
        raise UsageError("use one of --body, --body-stdin, --body-file")
    if args.body_stdin:
        return sys.stdin.read()
    if args.body_file is not None:
        try:
            with open(args.body_file, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {args.body_file}: {exc.__class__.__name__}") from None
    body: str | None = args.body
    return body
