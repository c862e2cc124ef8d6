"""Copy the dashboard link when no browser could be started (issue 31).

The platform's own clipboard tool (wl-copy, xclip, xsel, pbcopy, clip), the same tools the
CLI's `copy` uses (engine/cli/clipboard.py; a surface may not import another surface), so
the tray adds no dependency. The link carries the dashboard's per-launch token, not a vault
secret: it opens only the dashboard's fixed surface, from this machine, while this tray
runs; it is not cleared later.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

__all__ = ["copy_link"]

_TIMEOUT = 10


def _tools() -> list[list[str]]:
    if sys.platform == "darwin":
        return [["pbcopy"]]
    if sys.platform == "win32":
        return [["clip"]]
    tools = []
    if os.environ.get("WAYLAND_DISPLAY"):
        tools.append(["wl-copy"])
    if os.environ.get("DISPLAY"):
        tools += [["xclip", "-selection", "clipboard", "-i"], ["xsel", "--clipboard", "--input"]]
    return tools


def copy_link(url: str) -> bool:
    """True when a clipboard tool took ``url``; False where none is present or works."""
    for tool in _tools():
        path = shutil.which(tool[0])
        if path is None:
            continue
        try:
            # xclip forks a child that keeps the selection: it must not hold our pipes open.
            quiet = subprocess.DEVNULL
            proc = subprocess.Popen([path, *tool[1:]], stdin=subprocess.PIPE, stdout=quiet, stderr=quiet)
            proc.communicate(url.encode("utf-8"), timeout=_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return True
    return False
