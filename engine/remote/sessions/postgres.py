"""PostgreSQL sessions over asyncpg: TLS by default with hostname verification (RM-4)."""

from __future__ import annotations

from typing import Any

import asyncpg

from engine.errors import MemoriesError
from engine.remote.sessions.base import (
    CONNECT_TIMEOUT,
    EXEC_TIMEOUT,
    RemoteSession,
    bounded_rows,
    connect_error,
    server_message,
)
from engine.remote.tls import client_context

__all__ = ["PostgresSession"]


class PostgresSession(RemoteSession):
    _conn: asyncpg.Connection | None = None

    async def connect(self) -> None:
        context = client_context(self.target)
        try:
            self._conn = await asyncpg.connect(
                host=self.host,
                port=self.target.port,
                user=self.target.user,
                password=self.target.password,
                database=self.target.database or self.target.user,
                ssl=context if context is not None else False,
                timeout=CONNECT_TIMEOUT,
                statement_cache_size=0,
            )
        except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError) as exc:
            raise MemoriesError("remote_auth_failed") from exc
        except asyncpg.PostgresError as exc:
            raise MemoriesError("remote_error", server_message(str(exc))) from exc
        except BaseException as exc:
            if isinstance(exc, MemoriesError | asyncpg.PostgresError):
                raise
            raise connect_error(exc) from exc

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._conn is None or self._conn.is_closed():
            raise MemoriesError("session_closed")
        text = str(instruction["text"])
        try:
            try:
                records = await self._conn.fetch(text, timeout=EXEC_TIMEOUT)
            except asyncpg.PostgresSyntaxError as exc:
                if "multiple commands" not in str(exc):
                    raise
                # Several statements cannot be prepared; the simple protocol runs them (no rows back).
                status = await self._conn.execute(text, timeout=EXEC_TIMEOUT)
                return {"status": status, "columns": [], "rows": [], "row_count": 0, "truncated": False}
        except asyncpg.PostgresError as exc:
            raise MemoriesError("remote_error", server_message(f"{exc.sqlstate}: {exc}")) from exc
        except (OSError, asyncpg.InterfaceError) as exc:
            raise MemoriesError("session_closed", "The PostgreSQL connection was lost.") from exc
        columns = list(records[0].keys()) if records else []
        return bounded_rows(columns, [tuple(r.values()) for r in records])

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.terminate()  # no network round trip: lock must not wait on a slow server
