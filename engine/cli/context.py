"""What every command needs: the data home, output mode, and a connection to the engine."""

from __future__ import annotations

import os
import sys
import time

from engine.errors import MemoriesError
from engine.home import data_home, engine_socket, prepare_runtime_dir
from engine.ipc import json_codec
from engine.ipc.client import IpcClient
from engine.terminal_text import block, use_color

# What a get/list/search/status call imports is kept small (issue 20, tested in
# tests/unit/test_cli_imports.py): pathlib, dataclasses, subprocess, json and typing load
# only when a command needs them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from engine.config import Paths

__all__ = ["JSON_VERSION", "Context", "UsageError"]

# The version of every `--json` output shape (docs/cli-json.md): each object printed has
# "v" at its top level. Bump it when a key is removed or changes meaning.
JSON_VERSION = 1


class UsageError(Exception):
    """Wrong command-line usage (exit code 2)."""


class Context:
    """The data home, the output mode and (once asked for) the connection to the engine."""

    def __init__(self, home: str, json_output: bool) -> None:
        self.home = home  # absolute, as engine.home.data_home resolves it
        self.json_output = json_output
        self._paths: Paths | None = None
        self._client: IpcClient | None = None
        self._hints_refused = False

    @classmethod
    def create(cls, home: str | None, json_output: bool) -> Context:
        return cls(data_home(home), json_output)

    @property
    def paths(self) -> Paths:
        """The home's files as :class:`engine.config.Paths` (imported on first use)."""
        if self._paths is None:
            from pathlib import Path

            from engine.config import Paths

            self._paths = Paths(Path(self.home))
        return self._paths

    # -- engine connection -------------------------------------------------------------
    def client(self) -> IpcClient:
        if self._client is None:
            client = IpcClient(engine_socket(self.home))
            try:
                client.connect()
            except MemoriesError as exc:
                if exc.code == "daemon_unavailable":
                    if not self.paths.store.exists():  # unlock would only say this after starting the engine
                        raise MemoriesError("not_initialized") from None
                    raise MemoriesError("daemon_unavailable", "The engine is not running; `memories unlock` starts it.") from None
                raise
            self._client = client
        return self._client

    def request(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return self.client().request(body, timeout=timeout)

    def request_with_hints(self, body: dict[str, Any], hints: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """``body`` plus ``hints``: fields that only help the engine do the same work better (an
        import's ``more``). An engine started before this Memories was installed refuses a field
        it does not know before doing anything (``unknown_field``): it then gets the request
        without them, and so do this command's later requests."""
        if hints and not self._hints_refused:
            try:
                return self.request({**body, **hints}, timeout)
            except MemoriesError as exc:
                if exc.code != "unknown_field":
                    raise
                self._hints_refused = True
        return self.request(body, timeout)

    def engine_running(self) -> bool:
        try:
            self.client()
        except MemoriesError:
            return False
        return True

    def ensure_engine(self, wait_seconds: float = 15.0) -> bool:
        """Start the daemon detached if it is not running; True if this call started it."""
        if self.engine_running():
            return False
        import subprocess

        from engine.launch import child_env, python_command

        # A /tmp fallback folder another user created first: refuse here, with the folder
        # named, rather than as the engine's exit (engine/home.py).
        prepare_runtime_dir(engine_socket(self.home))
        self.paths.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        stderr_path = self.paths.log_dir / "daemon-stderr.log"
        with open(stderr_path, "ab") as stderr:
            os.chmod(stderr_path, 0o600)
            # Isolated from the caller's directory (SPEC ST-11, engine/launch.py): this process
            # receives the vault password, so no code from the folder the command ran in.
            process = subprocess.Popen(
                python_command("engine.cli", "--home", str(self.paths.home), "daemon", "run"),
                cwd=self.paths.home,
                env=child_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                close_fds=True,
            )
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            if self.engine_running():
                return True
            code = process.poll()
            if code is not None:
                if code == 3 and self.engine_running():
                    return False  # another starter won the race: same outcome
                if code == 4:  # engine/daemon.py EXIT_DISK_FULL: its stderr log may be unwritable too
                    raise MemoriesError("disk_full", "The disk is full, so the engine could not start; free some space.")
                raise MemoriesError(
                    "store_in_use" if code == 3 else "daemon_unavailable",
                    _last_line(stderr_path) or "The engine exited while starting.",
                )
            time.sleep(0.02)
        raise MemoriesError("timeout", "The engine did not start in time.")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- output --------------------------------------------------------------------------
    def emit(self, result: Any, text: str | None = None) -> None:
        """Print ``result`` as exact JSON, or ``text`` made terminal-safe.

        Every text output goes through :func:`engine.terminal_text.block` here: control
        characters from agent or imported content show as visible escapes (``\\x1b``), line
        feeds and tabs stay. Row formatters also pass single-line fields through
        :func:`engine.terminal_text.one_line`, so a title cannot start a new line. Text
        built as :class:`~engine.terminal_text.Escaped` (already escaped, with our own
        styling) is printed as it is.
        """
        if self.json_output:
            shown = {"v": JSON_VERSION, **result} if isinstance(result, dict) else result
            print(json_codec.dumps(shown, ensure_ascii=False, sort_keys=True))
            return
        if text is not None:
            print(block(text))
        # A write that was saved but whose follow-up failed (e.g. the search index): the
        # saved result goes to stdout as usual, the warning to stderr, so nobody retries it.
        warnings = result.get("warnings") if isinstance(result, dict) else None
        for warning in warnings or []:
            if isinstance(warning, dict):
                code, message = warning.get("code", "warning"), warning.get("message", "")
                print(block(f"warning: {code}: {message}"), file=sys.stderr)

    @property
    def color(self) -> bool:
        """Whether text output may carry terminal styling (a TTY, NO_COLOR unset)."""
        return not self.json_output and use_color(sys.stdout)


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    line = lines[-1] if lines else ""
    prefix = "memories: error "
    if line.startswith(prefix) and "]: " in line:
        return line.split("]: ", 1)[1]
    return line
