"""A full disk does not jam the vault (FI-2, issue 27), on a real small tmpfs holding the data home.

A `file add` that did not fit used to fill the disk; its chunks stayed, deleting them needed
space too, and every later put and get failed `disk_full`, also after a restart.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import Paths
from engine.errors import CODES, MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import PASSWORD, Cli, require
from tests.integration.test_files import content_rows, pack_files, pseudo_random

MIB = 1 << 20
CHUNK = 256 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A real 96 MiB tmpfs (mounting needs root, as in CI)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a small tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0700", "tmpfs", str(mount_point)], capture_output=True)
    require(proc.returncode == 0, f"mount -t tmpfs failed: {proc.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> None:
    """Write until ENOSPC (again: tops up what was freed since)."""
    for name, block in (("filler-big", MIB), ("filler-small", 512)):
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)


def _empty(directory: Path) -> None:
    for name in ("filler-big", "filler-small"):
        (directory / name).unlink()


def _free(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def _reads_work(cli: Cli, note: dict[str, str], stored: dict[str, str], out: Path) -> None:
    assert cli.ok("get", note["id"])["body"] == "kept body"
    got = cli.ok("file", "get", stored["id"], "-o", str(out), "--force")
    assert got["sha256"] == stored["sha256"]
    assert note["id"] in {hit["id"] for hit in cli.ok("search", "kept")["results"]}


@pytest.fixture
def vault_on_disk(disk: Path, tmp_path: Path) -> Iterator[tuple[Cli, dict[str, str], dict[str, str]]]:
    cli = Cli(home=disk / "home")
    try:
        cli.init()
        note = cli.put("kept", "kept body")
        small = tmp_path / "small.bin"
        pseudo_random(small, 3 * MIB, b"small")
        stored = cli.ok("file", "add", str(small))
        yield cli, note, stored
    finally:
        cli.stop()
        log = disk / "home" / "logs" / "engine.log"
        if log.exists():  # shown with a failure: the tmpfs goes with the test
            print(log.read_text("utf-8", errors="replace")[-4000:])


def test_fi2_a_file_that_does_not_fit_is_refused_before_anything_is_written(
    disk: Path, vault_on_disk: tuple[Cli, dict[str, str], dict[str, str]], tmp_path: Path
) -> None:
    """FI-2: `file add` checks the free space first and says how much it needs and how much is free;
    nothing is written, and puts and gets go on working, also after a restart."""
    cli, note, stored = vault_on_disk
    big = tmp_path / "big.bin"
    with open(big, "wb") as out:
        out.truncate(200 * MIB)  # sparse: it takes no space where the test keeps it
    rows, free = content_rows(cli), _free(disk)
    error = cli.err("file", "add", str(big))
    assert error["code"] == "disk_full", error
    assert "Adding this file needs about" in error["message"] and "MiB is free; nothing was changed" in error["message"]
    assert content_rows(cli) == rows and cli.ok("file", "list")["total"] == 1
    assert _free(disk) >= free - MIB  # nothing of the file was stored
    cli.put("after", "a put still works")
    _reads_work(cli, note, stored, tmp_path / "out.bin")
    cli.stop()
    cli.unlock()
    cli.put("after restart", "and after a restart")
    _reads_work(cli, note, stored, tmp_path / "out.bin")

    cli.stop()
    _fill(disk)
    cli.unlock()  # the engine starts on a full disk: the store's reserve is released for it
    _reads_work(cli, note, stored, tmp_path / "out.bin")
    assert not (disk / "home" / "store.db-reserve").exists()


def test_fi2_an_upload_cut_short_by_a_full_disk_is_cleaned_up_on_the_full_disk(
    disk: Path, vault_on_disk: tuple[Cli, dict[str, str], dict[str, str]], tmp_path: Path
) -> None:
    """FI-2: something else fills the disk while an upload runs: the upload ends `disk_full`, its
    chunks are removed although the disk is still full, reads keep working on the full disk and
    after a restart on it, and once space is freed the same upload and a put work."""
    cli, note, stored = vault_on_disk
    rows, packs = content_rows(cli), pack_files(cli)
    assert len(packs) == 1  # the stored 3 MiB file's (issue 32)
    block = os.urandom(32 * CHUNK)  # one 8 MiB batch
    with IpcClient(Paths(cli.home).socket) as client:
        upload = client.request({"op": "file_begin", "title": "cut short", "size": 24 * MIB})["upload"]
        client.request({"op": "file_chunk", "upload": upload, "index": 0, "sizes": [CHUNK] * 32, "payload": block})
        _fill(disk)
        with pytest.raises(MemoriesError) as stopped:
            for index in (32, 64):
                client.request({"op": "file_chunk", "upload": upload, "index": index, "sizes": [CHUNK] * 32, "payload": block})
            client.request({"op": "file_commit", "upload": upload, "sha256": "0" * 64})
    assert stopped.value.code == "disk_full", stopped.value
    assert content_rows(cli) == rows  # removed on the full disk, not at some later unlock
    assert pack_files(cli) == packs  # the cut-short upload's pack file too
    assert cli.ok("file", "list")["total"] == 1

    _reads_work(cli, note, stored, tmp_path / "out.bin")
    # A write may fit where a checkpoint rewound the log, or answer disk_full: nothing else.
    written = cli.run("put", "--title", "maybe", "--body", "a write on the full disk", "--json")
    if written.returncode:
        assert json.loads(written.stdout)["error"] == {"code": "disk_full", "message": CODES["disk_full"]}

    cli.stop()
    cli.unlock()  # the filler is still there
    _reads_work(cli, note, stored, tmp_path / "out.bin")

    _empty(disk)
    source = tmp_path / "again.bin"
    digest = pseudo_random(source, 24 * MIB, b"again")
    assert cli.ok("file", "add", str(source))["sha256"] == digest
    cli.put("room again", "a put works")
    assert {item["title"] for item in cli.ok("list")["items"]} - {"maybe"} == {"kept", "room again"}
    assert (disk / "home" / "store.db-reserve").exists()  # made again once there was room


def test_fi2_the_password_budget_is_saved_on_a_full_disk(disk: Path) -> None:
    """FI-2, API-3: a wrong password on a full disk still spends a slot that survives a restart
    (the budget file is rewritten in place: it needs no new space)."""
    cli = Cli(home=disk / "home")
    try:
        cli.init()
        cli.ok("lock")
        budget = disk / "home" / "password-attempts.json"
        assert cli.err("unlock", "--password-stdin", input="wrong one\n")["code"] == "wrong_password"
        assert len(json.loads(budget.read_text("ascii"))["slots"]) == 1
        _fill(disk)
        for attempt in range(2, 5):
            assert cli.err("unlock", "--password-stdin", input="wrong again\n")["code"] == "wrong_password"
            assert len(json.loads(budget.read_text("ascii"))["slots"]) == attempt
        _empty(disk)
        cli.stop()
        assert cli.err("unlock", "--password-stdin", input="wrong\n")["code"] == "wrong_password"
        assert cli.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "rate_limited"
    finally:
        cli.stop()
