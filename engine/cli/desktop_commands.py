"""`memories tray` and `memories dashboard` (SPEC DT-2, DT-5).

Their options come from the desktop's stdlib-only launcher (desktop/tray/launcher.py);
desktop code (pystray, Pillow, aiohttp) is imported only when one of these commands
runs, so every other command keeps the CLI's lean start.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.context import Context, UsageError

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    # The desktop owns its options; its launcher is stdlib-only, so `--help` stays lean (LY-1:
    # the CLI may import a desktop entry point, the desktop never imports the CLI).
    from desktop.tray.launcher import add_dashboard_arguments, add_tray_arguments

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
        lock_on_quit=not args.keep_unlocked,
    )
