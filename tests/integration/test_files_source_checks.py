"""What `file add` refuses to read (FI-2, issue 27): a file that changed while it was read, and
anything that is not a regular file (a FIFO would block the command forever)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.integration.test_files import content_rows, pseudo_random

MIB = 1 << 20


def _read_position(pid: int, path: Path) -> int | None:
    """How far process ``pid`` has read ``path`` (its open descriptor's offset), None if not open."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        for fd in fds.iterdir():
            try:
                if os.readlink(fd) != str(path):
                    continue
                for line in (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text("ascii").splitlines():
                    if line.startswith("pos:"):
                        return int(line.split()[1])
            except OSError:
                continue  # a descriptor closed meanwhile
    except OSError:
        return None
    return None


def _reading_begun(cli_pid: int, engine_pid: int, path: Path) -> bool:
    """Whether the add has begun reading ``path``: the engine opened it (it reads the CLI's file
    itself, engine/files/source.py; with pread, so no offset moves), or the CLI sends it and its
    descriptor's offset moved."""
    position = _read_position(cli_pid, path)
    assert position is None or position < 128 * MIB  # the change below comes while the read is under way
    return _read_position(engine_pid, path) is not None or bool(position)


@pytest.mark.parametrize("how", ["rewritten_in_place", "replaced_by_rename"])
def test_fi2_a_file_changed_while_it_is_read_is_refused(vault: Cli, tmp_path: Path, how: str) -> None:
    """FI-2: a writer rewrites the file (same size) or replaces it while `file add` reads it; the add
    answers file_changed with its sentence, and no file and no content row is left."""
    source = tmp_path / "big.bin"
    pseudo_random(source, 128 * MIB, b"before")
    rows, files = content_rows(vault), vault.ok("file", "list")["total"]
    engine = vault.daemon_pid()
    assert engine is not None
    replacement = tmp_path / "big.new"
    if how == "replaced_by_rename":
        # Written before the add starts: on a loaded machine, writing 128 MiB while the add ran
        # let the add finish first, and the rename then came after the read (seen in CI).
        pseudo_random(replacement, 128 * MIB, b"after")
    adding = subprocess.Popen(
        vault.command("file", "add", str(source), "--json"),
        env=vault.environ(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The event: the add has begun reading the file.
        deadline = time.monotonic() + 60
        while not _reading_begun(adding.pid, engine, source):
            assert adding.poll() is None, adding.communicate()
            assert time.monotonic() < deadline, "the add never started reading the file"
            time.sleep(0.01)
        if how == "rewritten_in_place":
            with open(source, "r+b") as rewrite:  # same inode, same size, other bytes
                block = b"\xa5" * MIB
                for _ in range(128):
                    rewrite.write(block)
        else:
            os.replace(replacement, source)  # the open descriptor still reads the old file
        out, _ = adding.communicate(timeout=300)
    finally:
        if adding.poll() is None:
            adding.kill()
            adding.wait()
    assert adding.returncode != 0, out
    error = json.loads(out)["error"]
    assert error["code"] == "file_changed", error
    assert "changed while it was read" in error["message"] and "nothing was saved" in error["message"]
    assert vault.ok("file", "list")["total"] == files
    assert content_rows(vault) == rows


def test_fi2_an_unchanged_file_still_adds(vault: Cli, tmp_path: Path) -> None:
    """FI-2: the checks do not refuse a file nobody touches (several batches long)."""
    source = tmp_path / "quiet.bin"
    digest = pseudo_random(source, 20 * MIB, b"quiet")
    added = vault.ok("file", "add", str(source))
    assert added["sha256"] == digest


def _add_with_deadline(vault: Cli, path: Path) -> dict[str, object]:
    """`file add PATH` must answer by itself: a hang is a failure, not a wait."""
    proc = vault.run("file", "add", str(path), "--json", timeout=30)
    assert proc.returncode != 0, proc.stdout
    error: dict[str, object] = json.loads(proc.stdout)["error"]
    return error


def test_a_fifo_socket_or_device_is_refused_at_once(vault: Cli, tmp_path: Path) -> None:
    """Issue 27: `file add` on a FIFO used to wait forever for a writer; now it and every other
    non-regular file is refused with a typed error naming what it is, and nothing is stored."""
    rows = content_rows(vault)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    error = _add_with_deadline(vault, fifo)
    assert error == {"code": "invalid_input", "message": "That is a named pipe (FIFO); only a regular file can be added."}

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "sock"))
        error = _add_with_deadline(vault, tmp_path / "sock")
    assert error["code"] == "invalid_input" and "a socket" in str(error["message"])

    error = _add_with_deadline(vault, Path("/dev/zero"))  # would never end
    assert error["code"] == "invalid_input" and "a character device" in str(error["message"])

    error = _add_with_deadline(vault, tmp_path)
    assert error == {"code": "invalid_input", "message": "That is a directory; add files one by one."}
    assert content_rows(vault) == rows
    assert vault.ok("file", "list")["total"] == 0
