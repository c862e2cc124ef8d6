from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Cli, require


def clearers(display: str) -> list[int]:
    """The clipboard-clearing children (engine/cli/clipboard.py) waiting on X ``display``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"engine.cli.clipboard" in cmdline and f"DISPLAY={display}\0".encode() in environ + b"\0":
            found.append(int(proc.name))
    return found


def state_rows(cli: Cli) -> int:
    """The number of visible assets (credentials included): a failed op must not change it."""
    return int(cli.ok("status")["assets"])


@pytest.fixture
def xdisplay(tmp_path: Path) -> Iterator[str]:
    """A private Xvfb server; its DISPLAY string."""
    require(shutil.which("Xvfb") is not None, "Xvfb is needed for clipboard tests (apt: xvfb)")
    require(shutil.which("xclip") is not None, "xclip is needed for clipboard tests (apt: xclip)")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    number = b""
    with os.fdopen(read_fd, "rb") as pipe:
        while not number.endswith(b"\n"):
            chunk = pipe.read(1)
            if not chunk:
                break
            number += chunk
    display = f":{number.decode().strip()}"
    try:
        assert number.strip(), "Xvfb did not report a display"
        yield display
    finally:
        # A copy's clearing child may still be waiting (READ_BACK). The next test's Xvfb can get
        # this display number, where that child would find (and clear) the same value copied
        # again, or be taken for that test's own clearer: it ends with its display.
        for pid in clearers(display):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# How long a copy that a test reads back stays before its clearer runs. On a loaded machine the
# read can come seconds after the CLI returns, and with a 1 s clear it found the clipboard
# already empty. The clearer empties only its own value, so a later copy is never disturbed.
READ_BACK = "60"
# The same for a test that reads the value and then waits (wait_for) for the clearing itself.
READ_THEN_CLEAR = "10"


def clipboard(display: str) -> str:
    """The clipboard's text as `xclip -o` reads it.

    A read that asks an owner which then exits (the clearer replacing or dropping the value at
    that moment) never gets its answer: xclip has no timeout of its own and waits forever (seen
    once on a loaded CI run). Such a read is abandoned and asked again of the current owner.
    """
    env = {**os.environ, "DISPLAY": display}
    for _ in range(3):
        try:
            out = subprocess.run(
                ["xclip", "-selection", "clipboard", "-o"], env=env, capture_output=True, timeout=10, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            continue
        return out.stdout.decode("utf-8", "replace")
    raise AssertionError("xclip -o got no answer three times: the clipboard's owner is stuck")


def set_clipboard(display: str, value: str) -> None:
    env = {**os.environ, "DISPLAY": display}
    subprocess.run(
        ["xclip", "-selection", "clipboard", "-i"],
        input=value.encode(),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=True,
    )


def wait_for(predicate: Any, deadline_s: float = 30.0) -> bool:
    """Poll until true; the deadline is a hang guard, not a timing assertion."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


@pytest.fixture(scope="module")
def shared_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    """One unlocked vault for a module whose tests do not depend on an empty vault (daemon start is slow)."""
    client = Cli(home=tmp_path_factory.mktemp("shared") / "home")
    client.init()
    yield client
    client.stop()
