"""JSON POST to a provider over aiohttp: timeouts, retries with back-off on 429/5xx, optional proxy.

Errors carry the HTTP status only: a provider's error body can echo our prompt
or key, so it is never read into a message or a log.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from engine.errors import MemoriesError
from engine.lazy_import import LazyModule
from engine.rag.config import Endpoint, RagConfig

if TYPE_CHECKING:
    import aiohttp
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    aiohttp = LazyModule("aiohttp")

__all__ = ["post_json", "RETRY_STATUSES", "MAX_RESPONSE_BYTES"]

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_MAX_RETRY_AFTER = 30.0


def _headers(endpoint: Endpoint) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if endpoint.kind == "anthropic":
        headers["anthropic-version"] = "2023-06-01"  # the Messages API version this client speaks
    key = endpoint.api_key()
    if key:
        if endpoint.kind == "gemini":
            headers["x-goog-api-key"] = key
        elif endpoint.kind == "anthropic":
            headers["x-api-key"] = key
        else:
            headers["Authorization"] = f"Bearer {key}"
    return headers


def _retry_after(response: aiohttp.ClientResponse, default: float) -> float:
    value = response.headers.get("Retry-After", "")
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER)
    except ValueError:
        return default


async def post_json(config: RagConfig, endpoint: Endpoint, url: str, payload: dict[str, Any]) -> Any:
    timeout = aiohttp.ClientTimeout(total=config.timeout_seconds)
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    # trust_env=False: only the configured proxy is used, never one injected through the environment.
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        attempt = 0
        while True:
            delay = config.backoff_seconds * (2**attempt)
            try:
                async with session.post(url, data=body, headers=_headers(endpoint), proxy=config.proxy) as response:
                    if response.status in RETRY_STATUSES and attempt < config.retries:
                        delay = _retry_after(response, delay)
                    elif response.status >= 400:
                        raise MemoriesError("provider_error", f"The {endpoint.kind} provider answered HTTP {response.status}.")
                    else:
                        raw = await response.content.read(MAX_RESPONSE_BYTES + 1)
                        if len(raw) > MAX_RESPONSE_BYTES:
                            raise MemoriesError("provider_error", "The provider's answer is too large.")
                        try:
                            return json.loads(raw)
                        except (ValueError, UnicodeDecodeError):
                            raise MemoriesError("provider_error", "The provider's answer is not JSON.") from None
            except TimeoutError:
                if attempt >= config.retries:
                    raise MemoriesError("provider_timeout") from None
            except aiohttp.ClientError as exc:
                if attempt >= config.retries:
                    raise MemoriesError("provider_error", f"The provider could not be reached ({type(exc).__name__}).") from None
            attempt += 1
            await asyncio.sleep(delay)
