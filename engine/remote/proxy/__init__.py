"""Credential-injecting loopback proxies (PX-1…PX-4): one handshake state machine per protocol."""

from __future__ import annotations

from engine.remote.proxy.listener import ProxyLimits, ProxyListener
from engine.remote.targets import Target

__all__ = ["ProxyListener", "ProxyLimits", "proxy_for", "PROXY_TYPES"]

PROXY_TYPES = frozenset({"postgres", "redis", "mysql", "ssh"})


def proxy_for(
    proxy_id: str,
    target: Target,
    host: str,
    forward: tuple[str, int] | None = None,
    limits: ProxyLimits | None = None,
) -> ProxyListener:
    listener = _listener(proxy_id, target, host, forward)
    if limits is not None:
        listener.limits = limits
    return listener


def _listener(proxy_id: str, target: Target, host: str, forward: tuple[str, int] | None) -> ProxyListener:
    from engine.errors import MemoriesError

    if target.ctype == "ssh":
        from engine.remote.proxy.ssh import SshProxy

        if forward is None:
            raise MemoriesError("invalid_input", "An SSH proxy needs --forward HOST:PORT (as seen from the server).")
        return SshProxy(proxy_id, target, host, *forward)
    if target.ctype == "postgres":
        from engine.remote.proxy.postgres import PostgresProxy

        return PostgresProxy(proxy_id, target, host)
    if target.ctype == "redis":
        from engine.remote.proxy.redis import RedisProxy

        return RedisProxy(proxy_id, target, host)
    if target.ctype == "mysql":
        from engine.remote.proxy.mysql import MysqlProxy

        return MysqlProxy(proxy_id, target, host)
    raise MemoriesError("invalid_input", "This credential type has no proxy (postgres, mysql, redis and ssh do).")
