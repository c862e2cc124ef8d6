"""Crypto jobs run on the background runtime, off the service lock (issue 16), through the real CLI,
daemon and GnuPG.

A step is held still with SIGSTOP on the engine's real gpg child (found under the daemon in
/proc), so "while a step runs" is a state the test sets up, not a race it hopes to win. What is
asserted is order and state — answers arrive while the run says running; after a lock answers,
the child is gone, the workspace is empty and nothing is published — never times.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import PASSWORD, Cli, pid_alive, require

require(shutil.which("gpg") is not None, "gpg is needed for crypto jobs")

# Big enough that gpg's encrypt step runs long enough to be caught and stopped (random bytes do
# not compress); a run that ends before it is caught is simply tried again with a new output.
INPUT_BYTES = 48 << 20
ATTEMPTS = 5


def gpg(home: Path, *words: str) -> bytes:
    env = {"PATH": "/usr/bin:/bin", "GNUPGHOME": str(home), "LC_ALL": "C"}
    done = subprocess.run(
        ["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", "", *words],
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


@dataclass
class Keys:
    gnupg: Path
    alice: Path  # an armored public key: encryption to it needs no secret


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    root = Path(os.path.realpath(tmp_path_factory.mktemp("jobkeys")))
    home = root / "g"
    home.mkdir(mode=0o700)
    gpg(home, "--quick-gen-key", "Alice <alice@example.org>", "default", "default", "0")
    (root / "alice.asc").write_bytes(gpg(home, "--armor", "--export", "alice@example.org"))
    yield Keys(home, root / "alice.asc")
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False)


@dataclass
class Lab:
    cli: Cli
    root: Path
    source: Path

    @property
    def workspaces(self) -> list[str]:
        jobs = self.cli.home / "jobs"
        return sorted(os.listdir(jobs)) if jobs.exists() else []

    def leftovers(self) -> list[str]:
        """Staged outputs that were never linked into place."""
        return [name for name in os.listdir(self.root) if name.startswith(".memories-job-")]

    def plan(self, output: Path) -> str:
        shown = self.cli.ok("job", "plan", "openpgp-encrypt", str(self.source), "--output", str(output), "--recipient", "alice")
        return str(shown["digest"])

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """One request over the socket from this test process: its elevation namespace is the
        test runner's parent, the same for every such request (a CLI's is the test runner)."""
        with IpcClient(Paths(self.cli.home).socket) as client:
            return client.request(body)

    def status(self, run: str) -> dict[str, Any]:
        return self.request({"op": "job_status", "run": run})


@pytest.fixture
def lab(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Iterator[Lab]:
    # A short path: gpg-agent's socket lives in the workspace's GNUPGHOME (sun_path is 108 bytes).
    root = Path(os.path.realpath(tmp_path_factory.mktemp("j")))
    cli = Cli(home=root / "home")
    cli.init()
    cli.ok("credential", "new", "openpgp", "--name", "alice", "--key-file", str(keys.alice))
    source = root / "big.bin"
    source.write_bytes(os.urandom(INPUT_BYTES))
    lab = Lab(cli, root, source)
    yield lab
    cli.stop()


def engine_children(daemon: int) -> list[int]:
    children: list[int] = []
    for task in os.listdir(f"/proc/{daemon}/task"):
        try:
            with open(f"/proc/{daemon}/task/{task}/children", encoding="ascii") as handle:
                children += [int(pid) for pid in handle.read().split()]
        except OSError:
            continue  # the thread ended meanwhile
    return children


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [word.decode(errors="replace") for word in handle.read().split(b"\0") if word]
    except OSError:
        return []


def processes_in(path: Path) -> list[int]:
    """Processes whose command line names ``path`` (a step, or a gpg-agent it started, in a workspace)."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and any(str(path) in w for w in cmdline(int(pid)))]


def stop_encrypt_step(daemon: int, ended: Any) -> int | None:
    """SIGSTOP the engine's `gpg … --encrypt` child as soon as it exists; None if the run ended first."""
    while not ended():
        for pid in engine_children(daemon):
            words = cmdline(pid)
            if words and os.path.basename(words[0]) == "gpg" and "--encrypt" in words:
                os.kill(pid, signal.SIGSTOP)
                return pid
    return None


def held_run(lab: Lab) -> tuple[str, int, Path]:
    """Start a run over the socket and hold its encrypt step stopped: (run ID, gpg's PID, output)."""
    daemon = lab.cli.daemon_pid()
    assert daemon is not None
    lab.request({"op": "sudo", "password": PASSWORD})
    for attempt in range(ATTEMPTS):
        output = lab.root / f"big-{attempt}.gpg"
        started = lab.request({"op": "job_run", "digest": lab.plan(output)})
        run = str(started["run"])
        assert started["steps"] == 2  # import alice's key, then encrypt
        child = stop_encrypt_step(daemon, lambda run=run: lab.status(run)["state"] != "running")
        if child is not None:
            return run, child, output
    raise AssertionError(f"the encrypt step ended before it could be held, {ATTEMPTS} times")


