"""init, unlock, lock, sudo, status, daemon start|stop|status|run."""

from __future__ import annotations

import os
import sys
import time

from engine.cli.context import Context
from engine.cli.password import read_password
from engine.cli.sizes import size_text
from engine.errors import MemoriesError
from engine.terminal_text import one_line

TYPE_CHECKING = False  # status is on the CLI's fast path: no argparse, pathlib or typing (issue 20)
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("init", parents=[common], help="create a new vault (asks twice for a password)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("unlock", parents=[common], help="unlock the vault (starts the engine if needed)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=cmd_unlock)

    p = sub.add_parser("sudo", parents=[common], help="elevate this shell session for a few minutes")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=cmd_sudo)

    p = sub.add_parser("lock", parents=[common], help="lock the vault now")
    p.set_defaults(func=cmd_lock)

    p = sub.add_parser("status", parents=[common], help="show whether the vault is locked, with counts")
    p.set_defaults(func=cmd_status)

    daemon = sub.add_parser("daemon", parents=[common], help="control the engine daemon")
    dsub = daemon.add_subparsers(dest="daemon_command", metavar="ACTION", parser_class=type(daemon))
    for name, func, text in (
        ("start", cmd_daemon_start, "start the engine in the background"),
        ("stop", cmd_daemon_stop, "stop the engine (locks the vault)"),
        ("status", cmd_daemon_status, "is the engine running, with its PID"),
        ("run", cmd_daemon_run, "run the engine in the foreground"),
    ):
        dp = dsub.add_parser(name, parents=[common], help=text)
        dp.set_defaults(func=func)
    daemon.set_defaults(func=lambda ctx, args: (daemon.print_help(), 2)[1])


def cmd_init(ctx: Context, args: argparse.Namespace) -> int:
    if ctx.paths.store.exists():
        raise MemoriesError("already_initialized")
    password = read_password(args.password_stdin, confirm=True, prompt="New vault password: ")
    from engine.cli.password_commands import weak_password_warning  # zxcvbn only here (CLI start-up is measured)

    warning = weak_password_warning(password)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)  # CD-11: a warning, not a refusal
    ctx.ensure_engine()
    result = ctx.request({"op": "init", "password": password}, timeout=120)
    ctx.emit(result, f"Vault created in {ctx.paths.home} and unlocked.")
    return 0


UNLOCK_TRIES = 3


def cmd_unlock(ctx: Context, args: argparse.Namespace) -> int:
    if not ctx.paths.store.exists():
        raise MemoriesError("not_initialized")
    password = read_password(args.password_stdin, prompt="Vault password: ")
    ctx.ensure_engine()
    # At a terminal a typo gets another try (issue 31), as sudo(8) does; the engine's
    # password budget still throttles the tries, and piped input gets exactly one.
    tries = 1 if args.password_stdin else UNLOCK_TRIES
    for attempt in range(1, tries + 1):
        try:
            result = ctx.request({"op": "unlock", "password": password}, timeout=120)
            break
        except MemoriesError as exc:
            if exc.code != "wrong_password" or attempt == tries:
                raise
            print("Wrong password; try again.", file=sys.stderr, flush=True)
            password = read_password(False, prompt="Vault password: ")
    ctx.emit(result, "Already unlocked." if result.get("already") else "Unlocked.")
    return 0


def cmd_sudo(ctx: Context, args: argparse.Namespace) -> int:
    # A locked vault cannot be elevated: say so before asking for a password (issue 31).
    if not ctx.paths.store.exists():
        raise MemoriesError("not_initialized")
    state = ctx.request({"op": "desktop_status"}, timeout=5).get("state") if ctx.engine_running() else "not_running"
    if state not in ("unlocked", "attention"):
        raise MemoriesError("locked", "The vault is locked; run `memories unlock` first, then `memories sudo`.")
    password = read_password(args.password_stdin, prompt="Vault password (sudo): ")
    result = ctx.request({"op": "sudo", "password": password}, timeout=120)
    ctx.emit(result, f"Elevated for {result['seconds'] // 60} minutes in this shell session.")
    return 0


