"""Memory housekeeping around large transient work (unlock, index builds, lock).

* ``release_free_memory``: CPython frees objects, but glibc keeps the pages of a large
  transient peak (decoding every state row at unlock, building an index) in its arenas, so
  the engine's resident size stays at the peak. ``malloc_trim`` releases them; elsewhere
  this is a no-op.
* ``gc_paused``: decoding a 10k-asset vault allocates ~10^6 container objects, almost all
  acyclic (they are freed by reference counting). Every 700 allocations the cyclic
  collector runs, and the older generations it then scans hold the whole unlocked state:
  measured, about 0.5 s of a 3 s unlock + index build went to collections that found
  nothing. Pausing it for the bulk work and collecting the young generation once after
  costs nothing in memory that reference counting does not already return.
* ``refuse_dumps``: while the vault is unlocked the engine is marked not dumpable
  (``PR_SET_DUMPABLE`` 0: no core file, no ptrace or /proc/PID/mem reads by other processes
  of the same user; root still can). The re-execution at lock (engine/daemon.py, ST-12)
  resets the mark, so a locked engine can be inspected as usual. Core files are refused for
  the engine's whole life by ``RLIMIT_CORE`` 0, set by the daemon at start.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import sys
import threading
from collections.abc import Iterator

__all__ = ["release_free_memory", "gc_paused", "keep_built", "release_kept", "refuse_dumps"]

_PR_SET_DUMPABLE = 4  # <linux/prctl.h>

_pause_lock = threading.Lock()
_pause_depth = 0
_resume = False

_trim = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _trim = getattr(_libc, "malloc_trim", None)  # glibc only (not musl)
        _prctl = getattr(_libc, "prctl", None)
    except OSError:
        _trim = _prctl = None
else:
    _prctl = None


def refuse_dumps() -> None:
    """Linux: no core dump and no same-user ptrace of this process until it re-executes."""
    if _prctl is not None:
        _prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def release_free_memory() -> None:
    if _trim is not None:
        _trim(0)


@contextlib.contextmanager
def gc_paused(*, keep: bool = False) -> Iterator[None]:
    """Pause the cyclic collector for bulk work; nests and is shared across threads.

    ``keep``: what the block built lives until the next lock (an unlock's decoded state,
    ~10^6 objects at 10k notes). It is moved out of the collector's generations
    (``gc.freeze``) instead of being scanned by the young collection that would otherwise
    run right after (~35 ms on the unlock's answer) and by every later full collection;
    ``release_kept`` (on lock) hands it back. Reference counting still frees it as usual.
    """
    global _pause_depth, _resume
    with _pause_lock:
        if _pause_depth == 0:
            _resume = gc.isenabled()  # restore what the first one found (tests may disable it)
            gc.disable()
        _pause_depth += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause_depth -= 1
            if keep:
                gc.freeze()
            if _pause_depth == 0 and _resume:
                gc.enable()


def keep_built() -> None:
    """Move what the engine's background work built to last until the lock (the search index
    and its word postings, after an unlock) out of the collector's generations, as
    ``gc_paused(keep=True)`` does for the unlock's state. Left in them, it was rescanned by
    every full collection and freed nothing: one follows each page of a listing (its rows are
    built with the collector paused), ~0.3 s of a second `list --all` at 100k notes and a cost
    per row that grew with the vault (issue 32). Reference counting still frees it as usual;
    ``release_kept`` (on lock) hands it back. Garbage cycles are collected first, once (it runs
    again after each catch-up of the postings): a cycle frozen would stay until the lock."""
    with _pause_lock:
        gc.collect()
        gc.freeze()


def release_kept() -> None:
    """Return what ``gc_paused(keep=True)`` set aside to the collector (a lock dropped it)."""
    gc.unfreeze()
