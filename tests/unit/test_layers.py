"""Import directions (SPEC LY-1), checked on the source tree with the standard library's AST.

Layers, top to bottom (an import may only point down, or stay inside its own package):

- surfaces: ``engine.cli``, ``engine.mcp``, ``desktop`` — no surface imports another, except
  that the CLI starts the other processes in-process through their entry points (ENTRY_POINTS);
- the daemon process (``engine.daemon``): wires the IPC server to the service; only the CLI
  may import it (``memories daemon run``);
- ``engine.service``: request types, registry, dispatcher, session, op handlers;
- domain packages (DOMAIN);
- ``engine.store``, ``engine.crypto``.

Kernel modules (KERNEL: ``engine`` itself for ``__version__``, ``engine.errors``,
``engine.config``, ``engine.home``, ``engine.launch``, ``engine.terminal_text``, ``engine.ipc``,
``engine.lazy_import``) may be imported from every
layer and import only the standard library, third-party packages and each other.

Two narrower rules: the desktop uses only the IPC client and the kernel (it imports nothing
else from ``engine``), and the ``memories mcp`` process (``engine.mcp``) is an IPC client
too: it imports only the kernel, the daemon side of MCP lives in ``engine.agents`` and
``engine.service``. Inside the desktop, the dashboard never imports the tray (the tray hosts
the dashboard, so the other direction is allowed).

Every import counts: module level, inside functions (lazy), under ``TYPE_CHECKING``, and
relative ones. ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module. A module under ``engine/`` or ``desktop/`` that belongs to no layer fails the check,
so a new package has to be placed in the table below (and in docs/architecture.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SURFACES = ("engine.cli", "engine.mcp", "desktop")
DAEMON = ("engine.daemon",)
SERVICE = ("engine.service",)
DOMAIN = (
    "engine.vault",
    "engine.cards",
    "engine.search",
    "engine.rag",
    "engine.remote",
    "engine.skills",
    "engine.agents",  # MCP grant logic (daemon side of SPEC §8)
    "engine.jobs",
    "engine.sync",
    "engine.cloud",
    "engine.center",
    "engine.transcripts",
    "engine.moving",  # parsers of other password managers' exports (IM-1)
    "engine.files",  # file assets streamed in sealed chunks (FI-1)
    "engine.backup",  # backup file format, what a backup holds, restore (BK-1, BK-2)
)
BOTTOM = ("engine.store", "engine.crypto")
# Standard library (plus platformdirs, lazily) only; importable from everywhere.
KERNEL = (
    "engine.errors",
    "engine.config",
    "engine.home",
    "engine.launch",
    "engine.terminal_text",
    "engine.ipc",
    "engine.lazy_import",  # third-party modules imported on first use (ST-12: the re-executed engine's load)
    "engine.mcp_handshake",  # the early `initialize` answer (AG-11): the CLI answers it before loading the MCP surface
    "engine.agent_manifests",  # what `agent connect` recorded (the tray reads it for its transcript watcher, AG-11)
    "engine.settings",  # the DT-9 settings table over config.toml (tomlkit only when writing): CLI, engine and tray read it
)
RANK = {"bottom": 0, "domain": 1, "service": 2, "daemon": 3, "surface": 4}

# The `memories` command starts the other processes in-process: these exact modules are
# the only ones a CLI module may import from another surface (or from the daemon). Same
# list as ../shared/tools/layers.py.
ENTRY_POINTS = frozenset(
    {
        "engine.daemon",
        "engine.mcp.server",
        "engine.mcp.http",
        "engine.mcp.clients",
        "desktop.tray.launcher",
        "desktop.dashboard.standalone",
    }
)

# Known violations, as (importing module, imported module). Empty since the vault core
# (engine/vault/core.py) took the store and writes out of the service. This set may only
# shrink: the test also fails when an entry here no longer occurs. Never add to it.
KNOWN: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Violation:
    where: str  # path:line
    src: str
    dst: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.src} imports {self.dst} ({self.why})"


def _under(mod: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if mod == p or mod.startswith(p + ".")), None)


def classify(mod: str) -> tuple[str, str] | None:
    """(layer, package) of a first-party module, or None when it belongs to no layer."""
    if mod == "engine" or _under(mod, KERNEL):
        return "kernel", _under(mod, KERNEL) or "engine"
    for layer, packages in (
        ("surface", SURFACES),
        ("daemon", DAEMON),
        ("service", SERVICE),
        ("domain", DOMAIN),
        ("bottom", BOTTOM),
    ):
        package = _under(mod, packages)
        if package is not None:
            return layer, package
    return None


def _sources(root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted([*root.glob("engine/**/*.py"), *root.glob("desktop/**/*.py")]):
        parts = path.relative_to(root).with_suffix("").parts
        yield path, ".".join(parts).removesuffix(".__init__")


def _imports(tree: ast.AST, mod: str, is_package: bool, modules: set[str]) -> Iterator[tuple[int, str]]:
    """Every first-party module this file imports, with the line of the import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_package else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                yield node.lineno, candidate if candidate in modules else target


