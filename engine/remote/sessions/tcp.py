"""Raw TCP sessions (optionally TLS): send the approved bytes, return what the server answers."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from engine.errors import MemoriesError
from engine.remote.sessions.base import CONNECT_TIMEOUT, MAX_RESULT_BYTES, RemoteSession, connect_error
from engine.remote.tls import client_context

__all__ = ["TcpSession"]

# A raw stream has no message boundary: the answer ends at EOF or after this much silence.
QUIET_SECONDS = 1.0


class TcpSession(RemoteSession):
    _reader: asyncio.StreamReader | None = None
    _writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        context = client_context(self.target)
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.target.port, ssl=context, server_hostname=self.host if context else None),
                CONNECT_TIMEOUT,
            )
        except Exception as exc:
            raise connect_error(exc) from exc

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._reader is None or self._writer is None:
            raise MemoriesError("session_closed")
        try:
            self._writer.write(base64.b64decode(instruction["data_b64"]))
            await self._writer.drain()
            received = bytearray()
            eof = False
            while len(received) <= MAX_RESULT_BYTES:
                try:
                    chunk = await asyncio.wait_for(self._reader.read(65536), QUIET_SECONDS)
                except TimeoutError:
                    break
                if not chunk:
                    eof = True
                    break
                received.extend(chunk)
        except OSError as exc:
            raise MemoriesError("session_closed", "The TCP connection was lost.") from exc
        data = bytes(received[:MAX_RESULT_BYTES])
        return {
            "output": data.decode("utf-8", "replace"),
            "data_b64": base64.b64encode(data).decode("ascii"),
            "bytes": len(received),
            "truncated": len(received) > MAX_RESULT_BYTES,
            "eof": eof,
        }

    @property
    def closed(self) -> bool:
        return self._writer is None

    async def close(self) -> None:
        if self._writer is not None:
            writer, self._writer, self._reader = self._writer, None, None
            writer.transport.abort()
