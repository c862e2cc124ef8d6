"""The test harness itself under pytest-xdist (CI runs the suite on several workers): every
worker has its own temp directory and its own server ports, and under CI=true a skipped test
fails the run. Each case runs a real pytest in a subprocess with tests/conftest.py as a plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, tempfile
from pathlib import Path
from tests.helpers import free_port

def test_probe_{n}():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    ports = [free_port() for _ in range(3)]
    Path(os.environ["PROBE_OUT"], "{n}-" + worker).write_text(
        tempfile.gettempdir() + "\\n" + " ".join(map(str, ports))
    )
"""


def _pytest(tmp_path: Path, *args: str, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's config: only what is passed here
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROBE_OUT": str(tmp_path / "out")}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    env["CI"] = "true" if ci else ""
    ours = Path(tempfile.gettempdir())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(tmp_path / "pytest.ini"),
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # The nested run inherits this process's environment; it must leave this worker's temp
    # directory alone (CI once lost it mid-run to a nested run's clean-up).
    assert ours.is_dir(), f"the nested pytest removed {ours}"
    return proc


def _gone(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_each_worker_has_its_own_temp_directory_and_port_slice(tmp_path: Path) -> None:
    """Two workers never share TMPDIR (a "nothing left in the temp directory" check sees only its
    own worker's files) nor a server port, and the ports sit below the kernel's ephemeral range."""
    (tmp_path / "out").mkdir()
    for n in range(4):
        (tmp_path / f"test_probe{n}.py").write_text(PROBE.format(n=n))
    proc = _pytest(tmp_path, "-q", "-n", "2", "--dist", "loadfile", ci=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_worker: dict[str, tuple[set[str], set[int]]] = {}
    for result in (tmp_path / "out").iterdir():
        temp, ports = result.read_text().splitlines()
        dirs, seen = by_worker.setdefault(result.name.split("-", 1)[1], (set(), set()))
        dirs.add(temp)
        seen.update(int(p) for p in ports.split())
    assert sorted(by_worker) == ["gw0", "gw1"], by_worker
    (temps0, ports0), (temps1, ports1) = by_worker["gw0"], by_worker["gw1"]
    assert len(temps0) == len(temps1) == 1 and temps0 != temps1
    for temp in temps0 | temps1:
        assert Path(temp).parent == Path("/tmp")
        # Removed when the worker ends: xdist's controller can return while a worker process is
        # still in its unconfigure (a loaded machine), so wait for the removal, bounded.
        assert _gone(Path(temp), 120), f"{temp} was not removed when its worker ended"
    assert not ports0 & ports1
    assert all(10000 <= port < 32000 for port in ports0 | ports1)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_skip_fails_the_run_under_ci(tmp_path: Path, workers: list[str]) -> None:
    """CI must prove every test ran: under CI=true one skipped test makes the run fail and names it;
    outside CI a skip is only reported."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\ndef test_missing_tool():\n    pytest.skip('no such tool')\n"
    )
    in_ci = _pytest(tmp_path, "-q", *workers, ci=True)
    assert in_ci.returncode == pytest.ExitCode.TESTS_FAILED, in_ci.stdout + in_ci.stderr
    assert "1 test(s) skipped, none may be: test_skips.py::test_missing_tool" in in_ci.stdout
    outside = _pytest(tmp_path, "-q", *workers, ci=False)
    assert outside.returncode == 0, outside.stdout + outside.stderr
    assert "1 skipped" in outside.stdout
