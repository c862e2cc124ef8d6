"""`memories-tray` launcher. The tray itself lands with the desktop issue."""

from __future__ import annotations

import sys


def main() -> None:
    print("memories-tray: the tray is not built yet in this version; use `memories status`.", file=sys.stderr)
    sys.exit(2)