def cmd_lock(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "lock"})
    ctx.emit(result, "Locked.")
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    if not ctx.engine_running():
        result: dict[str, Any] = {"state": "not_running"}
        if _disk_full(ctx.paths.home):  # why the engine may not be able to start (issue 12)
            result["reason"] = {"code": "disk_full", "message": DISK_FULL_STATUS}
    else:
        result = ctx.request({"op": "desktop_status"}, timeout=5)
    if result["state"] == "unlocked":
        text = f"unlocked: {result['assets']} items in {result['vaults']} vault(s)"
        if result.get("conflicts"):
            text += f", {result['conflicts']} in conflict"
        delivery = result.get("cloud_delivery") or {}
        if delivery.get("not_arriving") or delivery.get("not_taken"):  # CL-5
            text += (
                f"\ncloud: {delivery.get('not_arriving', 0)} device(s) whose writes are not arriving here, "
                f"{delivery.get('not_taken', 0)} that have not taken ours (see `memories cloud sync`)"
            )
        storage = result.get("storage")
        if storage:  # issue 32: what the vault takes on disk, large files apart
            text += "\n" + _storage_line(storage)
        latest = {job["name"]: job for job in result.get("jobs", [])}  # oldest first: the last run wins
        for job in result.get("jobs", []):
            if job["state"] == "running":
                text += "\n" + _job_line(job)
        for name, job in latest.items():
            if job["state"] == "failed":  # e.g. the extraction cycle after an import (AG-9)
                text += f"\n  {one_line(str(name))}: failed ({one_line(str(job.get('failure', 'error')))})"
    else:
        text = {"not_running": "engine not running (vault locked)", "uninitialized": NO_VAULT_YET}.get(
            result["state"], result["state"]
        )
    if result["state"] in ("not_running", "uninitialized") and not ctx.paths.store.exists():
        text = NO_VAULT_YET  # a fresh home (the tray reads the JSON state: the engine is not running)
    if "reason" in result:
        text += f": {result['reason']['message']}"
    ctx.emit(result, text)
    return 0


def _storage_line(storage: dict[str, Any]) -> str:
    """`on disk: 2.9 MiB (store 80.0 KiB, large files 2.9 MiB in 1 pack)`: the total first, as `du` says it."""
    line = f"on disk: {size_text(int(storage['total_bytes']))}"
    packs = int(storage.get("packs", 0))
    if packs:
        files = f"large files {size_text(int(storage['pack_bytes']))} in {packs} pack{'s' if packs != 1 else ''}"
        line += f" (store {size_text(int(storage['store_bytes']))}, {files})"
    return line


def _job_line(job: dict[str, Any]) -> str:
    """A running background job: `search-build: 512/10000`, or its name alone before it counts."""
    counted = f"{job['done']}/{job['total']}" if job.get("total") else "running"
    return f"  {one_line(str(job['name']))}: {counted}"


NO_VAULT_YET = "No vault yet. Create one with `memories init`."
DISK_FULL_STATUS = "The disk holding the data directory is full; the engine cannot start until some space is freed."


def _disk_full(home: Path) -> bool:
    """No room left for the engine's lock file, log and database journal (a read-only check)."""
    probe = home if home.exists() else home.parent
    try:
        st = os.statvfs(probe)
    except (OSError, AttributeError):  # AttributeError: no statvfs on Windows
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def cmd_daemon_start(ctx: Context, args: argparse.Namespace) -> int:
    started = ctx.ensure_engine()
    info = ctx.request({"op": "daemon_info"})
    ctx.emit({**info, "started": started}, f"engine {'started' if started else 'already running'} (PID {info['pid']})")
    return 0


def cmd_daemon_stop(ctx: Context, args: argparse.Namespace) -> int:
    if not ctx.engine_running():
        ctx.emit({"stopped": False, "running": False}, "engine not running")
        return 0
    pid = ctx.request({"op": "daemon_info"})["pid"]
    ctx.request({"op": "shutdown"})
    ctx.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ctx.engine_running():
        ctx.close()
        time.sleep(0.05)
    ctx.close()
    ctx.emit({"stopped": True, "pid": pid}, f"engine stopped (PID {pid})")
    return 0


def cmd_daemon_status(ctx: Context, args: argparse.Namespace) -> int:
    if not ctx.engine_running():
        ctx.emit({"running": False}, "engine not running")
        return 0
    info = ctx.request({"op": "daemon_info"})
    ctx.emit({"running": True, **info}, f"engine running (PID {info['pid']}), {'locked' if info['locked'] else 'unlocked'}")
    return 0


def cmd_daemon_run(ctx: Context, args: argparse.Namespace) -> int:
    from engine.daemon import run_daemon  # heavy imports only in the daemon

    return run_daemon(ctx.paths)
