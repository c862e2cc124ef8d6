"""`memories-tray` (and `memories tray`): run the tray icon, dashboard and prober (DT-2).

This module is the desktop's command-line entry point and imports only the standard
library and kernel modules: the `memories` CLI builds its `tray` and `dashboard`
subcommands from :func:`add_tray_arguments` and :func:`add_dashboard_arguments` here
(a surface may import another's entry point, never the other way round; SPEC LY-1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from engine.config import resolve_home

__all__ = [
    "main",
    "run_tray",
    "add_tray_arguments",
    "add_dashboard_arguments",
    "AUTOSTART_KINDS",
    "autostart_enable",
    "autostart_disable",
    "autostart_status",
    "app_menu_install",
    "app_menu_uninstall",
]

# Where the tray starts at login: auto picks XDG autostart, a LaunchAgent or the Startup folder.
AUTOSTART_KINDS = ("auto", "xdg", "systemd", "launchagent", "windows")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a port is a number from 0 to 65535") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("a port is a number from 0 to 65535")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds") from None
    if not 0.1 <= value <= 600:
        raise argparse.ArgumentTypeError("between 0.1 and 600 seconds")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=_port, default=0, help="dashboard port on 127.0.0.1 (default: a random free port)")
    p.add_argument("--probe-interval", type=_seconds, default=2.0, help="seconds between status probes")
    p.add_argument("--probe-deadline", type=_seconds, default=2.0, help="a probe taking longer means 'not responding'")
    p.add_argument(
        "--keep-unlocked",
        action="store_true",
        help="quitting leaves the vault unlocked (by default quitting the tray or the dashboard locks it)",
    )


def add_tray_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument(
        "--backend",
        choices=("appindicator", "gtk", "xorg", "darwin", "win32"),
        help="pystray backend (default: appindicator, then gtk, then xorg on Linux)",
    )
    p.add_argument("--no-start-engine", action="store_true", help="do not start the engine if it is not running")
    p.add_argument("--verbose", action="store_true", help="print the backend, the dashboard link and state changes")
    # The older spellings of `memories autostart enable|disable`, kept as aliases.
    autostart = p.add_mutually_exclusive_group()
    kinds = AUTOSTART_KINDS
    autostart.add_argument(
        "--install-autostart",
        nargs="?",
        const="auto",
        choices=kinds,
        metavar="KIND",
        help="start the tray at login (auto, xdg, systemd, launchagent, windows) and exit",
    )
    autostart.add_argument(
        "--remove-autostart", nargs="?", const="auto", choices=kinds, metavar="KIND", help="remove that entry and exit"
    )


def add_dashboard_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--no-browser", action="store_true", help="only print the dashboard link")


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
        lock_on_quit=not args.keep_unlocked,
    )
    try:
        code = TrayApp(options).run()
    except RuntimeError as exc:  # no backend could be loaded (no display, no tray host)
        print(f"memories-tray: {exc}; without a tray, `memories dashboard` serves the same page", file=sys.stderr)
        return 1
    _leave(code, verbose=args.verbose)


def _leave(code: int, verbose: bool) -> NoReturn:
    """End the tray process now that the tray is done (the vault locked, the data home released).

    The interpreter's own exit waits for every thread it knows of and runs the toolkits' exit
    hooks; one of those once held a quitting tray for minutes in CI. Nothing is left to save
    here, so the process ends at once; with --verbose it names the threads it left behind."""
    import contextlib
    import os
    import threading

    if verbose:
        others = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon)
        if others:
            print(f"memories tray: exiting past threads still running: {', '.join(others)}", flush=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: nothing more to say
            stream.flush()
    os._exit(code)


def _autostart(args: argparse.Namespace, home: Path | None) -> int:
    if args.install_autostart:
        print(f"autostart entry written: {autostart_enable(args.install_autostart, home)['path']}")
    else:
        removed = autostart_disable(args.remove_autostart)
        print(f"autostart entry removed: {removed['path']}" if removed["removed"] else "no autostart entry to remove")
    return 0


# -- putting the app into the desktop session (`memories autostart`, `memories desktop`) -------
# The CLI calls these (it may import this entry point, never the desktop's modules); each
# returns the plain JSON-ready answer and imports its module only when it runs.


def autostart_enable(kind: str, home: Path | None) -> dict[str, Any]:
    """Write the login entry of ``kind`` that starts this install's tray (with ``home`` if given)."""
    from desktop import autostart

    return autostart.enable_entry(kind, home)


def autostart_disable(kind: str) -> dict[str, Any]:
    from desktop import autostart

    return autostart.disable_entry(kind)


def autostart_status() -> dict[str, Any]:
    """The entry path of each kind this platform reads, and whether it exists."""
    from desktop import autostart

    return autostart.entries_status()


def app_menu_install(home: Path | None) -> dict[str, Any]:
    from desktop import app_menu

    done = app_menu.install(home)
    return {"entry": str(done.entry), "icons": [str(p) for p in done.icons], "refreshed": done.refreshed}


def app_menu_uninstall() -> dict[str, Any]:
    from desktop import app_menu

    done = app_menu.uninstall()
    if done is None:
        return {"entry": str(app_menu.entry_path()), "removed": False, "icons": []}
    return {"entry": str(done.entry), "removed": True, "icons": [str(p) for p in done.icons]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="memories-tray", description="Memories tray icon and dashboard.")
    parser.add_argument("--home", help="data directory (default: $MEMORIES_HOME or the platform's)")
    add_tray_arguments(parser)
    args = parser.parse_args(argv)
    sys.exit(run_tray(resolve_home(args.home), args, explicit_home=args.home is not None))


if __name__ == "__main__":
    main()
