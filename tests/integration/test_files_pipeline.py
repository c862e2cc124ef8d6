"""The file upload pipeline and download read-ahead against a real engine (FI-1, ST-5, ST-10).

An upload seals and stores chunks on two engine threads while the next batch arrives, and a
download decrypts the next batch ahead. These tests make the stages fail or stop for real:
the disk refuses a write (a lowered file size limit on the engine process), or the vault
locks while batches are in flight.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import Cli, raw, raw_error, require
from tests.integration.test_files import content_rows, pack_files, pseudo_random

MIB = 1 << 20
CHUNK = 256 * 1024


def _store_files(cli: Cli) -> list[Path]:
    return [cli.home / "store.db", cli.home / "store.db-wal"]


def test_a_disk_failure_in_the_writer_is_typed_and_leaves_no_rows(vault: Cli, tmp_path: Path) -> None:
    """FI-1, ST-5: the disk refuses a write while the writer thread stores a later batch: the
    CLI gets a typed store error, no file and no content row is left, and the next upload works."""
    require(hasattr(resource, "prlimit"), "resource.prlimit (Linux) lowers the engine's file size limit")
    source = tmp_path / "big.bin"
    pseudo_random(source, 48 * MIB, b"disk")
    pid = vault.daemon_pid()
    assert pid is not None
    rows, files, packs = content_rows(vault), vault.ok("file", "list")["total"], len(pack_files(vault))
    # Room for a few batches beyond today's files, not for the whole file.
    limit = max(p.stat().st_size for p in _store_files(vault) if p.exists()) + 20 * MIB
    old = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        error = vault.err("file", "add", str(source))
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, old)
    assert error["code"] in ("io_error", "disk_full"), error
    assert vault.ok("file", "list")["total"] == files
    # Deleting needs the disk too: the chunks stored before the failure go once it works
    # again (here when the next transfer starts), not only at the next unlock's sweep.
    added = vault.ok("file", "add", str(source))
    assert content_rows(vault) == rows + 48 * 4
    assert len(pack_files(vault)) == packs + 1  # the failed upload's pack went with its rows
    out = tmp_path / "big.out"
    vault.ok("file", "get", added["id"], "-o", str(out))
    assert out.read_bytes() == source.read_bytes()


def test_a_lock_during_an_upload_discards_every_batch(vault: Cli, tmp_path: Path) -> None:
    """ST-10, FI-1: a lock while batches are being sealed and stored ends the upload with a
    typed error; every chunk it stored is removed and nothing is saved."""
    source = tmp_path / "big.bin"
    pseudo_random(source, 256 * MIB, b"lock")
    rows, files, packs = content_rows(vault), vault.ok("file", "list")["total"], pack_files(vault)
    adding = subprocess.Popen(
        vault.command("file", "add", str(source), "--json"), env=vault.environ(), stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while content_rows(vault) < rows + 32:  # at least one batch is stored: the upload is under way
            assert adding.poll() is None, "the upload ended before it could be interrupted"
            assert time.monotonic() < deadline, "no batch was ever stored"
            time.sleep(0.01)
        vault.ok("lock")
        out, _ = adding.communicate(timeout=120)
    finally:
        if adding.poll() is None:
            adding.kill()
            adding.wait()
    assert adding.returncode != 0
    assert json.loads(out)["error"]["code"] in ("locked", "not_found")
    # Removed by the lock itself (not by the sweep at the next unlock), and no stage still
    # running at the lock stored a row after the removal.
    assert content_rows(vault) == rows
    assert pack_files(vault) == packs  # its pack file too (issue 32)
    vault.unlock()
    assert content_rows(vault) == rows
    assert vault.ok("file", "list")["total"] == files


def test_a_refused_chunk_ends_the_upload_after_the_batches_in_flight(vault: Cli, tmp_path: Path) -> None:
    """FI-1, API-8: a chunk request refused while earlier batches are still being sealed and
    stored ends the upload: when the refusal arrives, every row of it is gone (the stages
    finished before the removal) and the handle is dead."""
    rows, packs = content_rows(vault), len(pack_files(vault))
    batch = 32
    block = bytes(range(256)) * (CHUNK * batch // 256)
    with IpcClient(Paths(vault.home).socket, timeout=120) as client:
        up = client.request({"op": "file_begin", "title": "t", "size": 8 * batch * CHUNK})["upload"]
        for index in range(0, 4 * batch, batch):
            client.request({"op": "file_chunk", "upload": up, "index": index, "sizes": [CHUNK] * batch, "payload": block})
        with pytest.raises(MemoriesError) as refused:
            client.request({"op": "file_chunk", "upload": up, "index": 0, "sizes": [CHUNK], "payload": block[:CHUNK]})
        assert refused.value.code == "invalid_input"
        assert content_rows(vault) == rows
        assert len(pack_files(vault)) == packs  # the pack the first batch made is gone with its rows
        with pytest.raises(MemoriesError) as gone:
            client.request({"op": "file_commit", "upload": up, "sha256": "0" * 64})
        assert gone.value.code == "not_found"
    # No stage stores a row later either: after another whole upload, only its rows were added.
    small = tmp_path / "small.bin"
    small.write_bytes(b"s" * (CHUNK + 1))
    vault.ok("file", "add", str(small))
    assert content_rows(vault) == rows + 2


def test_a_download_read_ahead_stops_cleanly_at_a_lock_and_at_close(vault: Cli, tmp_path: Path) -> None:
    """FI-1, ST-10: a download that reads ahead gives exactly the file; a read that asks for
    another batch than the one read ahead gets the one it asked for; a lock ends an open read
    (typed error after unlocking) and the next download works."""
    source = tmp_path / "f.bin"
    sha = pseudo_random(source, 40 * MIB + 5, b"ahead")
    added = vault.ok("file", "add", str(source))
    out = tmp_path / "f.out"
    got = vault.ok("file", "get", added["id"], "-o", str(out), "--json")
    assert got["sha256"] == sha and out.read_bytes() == source.read_bytes()
    out.unlink()
    opened = raw(vault, {"op": "file_open", "id": added["id"]})
    first = raw(vault, {"op": "file_read", "read": opened["read"], "index": 0, "count": 32, "binary": True})
    assert first["sizes"] == [256 * 1024] * 32
    # Not the batch read ahead: the engine answers the one asked for.
    again = raw(vault, {"op": "file_read", "read": opened["read"], "index": 0, "count": 4, "binary": True})
    assert again["sizes"] == [256 * 1024] * 4
    vault.ok("lock")
    vault.unlock()
    error = raw_error(vault, {"op": "file_read", "read": opened["read"], "index": 4, "count": 4, "binary": True})
    assert error.code == "not_found"
    vault.ok("file", "get", added["id"], "-o", str(out))
    assert out.read_bytes() == source.read_bytes()


def test_writes_during_an_upload_get_their_own_content_rows(vault: Cli, tmp_path: Path) -> None:
    """FI-1, ST-5: an upload claims content row numbers for each batch without waiting for the
    previous batch's write; notes committed meanwhile (their bodies are content rows too) get
    other numbers: every body and the file read back exactly, and the row count adds up."""
    source = tmp_path / "during.bin"
    pseudo_random(source, 64 * MIB, b"during")
    rows_before = content_rows(vault)
    upload = subprocess.Popen(
        vault.command("file", "add", str(source), "--json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=vault.environ(),
    )
    bodies: dict[str, str] = {}
    while_streaming = 0
    with IpcClient(Paths(vault.home).socket) as client:
        while upload.poll() is None or len(bodies) < 5:
            while_streaming += upload.poll() is None
            body = f"note {len(bodies)} written while the file streams in " * 20
            put = client.request({"op": "put", "title": f"during {len(bodies)}", "body": body})
            bodies[str(put["id"])] = body
    out, err = upload.communicate(timeout=120)
    assert while_streaming >= 3, while_streaming
    assert upload.returncode == 0, err
    added = json.loads(out)
    for asset_id, body in bodies.items():
        assert vault.ok("get", asset_id)["body"] == body
    copy = tmp_path / "during.out"
    vault.ok("file", "get", added["id"], "-o", str(copy))
    assert copy.read_bytes() == source.read_bytes()
    assert content_rows(vault) == rows_before + 64 * 4 + len(bodies)
