"""The sibling `memories` CLI the desktop runs as a child (prober, engine start).

From a source or pip install it is this interpreter with ``-P -m engine.cli``, so a venv
probes its own engine. In the one-folder app build (DT-6) the interpreter is frozen into
``memories-tray``, and the CLI is the ``memories`` executable beside it.

Either way the child runs isolated from the tray's working directory (SPEC ST-11,
engine/launch.py): ``-P``, a cleaned ``PYTHONPATH`` and a fixed working directory, which
:func:`cli_options` gives to ``subprocess.Popen``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.launch import child_env, python_command, working_directory

__all__ = ["cli_command", "cli_options"]


def cli_command(home: Path, *args: str) -> list[str]:
    if getattr(sys, "frozen", False):
        name = "memories.exe" if sys.platform == "win32" else "memories"
        base = [str(Path(sys.executable).with_name(name))]
    else:
        base = python_command("engine.cli")
    return [*base, "--home", str(home), *args]


def cli_options(home: Path, env: dict[str, str] | None) -> dict[str, Any]:
    """``cwd`` and ``env`` keyword arguments for ``subprocess.Popen`` of :func:`cli_command`."""
    return {"cwd": working_directory(home), "env": child_env(env)}
