"""The fast reading of get/list/search/status (issue 20) gives argparse's namespace, or none.

Command lines are generated from each command's real vocabulary (its options, flags,
global options, odd values, abbreviations, ``--opt=value``, ``-h``, ``--``). Whenever
engine/cli/fast_args.py reads one, the full argparse parser must read it to exactly the
same values and the same function; when argparse refuses one, the fast path must decline.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli.context import UsageError
from engine.cli.fast_args import FAST_COMMANDS, parse_fast
from engine.cli.main import build_parser

VALUES = ["5", "0", "-3", "x", "", "title", "oldest", "updated", "lexical", "auto", "2.5", "nan", "abcd1234", "a b"]


def _options_of(command: str) -> list[str]:
    """Every option argparse knows for ``command`` (so new options show up here by themselves)."""
    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted({o for a in sub.choices[command]._actions for o in a.option_strings})


def _argparse(argv: list[str]) -> dict[str, Any] | None:
    try:
        return vars(build_parser(argv).parse_args(argv))
    except (UsageError, SystemExit):
        return None


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(FAST_COMMANDS)))
    options = _options_of(command)
    word = st.one_of(
        st.sampled_from(options),
        st.sampled_from(options).map(lambda o: o[:4]),  # abbreviations
        st.sampled_from(options).flatmap(lambda o: st.sampled_from(VALUES).map(lambda v: f"{o}={v}")),
        st.sampled_from(["--home", "/tmp/h", "--json", "--", "-h", "--help"]),
        st.sampled_from(VALUES),
    )
    words = draw(st.lists(word, max_size=6))
    at = draw(st.integers(0, len(words)))
    return [*words[:at], command, *words[at:]]


@settings(max_examples=600, deadline=None)
@given(command_lines())
def test_fast_reading_matches_argparse(argv: list[str]) -> None:
    fast = parse_fast(argv)
    if fast is None:
        return  # argparse takes it, with its own help and errors
    assert vars(fast) == _argparse(argv), argv


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "abcd"],
        ["--json", "get", "abcd", "--rev", "12ab", "--vault", "work", "--home", "/tmp/h"],
        ["list"],
        ["list", "--limit", "5", "--offset", "10", "--sort", "title", "--tag", "x", "--all", "--json"],
        ["search", "sourdough"],
        ["search", "a b", "--mode", "lexical", "--limit", "3", "--wait", "0.5", "--since", "7d", "--kind", "memory"],
        ["status", "--json"],
    ],
)
def test_everyday_forms_take_the_fast_path(argv: list[str]) -> None:
    """The forms people type are read without argparse, to argparse's values."""
    fast = parse_fast(argv)
    assert fast is not None
    assert vars(fast) == _argparse(argv)


def test_every_option_of_a_fast_command_is_known_to_the_fast_path() -> None:
    """An option added to get/list/search/status in its register() must be added to
    FAST_COMMANDS too (else its plain form would be refused by the fast path forever)."""
    for command, spec in FAST_COMMANDS.items():
        known = {*spec.options, *spec.flags, "--home", "--json", "-h", "--help"}
        assert set(_options_of(command)) == known, command


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--sort", "newest"],  # outside the choices: argparse says "did you mean"
        ["search", "q", "--mode", "fuzzy"],
        ["list", "--limit", "many"],
        ["list", "--lim", "5"],  # abbreviation
        ["list", "--limit=5"],
        ["get"],
        ["get", "a", "b"],
        ["get", "--", "-x"],
        ["get", "abcd", "-h"],
        ["--limit", "5", "list"],  # a command's option before the command
        ["get", "abcd", "--rev"],
        ["list", "--tag", "--json"],
    ],
)
def test_the_fast_path_declines_what_argparse_must_answer(argv: list[str]) -> None:
    assert parse_fast(argv) is None
