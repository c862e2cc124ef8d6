"""`memories tray` and `memories dashboard` (SPEC DT-2, DT-5).

Desktop code (pystray, Pillow, aiohttp) is imported only when one of these commands
runs, so every other command keeps the CLI's lean start.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.context import Context, UsageError

__all__ = ["register", "add_tray_arguments", "add_dashboard_arguments"]


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


def add_tray_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument(
        "--backend",
        choices=("appindicator", "gtk", "xorg", "darwin", "win32"),
        help="pystray backend (default: appindicator, then gtk, then xorg on Linux)",
    )
    p.add_argument("--no-start-engine", action="store_true", help="do not start the engine if it is not running")
    p.add_argument("--verbose", action="store_true", help="print the backend, the dashboard link and state changes")
    autostart = p.add_mutually_exclusive_group()
    kinds = ("auto", "xdg", "systemd", "launchagent", "windows")
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


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tray", parents=[common], help="run the system tray icon and the dashboard")
    add_tray_arguments(p)
    p.set_defaults(func=cmd_tray)
    p = sub.add_parser("dashboard", parents=[common], help="run the loopback dashboard without a tray icon")
    add_dashboard_arguments(p)
    p.set_defaults(func=cmd_dashboard)


def cmd_tray(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import run_tray

    return run_tray(ctx.paths.home, args, explicit_home=getattr(args, "home", None) is not None)


def cmd_dashboard(ctx: Context, args: argparse.Namespace) -> int:
    try:
        from desktop.dashboard.standalone import run_dashboard
    except ImportError as exc:  # desktop dependencies missing in a minimal install
        raise UsageError(f"the dashboard needs the desktop dependencies ({exc.name})") from None
    return run_dashboard(
        ctx.paths.home,
        port=args.port,
        open_browser=not args.no_browser,
        probe_interval=args.probe_interval,
        probe_deadline=args.probe_deadline,
        json_output=ctx.json_output,
    )
