"""Writer lock, atomic init, wrong passwords, lock and idle auto-lock (ST-7, ST-8, ST-10)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import PASSWORD, Cli, pid_alive


def test_second_daemon_names_the_holder(vault: Cli) -> None:
    """ST-7: a second daemon on the same data directory exits with a clear error naming the PID."""
    pid = vault.daemon_pid()
    proc = vault.run("daemon", "run", timeout=30)
    assert proc.returncode == 3
    assert f"PID {pid}" in proc.stderr and "store_in_use" in proc.stderr
    assert vault.ok("status")["state"] == "unlocked"  # the first one is untouched


def test_init_never_overwrites(vault: Cli) -> None:
    """ST-8: an existing store is never overwritten."""
    vault.put("keep me", "precious")
    vault.stop()
    store = vault.home / "store.db"
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    assert vault.err("init", "--password-stdin", input="other password\n")["code"] == "already_initialized"
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    vault.unlock()
    assert vault.ok("list")["items"][0]["title"] == "keep me"


def test_interrupted_init_does_not_block_retry(cli: Cli) -> None:
    """ST-8: a daemon killed in the middle of init leaves nothing that blocks a new init."""
    # A real (slow) KDF so that the kill lands while the store is being built.
    cli.env["MEMORIES_KDF_TARGET_MS"] = "700"
    cli.ok("daemon", "start")
    pid = cli.daemon_pid()
    assert pid is not None
    init = subprocess.Popen(
        cli.command("init", "--password-stdin", "--json"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.environ(),
    )
    assert init.stdin is not None
    init.stdin.write(PASSWORD + "\n")
    init.stdin.close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(cli.home.glob("store.db.init-*")):
        time.sleep(0.01)
    assert list(cli.home.glob("store.db.init-*")), "init should be building its staging file"
    os.kill(pid, signal.SIGKILL)
    init.wait(timeout=30)
    assert init.returncode != 0
    assert not (cli.home / "store.db").exists()
    while pid_alive(pid):
        time.sleep(0.01)
    cli.env["MEMORIES_KDF_TARGET_MS"] = "10"
    cli.init()
    assert cli.ok("status")["state"] == "unlocked"
    assert not list(cli.home.glob("store.db.init-*")), "stale staging files are cleaned up"


def test_wrong_password_changes_nothing_and_is_throttled(vault: Cli) -> None:
    """Wrong password: typed error, no change, bounded tries per minute."""
    vault.put("n", "b")
    vault.lock()  # and its re-execution, whose closing of the store is the engine's last write
    store = vault.home / "store.db"
    wal = vault.home / "store.db-wal"
    before = (store.read_bytes(), wal.read_bytes() if wal.exists() else b"")
    codes = [vault.err("unlock", "--password-stdin", input="wrong\n")["code"] for _ in range(5)]
    assert codes == ["wrong_password"] * 5
    # Even the right password is refused while the budget is spent (no oracle for guessing).
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "rate_limited"
    after = (store.read_bytes(), wal.read_bytes() if wal.exists() else b"")
    assert after == before
    assert vault.ok("status")["state"] == "locked"


def test_lock_blocks_content_ops_but_status_answers(vault: Cli) -> None:
    """ST-10: after lock every content op answers "locked"; status still answers."""
    put = vault.put("n", "b")
    vault.ok("lock")
    for args in (
        ("list",),
        ("get", put["id"]),
        ("put", "--title", "x"),
        ("edit", put["id"], "--body", "y"),
        ("delete", put["id"]),
        ("history", put["id"]),
        ("diff", put["id"]),
    ):
        assert vault.err(*args)["code"] == "locked", args
    assert vault.ok("status") == {"state": "locked"}  # DT-1: locked says only "locked"
    vault.unlock()
    assert vault.ok("get", put["id"])["body"] == "b"


def test_idle_auto_lock(cli: Cli) -> None:
    """ST-10: the vault locks itself after the configured idle time."""
    cli.home.mkdir(parents=True)
    (cli.home / "config.toml").write_text("[engine]\nidle_lock_minutes = 0.02\n", "utf-8")
    cli.init()
    deadline = time.monotonic() + 120
    state = "unlocked"
    while time.monotonic() < deadline and state != "locked":
        time.sleep(0.3)
        state = cli.ok("status")["state"]  # status never touches the idle timer (DT-1)
    assert state == "locked"


def test_elevation_is_required_and_scoped(vault: Cli, tmp_path: Path) -> None:
    """API-3: export needs sudo; sudo elevates the caller's session namespace only."""
    vault.put("n", "b")
    assert vault.err("export", "--format", "jsonl", str(tmp_path / "out"))["code"] == "elevation_required"
    assert vault.err("sudo", "--password-stdin", input="wrong\n")["code"] == "wrong_password"
    vault.sudo()
    assert vault.ok("export", "--format", "jsonl", str(tmp_path / "out2"))["exported"] == 1
    # Another session (a different parent process, and no terminal) does not inherit the elevation.
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess,sys; sys.exit(subprocess.call(sys.argv[1:]))",
            *vault.command("export", "--format", "jsonl", str(tmp_path / "out3"), "--json"),
        ],
        capture_output=True,
        text=True,
        env=vault.environ(),
        timeout=60,
        start_new_session=True,  # run from a terminal, the test's own session would share it
    )
    assert other.returncode == 1 and "elevation_required" in other.stdout
    vault.ok("lock")
    vault.unlock()
    assert vault.err("export", "--format", "jsonl", str(tmp_path / "out4"))["code"] == "elevation_required"


def test_daemon_start_stop_status(cli: Cli) -> None:
    assert cli.ok("daemon", "status") == {"running": False}
    assert cli.ok("status") == {"state": "not_running"}
    started = cli.ok("daemon", "start")
    assert started["started"] is True and started["initialized"] is False
    assert cli.ok("status")["state"] == "uninitialized"
    assert cli.ok("daemon", "start")["started"] is False
    stopped = cli.ok("daemon", "stop")
    assert stopped["stopped"] is True
    assert cli.ok("daemon", "status") == {"running": False}
