"""The session interface and the result bounds every protocol shares (RM-5: results are bounded)."""

from __future__ import annotations

import ssl
from abc import ABC, abstractmethod
from typing import Any

from engine.errors import MemoriesError
from engine.remote.targets import Target

__all__ = [
    "RemoteSession",
    "MAX_ROWS",
    "MAX_RESULT_BYTES",
    "bounded_rows",
    "bounded_bytes",
    "connect_error",
    "exec_deadline",
]

MAX_ROWS = 1000
MAX_RESULT_BYTES = 256 * 1024
CONNECT_TIMEOUT = 15.0
EXEC_TIMEOUT = 60.0


def exec_deadline(configured: float | None) -> float:
    """The per-instruction deadline: the configured value may shorten the 60 s default, never extend it."""
    if configured is None or not configured > 0:  # also NaN
        return EXEC_TIMEOUT
    return min(float(configured), EXEC_TIMEOUT)


class RemoteSession(ABC):
    """A live connection owned by the daemon. Methods run on the remote runtime loop."""

    def __init__(self, target: Target, host: str, exec_timeout: float = EXEC_TIMEOUT) -> None:
        self.target = target
        self.host = host
        self.exec_timeout = exec_timeout  # an instruction past it is cancelled and the session closed

    @abstractmethod
    async def connect(self) -> None: ...

    @abstractmethod
    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    async def close(self) -> None: ...

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once the connection is gone: closed by us, or by a timeout or a broken stream."""


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def bounded_rows(columns: list[str], rows: list[Any]) -> dict[str, Any]:
    """At most MAX_ROWS rows and MAX_RESULT_BYTES of cell text; the flag says when we cut."""
    out: list[list[Any]] = []
    used = 0
    truncated = len(rows) > MAX_ROWS
    for row in rows[:MAX_ROWS]:
        cells = [_cell(v) for v in row]
        used += sum(len(str(c)) for c in cells) + 8
        if used > MAX_RESULT_BYTES:
            truncated = True
            break
        out.append(cells)
    return {"columns": columns, "rows": out, "row_count": len(rows), "truncated": truncated}


def bounded_bytes(data: bytes, *, limit: int = MAX_RESULT_BYTES) -> dict[str, Any]:
    return {"output": data[:limit].decode("utf-8", "replace"), "bytes": len(data), "truncated": len(data) > limit}


def connect_error(exc: BaseException) -> MemoriesError:
    """Map a library's connect failure to a typed error; the library text is dropped (it may quote input)."""
    if isinstance(exc, MemoriesError):
        return exc
    if isinstance(exc, ssl.SSLCertVerificationError | ssl.CertificateError):
        return MemoriesError("remote_tls_failed")
    if isinstance(exc, ssl.SSLError):
        return MemoriesError("remote_tls_failed", "The TLS handshake with the remote server failed.")
    if isinstance(exc, TimeoutError):
        return MemoriesError("remote_unreachable", "The remote server did not answer in time.")
    if isinstance(exc, ConnectionRefusedError):
        return MemoriesError("remote_unreachable", "The remote server refused the connection.")
    if isinstance(exc, OSError):
        return MemoriesError("remote_unreachable")
    return MemoriesError("protocol_error")


def server_message(text: str) -> str:
    """A server's own error sentence, shortened; it describes the instruction, not the credential."""
    return " ".join(text.split())[:500]
