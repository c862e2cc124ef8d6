"""One module per remote protocol; :func:`open_session` picks the class for a credential type."""

from __future__ import annotations

from engine.remote.sessions.base import RemoteSession
from engine.remote.targets import Target

__all__ = ["RemoteSession", "session_for"]


def session_for(target: Target, host: str) -> RemoteSession:
    # Imported lazily: each protocol library loads only when a session of its kind opens.
    if target.ctype == "postgres":
        from engine.remote.sessions.postgres import PostgresSession

        return PostgresSession(target, host)
    if target.ctype == "mysql":
        from engine.remote.sessions.mysql import MysqlSession

        return MysqlSession(target, host)
    if target.ctype == "redis":
        from engine.remote.sessions.redis import RedisSession

        return RedisSession(target, host)
    if target.ctype == "ssh":
        from engine.remote.sessions.ssh import SshSession

        return SshSession(target, host)
    if target.ctype == "ftp":
        from engine.remote.sessions.ftp import FtpSession

        return FtpSession(target, host)
    from engine.remote.sessions.tcp import TcpSession

    return TcpSession(target, host)
