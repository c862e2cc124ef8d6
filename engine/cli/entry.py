"""The `memories` command's first module (issue 32): `--version` here, everything else to main.

Every way of starting the command comes through :func:`run`: the console script a wheel or
``pip install -e`` installs (``[project.scripts]``), ``python -m engine.cli`` and the app
bundle. It imports nothing but ``sys`` before it knows what was
asked: ``memories --version`` needs only the version string, not the IPC client, the error
types or argparse (which made it 2.8x a bare interpreter, slower than a `get`).
tests/unit/test_cli_imports.py lists what each call may import.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["run"]


def run() -> NoReturn:
    """Run the command line in ``sys.argv`` and end the process with its exit status."""
    argv = sys.argv[1:]
    if argv == ["--version"]:  # argparse's answer, without argparse (engine/cli/parser.py)
        from engine import __version__

        sys.stdout.write(f"memories {__version__}\n")
        sys.stdout.flush()
        raise SystemExit(0)
    from engine.cli.main import exit_after, main

    exit_after(main(argv))
