"""FTP sessions (RM-5: FTP carries file operations) over ftplib, optionally explicit FTPS with verified TLS."""

from __future__ import annotations

import asyncio
import base64
import ftplib
import io
from typing import Any

from engine.errors import MemoriesError
from engine.remote.sessions.base import (
    CONNECT_TIMEOUT,
    EXEC_TIMEOUT,
    MAX_RESULT_BYTES,
    RemoteSession,
    connect_error,
    server_message,
)
from engine.remote.targets import Target
from engine.remote.tls import client_context

__all__ = ["FtpSession"]

MAX_GET_BYTES = 1024 * 1024


class _TooLarge(Exception):
    pass


class FtpSession(RemoteSession):
    def __init__(self, target: Target, host: str, exec_timeout: float = EXEC_TIMEOUT) -> None:
        super().__init__(target, host, exec_timeout)
        self._ftp: ftplib.FTP | None = None
        # ftplib is blocking and not thread-safe: one operation at a time per session.
        self._guard = asyncio.Lock()

    def _open(self) -> ftplib.FTP:
        context = client_context(self.target)
        ftp = ftplib.FTP_TLS(context=context, timeout=CONNECT_TIMEOUT) if context else ftplib.FTP(timeout=CONNECT_TIMEOUT)
        try:
            ftp.connect(self.host, self.target.port)
            if isinstance(ftp, ftplib.FTP_TLS):
                self._secure(ftp)
            ftp.login(self.target.user, self.target.password)
            if isinstance(ftp, ftplib.FTP_TLS):
                try:
                    ftp.prot_p()  # file transfers (the data channel) are encrypted as well
                except ftplib.Error as exc:
                    raise MemoriesError(
                        "remote_tls_failed", "The FTP server refused to encrypt file transfers (PROT P)."
                    ) from exc
        except BaseException:
            ftp.close()
            raise
        return ftp

    @staticmethod
    def _secure(ftp: ftplib.FTP_TLS) -> None:
        """Explicit FTPS (RFC 4217): AUTH TLS before USER/PASS, so the password never travels in clear.

        The certificate and hostname are verified by the context (RM-4); a verify failure is an
        SSLError that connect() maps to remote_tls_failed. A server that does not accept AUTH TLS
        is refused here, before any credential is sent.
        """
        try:
            ftp.auth()
        except ftplib.Error as exc:
            raise MemoriesError(
                "remote_tls_failed", "The FTP server does not offer TLS (AUTH TLS was refused); no credential was sent."
            ) from exc

    async def connect(self) -> None:
        try:
            self._ftp = await asyncio.get_running_loop().run_in_executor(None, self._open)
        except MemoriesError:
            raise
        except ftplib.error_perm as exc:
            raise MemoriesError("remote_auth_failed") from exc
        except ftplib.Error as exc:
            raise MemoriesError("protocol_error", "The FTP server answered unexpectedly.") from exc
        except Exception as exc:
            raise connect_error(exc) from exc

    def _run(self, instruction: dict[str, Any]) -> dict[str, Any]:
        ftp = self._ftp
        assert ftp is not None
        action, path = instruction["action"], instruction["path"]
        if action == "list":
            lines: list[str] = []
            ftp.retrlines(f"LIST {path}".strip(), lines.append)
            text = "\n".join(lines)
            return {"output": text[:MAX_RESULT_BYTES], "truncated": len(text) > MAX_RESULT_BYTES}
        if action == "get":
            buf = bytearray()

            def take(chunk: bytes) -> None:
                buf.extend(chunk)
                if len(buf) > MAX_GET_BYTES:
                    raise _TooLarge

            try:
                ftp.retrbinary(f"RETR {path}", take)
            except _TooLarge:
                ftp.abort()
                raise MemoriesError("invalid_input", "The file is larger than 1 MiB; nothing was delivered.") from None
            return {"data_b64": base64.b64encode(bytes(buf)).decode("ascii"), "bytes": len(buf)}
        if action == "put":
            data = base64.b64decode(instruction["data_b64"])
            ftp.storbinary(f"STOR {path}", io.BytesIO(data))
            return {"stored": len(data)}
        if action == "delete":
            return {"status": ftp.delete(path)}
        return {"status": ftp.mkd(path)}

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._ftp is None:
            raise MemoriesError("session_closed")
        async with self._guard:
            try:
                return await asyncio.get_running_loop().run_in_executor(None, self._run, instruction)
            except ftplib.error_perm as exc:
                raise MemoriesError("remote_error", server_message(str(exc))) from exc
            except (ftplib.Error, EOFError, OSError) as exc:
                raise MemoriesError("session_closed", "The FTP connection was lost.") from exc

    @property
    def closed(self) -> bool:
        return self._ftp is None

    async def close(self) -> None:
        if self._ftp is not None:
            ftp, self._ftp = self._ftp, None
            ftp.close()  # no QUIT round trip: lock must not wait on the server
