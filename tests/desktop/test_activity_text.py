"""Issue 17: the tray says what the engine is doing (SPEC DT-1, DT-4), from the prober's
sanitized activity only: "Indexing 3,000 of 10,000…", "Checking signatures…"; locked, nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from desktop.prober import Probe, sanitize
from desktop.status import TOOLTIP_CHARS, TrayState, activity_text, tooltip_text, tray_state


def unlocked(*jobs: dict[str, object]) -> Probe:
    return sanitize({"state": "unlocked", "jobs": list(jobs)})


def test_activity_text_for_each_job() -> None:
    """DT-4: counted jobs say how far they are; uncounted ones say what they do."""
    build = {"name": "search-build", "state": "running", "done": 3000, "total": 10000}
    assert activity_text(unlocked(build)) == "Indexing 3,000 of 10,000…"
    verify = {"name": "verify", "state": "running", "done": 0, "total": None}
    assert activity_text(unlocked(verify)) == "Checking signatures…"
    # Steps, not items: said without counts.
    assert activity_text(unlocked({**verify, "done": 512, "total": 3000})) == "Checking signatures…"
    assert activity_text(unlocked({"name": "sync", "state": "running", "done": 0, "total": 1})) == "Syncing…"
    catch_up = {"name": "search-catch-up", "state": "running", "done": 256, "total": 4000}
    assert activity_text(unlocked(catch_up)) == "Indexing new items 256 of 4,000…"
    cycle = {"name": "memory-cycle", "state": "running", "done": 0, "total": None}  # AG-9, after an import
    assert activity_text(unlocked(cycle)) == "Distilling new conversation turns…"
    assert activity_text(unlocked()) == ""
    assert activity_text(unlocked({**build, "state": "done"})) == ""


def test_tooltip_carries_activity_and_stays_one_bounded_line() -> None:
    """DT-4: the tooltip adds the running job; locked says only "locked"."""
    probe = unlocked({"name": "search-build", "state": "running", "done": 3000, "total": 10000})
    text = tooltip_text(tray_state(probe), probe)
    assert text == "Memories: unlocked; Indexing 3,000 of 10,000…"
    assert "\n" not in text and len(text) <= TOOLTIP_CHARS
    # A hand-made probe that skipped sanitizing still cannot put its own words in the tooltip.
    forged = Probe("unlocked", {"activity": [{"job": "rm -rf /\nEvil", "done": 1, "total": 2}]})
    assert tooltip_text(TrayState.UNLOCKED, forged) == "Memories: unlocked"
    locked = sanitize({"state": "locked", "jobs": [{"name": "verify", "state": "running", "done": 1, "total": 2}]})
    assert tooltip_text(tray_state(locked), locked) == "Memories: locked"


def test_tray_menu_shows_activity_as_a_greyed_first_line() -> None:
    """DT-4: the menu's first line is the running job while there is one, hidden otherwise
    (real pystray, its dummy backend, in a child process so this one keeps no backend)."""
    script = """
import json, pystray
from desktop.status import TrayState
from desktop.tray.menu import build_menu
text = [""]
actions = {k: (lambda: None) for k in ("open", "unlock", "lock", "start", "quit")}
menu = build_menu(pystray, lambda: TrayState.UNLOCKED, actions, status=lambda: text[0])
seen = [[(i.text, i.visible, i.enabled) for i in menu.items][0]]
text[0] = "Indexing 3,000 of 10,000…"
seen.append([(i.text, i.visible, i.enabled) for i in menu.items][0])
print(json.dumps(seen))
"""
    env = {**os.environ, "PYSTRAY_BACKEND": "dummy"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True)
    idle, busy = json.loads(out.stdout)
    assert idle[1] is False  # no job: the line is hidden
    assert busy == ["Indexing 3,000 of 10,000…", True, False]  # shown, never clickable
