"""Import and export from the window (SPEC DT-9): the tray runs the CLI's commands itself.

The engine has no import or export job: the CLI reads or writes the files and sends or pages
batches. So the tray runs the same CLI, as a person would in a terminal, and reports the job's
state for ``/api/status``. Importing notes needs no elevation (as in a terminal): the tray runs
`memories import SOURCE` alone. Exporting does: elevation (API-3) belongs to the caller's *parent* process when it has no
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


def _counts(kind: str, answer: dict[str, Any] | None) -> dict[str, int] | None:
    """The finished job's numbers from the CLI's JSON answer; None when it is not one."""
    if answer is None:
        return None
    required = ("exported",) if kind == "export" else ("created", "skipped")
    if not all(_is_count(answer.get(name)) for name in required):
        return None
    counts = {name: int(answer[name]) for name in required}
    if kind == "import":  # a notes import also says its total; memories.json its links
        counts.update({name: int(answer[name]) for name in ("total", "links") if _is_count(answer.get(name))})
        if isinstance(answer.get("warnings"), list):
            counts["warnings"] = len(answer["warnings"])
    return counts


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class TransferJobs:
    """At most one job (import or export) at a time; its state is what ``/api/status`` shows under ``transfer``."""

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
        if not self._claim(state="elevating", kind="export", format=fmt, dir=str(target), started=started):
            return "busy"
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
        base = {"kind": "export", "format": fmt, "dir": str(target), "started": started}
        self._set(state="running", **base)
        self.say(f"memories tray: export started ({fmt})")
        threading.Thread(target=self._finish, args=(child, child.stdout, base), daemon=True).start()
        return None

    def import_notes(self, source: Path) -> str | None:
        """Start `memories import SOURCE` (Markdown file or folder, JSONL, memories.json).

        Importing notes needs no elevation, as in a terminal: no password is asked. Returns
        None once the import runs, else ``busy`` (another job runs) or ``invalid_input``."""
        if not source.is_absolute() or not source.exists():
            return "invalid_input"
        base = {"kind": "import", "source": str(source), "started": time.time()}
        if not self._claim(state="running", **base):
            return "busy"
        child = subprocess.Popen(
            cli_command(self.home, "import", str(source), "--json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            **cli_options(self.home, self.env),
            start_new_session=True,
            close_fds=True,
        )
        assert child.stdout is not None
        self.say("memories tray: import started")
        threading.Thread(target=self._finish, args=(child, child.stdout, base), daemon=True).start()
        return None

    def _claim(self, **fields: Any) -> bool:
        """One job at a time: take the slot unless a job holds it."""
        with self._lock:
            if self._state["state"] in ("elevating", "running"):
                return False
            self._state = fields
            return True

    def _finish(self, child: subprocess.Popen[str], out: IO[str], base: dict[str, Any]) -> None:
        timer = threading.Timer(JOB_DEADLINE, lambda: self._kill(child))
        timer.start()
        try:
            lines = out.read().splitlines()
            child.wait()
        finally:
            timer.cancel()
        answer = _last_json(lines)
        kind = base["kind"]
        base = {**base, "ended": time.time()}
        counts = _counts(kind, answer) if child.returncode == 0 else None
        if counts is not None:
            self._set(state="done", **counts, **base)
            self.say(f"memories tray: {kind} done ({', '.join(f'{k} {v}' for k, v in counts.items())})")
            return
        code, message = _error_of(answer)
        self._set(state="failed", error={"code": code, "message": message}, **base)
        self.say(f"memories tray: {kind} failed ({code})")

    @staticmethod
    def _kill(child: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
