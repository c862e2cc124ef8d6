"""`file get -o PATH` with a PATH that cannot be written: a typed error (SPEC API-8), valid
`--json`, no traceback, nothing read from the vault (issue 27, low items)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers import Cli


def _added(vault: Cli, tmp_path: Path) -> str:
    source = tmp_path / "notes.txt"
    source.write_text("file body for the output-path checks\n")
    added: str = vault.ok("file", "add", str(source))["id"]
    return added


def _reads(vault: Cli) -> int:
    return len(vault.ok("audit", "--op", "file_get", "--limit", "100")["entries"])


def test_get_into_a_missing_folder_is_a_typed_error(vault: Cli, tmp_path: Path) -> None:
    file_id = _added(vault, tmp_path)
    vault.sudo()  # to read the audit log
    before = _reads(vault)
    missing = tmp_path / "no-such-folder" / "out.txt"
    for args in (("--json",), ()):
        proc = vault.run("file", "get", file_id, "-o", str(missing), *args)
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        if args:
            error = json.loads(proc.stdout)["error"]
            assert error["code"] == "invalid_input"
            assert str(missing.parent) in error["message"] and "does not exist" in error["message"]
        else:
            assert "does not exist" in proc.stderr
    assert not missing.parent.exists()
    assert _reads(vault) == before  # refused before the engine was asked: no read audited
    vault.ok("file", "get", file_id, "-o", str(tmp_path / "fine.txt"))
    assert _reads(vault) == before + 1  # (the count does see a read)


def test_get_onto_a_folder_or_into_a_read_only_folder_is_a_typed_error(vault: Cli, tmp_path: Path) -> None:
    file_id = _added(vault, tmp_path)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    error = vault.err("file", "get", file_id, "-o", str(folder), "--force")
    assert error["code"] == "invalid_input" and "is a folder" in error["message"]
    if os.geteuid() != 0:  # root writes into a 0500 folder anyway
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o500)
        error = vault.err("file", "get", file_id, "-o", str(locked / "out.txt"))
        assert error["code"] == "io_error" and str(locked) in error["message"]
    out = tmp_path / "ok.txt"
    assert vault.ok("file", "get", file_id, "-o", str(out))["output"] == str(out)
    assert out.read_text() == "file body for the output-path checks\n"
