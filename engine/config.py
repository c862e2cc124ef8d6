"""Data-home paths and the TOML config (which never holds secrets).

The CLI finds its home and the engine socket through :mod:`engine.home` (no pathlib, no
dataclasses at start); this module is for everything that works with the paths.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine.home import data_home, engine_socket

__all__ = ["Paths", "resolve_home", "EngineConfig", "load_config"]


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


def load_config(paths: Paths) -> EngineConfig:
    """Read ``[engine]`` from config.toml; unknown keys are ignored with defaults kept."""
    try:
        data = tomllib.loads(paths.config_file.read_text("utf-8"))
    except FileNotFoundError:
        return EngineConfig()
    engine = data.get("engine", {})
    if not isinstance(engine, dict):
        return EngineConfig()
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
    )
