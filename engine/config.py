"""Data-home paths and the TOML config (which never holds secrets).

The CLI finds its home and the engine socket through :mod:`engine.home` (no pathlib, no
dataclasses at start); this module is for everything that works with the paths.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import MemoriesError
from engine.home import data_home, engine_socket

__all__ = ["Paths", "resolve_home", "EngineConfig", "load_config", "CenterConfig", "parse_centers"]


def resolve_home(explicit: str | None = None) -> Path:
    """``--home`` wins, then ``MEMORIES_HOME``, then the platform's user data dir."""
    return Path(data_home(explicit))


@dataclass(frozen=True)
class Paths:
    home: Path

    @property
    def store(self) -> Path:
        return self.home / "store.db"

    @property
    def lock_file(self) -> Path:
        return self.home / "engine.lock"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def socket(self) -> Path:
        """The engine socket, inside a private 0700 directory (:func:`engine.home.engine_socket`)."""
        return Path(engine_socket(os.fspath(self.home)))


@dataclass(frozen=True)
class EngineConfig:
    idle_lock_seconds: float = 15 * 60
    sudo_seconds: float = 5 * 60
    max_password_failures_per_minute: int = 5
    # Proxy limits (PX-2/PX-4). None means the built-in default; engine/remote/proxy/listener.py
    # clamps a configured value so it can only make a limit *shorter* (tests use this), never longer.
    proxy_handshake_seconds: float | None = None
    proxy_lifetime_seconds: float | None = None
    # A remote session's per-instruction deadline (RM-5); like the proxy limits, shorten-only
    # (engine/remote/sessions/base.py clamps it to the 60 s default).
    remote_exec_seconds: float | None = None
    # CT-1/saas: the `[[centers]]` entries. An invalid section is kept as its error (never as
    # "no Center"): every Center-gated op then refuses with it, so a typo fails closed.
    centers: tuple[CenterConfig, ...] = ()
    centers_error: str | None = field(default=None, compare=False)

    def require_centers(self) -> tuple[CenterConfig, ...]:
        """The configured Centers, or ``invalid_config`` if the section did not parse."""
        if self.centers_error is not None:
            raise MemoriesError("invalid_config", self.centers_error)
        return self.centers


