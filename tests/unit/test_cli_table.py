"""The CLI imports only the module of the command it runs; the table must match the modules."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from engine.cli.main import COMMAND_MODULES, COMMAND_TABLE


def test_command_table_matches_registered_commands() -> None:
    registered: dict[str, str] = {}
    for name in COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"engine.cli.{name}").register(sub, argparse.ArgumentParser(add_help=False))
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMAND_TABLE


def test_client_stays_lean() -> None:
    """The `get` path imports no crypto, msgspec, jieba, aiohttp or feature code."""
    code = (
        "import sys; from engine.cli.main import build_parser; build_parser(['get', 'x']);"
        "heavy = [m for m in ('nacl', 'cryptography', 'msgspec', 'jieba', 'aiohttp', 'engine.service', "
        "'engine.cli.card_commands', 'engine.cli.remote_commands', 'asyncio') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
