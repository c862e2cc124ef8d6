"""The sibling `memories` CLI the desktop runs as a child (prober, engine start).

From a source or pip install it is this interpreter with ``-m engine.cli``, so a venv
probes its own engine. In the one-folder app build (DT-6) the interpreter is frozen into
``memories-tray``, and the CLI is the ``memories`` executable beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["cli_command"]


def cli_command(home: Path, *args: str) -> list[str]:
    if getattr(sys, "frozen", False):
        name = "memories.exe" if sys.platform == "win32" else "memories"
        base = [str(Path(sys.executable).with_name(name))]
    else:
        base = [sys.executable, "-m", "engine.cli"]
    return [*base, "--home", str(home), *args]
