"""Import refusals that only a hostile file or a racing folder can reach (IM-1; issue 27).

- A folder walk (engine/cli/importers.py) that meets a sub-folder swapped for a link to the
  same folder moved elsewhere, a sub-folder swapped for another folder, or a file swapped for a
  link after the listing. A swap must land between two steps of the walk, which a real
  `memories import` cannot be paused for, so these drive the real walker generator and swap
  between the files it yields.
- A 1PUX zip bomb (300 MiB of JSON padding in a ~300 KiB zip) and a Bitwarden export one byte
  over the 256 MiB limit, through the real CLI and daemon. The bomb is refused from the zip's
  directory before anything is inflated: the CLI process's peak memory (its own rusage) stays far
  below what inflating 256 MiB would take.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.cli.importers import ImportFormatError, _walk
from engine.moving.entry import MAX_FILE_BYTES
from tests.helpers import Cli

SECRET = "OUTSIDE-SECRET-canary-77"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "notes", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "a.md").write_text("# a\n\nfirst")
    (root / "b.md").write_text("# b\n\nsecond")
    (root / "sub" / "x.md").write_text("# x\n\nin the sub-folder")
    (outside / "secret.md").write_text(f"# secret\n\n{SECRET}")
    return root, outside


def test_a_sub_folder_swapped_for_a_link_to_itself_moved_elsewhere_is_noticed(tmp_path: Path) -> None:
    """IM-1: after the listing, the sub-folder is moved out of the tree and a link to it put in its
    place (same device and inode as listed): the walk refuses instead of following the link."""
    root, outside = _tree(tmp_path)
    walk = _walk(root, str(root), [])
    assert next(walk)[2] == "a.md"
    (root / "sub").rename(outside / "moved")
    (root / "sub").symlink_to(outside / "moved", target_is_directory=True)
    read: list[str] = []
    with pytest.raises(ImportFormatError, match="changed while it was being read"):
        for where, _, _, _ in walk:
            read.append(where)
    # Refused at the link itself, not later on the way back up: nothing behind it was read.
    assert read == [str(root / "b.md")], read


def test_a_sub_folder_swapped_for_another_folder_is_noticed(tmp_path: Path) -> None:
    """IM-1: after the listing, the sub-folder is replaced by another real folder (no link at all):
    its device and inode differ from the listing's, and the walk refuses."""
    root, _ = _tree(tmp_path)
    walk = _walk(root, str(root), [])
    assert next(walk)[2] == "a.md"
    (root / "sub").rename(root / ".old-sub")
    (root / "sub").mkdir()
    (root / "sub" / "planted.md").write_text(f"# planted\n\n{SECRET}")
    with pytest.raises(ImportFormatError, match="changed while it was being read"):
        list(walk)


def test_a_file_swapped_for_a_link_after_the_listing_is_not_followed(tmp_path: Path) -> None:
    """IM-1: b.md was a regular file when listed; before it is opened it becomes a link to a file
    outside the folder. It is skipped with a warning naming the link; the outside file is never read."""
    root, outside = _tree(tmp_path)
    warnings: list[str] = []
    walk = _walk(root, str(root), warnings)
    assert next(walk)[2] == "a.md"
    (root / "b.md").unlink()
    (root / "b.md").symlink_to(outside / "secret.md")
    rest = list(walk)
    assert [name for _, _, name, _ in rest] == ["x.md"]
    assert all(SECRET.encode() not in data for _, _, _, data in rest)
    assert any("b.md" in w and "symbolic link" in w for w in warnings), warnings


# -- hostile exports through the real CLI -------------------------------------------------------------


# Runs argv[1:] and reports its exit code and peak RSS (KiB) on stderr. A child's ru_maxrss
# starts at its parent's resident size at the fork, and a pytest worker late in a run is
# hundreds of MiB: this small, freshly started process forks the CLI instead.
_MEASURE = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "sys.stderr.write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\\n')\n"
)


def _run_measured(cli: Cli, *args: str) -> tuple[int, str, int]:
    """(exit code, stdout, peak RSS in KiB) of one CLI process, its own rusage from wait4."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cli.command(*args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=cli.environ(),
        timeout=300,
        check=False,
    )
    code, peak = proc.stderr.split()[-2:]
    return int(code), proc.stdout, int(peak)


def _count(vault: Cli) -> int:
    return int(vault.ok("status")["assets"])


def test_a_1pux_zip_bomb_is_refused_before_it_is_inflated(vault: Cli, tmp_path: Path) -> None:
    """IM-1: export.data inflates to 300 MiB (valid JSON: an empty accounts list and padding) from a
    zip of a few hundred KiB. Refused with a typed error naming the limit, nothing imported, and the
    CLI never held the inflated data (peak memory far below 256 MiB)."""
    bomb = tmp_path / "bomb.1pux"
    padding = 300 * 1024 * 1024
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("export.data", "w", force_zip64=True) as data:
            data.write(b'{"accounts": []')
            block = b" " * (4 * 1024 * 1024)
            for _ in range(padding // len(block)):
                data.write(block)
            data.write(b"}")
    assert bomb.stat().st_size < 2 * 1024 * 1024
    before = _count(vault)
    code, out, peak_kib = _run_measured(vault, "--json", "import", "1password", str(bomb))
    assert code != 0, out
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_input" and "larger than 256 MiB" in error["message"], error
    assert _count(vault) == before
    assert peak_kib < 160 * 1024, f"the CLI peaked at {peak_kib // 1024} MiB: it inflated the bomb"


def test_a_bitwarden_export_over_the_size_limit_is_refused(vault: Cli, tmp_path: Path) -> None:
    """IM-1: a valid Bitwarden export (one login) padded to one byte over 256 MiB is refused as too
    large, not parsed: nothing is imported."""
    path = tmp_path / "huge.json"
    export = json.dumps({"encrypted": False, "folders": [], "items": [{"type": 1, "name": "padded login"}]}).encode()
    with open(path, "wb") as out:
        out.write(export[:-1])
        remaining = MAX_FILE_BYTES + 1 - len(export)
        block = b" " * (4 * 1024 * 1024)
        while remaining > 0:
            out.write(block[: min(remaining, len(block))])
            remaining -= min(remaining, len(block))
        out.write(export[-1:])
    assert path.stat().st_size == MAX_FILE_BYTES + 1
    before = _count(vault)
    error = vault.err("import", "bitwarden", str(path))
    assert error["code"] == "invalid_input" and "larger than 256 MiB" in error["message"], error
    assert _count(vault) == before
