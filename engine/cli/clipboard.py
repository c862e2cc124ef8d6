"""The CLI's clipboard: write a copied secret, verify it, and clear it later (CD-8).

Uses the platform's own tool (wl-copy, xclip, xsel, pbcopy, PowerShell) so the lean
CLI gains no dependency. Clearing runs in a detached child that receives only a
SHA-256 digest of the value on stdin (never the value, never argv) and clears the
clipboard after the timeout only if it still holds that value: something the user
copied in the meantime is left alone.

Run as ``python -m engine.cli.clipboard --clear-after SECONDS`` for the child.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from engine.errors import MemoriesError
from engine.launch import child_env, python_command, working_directory

__all__ = ["Backend", "detect", "write", "read", "copy_with_clear", "DEFAULT_CLEAR_SECONDS"]

DEFAULT_CLEAR_SECONDS = 30
_TOOL_TIMEOUT = 10


@dataclass(frozen=True)
class Backend:
    name: str
    copy: list[str]
    paste: list[str]


_BACKENDS: dict[str, Backend] = {
    "wl-copy": Backend("wl-copy", ["wl-copy"], ["wl-paste", "--no-newline"]),
    "xclip": Backend("xclip", ["xclip", "-selection", "clipboard", "-i"], ["xclip", "-selection", "clipboard", "-o"]),
    "xsel": Backend("xsel", ["xsel", "--clipboard", "--input"], ["xsel", "--clipboard", "--output"]),
    "pbcopy": Backend("pbcopy", ["pbcopy"], ["pbpaste"]),
    "powershell": Backend(
        "powershell",
        ["powershell", "-NoProfile", "-Command", "Set-Clipboard -Value ([Console]::In.ReadToEnd())"],
        ["powershell", "-NoProfile", "-Command", "Get-Clipboard -Raw"],
    ),
}


def _candidates() -> list[str]:
    if sys.platform == "darwin":
        return ["pbcopy"]
    if sys.platform == "win32":
        return ["powershell"]
    names = []
    if os.environ.get("WAYLAND_DISPLAY"):
        names.append("wl-copy")
    if os.environ.get("DISPLAY"):
        names += ["xclip", "xsel"]
    return names


def detect() -> Backend:
    """``MEMORIES_CLIPBOARD`` picks a tool; otherwise the first one the session can use."""
    forced = os.environ.get("MEMORIES_CLIPBOARD")
    names = [forced] if forced else _candidates()
    for name in names:
        backend = _BACKENDS.get(name)
        if backend is not None and shutil.which(backend.copy[0]) and shutil.which(backend.paste[0]):
            return backend
    if not names:  # e.g. over SSH or on a console: no tool would help
        raise MemoriesError(
            "clipboard_unavailable",
            "No graphical session here (DISPLAY and WAYLAND_DISPLAY are unset), so there is no clipboard; "
            "run it in a desktop session (`memories otp` prints a code; `memories run` hands a secret to a program).",
        )
    raise MemoriesError("clipboard_unavailable", "No clipboard tool for this session (install xclip, xsel or wl-clipboard).")


def write(backend: Backend, value: str) -> None:
    # xclip forks a child that owns the selection: it must not inherit our pipes, or
    # waiting for output would hang until another client takes the selection.
    try:
        proc = subprocess.Popen(backend.copy, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc.communicate(value.encode("utf-8"), timeout=_TOOL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        raise MemoriesError("clipboard_unavailable", "The clipboard tool failed.") from None
    if proc.returncode != 0:
        raise MemoriesError("clipboard_unavailable", "The clipboard tool failed.")


def read(backend: Backend) -> str | None:
    try:
        proc = subprocess.run(backend.paste, stdin=subprocess.DEVNULL, capture_output=True, timeout=_TOOL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    text = proc.stdout.decode("utf-8", "replace")
    # PowerShell appends a line break to what it prints.
    return text.removesuffix("\r\n") if backend.name == "powershell" else text


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def copy_with_clear(value: str, clear_after: int) -> Backend:
    """Write, read back to prove the write, then start the clearing child. Raises on failure."""
    backend = detect()
    write(backend, value)
    # Read back to prove the write. An earlier copy's clearing child can empty the clipboard
    # right after this write (it read its own value just before): write again when what we
    # read is not ours. Generous on a loaded machine, where the tools start slowly.
    deadline = time.monotonic() + 10
    while (current := read(backend)) != value:
        if time.monotonic() > deadline:
            raise MemoriesError("clipboard_unavailable", "The clipboard did not take the value.")
        if current is not None:
            write(backend, value)
        time.sleep(0.05)
    # Isolated from the caller's directory (SPEC ST-11, engine/launch.py).
    child = subprocess.Popen(
        python_command("engine.cli.clipboard", "--clear-after", str(clear_after), "--backend", backend.name),
        cwd=working_directory(),
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    assert child.stdin is not None
    child.stdin.write(_digest(value).encode("ascii"))
    child.stdin.close()
    return backend


def _clear_later(seconds: int, backend_name: str) -> int:
    digest = sys.stdin.read(64)
    backend = _BACKENDS[backend_name]
    time.sleep(seconds)
    current = read(backend)
    if current is not None and _digest(current) == digest:
        write(backend, "")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    try:
        wait = int(args[args.index("--clear-after") + 1])
        name = args[args.index("--backend") + 1]
    except (ValueError, IndexError):
        sys.exit(2)
    try:
        sys.exit(_clear_later(max(1, wait), name))
    except (MemoriesError, KeyError):
        sys.exit(1)
