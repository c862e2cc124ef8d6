"""Remote credential types: which fields each kind has, and the host allowlist (RM-1, RM-2, RM-4).

A remote credential's *public* part (stored in the encrypted summary) names the
target and its policy: host, port, user, database, TLS mode, CA and client
certificate references, host key pin and allowlist. Its *secret* part (the
encrypted body, never returned) holds passwords and private keys. :func:`build`
validates user input into the two halves; :class:`Target` is the decrypted view a
session or proxy uses.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from engine.errors import MemoriesError

__all__ = ["REMOTE_TYPES", "DB_TYPES", "DEFAULT_PORTS", "Target", "build", "target_from", "check_allowed"]

DB_TYPES = frozenset({"postgres", "mysql", "redis"})
REMOTE_TYPES = frozenset({"postgres", "mysql", "redis", "ssh", "ftp", "tcp"})
DEFAULT_PORTS = {"postgres": 5432, "mysql": 3306, "redis": 6379, "ssh": 22, "ftp": 21}
TLS_MODES = frozenset({"required", "disabled"})
# Weak password exchanges a PostgreSQL proxy refuses unless the credential allows them (PX-2).
WEAK_AUTH = frozenset({"md5", "cleartext"})

_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?$")


def _host(value: str) -> str:
    value = value.strip().lower()
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not _HOST.match(value):
        raise MemoriesError("invalid_input", "A host is a DNS name or an IP address.")
    return value


@dataclass(frozen=True)
class Target:
    """Decrypted connection parameters of one remote credential (secrets included: never log)."""

    asset_id: bytes
    name: str
    ctype: str
    host: str
    port: int
    user: str = ""
    database: str = ""
    tls: str = "required"
    allow_hosts: tuple[str, ...] = ()
    allow_auth: frozenset[str] = frozenset()
    password: str = field(default="", repr=False)
    private_key: str = field(default="", repr=False)
    certificate: str = ""
    host_key: str = ""
    known_hosts: str = ""
    tls_ca_pem: str = ""  # resolved from the tls_ca credential reference
    # mTLS: resolved from the tls_cert credential reference (certificate chain + its key).
    tls_client_cert: str = ""
    tls_client_key: str = field(default="", repr=False)


def build(ctype: str, fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Validate user input for a remote credential into (public, secret)."""
    if ctype not in REMOTE_TYPES:
        raise MemoriesError("invalid_input", "Unknown remote credential type.")
    host = _host(str(fields.get("host") or ""))
    port = fields.get("port") or DEFAULT_PORTS.get(ctype)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise MemoriesError("invalid_input", "A port is 1–65535 (tcp credentials need one).")
    allow = [_host(h) for h in fields.get("allow_hosts") or []] or [host]
    if host not in allow:
        raise MemoriesError("invalid_input", "The credential's own host must be on its allowlist.")
    public: dict[str, Any] = {"host": host, "port": port, "allow_hosts": sorted(set(allow))}
    secret: dict[str, Any] = {}
    password = fields.get("password")
    if ctype != "tcp":
        public["user"] = str(fields.get("user") or "")
        if not public["user"] and ctype != "redis":
            raise MemoriesError("invalid_input", "This credential type needs a user.")
    if ctype in DB_TYPES or ctype in {"ftp", "tcp"}:
        tls = str(fields.get("tls") or ("disabled" if ctype in {"ftp", "tcp"} else "required"))
        if tls not in TLS_MODES:
            raise MemoriesError("invalid_input", "TLS mode is `required` or `disabled`.")
        public["tls"] = tls
        if fields.get("tls_ca"):
            public["tls_ca"] = str(fields["tls_ca"])
    client_cert = bool(fields.get("tls_cert"))
    if client_cert:
        # The service stores the checked reference; here only where it may appear is decided.
        if ctype not in DB_TYPES:
            raise MemoriesError("invalid_input", "--tls-cert applies to postgres, mysql and redis credentials.")
        if public["tls"] == "disabled":
            raise MemoriesError("invalid_input", "A TLS client certificate needs --tls required.")
    if ctype in DB_TYPES:
        public["database"] = str(fields.get("database") or "")
        auth = [str(a) for a in fields.get("allow_auth") or []]
        if not set(auth) <= WEAK_AUTH:
            raise MemoriesError("invalid_input", "allow_auth may name only md5 and cleartext.")
        public["allow_auth"] = sorted(set(auth))
    if ctype == "ssh":
        key = str(fields.get("private_key") or "")
        if not password and not key and not fields.get("key"):
            raise MemoriesError("invalid_input", "An SSH credential needs a password or a private key.")
        if key:
            secret["private_key"] = key
        if fields.get("certificate"):
            public["certificate"] = str(fields["certificate"]).strip()
        host_key, known = str(fields.get("host_key") or "").strip(), str(fields.get("known_hosts") or "").strip()
        if not host_key and not known:
            # RM-2: a host key is verified, never blindly accepted; so one must be pinned up front.
            raise MemoriesError("invalid_input", "An SSH credential needs --host-key or --known-hosts.")
        public["host_key"], public["known_hosts"] = host_key, known
    if password:
        secret["password"] = str(password)
    elif ctype == "ftp" or (ctype in {"postgres", "mysql"} and not client_cert):
        # A database account may authenticate by its client certificate alone (PostgreSQL
        # `cert`, MariaDB `REQUIRE X509` with an empty password).
        raise MemoriesError("invalid_input", "This credential type needs a password (or, for a database, --tls-cert).")
    return public, secret


def target_from(
    asset_id: bytes,
    name: str,
    ctype: str,
    public: dict[str, Any],
    secret: dict[str, Any],
    tls_ca_pem: str = "",
    tls_client: tuple[str, str] = ("", ""),
) -> Target:
    """The decrypted view; ``tls_client`` is the referenced tls_cert's (certificate PEM, private key PEM)."""
    try:
        return Target(
            asset_id=asset_id,
            name=name,
            ctype=ctype,
            host=str(public["host"]),
            port=int(public["port"]),
            user=str(public.get("user", "")),
            database=str(public.get("database", "")),
            tls=str(public.get("tls", "required")),
            allow_hosts=tuple(public.get("allow_hosts", ())),
            allow_auth=frozenset(public.get("allow_auth", ())),
            password=str(secret.get("password", "")),
            private_key=str(secret.get("private_key", "")),
            certificate=str(public.get("certificate", "")),
            host_key=str(public.get("host_key", "")),
            known_hosts=str(public.get("known_hosts", "")),
            tls_ca_pem=tls_ca_pem,
            tls_client_cert=tls_client[0],
            tls_client_key=tls_client[1],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MemoriesError("invalid_input", "That credential is not a remote target.") from exc


def check_allowed(target: Target, host: str | None = None) -> str:
    """RM-1: the host to connect to must be on the credential's allowlist; returns it normalized."""
    chosen = _host(host) if host else target.host
    if chosen not in target.allow_hosts:
        raise MemoriesError("host_not_allowed")
    return chosen