def _rule(src: str, dst: str) -> str | None:
    """Why ``src`` may not import ``dst``; None when it may."""
    src_class, dst_class = classify(src), classify(dst)
    if src_class is None:
        return None  # reported by test_every_module_has_a_layer
    if dst_class is None:
        return "imports a module that belongs to no layer"
    (src_layer, src_pkg), (dst_layer, dst_pkg) = src_class, dst_class
    if src_layer == "kernel":
        return None if dst_layer == "kernel" else "a kernel module imports only the standard library and the kernel"
    if dst_layer == "kernel":
        return None
    if src.startswith("engine.cli.") and dst in ENTRY_POINTS:
        return None
    if _under(src, ("desktop.dashboard",)) and _under(dst, ("desktop.tray",)):
        return "the dashboard never imports the tray; shared desktop code lives in desktop/*.py"
    if src_pkg == dst_pkg:
        return None
    if src_pkg == "desktop":
        return "desktop uses only the IPC client and kernel modules"
    if src_pkg == "engine.mcp":
        return "the MCP process is an IPC client: only kernel modules (daemon side: engine.agents, engine.service)"
    if dst_layer == "daemon":
        return "only the CLI starts the daemon"
    if RANK[dst_layer] > RANK[src_layer]:
        return f"upward: {src_layer} imports {dst_layer}"
    if src_layer == dst_layer == "surface":
        return "sideways: a surface imports another surface"
    if src_layer == "surface" and dst_layer == "bottom":
        return "store/crypto belong to the engine, not to a surface"
    return None


def violations(root: Path) -> list[Violation]:
    sources = list(_sources(root))
    modules = {mod for _, mod in sources}
    found: list[Violation] = []
    for path, mod in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, dst in _imports(tree, mod, path.name == "__init__.py", modules):
            if not dst.startswith(("engine.", "desktop.")) and dst not in ("engine", "desktop"):
                continue  # standard library and third party
            why = _rule(mod, dst)
            if why is not None:
                found.append(Violation(f"{path.relative_to(root)}:{line}", mod, dst, why))
    return found


def test_imports_run_one_way() -> None:
    """LY-1: surfaces -> service -> domain -> store/crypto, nothing upward or sideways; desktop
    and the MCP process use only the IPC client and kernel. KNOWN only shrinks."""
    found = violations(ROOT)
    new = [str(v) for v in found if (v.src, v.dst) not in KNOWN]
    assert not new, "imports against SPEC LY-1 (see docs/architecture.md):\n" + "\n".join(new)
    gone = sorted(KNOWN - {(v.src, v.dst) for v in found})
    assert not gone, f"fixed, so remove from KNOWN in tests/unit/test_layers.py: {gone}"


def test_every_module_has_a_layer() -> None:
    """LY-1: a new package under engine/ or desktop/ must be placed in a layer before it is used."""
    unplaced = [mod for _, mod in _sources(ROOT) if classify(mod) is None]
    assert not unplaced, f"add these to a layer in tests/unit/test_layers.py and docs/architecture.md: {unplaced}"


