"""A job plan (JB-1): tools, pinned inputs, credential bindings, ordered steps, cleanup, fresh outputs.

A plan is plain data (str/int/list/dict). Its digest is the SHA-256 of its canonical
bytes, so the plan a user was shown and the plan that runs are the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from typing import Any

from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.errors import MemoriesError

__all__ = [
    "PLAN_VERSION",
    "PLACEHOLDER",
    "Plan",
    "plan_bytes",
    "plan_digest",
    "plan_from_bytes",
    "sha256_file",
    "pin_input",
    "pin_tool",
    "pin_file",
    "fresh_output",
]

PLAN_VERSION = 1
Plan = dict[str, Any]
# A step argument that is exactly one of these is replaced by a workspace path, nothing else.
PLACEHOLDER = re.compile(r"^\{(in|cred|out|home|tool):([a-z0-9_.-]{1,64})\}$")
_READ = 1 << 20


def plan_bytes(plan: Plan) -> bytes:
    return canonical_bytes(plan)


def plan_digest(plan: Plan) -> str:
    return hashlib.sha256(plan_bytes(plan)).hexdigest()


def plan_from_bytes(data: bytes) -> Plan:
    plan = decode_canonical(data)
    if not isinstance(plan, dict) or plan.get("v") != PLAN_VERSION:
        raise MemoriesError("store_corrupt", "A stored job plan is malformed.")
    return plan


def sha256_file(path: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as handle:
            while block := handle.read(_READ):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise MemoriesError("io_error", f"An input file could not be read ({exc.strerror}).") from None
    return digest.hexdigest(), size


def _absolute(path: str, what: str) -> str:
    if not path or "\x00" in path or not os.path.isabs(path):
        raise MemoriesError("invalid_input", f"The {what} path must be absolute.")
    return os.path.normpath(path)


def pin_input(name: str, path: str) -> dict[str, Any]:
    path = _absolute(path, "input")
    if not os.path.isfile(path):
        raise MemoriesError("not_found", "An input file does not exist or is not a regular file.")
    sha, size = sha256_file(path)
    return {"name": name, "path": path, "sha256": sha, "size": size}


def pin_tool(name: str) -> dict[str, Any]:
    """The tool's absolute path and the SHA-256 of its executable, re-checked before a run."""
    found = shutil.which(name, path=os.defpath + os.pathsep + "/usr/local/bin")
    if found is None:
        raise MemoriesError("job_tool_missing", f"The tool `{name}` is not installed on this machine.")
    real = os.path.realpath(found)
    sha, _ = sha256_file(real)
    return {"path": real, "sha256": sha}


def pin_file(path: str) -> dict[str, Any]:
    """A file a tool loads (a Java archive), pinned like a tool: its real path and SHA-256."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        raise MemoriesError("job_tool_missing", f"The file `{path}` a tool needs is not installed on this machine.")
    sha, _ = sha256_file(real)
    return {"path": real, "sha256": sha}


def fresh_output(name: str, path: str) -> dict[str, Any]:
    path = _absolute(path, "output")
    if os.path.lexists(path):
        raise MemoriesError("job_output_exists")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise MemoriesError("not_found", "The output's directory does not exist.")
    return {"name": name, "path": path}
