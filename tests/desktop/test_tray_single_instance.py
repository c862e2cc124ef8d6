"""Issue 17: one tray per data home. Starting the tray again (app menu, autostart and
scripts/run all start it) shows the running tray's dashboard instead of adding an icon."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from desktop.status import TrayState
from desktop.tray.single_instance import TrayInstance
from engine.config import Paths
from tests.desktop.support import XSession
from tests.desktop.test_tray_x11 import PROBE_DEADLINE, Tray
from tests.helpers import Cli


def _wait_for(path: Path, timeout: float = 120) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_a_second_tray_shows_the_first_ones_dashboard_and_exits(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    first = Tray(vault, xsession, tmp_path, "xorg")
    try:
        # Bounds for a loaded machine; each wait ends as soon as its state is seen.
        url = first.wait_output(r"memories tray: dashboard (http://127\.0\.0\.1:\d+/#\S+)", timeout=120).group(1)
        first.wait_icon(TrayState.UNLOCKED, timeout=120)
        env = xsession.env(vault.environ())
        second = subprocess.run(
            vault.command("tray", "--backend", "xorg", "--verbose"),
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"already running for this data home (pid {first.proc.pid})" in second.stdout
        assert "backend" not in second.stdout, "the second start must not bring up a tray of its own"
        # The first tray opened its own dashboard (its BROWSER records the link it was given).
        assert _wait_for(first.opened, timeout=120).strip() == url
        assert first.proc.poll() is None
        # Quitting the first releases the data home: a new tray can start.
        first.proc.terminate()
        # A bound, not a pace: quitting locks the vault and waits for a probe in flight (up to
        # its deadline), which on a loaded machine took more than 20 s.
        assert first.proc.wait(PROBE_DEADLINE + 110) == 0
    finally:
        first.stop()
    (tmp_path / "third").mkdir()
    third = Tray(vault, xsession, tmp_path / "third", "xorg")
    try:
        third.wait_output(r"memories tray: backend xorg", timeout=120)
    finally:
        third.stop()


def test_a_peer_can_only_ask_for_the_dashboard(tmp_path: Path) -> None:
    """The instance socket accepts one request, `open`; anything else does nothing."""
    engine_socket = Paths(tmp_path / "home").socket
    opened: list[str] = []
    instance = TrayInstance(engine_socket)
    assert instance.claim(lambda: opened.append("open"))
    try:
        assert oct(engine_socket.parent.stat().st_mode & 0o777) == "0o700"
        for request in (b"unlock\n", b"open", b"\x00" * 64, b""):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(os.fspath(instance.socket_path))
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(5)
                try:
                    answer = conn.recv(16)
                except ConnectionResetError:  # closed with our extra bytes unread
                    answer = b""
                assert answer == b""
        assert opened == []
        # A second claimant in another process is told no, and the first is asked to open.
        probe = (
            "import sys; from pathlib import Path; from desktop.tray.single_instance import TrayInstance\n"
            f"i = TrayInstance(Path({str(engine_socket)!r}))\n"
            "print(i.claim(lambda: None), i.holder_pid)\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
        assert done.stdout.split() == ["False", str(os.getpid())]
        assert opened == ["open"]
    finally:
        instance.close()
    assert not instance.socket_path.exists()
    again = TrayInstance(engine_socket)
    assert again.claim(lambda: None)
    again.close()


def test_open_dashboard_without_a_browser_prints_and_copies_the_link(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """Issue 31: "Open dashboard" where no browser starts ($BROWSER fails, none on PATH) prints
    the link without --verbose and puts it on the clipboard, instead of doing nothing."""
    import shutil

    from tests.helpers import require

    xclip = shutil.which("xclip")
    require(xclip is not None, "xclip (apt: xclip)")
    assert xclip is not None
    bin_dir = tmp_path / "bin"  # a PATH with a clipboard tool and no browser at all
    bin_dir.mkdir()
    (bin_dir / "xclip").symlink_to(xclip)
    first = Tray(vault, xsession, tmp_path, "xorg", verbose=False, extra_env={"PATH": str(bin_dir), "BROWSER": "/bin/false"})
    try:
        first.wait_output(r"memories tray: backend xorg")
        first.wait_icon(TrayState.UNLOCKED)
        assert "dashboard http" not in first.output(), "without --verbose the link is not printed at start"
        second = subprocess.run(  # starting the tray again asks the running one to open its dashboard
            vault.command("tray", "--backend", "xorg"),
            env=xsession.env(vault.environ()),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 0, second.stdout + second.stderr
        line = first.wait_output(r"no browser could be started; open (http://127\.0\.0\.1:\d+/#\S+) \(copied to the clipboard\)")
        url = line.group(1)
        pasted = subprocess.run(
            ["xclip", "-selection", "clipboard", "-o"], env=xsession.env(), capture_output=True, text=True, timeout=10
        )
        assert pasted.stdout == url
    finally:
        first.stop()
