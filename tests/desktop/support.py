"""Helpers for desktop tests: a real `memories dashboard`, HTTP with raw headers, X sessions."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import Cli, require

__all__ = ["Dashboard", "start_dashboard", "XSession", "save_artifact", "children_of", "stop_process"]


def save_artifact(path: Path) -> None:
    """Screenshots stay under the test's tmp dir and are copied to $MEMORIES_TEST_ARTIFACTS."""
    target = os.environ.get("MEMORIES_TEST_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(target) / path.name)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def children_of(pid: int) -> list[tuple[int, str]]:
    """Live (non-zombie) and zombie child processes of ``pid``, with their command lines."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text("ascii", "replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(entry), cmd))
    return found


def read_line(stream: Any, timeout: float) -> str:
    """Read one line from a child's stdout without hanging the test forever."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


@dataclass
class Dashboard:
    proc: subprocess.Popen[str]
    url: str
    port: int
    token: str

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "default",
        host: str | None = None,
        origin: str | None = "default",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One HTTP exchange with full control of Host, Origin and the token header."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        hdrs = {"Host": host or f"127.0.0.1:{self.port}", **(headers or {})}
        if token == "default":
            token = self.token
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        if origin == "default":
            origin = self.origin if method != "GET" else None
        if origin is not None:
            hdrs["Origin"] = origin
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
            hdrs["Content-Length"] = str(len(data))
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for key, value in hdrs.items():
                conn.putheader(key, value)
            conn.endheaders(data)
            resp = conn.getresponse()
            raw = resp.read()
            resp_headers = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw
        return resp.status, resp_headers, parsed

    def status(self) -> dict[str, Any]:
        code, _, data = self.request("GET", "/api/status")
        assert code == 200, data
        result: dict[str, Any] = data
        return result

    def wait_state(self, *states: str, timeout: float = 120) -> dict[str, Any]:
        """Poll until the page's state is one of ``states`` (bounded; fails otherwise)."""
        end = time.monotonic() + timeout
        data: dict[str, Any] = {}
        while time.monotonic() < end:
            data = self.status()
            if data["tray_state"] in states:
                return data
            time.sleep(0.05)
        raise AssertionError(f"dashboard never showed {states}: {data}")


def start_dashboard(cli: Cli, log: Path, *extra: str, keep_unlocked: bool = True) -> Dashboard:
    """`memories dashboard --no-browser` in front of ``cli``. Tests keep using the vault after
    stopping it, so by default it is started with ``--keep-unlocked``; the lock-on-quit tests
    pass ``keep_unlocked=False``."""
    keep = ("--keep-unlocked",) if keep_unlocked else ()
    proc = subprocess.Popen(
        cli.command("dashboard", "--no-browser", "--json", "--probe-interval", "0.3", *keep, *extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=open(log, "wb"),
        text=True,
        env=cli.environ(),
    )
    line = read_line(proc.stdout, 30)
    if not line:
        stop_process(proc)
        raise AssertionError(f"dashboard did not start: {log.read_text(errors='replace')}")
    info = json.loads(line)
    url = info["url"]
    return Dashboard(proc, url, int(info["port"]), url.split("#", 1)[1])


# -- X server with a tray host ----------------------------------------------------------------

TRAYER = ["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel", "--width", "200"]


@dataclass
class XSession:
    """Xvfb plus a tray host (trayer), each a child we stop ourselves."""

    tmp: Path
    display: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @staticmethod
    def require_tools() -> None:
        for tool in ("Xvfb", "trayer", "xdotool"):
            require(shutil.which(tool) is not None, f"{tool} (apt: xvfb trayer xdotool)")

    def start(self) -> XSession:
        self.require_tools()
        read_fd, write_fd = os.pipe()
        xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten", "tcp", "-noreset"],
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / "xvfb.log", "wb"),
        )
        os.close(write_fd)
        self.procs.append(xvfb)
        digits = b""
        with os.fdopen(read_fd, "rb") as pipe:
            while not digits.endswith(b"\n"):
                chunk = pipe.read(1)
                if not chunk:
                    break
                digits += chunk
        self.display = ":" + digits.decode().strip()
        self.procs.append(
            subprocess.Popen(
                [*TRAYER, "--height", "48", "--transparent", "false"],
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self._wait_tray_host()
        return self

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["DISPLAY"] = self.display
        return env

    def _wait_tray_host(self, timeout: float = 120) -> None:
        from Xlib import display as xdisplay

        conn = xdisplay.Display(self.display)
        try:
            atom = conn.intern_atom("_NET_SYSTEM_TRAY_S0")
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if conn.get_selection_owner(atom) != 0:
                    return
                time.sleep(0.05)
        finally:
            conn.close()
        raise AssertionError("the tray host never took the system tray selection")

    def grab(self) -> Any:
        from PIL import ImageGrab

        return ImageGrab.grab(xdisplay=self.display).convert("RGB")

    def screenshot(self, path: Path) -> Any:
        """A root-window PNG kept under the test's tmp dir and copied to the artifacts."""
        image = self.grab()
        image.save(path)
        save_artifact(path)
        return image

    def xdotool(self, *args: str) -> None:
        subprocess.run(["xdotool", *args], env=self.env(), check=True, timeout=60, capture_output=True)

    def menu_choose(
        self,
        at: tuple[int, int],
        keys: list[str],
        done: Callable[[], bool],
        timeout: float = 120,
        shot: Path | None = None,
        button: str = "3",
    ) -> None:
        """Open the tray icon's menu (a right click at ``at``, or ``button``) and choose with ``keys`` until
        ``done()`` says the choice took effect. GTK maps its popup when it gets the CPU: keys
        sent before that go nowhere, so a choice that shows no effect within a growing grace is
        dismissed (Escape) and made again, each time waiting longer for the popup."""
        end = time.monotonic() + timeout
        grace = 0.5
        while True:
            self.xdotool("mousemove", str(at[0]), str(at[1]), "click", button)
            time.sleep(grace)  # a pace for the popup to map, not a condition: ``done`` is checked below
            if shot is not None:
                self.screenshot(shot)
            self.xdotool("key", "--delay", "100", *keys)
            settle = time.monotonic() + min(10 + 4 * grace, max(0.0, end - time.monotonic()))
            while time.monotonic() < settle:
                if done():
                    return
                time.sleep(0.1)
            if done():
                return
            assert time.monotonic() < end, f"the tray menu choice {keys} never took effect"
            self.xdotool("key", "Escape")
            grace = min(grace * 2, 8.0)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc, timeout=5)
