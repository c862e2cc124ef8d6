"""What a launch costs before the app starts (issue 17). One command: `.venv/bin/python bench/setup.py`.

Side by side in one run (the machine is shared and noisy, so read the ratio):
- `scripts/setup --dev` with nothing changed (it reads its stamp, installs nothing), median of 5;
- the reinstall every launch used to run: `pip install -e .[extras] --config-settings
  editable_mode=lenient` into the same, already complete venv (once: it is slow);
- `--build` also times the PyInstaller one-folder build into a temp folder (about a minute
  of CPU; wall time depends on the load).
Nothing is changed: the reinstall puts back what is there, the build goes to a temp folder.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"


def _timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (children) of one command that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="also time the PyInstaller one-folder build")
    args = parser.parse_args()
    stamp = (VENV / ".memories-setup").read_text()
    extras = next(line.split("=", 1)[1] for line in stamp.splitlines() if line.startswith("extras="))
    subprocess.run([str(ROOT / "scripts" / "setup"), "--dev"], check=True, capture_output=True, cwd=ROOT)  # make it up to date
    quick = [_timed([str(ROOT / "scripts" / "setup"), "--dev"])[0] for _ in range(5)]
    target = f".[{extras}]" if extras else "."
    pip_cmd = [str(VENV / "bin" / "pip"), "install", "-q", "-e", target, "--config-settings", "editable_mode=lenient"]
    reinstall, reinstall_cpu = _timed(pip_cmd)
    up_to_date = statistics.median(quick)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"scripts/setup, nothing changed (median of 5): {up_to_date * 1000:.0f} ms")
    print(f"pip reinstall of the same venv (what every launch did): {reinstall:.1f} s wall, {reinstall_cpu:.1f} s CPU")
    print(f"ratio reinstall / up to date: {reinstall / up_to_date:.0f}x")
    if args.build:
        with tempfile.TemporaryDirectory() as tmp:
            spec = ROOT / "packaging" / "memories-tray.spec"
            cmd = [
                sys.executable,
                "-m",
                "PyInstaller",
                "--noconfirm",
                "--log-level",
                "WARN",
                "--distpath",
                f"{tmp}/dist",
                "--workpath",
                f"{tmp}/work",
                str(spec),
            ]
            wall, cpu = _timed(cmd)
            print(f"PyInstaller one-folder build: {wall:.0f} s wall, {cpu:.0f} s CPU")


if __name__ == "__main__":
    main()
