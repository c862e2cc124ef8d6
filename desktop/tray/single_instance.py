"""One tray per data home: a second start shows the first tray's dashboard and exits.

Users start the tray from the app menu, from autostart and from ``scripts/run``; without
this, each start added another icon, another dashboard server and another prober. The first
tray holds an exclusive lock on ``tray.lock`` beside the engine socket (inside the same
private 0700 directory) for as long as it runs, and listens on ``tray.sock`` there. A later
start that cannot take the lock connects and sends ``open``; the first tray opens its
dashboard. Nothing else is accepted, so a peer gains nothing it could not get by clicking
the icon, and the dashboard's URL (which carries its token) never leaves the first process.

POSIX only: on Windows every start gets its own tray, as before (documented).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from engine.errors import MemoriesError
from engine.ipc.server import prepare_socket_dir

__all__ = ["TrayInstance", "OPEN_REQUEST"]

OPEN_REQUEST = b"open\n"
_CONNECT_WAIT = 5.0  # the first tray may hold the lock a moment before it listens
# How long either side waits on the other over the instance socket. Both are local, but on a
# loaded machine a busy tray's accept thread can take seconds to get the GIL: a short bound
# made the later start give up and ask again, and the first tray opened its dashboard twice.
_PEER_WAIT = 30.0


class TrayInstance:
    """The claim of one data home's tray. ``claim`` says whether this process is the tray."""

    def __init__(self, engine_socket: Path) -> None:
        self.directory = engine_socket.parent
        self.lock_path = self.directory / "tray.lock"
        self.socket_path = self.directory / "tray.sock"
        self._lock_file: IO[bytes] | None = None
        self._server: socket.socket | None = None
        self.holder_pid: int | None = None

    def claim(self, on_open: Callable[[], None]) -> bool:
        """True: this process is the data home's tray and ``on_open`` runs whenever a later
        start asks. False: another tray runs; it has been asked to show its dashboard."""
        if sys.platform == "win32":
            return True
        import fcntl

        self._private_directory()
        lock_file = open(self.lock_path, "a+b")  # noqa: SIM115 (held for the process's life)
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            text = lock_file.read().decode("ascii", "replace").strip()
            self.holder_pid = int(text) if text.isdigit() else None
            lock_file.close()
            self._ask_first_tray()
            return False
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(str(os.getpid()).encode("ascii"))
        lock_file.flush()
        self._lock_file = lock_file
        self._listen(on_open)
        return True

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.close()
            with contextlib.suppress(OSError):
                self.socket_path.unlink()
        lock_file, self._lock_file = self._lock_file, None
        if lock_file is not None:
            lock_file.close()  # releases the lock

    # -- the first tray ----------------------------------------------------------------
    def _private_directory(self) -> None:
        """The engine socket's directory, made (or checked) exactly as the engine does: 0700,
        ours, not a symbolic link; the tray may start before the engine has made it."""
        try:
            prepare_socket_dir(self.directory)
        except MemoriesError as exc:
            raise RuntimeError(f"{self.directory}: {exc.message}") from None

    def _listen(self, on_open: Callable[[], None]) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a socket left by a tray that crashed; we hold the lock
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(os.fspath(self.socket_path))
        server.listen(4)
        self._server = server
        threading.Thread(target=self._serve, args=(server, on_open), name="memories-tray-instance", daemon=True).start()

    def _serve(self, server: socket.socket, on_open: Callable[[], None]) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed at quit
            with conn:
                conn.settimeout(_PEER_WAIT)
                try:
                    request = conn.recv(len(OPEN_REQUEST))
                except OSError:
                    continue
                if request == OPEN_REQUEST:
                    on_open()
                    with contextlib.suppress(OSError):
                        conn.sendall(b"ok\n")

    # -- a later start -----------------------------------------------------------------
    def _ask_first_tray(self) -> bool:
        end = time.monotonic() + _CONNECT_WAIT
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(_PEER_WAIT)
                try:
                    conn.connect(os.fspath(self.socket_path))
                except OSError:  # not listening yet: try again, bounded
                    if time.monotonic() >= end:
                        return False
                    time.sleep(0.1)
                    continue
                # Asked once: never again (a second request would open a second dashboard).
                try:
                    conn.sendall(OPEN_REQUEST)
                    return conn.recv(3) == b"ok\n"
                except OSError:
                    return False
