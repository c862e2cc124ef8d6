"""Third-party modules the engine imports on first use instead of at start (ST-12).

An engine re-executes itself at every lock, and an unlock that arrives meanwhile waits for
its modules to load (engine/daemon.py). aiohttp (with yarl, multidict, attrs …) is about a
third of that load and serves only network features (cloud, sync, cards' header checks,
hosted models): the modules that use it name it through :class:`LazyModule`, which imports
it on the first attribute read, and :func:`warm_in_background` imports it where the engine
warms up anyway (an unlock's KDF, which leaves the other core idle, and the daemon's warm-up
a few seconds after start), so the first cloud or sync request rarely pays.
numpy likewise: only the search index's word postings and vectors compute with it, in the
index build that follows an unlock, not in the unlock itself.

Stdlib only and cheap.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

__all__ = ["LazyModule", "DEFERRED", "warm", "warm_in_background"]

DEFERRED = ("aiohttp", "aiohttp.web", "numpy")


class LazyModule:
    """Stands for the module ``name``; the first attribute read imports it (thread-safe: the
    import system serializes it), every read after that is a dictionary lookup."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def warm() -> None:
    """Import every deferred module (no vault data: only library code)."""
    for name in DEFERRED:
        importlib.import_module(name)


def warm_in_background() -> None:
    """:func:`warm` on a thread of its own, unless every deferred module is loaded already."""
    if all(name in sys.modules for name in DEFERRED):
        return
    threading.Thread(target=warm, name="memories-warm-imports", daemon=True).start()
