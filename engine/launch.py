"""How Memories starts a Python child process: isolated from the caller's directory (SPEC ST-11).

A plain ``python -m engine.cli`` puts the current directory first on the child's import
path, so a ``json.py``, ``hmac.py`` or ``engine/`` package in a cloned repository or a
downloads folder would run inside the process that receives the vault password. Every
Python child we start (the engine daemon, the clipboard clearer, the desktop's CLI
children, autostart and agent-client entries) is built here:

* ``-P`` (Python 3.11+, "safe path"): nothing is prepended to ``sys.path`` — not the
  current directory for ``-m``, not a script's folder. We do not use ``-I``: it also drops
  the user site-packages (a ``pip install --user`` of Memories or its dependencies) and
  ``PYTHONPATH``, which are the user's own configuration, not the directory's contents.
* ``PYTHONPATH`` is passed on without empty or relative entries: an empty entry means the
  current directory and a relative one is resolved against it (``PYTHONPATH=:/x`` puts the
  directory back even under ``-P``).
* If the folder holding the running ``engine`` package (a source checkout run without an
  install) is not on the interpreter's default path, it is prepended to the child's
  ``PYTHONPATH`` by absolute path, so the child imports the same code as its parent —
  never found through the current directory.
* A fixed working directory (:func:`working_directory`): the data home when there is one,
  else the file-system root; a long-lived daemon never pins the caller's folder (an
  unmountable USB stick) and relative paths never mean the caller's folder.

The flags sit in the child's own command line, so ``sys.orig_argv`` carries them and a
process that re-executes itself stays isolated. The frozen app (PyInstaller) has no
interpreter flags to pass: its ``sys.path`` is the bundle alone, and its entry script
(packaging/frozen_entry.py) takes ``-m MODULE`` as the first two arguments.

Stdlib only and cheap: the CLI imports this on the engine's start path (issue 20).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ISOLATION_FLAGS", "python_command", "child_env", "working_directory", "package_root"]

# In the child's own argv (see the module docstring): a re-exec via sys.orig_argv keeps it.
ISOLATION_FLAGS = ("-P",)


def package_root(module_file: str, depth: int = 2) -> str:
    """The folder that holds a top-level package, from one of its files' ``__file__``
    (``engine/launch.py`` -> the folder holding ``engine``)."""
    path = os.path.abspath(module_file)
    for _ in range(depth):
        path = os.path.dirname(path)
    return path


_ENGINE_ROOT = package_root(__file__)


def python_command(module: str, *args: str) -> list[str]:
    """``[python, -P, -m, module, *args]``; in the frozen app ``[app, -m, module, *args]``."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "-m", module, *args]
    return [sys.executable, *ISOLATION_FLAGS, "-m", module, *args]


def _default_path() -> list[str]:
    """The entries a fresh ``-P`` interpreter also has: ours minus what the current
    directory or a script's folder added at our own start."""
    entries = sys.path if sys.flags.safe_path else sys.path[1:]
    return [os.path.abspath(e) for e in entries if e]


def child_env(base: Mapping[str, str] | None = None, roots: tuple[str, ...] = (_ENGINE_ROOT,)) -> dict[str, str]:
    """The environment for a Python child: ``base`` (default: ours) with ``PYTHONPATH``
    cleaned of empty/relative entries and led by any of ``roots`` not found otherwise."""
    env = dict(os.environ if base is None else base)
    kept = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and os.path.isabs(e)]
    if not getattr(sys, "frozen", False):
        default = set(_default_path()) | {os.path.abspath(e) for e in kept}
        kept = [r for r in dict.fromkeys(roots) if os.path.abspath(r) not in default] + kept
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def working_directory(home: str | os.PathLike[str] | None = None) -> str:
    """The data home if it exists (private to this user), else the file-system root."""
    if home is not None and os.path.isdir(home):
        return os.fspath(home)
    return os.path.abspath(os.sep)
