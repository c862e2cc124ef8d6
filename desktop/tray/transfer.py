"""Export from the window (SPEC DT-9): the tray runs `memories sudo` then `memories export` itself.

The engine has no export job: the CLI pages through the engine and writes the files. So the
tray runs the same CLI, as a person would in a terminal, and reports the job's state for
``/api/status``. Elevation (API-3) belongs to the caller's *parent* process when it has no
terminal (engine/ipc/peer.py ``caller_namespace``): the two commands run as children of one
short-lived ``sh`` started in a new session (no controlling terminal), so `sudo` elevates
exactly that job's namespace, never the tray's other children or the shell that started the
tray. The password reaches `memories sudo --password-stdin` through a pipe; it is never in an
argument, the environment, a log line or the job's state.

Known limit: only Linux keys elevation on the parent process; elsewhere the engine keys it on
the connecting process itself, so the export answers ``elevation_required`` (shown as such).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from desktop.sibling import cli_command, cli_options
from engine.errors import CODES

__all__ = ["TransferJobs", "EXPORT_FORMATS", "default_export_dir", "JOB_DEADLINE"]

EXPORT_FORMATS = ("markdown", "jsonl")
JOB_DEADLINE = 3600.0  # an export of a very large vault; the job is killed after this
SUDO_DEADLINE = 180.0  # the KDF on a loaded machine


def default_export_dir(base: Path | None = None, now: datetime | None = None) -> Path:
    """A new folder under the home directory: "Memories export 2026-12-07 0512" (suffixed if taken)."""
    root = base if base is not None else Path.home()
    stamp = (now or datetime.now()).strftime("%Y-%m-%d %H%M")
    candidate = root / f"Memories export {stamp}"
    n = 2
    while candidate.exists():
        candidate = root / f"Memories export {stamp} ({n})"
        n += 1
    return candidate


def _last_json(lines: list[str]) -> dict[str, Any] | None:
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return None


def _error_of(answer: dict[str, Any] | None) -> tuple[str, str]:
    error = answer.get("error") if answer is not None else None
    if isinstance(error, dict) and isinstance(error.get("code"), str) and error["code"].isidentifier():
        code = error["code"]
        message = error.get("message") if isinstance(error.get("message"), str) else CODES.get(code, "")
        return code, str(message)
    return "internal", "The export stopped without an answer."


class TransferJobs:
    """At most one export at a time; its state is what ``/api/status`` shows under ``transfer``."""

    def __init__(self, home: Path, say: Callable[[str], None], env: dict[str, str] | None = None) -> None:
        self.home = home
        self.say = say
        self.env = env
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"state": "idle"}

    def state(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state)

    def running(self) -> bool:
        return self.state()["state"] in ("elevating", "running")

    def _set(self, **fields: Any) -> None:
        with self._lock:
            self._state = fields

    def export(self, fmt: str, target: Path, password: str) -> str | None:
        """Elevate a new job namespace with ``password`` and start the export into ``target``.

        Blocks until `memories sudo` has answered. Returns None once the export runs (it
        goes on in the background), else the error code of the elevation (``wrong_password``,
        ``rate_limited``, ``locked``, …), after which nothing ran."""
        if fmt not in EXPORT_FORMATS:
            return "invalid_input"
        started = time.time()
        self._set(state="elevating", kind="export", format=fmt, dir=str(target), started=started)
        sudo = cli_command(self.home, "sudo", "--password-stdin", "--json")
        export = cli_command(self.home, "export", "--format", fmt, str(target), "--json")
        # The sudo's one answer line is read first; a refusal stops the shell before the export.
        script = f"{shlex.join(sudo)} || exit 3; {shlex.join(export)}"
        child = subprocess.Popen(
            ["/bin/sh", "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            **cli_options(self.home, self.env),
            start_new_session=True,  # no controlling terminal: elevation is this shell's alone
            close_fds=True,
        )
        assert child.stdin is not None and child.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            child.stdin.write(password + "\n")
            child.stdin.close()
        timer = threading.Timer(SUDO_DEADLINE, lambda: self._kill(child))
        timer.start()
        try:
            answer = _last_json([child.stdout.readline()])
        finally:
            timer.cancel()
        if answer is None or "error" in answer:
            code, _ = _error_of(answer)
            child.stdout.read()  # the shell stopped after the refusal: reap it
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=30)
            self._set(state="idle")
            return code
        self._set(state="running", kind="export", format=fmt, dir=str(target), started=started)
        self.say(f"memories tray: export started ({fmt})")
        threading.Thread(target=self._finish, args=(child, child.stdout, fmt, target, started), daemon=True).start()
        return None

    def _finish(self, child: subprocess.Popen[str], out: IO[str], fmt: str, target: Path, started: float) -> None:
        timer = threading.Timer(JOB_DEADLINE, lambda: self._kill(child))
        timer.start()
        try:
            lines = out.read().splitlines()
            child.wait()
        finally:
            timer.cancel()
        answer = _last_json(lines)
        base = {"kind": "export", "format": fmt, "dir": str(target), "started": started, "ended": time.time()}
        if child.returncode == 0 and answer is not None and isinstance(answer.get("exported"), int):
            self._set(state="done", exported=answer["exported"], **base)
            self.say(f"memories tray: export done ({answer['exported']} items)")
            return
        code, message = _error_of(answer)
        self._set(state="failed", error={"code": code, "message": message}, **base)
        self.say(f"memories tray: export failed ({code})")

    @staticmethod
    def _kill(child: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
