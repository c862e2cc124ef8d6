"""Byte counts as people read them, in binary units: ``812 B``, ``80.0 KiB``, ``24.1 MiB``,
``1.6 GiB``. One spelling for every command that prints a size (`file`, `status`)."""

from __future__ import annotations

__all__ = ["size_text"]


def size_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:,.1f} {unit}"
