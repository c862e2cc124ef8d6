"""The tray's GTK window frame (desktop/tray/dialog_base.py) as a person first sees it, under Xvfb:
the password field has the focus and no shown value is selected (GTK selects the whole text of
the first selectable label it focuses, which made the approval window open with its target
highlighted as if chosen)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.desktop.support import XSession
from tests.desktop.test_tray_unlock import _require_toolkit

ROOT = Path(__file__).resolve().parents[2]

# Builds one form with build_gtk, waits for the window to be drawn (an event, not a delay),
# then reports each selectable label's selection and which widget has the focus.
_SHOW = r"""
import json, sys
from gi.repository import GLib, Gtk
from desktop.tray.dialog_base import Form, Row, Reply, build_gtk

form = Form(
    title="Frame under test",
    intro="Check the values, then type the password.",
    rows=[Row("Target", "text", "echo"), Row("Fingerprint", "text", "aa6a05f4", monospace=True),
          Row("Vault password", "secret")],
    ok="Approve", working=None, act=lambda values: None, answered=lambda answer: Reply(close=True),
)
win = build_gtk(form)

def labels(widget):
    if isinstance(widget, Gtk.Label) and widget.get_selectable():
        yield widget
    if isinstance(widget, Gtk.Container):
        for child in widget.get_children():
            yield from labels(child)

def report(*_):
    focus = win.get_focus()
    print(json.dumps({
        "selected": {label.get_text(): bool(label.get_selection_bounds()[0]) for label in labels(win)},
        "focus_is_password": isinstance(focus, Gtk.Entry) and not focus.get_visibility(),
    }), flush=True)
    Gtk.main_quit()
    return False

# After the first frame is drawn and the loop is idle again, the window is as a person sees it.
win.connect("draw", lambda *_: GLib.idle_add(report) and False)
GLib.timeout_add_seconds(120, lambda: sys.exit("the window was never drawn"))
Gtk.main()
"""


def test_the_gtk_window_opens_with_the_password_focused_and_nothing_selected(xsession: XSession) -> None:
    """DT-6: the approval frame opens on its password field, with no shown value selected."""
    _require_toolkit("gtk")
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{_SHOW}"],
        env=xsession.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["selected"] == {"echo": False, "aa6a05f4": False}, seen
    assert seen["focus_is_password"] is True
