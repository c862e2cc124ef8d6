"""Redis sessions over redis-py's asyncio client: direct TLS by default (RM-4, PX-2).

TLS uses the engine's own context (:func:`engine.remote.tls.client_context`: system
trust plus the tls_ca, hostname always verified, and the credential's client
certificate), handed to redis-py's connection instead of its file-path options, so
the client key never has to exist as a file.
"""

from __future__ import annotations

import ssl
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rexc

from engine.errors import MemoriesError
from engine.remote.sessions.base import (
    CONNECT_TIMEOUT,
    MAX_RESULT_BYTES,
    RemoteSession,
    connect_error,
    server_message,
)
from engine.remote.tls import client_context, refusal_after_handshake, tls_error

__all__ = ["RedisSession"]


class _ContextSSLConnection(aioredis.SSLConnection):
    """redis-py's TLS connection, but with a ready context instead of one built from file paths."""

    def __init__(self, *, tls_context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ssl_context.context = tls_context  # RedisSSLContext.get() returns a preset context as it is


def _plain(value: Any, budget: list[int]) -> Any:
    """Decode a reply for JSON, spending a shared byte budget so nested replies stay bounded."""
    if isinstance(value, bytes):
        budget[0] -= len(value)
        return value.decode("utf-8", "replace") if budget[0] >= 0 else None
    if isinstance(value, list | tuple | set):
        return [_plain(v, budget) for v in value if budget[0] >= 0]
    if isinstance(value, dict):
        return {str(_plain(k, budget)): _plain(v, budget) for k, v in value.items() if budget[0] >= 0}
    return value


class RedisSession(RemoteSession):
    _client: aioredis.Redis | None = None

    async def connect(self) -> None:
        context = client_context(self.target)
        options: dict[str, Any] = {
            "host": self.host,
            "port": self.target.port,
            "username": self.target.user or None,
            "password": self.target.password or None,
            "db": int(self.target.database) if self.target.database.isdigit() else 0,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": self.exec_timeout,
            "retry_on_timeout": False,
            "decode_responses": False,
        }
        if context is not None:
            options.update(connection_class=_ContextSSLConnection, tls_context=context)
        client = aioredis.Redis.from_pool(aioredis.ConnectionPool(**options))
        # Raw replies: the user approved a command, not redis-py's Python-side reinterpretation of it.
        client.response_callbacks.clear()
        try:
            await client.ping()
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, rexc.AuthenticationError | rexc.AuthenticationWrongNumberOfArgsError):
                raise MemoriesError("remote_auth_failed") from exc
            if isinstance(exc, rexc.ResponseError) and "NOAUTH" in str(exc):
                raise MemoriesError("remote_auth_failed") from exc
            cause = exc.__cause__ or exc.__context__
            if isinstance(exc, rexc.ConnectionError) and isinstance(cause, ssl.SSLError | ssl.CertificateError):
                # Also a client certificate the server refused (TLS 1.3 reports it on the first read).
                raise tls_error(cause, self.target) from exc
            if context is not None and isinstance(exc, rexc.ConnectionError):
                # The connection closed during the first exchange: maybe a refused client
                # certificate whose alert was lost (see refusal_after_handshake).
                refusal = await refusal_after_handshake(self.host, self.target.port, self.target)
                if refusal is not None:
                    raise refusal from exc
            if isinstance(exc, rexc.ConnectionError) and cause is not None:
                raise connect_error(cause) from exc
            raise connect_error(exc) from exc
        self._client = client

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            raise MemoriesError("session_closed")
        argv = [str(a) for a in instruction["argv"]]
        try:
            reply = await self._client.execute_command(*argv)  # type: ignore[no-untyped-call]
        except rexc.ResponseError as exc:
            raise MemoriesError("remote_error", server_message(str(exc))) from exc
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            raise MemoriesError("session_closed", "The Redis connection was lost.") from exc
        budget = [MAX_RESULT_BYTES]
        value = _plain(reply, budget)
        return {"reply": value, "truncated": budget[0] < 0}

    @property
    def closed(self) -> bool:
        return self._client is None

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
