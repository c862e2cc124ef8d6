"""Running a foreground child without a shell, for `memories run` and `memories file exec`.

Signals the CLI receives (SIGTERM, SIGHUP, and SIGINT unless the terminal already delivered
it to the child's process group) are forwarded to the child; the child's exit status is
passed through (a child killed by signal N gives 128 + N, as a shell reports it). With a
:class:`Masker`, the child's stdout and stderr go through pipes and every occurrence of a
secret value is replaced by ``<concealed by memories>``, also when the value is split across
reads or printed in pieces (RN-1).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import BinaryIO

from engine.errors import MemoriesError

__all__ = ["MASK", "Masker", "run_child"]

MASK = b"<concealed by memories>"
_FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)
_READ_BYTES = 64 * 1024


class Masker:
    """Replace every occurrence of any secret in a byte stream, whatever the read boundaries.

    After each feed, a tail that is the beginning of some secret (at most ``longest - 1``
    bytes) is held back: the next read may complete it. Output never contains a whole secret.
    """

    def __init__(self, secrets: Sequence[str]) -> None:
        values = sorted({s.encode("utf-8") for s in secrets if s}, key=len, reverse=True)
        self.values = values
        self.longest = len(values[0]) if values else 0
        # Longest first: at one position, the longest secret wins (a secret containing another).
        self.pattern = re.compile(b"|".join(re.escape(v) for v in values)) if values else None
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        if self.pattern is None:
            return data
        buf = self.held + data
        out = bytearray()
        start = 0
        for match in self.pattern.finditer(buf):
            rest = buf[match.start() :]
            if any(len(value) > len(rest) and value.startswith(rest) for value in self.values):
                break  # a longer secret may still complete here: decide on the next read
            out += buf[start : match.start()]
            out += MASK
            start = match.end()
        # Hold back only a tail that could still become a secret (a prefix of one), so output
        # that cannot contain one ("ready\n") is passed on at once.
        keep_from = len(buf)
        for position in range(max(start, len(buf) - (self.longest - 1)), len(buf)):
            tail = buf[position:]
            if any(value.startswith(tail) for value in self.values):
                keep_from = position
                break
        out += buf[start:keep_from]
        self.held = buf[keep_from:]
        return bytes(out)

    def flush(self) -> bytes:
        rest, self.held = self.held, b""
        return rest  # shorter than any secret: cannot contain one


def _pump(source: BinaryIO, sink: BinaryIO, masker: Masker) -> None:
    fd = source.fileno()
    try:
        while True:
            data = os.read(fd, _READ_BYTES)
            if not data:
                break
            masked = masker.feed(data)
            if masked:
                _write(sink, masked)
        _write(sink, masker.flush())
    finally:
        source.close()


def _write(sink: BinaryIO, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        sink.write(data)
        sink.flush()


def _terminal_delivers_sigint() -> bool:
    """True when a terminal Ctrl-C already reaches the child (we are its foreground group)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def _forwarding(process: subprocess.Popen[bytes]) -> Iterator[None]:
    skip_int = _terminal_delivers_sigint()

    def forward(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and skip_int:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_child(argv: Sequence[str], env: Mapping[str, str] | None = None, masker: Masker | None = None) -> int:
    """Run ``argv`` (no shell) in the foreground; return its exit code (128 + N if killed by signal N)."""
    pipe = subprocess.PIPE if masker is not None else None
    try:
        process = subprocess.Popen(list(argv), env=dict(env) if env is not None else None, stdout=pipe, stderr=pipe)
    except FileNotFoundError:
        raise MemoriesError("not_found", f"No program named {argv[0][:200]!r} was found.") from None
    except PermissionError:
        raise MemoriesError("permission_denied", f"The program {argv[0][:200]!r} cannot be run.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"The program could not be started ({exc.strerror}).") from None
    with _forwarding(process):
        pumps: list[threading.Thread] = []
        if masker is not None:
            assert process.stdout is not None and process.stderr is not None
            err_masker = Masker([])
            err_masker.pattern, err_masker.longest, err_masker.values = masker.pattern, masker.longest, masker.values
            pumps = [
                threading.Thread(target=_pump, args=(process.stdout, sys.stdout.buffer, masker), daemon=True),
                threading.Thread(target=_pump, args=(process.stderr, sys.stderr.buffer, err_masker), daemon=True),
            ]
            for pump in pumps:
                pump.start()
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - our handler replaces SIGINT
                continue
        for pump in pumps:
            pump.join()
    return 128 - code if code < 0 else code
