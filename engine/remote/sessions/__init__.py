"""One module per remote protocol; :func:`session_for` picks the class for a credential type."""

from __future__ import annotations

from engine.remote.sessions.base import EXEC_TIMEOUT, RemoteSession
from engine.remote.targets import Target

__all__ = ["RemoteSession", "session_for"]


def session_for(target: Target, host: str, exec_timeout: float = EXEC_TIMEOUT) -> RemoteSession:
    """A not yet connected session for ``target`` whose instructions each end at ``exec_timeout``."""
    return _session_class(target.ctype)(target, host, exec_timeout)


def _session_class(ctype: str) -> type[RemoteSession]:
    # Imported lazily: each protocol library loads only when a session of its kind opens.
    if ctype == "postgres":
        from engine.remote.sessions.postgres import PostgresSession

        return PostgresSession
    if ctype == "mysql":
        from engine.remote.sessions.mysql import MysqlSession

        return MysqlSession
    if ctype == "redis":
        from engine.remote.sessions.redis import RedisSession

        return RedisSession
    if ctype == "ssh":
        from engine.remote.sessions.ssh import SshSession

        return SshSession
    if ctype == "ftp":
        from engine.remote.sessions.ftp import FtpSession

        return FtpSession
    from engine.remote.sessions.tcp import TcpSession

    return TcpSession
