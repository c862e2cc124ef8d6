"""The job runner with a real child process (JB-3): partial work is never published, secrets are masked."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.jobs.plan import PLAN_VERSION, pin_file, pin_input, sha256_file
from engine.jobs.runner import MASK, run_plan

SECRET_KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"


def python_plan(tmp_path: Path, steps: list[list[str]]) -> dict[str, Any]:
    source = tmp_path / "in.txt"
    source.write_bytes(b"input\n")
    exe = os.path.realpath(sys.executable)
    return {
        "v": PLAN_VERSION,
        "kind": "test",
        "tools": {"python": {"path": exe, "sha256": sha256_file(exe)[0]}},
        "inputs": [pin_input("in", str(source))],
        "credentials": [{"slot": "key", "ref": "k", "asset": "00", "revision": "00", "type": "tls_cert", "files": ["key.pem"]}],
        "steps": [{"tool": "python", "argv": ["-c", *step]} for step in steps],
        "outputs": [{"name": "result", "path": str(tmp_path / "result.bin")}],
        "cleanup": {"steps": [], "workspace": "removed"},
    }


def test_output_of_an_earlier_step_is_not_published_when_a_later_step_fails(tmp_path: Path) -> None:
    """JB-3: step 1 writes the output, step 2 fails: nothing is published and the workspace is removed."""
    write = "import shutil,sys; shutil.copy(sys.argv[1], sys.argv[2])"
    fail = "import sys; sys.stderr.write(open(sys.argv[1]).read()); sys.exit(3)"
    plan = python_plan(tmp_path, [[write, "{in:in}", "{out:result}"], [fail, "{cred:key.key.pem}"]])
    root = tmp_path / "jobs"
    with pytest.raises(MemoriesError) as caught:
        run_plan(plan, root, {"key": {"key.pem": SECRET_KEY.encode()}}, [SECRET_KEY])
    assert caught.value.code == "job_step_failed"
    assert "Step 2" in caught.value.message
    # The failing step printed the whole key to stderr; the error shows only the mask.
    assert MASK in caught.value.message
    assert "MIGHAgEAMBMGByqGSM49" not in caught.value.message
    assert not (tmp_path / "result.bin").exists()
    assert os.listdir(root) == []


def test_successful_run_publishes_and_cleans_up(tmp_path: Path) -> None:
    """JB-3: placeholders become workspace paths only; the output appears once every step succeeded."""
    write = "import shutil,sys; shutil.copy(sys.argv[1], sys.argv[2])"
    plan = python_plan(tmp_path, [[write, "{in:in}", "{out:result}"]])
    root = tmp_path / "jobs"
    published = run_plan(plan, root, {"key": {"key.pem": SECRET_KEY.encode()}}, [SECRET_KEY])
    assert published == [str(tmp_path / "result.bin")]
    assert (tmp_path / "result.bin").read_bytes() == b"input\n"
    assert os.listdir(root) == []
    assert os.stat(root).st_mode & 0o777 == 0o700


def test_a_pinned_tool_file_is_passed_by_path_and_rechecked(tmp_path: Path) -> None:
    """JB-3: a file a tool loads (apksigner's .jar) is pinned like the tool: `{tool:NAME}` is its path,
    and a file changed after planning stops the run before any step starts."""
    library = tmp_path / "library.jar"
    library.write_bytes(b"version 1")
    copy = "import shutil,sys; shutil.copy(sys.argv[1], sys.argv[2])"
    plan = python_plan(tmp_path, [[copy, "{tool:library.jar}", "{out:result}"]])
    plan["tools"]["library.jar"] = pin_file(str(library))
    root = tmp_path / "jobs"
    assert run_plan(plan, root, {"key": {"key.pem": SECRET_KEY.encode()}}, [SECRET_KEY]) == [str(tmp_path / "result.bin")]
    assert (tmp_path / "result.bin").read_bytes() == b"version 1"
    os.unlink(tmp_path / "result.bin")
    library.write_bytes(b"version 2")
    with pytest.raises(MemoriesError) as caught:
        run_plan(plan, root, {"key": {"key.pem": SECRET_KEY.encode()}}, [SECRET_KEY])
    assert caught.value.code == "job_tool_changed"
    assert not (tmp_path / "result.bin").exists()
    assert os.listdir(root) == []
