"""Private scratch folders under the data home, for plaintext the CLI hands to a program.

``memories run --template`` writes the rendered file (secrets in clear) for the child to
read. In the shared temp folder a killed CLI (SIGKILL, power loss) would leave it where
other tools and cleaners look; here it stays in ``<home>/scratch/`` (0700, in the data home
that is private to this user) and the next call sweeps every folder whose CLI process is
gone. Each folder is ``<purpose>-<pid>-<random>``, 0700, made by :func:`tempfile.mkdtemp`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["scratch_root", "new_scratch_dir", "sweep"]


def scratch_root(home: Path) -> Path:
    return home / "scratch"


def _private_root(home: Path) -> Path:
    root = scratch_root(home)
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    st = os.lstat(root)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise MemoriesError("permission_denied", f"The scratch folder {root} is not a private folder of this user; remove it.")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(root, 0o700)
    return root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's PID reuse): leave the folder for a later sweep
    return True


def sweep(home: Path) -> list[str]:
    """Delete scratch folders whose CLI process is gone; their names."""
    root = scratch_root(home)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        parts = name.split("-")
        pid = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None
        if pid is not None and pid != os.getpid() and _alive(pid):
            continue
        shutil.rmtree(root / name, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(root / name)  # not a folder we made
        removed.append(name)
    return removed


def new_scratch_dir(home: Path, purpose: str) -> Path:
    """Sweep what killed calls left, then a fresh 0700 folder for this process."""
    root = _private_root(home)
    sweep(home)
    return Path(tempfile.mkdtemp(prefix=f"{purpose}-{os.getpid()}-", dir=root))
