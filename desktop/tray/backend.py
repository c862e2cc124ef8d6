"""Which pystray backend to use, imported lazily (SPEC DT-2; RECIPES §2).

On Linux a real user needs a menu, which only the AppIndicator and GTK backends have
(they need PyGObject, the ``[gtk]`` extra). The xorg backend has no menu; there the icon's
default action opens the dashboard, which offers Lock and Quit. pystray fixes its backend
at first import, so the choice is made here, once, before importing it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__all__ = ["LINUX_ORDER", "choose_backend", "load_pystray", "xorg_icon_class"]

LINUX_ORDER = ("appindicator", "gtk", "xorg")


def _gi_has(namespace: str, version: str) -> bool:
    """True if PyGObject and the typelib exist; does not import Gtk (no display needed)."""
    try:
        import gi  # type: ignore[import-untyped,import-not-found,unused-ignore]

        gi.require_version(namespace, version)
    except (ImportError, ValueError):
        return False
    return True


def available_backends() -> list[str]:
    if sys.platform == "darwin":
        return ["darwin"]
    if sys.platform == "win32":
        return ["win32"]
    found = []
    if _gi_has("Gtk", "3.0"):
        if _gi_has("AyatanaAppIndicator3", "0.1") or _gi_has("AppIndicator3", "0.1"):
            found.append("appindicator")
        found.append("gtk")
    found.append("xorg")
    return found


def choose_backend(requested: str | None = None) -> str:
    """``--backend`` wins, then ``PYSTRAY_BACKEND``, then the best one available."""
    if requested:
        return requested
    env = os.environ.get("PYSTRAY_BACKEND")
    if env:
        return env
    return available_backends()[0]


def load_pystray(backend: str) -> tuple[Any, str]:
    """Import pystray with ``backend``, falling back along the Linux order on ImportError.

    Returns the module and the backend actually loaded.
    """
    order = [backend] + [b for b in LINUX_ORDER if b != backend and sys.platform.startswith("linux")]
    errors = []
    for name in order:
        os.environ["PYSTRAY_BACKEND"] = name
        try:
            # pystray picks and imports its backend while being imported.
            module = importlib.import_module("pystray")
        except Exception as exc:  # Xlib raises DisplayNameError, gi raises ValueError/GError
            errors.append(f"{name}: {type(exc).__name__}")
            for loaded in [m for m in sys.modules if m == "pystray" or m.startswith("pystray.")]:
                del sys.modules[loaded]
            continue
        if name == "appindicator":
            _quiet_known_gdk_critical()
        return module, name
    raise RuntimeError("no tray backend could be loaded (" + "; ".join(errors) + ")")


def xorg_icon_class(pystray: Any) -> Any:
    """pystray 0.19.5's xorg icon, with four fixes: it selects ButtonPress, so a click runs
    the default action (pystray issue #151); it writes the tooltip as UTF-8; updates asked
    from other threads never touch the loop's X connection; and an icon change redraws
    without asking the tray host to dock the window again (see below)."""
    import sys
    import threading

    import Xlib.display
    import Xlib.protocol.event
    from pystray import _xorg
    from Xlib import X

    _wake_lock = threading.Lock()
    _wake_displays: dict[int, Any] = {}

    class ClickableXorgIcon(_xorg.Icon):  # type: ignore[misc]
        def _create_window(self) -> Any:
            window = super()._create_window()
            window.change_attributes(event_mask=X.ExposureMask | X.StructureNotifyMask | X.ButtonPressMask)
            return window

        def _update_icon(self) -> None:
            # pystray asks the tray host to dock the window again on every icon change. trayer
            # takes each request as a new embedding of the same window and, when two came close
            # together on a busy machine, left the icon in a 1-pixel-wide slot: the lock was
            # drawn where nobody could see it. Embedded already: redraw only. Not (yet)
            # embedded — a first dock request the host missed while it started — ask again.
            if self._systray_manager is None or not self._embedded():
                super()._update_icon()
                return
            self._icon_data = None
            self._draw()
            self._icon_valid = True

        def _embedded(self) -> bool:
            """The tray host has taken the window in (XEMBED reparents it away from the root)."""
            try:
                parent = self._window.query_tree().parent
            except Exception:  # the window or its host went away: dock again
                return False
            return bool(parent) and parent.id != self._display.screen().root.id

        def _rewrite_implementation(self, *methods: Any) -> None:
            # pystray runs icon updates asked from other threads on its loop by sending the
            # loop a ClientMessage, and it sends and flushes that on the loop's own Display
            # connection from the asking thread. python-xlib can then leave the loop waiting
            # forever for a reply (a GetGeometry while redrawing) that the other thread's
            # flush took over: seen as a tray whose prober froze mid-"Indexing…". Here the
            # message leaves on a connection only non-loop threads use, so the loop's
            # connection is only ever touched by the loop.
            atoms = [self._display.intern_atom(f"_PYSTRAY_{m.__name__.upper()}") for m in methods]
            handlers: dict[int, Any] = {}
            for method, atom in zip(methods, atoms, strict=True):
                handlers[atom] = self._run_and_report(method)
                setattr(self, method.__name__, self._asked_from_any_thread(method, atom))
            self._message_handlers[X.ClientMessage] = lambda event: handlers.get(event.client_type, lambda: None)()

        def _run_and_report(self, method: Any) -> Any:
            def run() -> None:
                try:
                    method()
                    self._queue.put(True)
                except Exception:
                    self._queue.put(sys.exc_info())

            return run

        def _asked_from_any_thread(self, method: Any, atom: int) -> Any:
            def call() -> None:
                if threading.current_thread().ident == self._thread.ident:
                    method()
                    return
                with _wake_lock:
                    wake = _wake_displays.get(id(self))
                    if wake is None:
                        wake = _wake_displays[id(self)] = Xlib.display.Display(self._display.get_display_name())
                    target = wake.create_resource_object("window", self._window.id)
                    message = Xlib.protocol.event.ClientMessage(
                        type=X.ClientMessage, window=self._window.id, client_type=atom, data=(32, (X.CurrentTime, 0, 0, 0, 0))
                    )
                    target.send_event(message, event_mask=X.NoEventMask)
                    wake.flush()
                result = self._queue.get()
                if result is not True:
                    raise result[1].with_traceback(result[2])

            return call

        def _update_title(self) -> None:
            # pystray writes the tooltip as WM_NAME, a Latin-1 STRING: a title with "…" or a
            # CJK character raises in python-xlib and the name never changes. Write the
            # UTF-8 _NET_WM_NAME that tray hosts read first, and a Latin-1 WM_NAME beside it.
            title = str(self.title or "")
            display = self._display
            self._window.change_text_property(display.get_atom("_NET_WM_NAME"), display.get_atom("UTF8_STRING"), title)
            self._window.set_wm_name(title.replace("…", "...").encode("latin-1", "replace"))

    return ClickableXorgIcon


# libappindicator, drawing its icon on an XEmbed tray (its GtkStatusIcon fallback, e.g. under
# trayer or tint2), trips this GDK assertion once at every start: GTK's own bug, harmless, and
# it alarmed people reading the terminal (issue 31). Only this exact message is dropped.
KNOWN_GDK_CRITICAL = "gdk_window_thaw_toplevel_updates: assertion 'window->update_and_descendants_freeze_count > 0'"


def _quiet_known_gdk_critical() -> None:
    """Route GDK's critical messages through a filter that drops only :data:`KNOWN_GDK_CRITICAL`."""
    from gi.repository import GLib  # type: ignore[import-untyped,import-not-found,unused-ignore]

    def handler(domain: str, level: Any, message: str, data: object = None) -> None:
        if message.startswith(KNOWN_GDK_CRITICAL):
            return
        GLib.log_default_handler(domain, level, message, data)

    levels = GLib.LogLevelFlags.LEVEL_CRITICAL | GLib.LogLevelFlags.FLAG_FATAL | GLib.LogLevelFlags.FLAG_RECURSION
    GLib.log_set_handler("Gdk", levels, handler, None)
