"""Where the engine socket goes for a deep data home: a private ``$XDG_RUNTIME_DIR``, else
``/tmp/memories-UID``, which another user may have created first (issue 27, low items)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from engine.errors import MemoriesError
from engine.home import check_private_folder, engine_socket, fallback_runtime_dir, prepare_runtime_dir
from tests.helpers import Cli

DEEP = "/deep" + "/nested-folder" * 10  # beyond the AF_UNIX limit: the socket leaves the home


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_missing_fallback_folder_is_created_private(tmp_path: Path) -> None:
    folder = tmp_path / "memories-1000"
    check_private_folder(str(folder))
    assert folder.is_dir() and _mode(folder) == 0o700


def test_our_readable_folder_from_an_earlier_version_is_tightened(tmp_path: Path) -> None:
    folder = tmp_path / "memories-1000"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    check_private_folder(str(folder))
    assert _mode(folder) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777, 0o722])
def test_a_folder_others_can_write_into_is_refused_and_left_alone(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "memories-1000"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(MemoriesError) as caught:
        check_private_folder(str(folder))
    assert caught.value.code == "permission_denied"
    assert str(folder) in caught.value.message and "writable by other users" in caught.value.message
    assert "XDG_RUNTIME_DIR" in caught.value.message  # what to do
    assert _mode(folder) == mode


def test_a_symlink_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    link = tmp_path / "memories-1000"
    link.symlink_to(real)
    with pytest.raises(MemoriesError) as caught:
        check_private_folder(str(link))
    assert caught.value.code == "permission_denied" and str(link) in caught.value.message


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="handing a folder to another user needs root")
def test_a_folder_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "memories-1000"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(MemoriesError) as caught:
        check_private_folder(str(folder))
    assert caught.value.code == "permission_denied" and "owned by another user" in caught.value.message
    assert os.lstat(folder).st_uid == 65534


def test_only_the_fallback_folder_is_checked(tmp_path: Path) -> None:
    """The data home's own run/ folder and a private XDG runtime folder are not the shared
    /tmp fallback, so nothing is created or refused for them here."""
    open_folder = tmp_path / "wide"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    prepare_runtime_dir(str(open_folder / "memories-abc" / "engine.sock"))
    assert _mode(open_folder) == 0o777
    assert fallback_runtime_dir() == f"/tmp/memories-{os.getuid()}"


def test_xdg_runtime_dir_is_preferred_only_when_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "runtime"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(private))
    assert engine_socket(DEEP).startswith(str(private) + "/memories-")
    private.chmod(0o755)  # not what the XDG spec promises: do not put a socket there
    assert engine_socket(DEEP).startswith(fallback_runtime_dir() + "/memories-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/runtime")
    assert engine_socket(DEEP).startswith(fallback_runtime_dir() + "/")


def test_the_engine_serves_from_a_private_xdg_runtime_dir(tmp_path: Path) -> None:
    """A real engine for a deep home puts its socket under a private $XDG_RUNTIME_DIR."""
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: a socket path has a length limit
    home = tmp_path.joinpath(*["nested-folder"] * 8, "home")
    cli = Cli(home=home, env={"XDG_RUNTIME_DIR": str(runtime)})
    try:
        cli.init()
        sockets = list(runtime.glob("memories-*/engine.sock"))
        assert len(sockets) == 1 and stat.S_ISSOCK(os.lstat(sockets[0]).st_mode)
        assert cli.ok("status")["state"] == "unlocked"
    finally:
        cli.stop()
        shutil.rmtree(runtime, ignore_errors=True)
