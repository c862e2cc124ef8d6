"""`memories import` reads only what it was given (issue 12), against a real daemon and real folders.

Links out of the folder, FIFOs and sockets are skipped with a warning naming them; every
note is checked (size, title, tags: the limits of `put`) before the first batch, so an
invalid file imports nothing; a batch that fails for a reason no check can foresee (here a
real write failure: the daemon runs under RLIMIT_FSIZE) reports exactly what was committed,
and running the same import again finishes it.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli.importers import MAX_NOTE_BYTES, parse_markdown
from engine.config import Paths
from tests.helpers import PASSWORD, Cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, Unix sockets and rlimits are POSIX")

# A FIFO that import opened for reading would block it forever: every run is bounded.
RUN_TIMEOUT = 60


def _note(path: Path, title: str, body: str = "body", tags: str = "") -> None:
    front = f"---\ntitle: {title}\n" + (f"tags: [{tags}]\n" if tags else "") + "---\n"
    path.write_text(front + body + "\n", "utf-8")


def _titles(cli: Cli) -> set[str]:
    listed = cli.ok("list", "--limit", "100000")
    return {item["title"] for item in listed["items"]}


def _import(cli: Cli, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli.run("import", str(path), *extra, timeout=RUN_TIMEOUT)


def _import_json(cli: Cli, path: Path) -> tuple[int, dict[str, object]]:
    proc = _import(cli, path, "--json")
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    yield sock
    sock.close()


def test_links_fifos_and_sockets_are_skipped_with_a_warning(vault: Cli, tmp_path: Path, unix_socket: socket.socket) -> None:
    """API-8 / issue 12: nothing outside the folder is read, nothing blocks; each skip is named."""
    outside = tmp_path / "outside"
    outside.mkdir()
    _note(outside / "secret.md", "Outside secret")
    _note(outside / "deeper.md", "Outside folder note")
    notes = tmp_path / "notes"
    notes.mkdir()
    _note(notes / "good.md", "Good note")
    (notes / "link-out.md").symlink_to(outside / "secret.md")
    (notes / "link-dir").symlink_to(outside, target_is_directory=True)
    (notes / "link-in.md").symlink_to(notes / "good.md")
    os.mkfifo(notes / "pipe.md")
    unix_socket.bind(str(notes / "sock.md"))

    code, result = _import_json(vault, notes)
    assert code == 0, result
    assert result["created"] == 1 and result["total"] == 1
    warnings = result["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 5
    links, regular = "import never follows links inside a folder.", "import reads only regular files."
    for name, what, rest in (
        ("link-out.md", "symbolic link", links),
        ("link-dir", "symbolic link", links),
        ("link-in.md", "symbolic link", links),
        ("pipe.md", "FIFO", regular),
        ("sock.md", "socket", regular),
    ):
        assert {"code": "skipped", "message": f"{notes / name}: a {what}; " + rest} in warnings, (name, warnings)
    assert _titles(vault) == {"Good note"}

    # Text mode: the same warnings on stderr, the summary on stdout.
    proc = _import(vault, notes)
    assert proc.returncode == 0, proc.stderr
    assert "already present 1" in proc.stdout
    assert proc.stderr.count("warning: skipped: ") == 5
    assert str(notes / "link-out.md") in proc.stderr and str(notes / "pipe.md") in proc.stderr
    assert _titles(vault) == {"Good note"}


def test_a_fifo_named_on_the_command_line_is_an_error_not_a_hang(vault: Cli, tmp_path: Path) -> None:
    """Issue 12: a FIFO (even with a note's name) is never opened for reading."""
    for name in ("pipe.md", "pipe.jsonl"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        code, result = _import_json(vault, fifo)
        assert code == 1
        error = result["error"]
        assert isinstance(error, dict) and error["code"] == "invalid_input"
        assert name in error["message"] and "FIFO" in error["message"]
    assert _titles(vault) == set()


def test_a_file_over_the_size_limit_names_the_file_and_the_limit(vault: Cli, tmp_path: Path) -> None:
    """Issue 12: per-note size limit; the error names file and limit; nothing is imported."""
    notes = tmp_path / "notes"
    notes.mkdir()
    _note(notes / "a-small.md", "Small")
    header = "---\ntitle: At the limit\n---\n"
    (notes / "b-at-limit.md").write_text(header + "x" * (MAX_NOTE_BYTES - len(header)), "utf-8")
    assert (notes / "b-at-limit.md").stat().st_size == MAX_NOTE_BYTES
    (notes / "c-big.md").write_text("# Big\n" + "x" * MAX_NOTE_BYTES, "utf-8")

    code, result = _import_json(vault, notes)
    assert code == 1
    error = result["error"]
    assert isinstance(error, dict) and error["code"] == "invalid_input"
    assert "c-big.md" in error["message"] and "4 MiB" in error["message"]
    assert _titles(vault) == set()

    (notes / "c-big.md").unlink()
    code, result = _import_json(vault, notes)
    assert code == 0 and result["created"] == 2
    assert _titles(vault) == {"Small", "At the limit"}

    # JSONL: the limit is per line (one note), and the error names the line.
    jsonl = tmp_path / "in.jsonl"
    lines = [json.dumps({"title": "fine", "body": "b"}), json.dumps({"title": "huge", "body": "y" * MAX_NOTE_BYTES})]
    jsonl.write_text("\n".join(lines) + "\n", "utf-8")
    code, result = _import_json(vault, jsonl)
    error = result["error"]
    assert code == 1 and isinstance(error, dict)
    assert "in.jsonl: line 2" in error["message"] and "4 MiB" in error["message"]
    assert _titles(vault) == {"Small", "At the limit"}


def _make_deep(root: Path, depth: int, name: str) -> None:
    """A chain of `depth` folders below root, built through directory descriptors (past PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(1, depth + 1):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level % 500 == 0 or level == depth:
                note = os.open(f"level{level}.md", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd)
                os.write(note, f"---\ntitle: Level {level}\n---\nat depth {level}\n".encode())
                os.close(note)
    finally:
        os.close(fd)


def _remove_deep(root: Path, depth: int, name: str) -> None:
    """Remove the chain bottom-up without recursion (shutil.rmtree recurses once per level)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    for _ in range(depth):
        for entry in os.listdir(fd):
            os.unlink(entry, dir_fd=fd)
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = parent
        os.rmdir(name, dir_fd=fd)
    os.close(fd)


def test_a_very_deep_folder_tree_is_walked(vault: Cli, tmp_path: Path) -> None:
    """Issue 12: 1500 levels (paths far past PATH_MAX) walk without recursion errors."""
    root = tmp_path / "deep"
    root.mkdir()
    depth, name = 1500, "folder"
    _make_deep(root, depth, name)
    try:
        code, result = _import_json(vault, root)
        assert code == 0, result
        assert result["created"] == 3 and result["warnings"] == []
        assert _titles(vault) == {"Level 500", "Level 1000", "Level 1500"}
    finally:
        _remove_deep(root, depth, name)


def test_a_utf8_bom_before_front_matter_is_accepted(vault: Cli, tmp_path: Path) -> None:
    """Issue 12: a BOM (as some Windows editors write) does not hide the front matter."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "bom.md").write_bytes(b"\xef\xbb\xbf---\ntitle: With BOM\ntags: [bom]\nsource: editor\n---\nthe body\n")
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps({"title": "JSONL with BOM", "body": "b"}).encode() + b"\n")
    assert _import_json(vault, notes)[1]["created"] == 1
    assert _import_json(vault, jsonl)[1]["created"] == 1
    listed = vault.ok("list", "--tag", "bom")
    assert [item["title"] for item in listed["items"]] == ["With BOM"]
    got = vault.ok("get", listed["items"][0]["id"])
    assert got["body"] == "the body" and got["meta"] == {"source": "editor", "path": "bom.md"}
    assert _titles(vault) == {"With BOM", "JSONL with BOM"}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ("---\ntitle: " + "T" * 1001 + "\n---\nbody\n", "$.title"),
        ("---\ntitle: Tagged\ntags: [" + ", ".join(f"t{i}" for i in range(65)) + "]\n---\n", "$.tags"),
        ("---\ntitle: Long tag\ntags: [" + "t" * 101 + "]\n---\n", "$.tags[0]"),
        ("---\ntitle: Meta\n" + "".join(f"k{i}: v\n" for i in range(65)) + "---\n", "$.meta"),
    ],
    ids=["title-1001", "tags-65", "tag-101", "meta-65"],
)
def test_put_limits_name_the_file_and_import_nothing_across_batches(vault: Cli, tmp_path: Path, bad: str, field: str) -> None:
    """API-8 / issue 12: the limits of `put`, checked up front: 1200 valid notes (three batches) and
    one invalid file sorted last: an error naming it and the field, and nothing imported (no truncation)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(1200):
        _note(notes / f"a{i:04}.md", f"Valid {i}")
    (notes / "zz-bad.md").write_text(bad, "utf-8")
    code, result = _import_json(vault, notes)
    assert code == 1
    error = result["error"]
    assert isinstance(error, dict) and error["code"] == "invalid_input"
    assert str(notes / "zz-bad.md") in error["message"] and field in error["message"]
    assert "Nothing was imported" in error["message"]
    assert vault.ok("list")["total"] == 0

    # The same note through JSONL: same check, the line is named.
    item = parse_markdown(bad, "x.md", "fallback")
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"title": "ok", "body": "b"}) + "\n" + json.dumps(item) + "\n", "utf-8")
    code, result = _import_json(vault, jsonl)
    error = result["error"]
    assert code == 1 and isinstance(error, dict) and "in.jsonl: line 2" in error["message"]
    assert vault.ok("list")["total"] == 0


