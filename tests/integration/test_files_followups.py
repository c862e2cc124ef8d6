"""Issue 16 follow-ups on files, through the real CLI and daemon (FI-1): binary chunk
transfer, titles kept by --update, orphaned chunks swept after a crash, search in files."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import Cli, pid_alive
from tests.integration.test_files import content_rows, pack_files

CHUNK = 256 * 1024


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    cli = Cli(home=tmp_path_factory.mktemp("files2") / "home")
    cli.init()
    yield cli
    cli.stop()


def test_update_without_title_keeps_the_title(vault: Cli, tmp_path: Path) -> None:
    """FI-1: `file add --update ID` without --title keeps the file's title; with one, renames it."""
    first = tmp_path / "draft-v1.txt"
    first.write_text("one")
    added = vault.ok("file", "add", str(first), "--title", "Contract draft")
    second = tmp_path / "draft-v2.txt"
    second.write_text("two")
    updated = vault.ok("file", "add", str(second), "--update", added["id"])
    assert updated["title"] == "Contract draft"
    assert vault.ok("get", added["id"])["title"] == "Contract draft"
    renamed = vault.ok("file", "add", str(first), "--update", added["id"], "--title", "Contract final")
    assert renamed["title"] == "Contract final"
    assert vault.ok("get", added["id"])["title"] == "Contract final"
    # A new file without --title is still titled by its name.
    assert vault.ok("file", "add", str(second))["title"] == "draft-v2.txt"


def test_binary_and_base64_chunks_store_the_same_file(vault: Cli, tmp_path: Path) -> None:
    """FI-1: the CLI moves chunks as the frame's binary part; a base64-only client still works
    and both read back byte-exact, either way."""
    data = hashlib.shake_256(b"both ways").digest(3 * CHUNK + 17)
    source = tmp_path / "both.bin"
    source.write_bytes(data)
    added = vault.ok("file", "add", str(source))
    with IpcClient(Paths(vault.home).socket) as client:
        begun = client.request({"op": "file_begin", "size": len(data), "title": "b64"})
        pieces = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
        client.request(
            {
                "op": "file_chunk",
                "upload": begun["upload"],
                "index": 0,
                "data": [base64.b64encode(p).decode() for p in pieces],
            }
        )
        old_style = client.request({"op": "file_commit", "upload": begun["upload"], "sha256": hashlib.sha256(data).hexdigest()})
        for file_id in (added["id"], old_style["id"]):
            opened = client.request({"op": "file_open", "id": file_id})
            binary = client.request({"op": "file_read", "read": opened["read"], "index": 0, "count": 32, "binary": True})
            assert binary["payload"] == data and binary["sizes"] == [len(p) for p in pieces]
            text = client.request({"op": "file_read", "read": opened["read"], "index": 1, "count": 8})
            assert b"".join(base64.b64decode(t) for t in text["data"]) == data[CHUNK:]
            client.request({"op": "file_close", "read": opened["read"]})
    out = tmp_path / "both.out"
    vault.ok("file", "get", old_style["id"], "-o", str(out))
    assert out.read_bytes() == data


def test_bad_binary_chunk_requests_change_nothing(vault: Cli) -> None:
    """Typed errors: sizes that do not add up, sizes with data, neither; the upload is unchanged."""
    with IpcClient(Paths(vault.home).socket) as client:
        begun = client.request({"op": "file_begin", "size": 2 * CHUNK, "title": "bad"})
        handle = begun["upload"]
        bad: list[dict[str, Any]] = [
            {"sizes": [CHUNK, CHUNK], "payload": b"\0" * (2 * CHUNK - 1)},
            {"sizes": [CHUNK], "payload": b"\0" * CHUNK, "data": ["AAAA"]},
            {"payload": b"\0" * CHUNK},
            {},
            {"sizes": [CHUNK + 1], "payload": b"\0" * (CHUNK + 1)},
        ]
        for extra in bad:
            with pytest.raises(MemoriesError) as exc:
                client.request({"op": "file_chunk", "upload": handle, "index": 0, **extra})
            assert exc.value.code in {"invalid_input", "invalid_request"}
        # Still at chunk 0: the upload takes its real chunks and commits.
        data = b"\1" * (2 * CHUNK)
        client.request({"op": "file_chunk", "upload": handle, "index": 0, "sizes": [CHUNK, CHUNK], "payload": data})
        done = client.request({"op": "file_commit", "upload": handle, "sha256": hashlib.sha256(data).hexdigest()})
        assert done["size"] == 2 * CHUNK


def test_orphaned_chunks_of_a_killed_upload_are_swept_at_unlock(tmp_path: Path) -> None:
    """FI-1 crash cleanup: SIGKILL the engine mid-upload; the next unlock removes the chunks
    no revision references, and keeps every chunk of every committed file."""
    cli = Cli(home=tmp_path / "home")
    cli.init()
    try:
        kept = tmp_path / "kept.bin"
        kept.write_bytes(hashlib.shake_256(b"kept").digest(3 * CHUNK))
        kept_id = cli.ok("file", "add", str(kept))["id"]
        before, packs_before = content_rows(cli), pack_files(cli)
        with IpcClient(Paths(cli.home).socket) as client:
            begun = client.request({"op": "file_begin", "size": 64 * CHUNK, "title": "cut short"})
            for index in (0, 16):  # 32 of 64 chunks (8 MiB) are written, then the engine dies
                block = hashlib.shake_256(index.to_bytes(4, "big")).digest(16 * CHUNK)
                client.request(
                    {"op": "file_chunk", "upload": begun["upload"], "index": index, "sizes": [CHUNK] * 16, "payload": block}
                )
        # An answered chunk is sealed and written by the upload's pipeline, not always in the
        # file yet: wait until all 32 are, so that the crash leaves a known number behind.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if content_rows(cli) - before >= 32:
                break
            time.sleep(0.05)
        pid = cli.daemon_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        orphaned = content_rows(cli) - before
        assert orphaned == 32  # the crash left the upload's chunks behind
        assert len(pack_files(cli)) == len(packs_before) + 1  # in a pack file of its own (16 MiB, issue 32)
        cli.unlock()  # starts a new engine; the unlock starts the sweep in the background
        deadline = time.monotonic() + 120
        while True:
            after = content_rows(cli)
            if (after == before and pack_files(cli) == packs_before) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert after == before
        assert pack_files(cli) == packs_before  # the pack file went with its rows
        out = tmp_path / "kept.out"
        cli.ok("file", "get", kept_id, "-o", str(out))
        assert out.read_bytes() == kept.read_bytes()
        assert cli.ok("get", kept_id)["title"] == "kept.bin"
    finally:
        cli.stop()
