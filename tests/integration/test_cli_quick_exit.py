"""Issue 20: after an everyday read (get, list, search, status) the CLI ends without the
interpreter's teardown (engine/cli/main.py ``exit_after``), which cost 2.4–3 ms per call.

What must hold: everything is written before the process ends, even an answer larger than a
pipe holds; the exit code is the command's; every other command still ends through the
normal teardown. Real CLI processes against a real daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.helpers import Cli

# Loaded by every interpreter started with this folder on PYTHONPATH: it leaves a file behind
# only when the interpreter's normal teardown (which runs atexit handlers) happens.
SITECUSTOMIZE = """
import atexit, os
_marker = os.environ.get("QUICK_EXIT_MARKER")
if _marker:
    atexit.register(lambda: open(_marker, "w").close())
"""


def _buffered(env: dict[str, str]) -> dict[str, str]:
    # As a user's shell runs it: with PYTHONUNBUFFERED (set on some CI machines) every print
    # would be written at once, and a quick exit that forgot to flush would go unnoticed.
    env.pop("PYTHONUNBUFFERED", None)
    return env


def _ended_with_teardown(vault: Cli, tmp_path: Path, *args: str) -> tuple[bool, subprocess.CompletedProcess[str]]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, "utf-8")
    marker = tmp_path / f"teardown-{len(list(tmp_path.iterdir()))}"
    env = _buffered(vault.environ())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env["QUICK_EXIT_MARKER"] = str(marker)
    proc = subprocess.run(vault.command(*args), stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60)
    return marker.exists(), proc


def test_everyday_reads_skip_the_teardown_and_other_commands_do_not(vault: Cli, tmp_path: Path) -> None:
    note = vault.put("quick exit", "a body to find")
    fast: list[tuple[str, ...]] = [("get", note["short_id"]), ("list",), ("search", "find"), ("status",), ("list", "--json")]
    for args in fast:
        teardown, proc = _ended_with_teardown(vault, tmp_path, *args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip(), args  # it did answer
        assert not teardown, f"{args} ran the interpreter's teardown"
    # Commands off the fast path end normally: their threads, temp files and atexit work finish.
    others: list[tuple[str, ...]] = [("put", "--title", "second", "--body", "b"), ("vaults",), ("history", note["short_id"])]
    for args in others:
        teardown, proc = _ended_with_teardown(vault, tmp_path, *args)
        assert proc.returncode == 0, proc.stderr
        assert teardown, f"{args} skipped the interpreter's teardown"


def test_an_answer_larger_than_a_pipe_is_written_whole_before_the_exit(vault: Cli) -> None:
    body = "".join(f"line {i:06d} of a long note\n" for i in range(80_000))  # ~2 MiB, 30x a pipe buffer
    note = vault.ok("put", "--title", "long", input=body)  # from stdin: too long for argv
    proc = subprocess.Popen(
        vault.command("get", note["short_id"], "--json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_buffered(vault.environ()),
    )
    time.sleep(0.5)  # the CLI fills the pipe and waits on the reader
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    # Whole, to the last byte: the final newline is print's own, held in the buffer until a flush.
    assert out.endswith(b"}\n") and json.loads(out)["body"] == body


def test_the_exit_code_and_error_of_a_fast_read_are_kept(vault: Cli) -> None:
    proc = vault.run("get", "0000ffff")
    assert proc.returncode == 1
    assert proc.stderr.startswith("memories: error [not_found]"), proc.stderr
    vault.run("lock")
    locked = vault.run("search", "anything")
    assert locked.returncode == 1 and "[locked]" in locked.stderr, locked.stderr
