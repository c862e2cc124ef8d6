"""S3-compatible storage (AWS S3, R2, MinIO, Garage, moto) through obstore (docs/cloud.md says
why obstore: measured speed and dependency weight).

The client gets exactly the account's endpoint, region, bucket and keys; ``http://`` is
allowed only for a loopback endpoint (a local MinIO or test server). Retries are obstore's
(exponential, bounded here), timeouts are fixed.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from engine.cloud.transport import MAX_OBJECT_BYTES, Counters
from engine.errors import MemoriesError

__all__ = ["S3Transport", "check_endpoint"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(endpoint: str) -> str:
    """The endpoint URL if it is https://, or http:// to a loopback address; else invalid_input."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise MemoriesError("invalid_input", "The S3 endpoint must be an https:// URL.")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise MemoriesError("invalid_input", "An http:// S3 endpoint is allowed only on this machine (loopback); use https://.")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise MemoriesError("invalid_input", "The S3 endpoint must be a plain URL (no credentials, query or fragment).")
    return endpoint.rstrip("/")


def _map(exc: BaseException) -> MemoriesError:
    from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

    if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
        return MemoriesError("cloud_denied", "The storage refused this account's credentials or bucket.")
    text = str(exc)
    if "NoSuchBucket" in text:
        return MemoriesError("cloud_denied", "The storage has no such bucket (or refuses to show it to these credentials).")
    if "403" in text or "Forbidden" in text or "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        return MemoriesError("cloud_denied", "The storage refused this account's credentials or bucket.")
    return MemoriesError("cloud_unreachable", "The storage could not be reached or failed; nothing more was exchanged.")


class S3Transport:
    def __init__(self, endpoint: str, bucket: str, region: str, access_key_id: str, secret_access_key: str) -> None:
        from obstore.store import S3Store

        self.counters = Counters()
        self._store = S3Store(
            bucket,
            endpoint=check_endpoint(endpoint),
            region=region or "us-east-1",
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            virtual_hosted_style_request=False,
            client_options={
                "allow_http": urlsplit(endpoint).scheme == "http",
                "timeout": "60s",
                "connect_timeout": "10s",
            },
            retry_config={
                "max_retries": 3,
                "retry_timeout": timedelta(seconds=30),
                "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2},
            },
        )

    async def put(self, key: str, data: bytes, replace: bool = False) -> None:
        import obstore

        # An S3 PUT always replaces: ``replace`` changes nothing here.
        try:
            await obstore.put_async(self._store, key, data)
        except Exception as exc:
            raise _map(exc) from None
        self.counters.puts += 1
        self.counters.sent_bytes += len(data)

    async def get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> bytes | None:
        import obstore
        from obstore.exceptions import NotFoundError

        self.counters.gets += 1
        try:
            result = await obstore.get_async(self._store, key)
            if result.meta["size"] > max_bytes:
                raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
            data = bytes(await result.bytes_async())
        except (NotFoundError, FileNotFoundError):  # obstore raises the builtin for a 404
            return None
        except MemoriesError:
            raise
        except Exception as exc:
            raise _map(exc) from None
        if len(data) > max_bytes:
            raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
        self.counters.received_bytes += len(data)
        return data

    async def list_after(self, prefix: str, after: str | None, limit: int) -> list[str]:
        import obstore

        keys: list[str] = []
        try:
            stream: Any = obstore.list(self._store, prefix, offset=after, chunk_size=min(limit, 1000))
            async for batch in stream:
                self.counters.lists += 1
                keys.extend(str(meta["path"]) for meta in batch)
                if len(keys) >= limit:
                    break
        except Exception as exc:
            raise _map(exc) from None
        return sorted(keys)[:limit]

    async def check(self) -> None:
        await self.list_after("memories-check/", None, 1)
