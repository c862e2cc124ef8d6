"""A working directory an attacker prepared (SPEC ST-11): modules named like the stdlib's and
our own package, each leaving a marker file if anything imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import Cli, require

__all__ = [
    "HOSTILE_NAMES",
    "assert_isolated_engine",
    "hostile_dir",
    "markers",
    "memories_exe",
    "ok_from",
    "process_argv",
    "process_cwd",
    "run_from",
]

# hmac and json are imported by the engine at start; engine/ shadows our own package.
HOSTILE_NAMES = ("hmac.py", "json.py", "engine/__init__.py", "desktop/__init__.py")


def hostile_dir(root: Path) -> Path:
    """``root/work`` holding the hostile modules; they write into ``root/marks``."""
    work, marks = root / "work", root / "marks"
    marks.mkdir(parents=True)
    for name in HOSTILE_NAMES:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"import os\nopen(os.path.join({str(marks)!r}, {name.replace('/', '.')!r} + '.' + str(os.getpid())), 'w').close()\n"
        )
    return work


def markers(work: Path) -> list[str]:
    return sorted(os.listdir(work.parent / "marks"))


def memories_exe() -> Path:
    """The installed ``memories`` console script: how a user starts the CLI in any folder."""
    exe = Path(sys.executable).with_name("memories.exe" if os.name == "nt" else "memories")
    require(exe.is_file(), "the `memories` console script in the venv (scripts/setup --dev)")
    return exe


def process_cwd(pid: int) -> str:
    require(sys.platform == "linux", "/proc (Linux)")
    return os.readlink(f"/proc/{pid}/cwd")


def process_argv(pid: int) -> list[str]:
    require(sys.platform == "linux", "/proc (Linux)")
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def run_from(work: Path, cli: Cli, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``memories --home HOME ARGS`` started in ``work`` the way a user types it."""
    return subprocess.run(
        [str(memories_exe()), "--home", str(cli.home), *args],
        cwd=work,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli.environ(),
    )


def ok_from(work: Path, cli: Cli, *args: str, input: str | None = None) -> dict[str, Any]:
    proc = run_from(work, cli, *args, "--json", input=input)
    assert proc.returncode == 0, f"{args}: {proc.stdout} {proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def assert_isolated_engine(cli: Cli) -> None:
    """The running engine was started with -P in its own argv (a re-exec keeps it) and
    works in the data home, not in the folder the starting command ran in."""
    pid = cli.daemon_pid()
    assert pid is not None
    argv = process_argv(pid)
    assert argv[1:4] == ["-P", "-m", "engine.cli"], argv
    assert process_cwd(pid) == os.path.realpath(cli.home)
