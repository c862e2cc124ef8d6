"""Issue 19: every command has EXAMPLES and every option a description; user text never says "asset"."""

from __future__ import annotations

import argparse
import re

from engine.cli.editor import Draft, parse_draft, render_draft
from engine.cli.help_text import EXAMPLES, TOPICS, apply_examples
from engine.cli.main import build_parser
from engine.errors import CODES
from engine.remote.tickets import display


def _walk(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not name.startswith("__"):
                    found += _walk(sub, f"{path} {name}".strip())
    return found


def test_every_command_has_examples_and_every_option_a_description() -> None:
    """Walks the whole parser (commands added later included): a command without an
    EXAMPLES entry in engine/cli/help_text.py, or an option without help, fails here."""
    parser = build_parser()
    apply_examples(parser)
    missing_examples, missing_help = [], []
    for path, node in _walk(parser):
        if path not in EXAMPLES:
            missing_examples.append(path)
        else:
            assert "EXAMPLES" in node.format_help(), path
        for action in node._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help:
                missing_help.append(f"{path}: {action.option_strings[0] if action.option_strings else action.dest}")
    assert missing_examples == [], f"add EXAMPLES for these commands in engine/cli/help_text.py: {missing_examples}"
    assert missing_help == [], f"these options have no help string: {missing_help}"


def test_user_text_never_says_asset() -> None:
    """Error sentences and every help text say memory, card, credential, file or item."""
    word = re.compile(r"\bassets?\b", re.IGNORECASE)
    assert [code for code, sentence in CODES.items() if word.search(sentence)] == []
    parser = build_parser()
    apply_examples(parser)
    texts = [node.format_help() for _, node in _walk(parser)] + list(TOPICS.values())
    offending = [text.splitlines()[0] for text in texts if word.search(text)]
    assert offending == []


def test_help_topics_exist() -> None:
    assert set(TOPICS) >= {"ids", "conflicts", "search", "secrets"}


def test_a_tcp_send_is_shown_as_text_not_as_a_python_bytes_literal() -> None:
    data = b"hello\n"
    import base64

    shown = display({"kind": "tcp", "data_b64": base64.b64encode(data).decode()})
    assert shown == "send hello\n  (6 bytes)"
    assert "b'" not in shown
    binary = display({"kind": "tcp", "data_b64": base64.b64encode(b"\xff\x00").decode()})
    assert binary == "send \\xff\x00  (2 bytes)"


def test_the_editor_file_round_trips_every_value() -> None:
    draft = Draft(" spaced title ", ["a,b", "c"], {"k: 1": "line\nbreak", "plain": "v"}, "body\n\n---\nmore")
    assert parse_draft(render_draft(draft)) == draft
    simple = Draft("Title", ["x", "y"], {}, "")
    assert "tags: x, y" in render_draft(simple) and parse_draft(render_draft(simple)) == simple


def test_bare_memories_prints_every_command_grouped_on_one_screen() -> None:
    """Issue 31: `memories` alone prints the commands in groups (everyday, sharing, agents,
    remote, admin) on one 80x24 screen; every command of the table appears exactly once."""
    import subprocess
    import sys

    from engine.cli.main import COMMAND_TABLE

    proc = subprocess.run([sys.executable, "-m", "engine.cli"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.rstrip("\n").split("\n")
    assert len(lines) <= 24 and all(len(line) <= 100 for line in lines), proc.stdout
    for group in ("Everyday", "Sharing", "Agents", "Remote", "Admin"):
        assert any(line.strip().startswith(group) for line in lines), group
    words = [w for line in lines[3:] if line.startswith("  ") and not line.strip().startswith("memories") for w in line.split()]
    commands = sorted(c for c in COMMAND_TABLE if not c.startswith("__"))
    listed = sorted(w for w in words if w not in ("Everyday", "Cards", "Sharing", "Agents", "Remote", "Admin"))
    assert listed == commands
