"""Fixtures shared by the sync tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.sync.support import make_pair


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    """Two real devices of one user (A made the vault, B joined), stopped afterwards. Modules
    that need another pair (in-process devices, tighter limits) define their own ``pair``."""
    a, b = make_pair(tmp_path)
    yield a, b
    a.stop()
    b.stop()
