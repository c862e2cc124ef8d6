"""`memories-tray` (and `memories tray`): run the tray icon, dashboard and prober (DT-2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.cli.desktop_commands import add_tray_arguments
from engine.config import resolve_home

__all__ = ["main", "run_tray"]


def run_tray(home: Path, args: argparse.Namespace, explicit_home: bool = True) -> int:
    if args.install_autostart or args.remove_autostart:
        return _autostart(args, home if explicit_home else None)
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
        print(f"memories-tray: {exc}; without a tray, `memories dashboard` serves the same page", file=sys.stderr)
        return 1


def _autostart(args: argparse.Namespace, home: Path | None) -> int:
    from desktop import autostart

    if args.install_autostart:
        kind = autostart.default_kind() if args.install_autostart == "auto" else args.install_autostart
        print(f"autostart entry written: {autostart.install(kind, home)}")
    else:
        kind = autostart.default_kind() if args.remove_autostart == "auto" else args.remove_autostart
        removed = autostart.remove(kind)
        print(f"autostart entry removed: {removed}" if removed else "no autostart entry to remove")
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="memories-tray", description="Memories tray icon and dashboard.")
    parser.add_argument("--home", help="data directory (default: $MEMORIES_HOME or the platform's)")
    add_tray_arguments(parser)
    args = parser.parse_args(argv)
    sys.exit(run_tray(resolve_home(args.home), args, explicit_home=args.home is not None))


if __name__ == "__main__":
    main()
