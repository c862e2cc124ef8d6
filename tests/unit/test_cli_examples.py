"""Help a newcomer can copy: every EXAMPLE parses with the real parser, and help never cites spec IDs."""

from __future__ import annotations

import argparse
import re
import shlex

from engine.cli.context import UsageError
from engine.cli.help_text import EXAMPLES, TOPICS, apply_examples
from engine.cli.main import build_parser

# Requirement-ID prefixes of the specification (SPEC.md): "(AG-5)" means nothing to a user.
SPEC_ID = re.compile(r"\b(?:ST|ID|PO|HI|SY|API|DT|SR|RAG|CD|AG|RM|PX|JB|CL|BK|CT|IM|FI|RN|AU|LY)-\d+\b")


def _memories_calls(example: str) -> list[list[str]]:
    """The `memories …` argument lists in one example line (pipes, &&, ;, redirections split it)."""
    calls = []
    for part in re.split(r"&&|\||;|>", example):
        words = shlex.split(part, comments=True)
        while words and re.match(r"^[A-Z_]+=", words[0]):  # an environment assignment before it
            words.pop(0)
        if words and words[0] == "memories":
            calls.append(words[1:])
    return calls


def _walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not name.startswith("__"):
                    found += _walk(sub)
    return found


def test_every_example_parses_as_written() -> None:
    """A user copies an example and it runs: missing required options (e.g. `device request`
    without --approver) or a positional where an option is needed fail here."""
    parser = build_parser()
    failures = []
    for path, lines in EXAMPLES.items():
        for line in lines:
            for argv in _memories_calls(line):
                try:
                    parser.parse_args(argv)
                except UsageError as exc:
                    failures.append(f"{path!r}: {line}  ->  {exc}")
    assert failures == []


def test_help_never_cites_a_specification_id() -> None:
    parser = build_parser()
    apply_examples(parser)
    texts = [node.format_help() for node in _walk(parser)] + list(TOPICS.values())
    cited = sorted({match.group(0) for text in texts for match in SPEC_ID.finditer(text)})
    assert cited == []
