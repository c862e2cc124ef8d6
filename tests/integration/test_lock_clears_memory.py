"""ST-12 lock means lock: after `memories lock` no Memories process holds plaintext.

A real daemon is given canaries (an English and a Chinese note body, a protected token, a
TOTP seed and a password from a Bitwarden import, a transcript turn, a file body); every
process serving this data home then has its memory read through /proc/PID/maps and
/proc/PID/mem and searched for each canary as UTF-8, UTF-16-LE and UTF-32-LE (CPython keeps
a string in 1, 2 or 4 bytes a character). While unlocked the same scan must find them (the
scan can fail); after the lock it must find none, the engine keeps its PID and socket, and
a connection opened before the lock still answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import PASSWORD, Cli, raw, require
from tests.mcp.support import error_of, grant, result_of, stdio_client

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
_MAP_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")
_CHUNK = 1 << 24
_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def _processes_of(home: Path) -> list[int]:
    """Every process started for this data home (the engine and anything it runs)."""
    needle = os.fsencode(str(home))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _regions(pid: int) -> Iterator[tuple[int, int]]:
    """Readable regions that could hold data we made: anonymous, heap, stack, and writable
    file mappings (a library's read-only code and constants cannot hold a canary)."""
    with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as handle:
        for line in handle:
            match = _MAP_LINE.match(line.rstrip("\n"))
            if match is None:
                continue
            start, end, perms, name = int(match[1], 16), int(match[2], 16), match[3], match[4]
            if perms[0] != "r" or name in ("[vvar]", "[vsyscall]", "[vdso]"):
                continue
            if name.startswith("/") and perms[1] != "w" and not name.startswith("/memfd:"):
                continue
            yield start, end


def _encodings(text: str) -> list[bytes]:
    return [text.encode("utf-8"), text.encode("utf-16-le"), text.encode("utf-32-le")]


def _scan(pids: list[int], canaries: dict[str, str]) -> dict[str, list[str]]:
    """Which canaries (by name) appear in which process, in which encoding."""
    needles = {name: _encodings(text) for name, text in canaries.items()}
    longest = max(len(n) for forms in needles.values() for n in forms)
    hits: dict[str, list[str]] = {}
    for pid in pids:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for start, end in _regions(pid):
                at = start
                while at < end:
                    size = min(_CHUNK + longest, end - at)
                    try:
                        mem.seek(at)
                        chunk = mem.read(size)
                    except (OSError, ValueError, OverflowError):
                        break
                    for name, forms in needles.items():
                        for form, label in zip(forms, ("utf-8", "utf-16-le", "utf-32-le"), strict=True):
                            if form in chunk:
                                hits.setdefault(name, []).append(f"pid {pid} {label} at {at:#x}")
                    at += _CHUNK
    return hits


def _can_read_memory(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            start, _ = next(_regions(pid))
            mem.seek(start)
            return bool(mem.read(1))
    except (OSError, StopIteration):
        return False


def _chinese(n: int) -> str:
    return "".join(chr(0x4E00 + secrets.randbelow(0x9FA5 - 0x4E00)) for _ in range(n))


def _seed(n: int = 32) -> str:
    return "".join(secrets.choice(_BASE32) for _ in range(n))


def _write_canaries(vault: Cli, tmp_path: Path) -> tuple[dict[str, str], dict[str, Callable[[], object]]]:
    """Store each canary as a user would; return them and, for each, a way to read it back."""
    canaries = {
        "note_en": f"lockcanary{secrets.token_hex(10)}",
        "note_zh": _chinese(12),
        "token": f"tok{secrets.token_hex(12)}",
        "totp_seed": _seed(),
        "password": f"pw{secrets.token_hex(12)}",
        "transcript": f"turncanary{secrets.token_hex(10)}",
        "file": f"filecanary{secrets.token_hex(10)}",
    }
    en = vault.ok("put", "--title", "english", "--body-stdin", input=f"an English note: {canaries['note_en']}\n")["id"]
    zh = vault.ok("put", "--title", "中文", "--body-stdin", input=f"中文笔记：{canaries['note_zh']}\n" * 20)["id"]
    token = canaries["token"]
    token_id = vault.ok("protected", "new", "--title", "api token", "--account", "me", "--token-stdin", input=token)["id"]
    export = {
        "encrypted": False,
        "folders": [],
        "items": [
            {
                "type": 1,
                "name": "mail",
                "login": {"username": "li", "password": canaries["password"], "totp": canaries["totp_seed"]},
            }
        ],
    }
    export_file = tmp_path / "bitwarden.json"
    export_file.write_text(json.dumps(export), "utf-8")
    assert vault.ok("import", "bitwarden", str(export_file))["created"] == 1
    export_file.unlink()
    mail = next(item for item in vault.ok("login", "list")["items"] if item["title"] == "mail")["id"]
    # A Claude Code session whose first user turn carries the canary.
    sessions = tmp_path / "sessions"
    shutil.copytree(DATA / "claude", sessions)
    session_file = next(sessions.rglob("*.jsonl"))
    lines = session_file.read_text("utf-8").splitlines()
    turn = json.loads(lines[0])
    turn["message"]["content"] = f"please remember {canaries['transcript']}"
    session_file.write_text("\n".join([json.dumps(turn), *lines[1:]]) + "\n", "utf-8")
    assert vault.ok("transcript", "import", str(sessions))["imported"] >= 1
    shutil.rmtree(sessions)
    sessions_shown = [s["session_uid"] for s in vault.ok("transcript", "list")["sessions"]]
    body = tmp_path / "notes.txt"
    body.write_text(f"a file body with {canaries['file']}\n", "utf-8")
    # --searchable: its text then also lives in the search index, which the lock must clear too.
    file_id = vault.ok("file", "add", "--searchable", str(body))["id"]
    body.unlink()

    def copy(ref: str) -> object:
        raw(vault, {"op": "sudo", "password": PASSWORD})
        return raw(vault, {"op": "credential_copy", "ref": ref})

    readers: dict[str, Callable[[], object]] = {
        "note_en": lambda: vault.ok("get", en),
        "note_zh": lambda: vault.ok("get", zh),
        "token": lambda: copy(token_id),
        "totp_seed": lambda: vault.ok("otp", mail),
        "password": lambda: copy(mail),
        "transcript": lambda: [vault.ok("transcript", "show", uid) for uid in sessions_shown],
        "file": lambda: vault.run("file", "get", file_id),
    }
    return canaries, readers


def _found_while_unlocked(pids: list[int], canaries: dict[str, str], readers: dict[str, Callable[[], object]]) -> None:
    """Each canary is found in the engine's memory while it is being read (the scan works).
    A protected value is decrypted per request and its answer freed at once, so the reads
    go on in a loop beside the scan; each canary gets a few tries."""
    missing = dict(canaries)
    for _ in range(6):
        stop = threading.Event()

        def read_on(names: list[str] = list(missing)) -> None:
            while not stop.is_set():
                for name in names:
                    readers[name]()

        reading = threading.Thread(target=read_on)
        reading.start()
        try:
            found = _scan(pids, missing)
        finally:
            stop.set()
            reading.join(120)
        missing = {name: text for name, text in missing.items() if name not in found}
        if not missing:
            return
    raise AssertionError(f"not in the engine's memory while unlocked: {sorted(missing)}")


def test_lock_leaves_no_plaintext_in_any_memories_process_st12(vault: Cli, tmp_path: Path) -> None:
    """ST-12: the canaries are in the engine's memory while unlocked and in no process after lock."""
    pid = vault.daemon_pid()
    assert pid is not None
    require(_can_read_memory(pid), "reading another process's memory needs root (CAP_SYS_PTRACE)")
    canaries, readers = _write_canaries(vault, tmp_path)
    pids = _processes_of(vault.home)
    assert pids == [pid]
    _found_while_unlocked(pids, canaries, readers)

    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    kept = IpcClient(Paths(vault.home).socket)
    kept.connect()
    assert vault.ok("lock") == {"locked": True}
    # The engine re-executed in place: same PID, same socket, and the open connection is served.
    assert kept.request({"op": "daemon_info"})["locked"] is True
    assert kept.request({"op": "daemon_info"})["pid"] == pid
    kept.close()
    # The same interpreter flags and arguments (sys.orig_argv), the same data home.
    assert Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
    pids = _processes_of(vault.home)
    assert pids == [pid]
    locked = _scan(pids, canaries)
    assert locked == {}, f"plaintext left after lock: {locked}"
    # The re-executed engine warms up while locked (the segmenter's dictionary), before any
    # password reached it: once that is done, its memory still holds no canary.
    _wait_until_warm(pid)
    warmed = _scan(_processes_of(vault.home), canaries)
    assert warmed == {}, f"plaintext after the locked engine's warm-up: {warmed}"

    # And the vault works as before: unlock, read, lock again.
    vault.unlock()
    assert "lockcanary" in vault.ok("search", "english")["results"][0]["snippet"] or vault.ok("list")["items"]
    assert vault.ok("lock") == {"locked": True}
    assert vault.daemon_pid() == pid


def _wait_until_warm(pid: int) -> None:
    """Until the engine has loaded the segmenter's native library (its warm-up ran)."""
    deadline = time.monotonic() + 120
    while "rjieba" not in Path(f"/proc/{pid}/maps").read_text("ascii", "replace"):
        assert time.monotonic() < deadline, "the locked engine never warmed up"
        time.sleep(0.1)


def _log_count(home: Path, line: str) -> int:
    log = Paths(home).log_dir / "engine.log"
    return log.read_text("utf-8", "replace").count(line) if log.exists() else 0


def test_an_unlock_sent_right_after_the_lock_derives_its_key_during_the_restart_st12(vault: Cli) -> None:
    """ST-12: an unlock that reaches the re-executing engine while it loads starts its KDF at
    once; the handler still checks the password (a wrong one is refused, through the same
    password-attempt budget) and a right one unlocks and serves."""
    note = vault.put("after the restart", "still here")["id"]
    ahead = "unlock: its KDF started while the engine loads"
    before = _log_count(vault.home, ahead)
    with IpcClient(Paths(vault.home).socket) as kept:
        # Sent on one connection the moment the lock answers: the new image reads it first.
        assert kept.request({"op": "lock"}) == {"locked": True}
        try:
            kept.request({"op": "unlock", "password": "not the password"}, timeout=120)
        except MemoriesError as exc:
            assert exc.code == "wrong_password"
        else:
            raise AssertionError("a wrong password unlocked the vault")
        assert _log_count(vault.home, ahead) == before + 1
        assert kept.request({"op": "unlock", "password": PASSWORD}, timeout=120)["unlocked"] is True
        assert kept.request({"op": "lock"}) == {"locked": True}
        assert kept.request({"op": "unlock", "password": PASSWORD}, timeout=120)["unlocked"] is True
        assert _log_count(vault.home, ahead) == before + 2
        assert kept.request({"op": "get", "id": note})["body"] == "still here"


def _restarts(home: Path) -> int:
    log = Paths(home).log_dir / "engine.log"
    return log.read_text("utf-8", "replace").count("engine restarted after a lock") if log.exists() else 0


def test_the_idle_auto_lock_clears_memory_the_same_way_st12(cli: Cli) -> None:
    """ST-12, ST-10: the idle auto-lock re-executes the engine like `lock` does."""
    cli.home.mkdir(parents=True)
    (cli.home / "config.toml").write_text("[engine]\nidle_lock_minutes = 0.25\n", "utf-8")  # 15 s: longer than a scan under load
    cli.init()
    pid = cli.daemon_pid()
    assert pid is not None
    require(_can_read_memory(pid), "reading another process's memory needs root (CAP_SYS_PTRACE)")
    canaries = {"note_en": f"idlecanary{secrets.token_hex(10)}", "note_zh": _chinese(12)}
    note = cli.ok("put", "--title", "idle", "--body-stdin", input=f"{canaries['note_en']} {canaries['note_zh']}\n")["id"]
    _found_while_unlocked([pid], canaries, {name: lambda: cli.ok("get", note) for name in canaries})
    deadline = time.monotonic() + 60
    while _restarts(cli.home) == 0:  # the idle lock, then the re-execution it asks for
        assert time.monotonic() < deadline, "the engine never idle-locked and restarted"
        time.sleep(0.1)
    assert cli.ok("status") == {"state": "locked"}
    assert cli.daemon_pid() == pid
    assert _scan(_processes_of(cli.home), canaries) == {}


def test_an_mcp_server_keeps_working_across_the_lock_restart_st12(vault: Cli) -> None:
    """ST-12: an MCP server started before the lock keeps its pooled engine connections
    through the engine's re-execution: `locked` while locked, answers again after unlock."""
    vault.sudo()
    token = grant(vault, "across-lock", "read")
    vault.put("kept", "a note the agent reads")
    pid = vault.daemon_pid()

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            assert result_of(await client.call_tool("memory_list", {}))["total"] == 1
            assert vault.ok("lock") == {"locked": True}
            assert error_of(await client.call_tool("memory_list", {}))["code"] == "locked"
            vault.unlock()
            assert result_of(await client.call_tool("memory_list", {}))["total"] == 1

    asyncio.run(scenario())
    assert vault.daemon_pid() == pid
