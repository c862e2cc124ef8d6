"""Where the data home and the engine's socket are, as plain strings.

The rules behind :func:`engine.config.resolve_home` and :attr:`engine.config.Paths.socket`,
kept here with nothing but :mod:`os` and :mod:`sys` so the CLI can find the engine without
importing :mod:`pathlib`, :mod:`dataclasses` or :mod:`tomllib` (issue 20: a ``memories``
call should cost little more than a bare interpreter start).
"""

from __future__ import annotations

import os
import sys

__all__ = ["data_home", "engine_socket", "fallback_runtime_dir", "prepare_runtime_dir", "check_private_folder"]

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
    per-user runtime directory keyed by the home's digest: ``$XDG_RUNTIME_DIR`` when it is
    private to us, else ``/tmp/memories-UID`` (checked by :func:`prepare_runtime_dir`).
    """
    candidate = os.path.join(home, "run", "engine.sock")
    if sys.platform == "win32" or len(os.fsencode(candidate)) <= _MAX_SOCKET_PATH:
        return candidate
    import hashlib  # only for deep homes: hashlib loads OpenSSL

    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:20]
    runtime = _private_runtime_dir() or fallback_runtime_dir()
    return os.path.join(runtime, f"memories-{digest}", "engine.sock")


def fallback_runtime_dir() -> str:
    """The folder under the shared /tmp used when there is no usable ``$XDG_RUNTIME_DIR``.
    Anyone can create it first: :func:`prepare_runtime_dir` refuses one that is not ours."""
    return f"/tmp/memories-{os.getuid()}"  # noqa: S108


def _private_runtime_dir() -> str | None:
    """``$XDG_RUNTIME_DIR`` when it is what the XDG spec promises (absolute, a directory of
    ours with no group/other access); else None and the /tmp fallback is used."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not runtime.startswith("/"):
        return None
    import stat

    try:
        st = os.stat(runtime)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return runtime


def prepare_runtime_dir(socket_path: str) -> None:
    """Before a socket is placed under the shared-/tmp fallback folder: create that folder
    0700, or check that the existing one is ours and private.

    Another user can create ``/tmp/memories-UID`` before we do; a folder owned by someone
    else, a symbolic link, or one that others can write into (it may already hold their
    entries) is refused with ``permission_denied`` and a sentence naming the folder. One of
    ours that others can only read (what earlier versions created, 0755) is tightened to
    0700. Other socket locations (the data home, a valid ``$XDG_RUNTIME_DIR``) pass.
    """
    folder = os.path.dirname(os.path.dirname(socket_path))
    if sys.platform == "win32" or folder != fallback_runtime_dir():
        return
    check_private_folder(folder)


def check_private_folder(folder: str) -> None:
    """Create ``folder`` 0700, or accept an existing one only if it is ours and nobody else
    can write into it (see :func:`prepare_runtime_dir`)."""
    import contextlib
    import stat

    from engine.errors import MemoriesError

    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    what_to_do = "remove it (or ask an administrator to), or set XDG_RUNTIME_DIR to a private folder of yours"
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise MemoriesError(
            "permission_denied",
            f"The engine's socket folder {folder} is not a plain folder this user can open, "
            f"so the engine will not use it; {what_to_do}.",
        ) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            owner = "owned by another user" if st.st_uid != os.getuid() else "writable by other users"
            raise MemoriesError(
                "permission_denied",
                f"The engine's socket folder {folder} is {owner}, so the engine will not put its socket there; {what_to_do}.",
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
