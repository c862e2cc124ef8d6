"""Give freed heap back to the OS after large transient work (unlock, index builds, lock).

CPython frees objects, but glibc keeps the pages of a large transient peak (decoding every
state row at unlock, building an index) in its arenas, so the engine's resident size stays
at the peak. ``malloc_trim`` releases them; elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["release_free_memory"]

_trim = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _trim = getattr(_libc, "malloc_trim", None)  # glibc only (not musl)
    except OSError:
        _trim = None


def release_free_memory() -> None:
    if _trim is not None:
        _trim(0)
