"""Issue 17: scripts/setup (which scripts/run and scripts/test call) installs only when something
changed, says what it does, and puts `memories` on the user's PATH.

The real repository venv is used for the no-reinstall path (it was just set up by scripts/test,
so running setup again must find it up to date and never start pip). The install decision
itself is checked with `--check` against a stand-in venv folder (MEMORIES_VENV) whose stamp the
test writes, so no case here runs pip.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

from tests.desktop.support import XSession

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup"
VENV = ROOT / ".venv"


def _setup(
    *args: str, home: Path, path_dirs: tuple[Path, ...] = (), venv: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORIES_VENV"}
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/local/bin", "/usr/bin", "/bin"])
    if venv is not None:
        env["MEMORIES_VENV"] = str(venv)
    return subprocess.run([str(SETUP), *args], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)


def test_setup_twice_installs_nothing_the_second_time_and_links_memories(tmp_path: Path) -> None:
    """Issue 17: a second `scripts/setup --dev` prints "up to date", leaves pip's log and the stamp
    untouched, and `memories` works by name from a folder on PATH (~/.local/bin)."""
    bin_dir = tmp_path / ".local" / "bin"
    first = _setup("--dev", home=tmp_path, path_dirs=(bin_dir,))
    assert first.returncode == 0, first.stdout + first.stderr
    log, stamp = VENV / "setup.log", VENV / ".memories-setup"
    before = (log.stat().st_mtime_ns, stamp.read_text())
    second = _setup("--dev", home=tmp_path, path_dirs=(bin_dir,))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "up to date" in second.stdout and "installing" not in second.stdout, second.stdout
    assert (log.stat().st_mtime_ns, stamp.read_text()) == before, "the second run ran pip"
    link = bin_dir / "memories"
    assert link.is_symlink() and Path(os.readlink(link)) == VENV / "bin" / "memories"
    version = subprocess.run(["memories", "--version"], capture_output=True, text=True, env={"PATH": str(bin_dir)}, timeout=60)
    assert version.stdout.strip() == "memories 0.1.0", version.stderr


def _stand_in_venv(tmp_path: Path, extras: str | None, digest: str | None = None) -> Path:
    """A venv folder as setup sees it: bin/python, bin/memories and (optionally) a stamp."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("python", "memories"):
        target = venv / "bin" / name
        target.unlink(missing_ok=True)
        target.symlink_to(VENV / "bin" / name)
    stamp = venv / ".memories-setup"
    stamp.unlink(missing_ok=True)
    if extras is not None:
        digest = digest or hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
        stamp.write_text(f"pyproject={digest}\nextras={extras}\n")
    return venv


def test_check_says_when_an_install_is_due(tmp_path: Path) -> None:
    """Issue 17: the stamp decides: the dev extras after a plain setup are due (scripts/test needs
    them), a plain setup after --dev is not; a changed pyproject.toml, a missing stamp or a
    missing `memories` command make an install due."""
    home = tmp_path / "home"
    home.mkdir()
    venv = _stand_in_venv(tmp_path, extras="gtk")  # gtk: whatever pkg-config says here, it is in
    check = _setup("--dev", "--check", home=home, venv=venv)
    assert check.returncode == 1 and "the dev extras are not installed yet" in check.stdout, check.stdout
    assert _setup("--check", home=home, venv=venv).returncode == 0
    venv = _stand_in_venv(tmp_path, extras="dev,gtk")
    check = _setup("--dev", "--check", home=home, venv=venv)
    assert check.returncode == 0 and "up to date" in check.stdout, check.stdout
    assert _setup("--check", home=home, venv=venv).returncode == 0, "plain after --dev: nothing to install"
    venv = _stand_in_venv(tmp_path, extras="dev,gtk", digest="0" * 64)
    check = _setup("--dev", "--check", home=home, venv=venv)
    assert check.returncode == 1 and "pyproject.toml changed" in check.stdout, check.stdout
    venv = _stand_in_venv(tmp_path, extras=None)
    check = _setup("--check", home=home, venv=venv)
    assert check.returncode == 1 and "first setup" in check.stdout, check.stdout
    venv = _stand_in_venv(tmp_path, extras="dev,gtk")
    (venv / "bin" / "memories").unlink()
    check = _setup("--check", home=home, venv=venv)
    assert check.returncode == 1 and "no memories command" in check.stdout, check.stdout
    assert not (home / ".local").exists(), "--check changes nothing"