def wait_ended(lab: Lab, run: str) -> dict[str, Any]:
    seen = lab.status(run)
    while seen["state"] == "running":
        seen = lab.request({"op": "job_status", "run": run, "wait_ms": 2000, "seen_step": seen["steps_done"]})
    return seen


def test_other_requests_are_answered_while_a_step_runs(lab: Lab, keys: Keys) -> None:
    """Issue 16, JB-3: the steps run without the service lock; get, search and a write answer while
    one is held still; the run then publishes its output and reports how it went."""
    note = lab.cli.put("Harbor lantern", "the lantern by the harbor")
    run, child, output = held_run(lab)
    try:
        during = lab.status(run)
        assert during["state"] == "running" and during["steps_done"] == 1 and during["steps"] == 2
        assert lab.cli.ok("get", note["short_id"])["title"] == "Harbor lantern"
        assert lab.cli.ok("search", "lantern", "--wait", "30")["results"]
        lab.cli.put("Written meanwhile")
        jobs = [job for job in lab.cli.ok("status")["jobs"] if job["name"] == "job-run"]
        assert jobs[-1]["state"] == "running" and jobs[-1]["done"] == 1 and jobs[-1]["total"] == 2
        assert lab.status(run)["state"] == "running"  # all of that was answered while the step was held
        assert not output.exists()
    finally:
        os.kill(child, signal.SIGCONT)
    ended = wait_ended(lab, run)
    assert ended["state"] == "done" and ended["steps_done"] == 2 and ended["error"] is None
    assert ended["outputs"] == [str(output)]
    assert gpg(keys.gnupg, "--decrypt", str(output)) == lab.source.read_bytes()
    assert lab.workspaces == [] and lab.leftovers() == []
    lab.cli.sudo()
    entries = lab.cli.ok("audit", "--limit", "20")["entries"]
    assert any(entry["op"] == "job.run" and entry["outcome"] == "ok" for entry in entries)


