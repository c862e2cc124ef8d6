"""DT-2 (issue 17): the xorg tray icon takes updates from other threads (the prober, menu
actions) while its loop redraws. pystray sent those on the loop's own X connection, and
python-xlib could leave the loop waiting forever for a reply the other thread took over:
a tray frozen mid-"Indexing…", its prober stuck behind it. This drives many updates from
a second thread into a real icon docked in a real tray host and needs all of them done."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.desktop.support import XSession

UPDATES = 400

SCRIPT = f"""
import threading
from desktop.tray.backend import load_pystray, xorg_icon_class
from desktop.status import TrayState
from desktop.tray.icons import render

pystray, backend = load_pystray("xorg")
assert backend == "xorg", backend
states = [TrayState.LOCKED, TrayState.UNLOCKED, TrayState.NOT_RESPONDING]
icon = xorg_icon_class(pystray)("threads", render(states[0]), "Memories")
done = []

def hammer() -> None:
    for i in range({UPDATES}):
        icon.title = f"Memories: unlocked; Indexing new items {{i:,}} of 4,000…"
        icon.icon = render(states[i % 3])  # each one redraws: a GetGeometry on the loop
    done.append(True)
    icon.stop()

def setup(icon) -> None:
    icon.visible = True
    threading.Thread(target=hammer, daemon=True).start()

icon.run(setup=setup)
print("updates done" if done else "stopped early")
"""


def test_updates_from_another_thread_never_freeze_the_xorg_icon(xsession: XSession, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    # A deadlock shows as a run that never ends; 240 s is far beyond what 400 updates take.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=xsession.env(), cwd=root, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "updates done"
