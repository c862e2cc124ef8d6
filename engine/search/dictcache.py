"""Jieba's prefix dictionary, cached in a private per-user directory (issue 12).

Jieba by itself caches its parsed dictionary as ``$TMPDIR/jieba.cache`` and reads it back
with ``marshal``: any local user who plants that file first decides what our engine
loads (a broken dictionary fails every write and search; marshal input is not safe to
trust). We load and write the cache ourselves instead:

* it lives in the user's cache directory (``$MEMORIES_CACHE_DIR``, else platformdirs'
  user cache dir, i.e. ``$XDG_CACHE_HOME/memories``), never in a shared directory;
* the directory must be a real directory owned by us with mode 0700 (a looser one that is
  ours is tightened and its cache discarded; one that is not ours is not used at all);
* the file is opened without following symlinks and checked on the open descriptor: a
  regular file owned by us that neither group nor others can write;
* its content carries a header and a SHA-256 of the marshal payload, so marshal only ever
  reads bytes this code wrote; anything else (garbage, truncation, another format) is
  rebuilt from Jieba's bundled dictionary and the cache rewritten atomically (0600).

Loading the cache takes ~0.15 s against ~1 s to rebuild it (``bench/search.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import marshal
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jieba

__all__ = ["CACHE_ENV", "CACHE_NAME", "DictLoad", "default_cache_dir", "load_dictionary", "private_dir", "write_cache"]

log = logging.getLogger("memories.search")

CACHE_ENV = "MEMORIES_CACHE_DIR"
CACHE_NAME = f"jieba-{jieba.__version__}.dict"
_MAGIC = b"memories-jieba-dict-1\n"
_DIGEST = 32
_MAX_BYTES = 128 * 1024 * 1024  # the real cache is ~9 MB; a bigger file is not ours to parse
_POSIX = hasattr(os, "geteuid")


def default_cache_dir() -> Path:
    """``$MEMORIES_CACHE_DIR``, else the platform's per-user cache directory (never a shared one)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().absolute()
    import platformdirs  # imported lazily, like engine/config.py

    return Path(platformdirs.user_cache_dir("memories", appauthor=False))


@dataclass(frozen=True)
class DictLoad:
    """How the dictionary was obtained: ``cache`` or ``built``, and why a cache was not used."""

    source: str
    reason: str | None = None  # missing | untrusted_dir | untrusted_file | corrupt | unwritable
    saved: bool = False


def _ours(st: os.stat_result) -> bool:
    return not _POSIX or st.st_uid == os.geteuid()


def private_dir(path: Path) -> tuple[Path | None, bool]:
    """(the directory if it is a real 0700 directory of ours, whether it was loose and tightened).

    A directory that is a symlink or belongs to someone else is refused (None): nothing is
    read from or written to it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        st = os.lstat(path)
    except OSError:
        return None, False
    if not stat.S_ISDIR(st.st_mode) or not _ours(st):
        return None, False
    if _POSIX and stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(path, 0o700, follow_symlinks=False)
        except (OSError, NotImplementedError):
            return None, False
        return path, True
    return path, False


def _read(path: Path) -> tuple[Any, str | None]:
    """(FREQ, total) from our cache file, or (None, reason) when it is absent, not ours, or corrupt."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, "missing"
    except OSError:  # a symlink (ELOOP) or unreadable
        return None, "untrusted_file"
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())  # checked on the descriptor we read: no swap in between
        if not stat.S_ISREG(st.st_mode) or not _ours(st) or (_POSIX and st.st_mode & 0o022):
            return None, "untrusted_file"
        if st.st_size > _MAX_BYTES:
            return None, "corrupt"
        data = handle.read(_MAX_BYTES + 1)
    head = len(_MAGIC) + _DIGEST
    if len(data) < head or not data.startswith(_MAGIC):
        return None, "corrupt"
    payload = memoryview(data)[head:]
    if hashlib.sha256(payload).digest() != data[len(_MAGIC) : head]:
        return None, "corrupt"
    try:
        value = marshal.loads(payload)  # noqa: S302 -- our own file, owner/mode and digest checked above
    except Exception:  # marshal raises several types on bad input
        return None, "corrupt"
    if not (isinstance(value, tuple) and len(value) == 2):
        return None, "corrupt"
    freq, total = value
    if not (isinstance(freq, dict) and freq and isinstance(total, int) and total > 0):
        return None, "corrupt"
    return (freq, total), None


def write_cache(directory: Path, freq: dict[str, int], total: int) -> bool:
    """Atomically (re)write the cache in ``directory``, which must be a private directory of ours."""
    payload = marshal.dumps((freq, total))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".jieba-", suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, directory / CACHE_NAME)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def load_dictionary(tokenizer: Any, cache_dir: Path) -> DictLoad:
    """Initialize a ``jieba.Tokenizer`` (its default dictionary) from our private cache or by building it.

    Never reads Jieba's own ``$TMPDIR`` cache; the tokenizer's ``tmp_dir`` is pointed at the
    private directory too, so a stray ``jieba.initialize()`` could not fall back to TMPDIR.
    """
    with tokenizer.lock:
        if tokenizer.initialized:
            return DictLoad("cache")
        if tokenizer.dictionary is not jieba.DEFAULT_DICT:
            raise ValueError("only Jieba's bundled dictionary is cached")
        directory, loose = private_dir(cache_dir)
        reason: str | None = "untrusted_dir"
        loaded: Any = None
        if directory is not None:
            tokenizer.tmp_dir = str(directory)
            path = directory / CACHE_NAME
            loaded, reason = _read(path)
            if loaded is not None and loose:
                loaded, reason = None, "untrusted_dir"  # others could write the directory until now
            if loaded is None and reason != "missing":
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if loaded is not None:
            tokenizer.FREQ, tokenizer.total = loaded
            tokenizer.initialized = True
            return DictLoad("cache")
        freq, total = tokenizer.gen_pfdict(tokenizer.get_dict_file())
        saved = directory is not None and write_cache(directory, freq, total)
        tokenizer.FREQ, tokenizer.total = freq, total
        tokenizer.initialized = True
    if reason not in ("missing", None):
        log.warning("jieba dictionary cache not used (%s); rebuilt it", reason)
    elif directory is not None and not saved:
        log.warning("jieba dictionary cache could not be written")
    return DictLoad("built", reason, saved)
