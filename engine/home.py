"""Where the data home and the engine's socket are, as plain strings.

The rules behind :func:`engine.config.resolve_home` and :attr:`engine.config.Paths.socket`,
kept here with nothing but :mod:`os` and :mod:`sys` so the CLI can find the engine without
importing :mod:`pathlib`, :mod:`dataclasses` or :mod:`tomllib` (issue 20: a ``memories``
call should cost little more than a bare interpreter start).
"""

from __future__ import annotations

import os
import sys

__all__ = ["data_home", "engine_socket"]

# AF_UNIX paths are limited to 108 bytes on Linux (104 on macOS); keep a margin.
_MAX_SOCKET_PATH = 100


def data_home(explicit: str | None = None) -> str:
    """``--home`` wins, then ``MEMORIES_HOME``, then the platform's user data dir; absolute."""
    chosen = explicit or os.environ.get("MEMORIES_HOME") or _xdg_data_home()
    if not chosen:
        import platformdirs  # macOS, Windows, Android, or no usable HOME

        chosen = platformdirs.user_data_dir("memories", appauthor=False)
    return os.path.realpath(os.path.expanduser(chosen))


def _xdg_data_home() -> str | None:
    """On Linux, the XDG data dir platformdirs would give (an absolute ``$XDG_DATA_HOME``,
    else ``~/.local/share``) plus ``memories``; without importing platformdirs, which costs
    the CLI's start as much as the rest of a call (tests/unit/test_home.py compares both)."""
    if sys.platform != "linux" or "ANDROID_DATA" in os.environ:
        return None
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "memories")
    home = os.environ.get("HOME", "")
    if not home.startswith("/"):
        return None  # platformdirs falls back to the password database: let it
    return home.rstrip("/") + "/.local/share/memories"


def engine_socket(home: str) -> str:
    """The engine socket of ``home`` (absolute), inside a private 0700 directory.

    Deep homes (pytest's tmp dirs) would overflow the AF_UNIX limit, so they fall back to a
    per-user runtime directory keyed by the home's digest.
    """
    candidate = os.path.join(home, "run", "engine.sock")
    if sys.platform == "win32" or len(os.fsencode(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    import hashlib  # only for deep homes: hashlib loads OpenSSL

    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:20]
    # A shared /tmp is safe here: the IPC server refuses a socket directory that is not
    # ours or not 0700 (engine/ipc/server.py prepare_socket_dir).
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/memories-{os.getuid()}"  # noqa: S108
    return os.path.join(runtime, f"memories-{digest}", "engine.sock")
