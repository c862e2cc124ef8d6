"""SSH sessions over asyncssh (RM-2): the host key is checked against the credential's pin, never accepted blindly."""

from __future__ import annotations

from typing import Any

import asyncssh

from engine.errors import MemoriesError
from engine.remote.sessions.base import CONNECT_TIMEOUT, RemoteSession, bounded_bytes, connect_error
from engine.remote.targets import Target

__all__ = ["SshSession", "known_hosts_of", "client_keys_of"]


def known_hosts_of(target: Target) -> Any:
    """The only host keys this connection trusts: the pinned key or the stored known-hosts entries."""
    try:
        if target.host_key:
            return ([asyncssh.import_public_key(target.host_key)], [], [])
        if target.known_hosts:
            return asyncssh.import_known_hosts(target.known_hosts)
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise MemoriesError("invalid_input", "The credential's host key pin is not a valid OpenSSH key.") from exc
    # Reaching here would mean "accept any host key"; a credential always pins one (targets.build).
    raise MemoriesError("host_key_unknown", "The credential pins no host key; refusing to connect.")


def client_keys_of(target: Target) -> Any:
    if not target.private_key:
        return None
    try:
        key = asyncssh.import_private_key(target.private_key)
        if target.certificate:
            return [(key, asyncssh.import_certificate(target.certificate))]
        return [key]
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise MemoriesError("invalid_input", "The SSH key or certificate in the credential cannot be read.") from exc


async def ssh_connect(target: Target, host: str) -> asyncssh.SSHClientConnection:
    try:
        return await asyncssh.connect(
            host,
            port=target.port,
            username=target.user,
            password=target.password or None,
            client_keys=client_keys_of(target),
            known_hosts=known_hosts_of(target),
            # No ~/.ssh/config, no agent, no default keys: only what the credential holds.
            config=None,
            agent_path=None,
            agent_forwarding=False,
            connect_timeout=CONNECT_TIMEOUT,
            login_timeout=CONNECT_TIMEOUT,
        )
    except asyncssh.HostKeyNotVerifiable as exc:
        raise MemoriesError("host_key_unknown") from exc
    except asyncssh.PermissionDenied as exc:
        raise MemoriesError("remote_auth_failed") from exc
    except asyncssh.Error as exc:
        raise MemoriesError("protocol_error", "The SSH handshake failed.") from exc
    except MemoriesError:
        raise
    except Exception as exc:
        raise connect_error(exc) from exc


class SshSession(RemoteSession):
    _conn: asyncssh.SSHClientConnection | None = None

    async def connect(self) -> None:
        self._conn = await ssh_connect(self.target, self.host)

    @property
    def connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is None:
            raise MemoriesError("session_closed")
        return self._conn

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        conn = self.connection
        try:
            done = await conn.run(str(instruction["command"]), check=False, timeout=self.exec_timeout, encoding=None)
        except asyncssh.TimeoutError as exc:
            raise MemoriesError("timeout", "The remote command did not finish in time.") from exc
        except (asyncssh.Error, OSError) as exc:
            raise MemoriesError("session_closed", "The SSH connection was lost.") from exc
        stdout = done.stdout if isinstance(done.stdout, bytes) else b""
        stderr = done.stderr if isinstance(done.stderr, bytes) else b""
        out = bounded_bytes(stdout)
        err = bounded_bytes(stderr, limit=16 * 1024)
        return {**out, "stderr": err["output"], "exit_status": done.exit_status}

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.abort()
