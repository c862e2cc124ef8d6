"""The job runner (JB-3): re-check tools, copy and verify inputs, materialize credentials in a
private workspace, run the steps without a shell and with their output captured, publish the
outputs only after every step succeeded, and always remove the workspace.

A run has three phases so that the service can hold its lock only where it must (issue 16):
``prepare`` (tools re-checked, outputs still fresh, credentials written 0600 into a new 0700
workspace) runs under the service lock; ``Workspace.execute`` (inputs copied and verified,
steps, cleanup steps, outputs staged next to their destinations) runs on a background job
without it and stops at a cancel signal — the step's whole process group is killed —; and
``Staged.publish`` links the outputs into place, all or none, under the lock again.
``run_plan`` chains them for a caller that needs none of that.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.plan import PLACEHOLDER, Plan, sha256_file

__all__ = ["run_plan", "prepare", "clear_stale", "Workspace", "Staged", "MASK", "STEP_TIMEOUT"]

MASK = "<concealed by memories>"
STEP_TIMEOUT = 300.0
CLEANUP_TIMEOUT = 10.0
TAIL_CHARS = 400
# How often a running step checks the cancel signal (a lock waits at most about this long).
POLL_SECONDS = 0.05
_COPY = 1 << 20

Progress = Callable[[int, int], None]


def _mask(text: str, secrets: list[str]) -> str:
    """Replace every secret value, and every long line of a multi-line secret (a PEM body)."""
    pieces: set[str] = set()
    for secret in secrets:
        if len(secret) >= 4:
            pieces.add(secret)
        pieces.update(line.strip() for line in secret.splitlines() if len(line.strip()) >= 8)
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, MASK)
    return text


def _cancelled() -> MemoriesError:
    return MemoriesError("job_cancelled")


def _private_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as sink:
        sink.write(data)


def _copy_verified(source: str, target: Path, want: str, cancelled: threading.Event) -> None:
    """Copy ``source`` and check the copy's SHA-256 (the bytes that run are the bytes pinned)."""
    digest = hashlib.sha256()
    try:
        with open(source, "rb") as src:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                while block := src.read(_COPY):
                    if cancelled.is_set():
                        raise _cancelled()
                    digest.update(block)
                    sink.write(block)
    except FileNotFoundError:
        raise MemoriesError("job_input_changed", "An input file of the plan no longer exists; nothing was run.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"An input file could not be copied ({exc.strerror}).") from None
    if digest.hexdigest() != want:
        raise MemoriesError("job_input_changed")


def _check_tools(plan: Plan) -> dict[str, str]:
    tools: dict[str, str] = {}
    for name, pinned in plan["tools"].items():
        path = str(pinned["path"])
        if not os.path.isabs(path) or not os.path.isfile(path) or os.path.realpath(path) != path:
            raise MemoriesError("job_tool_changed")
        if sha256_file(path)[0] != pinned["sha256"]:
            raise MemoriesError("job_tool_changed")
        tools[name] = path
    return tools


def _argv(step: dict[str, Any], tools: dict[str, str], paths: dict[str, dict[str, Path]]) -> list[str]:
    argv = [tools[str(step["tool"])]]
    for word in step["argv"]:
        found = PLACEHOLDER.match(str(word))
        if found is None:
            argv.append(str(word))
            continue
        kind, name = found.groups()
        try:
            argv.append(str(paths[kind][name]))
        except KeyError:
            raise MemoriesError("store_corrupt", "A job step names a path the plan does not have.") from None
    return argv


def _environment(home: Path, gnupg: Path) -> dict[str, str]:
    # A minimal environment: no inherited secrets, no user configuration of the tools.
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C", "LANG": "C", "GNUPGHOME": str(gnupg)}


# The longest socket name gpg-agent makes in its home, and what sun_path holds before its NUL.
GPG_LONGEST_SOCKET = "S.gpg-agent.browser"
SOCKET_PATH_MAX = 107


def _short_base() -> str:
    """$XDG_RUNTIME_DIR when it is ours and private (a tmpfs on desktops), else the temp folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and len(runtime) < 40:
        with contextlib.suppress(OSError):
            info = os.stat(runtime)
            if info.st_uid == os.getuid() and info.st_mode & 0o077 == 0:
                return runtime
    return tempfile.gettempdir()


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill the step and everything it started in its session (a tool's helpers), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    if child.stderr is not None:
        child.stderr.close()


def _supervise(argv: list[str], cwd: Path, env: dict[str, str], cancelled: threading.Event, limit: float) -> tuple[int, bytes]:
    """Run one program (no shell, its own session, output suppressed, stderr kept for a failure's
    tail) until it exits; a cancel or the time limit kills its process group."""
    child = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a cancel kills what it started too
        shell=False,
    )
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                _, errors = child.communicate(timeout=POLL_SECONDS)
                return child.returncode, errors
            except subprocess.TimeoutExpired:
                if cancelled.is_set():
                    raise _cancelled() from None
                if time.monotonic() >= deadline:
                    raise
    finally:
        if child.returncode is None:
            _kill_group(child)


def _run_step(
    number: int, argv: list[str], cwd: Path, env: dict[str, str], secrets: list[str], cancelled: threading.Event
) -> None:
    try:
        code, errors = _supervise(argv, cwd, env, cancelled, STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise MemoriesError("job_step_failed", f"Step {number} did not finish in time; nothing was published.") from None
    except OSError as exc:
        message = f"Step {number} could not start ({exc.strerror}); nothing was published."
        raise MemoriesError("job_step_failed", message) from None
    if code != 0:
        tail = errors.decode("utf-8", "replace")[-TAIL_CHARS:]
        tail = " ".join(_mask(tail, secrets).split())
        raise MemoriesError(
            "job_step_failed",
            f"Step {number} ({os.path.basename(argv[0])}) exited with {code}; nothing was published."
            + (f" Its error output ends: {tail}" if tail else ""),
        )


class Staged:
    """Outputs copied (fsynced) next to their destinations under temporary names, not yet linked."""

    def __init__(self, temps: list[tuple[str, str]]) -> None:
        self._temps = temps

    def publish(self) -> list[str]:
        """Link each output into place; all or none, never overwriting."""
        published: list[str] = []
        try:
            for temp, destination in self._temps:
                os.link(temp, destination)  # fails if the destination appeared meanwhile: never overwrites
                published.append(destination)
        except FileExistsError:
            self._unpublish(published)
            raise MemoriesError("job_output_exists") from None
        except OSError as exc:
            self._unpublish(published)
            raise MemoriesError("io_error", f"An output could not be written ({exc.strerror}); nothing was published.") from None
        finally:
            self.discard()
        return published

    @staticmethod
    def _unpublish(published: list[str]) -> None:
        for path in published:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def discard(self) -> None:
        for temp, _ in self._temps:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        self._temps = []


def _stage(pairs: list[tuple[Path, str]]) -> Staged:
    staged = Staged([])
    try:
        for source, destination in pairs:
            fd, temp = tempfile.mkstemp(prefix=".memories-job-", dir=os.path.dirname(destination))
            staged._temps.append((temp, destination))
            with os.fdopen(fd, "wb") as sink, open(source, "rb") as src:
                shutil.copyfileobj(src, sink, _COPY)
                sink.flush()
                os.fsync(sink.fileno())
    except OSError as exc:
        staged.discard()
        raise MemoriesError("io_error", f"An output could not be written ({exc.strerror}); nothing was published.") from None
    return staged


class Workspace:
    """A prepared run in a private 0700 directory; ``remove`` deletes it with every secret in it."""

    def __init__(self, plan: Plan, path: Path, tools: dict[str, str]) -> None:
        self.plan = plan
        self.path = path
        self.tools = tools
        self.dirs = {name: path / name for name in ("in", "cred", "out", "home")}
        self.gnupg = self.dirs["home"] / "gnupg"
        self._short_gnupg: Path | None = None  # made when the workspace's own path is too long
        self.paths: dict[str, dict[str, Path]] = {"in": {}, "cred": {}, "out": {}, "home": {"gnupg": self.gnupg}}
        self.paths["tool"] = {name: Path(tool) for name, tool in tools.items()}  # a pinned file a tool loads (a .jar)

    def _materialize(self, credentials: dict[str, dict[str, bytes]]) -> None:
        for path in self.dirs.values():
            path.mkdir(mode=0o700)
        if len(os.fsencode(self.gnupg / GPG_LONGEST_SOCKET)) > SOCKET_PATH_MAX:
            # gpg-agent puts its sockets in GNUPGHOME when there is no /run/user/UID (servers,
            # containers), and a Unix socket's path has at most 107 bytes: a data home a few
            # folders deep would fail every GnuPG step. A private directory under the runtime or
            # temp folder instead, removed with the workspace.
            self._short_gnupg = Path(tempfile.mkdtemp(prefix="mg-", dir=_short_base()))
            # A link from where it would have been, so the start-up sweep of a crashed engine's
            # workspaces finds it too (it holds the job's secret keys once gpg imported them).
            os.symlink(self._short_gnupg, self.gnupg)
            self.gnupg = self._short_gnupg
            self.paths["home"]["gnupg"] = self.gnupg
        else:
            self.gnupg.mkdir(mode=0o700)
        for binding in self.plan["credentials"]:
            slot = str(binding["slot"])
            files = credentials[slot]
            for name in binding["files"]:
                target = self.dirs["cred"] / f"{slot}.{name}"
                _private_file(target, files[str(name)])
                self.paths["cred"][f"{slot}.{name}"] = target
        for output in self.plan["outputs"]:
            self.paths["out"][str(output["name"])] = self.dirs["out"] / str(output["name"])

    @property
    def steps(self) -> int:
        return len(self.plan["steps"])

    def execute(self, secrets: list[str], cancelled: threading.Event, progress: Progress | None = None) -> Staged:
        """Copy and verify the inputs, run every step, then the cleanup steps (always), and stage
        the outputs. ``progress(done, total)`` is told before each step; a cancel stops it with
        ``job_cancelled``."""
        for item in self.plan["inputs"]:
            target = self.dirs["in"] / str(item["name"])
            _copy_verified(str(item["path"]), target, str(item["sha256"]), cancelled)
            self.paths["in"][str(item["name"])] = target
        env = _environment(self.dirs["home"], self.gnupg)
        try:
            for number, step in enumerate(self.plan["steps"], 1):
                if progress is not None:
                    progress(number - 1, self.steps)
                if cancelled.is_set():
                    raise _cancelled()
                _run_step(number, _argv(step, self.tools, self.paths), self.path, env, secrets, cancelled)
            if progress is not None:
                progress(self.steps, self.steps)
        finally:
            self._cleanup_steps(env)
        if cancelled.is_set():
            raise _cancelled()
        pairs: list[tuple[Path, str]] = []
        for output in self.plan["outputs"]:
            produced = self.paths["out"][str(output["name"])]
            if not produced.is_file():
                raise MemoriesError("job_step_failed", "The job's steps did not produce every output; nothing was published.")
            pairs.append((produced, str(output["path"])))
        return _stage(pairs)

    def _cleanup_steps(self, env: dict[str, str]) -> None:
        """The plan's cleanup steps (stop gpg-agent) run on every path, a cancel too; failures are ignored."""
        never = threading.Event()
        for step in self.plan["cleanup"]["steps"]:
            with contextlib.suppress(MemoriesError, subprocess.SubprocessError, OSError):
                _supervise(_argv(step, self.tools, self.paths), self.path, env, never, CLEANUP_TIMEOUT)

    def remove(self) -> None:
        if self._short_gnupg is not None:
            shutil.rmtree(self._short_gnupg, ignore_errors=True)
        shutil.rmtree(self.path, ignore_errors=True)


def clear_stale(root: Path) -> None:
    """Remove workspaces a crashed engine left (called once when the engine starts, before any run)."""
    if not root.is_dir():
        return
    for stale in os.listdir(root):
        _remove_short_gnupg(root / stale / "home" / "gnupg")
        shutil.rmtree(root / stale, ignore_errors=True)


def _remove_short_gnupg(link: Path) -> None:
    """Remove the short GnuPG home a workspace's link names, if it is one this user made."""
    with contextlib.suppress(OSError):
        if not link.is_symlink():
            return
        target = Path(os.readlink(link))
        info = os.lstat(target)
        if target.name.startswith("mg-") and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(target, ignore_errors=True)


def prepare(plan: Plan, root: Path, credentials: dict[str, dict[str, bytes]]) -> Workspace:
    """Re-check the tools and the outputs' freshness, then write the credentials (0600) into a new
    private workspace under ``root``. ``credentials``: slot → file → bytes."""
    tools = _check_tools(plan)
    for output in plan["outputs"]:
        if os.path.lexists(output["path"]):
            raise MemoriesError("job_output_exists")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    workspace = Workspace(plan, Path(tempfile.mkdtemp(prefix="w-", dir=root)), tools)  # 0700
    try:
        workspace._materialize(credentials)
    except BaseException:
        workspace.remove()
        raise
    return workspace


def run_plan(plan: Plan, root: Path, credentials: dict[str, dict[str, bytes]], secrets: list[str]) -> list[str]:
    """Run an approved plan in one go; returns the published output paths."""
    workspace = prepare(plan, root, credentials)
    try:
        return workspace.execute(secrets, threading.Event()).publish()
    finally:
        workspace.remove()
