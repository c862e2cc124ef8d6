"""The job runner (JB-3): re-check tools, copy and verify inputs, materialize credentials in a
private workspace, run the steps without a shell and with their output captured, publish the
outputs only after every step succeeded, and always remove the workspace.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.plan import PLACEHOLDER, Plan, sha256_file

__all__ = ["run_plan", "MASK", "STEP_TIMEOUT"]

MASK = "<concealed by memories>"
STEP_TIMEOUT = 300.0
TAIL_CHARS = 400
_COPY = 1 << 20


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


def _private_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as sink:
        sink.write(data)


def _copy_verified(source: str, target: Path, want: str) -> None:
    """Copy ``source`` and check the copy's SHA-256 (the bytes that run are the bytes pinned)."""
    digest = hashlib.sha256()
    try:
        with open(source, "rb") as src:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                while block := src.read(_COPY):
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


def _environment(home: Path) -> dict[str, str]:
    # A minimal environment: no inherited secrets, no user configuration of the tools.
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C", "LANG": "C", "GNUPGHOME": str(home / "gnupg")}


def _run_step(number: int, argv: list[str], cwd: Path, env: dict[str, str], secrets: list[str]) -> None:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=STEP_TIMEOUT,
            check=False,
            shell=False,
        )
    except subprocess.TimeoutExpired:
        raise MemoriesError("job_step_failed", f"Step {number} did not finish in time; nothing was published.") from None
    except OSError as exc:
        message = f"Step {number} could not start ({exc.strerror}); nothing was published."
        raise MemoriesError("job_step_failed", message) from None
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace")[-TAIL_CHARS:]
        tail = " ".join(_mask(tail, secrets).split())
        raise MemoriesError(
            "job_step_failed",
            f"Step {number} ({os.path.basename(argv[0])}) exited with {done.returncode}; nothing was published."
            + (f" Its error output ends: {tail}" if tail else ""),
        )


def _publish(staged: list[tuple[Path, str]]) -> list[str]:
    """Move every artifact next to its destination, then link each into place; all or none."""
    temps: list[tuple[str, str]] = []
    published: list[str] = []
    try:
        for source, destination in staged:
            fd, temp = tempfile.mkstemp(prefix=".memories-job-", dir=os.path.dirname(destination))
            temps.append((temp, destination))
            with os.fdopen(fd, "wb") as sink, open(source, "rb") as src:
                shutil.copyfileobj(src, sink, _COPY)
                sink.flush()
                os.fsync(sink.fileno())
        for temp, destination in temps:
            os.link(temp, destination)  # fails if the destination appeared meanwhile: never overwrites
            published.append(destination)
    except FileExistsError:
        for path in published:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise MemoriesError("job_output_exists") from None
    except OSError as exc:
        for path in published:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise MemoriesError("io_error", f"An output could not be written ({exc.strerror}); nothing was published.") from None
    finally:
        for temp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    return published


def run_plan(plan: Plan, root: Path, credentials: dict[str, dict[str, bytes]], secrets: list[str]) -> list[str]:
    """Run an approved plan; returns the published output paths. ``credentials``: slot → file → bytes."""
    tools = _check_tools(plan)
    for output in plan["outputs"]:
        if os.path.lexists(output["path"]):
            raise MemoriesError("job_output_exists")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    # Runs are serialized (the service lock): anything left here is from a crashed engine.
    for stale in os.listdir(root):
        shutil.rmtree(root / stale, ignore_errors=True)
    workspace = Path(tempfile.mkdtemp(prefix="w-", dir=root))  # 0700
    try:
        dirs = {name: workspace / name for name in ("in", "cred", "out", "home")}
        for path in dirs.values():
            path.mkdir(mode=0o700)
        (dirs["home"] / "gnupg").mkdir(mode=0o700)
        paths: dict[str, dict[str, Path]] = {"in": {}, "cred": {}, "out": {}, "home": {"gnupg": dirs["home"] / "gnupg"}}
        paths["tool"] = {name: Path(path) for name, path in tools.items()}  # a pinned file a tool loads (a .jar)
        for item in plan["inputs"]:
            target = dirs["in"] / str(item["name"])
            _copy_verified(str(item["path"]), target, str(item["sha256"]))
            paths["in"][str(item["name"])] = target
        for binding in plan["credentials"]:
            slot = str(binding["slot"])
            files = credentials[slot]
            for name in binding["files"]:
                target = dirs["cred"] / f"{slot}.{name}"
                _private_file(target, files[str(name)])
                paths["cred"][f"{slot}.{name}"] = target
        for output in plan["outputs"]:
            paths["out"][str(output["name"])] = dirs["out"] / str(output["name"])
        env = _environment(dirs["home"])
        try:
            for number, step in enumerate(plan["steps"], 1):
                _run_step(number, _argv(step, tools, paths), workspace, env, secrets)
        finally:
            for step in plan["cleanup"]["steps"]:
                with contextlib.suppress(MemoriesError, subprocess.SubprocessError, OSError):
                    subprocess.run(_argv(step, tools, paths), cwd=workspace, env=env, stdin=subprocess.DEVNULL,
                                   capture_output=True, timeout=30, check=False)  # fmt: skip
        staged: list[tuple[Path, str]] = []
        for output in plan["outputs"]:
            produced = paths["out"][str(output["name"])]
            if not produced.is_file():
                raise MemoriesError("job_step_failed", "The job's steps did not produce every output; nothing was published.")
            staged.append((produced, str(output["path"])))
        return _publish(staged)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
