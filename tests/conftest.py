from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    """A fresh data home with no vault; its daemon (if any) is stopped afterwards."""
    client = Cli(home=tmp_path / "home")
    yield client
    client.stop()


@pytest.fixture
def vault(cli: Cli) -> Cli:
    """An initialized, unlocked vault served by a real daemon process."""
    cli.init()
    return cli
