from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.desktop.support import Dashboard, XSession, start_dashboard, stop_process
from tests.helpers import Cli


@pytest.fixture(scope="module")
def module_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    """One initialized, unlocked vault (real daemon) shared by a module's dashboard tests."""
    cli = Cli(home=tmp_path_factory.mktemp("vault") / "home")
    cli.init()
    try:
        yield cli
    finally:
        cli.stop()


@pytest.fixture(scope="module")
def dashboard(module_vault: Cli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`memories dashboard --no-browser` (real process) in front of `module_vault`."""
    dash = start_dashboard(module_vault, tmp_path_factory.mktemp("dash") / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        yield dash
    finally:
        stop_process(dash.proc)


@pytest.fixture(scope="module")
def xsession(tmp_path_factory: pytest.TempPathFactory) -> Iterator[XSession]:
    session = XSession(tmp_path_factory.mktemp("x11"))
    try:
        yield session.start()
    finally:
        session.stop()
