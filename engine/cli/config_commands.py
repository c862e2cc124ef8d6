"""`memories config [show] | get NAME | set NAME VALUE`: the settings people change (DT-9).

The engine reads and writes them (``settings_get`` / ``settings_set``), so a change here is
live in the engine and the tray at once, audited, and the dashboard's Settings page shows the
same values: both go through engine/settings.py's table.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.context import Context
from engine.terminal_text import one_line

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    from engine.settings import SETTINGS

    names = ", ".join(SETTINGS)
    config = sub.add_parser("config", parents=[common], help="show or change settings (idle lock, clipboard, theme …)")
    csub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND", parser_class=type(config))
    config.set_defaults(func=cmd_config_show)
    p = csub.add_parser("show", parents=[common], help="every setting, its value and where it is stored")
    p.set_defaults(func=cmd_config_show)
    p = csub.add_parser("get", parents=[common], help="one setting's value")
    p.add_argument("name", help=f"one of {names}")
    p.set_defaults(func=cmd_config_get)
    p = csub.add_parser("set", parents=[common], help="change one setting (takes effect at once)")
    p.add_argument("name", help=f"one of {names}")
    p.add_argument("value", help="a number, on/off, or a theme (system, light, dark)")
    p.set_defaults(func=cmd_config_set)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return one_line(str(value))


def cmd_config_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "settings_get"})
    settings = result.get("settings", {})
    width = max((len(name) for name in settings), default=0)
    lines = [f"{name:<{width}}  {_text(s['value'])}" for name, s in settings.items()]
    lines.append(f"Stored in {one_line(str(result.get('config_file', '')))}; start at login: `memories autostart status`.")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_config_get(ctx: Context, args: argparse.Namespace) -> int:
    from engine.settings import spec

    name = spec(args.name).name  # an unknown name is refused before asking the engine
    setting = ctx.request({"op": "settings_get"})["settings"][name]
    ctx.emit({"name": name, **setting}, _text(setting["value"]))
    return 0


def cmd_config_set(ctx: Context, args: argparse.Namespace) -> int:
    from engine.settings import check

    value = check(args.name, args.value)  # typed before it travels; the engine checks again
    result = ctx.request({"op": "settings_set", "name": args.name, "value": value})
    where = one_line(str(result.get("config_file", "")))
    ctx.emit(result, f"{args.name} = {_text(result['value'])} (was {_text(result['previous'])}; in {where})")
    return 0
