"""`memories run` start-up overhead (issue 16, RN-1): the same command run directly and through `memories run`.

    .venv/bin/python bench/run.py [--runs 15]

Builds a temp home with one protected label, elevates this process's namespace, then times
``python -c pass`` directly and as ``memories run --env X=label -- python -c pass`` (with
masking, so the pipes and masker are included), interleaved, and prints the medians and the
overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "bench password for run"


def command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", "--home", str(home), *args]


def env() -> dict[str, str]:
    return {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env(), check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="memories-bench-run-"))
    home = base / "home"
    try:
        pw = PASSWORD.encode() + b"\n"
        subprocess.run(command(home, "init", "--password-stdin"), input=pw, env=env(), check=True, capture_output=True)
        note = json.loads(
            subprocess.run(
                command(home, "put", "--title", "t", "--body", "v=hunter2hunter2", "--json"),
                env=env(),
                capture_output=True,
                check=True,
            ).stdout
        )
        subprocess.run(
            command(home, "secret", "protect", note["id"], "--label", "pw", "--value-stdin"),
            input=b"hunter2hunter2\n",
            env=env(),
            check=True,
            capture_output=True,
        )
        subprocess.run(command(home, "sudo", "--password-stdin"), input=pw, env=env(), check=True, capture_output=True)
        child = [sys.executable, "-c", "pass"]
        wrapped = command(home, "run", "--env", "X=pw", "--", *child)
        once(wrapped)  # warm
        direct, via = [], []
        for _ in range(args.runs):
            direct.append(once(child))
            via.append(once(wrapped))
        d, v = statistics.median(direct), statistics.median(via)
        print(
            json.dumps(
                {"direct ms": round(d * 1000, 1), "memories run ms": round(v * 1000, 1), "overhead ms": round((v - d) * 1000, 1)}
            )
        )
        subprocess.run(command(home, "daemon", "stop"), env=env(), capture_output=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
