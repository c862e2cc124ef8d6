"""SPEC ST-11: no code from the caller's directory runs in a Memories process.

Every command here starts in a folder holding a ``hmac.py``, a ``json.py`` and ``engine/`` and
``desktop/`` packages that leave a marker file when imported (tests/hostile_cwd.py), the way a
cloned repository or a downloads folder could. The commands must work and no marker appear.
"""

from __future__ import annotations

import asyncio
import json
import os
import site
import subprocess
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

from engine.launch import child_env, python_command, working_directory
from tests.cards.conftest import READ_THEN_CLEAR, clipboard, wait_for, xdisplay
from tests.helpers import PASSWORD, Cli
from tests.hostile_cwd import assert_isolated_engine, hostile_dir, markers, memories_exe, ok_from
from tests.mcp.support import grant, result_of

__all__ = ["xdisplay"]  # the fixture, imported for the clipboard test


def test_st11_init_unlock_and_mcp_from_a_hostile_directory(cli: Cli, tmp_path: Path) -> None:
    """ST-11: `init`, `unlock` (each starting the engine) and `mcp` over stdio, all run from the
    hostile folder, work; the engine runs with -P in the data home; nothing hostile is imported."""
    work = hostile_dir(tmp_path)
    assert ok_from(work, cli, "init", "--password-stdin", input=PASSWORD + "\n")["initialized"] is True
    assert_isolated_engine(cli)
    assert markers(work) == []

    cli.stop()
    assert ok_from(work, cli, "unlock", "--password-stdin", input=PASSWORD + "\n")["unlocked"] is True
    assert_isolated_engine(cli)
    put = ok_from(work, cli, "put", "--title", "Isolated", "--body", "no code from the caller's folder")
    assert ok_from(work, cli, "get", put["id"])["body"] == "no code from the caller's folder"
    assert markers(work) == []

    cli.sudo()
    env = cli.environ()
    env["MEMORIES_MCP_TOKEN"] = grant(cli, "isolated", "read_write")
    params = StdioServerParameters(command=str(memories_exe()), args=["--home", str(cli.home), "mcp"], env=env, cwd=str(work))

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            written = result_of(await client.call_tool("memory_write", {"title": "From an agent", "body": "isolated"}))
            found = result_of(await client.call_tool("search", {"query": "isolated"}))
            assert written["id"] in {hit["id"] for hit in found["results"]}

    asyncio.run(scenario())
    assert markers(work) == []


def test_st11_clipboard_clearer_runs_isolated(vault: Cli, xdisplay: str, tmp_path: Path) -> None:
    """ST-11: `memories copy` from the hostile folder: the clearing child (a Python process)
    empties the clipboard after the timeout without importing anything from the folder."""
    work = hostile_dir(tmp_path)
    vault.sudo()
    made = ok_from(work, vault, "protected", "new", "--title", "Token", "--token-stdin", input="tok-isolated-4242\n")
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    assert ok_from(work, vault, "copy", made["id"], "--clear-after", READ_THEN_CLEAR) == {"v": 1, "copied": True}
    assert clipboard(xdisplay) == "tok-isolated-4242"
    assert wait_for(lambda: clipboard(xdisplay) == ""), "the clearing child did not run"
    assert markers(work) == []


def test_st11_an_empty_or_relative_pythonpath_entry_does_not_bring_the_folder_back(tmp_path: Path) -> None:
    """ST-11: PYTHONPATH=":engine-rel" would put the current folder on the path even under -P;
    the child's environment drops such entries (and keeps absolute ones)."""
    work = hostile_dir(tmp_path)
    keep = tmp_path / "kept"
    env = child_env({**os.environ, "PYTHONPATH": os.pathsep.join(["", "rel", str(keep), ""])})
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(keep)
    assert all(os.path.isabs(entry) for entry in env["PYTHONPATH"].split(os.pathsep))
    # The real launch, deliberately in the hostile folder: still nothing imported.
    done = subprocess.run(
        python_command("engine.cli", "--version"), cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("memories "), done.stderr
    assert markers(work) == []


def test_st11_a_package_folder_not_on_the_default_path_is_passed_by_absolute_path(tmp_path: Path) -> None:
    """ST-11: a source checkout run without an install is found through its absolute path,
    first, never through the working directory; a folder already on the path is not repeated."""
    elsewhere = str(tmp_path / "checkout")
    env = child_env({}, roots=(elsewhere,))
    assert env["PYTHONPATH"] == elsewhere
    ours = str(Path(__file__).resolve().parents[2])
    assert ours not in child_env({}, roots=(ours,)).get("PYTHONPATH", "").split(os.pathsep)  # the venv's .pth has it
    assert working_directory(tmp_path) == str(tmp_path)
    assert working_directory(tmp_path / "missing") == os.path.abspath(os.sep)
    if not getattr(sys, "frozen", False):
        assert python_command("engine.cli", "x")[1:] == ["-P", "-m", "engine.cli", "x"]


def test_st11_agent_connect_fallback_command_runs_isolated(tmp_path: Path) -> None:
    """ST-11: without a `memories` executable beside the interpreter or on PATH, the command an
    agent client is given is the interpreter with -P; the client starts it in the project's
    folder (here the hostile one) and nothing from there is imported."""
    work = hostile_dir(tmp_path)
    bare = tmp_path / "bare" / "bin" / "python3"  # an interpreter with no console scripts beside it
    bare.parent.mkdir(parents=True)
    bare.symlink_to(sys.executable)

    root = str(Path(__file__).resolve().parents[2])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([*site.getsitepackages(), root]), "HOME": str(tmp_path)}
    probe = "import json, sys; from pathlib import Path; from engine.agents.connect import agent_command; "
    probe += "print(json.dumps(agent_command(Path(sys.argv[1]), 'claude-code')))"
    shown = subprocess.run(
        [str(bare), "-c", probe, str(tmp_path / "home")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    command = json.loads(shown.stdout)
    assert command[:4] == [str(bare), "-P", "-m", "engine.cli"]
    assert command[-3:] == ["mcp", "--agent", "claude-code"]
    done = subprocess.run([*command[:4], "--version"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("memories "), done.stderr
    assert markers(work) == []
