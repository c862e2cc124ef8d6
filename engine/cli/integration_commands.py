"""`memories autostart enable|disable|status` and `memories desktop install|uninstall` (SPEC DT-6):
put this install of the app into the user's desktop session.

The work is done by the desktop (desktop/autostart.py, desktop/app_menu.py) through its
stdlib-only entry point, desktop/tray/launcher.py (LY-1: the CLI may import a desktop entry
point, never its modules). Entries start this install's tray: `python -m
desktop.tray.launcher` from a venv, or `memories-tray` beside the app bundle's `memories`.
`--home` (or $MEMORIES_HOME) is written into them so the tray opens that data home.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.terminal_text import one_line

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    from desktop.tray.launcher import AUTOSTART_KINDS

    autostart = sub.add_parser("autostart", parents=[common], help="start the tray when you log in, or stop doing so")
    asub = autostart.add_subparsers(dest="autostart_command", metavar="SUBCOMMAND", parser_class=type(autostart), required=True)
    kind_help = "which entry: auto (XDG autostart on Linux, LaunchAgent on macOS, Startup folder on Windows) or one of them"
    p = asub.add_parser("enable", parents=[common], help="write the login entry that starts this install's tray")
    p.add_argument("--kind", choices=AUTOSTART_KINDS, default="auto", help=kind_help + "; systemd writes a user unit")
    p.set_defaults(func=cmd_autostart_enable)
    p = asub.add_parser("disable", parents=[common], help="remove the login entry")
    p.add_argument("--kind", choices=AUTOSTART_KINDS, default="auto", help=kind_help)
    p.set_defaults(func=cmd_autostart_disable)
    p = asub.add_parser("status", parents=[common], help="list the login entries and whether each is written")
    p.set_defaults(func=cmd_autostart_status)

    desktop = sub.add_parser("desktop", parents=[common], help="add Memories to the app menu (launcher and icons), or remove it")
    dsub = desktop.add_subparsers(dest="desktop_command", metavar="SUBCOMMAND", parser_class=type(desktop), required=True)
    p = dsub.add_parser("install", parents=[common], help="write the app-menu launcher and its icons for this user")
    p.set_defaults(func=cmd_desktop_install)
    p = dsub.add_parser("uninstall", parents=[common], help="remove the launcher and icons `desktop install` wrote")
    p.set_defaults(func=cmd_desktop_uninstall)


def _chosen_home(ctx: Context, args: argparse.Namespace) -> Path | None:
    """The data home to write into an entry: only one the user chose (else the tray's default)."""
    if getattr(args, "home", None) is not None or os.environ.get("MEMORIES_HOME"):
        return ctx.paths.home
    return None


def cmd_autostart_enable(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import autostart_enable

    done = autostart_enable(args.kind, _chosen_home(ctx, args))
    hint = "  (then: systemctl --user enable --now memories-tray)" if done["kind"] == "systemd" else ""
    ctx.emit(done, f"The tray starts at login: {one_line(str(done['path']))}{hint}")
    return 0


def cmd_autostart_disable(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import autostart_disable

    done = autostart_disable(args.kind)
    path = one_line(str(done["path"]))
    ctx.emit(done, f"Removed {path}" if done["removed"] else f"No login entry to remove ({path})")
    return 0


def cmd_autostart_status(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import autostart_status

    done = autostart_status()
    lines = [f"{e['kind']:<12} {'enabled' if e['enabled'] else '-':<8} {one_line(str(e['path']))}" for e in done["entries"]]
    ctx.emit(done, "\n".join(lines))
    return 0


def cmd_desktop_install(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import app_menu_install

    done = app_menu_install(_chosen_home(ctx, args))
    text = f"Memories is in the app menu: {one_line(str(done['entry']))} ({len(done['icons'])} icons)"
    ctx.emit(done, text)
    return 0


def cmd_desktop_uninstall(ctx: Context, args: argparse.Namespace) -> int:
    from desktop.tray.launcher import app_menu_uninstall

    done = app_menu_uninstall()
    entry = one_line(str(done["entry"]))
    ctx.emit(done, f"Removed {entry} and {len(done['icons'])} icons" if done["removed"] else f"No launcher to remove ({entry})")
    return 0
