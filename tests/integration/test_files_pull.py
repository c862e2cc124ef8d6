"""`file add` without sending the bytes (FI-1, FI-2, issue 32): the engine reads the file the CLI
opened, through the real socket and daemon. The test process itself plays the client: it opens
the file, offers its descriptor, and the engine reaches it as ``/proc/PID/fd/N`` of the peer the
kernel names (engine/files/source.py)."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import Cli
from tests.integration.test_files import content_rows

CHUNK = 256 * 1024

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the engine reads a client's file on Linux only")


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    cli = Cli(home=tmp_path_factory.mktemp("files-pull") / "home")
    cli.init()
    yield cli
    cli.stop()


def _identity(fd: int) -> list[int]:
    info = os.fstat(fd)
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _begin(client: IpcClient, fd: int, identity: list[int], title: str) -> dict[str, Any]:
    return client.request({"op": "file_begin", "size": identity[2], "title": title, "fd": fd, "identity": identity})


def _pull_all(client: IpcClient, begun: dict[str, Any]) -> None:
    for index in range(0, begun["chunks"], begun["per_pull"]):
        count = min(begun["per_pull"], begun["chunks"] - index)
        client.request({"op": "file_pull", "upload": begun["upload"], "index": index, "count": count})


def test_the_engine_reads_the_file_the_client_holds_open(vault: Cli, tmp_path: Path) -> None:
    """FI-1: offered a descriptor the client holds, the engine reads the file itself (no byte on the
    socket), commits without a digest from the client, and the file reads back byte-exact with the
    SHA-256 of its bytes; the CLI's `file add` takes the same way."""
    data = hashlib.shake_256(b"pulled").digest(70 * CHUNK + 123)  # three pulls, a short last chunk
    source = tmp_path / "pulled.bin"
    source.write_bytes(data)
    with open(source, "rb") as held, IpcClient(Paths(vault.home).socket) as client:
        begun = _begin(client, held.fileno(), _identity(held.fileno()), "pulled")
        assert begun["pull"] is True and begun["chunks"] == 71
        _pull_all(client, begun)
        done = client.request({"op": "file_commit", "upload": begun["upload"]})
    assert done["sha256"] == hashlib.sha256(data).hexdigest() and done["size"] == len(data)
    out = tmp_path / "pulled.out"
    vault.ok("file", "get", done["id"], "-o", str(out))
    assert out.read_bytes() == data
    log = Paths(vault.home).log_dir / "engine.log"
    pulls = log.read_text().count("op=file_pull ok")
    by_cli = vault.ok("file", "add", str(source))
    assert by_cli["sha256"] == done["sha256"]
    assert log.read_text().count("op=file_pull ok") == pulls + 3  # the engine read it: 3 pulls, no file_chunk


@pytest.mark.parametrize("wrong", ["mtime", "size", "inode", "not_open"])
def test_anything_but_the_same_open_file_is_not_read(vault: Cli, tmp_path: Path, wrong: str) -> None:
    """The engine reads only a descriptor the connecting process holds, of the very file the
    client describes; otherwise the answer says ``pull: false`` and the client sends the bytes
    as before (they still commit), while a `file_pull` is refused."""
    data = b"streamed instead" * 1000
    source = tmp_path / f"{wrong}.bin"
    source.write_bytes(data)
    other = tmp_path / "other.bin"
    other.write_bytes(data)
    with open(source, "rb") as held, open(other, "rb") as second, IpcClient(Paths(vault.home).socket) as client:
        identity, fd = _identity(held.fileno()), held.fileno()
        if wrong == "mtime":
            identity[3] += 1
        elif wrong == "size":
            identity[2] += 1
        elif wrong == "inode":
            identity = _identity(second.fileno())  # same size and bytes, another file
        else:
            fd = max(held.fileno(), second.fileno()) + 100  # not open in this process
        begun = client.request({"op": "file_begin", "size": identity[2], "title": wrong, "fd": fd, "identity": identity})
        assert begun["pull"] is False
        with pytest.raises(MemoriesError) as refused:
            client.request({"op": "file_pull", "upload": begun["upload"], "index": 0, "count": 1})
        assert refused.value.code == "invalid_input"
        if wrong != "size":  # the streamed way still works (the refused pull ended that upload)
            again = client.request({"op": "file_begin", "size": len(data), "title": wrong, "fd": fd, "identity": identity})
            client.request({"op": "file_chunk", "upload": again["upload"], "index": 0, "sizes": [len(data)], "payload": data})
            with pytest.raises(MemoriesError) as no_digest:
                client.request({"op": "file_commit", "upload": again["upload"]})
            assert no_digest.value.code == "invalid_input"  # a sent file is committed with the client's digest


@pytest.mark.parametrize("how", ["rewritten", "shrunk", "grown"])
def test_fi2_a_file_changed_while_the_engine_reads_it_is_refused(vault: Cli, tmp_path: Path, how: str) -> None:
    """FI-2 in the engine: the file changes between two pulls (rewritten in place with the same
    size, truncated, or appended to); the upload answers file_changed and leaves no content row."""
    source = tmp_path / f"{how}.bin"
    source.write_bytes(hashlib.shake_256(how.encode()).digest(40 * CHUNK))
    rows, files = content_rows(vault), vault.ok("file", "list")["total"]
    with open(source, "rb") as held, IpcClient(Paths(vault.home).socket) as client:
        begun = _begin(client, held.fileno(), _identity(held.fileno()), how)
        assert begun["pull"] is True
        client.request({"op": "file_pull", "upload": begun["upload"], "index": 0, "count": begun["per_pull"]})
        with open(source, "r+b") as writer:
            if how == "rewritten":
                writer.seek(35 * CHUNK)
                writer.write(b"\xa5" * CHUNK)
            elif how == "shrunk":
                writer.truncate(36 * CHUNK)
            else:
                writer.seek(0, os.SEEK_END)
                writer.write(b"more")
        with pytest.raises(MemoriesError) as changed:
            rest = 40 - begun["per_pull"]
            client.request({"op": "file_pull", "upload": begun["upload"], "index": begun["per_pull"], "count": rest})
            client.request({"op": "file_commit", "upload": begun["upload"]})
    assert changed.value.code == "file_changed", changed.value
    assert "nothing was saved" in changed.value.message
    assert vault.ok("file", "list")["total"] == files
    assert content_rows(vault) == rows
