"""``memories center``: the daemon side's actions (engine/cli/center_client_commands.py).

The Center's own actions (serve, admin, standby, promote) are added here by the Center
server's work; this module only gathers the parsers.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli import center_client_commands


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("center", parents=[common], help="a team Center: apply its tickets, read its key")
    actions = p.add_subparsers(dest="center_command", metavar="ACTION", parser_class=type(p))
    center_client_commands.add_actions(actions, common)
    p.set_defaults(func=lambda ctx, args: (p.print_help(), 2)[1])