def test_path_link_only_where_it_helps(tmp_path: Path) -> None:
    """Issue 17: with ~/.local/bin not on PATH setup links nothing and prints the full path to use;
    a ~/.local/bin/memories that is not a link is never replaced; a link into another checkout is
    moved to this one."""
    venv = _stand_in_venv(tmp_path, extras="dev,gtk")
    bin_dir = tmp_path / ".local" / "bin"
    off_path = _setup(home=tmp_path, venv=venv)
    assert off_path.returncode == 0 and not (bin_dir / "memories").exists()
    assert f"until then run {venv / 'bin' / 'memories'}" in off_path.stdout, off_path.stdout
    bin_dir.mkdir(parents=True)
    (bin_dir / "memories").write_text("#!/bin/sh\necho someone else's\n")
    kept = _setup(home=tmp_path, venv=venv, path_dirs=(bin_dir,))
    assert "left alone" in kept.stdout and "someone else's" in (bin_dir / "memories").read_text()
    (bin_dir / "memories").unlink()
    (bin_dir / "memories").symlink_to(tmp_path / "elsewhere" / "memories")
    moved = _setup(home=tmp_path, venv=venv, path_dirs=(bin_dir,))
    assert moved.returncode == 0 and os.readlink(bin_dir / "memories") == str(venv / "bin" / "memories"), moved.stdout


def test_run_cli_sets_up_creates_the_vault_and_prints_a_command_that_works(tmp_path: Path) -> None:
    """Issue 17: `scripts/run --cli` narrates (setup up to date, engine started, vault created)
    and its "try" line names `memories`, which resolves to this install on that PATH."""
    from tests.helpers import PASSWORD, TEST_ENV, Cli

    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    home = tmp_path / "data"
    env = {**os.environ, **TEST_ENV, "HOME": str(tmp_path), "MEMORIES_HOME": str(home)}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"])
    env.pop("MEMORIES_VENV", None)
    try:
        run = subprocess.run(
            [str(ROOT / "scripts" / "run"), "--cli"], input=PASSWORD + "\n", capture_output=True, text=True, env=env, timeout=600
        )
        assert run.returncode == 0, run.stdout + run.stderr
        lines = run.stdout.splitlines()
        assert any("starting the engine" in line for line in lines) and any("no vault yet" in line for line in lines), run.stdout
        try_line = next(line for line in lines if "ready: try" in line)
        command = try_line.split("try", 1)[1].split()[0]
        assert command == "memories", try_line
        put = subprocess.run(
            [command, "put", "--title", "Hello", "--body", "first memory", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert put.returncode == 0, put.stderr
    finally:
        Cli(home=home).stop()


def test_run_with_a_display_says_where_the_icon_is_prints_the_link_and_quits_on_closing(
    tmp_path: Path, xsession: XSession
) -> None:
    """Issue 31: `scripts/run` in a graphical session ends by saying where the icon is, that
    closing the terminal quits and locks, and the dashboard's link (printed without --verbose,
    since the tray's output is a terminal); closing that terminal quits the tray and locks."""
    from tests.helpers import TEST_ENV, Cli

    home = tmp_path / "data"
    env = {**os.environ, **TEST_ENV, "HOME": str(tmp_path), "MEMORIES_HOME": str(home)}
    env.update({"DISPLAY": xsession.display, "PYSTRAY_BACKEND": "xorg"})
    env["PATH"] = os.pathsep.join(["/usr/local/bin", "/usr/bin", "/bin"])
    env.pop("MEMORIES_VENV", None)
    cli = Cli(home=home)
    cli.init()  # unlocked: scripts/run asks nothing and goes straight to the tray
    main_fd, sub_fd = os.openpty()

    def own_terminal() -> None:  # the pty becomes the child's controlling terminal (SIGHUP on close)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    run = subprocess.Popen(
        [str(ROOT / "scripts" / "run")],
        stdin=sub_fd,
        stdout=sub_fd,
        stderr=sub_fd,
        env=env,
        start_new_session=True,
        preexec_fn=own_terminal,
    )
    os.close(sub_fd)
    output = ""
    try:
        end = time.monotonic() + 600
        while "memories tray: dashboard http://127.0.0.1:" not in output:
            assert time.monotonic() < end and run.poll() is None, output
            ready, _, _ = select.select([main_fd], [], [], 0.5)
            if ready:
                output += os.read(main_fd, 4096).decode(errors="replace")
        assert "the icon is in your panel's tray" in output, output
        assert "closing this terminal (or Quit in the icon's menu) quits the tray and locks the vault" in output
        _wait_for_the_icon(xsession)
        os.close(main_fd)  # the terminal closes: the kernel hangs up on its session
        main_fd = -1
        assert run.wait(120) == 0
        assert cli.ok("status") == {"state": "locked"}
    finally:
        if main_fd >= 0:
            os.close(main_fd)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
        cli.stop()


def _wait_for_the_icon(xsession: XSession) -> None:
    """Wait until the tray panel (trayer's top 48 px) shows the unlocked icon's disc colour."""
    from desktop.status import TrayState
    from desktop.tray.icons import PALETTE

    colour = PALETTE[TrayState.UNLOCKED]
    end = time.monotonic() + 120
    while time.monotonic() < end:
        image = xsession.grab()
        if sum(1 for y in range(48) for x in range(image.size[0]) if image.getpixel((x, y)) == colour) >= 30:
            return
        time.sleep(0.1)
    raise AssertionError("the tray icon never showed unlocked")
