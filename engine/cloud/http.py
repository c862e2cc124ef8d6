"""Plain aiohttp calls to the pinned OneDrive/Drive endpoints, with bounded retries (CL-4).

429 and 503 answers are retried after their ``Retry-After`` (seconds, at most
``MAX_RETRY_AFTER_S``), other 5xx answers and network failures after a short doubling pause;
at most ``RETRIES`` retries, then ``cloud_unreachable``. Every body read is bounded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import MemoriesError
from engine.lazy_import import LazyModule

if TYPE_CHECKING:
    import aiohttp
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    aiohttp = LazyModule("aiohttp")

__all__ = ["Answer", "call", "RETRIES", "MAX_RETRY_AFTER_S"]

RETRIES = 4
MAX_RETRY_AFTER_S = 30.0
_TIMEOUT_S = (120, 10)  # total, connect (an aiohttp.ClientTimeout, built on use)
_MAX_META_BYTES = 4 * 1024 * 1024


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        import json

        try:
            value = json.loads(self.body or b"{}")
        except ValueError:
            raise MemoriesError("cloud_unreachable", "The storage answered with something that is not JSON.") from None
        if not isinstance(value, dict):
            raise MemoriesError("cloud_unreachable", "The storage answered with something that is not a JSON object.")
        return value


def _retry_after(value: str | None, attempt: int) -> float:
    try:
        seconds = float(value) if value is not None else 0.5 * 2**attempt
    except ValueError:  # an HTTP date: not worth parsing, wait the default
        seconds = 0.5 * 2**attempt
    return max(0.0, min(MAX_RETRY_AFTER_S, seconds))


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    max_bytes: int = _MAX_META_BYTES,
) -> Answer:
    """One request, retried on 429/5xx/network failure; the answer of any other status."""
    timeout = aiohttp.ClientTimeout(total=_TIMEOUT_S[0], connect=_TIMEOUT_S[1])
    for attempt in range(RETRIES + 1):
        try:
            async with session.request(
                method, url, headers=headers, data=data, allow_redirects=False, timeout=timeout
            ) as response:
                if response.status in (429, 500, 502, 503, 504) and attempt < RETRIES:
                    await asyncio.sleep(_retry_after(response.headers.get("Retry-After"), attempt))
                    continue
                if response.content_length is not None and response.content_length > max_bytes:
                    raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
                parts, size = [], 0
                while chunk := await response.content.read(256 * 1024):
                    parts.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        break
                body = b"".join(parts)
                if len(body) > max_bytes:
                    raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
                if response.status >= 500 or response.status == 429:
                    raise MemoriesError("cloud_unreachable", "The storage kept failing; what was sent stays queued.")
                return Answer(response.status, {k.lower(): v for k, v in response.headers.items()}, body)
        except (aiohttp.ClientError, TimeoutError):
            if attempt >= RETRIES:
                break
            await asyncio.sleep(_retry_after(None, attempt))
    raise MemoriesError("cloud_unreachable", "The storage could not be reached; what was sent stays queued for the next sync.")
