"""MySQL/MariaDB sessions over PyMySQL (blocking, so each call runs in the loop's executor).

TLS uses the engine's context (RM-4), which also carries the credential's client
certificate when it names one (PyMySQL takes a ready ``SSLContext``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

import pymysql

from engine.errors import MemoriesError
from engine.remote.mysql_auth import access_denied
from engine.remote.sessions.base import (
    CONNECT_TIMEOUT,
    RemoteSession,
    bounded_rows,
    connect_error,
    server_message,
)
from engine.remote.tls import client_context, tls_error

__all__ = ["MysqlSession"]

ER_ACCESS_DENIED = 1045
CR_ERRORS = range(2000, 3000)  # client-side errors (connection lost, TLS …)


class MysqlSession(RemoteSession):
    _conn: pymysql.connections.Connection[Any] | None = None

    def _open(self) -> pymysql.connections.Connection[Any]:
        context = client_context(self.target)
        return pymysql.connect(
            host=self.host,
            port=self.target.port,
            user=self.target.user,
            password=self.target.password,
            database=self.target.database or None,
            ssl=context,
            ssl_disabled=context is None,
            connect_timeout=int(CONNECT_TIMEOUT),
            read_timeout=max(1, int(self.exec_timeout)),
            write_timeout=max(1, int(self.exec_timeout)),
            autocommit=True,
        )

    async def connect(self) -> None:
        try:
            self._conn = await asyncio.get_running_loop().run_in_executor(None, self._open)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code == ER_ACCESS_DENIED:
                raise access_denied(self.target) from exc
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ssl.SSLError | ssl.CertificateError):
                # Also a client certificate the server refused (TLS 1.3 reports it on the first read).
                raise tls_error(cause, self.target) from exc
            if cause is not None:
                raise connect_error(cause) from exc
            raise MemoriesError("remote_unreachable") from exc
        except pymysql.err.MySQLError as exc:
            raise MemoriesError("protocol_error") from exc
        except Exception as exc:
            raise connect_error(exc) from exc

    def _run(self, text: str) -> dict[str, Any]:
        assert self._conn is not None
        with self._conn.cursor() as cursor:
            affected = cursor.execute(text)
            if cursor.description is None:
                return {"status": f"OK {affected}", "columns": [], "rows": [], "row_count": 0, "truncated": False}
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchmany(1001)
            return bounded_rows(columns, list(rows))

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._conn is None:
            raise MemoriesError("session_closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(None, self._run, str(instruction["text"]))
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if isinstance(code, int) and code in CR_ERRORS:
                raise MemoriesError("session_closed", "The MySQL connection was lost.") from exc
            raise MemoriesError("remote_error", server_message(f"{code}: {exc.args[1] if len(exc.args) > 1 else ''}")) from exc
        except pymysql.err.MySQLError as exc:
            args = exc.args
            raise MemoriesError("remote_error", server_message(" ".join(str(a) for a in args))) from exc

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(pymysql.err.Error):
                conn.close()
