"""engine.home finds the default data home where platformdirs does, without importing it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("MEMORIES_HOME", "XDG_DATA_HOME", "HOME")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**base, **env}, cwd=ROOT, timeout=60, check=True
    )
    return proc.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG shortcut is Linux only")
@pytest.mark.parametrize(
    "env",
    [
        {"HOME": "/home/someone"},
        {"HOME": "/home/someone/"},
        {"HOME": "/"},
        {"HOME": "/home/someone", "XDG_DATA_HOME": "/data/xdg"},
        {"HOME": "/home/someone", "XDG_DATA_HOME": "relative/xdg"},  # not absolute: ignored
        {"HOME": "/home/someone", "XDG_DATA_HOME": ""},
        {"HOME": "relative-home"},  # platformdirs asks the password database
    ],
)
def test_default_home_is_where_platformdirs_puts_it(env: dict[str, str]) -> None:
    """With neither --home nor MEMORIES_HOME, the data home is platformdirs' user data dir
    (as before issue 20), and only the cases it alone can answer import it."""
    ours = _run("import sys; from engine.home import data_home; print(data_home(), 'platformdirs' in sys.modules)", env)
    theirs = _run(
        "import os, platformdirs; print(os.path.realpath(platformdirs.user_data_dir('memories', appauthor=False)))", env
    )
    home, imported = ours.rsplit(" ", 1)
    assert home == theirs
    assert imported == str(not env["HOME"].startswith("/"))