# -- [[centers]] (docs/center.md, Daemon configuration) -----------------------------------
CenterMode = Literal["tickets", "saas"]
_CENTER_KEYS = frozenset({"url", "key", "mode", "ca", "token_env"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class CenterConfig:
    """One `[[centers]]` entry: where the Center is and the Ed25519 key pinned for it."""

    url: str  # scheme://host[:port], no trailing slash, no path
    key: bytes  # the pinned Ed25519 public key (32 bytes)
    mode: CenterMode
    ca: str | None = None
    token_env: str | None = None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _center_url(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 2048:
        raise MemoriesError("invalid_config", f"{where}: `url` must be an https URL.")
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError:
        raise MemoriesError("invalid_config", f"{where}: `url` is not a valid URL.") from None
    host = parts.hostname or ""
    # No user:password@ (a secret in a config file) and nothing after the authority: the API's
    # paths are fixed by the protocol.
    if not host or parts.username is not None or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise MemoriesError("invalid_config", f"{where}: `url` must be scheme://host[:port] with no path, query or user.")
    if parts.scheme == "http":
        if not _is_loopback(host):
            raise MemoriesError("invalid_config", f"{where}: `url` must use https (plain http only on a loopback address).")
    elif parts.scheme != "https":
        raise MemoriesError("invalid_config", f"{where}: `url` must use https.")
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{netloc}" + (f":{port}" if port is not None else "")


def _center_key(value: object, where: str) -> bytes:
    """The pinned key as `memories center info` prints it: base64 (URL-safe or standard, padding optional)."""
    if isinstance(value, str) and 40 <= len(value) <= 48 and re.fullmatch(r"[A-Za-z0-9+/_-]+=*", value):
        text = value.rstrip("=").replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return raw
    raise MemoriesError("invalid_config", f"{where}: `key` must be the Center's Ed25519 public key in base64 (32 bytes).")


def _one_center(entry: object, index: int) -> CenterConfig:
    where = f"[[centers]] entry {index}"
    if not isinstance(entry, dict):
        raise MemoriesError("invalid_config", f"{where} is not a table.")
    unknown = sorted(str(k) for k in set(entry) - _CENTER_KEYS)
    if unknown:
        raise MemoriesError("invalid_config", f"{where}: unknown key {unknown[0]!r}.")
    url = _center_url(entry.get("url"), where)
    key = _center_key(entry.get("key"), where)
    mode = entry.get("mode")
    if mode not in ("tickets", "saas"):
        raise MemoriesError("invalid_config", f'{where}: `mode` must be "tickets" or "saas".')
    ca = entry.get("ca")
    if ca is not None and (not isinstance(ca, str) or not os.path.isabs(ca)):
        raise MemoriesError("invalid_config", f"{where}: `ca` must be an absolute path to a PEM file.")
    token_env = entry.get("token_env")
    if mode == "saas":
        if not isinstance(token_env, str) or _ENV_NAME.fullmatch(token_env) is None:
            raise MemoriesError("invalid_config", f"{where}: saas mode needs `token_env`, the name of an environment variable.")
    elif token_env is not None:
        raise MemoriesError("invalid_config", f"{where}: `token_env` is only for saas mode.")
    return CenterConfig(url=url, key=key, mode=mode, ca=ca, token_env=token_env)


def parse_centers(data: dict[str, Any]) -> tuple[CenterConfig, ...]:
    """The `[[centers]]` entries of a parsed config.toml, checked (``invalid_config``)."""
    raw = data.get("centers")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MemoriesError("invalid_config", "`centers` must be an array of tables ([[centers]]).")
    centers = tuple(_one_center(entry, i) for i, entry in enumerate(raw, start=1))
    if sum(1 for c in centers if c.mode == "saas") > 1:
        raise MemoriesError("invalid_config", 'At most one [[centers]] entry may have mode = "saas".')
    if len({c.url for c in centers}) != len(centers):
        raise MemoriesError("invalid_config", "Two [[centers]] entries name the same URL.")
    return centers


def load_config(paths: Paths) -> EngineConfig:
    """Read ``[engine]`` from config.toml; unknown keys are ignored with defaults kept.

    ``[[centers]]`` is strict instead (a Center decides who may do what): a bad entry is kept
    as ``centers_error`` and refuses every Center-gated op, it never reads as "no Center".
    """
    try:
        text = paths.config_file.read_text("utf-8")
    except FileNotFoundError:
        return EngineConfig()
    data = tomllib.loads(text)
    centers: tuple[CenterConfig, ...] = ()
    centers_error: str | None = None
    try:
        centers = parse_centers(data)
    except MemoriesError as exc:
        centers_error = exc.message
    engine = data.get("engine", {})
    if not isinstance(engine, dict):
        return EngineConfig(centers=centers, centers_error=centers_error)
    defaults = EngineConfig()

    def number(key: str, default: float) -> float:
        value = engine.get(key)
        return float(value) if isinstance(value, (int, float)) and value > 0 else default

    def optional(key: str) -> float | None:
        value = engine.get(key)
        # bool is an int subclass; `true` is not a duration.
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        return None

    lifetime_minutes = optional("proxy_lifetime_minutes")
    return EngineConfig(
        idle_lock_seconds=number("idle_lock_minutes", defaults.idle_lock_seconds / 60) * 60,
        sudo_seconds=number("sudo_minutes", defaults.sudo_seconds / 60) * 60,
        max_password_failures_per_minute=int(
            number("max_password_failures_per_minute", defaults.max_password_failures_per_minute)
        ),
        proxy_handshake_seconds=optional("proxy_handshake_seconds"),
        proxy_lifetime_seconds=lifetime_minutes * 60 if lifetime_minutes is not None else None,
        remote_exec_seconds=optional("remote_exec_seconds"),
        centers=centers,
        centers_error=centers_error,
    )
