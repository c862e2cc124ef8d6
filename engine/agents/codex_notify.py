"""Codex's notify program (AG-11 automatic capture): from its notification to the rollout file.

Codex runs ``notify`` with one JSON argument after each turn (openai/codex
codex-rs/hooks/src/legacy_notify.rs): ``type`` (``agent-turn-complete``), ``thread-id`` (the
session's ID, the UUID at the end of ``rollout-<time>-<id>.jsonl``), ``turn-id``, ``cwd``,
``client`` (e.g. ``codex-tui``), ``input-messages`` and ``last-assistant-message``. No path:
the file is found under ``$CODEX_HOME`` (default ``~/.codex``) ``sessions/YYYY/MM/DD/``, today's
and yesterday's folders first. Codex writes the rollout from a task of its own, so the turn's
``task_complete`` line may land a moment after the notification: capture waits for it a few
seconds at most and then imports what is there (the next turn, or ``transcript watch``, brings
the rest).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["codex_home", "find_rollout", "run_chained", "wait_for_turn", "TURN_WAIT_SECONDS"]

TURN_WAIT_SECONDS = 5.0
_TAIL_BYTES = 256 * 1024
_THREAD_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{7,63}$")


def codex_home() -> Path:
    configured = os.environ.get("CODEX_HOME")
    return Path(configured) if configured and os.path.isabs(configured) else Path.home() / ".codex"


def _day_folders(root: Path) -> list[Path]:
    now = datetime.now()
    utc = datetime.now(UTC)
    names = dict.fromkeys(f"{d:%Y}/{d:%m}/{d:%d}" for d in (now, utc, now - timedelta(days=1)))
    return [root / name for name in names]


def find_rollout(thread_id: object) -> Path:
    """The rollout file of Codex thread ``thread_id`` (its session ID)."""
    if not isinstance(thread_id, str) or not _THREAD_ID.match(thread_id):
        raise MemoriesError("invalid_input", "Codex's notification names no thread-id.")
    name = f"rollout-*-{thread_id}.jsonl"
    home = codex_home()
    for folder in _day_folders(home / "sessions"):
        found = sorted(folder.glob(name))
        if found:
            return found[-1]
    for pattern in (f"sessions/*/*/*/{name}", f"archived_sessions/{name}"):
        found = sorted(home.glob(pattern))
        if found:
            return found[-1]
    raise MemoriesError("not_found", f"No Codex rollout file of thread {thread_id} under {home}.")


def wait_for_turn(path: Path, turn_id: object, seconds: float = TURN_WAIT_SECONDS) -> bool:
    """Wait (bounded) until the rollout records the end of turn ``turn_id``; whether it did."""
    if not isinstance(turn_id, str) or not turn_id:
        return False
    needle = json.dumps(turn_id).encode()
    deadline = time.monotonic() + seconds
    while True:
        try:
            with path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - _TAIL_BYTES))
                tail = handle.read()
        except OSError:
            return False
        for line in reversed(tail.splitlines()):
            if b'"task_complete"' in line and needle in line:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def run_chained(chain: str, payload: str) -> None:
    """Start the notify program the user had, as Codex would: its argv plus the JSON, not waited for."""
    try:
        argv = json.loads(chain)
    except ValueError:
        raise MemoriesError("invalid_input", "--chain is not a JSON list of strings.") from None
    if not (isinstance(argv, list) and argv and all(isinstance(w, str) for w in argv)):
        raise MemoriesError("invalid_input", "--chain is not a JSON list of strings.")
    try:
        subprocess.Popen(
            [*argv, payload],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:  # the user's program is gone: capture still imports the turn
        import sys

        print(f"memories: the chained notify program could not start ({type(exc).__name__})", file=sys.stderr)
