"""Issue 17: quitting the dashboard locks the vault by default (a logout's SIGTERM/SIGHUP
or Ctrl-C alike); `--keep-unlocked` leaves it unlocked. Real engine, real dashboard process."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.desktop.support import start_dashboard
from tests.helpers import Cli


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_quitting_the_dashboard_locks(vault: Cli, tmp_path: Path, signum: int) -> None:
    """DT-5 (issue 17): the dashboard ends on SIGTERM, SIGHUP (logout) or Ctrl-C and locks the vault."""
    dash = start_dashboard(vault, tmp_path / "dashboard.log", keep_unlocked=False)
    dash.wait_state("unlocked", "attention")
    dash.proc.send_signal(signum)
    assert dash.proc.wait(120) == 0
    assert vault.ok("status") == {"state": "locked"}


def test_keep_unlocked_leaves_the_vault_unlocked(vault: Cli, tmp_path: Path) -> None:
    """Issue 17: `memories dashboard --keep-unlocked` quits without locking."""
    dash = start_dashboard(vault, tmp_path / "dashboard.log", keep_unlocked=True)
    dash.wait_state("unlocked", "attention")
    dash.proc.send_signal(signal.SIGTERM)
    assert dash.proc.wait(120) == 0
    assert vault.ok("status")["state"] == "unlocked"


def test_quitting_with_no_engine_exits_cleanly(cli: Cli, tmp_path: Path) -> None:
    """Issue 17: with nothing to lock (no engine running) quitting still exits at once and cleanly."""
    dash = start_dashboard(cli, tmp_path / "dashboard.log", keep_unlocked=False)
    dash.wait_state("not_running")
    dash.proc.send_signal(signal.SIGTERM)
    assert dash.proc.wait(120) == 0
    assert cli.daemon_pid() is None
