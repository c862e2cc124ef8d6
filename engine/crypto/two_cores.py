"""Bulk crypto work on both cores: a list mapped in two halves, one on a helper thread.

Signing (libsodium) and sealing (deflate + the AEAD) release the GIL for the heavy part, and
the Python part of each step is small beside it, so two threads over two halves of a large
batch take about half the time on two cores (issue 32: a restore or an import signs and seals
one revision per note). Below ``minimum`` items the thread costs more than it saves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["map_in_two_halves"]

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def map_in_two_halves(step: Callable[[int, _Item], _Result], items: Sequence[_Item], *, minimum: int, name: str) -> list[_Result]:
    """``[step(i, item) for i, item in enumerate(items)]``, the second half on a thread named
    ``name`` when there are at least ``minimum`` items. The first exception either half raised
    is raised here, after both halves have stopped."""
    if len(items) < minimum:
        return [step(i, item) for i, item in enumerate(items)]
    half = len(items) // 2
    second: list[_Result] = []
    failure: list[BaseException] = []

    def run_second() -> None:
        try:
            second.extend(step(i, items[i]) for i in range(half, len(items)))
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    helper = threading.Thread(target=run_second, name=name, daemon=True)
    helper.start()
    try:
        first = [step(i, items[i]) for i in range(half)]
    finally:
        helper.join()
    if failure:
        raise failure[0]
    return first + second
