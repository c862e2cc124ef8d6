"""Install the packaged ``SKILL.md`` into agent clients' skill directories (AG-4).

Runs before any data home exists: stdlib only, never opens the store, never contacts
the daemon, and writes nothing but the skill file (and its directories). The file is
copied byte for byte from the package, so it carries no path, vault ID, token or secret.

Discovery directories (``<skills>/memories/SKILL.md``), from each client's documentation:

- Claude Code — user ``~/.claude/skills/``, project ``.claude/skills/``
  (https://code.claude.com/docs/en/skills, "Where skills live").
- Codex — user ``$HOME/.agents/skills/``, repository ``.agents/skills/``
  (https://developers.openai.com/codex/skills, "Where to save skills").
- OpenCode — global ``~/.config/opencode/skills/`` (``$XDG_CONFIG_HOME`` honoured),
  project ``.opencode/skills/`` (https://opencode.ai/docs/skills/, "Place files").

Procedure: every target is checked before anything is written (absent → create;
identical → keep; different → only with ``force``; a symlinked skill file or skill
directory, or a non-file at the path → refuse). If any target fails, nothing is
written anywhere. Each file is then published through a temp file in its own
directory that is written and fsynced, and linked into place with ``link()``, which
never replaces a file someone created meanwhile (with ``force`` it replaces only the
file whose content was checked). Sibling files and client config are never touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["CLIENTS", "SKILL_NAME", "Target", "skill_bytes", "targets", "inject", "Planned"]

SKILL_NAME = "memories"
CLIENTS = ("claude-code", "codex", "opencode")
_SKILL_SOURCE = Path(__file__).resolve().parents[2] / "assets" / "skills" / SKILL_NAME / "SKILL.md"


def skill_bytes() -> bytes:
    """The SKILL.md shipped in the package (``assets/`` sits beside ``engine/`` installed or not)."""
    try:
        return _SKILL_SOURCE.read_bytes()
    except OSError:
        raise MemoriesError("io_error", "The packaged SKILL.md is missing; reinstall memories.") from None


@dataclass(frozen=True)
class Target:
    client: str
    scope: str
    skills_dir: Path  # the client's discovery directory (".../skills")

    @property
    def skill_dir(self) -> Path:
        return self.skills_dir / SKILL_NAME

    @property
    def file(self) -> Path:
        return self.skill_dir / "SKILL.md"


def _config_home(home: Path) -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else home / ".config"


def targets(clients: list[str], scope: str, *, home: Path | None = None, project: Path | None = None) -> list[Target]:
    user_home = home or Path.home()
    root = project or Path.cwd()
    if scope == "project" and not root.is_dir():
        raise MemoriesError("invalid_input", f"The project directory does not exist: {root}")
    found: list[Target] = []
    for client in clients:
        if client not in CLIENTS:
            raise MemoriesError("invalid_input", "Unknown client; use claude-code, codex, opencode or all.")
        if scope == "user":
            skills = {
                "claude-code": user_home / ".claude" / "skills",
                "codex": user_home / ".agents" / "skills",
                "opencode": _config_home(user_home) / "opencode" / "skills",
            }[client]
        elif scope == "project":
            skills = {
                "claude-code": root / ".claude" / "skills",
                "codex": root / ".agents" / "skills",
                "opencode": root / ".opencode" / "skills",
            }[client]
        else:
            raise MemoriesError("invalid_input", "The scope is user or project.")
        if all(t.file != skills / SKILL_NAME / "SKILL.md" for t in found):
            found.append(Target(client, scope, skills))
    return found


@dataclass(frozen=True)
class Planned:
    target: Target
    action: str  # "create", "keep", "replace"
    digest: bytes | None  # of the existing file that "replace" may overwrite


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise MemoriesError("permission_denied", f"Refusing a symlinked skill path: {path}")


def _plan(target: Target, content: bytes, force: bool) -> Planned:
    for path in (target.skills_dir, target.skill_dir, target.file):
        _refuse_symlink(path)
    for directory in (target.skills_dir, target.skill_dir):
        if directory.exists() and not directory.is_dir():
            raise MemoriesError("invalid_input", f"Not a directory: {directory}")
    try:
        info = target.file.lstat()
    except FileNotFoundError:
        return Planned(target, "create", None)
    if not stat.S_ISREG(info.st_mode):
        raise MemoriesError("invalid_input", f"Not a regular file: {target.file}")
    try:
        existing = target.file.read_bytes()
    except OSError as exc:
        raise MemoriesError("io_error", f"Cannot read {target.file} ({exc.strerror}).") from None
    if existing == content:
        return Planned(target, "keep", None)
    if not force:
        raise MemoriesError("invalid_input", f"{target.file} exists with different content; re-run with --force to replace it.")
    return Planned(target, "replace", _digest(existing))


def _make_dirs(target: Target) -> None:
    for directory in (target.skills_dir.parent, target.skills_dir, target.skill_dir):
        if directory.exists():
            continue
        with contextlib.suppress(FileExistsError):
            directory.mkdir(parents=True)
    # Created concurrently as a symlink? Check again now that the directories exist.
    for path in (target.skills_dir, target.skill_dir):
        _refuse_symlink(path)


def _fsync_dir(directory: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _synced_temp(directory: Path, content: bytes) -> Path:
    fd, name = tempfile.mkstemp(prefix=".SKILL.md.", suffix=".tmp", dir=directory)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o644)
        view = memoryview(content)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return Path(name)


def _create_exclusive(path: Path, content: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise MemoriesError("conflict", f"{path} was created by someone else meanwhile; it was not overwritten.") from None
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(planned: Planned, content: bytes) -> None:
    target = planned.target
    _make_dirs(target)
    temp = _synced_temp(target.skill_dir, content)
    try:
        if planned.action == "create":
            try:
                os.link(temp, target.file)  # never replaces: fails if the file appeared meanwhile
            except FileExistsError:
                raise MemoriesError(
                    "conflict", f"{target.file} was created by someone else meanwhile; it was not overwritten."
                ) from None
            except OSError:
                _create_exclusive(target.file, content)  # no hard links here (e.g. some network file systems)
        else:
            _refuse_symlink(target.file)
            try:
                current = target.file.read_bytes()
            except OSError:
                current = b""
            if _digest(current) != planned.digest:
                raise MemoriesError("conflict", f"{target.file} changed meanwhile; it was not overwritten.")
            os.replace(temp, target.file)
        _fsync_dir(target.skill_dir)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def inject(
    clients: list[str],
    scope: str,
    *,
    force: bool = False,
    home: Path | None = None,
    project: Path | None = None,
) -> list[dict[str, str]]:
    """Pre-check every target, then publish; returns one ``{client, scope, path, action}`` per target."""
    content = skill_bytes()
    plans = [_plan(t, content, force) for t in targets(clients, scope, home=home, project=project)]
    results = []
    for planned in plans:
        if planned.action != "keep":
            _publish(planned, content)
        action = {"create": "created", "keep": "unchanged", "replace": "replaced"}[planned.action]
        results.append({"client": planned.target.client, "scope": scope, "path": str(planned.target.file), "action": action})
    return results
