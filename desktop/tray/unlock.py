"""What the tray's Unlock… dialog sends (issue 17, SPEC DT-4/DT-5): ``unlock`` or, on first run, ``init``.

The tray is an OS-authenticated IPC client like the CLI, so the password goes from its own
native window straight to the engine over the local socket; it never passes through the web
page (the dashboard's gateway has no unlock). The engine's password budget throttles the
attempts exactly as for ``memories unlock``; the dialog shows ``wrong_password`` and
``rate_limited`` as sentences. No message ever contains the password.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import CODES, MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["Outcome", "VaultUnlocker", "weak_password_warning", "MESSAGES", "KDF_TIMEOUT"]

KDF_TIMEOUT = 120.0  # the same bound as the CLI's unlock/init (the KDF runs in the engine)
WEAK_SCORE = 3  # zxcvbn scores 0–4; below 3 is weak (CD-11, like `memories init`)
_ESTIMATE_CHARS = 100

MESSAGES = {
    "wrong_password": "Wrong password. The vault stays locked.",
    "rate_limited": "Too many attempts. Wait a minute, then try again.",
    "mismatch": "The two passwords differ. Type the same password twice.",
    "empty": "Type a password.",
    "already_initialized": "A vault already exists here. Use Unlock… instead.",
    "not_initialized": "No vault exists here yet. Create one first.",
    "daemon_unavailable": "The engine is not running. Choose Start engine in the tray menu, then try again.",
    "timeout": "The engine did not answer in time. Try again.",
}


@dataclass(frozen=True)
class Outcome:
    """``ok``: the vault is unlocked (or was created); else ``code`` and a sentence for the dialog."""

    ok: bool
    code: str = ""
    message: str = ""


def weak_password_warning(password: str) -> str | None:
    """A sentence when a new vault password is weak (zxcvbn score < 3), else None (as `memories init`)."""
    try:
        from zxcvbn import zxcvbn
    except ImportError:
        return None
    result: dict[str, Any] = zxcvbn(password[:_ESTIMATE_CHARS])
    if int(result["score"]) >= WEAK_SCORE:
        return None
    crack = str(result["crack_times_display"]["offline_slow_hashing_1e4_per_second"])
    return (
        f"This password is weak (strength {int(result['score'])}/4; guessed offline in {crack}). "
        "Anyone who copies the vault file can try passwords without limit."
    )


class VaultUnlocker:
    """One dialog's conversation with the engine; remembers a weak password it already warned about."""

    def __init__(self, socket_path: Path, timeout: float = KDF_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._warned: str | None = None

    def unlock(self, password: str) -> Outcome:
        if not password:
            return _fail("empty")
        return self._send({"op": "unlock", "password": password})

    def create(self, password: str, again: str) -> Outcome:
        """First run: both fields must match; a weak password is warned about once, then accepted."""
        if not password:
            return _fail("empty")
        if password != again:
            return _fail("mismatch")
        warning = weak_password_warning(password) if self._warned != password else None
        if warning is not None:
            self._warned = password
            return Outcome(False, "weak_password", warning + " Press Create again to use it anyway.")
        return self._send({"op": "init", "password": password})

    def _send(self, body: dict[str, Any]) -> Outcome:
        try:
            with IpcClient(self.socket_path, timeout=self.timeout, client_label="tray") as client:
                client.request(body, timeout=self.timeout)
        except MemoriesError as exc:
            return _fail(exc.code)
        except OSError:
            return _fail("daemon_unavailable")
        return Outcome(True)


def _fail(code: str) -> Outcome:
    message = MESSAGES.get(code) or CODES.get(code) or "The engine refused the request."
    return Outcome(False, code, message)
