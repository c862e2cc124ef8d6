"""Entry script of the one-folder app build (packaging/memories-tray.spec), for both executables.

The frozen ``memories`` runs the CLI and the frozen ``memories-tray`` runs the tray. The
engine starts its helper processes as ``sys.executable -m MODULE ...`` (the daemon, the
clipboard clearer); in a frozen app ``sys.executable`` is this executable, so ``-m MODULE``
is honoured here and the same call works from a venv and from the bundle.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "-m":
        module = sys.argv[2]
        sys.argv = [sys.argv[0], *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    if Path(sys.executable).stem == "memories-tray":
        from desktop.tray.launcher import main as tray_main

        tray_main()
    from engine.cli.main import main as cli_main

    sys.exit(cli_main())


if __name__ == "__main__":
    main()
