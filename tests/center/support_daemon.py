"""Engines (real daemon processes) configured with a `[[centers]]` entry, for the CT-1 tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from tests.helpers import Cli, raw, raw_error


def engine_with(home: Path, config: str, env: dict[str, str] | None = None) -> Cli:
    """An initialized, unlocked, elevated engine whose config.toml holds ``config``."""
    home.mkdir(parents=True, mode=0o700)
    (home / "config.toml").write_text(config, encoding="utf-8")
    cli = Cli(home=home, env=env or {})
    cli.init()
    cli.sudo()
    return cli


def apply(cli: Cli, ticket: str, name: str) -> dict[str, Any]:
    return cli.ok("center", "ticket", "apply", ticket, "--name", name)


def call(cli: Cli, token: str, **inner: Any) -> Any:
    """One agent request under a grant, as the `memories mcp` process sends it."""
    return raw(cli, {"op": "mcp_call", "token": token, "request": inner})["result"]


def call_error(cli: Cli, token: str, **inner: Any) -> MemoriesError:
    return raw_error(cli, {"op": "mcp_call", "token": token, "request": inner})


def grant_names(cli: Cli) -> list[str]:
    return [g["name"] for g in cli.ok("mcp", "grants", "--all")["grants"]]
