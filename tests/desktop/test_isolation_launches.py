"""SPEC ST-11 for the desktop's launches: the tray (started in a hostile folder) starts the
engine and its status probes isolated; the autostart entry's command imports nothing from the
folder it starts in (tests/hostile_cwd.py has the folder)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from desktop import autostart
from desktop.prober import probe_once
from tests.desktop.support import XSession, stop_process
from tests.desktop.test_packaging import _parse_desktop_exec, _parse_systemd_exec
from tests.helpers import Cli
from tests.hostile_cwd import assert_isolated_engine, hostile_dir, markers, memories_exe


def _wait_output(proc: subprocess.Popen[bytes], out: Path, pattern: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if re.search(pattern, out.read_text(errors="replace")):
            return
        assert proc.poll() is None, out.read_text(errors="replace")
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} not in tray output: {out.read_text(errors='replace')}")


def test_st11_tray_from_a_hostile_directory(cli: Cli, xsession: XSession, tmp_path: Path) -> None:
    """ST-11: `memories tray` run in the hostile folder starts the engine (isolated, in the data
    home) and follows it through its probes, locked then unlocked; nothing hostile is imported."""
    work = hostile_dir(tmp_path)
    cli.init()
    cli.stop()  # the tray starts the engine itself
    out = tmp_path / "tray.out"
    env = xsession.env(cli.environ())
    env["BROWSER"] = "true"
    options = ["--backend", "xorg", "--verbose", "--probe-interval", "0.3", "--probe-deadline", "5"]
    with open(out, "wb") as sink:
        tray = subprocess.Popen(
            [str(memories_exe()), "--home", str(cli.home), "tray", *options],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_output(tray, out, r"memories tray: state locked")
        assert_isolated_engine(cli)
        cli.unlock()
        _wait_output(tray, out, r"memories tray: state unlocked")
        tray.send_signal(signal.SIGTERM)
        assert tray.wait(30) == 0, out.read_text(errors="replace")
    finally:
        stop_process(tray)
    assert markers(work) == []


def test_st11_status_probe_from_a_hostile_working_directory(vault: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ST-11: the desktop's sibling CLI child (prober) started while the desktop's own working
    directory is the hostile folder still reads the engine and imports nothing from it."""
    work = hostile_dir(tmp_path)
    monkeypatch.chdir(work)
    probe = probe_once(vault.home, deadline=30, env=vault.environ())
    assert probe.state == "unlocked", probe
    assert markers(work) == []


@pytest.mark.parametrize("kind", ["xdg", "systemd"])
def test_st11_autostart_entry_command_runs_isolated(kind: str, cli: Cli, tmp_path: Path) -> None:
    """ST-11: the command an autostart entry holds passes -P (the session starts it in $HOME, any
    folder); run in the hostile folder it imports nothing from there."""
    work = hostile_dir(tmp_path)
    text = autostart.render_entry(kind, cli.home)
    key = "Exec=" if kind == "xdg" else "ExecStart="
    value = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key))
    command = _parse_desktop_exec(value) if kind == "xdg" else _parse_systemd_exec(value)
    if not getattr(sys, "frozen", False):
        assert command[:4] == [sys.executable, "-P", "-m", "desktop.tray.launcher"]
    done = subprocess.run([*command, "--help"], cwd=work, env=cli.environ(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
    assert markers(work) == []
