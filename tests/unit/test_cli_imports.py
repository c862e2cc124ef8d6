"""What an everyday `memories` call imports (issue 20): checked by module, never by time.

Each command runs in a fresh interpreter against a real engine, then reports the modules
it loaded beyond what the bare interpreter had. A heavy module creeping back onto the
fast path (argparse, json, re, typing, pathlib, asyncio, crypto, …) fails here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import Cli

# Run a command in-process and report the modules it added to a bare interpreter's. Only
# os and sys are used around it (os: site always loads it): the probe must not load, and so
# hide, a module the command might load (json, io, contextlib, …). The command's output
# goes to /dev/null at the descriptor level; the report goes to a saved copy of stdout.
_PROBE = """
import os, sys
before = set(sys.modules)
report = os.dup(1)
devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(devnull, 1)
os.dup2(devnull, 2)
from engine.cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
os.write(report, repr((code, sorted(set(sys.modules) - before))).encode())
"""

# Never on the path of get, list, search or status.
HEAVY = {
    "argparse",
    "json",
    "re",
    "enum",
    "typing",
    "pathlib",
    "dataclasses",
    "socket",
    "selectors",
    "subprocess",
    "tomllib",
    "hashlib",
    "asyncio",
    "ctypes",
    "nacl",
    "cryptography",
    "msgspec",
    "jieba",
    "rjieba",
    "aiohttp",
    "platformdirs",
    "engine.config",
    "engine.service",
    "engine.vault",
    "engine.crypto",
    "engine.store",
    "engine.cli.parser",
}

# All a fast call may add: our own lean modules, the C socket and JSON accelerators.
ALLOWED = {
    "__future__",  # `from __future__ import annotations` loads this small module
    "_json",
    "_socket",
    "engine",
    "engine.cli",
    "engine.cli.main",
    "engine.cli.context",
    "engine.cli.fast_args",
    "engine.home",
    "engine.errors",
    "engine.terminal_text",
    "engine.cli.sizes",  # byte counts as text (`status`'s disk use): stdlib-free, a few lines
    "engine.ipc",
    "engine.ipc.client",
    "engine.ipc.framing",
    "engine.ipc.json_codec",
}


def _added(cli: Cli, *args: str) -> list[str]:
    # -S -I: a bare interpreter without site (so the modules site happens to load, which
    # differ between a venv, an editable install and a wheel, cannot hide one of ours).
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}\n{_PROBE}", "--home", str(cli.home), *args],
        capture_output=True,
        text=True,
        env=cli.environ(),
        timeout=60,
        check=True,
    )
    code, added = ast.literal_eval(proc.stdout)
    assert code == 0, proc.stdout
    return [name for name in added if not name.startswith("encodings")]


@pytest.mark.parametrize(
    ("args", "command_module"),
    [
        (("get", "{id}"), "engine.cli.asset_commands"),
        (("get", "{id}", "--json"), "engine.cli.asset_commands"),
        (("list", "--json"), "engine.cli.asset_commands"),
        (("list", "--limit", "5", "--sort", "title"), "engine.cli.asset_commands"),
        (("search", "sourdough"), "engine.cli.search_commands"),
        (("status",), "engine.cli.session_commands"),
    ],
)
def test_everyday_reads_import_only_the_lean_client(vault: Cli, args: tuple[str, ...], command_module: str) -> None:
    """Issue 20: get/list/search/status load no argparse, json, re, typing, pathlib,
    asyncio or crypto; only the client modules, the command's module and its helpers."""
    put = vault.put("sourdough", "starter")
    added = _added(vault, *(a.replace("{id}", put["short_id"]) for a in args))
    assert sorted(HEAVY.intersection(added)) == []
    helpers = {command_module, "engine.cli.content_options", "engine.cli.password"}
    assert sorted(set(added) - ALLOWED - helpers) == []
    assert command_module in added


def test_other_calls_still_build_the_full_parser(vault: Cli) -> None:
    """The fast path declines what it does not read; argparse (and only it) takes over."""
    added = _added(vault, "list", "--lim", "5")  # an abbreviation only argparse knows
    assert "argparse" in added and "engine.cli.parser" in added
    assert "engine.cli.card_commands" not in added


def _imported_by(env: dict[str, str], *command: str) -> set[str]:
    """The modules a fresh interpreter (no site) imports running ``command``, from -X importtime."""
    proc = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", *command],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")} - {
        "package"  # the header line's last column
    }


ROOT = Path(__file__).resolve().parents[2]
# What the console script pip writes for `[project.scripts] memories = "engine.cli.entry:run"`
# runs (current pip: no `import re` before it).
LAUNCHER = ("-c", "import sys\nfrom engine.cli.entry import run\nsys.exit(run())")


def test_version_imports_no_client(cli: Cli) -> None:
    """Issue 32: `memories --version` (2.8x a bare interpreter through argparse) loads only the
    entry module and the version string, however the command is started."""
    bare = _imported_by(cli.environ(), "-c", "pass")
    added = _imported_by(cli.environ(), *LAUNCHER, "--version") - bare
    assert sorted(added) == ["__future__", "engine", "engine.cli", "engine.cli.entry"]
    # `python -m` adds runpy and importlib's helpers of its own; none of ours beyond the entry.
    added = _imported_by(cli.environ(), "-m", "engine.cli", "--version") - bare
    assert sorted(name for name in added if name.startswith("engine")) == ["engine", "engine.cli", "engine.cli.entry"]
    assert "argparse" not in added


def test_installed_launcher_takes_the_fast_path(vault: Cli) -> None:
    """Issue 32: the `memories` a wheel or `pip install -e` installs starts at the lean entry
    module (not engine.cli.main), so a `get` through it loads only the lean client."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        project = tomllib.load(file)
    assert project["project"]["scripts"]["memories"] == "engine.cli.entry:run"
    put = vault.put("sourdough", "starter")
    bare = _imported_by(vault.environ(), "-c", "import os")  # as _PROBE: site always loads os
    added = _imported_by(vault.environ(), *LAUNCHER, "--home", str(vault.home), "get", put["short_id"]) - bare
    added = {name for name in added if not name.startswith("encodings")}
    assert sorted(HEAVY.intersection(added)) == []
    helpers = {"engine.cli.entry", "engine.cli.asset_commands", "engine.cli.content_options", "engine.cli.password"}
    assert sorted(added - ALLOWED - helpers) == []
