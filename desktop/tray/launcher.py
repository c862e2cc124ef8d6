"""`memories-tray` (and `memories tray`): run the tray icon, dashboard and prober (DT-2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.cli.desktop_commands import add_tray_arguments
from engine.config import resolve_home

__all__ = ["main", "run_tray"]


def run_tray(home: Path, args: argparse.Namespace) -> int:
    from desktop.tray.app import TrayApp, TrayOptions  # pystray/Pillow only when the tray runs

    options = TrayOptions(
        home=home,
        backend=args.backend,
        port=args.port,
        start_engine=not args.no_start_engine,
        probe_interval=args.probe_interval,
        probe_deadline=args.probe_deadline,
        verbose=args.verbose,
    )
    try:
        return TrayApp(options).run()
    except RuntimeError as exc:  # no backend could be loaded (no display, no tray host)
        print(f"memories-tray: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="memories-tray", description="Memories tray icon and dashboard.")
    parser.add_argument("--home", help="data directory (default: $MEMORIES_HOME or the platform's)")
    add_tray_arguments(parser)
    args = parser.parse_args(argv)
    sys.exit(run_tray(resolve_home(args.home), args))
