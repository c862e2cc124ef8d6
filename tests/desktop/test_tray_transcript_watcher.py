"""AG-11: the tray runs `memories transcript watch` as the fallback capture while the vault is unlocked.

A real tray (xorg backend under Xvfb with trayer), a real daemon, a real `agent connect` and a
Claude Code session file written by hand in the watched ``~/.claude/projects``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from desktop.status import TrayState
from desktop.tray.transcript_watcher import watcher_wanted, why_not_watching
from tests.desktop.support import XSession, children_of
from tests.desktop.test_tray_x11 import Tray
from tests.helpers import Cli

SESSION = "dddd1111-0000-4000-8000-000000000009"


def _turn(n: int, cwd: Path, words: str) -> str:
    lines = [
        {
            "type": "user",
            "cwd": str(cwd),
            "sessionId": SESSION,
            "uuid": f"{SESSION}-u{n}",
            "parentUuid": None if n == 1 else f"{SESSION}-a{n - 1}",
            "isSidechain": False,
            "timestamp": f"2026-12-01T09:0{n}:00.000Z",
            "message": {"role": "user", "content": f"Where is the {words} config kept?"},
        },
        {
            "type": "assistant",
            "cwd": str(cwd),
            "sessionId": SESSION,
            "uuid": f"{SESSION}-a{n}",
            "parentUuid": f"{SESSION}-u{n}",
            "isSidechain": False,
            "timestamp": f"2026-12-01T09:0{n}:05.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": f"The {words} config is in {words}.toml."}]},
        },
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _wait(predicate: Any, what: str, timeout: float = 120) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _watchers(tray: Tray) -> list[int]:
    return [pid for pid, cmd in children_of(tray.proc.pid) if "transcript watch" in cmd and not _zombie(pid)]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}") and not _zombie(pid)


def test_tray_runs_transcript_watcher_while_unlocked(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """AG-11: with an agent connected with transcripts, the running tray imports a turn appended
    to a Claude Code session (searchable with `memories search`); locking stops the watcher
    (its process is gone), unlocking starts one again, never more than one; quitting stops it."""
    user_home = tmp_path / "user"
    project = user_home / "code" / "proj"
    project.mkdir(parents=True)
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    assert not watcher_wanted(vault.home)  # nothing connected yet: the tray would not watch
    vault.sudo()
    connected = vault.ok("agent", "connect", "claude-code", "--project", str(project), "--transcripts", "all")
    assert connected["transcripts_scope"] == "all"
    assert watcher_wanted(vault.home)

    session = user_home / ".claude" / "projects" / "-code-proj" / f"{SESSION}.jsonl"
    session.parent.mkdir(parents=True)
    session.write_text(_turn(1, project, "firstword"), encoding="utf-8")

    tray = Tray(vault, xsession, tmp_path, "xorg")
    try:
        tray.wait_icon(TrayState.UNLOCKED)
        first = int(tray.wait_output(r"transcript watcher started \(pid (\d+)\)").group(1))
        assert _watchers(tray) == [first]

        with session.open("a", encoding="utf-8") as f:  # the client appends a turn
            f.write(_turn(2, project, "zanzibarword"))
        _wait(lambda: vault.ok("search", "zanzibarword")["results"], "the appended turn to be searchable")
        assert tray.output().count("transcript watcher started") == 1, tray.output()

        vault.ok("lock")
        tray.wait_output(r"transcript watcher stopped \(the vault is locked\)")
        assert not _alive(first)
        assert _watchers(tray) == []

        vault.unlock()
        again = tray.wait_output(r"transcript watcher started \(pid (\d+)\)[\s\S]*transcript watcher started \(pid (\d+)\)")
        second = int(again.group(2))
        assert second != first and _alive(second)
        assert _watchers(tray) == [second]
    finally:
        tray.stop()
    assert tray.proc.returncode == 0, tray.output()
    assert not _alive(second)


def test_tray_watcher_switch_and_restart(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """AG-11: with no agent connected the tray runs no watcher; `config set transcript_watcher on`
    starts one without a restart; one that dies is started again (one at a time); `off` stops it."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config")})
    tray = Tray(vault, xsession, tmp_path, "xorg")
    try:
        tray.wait_icon(TrayState.UNLOCKED)
        assert "transcript watcher started" not in tray.output()
        assert _watchers(tray) == []

        vault.ok("config", "set", "transcript_watcher", "on")
        first = int(tray.wait_output(r"transcript watcher started \(pid (\d+)\)").group(1))
        os.kill(first, signal.SIGKILL)  # the watcher dies: the tray notices and starts another
        tray.wait_output(r"transcript watcher ended \(exit -9\); restarting in \d+ s")
        second = int(tray.wait_output(r"transcript watcher started[\s\S]*transcript watcher started \(pid (\d+)\)").group(1))
        assert second != first
        assert _watchers(tray) == [second]

        vault.ok("config", "set", "transcript_watcher", "off")
        tray.wait_output(r"transcript watcher stopped \(transcript_watcher is off\)")
        _wait(lambda: not _alive(second), "the stopped watcher to be gone")
        assert _watchers(tray) == []
    finally:
        tray.stop()


def test_watcher_wanted_follows_connects_and_setting(vault: Cli, tmp_path: Path) -> None:
    """AG-11: "auto" watches only for an agent connected with transcripts (not `--transcripts
    none`, not after its disconnect); the setting's "off" wins over a connect, "on" needs none."""
    user_home = tmp_path / "user"
    project = user_home / "proj"
    project.mkdir(parents=True)
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    vault.sudo()
    none = vault.ok("agent", "connect", "claude-code", "--project", str(project), "--transcripts", "none")
    assert why_not_watching(vault.home) == "no agent is connected with transcripts"
    vault.ok("agent", "disconnect", none["name"])
    connected = vault.ok("agent", "connect", "codex", "--project", str(project))
    assert why_not_watching(vault.home) is None
    vault.ok("config", "set", "transcript_watcher", "off")
    assert why_not_watching(vault.home) == "transcript_watcher is off"
    vault.ok("config", "set", "transcript_watcher", "auto")
    vault.ok("agent", "disconnect", connected["name"])
    assert why_not_watching(vault.home) == "no agent is connected with transcripts"
    vault.ok("config", "set", "transcript_watcher", "on")
    assert why_not_watching(vault.home) is None


def test_watcher_ends_with_a_killed_tray(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """AG-11: a tray killed outright (SIGKILL: no chance to stop its child) leaves no watcher
    running, so the next tray's watcher is the only one."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config")})
    vault.ok("config", "set", "transcript_watcher", "on")
    tray = Tray(vault, xsession, tmp_path, "xorg")
    try:
        watcher = int(tray.wait_output(r"transcript watcher started \(pid (\d+)\)").group(1))
        tray.proc.kill()
        tray.proc.wait(60)
        _wait(lambda: not _alive(watcher), "the orphaned watcher to end")
    finally:
        tray.stop()
