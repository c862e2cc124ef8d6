"""A real Center for the daemon-side tests: `memories center serve` as its own process, on
loopback with TLS from a private CA (tests/center/support.py's, so `[[centers]] ca = …` is
exercised), and its operator commands (`center admin unlock|lock|grant new|grant revoke`) run through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.center.support import make_tls
from tests.helpers import TEST_ENV, free_port

OPERATOR_PASSWORD = "operator password 9"


@dataclass
class CenterProcess:
    data: Path
    tls: bool = True
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    ca: Path | None = None
    key_b64: str = ""

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _cli(self, *words: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engine.cli", "center", *words, "--json"],
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **TEST_ENV},
        )

    def ok(self, *words: str, input: str | None = None) -> dict[str, Any]:
        proc = self._cli(*words, input=input)
        assert proc.returncode == 0, (words, proc.stdout, proc.stderr)
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def start(self) -> CenterProcess:
        self.data.mkdir(parents=True, exist_ok=True, mode=0o700)
        args = ["serve", "--data", str(self.data), "--listen", f"127.0.0.1:{self.port}"]
        if self.tls:
            if self.ca is None:
                self.ca = make_tls(self.data.parent / f"{self.data.name}-tls").ca
            cert, key = self.ca.parent / "cert.pem", self.ca.parent / "key.pem"
            args += ["--tls-cert", str(cert), "--tls-key", str(key)]
        url_file = self.data / "center.url"
        url_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "center", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **TEST_ENV},
        )
        deadline = time.monotonic() + 90
        while not url_file.exists():
            assert self.proc.poll() is None, "the Center process ended at start"
            assert time.monotonic() < deadline, "the Center did not start listening"
            time.sleep(0.05)
        return self

    def unlock(self) -> None:
        self.ok("admin", "unlock", "--data", str(self.data), *self._ca_args(), "--password-stdin", input=OPERATOR_PASSWORD + "\n")
        self.key_b64 = self.ok("info", self.url, *self._ca_args())["key"]

    def lock(self) -> None:
        self.ok("admin", "lock", "--data", str(self.data), *self._ca_args())

    def grant(self, name: str, scope: str, *vaults: str, device: str | None = None) -> dict[str, Any]:
        words = ["admin", "grant", "new", name, "--scope", scope, "--data", str(self.data), *self._ca_args()]
        for vault in vaults:
            words += ["--vault", vault]
        if device is not None:
            words += ["--device", device]
        return self.ok(*words)

    def revoke(self, name: str) -> None:
        self.ok("admin", "grant", "revoke", name, "--data", str(self.data), *self._ca_args())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.proc = None

    def config(self, mode: str, token_env: str | None = None) -> str:
        lines = ["[[centers]]", f'url = "{self.url}"', f'key = "{self.key_b64}"', f'mode = "{mode}"']
        if self.ca is not None:
            lines.append(f'ca = "{self.ca}"')
        if token_env is not None:
            lines.append(f'token_env = "{token_env}"')
        return "\n".join(lines) + "\n"

    def _ca_args(self) -> list[str]:
        return ["--ca", str(self.ca)] if self.ca is not None else []


@contextmanager
def running(data: Path, tls: bool = True) -> Iterator[CenterProcess]:
    center = CenterProcess(data, tls=tls).start()
    try:
        center.unlock()
        yield center
    finally:
        center.stop()
