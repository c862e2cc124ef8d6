"""Upload sizes shared by the OneDrive and Drive transports (CL-4).

Objects up to ``simple_max()`` go in one request; larger ones through an upload session
(OneDrive) or a resumable upload (Drive) in chunks of ``chunk_bytes(unit)``: a multiple of
the provider's unit (OneDrive 320 KiB, Drive 256 KiB), as both APIs require of every chunk
but the last. ``MEMORIES_CLOUD_SIMPLE_MAX`` and ``MEMORIES_CLOUD_CHUNK_UNITS`` tune them; the
defaults are 4 MiB and 10 units (3.2 MiB on OneDrive, 2.5 MiB on Drive).
"""

from __future__ import annotations

import os

__all__ = ["ONEDRIVE_UNIT", "DRIVE_UNIT", "simple_max", "chunk_bytes"]

ONEDRIVE_UNIT = 320 * 1024
DRIVE_UNIT = 256 * 1024


def simple_max() -> int:
    return max(0, int(os.environ.get("MEMORIES_CLOUD_SIMPLE_MAX", str(4 * 1024 * 1024))))


def chunk_bytes(unit: int) -> int:
    return unit * max(1, min(60, int(os.environ.get("MEMORIES_CLOUD_CHUNK_UNITS", "10"))))
