"""The tray process: pystray icon on the main thread, dashboard and prober beside it (DT-2).

Threads: main = pystray's loop; ``memories-prober`` = the bounded status prober;
``memories-dashboard`` = the aiohttp loop; menu actions that talk to the engine run on
short-lived worker threads. Nothing the engine does can block the icon or the page.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from desktop.dashboard.routes import DashboardContext
from desktop.dashboard.server import DashboardServer
from desktop.gateway import EngineGateway, lock_quietly
from desktop.prober import DEFAULT_DEADLINE, DEFAULT_INTERVAL, Probe, ProbeWorker
from desktop.status import Badges, TrayState, activity_text, delivery_text, tooltip_text, tray_state
from desktop.tray.approval_dialog import ApprovalDialogs
from desktop.tray.backend import choose_backend, load_pystray, xorg_icon_class
from desktop.tray.badges import read_badges
from desktop.tray.clipboard_link import copy_link
from desktop.tray.dialog_base import choose_toolkit
from desktop.tray.engine_launcher import start_engine
from desktop.tray.export_dialog import ExportDialogs
from desktop.tray.icons import render
from desktop.tray.import_dialog import ImportDialogs
from desktop.tray.menu import build_menu
from desktop.tray.notifier import TicketNotifier
from desktop.tray.password_dialog import DialogHost
from desktop.tray.screen_lock import ScreenLockWatcher
from desktop.tray.single_instance import TrayInstance
from desktop.tray.transcript_watcher import TranscriptWatcher
from desktop.tray.transfer import TransferJobs
from engine.config import Paths
from engine.settings import read_settings

__all__ = ["TrayOptions", "TrayApp"]

QUIT_ATTEMPTS = 3
QUIT_WAIT = 3.0


@dataclass(frozen=True)
class TrayOptions:
    home: Path
    backend: str | None = None
    port: int = 0
    start_engine: bool = True
    probe_interval: float = DEFAULT_INTERVAL
    probe_deadline: float = DEFAULT_DEADLINE
    verbose: bool = False
    # Quit (menu or dashboard) and the end of the process lock the vault unless told not to.
    lock_on_quit: bool = True


class TrayApp:
    def __init__(self, options: TrayOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.out = out
        self.state = TrayState.NOT_RUNNING
        # The menu's greyed first line: the running background job as text (issue 17), else
        # the cloud delivery attention item (CL-5); "" when there is neither.
        self.activity = ""
        self.backend = "none"
        self.icon: Any = None
        self.prober = ProbeWorker(options.home, interval=options.probe_interval, deadline=options.probe_deadline)
        self.gateway = EngineGateway(Paths(options.home).socket)
        self.server: DashboardServer | None = None
        self._state_lock = threading.Lock()
        # pystray's xorg backend shares one X connection between the caller's thread and
        # its loop; serialising our icon calls (updates, stop) avoids interleaved requests.
        self._icon_lock = threading.Lock()
        self._quitting = threading.Event()
        self._stopped = threading.Event()
        self.notifier = TicketNotifier(self.gateway.pending_tickets, self._notify)
        self.dialogs: DialogHost | None = None
        self._last_probe: Probe | None = None
        self._first_run_offered = False
        self.badges = Badges()
        self._badge_read = threading.Lock()  # at most one badge read in flight
        # A badge read answered just before a lock can land after the lock cleared the badges;
        # each clear starts a new epoch and a read from an older epoch is dropped.
        self._badge_lock = threading.Lock()
        self._badge_epoch = 0
        # DT-9: logind / ScreenSaver signals lock the vault when the setting says so (Linux).
        self.screen_lock = ScreenLockWatcher(self._on_screen_lock, self._say, verbose=options.verbose)
        # AG-11: the fallback capture while unlocked (desktop/tray/transcript_watcher.py).
        self.transcript_watcher = TranscriptWatcher(options.home, self._say, verbose=options.verbose)

    def run(self) -> int:
        instance = TrayInstance(Paths(self.options.home).socket)
        if not instance.claim(self.open_dashboard):
            holder = f" (pid {instance.holder_pid})" if instance.holder_pid else ""
            self._say(f"memories tray: already running for this data home{holder}; showing its dashboard")
            return 0
        try:
            return self._run_tray()
        finally:
            instance.close()

    def _run_tray(self) -> int:
        pystray, self.backend = load_pystray(choose_backend(self.options.backend))
        socket_path = Paths(self.options.home).socket
        approvals = ApprovalDialogs(socket_path, choose_toolkit(self.backend), self._say)
        jobs = TransferJobs(self.options.home, self._say)
        exports = ExportDialogs(jobs, choose_toolkit(self.backend), self._say)
        imports = ImportDialogs(jobs, choose_toolkit(self.backend), self._say)
        ctx = DashboardContext(
            self.prober,
            self.gateway,
            mode="tray",
            backend=self.backend,
            on_quit=self.quit,
            quit_locks=self.options.lock_on_quit,
            approver=approvals.approve,  # DT-6: the page's Approve opens the tray's window
            exporter=exports.export,  # DT-9: the page's Export opens the tray's window (folder, password)
            importer=imports.import_,  # DT-9: the page's Import opens the tray's window (file or folder)
            transfer_state=jobs.state,
        )
        self.server = DashboardServer(ctx, self.options.port)
        self.server.start_in_thread()
        self._say(f"memories tray: backend {self.backend}")
        self.dialogs = DialogHost(socket_path, self.backend, self._say, self.prober.refresh)
        icon_class = xorg_icon_class(pystray) if self.backend == "xorg" else pystray.Icon
        actions = {"open": self.open_dashboard, "unlock": self.open_unlock, "lock": self.lock_now}
        menu = build_menu(
            pystray,
            lambda: self.state,
            {**actions, "start": self.start_engine, "quit": self.quit},
            status=lambda: self.activity,
        )
        self.icon = icon_class("memories", render(self.state), tooltip_text(self.state), menu)
        self.prober.subscribe(self._on_probe)
        self._quit_on_signals()
        # At a terminal (scripts/run, a shell) the link is the way in where no browser starts;
        # never into a log file (an autostart's), since it carries the dashboard's token.
        if self.options.verbose or _is_terminal(self.out):
            self._say(f"memories tray: dashboard {self.server.url}")
        try:
            self.icon.run(setup=self._setup)
        finally:
            self._stopped.set()
            self._shutdown()
        return 0

    # -- lifecycle ---------------------------------------------------------------------
    def _setup(self, icon: Any) -> None:
        icon.visible = True
        self.prober.start()
        if sys.platform.startswith("linux"):
            self.screen_lock.start()
        if self.options.start_engine:
            self._background(self._start_if_needed)

    def _start_if_needed(self) -> None:
        probe = self.prober.wait_for(lambda p: p.state != "starting", self.options.probe_deadline + 5)
        if probe is not None and probe.state == "not_running":
            self.start_engine_now()

    def quit(self) -> None:
        """Callable from any thread (menu, dashboard); never blocks the caller."""
        if not self._quitting.is_set():
            self._quitting.set()
            self._background(self._stop_icon)

    def _quit_on_signals(self) -> None:
        """A logout's SIGTERM/SIGHUP quits like the menu's Quit (and so locks by default)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            signal.signal(signum, lambda *_: self.quit())
            if self.backend in ("gtk", "appindicator"):
                # GTK's loop runs in C and would hold the Python handler until the next event;
                # GLib's own source runs the quit from inside the loop.
                with contextlib.suppress(ImportError, AttributeError, ValueError):
                    from gi.repository import GLib

                    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signum, self._quit_from_glib)

    def _quit_from_glib(self, *_: object) -> bool:
        self.quit()
        return True  # keep the source: a second signal after a stuck quit still reaches us

    def _stop_icon(self) -> None:
        for _ in range(QUIT_ATTEMPTS):
            icon = self.icon
            # Bounded: a redraw stuck in the toolkit must not hold Quit past its fallback below.
            if icon is not None and self._icon_lock.acquire(timeout=QUIT_WAIT):
                try:
                    icon.stop()
                finally:
                    self._icon_lock.release()
            if self._stopped.wait(QUIT_WAIT):
                return
        # The toolkit loop ignored every stop request: Quit must still quit.
        self._say("memories tray: the tray loop did not stop; exiting")
        self._shutdown()
        os._exit(0)

    def _shutdown(self) -> None:
        self.screen_lock.stop()
        self.prober.stop(join_timeout=0)
        self.transcript_watcher.close()
        if self.server is not None:
            self.server.stop()
        if self.options.lock_on_quit:
            lock_quietly(self.gateway)

    # -- state -------------------------------------------------------------------------
    def _on_probe(self, probe: Probe) -> None:
        self._last_probe = probe
        if not self._quitting.is_set():
            self.transcript_watcher.update(probe.state)
        if probe.state == "uninitialized" and not self._first_run_offered and not self._quitting.is_set():
            self._first_run_offered = True  # first run: offer to create the vault, once per tray start
            self.open_unlock()
        if probe.status.get("attention") and not self._quitting.is_set():
            self._background(lambda: self.notifier.check(True))  # a new ticket keeps "attention"
        if probe.state == "unlocked":
            if not self._quitting.is_set() and self._badge_read.acquire(blocking=False):
                epoch = self._badge_epoch
                self._background(lambda: self._read_badges(epoch))
        else:
            with self._badge_lock:
                self._badge_epoch += 1
                had_badges = self.badges != Badges()
                self.badges = Badges()  # locked: remote sessions are gone; nothing to badge
            if had_badges:
                self._show(tray_state(probe), probe, force=True)
                return
        self._show(tray_state(probe), probe)

    def _read_badges(self, epoch: int) -> None:
        try:
            badges = read_badges(Paths(self.options.home).socket)
        finally:
            self._badge_read.release()
        with self._badge_lock:
            if epoch != self._badge_epoch or badges is None or badges == self.badges:
                return  # stale (the vault locked since it was asked), unknown, or nothing new
            self.badges = badges
        if self.options.verbose:
            self._say(f"memories tray: badges tickets={badges.tickets} sync_problem={str(badges.sync_problem).lower()}")
        # Redraw only: this thread must not set a state it read before a probe changed it
        # (a lock seen meanwhile would be drawn over with the unlocked icon).
        self._redraw()

    def _show(self, new: TrayState, probe: Probe | None, force: bool = False) -> None:
        activity = (activity_text(probe) or delivery_text(probe)) if probe is not None else ""
        with self._state_lock:
            if new is self.state and activity == self.activity and not force:
                return
            changed = new is not self.state
            self.state = new
            self.activity = activity
        if self.options.verbose and changed:
            self._say(f"memories tray: state {new.value}")
        self._redraw()

    def _redraw(self) -> None:
        """Draw the icon from the state and badges as they are now, read under the icon lock:
        the prober's thread and the badge reader both draw, and the last drawing must show the
        newest state, not the one a slower thread read before it."""
        icon = self.icon
        if icon is None or self._quitting.is_set():
            return
        with self._icon_lock:
            with self._state_lock:
                state, probe, badges = self.state, self._last_probe, self.badges
            icon.icon = render(state, badges=badges)
            icon.title = tooltip_text(state, probe, badges)
            if getattr(icon, "HAS_MENU", False):
                icon.update_menu()

    # -- menu actions (never block the icon's thread) ------------------------------------
    def open_dashboard(self) -> None:
        server = self.server
        if server is not None:
            url = server.url
            self._background(lambda: self._open_url(url))

    def _open_url(self, url: str) -> None:
        """Open the dashboard; where no browser starts, the link is printed, copied and notified (issue 31)."""
        try:
            opened = webbrowser.open(url)
        except Exception:  # a broken $BROWSER entry is the same as none
            opened = False
        if opened:
            return
        copied = copy_link(url)
        where = " (copied to the clipboard)" if copied else ""
        # Printed whatever --verbose says: this is the one place the person can find the link.
        self._say(f"memories tray: no browser could be started; open {url}{where}")
        self._desktop_notify("Memories dashboard", f"No browser could be started. Open {url}{where}.")

    def open_unlock(self) -> None:
        """Unlock… (or, with no vault yet, Create): the tray's own password window, never the page."""
        probe = self._last_probe
        if self.dialogs is not None:
            self.dialogs.open(first_run=probe is not None and probe.state == "uninitialized")

    def lock_now(self) -> None:
        self._background(self._lock)

    def _on_screen_lock(self, reason: str) -> None:
        """A listener thread heard the screen lock or a suspend (DT-9): lock if the setting is on.

        The setting is read now, from config.toml, so a change made a moment ago counts; the
        lock runs on this (listener) thread at once, before a suspend goes ahead."""
        if not read_settings(Paths(self.options.home).config_file)["lock_on_screen_lock"]:
            if self.options.verbose:
                self._say(f"memories tray: {reason}; lock_on_screen_lock is off, the vault stays as it is")
            return
        probe = self._last_probe
        if probe is not None and probe.state in ("not_running", "uninitialized"):
            return  # nothing unlocked to lock
        self._say(f"memories tray: {reason}; locking the vault")
        self._lock()

    def _lock(self) -> None:
        try:
            self.gateway.lock()
        except Exception as exc:  # the next probe shows the engine's real state
            self._say(f"memories tray: lock failed ({getattr(exc, 'code', type(exc).__name__)})")
        self.prober.refresh()

    def start_engine(self) -> None:
        self._background(self.start_engine_now)

    def start_engine_now(self) -> None:
        error = start_engine(self.options.home)
        if error is not None:
            self._say(f"memories tray: could not start the engine ({error})")
        self.prober.refresh()

    def _notify(self, title: str, message: str) -> None:
        """A ticket's desktop notification (the notifier calls this)."""
        self._say("memories tray: a remote-exec ticket waits for approval")
        self._desktop_notify(title, message)

    def _desktop_notify(self, title: str, message: str) -> None:
        """A desktop notification where the backend has one (GTK/AppIndicator use D-Bus)."""
        icon = self.icon
        if icon is None or not getattr(icon, "HAS_NOTIFICATION", False):
            return
        try:
            with self._icon_lock:
                icon.notify(message, title)
        except Exception as exc:  # no notification service on this session: the icon still says "attention"
            self._say(f"memories tray: notification failed ({type(exc).__name__})")

    def _background(self, fn: Callable[[], object]) -> None:
        threading.Thread(target=fn, name="memories-tray-action", daemon=True).start()

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except (OSError, ValueError):  # a closed stream
        return False