def _start_daemon_with_file_size_limit(cli: Cli, limit: int) -> None:
    """Restart the engine under RLIMIT_FSIZE: writes past `limit` bytes fail with EFBIG (Python ignores SIGXFSZ)."""
    cli.stop()

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        cli.command("unlock", "--password-stdin", "--json"),
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        env=cli.environ(),
        preexec_fn=limited,
        timeout=RUN_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_batch_that_fails_mid_import_reports_exactly_what_was_committed(vault: Cli, tmp_path: Path) -> None:
    """ST-5 / issue 12: a real disk failure after some batches: the error names the batch's first file and
    the exact committed count (the vault holds exactly that many), and re-running the import finishes it."""
    notes = tmp_path / "notes"
    notes.mkdir()
    total = 3000
    for i in range(total):
        # Bodies that do not deflate (note bodies are compressed before sealing): the limit below
        # must fall inside the import whatever the compression.
        noise = base64.b64encode(random.Random(i).randbytes(900)).decode("ascii")
        _note(notes / f"n{i:05}.md", f"Note {i}", f"body {i} {noise}")
    store = Paths(vault.home).store
    _start_daemon_with_file_size_limit(vault, store.stat().st_size + 2_500_000)  # room for about two batches

    code, result = _import_json(vault, notes)
    assert code == 1
    error = result["error"]
    assert isinstance(error, dict) and error["code"] in ("io_error", "disk_full")
    message = str(error["message"])
    match = re.search(r"starting with (\S+); (\d+) new note\(s\) were committed \(0 were already present\) of 3000", message)
    assert match, message
    first_failed, committed = match.group(1), int(match.group(2))
    assert 0 < committed < total and committed % 500 == 0
    assert first_failed == str(notes / f"n{committed:05}.md")
    assert "Run the same import again" in message

    vault.stop()
    vault.unlock()  # without the limit
    assert vault.ok("list", "--limit", "1")["total"] == committed
    code, result = _import_json(vault, notes)
    assert code == 0
    assert result == {"v": 1, "created": total - committed, "skipped": committed, "total": total, "warnings": []}
    assert vault.ok("list", "--limit", "1")["total"] == total


def test_an_import_into_a_locked_vault_says_nothing_was_imported(vault: Cli, tmp_path: Path) -> None:
    """API-8: a batch refused by the engine names where it stopped and that nothing was imported."""
    notes = tmp_path / "notes"
    notes.mkdir()
    _note(notes / "a.md", "A")
    vault.ok("lock")
    code, result = _import_json(vault, notes)
    error = result["error"]
    assert code == 1 and isinstance(error, dict) and error["code"] == "locked"
    assert str(notes / "a.md") in error["message"] and "none of the 1 note(s) was imported" in error["message"]
    vault.unlock()
    assert vault.ok("list")["total"] == 0