# The checker itself: each rule on a small synthetic tree, so a checker that stopped seeing
# an edge (lazy, relative, `from pkg import module`) fails here rather than passing silently.
_CASES = [
    ("engine/vault/x.py", "def f() -> None:\n    from engine.service.service import Service\n", "upward"),
    ("engine/cards/x.py", "from engine.service import service\n", "upward"),
    ("engine/store/x.py", "import engine.vault.index\n", "upward"),
    ("engine/service/x.py", "from engine.mcp import server\n", "upward"),
    ("engine/service/x.py", "from engine import daemon\n", "only the CLI starts the daemon"),
    ("engine/vault/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine.cli import main\n", "upward"),
    ("engine/cli/x.py", "from engine.mcp.tools import TOOLS\n", "sideways"),
    ("engine/cli/x.py", "from desktop.tray import app\n", "sideways"),
    ("engine/cli/x.py", "from engine.store import database\n", "store/crypto"),
    ("desktop/tray/x.py", "from engine.cli.main import main\n", "desktop uses only"),
    ("desktop/x.py", "from engine.service.requests import Request\n", "desktop uses only"),
    ("desktop/dashboard/x.py", "from ..tray import state\n", "the dashboard never imports the tray"),
    ("desktop/dashboard/x.py", "from desktop.tray.app import TrayApp\n", "the dashboard never imports the tray"),
    ("engine/mcp/x.py", "from engine.service.requests import Request\n", "the MCP process is an IPC client"),
    ("engine/mcp/x.py", "from engine.agents import grants\n", "the MCP process is an IPC client"),
    ("engine/errors.py", "from engine.vault import index\n", "a kernel module"),
    ("engine/ipc/x.py", "from engine.service.caller import Caller\n", "a kernel module"),
    ("engine/vault/x.py", "from engine.nowhere import thing\n", "belongs to no layer"),
]
_ALLOWED = [
    ("engine/cli/x.py", "from desktop.tray.launcher import add_tray_arguments\nfrom engine.daemon import run_daemon\n"),
    ("engine/cli/x.py", "from engine.service.requests import Request\nfrom engine.cards import otp\n"),
    ("engine/service/x.py", "from engine.vault import index\nfrom engine.store.database import Database\n"),
    ("engine/vault/x.py", "from engine.errors import MemoriesError\nfrom engine.config import Paths\nfrom . import index\n"),
    ("desktop/x.py", "from engine.ipc.client import IpcClient\nfrom engine.terminal_text import one_line\n"),
    ("desktop/tray/x.py", "from desktop.dashboard.server import DashboardServer\nfrom desktop.prober import Probe\n"),
    ("engine/mcp/x.py", "from engine import __version__\nfrom engine.mcp.bridge import DaemonBridge\nimport mcp\n"),
    ("engine/daemon.py", "from engine.service.caller import Caller\nfrom engine.store.writer_lock import WriterLock\n"),
]


def _tree(tmp_path: Path, rel: str, text: str) -> Path:
    for pkg in ("engine", "engine/vault", "engine/cards", "engine/service", "engine/cli", "engine/mcp", "engine/ipc"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    for mod in ("engine/vault/index.py", "engine/service/service.py", "engine/mcp/server.py", "engine/daemon.py"):
        (tmp_path / mod).touch()
    for pkg in ("desktop", "desktop/tray", "desktop/dashboard"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    (tmp_path / "desktop/tray/state.py").touch()
    target = tmp_path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return tmp_path


@pytest.mark.parametrize(("rel", "text", "why"), _CASES)
def test_checker_reports_each_kind_of_bad_import(tmp_path: Path, rel: str, text: str, why: str) -> None:
    """LY-1: the checker sees the bad edge, wherever and however it is written."""
    found = violations(_tree(tmp_path, rel, text))
    assert [v for v in found if v.where.startswith(rel + ":") and why in v.why], found


@pytest.mark.parametrize(("rel", "text"), _ALLOWED)
def test_checker_allows_the_permitted_directions(tmp_path: Path, rel: str, text: str) -> None:
    """LY-1: downward imports, kernel imports and the CLI's entry points are not reported."""
    assert violations(_tree(tmp_path, rel, text)) == []


def test_the_saas_router_keeps_every_agent_notebook_op_local() -> None:
    """AG-13 + saas: the notebook tools are device-local; the router's list names exactly them."""
    from engine.service.center_runtime import AGENT_NOTEBOOK_OPS
    from engine.service.handlers.notebook import NOTEBOOK_OPS

    assert AGENT_NOTEBOOK_OPS == NOTEBOOK_OPS
