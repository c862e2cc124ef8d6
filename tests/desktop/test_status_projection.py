"""DT-1: `memories status --json` is the DesktopStatus projection, and nothing more."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service.caller import Caller
from tests.helpers import Cli

ALLOWED_KEYS = {
    "state",
    "initialized",
    "locked",
    "vaults",
    "assets",
    "conflicts",
    "connections",
    "providers",
    "sync_queue",
    "cloud_delivery",  # CL-5: two counts
    "storage",  # issue 32: byte sizes of the store's files (what `ls -l` of the data directory shows)
    "busy",
    "attention",
    "jobs",  # background work (issue 16): names, states and counts only
    "attention_reasons",  # DT-7: fixed reason codes only
}
REASONS = {"conflicts", "quarantine", "forks", "cloud_delivery", "tickets"}
JOB_KEYS = {"name", "state", "done", "total", "started", "seconds"}
CANARY = "CANARY-dt1-7f3a9c"


def test_locked_status_says_only_locked(vault: Cli) -> None:
    """DT-1: when locked, the projection says only "locked"."""
    vault.put(f"title {CANARY}", f"body {CANARY}", CANARY)
    vault.ok("lock")
    assert vault.ok("status") == {"state": "locked"}


def test_unlocked_status_has_counts_and_types_only(vault: Cli) -> None:
    """DT-1: counts and types only; no identifiers, digests, content or credentials."""
    vault.put(f"title {CANARY}", f"body {CANARY}", CANARY)
    status = vault.ok("status")
    assert status["state"] == "unlocked"
    assert set(status) <= ALLOWED_KEYS, set(status) - ALLOWED_KEYS
    assert status["assets"] == 1 and status["vaults"] == 1
    text = json.dumps(status)
    assert CANARY not in text
    assert not re.search(r"[0-9a-f]{12,}", text), "no identifiers or digests"
    assert all(isinstance(p, str) for p in status["providers"])
    assert set(status["attention_reasons"]) <= REASONS
    assert all(set(job) == JOB_KEYS and isinstance(job["name"], str) for job in status["jobs"])
    assert all(type(size) is int for size in status["storage"].values())


def test_status_not_running_and_uninitialized(cli: Cli) -> None:
    """DT-1: the CLI reports a stopped engine without starting one."""
    assert cli.ok("status") == {"state": "not_running"}
    assert cli.daemon_pid() is None


def test_mcp_allowlist_rejects_desktop_status(tmp_path: Path) -> None:
    """DT-1/AG-2: DesktopStatus is refused for the MCP surface before dispatch."""
    from engine.service import handlers  # noqa: F401  (registers the ops)
    from engine.service.registry import OPS
    from engine.service.service import Service

    assert OPS["desktop_status"].mcp_allowed is False
    service = Service(Paths(tmp_path / "home"), EngineConfig())
    with pytest.raises(MemoriesError) as info:
        service.dispatch({"op": "desktop_status"}, Caller(namespace="mcp:test", surface="mcp"))
    assert info.value.code == "permission_denied"
    # The same request from the local IPC surface is answered.
    assert service.dispatch({"op": "desktop_status"}, Caller(namespace="cli:1"))["state"] == "uninitialized"


def test_status_polling_does_not_keep_the_vault_unlocked(cli: Cli) -> None:
    """DT-1: DesktopStatus never touches the idle timer, so polling cannot defeat auto-lock."""
    cli.home.mkdir(parents=True, mode=0o700)
    (cli.home / "config.toml").write_text("[engine]\nidle_lock_minutes = 0.02\n")  # 1.2 s
    cli.init()
    deadline = time.monotonic() + 30
    states = []
    while time.monotonic() < deadline:
        state = cli.ok("status")["state"]
        states.append(state)
        if state == "locked":
            break
    assert states[-1] == "locked", "status polling kept the vault unlocked"


def test_busy_while_another_op_holds_the_engine(vault: Cli) -> None:
    """DT-1/DT-4: `busy` is true while another op holds the engine (here: large imports),
    and the status still answers without waiting for it."""
    from engine.ipc.client import IpcClient

    socket = Paths(vault.home).socket
    stop = threading.Event()

    def load() -> None:
        with IpcClient(socket, timeout=300) as client:
            round_ = 0
            while not stop.is_set():
                items = [{"title": f"r{round_} n{i}", "body": "lorem ipsum " * 20} for i in range(100)]
                client.request({"op": "import_batch", "items": items}, timeout=300)
                round_ += 1

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    seen_busy = False
    try:
        with IpcClient(socket, timeout=30) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not seen_busy:
                status = client.request({"op": "desktop_status"})
                seen_busy = status["busy"] is True
    finally:
        stop.set()
        worker.join(300)
    assert seen_busy, "status never reported busy during sustained imports"
    # The imports' indexing runs on as background jobs (issue 20) and takes the engine for
    # each batch; once they have ended, nothing holds it.
    end = time.monotonic() + 300
    status = vault.ok("status")
    while time.monotonic() < end and any(j["state"] in ("waiting", "running") for j in status["jobs"]):
        time.sleep(0.1)
        status = vault.ok("status")
    assert status["busy"] is False, status