def held_cli_run(lab: Lab, name: str) -> tuple[subprocess.Popen[str], int, Path]:
    """`memories job run … --json` waiting in a child process, its encrypt step held stopped."""
    daemon = lab.cli.daemon_pid()
    assert daemon is not None
    lab.cli.sudo()  # the waiting CLI's elevation (its parent is this test process)
    for attempt in range(ATTEMPTS):
        output = lab.root / f"{name}-{attempt}.gpg"
        waiting = subprocess.Popen(
            lab.cli.command("job", "run", lab.plan(output), "--json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=lab.cli.environ(),
            # Ctrl-C as a terminal delivers it: a runner started in the background (`cmd &` in a
            # script, nohup) passes SIGINT on ignored, and the CLI rightly keeps an inherited ignore.
            preexec_fn=_default_sigint,
        )
        child = stop_encrypt_step(daemon, lambda waiting=waiting: waiting.poll() is not None)
        if child is not None:
            return waiting, child, output
        waiting.communicate(timeout=60)
    raise AssertionError("the encrypt step ended before it could be held")


def test_a_lock_cancels_the_run_kills_its_child_and_removes_its_workspace(lab: Lab) -> None:
    """Issue 16, JB-3: a lock kills the step's process group, removes the workspace (with the
    credential files) before it answers, publishes nothing; the waiting CLI says job_cancelled."""
    waiting, child, output = held_cli_run(lab, "locked")
    workspace = lab.workspaces
    assert len(workspace) == 1
    assert os.listdir(lab.cli.home / "jobs" / workspace[0] / "cred")  # the key file is there while it runs
    lab.cli.ok("lock")
    # The lock answered: the child is dead (and the cleanup step stopped gpg-agent), the
    # workspace gone, nothing published.
    assert not pid_alive(child)
    assert [pid for pid in processes_in(lab.cli.home / "jobs") if pid_alive(pid)] == []
    assert lab.workspaces == []
    assert not output.exists() and lab.leftovers() == []
    out, _ = waiting.communicate(timeout=60)
    assert waiting.returncode != 0
    assert json.loads(out)["error"]["code"] == "job_cancelled"


def test_ctrl_c_of_the_waiting_cli_cancels_the_run(lab: Lab) -> None:
    """Issue 16: interrupting `job run` stops the run as a lock would — child killed, workspace
    removed, nothing published — before the CLI exits (130); the vault stays unlocked."""
    waiting, child, output = held_cli_run(lab, "interrupted")
    waiting.send_signal(signal.SIGINT)
    try:
        said = waiting.communicate(timeout=180)  # a bound, not a timing assertion: the cancel waits for the step to be killed
    except subprocess.TimeoutExpired:
        # Seen once on a loaded CI machine and not understood yet: say where the CLI was.
        raise AssertionError(f"`job run` did not end after Ctrl-C: {_where(waiting.pid)}") from None
    assert waiting.returncode == 130, said
    assert not pid_alive(child)
    assert lab.workspaces == []
    assert not output.exists() and lab.leftovers() == []
    status = lab.cli.ok("status")
    assert status["state"] == "unlocked"
    assert [job["state"] for job in status["jobs"] if job["name"] == "job-run"][-1] == "cancelled"


def test_a_killed_step_fails_the_run_and_leaves_nothing(lab: Lab) -> None:
    """JB-3: the failure path off the lock: a step that dies makes the run fail with its step's
    error; nothing is published, the workspace is gone, and `job status` says so."""
    run, child, output = held_run(lab)
    os.kill(child, signal.SIGKILL)
    ended = wait_ended(lab, run)
    assert ended["state"] == "failed"
    assert ended["error"]["code"] == "job_step_failed" and "Step 2" in ended["error"]["message"]
    assert ended["outputs"] == [] and not output.exists() and lab.leftovers() == []
    assert lab.workspaces == []
    shown = lab.cli.ok("job", "status", run)
    assert shown["state"] == "failed" and shown["error"]["code"] == "job_step_failed"


def test_engine_shutdown_cancels_the_run_and_removes_its_workspace(lab: Lab) -> None:
    """Issue 16: stopping the engine mid-run kills the step and removes the workspace before the
    engine exits; a leftover workspace (a crashed engine) is removed when the engine starts."""
    daemon = lab.cli.daemon_pid()
    assert daemon is not None
    run, child, output = held_run(lab)
    lab.cli.ok("daemon", "stop")
    patience = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while pid_alive(daemon) and time.monotonic() < patience:
        time.sleep(0.05)
    assert not pid_alive(daemon)  # it exited by itself (Cli.stop() would have killed it)
    assert not pid_alive(child)
    assert [pid for pid in processes_in(lab.cli.home / "jobs") if pid_alive(pid)] == []
    assert lab.workspaces == []
    assert not output.exists() and lab.leftovers() == []
    # A crashed engine's workspace (with a credential file in it) is gone once an engine starts.
    stale = lab.cli.home / "jobs" / "w-crashed" / "cred"
    stale.mkdir(parents=True, mode=0o700)
    (stale / "key.secret.asc").write_text("secret")
    lab.cli.unlock()
    assert lab.workspaces == []
    with pytest.raises(MemoriesError) as caught:
        lab.status(run)  # a new engine knows no runs of the old one
    assert caught.value.code == "not_found"


def read_until(master: int, pattern: re.Pattern[str], seen: list[str]) -> re.Match[str]:
    """Read the CLI's terminal until ``pattern`` shows up (bounded; the CLI ending first fails)."""
    patience = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while time.monotonic() < patience:
        found = pattern.search("".join(seen))
        if found is not None:
            return found
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the CLI closed the terminal
                break
            if not chunk:
                break
            seen.append(chunk.decode(errors="replace"))
    raise AssertionError(f"{pattern.pattern!r} never appeared on the terminal: {''.join(seen)!r}")


def test_job_run_shows_its_id_and_step_on_a_terminal(lab: Lab) -> None:
    """Issue 16: on a terminal `job run` prints the run's ID and "step k of n" while it waits, then
    the same result as ever; `job status` with that ID (no sudo, even locked) says how it ended."""
    daemon = lab.cli.daemon_pid()
    assert daemon is not None
    lab.cli.sudo()
    for attempt in range(ATTEMPTS):
        output = lab.root / f"tty-{attempt}.gpg"
        master, slave = pty.openpty()
        waiting = subprocess.Popen(
            lab.cli.command("job", "run", lab.plan(output)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
            env=lab.cli.environ(),
        )
        os.close(slave)
        child = stop_encrypt_step(daemon, lambda waiting=waiting: waiting.poll() is not None)
        if child is not None:
            break
        waiting.communicate(timeout=60)
        os.close(master)
    else:
        raise AssertionError("the encrypt step ended before it could be held")
    seen: list[str] = []
    try:
        run = read_until(master, re.compile(r"job run ([0-9a-f]{32})\r?\n"), seen).group(1)
        read_until(master, re.compile(r"running openpgp-encrypt: step 2 of 2"), seen)
        assert lab.status(run)["state"] == "running"
    finally:
        os.kill(child, signal.SIGCONT)
    out, _ = waiting.communicate(timeout=120)
    os.close(master)
    assert waiting.returncode == 0
    assert out.strip() == f"wrote {output}"
    assert output.exists()
    lab.cli.ok("lock")  # drops every elevation; a run's status still answers
    shown = lab.cli.run("job", "status", run)
    assert shown.returncode == 0 and "done" in shown.stdout and f"wrote {output}" in shown.stdout
    assert lab.cli.err("job", "status", run[:12])["code"] == "invalid_request"  # a sentence, not a schema
    assert lab.cli.err("job", "status", "0" * 32)["code"] == "not_found"


def _where(pid: int) -> str:
    """What the kernel says a stuck process is doing (state, the wait channel, its threads)."""
    proc = Path(f"/proc/{pid}")
    facts = []
    for name in ("status", "wchan", "stack"):
        try:
            text = (proc / name).read_text(errors="replace")
        except OSError as exc:
            text = f"({type(exc).__name__})"
        if name == "status":
            text = " ".join(line for line in text.splitlines() if line.startswith(("State", "SigIgn", "SigCgt", "Threads")))
        facts.append(f"{name}: {text.strip()}")
    return "; ".join(facts)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
