from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.helpers import Cli


class Engine:
    """Many requests over one real IPC connection to the real daemon (faster than a CLI call each)."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli
        self.client = IpcClient(Paths(cli.home).socket)
        self.client.connect()

    def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        return self.client.request({"op": op, **fields}, timeout=120)

    def search_titles(self, query: str, **fields: Any) -> list[str]:
        result = self("search", query=query, wait_ms=120_000, **fields)
        assert result["partial"] is False
        return [r["title"] for r in result["results"]]

    def wait_ready(self) -> dict[str, Any]:
        # wait_ms makes the engine wait for the background build (no sleeping here).
        self("search", query="warmup", wait_ms=120_000)
        status = self("rag_status")
        assert status["index"]["state"] == "ready", status
        return status

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def engine(vault: Cli) -> Iterator[Engine]:
    handle = Engine(vault)
    yield handle
    handle.close()
