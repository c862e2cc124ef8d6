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
    chosen = explicit or os.environ.get("MEMORIES_HOME")
    if not chosen:
        import platformdirs  # only without an explicit home

        chosen = platformdirs.user_data_dir("memories", appauthor=False)
    return os.path.realpath(os.path.expanduser(chosen))


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
