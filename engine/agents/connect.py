"""`memories agent connect` (AG-6): where an agent's token lives and what goes into its client's config.

The token of an agent's grant is kept out of every file a client or a project shares: in
the OS keyring through ``keyring`` where a usable backend exists, else in a 0600 file
``agents/NAME.token`` of the data home. The client's config gets only the absolute path
of the command, ``--home DATA_HOME mcp --agent NAME``: a project's ``.mcp.json`` can be
committed, and ``memories mcp --agent NAME`` finds the token itself.

What connect wrote is recorded in ``agents/NAME.json`` (no secret in it), so that
``disconnect`` removes exactly that and nothing a user added.

Config locations (merged, never replaced):
- claude-code: ``DIR/.mcp.json`` with ``--project DIR``, else ``~/.claude.json`` (``mcpServers``);
- codex: ``DIR/.codex/config.toml``, else ``$CODEX_HOME/config.toml`` or ``~/.codex/config.toml``
  (a ``[mcp_servers.memories]`` table between two marker comments);
- opencode: ``DIR/opencode.json``, else ``~/.config/opencode/opencode.json`` (``mcp``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from engine.agent_manifests import Manifest, load_manifest, manifests
from engine.agent_manifests import agents_dir as _agents_dir
from engine.agent_manifests import check_name as _check_name
from engine.errors import MemoriesError
from engine.launch import ISOLATION_FLAGS

__all__ = [
    "CLIENTS",
    "SERVER_KEY",
    "Manifest",
    "agent_command",
    "config_path",
    "write_config",
    "remove_config",
    "save_token",
    "load_token",
    "delete_token",
    "load_manifest",
    "save_manifest",
    "delete_manifest",
    "manifests",
    "agent_name",
    "prepare_config",
    "put_config",
    "check_token_store",
    "ensure_session_bus",
    "CODEX_FORWARDED_ENV",
    "reconnect_command",
    "hooks_path",
    "capture_command",
    "prepare_hooks",
    "remove_hooks",
    "CLAUDE_HOOK_EVENTS",
    "CODEX_NOTIFY_FLAG",
    "notify_command",
    "prepare_notify",
    "remove_notify",
]

CLIENTS = ("claude-code", "codex", "opencode")
SERVER_KEY = "memories"
KEYRING_SERVICE = "memories-agent"
_BEGIN = "# >>> memories agent connect (managed; `memories agent disconnect {name}` removes it)"
_END = "# <<< memories agent connect"
log = logging.getLogger(__name__)
# Codex starts MCP servers with only HOME, LOGNAME, PATH, SHELL, USER, LANG, LC_ALL, TERM,
# TMPDIR, TZ (openai/codex codex-rs/rmcp-client/src/utils.rs, DEFAULT_ENV_VARS) plus the
# names its `env_vars` lists. These two let a keyring token (Secret Service on the session
# bus) be read there; the 0600 file needs nothing (AG-11).
CODEX_FORWARDED_ENV = ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")


# -- where things are ------------------------------------------------------------------------
def agent_name(client: str, project: Path | None) -> str:
    """AG-11: one grant per client and project. The user-level connect is the client's name;
    a project's is ``CLIENT-FOLDER-HASH`` (the folder's name for people, a digest of its
    resolved path so two folders of the same name never share a grant)."""
    if client not in CLIENTS:
        raise MemoriesError("invalid_input", "The client must be claude-code, codex or opencode.")
    if project is None:
        return client
    import hashlib

    resolved = str(project.resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", project.resolve().name.lower()).strip("-")[: 31 - len(client) - 8]
    return _check_name("-".join(p for p in (client, slug.strip("-"), digest) if p))


def agent_command(home: Path, name: str) -> list[str]:
    """The exact command line a client starts: absolute paths only, no token, no shell."""
    exe = Path(sys.executable).parent / ("memories.exe" if os.name == "nt" else "memories")
    if not exe.is_file():
        found = shutil.which("memories")
        exe = Path(found) if found else Path()
    # The client starts this in the project's folder: the interpreter fallback runs with -P
    # so nothing from that folder is imported (SPEC ST-11, engine/launch.py).
    if str(exe) not in ("", "."):
        prefix = [str(exe.resolve())]
    else:
        # absolute(), not resolve(): a venv's python is a symlink to the base interpreter,
        # and only the unresolved path finds the venv (and so the engine) again.
        prefix = [str(Path(sys.executable).absolute()), *ISOLATION_FLAGS, "-m", "engine.cli"]
    return [*prefix, "--home", str(home.resolve()), "mcp", "--agent", name]


def config_path(client: str, project: Path | None, user_home: Path | None = None) -> Path:
    base = user_home if user_home is not None else Path.home()
    if client == "claude-code":
        return project / ".mcp.json" if project else base / ".claude.json"
    if client == "codex":
        if project:
            return project / ".codex" / "config.toml"
        codex_home = os.environ.get("CODEX_HOME")
        return (Path(codex_home) if codex_home and os.path.isabs(codex_home) else base / ".codex") / "config.toml"
    if client == "opencode":
        if project:
            return project / "opencode.json"
        xdg = os.environ.get("XDG_CONFIG_HOME")
        return (Path(xdg) if xdg and os.path.isabs(xdg) else base / ".config") / "opencode" / "opencode.json"
    raise MemoriesError("invalid_input", "The client must be claude-code, codex or opencode.")


# -- atomic small-file writes ------------------------------------------------------------------
def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    if path.is_symlink():
        raise MemoriesError("permission_denied", f"Refusing to write through a symlink: {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".memories-", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode_of(path: Path, default: int) -> int:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return default


# -- client configs --------------------------------------------------------------------------
def _json_entry(client: str, command: list[str]) -> tuple[str, dict[str, Any]]:
    if client == "claude-code":
        return "mcpServers", {"type": "stdio", "command": command[0], "args": command[1:]}
    return "mcp", {"type": "local", "command": command, "enabled": True}


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        raise MemoriesError("invalid_input", f"{path} is not valid JSON; fix it first, nothing was changed.") from None
    if not isinstance(data, dict):
        raise MemoriesError("invalid_input", f"{path} does not hold a JSON object; nothing was changed.")
    return data


def _toml_block(name: str, command: list[str]) -> str:
    args = ", ".join(json.dumps(a) for a in command[1:])
    forwarded = ", ".join(json.dumps(v) for v in CODEX_FORWARDED_ENV)
    table = f"[mcp_servers.{SERVER_KEY}]\ncommand = {json.dumps(command[0])}\nargs = [{args}]\nenv_vars = [{forwarded}]\n"
    return f"{_BEGIN.format(name=name)}\n{table}{_END}\n"


def _strip_block(text: str) -> str:
    start = text.find("# >>> memories agent connect")
    if start < 0:
        return text
    end = text.find(_END, start)
    if end < 0:
        raise MemoriesError("invalid_input", "The managed Memories block in the Codex config has no end marker; fix it first.")
    end += len(_END)
    if text[end : end + 1] == "\n":
        end += 1
    return text[:start] + text[end:]


def _current_bytes(path: Path) -> bytes | None:
    """A config file's bytes before connect merges into it (None: no file); never through a symlink."""
    if path.is_symlink():
        raise MemoriesError("permission_denied", f"Refusing to write through a symlink: {path}; nothing was changed.")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def prepare_config(client: str, path: Path, name: str, command: list[str]) -> tuple[bytes | None, bytes]:
    """The config's bytes now (None: no file) and with our entry merged; writes nothing.

    Every refusal (unparsable file, a table of the user's own, a symlink) happens here,
    before connect changes anything (AG-11)."""
    try:
        old = _current_bytes(path)
    except IsADirectoryError:
        raise MemoriesError("invalid_input", f"{path} is a directory; nothing was changed.") from None
    if client == "codex":
        try:
            text_old = (old or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise MemoriesError("invalid_input", f"{path} is not valid TOML; fix it first, nothing was changed.") from None
        rest = _strip_block(text_old)
        try:
            parsed = tomllib.loads(rest)
        except tomllib.TOMLDecodeError:
            raise MemoriesError("invalid_input", f"{path} is not valid TOML; fix it first, nothing was changed.") from None
        if SERVER_KEY in parsed.get("mcp_servers", {}):
            raise MemoriesError(
                "invalid_input", f"{path} already has an [mcp_servers.{SERVER_KEY}] table of its own; remove it first."
            )
        text = rest + ("\n" if rest and not rest.endswith("\n") else "") + _toml_block(name, command)
        tomllib.loads(text)  # what we write must parse
        return old, text.encode()
    data = _read_json(path)
    created = data is None
    data = {} if data is None else data
    if created and client == "opencode":
        data["$schema"] = "https://opencode.ai/config.json"
    section, entry = _json_entry(client, command)
    servers = data.get(section)
    if servers is not None and not isinstance(servers, dict):
        raise MemoriesError("invalid_input", f"{path}: '{section}' is not an object; nothing was changed.")
    servers = dict(servers or {})
    if servers.get(SERVER_KEY) == entry and old is not None:
        return old, old
    servers[SERVER_KEY] = entry
    data[section] = servers
    return old, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def put_config(path: Path, data: bytes | None) -> None:
    """Write ``data`` to ``path`` atomically (keeping its mode), or remove it for None."""
    if data is None:
        path.unlink(missing_ok=True)
    else:
        _write_atomic(path, data, _mode_of(path, 0o644))


def write_config(client: str, path: Path, name: str, command: list[str]) -> bool:
    """Merge the server entry into ``path``; returns whether the file was created."""
    old, new = prepare_config(client, path, name, command)
    if new != old:
        put_config(path, new)
    return old is None


def remove_config(client: str, path: Path, created: bool) -> bool:
    """Remove our server entry (only ours); delete the file if connect created it and nothing else is left."""
    if client == "codex":
        try:
            old = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return False
        rest = _strip_block(old)
        if rest == old:
            return False
        if created and not rest.strip():
            path.unlink()
        else:
            _write_atomic(path, rest.encode(), _mode_of(path, 0o644))
        return True
    data = _read_json(path)
    if data is None:
        return False
    section = "mcpServers" if client == "claude-code" else "mcp"
    servers = data.get(section)
    if not isinstance(servers, dict) or SERVER_KEY not in servers:
        return False
    entry = servers[SERVER_KEY]
    command = entry.get("args", []) if client == "claude-code" else entry.get("command", [])
    if not (isinstance(command, list) and "--agent" in command):
        return False  # a `memories` entry the user wrote by hand: not ours to remove
    del servers[SERVER_KEY]
    if not servers:
        del data[section]
    leftover = {k: v for k, v in data.items() if k != "$schema"}
    if created and not leftover:
        path.unlink()
    else:
        _write_atomic(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode(), _mode_of(path, 0o644))
    return True


# -- automatic capture: the client's own hooks ---------------------------------------------
# Claude Code runs each hook command with a JSON object on stdin that names the session's
# `transcript_path` (https://code.claude.com/docs/en/hooks): Stop after every answer,
# SessionEnd when the session closes.
CLAUDE_HOOK_EVENTS = ("Stop", "SessionEnd")


def hooks_path(client: str, project: Path | None, user_home: Path | None = None) -> Path | None:
    """Where connect installs the capture hooks (None: this client has no such hooks here).

    Codex's is its ``notify`` program, a key of the same config.toml as the server table."""
    if client == "codex":
        return config_path(client, project, user_home)
    if client != "claude-code":
        return None
    base = project if project is not None else (user_home if user_home is not None else Path.home())
    return base / ".claude" / "settings.json"


def capture_command(home: Path, name: str) -> str:
    """The hook's shell command line: ``memories --home HOME agent capture NAME`` (absolute paths)."""
    words = agent_command(home, name)[:-3]  # drop "mcp --agent NAME"
    return shlex.join([*words, "agent", "capture", name])


def _is_ours(entry: Any, command: str) -> bool:
    hooks = entry.get("hooks") if isinstance(entry, dict) else None
    return isinstance(hooks, list) and any(isinstance(h, dict) and h.get("command") == command for h in hooks)


def prepare_hooks(path: Path, command: str) -> tuple[bytes | None, bytes]:
    """The settings file now and with our Stop/SessionEnd hooks merged; writes nothing."""
    old = _current_bytes(path)
    data = _read_json(path) or {}
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise MemoriesError("invalid_input", f"{path}: 'hooks' is not an object; nothing was changed.")
    hooks = dict(hooks)
    for event in CLAUDE_HOOK_EVENTS:
        entries = hooks.get(event, [])
        if not isinstance(entries, list):
            raise MemoriesError("invalid_input", f"{path}: hooks.{event} is not a list; nothing was changed.")
        if not any(_is_ours(e, command) for e in entries):
            hooks[event] = [*entries, {"hooks": [{"type": "command", "command": command, "timeout": 60}]}]
    if data.get("hooks") == hooks and old is not None:
        return old, old
    data["hooks"] = hooks
    return old, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def remove_hooks(path: Path, command: str, created: bool) -> bool:
    """Remove our hook entries (only ours); delete the file if connect created it and nothing else is left."""
    data = _read_json(path)
    if data is None or not isinstance(data.get("hooks"), dict):
        return False
    hooks = dict(data["hooks"])
    changed = False
    for event in CLAUDE_HOOK_EVENTS:
        entries = hooks.get(event)
        if isinstance(entries, list):
            kept = [e for e in entries if not _is_ours(e, command)]
            changed |= len(kept) != len(entries)
            if kept:
                hooks[event] = kept
            else:
                hooks.pop(event, None)
    if not changed:
        return False
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks")
    if created and not data:
        path.unlink()
        with contextlib.suppress(OSError):  # the .claude folder connect may have made, if empty
            path.parent.rmdir()
    else:
        _write_atomic(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode(), _mode_of(path, 0o644))
    return True


# -- automatic capture: Codex's notify program ---------------------------------------------
# Codex runs the argv of the top-level ``notify`` key after every turn, with one more argument:
# a JSON object {"type": "agent-turn-complete", "thread-id", "turn-id", "cwd", "client",
# "input-messages", "last-assistant-message"} (openai/codex codex-rs/hooks/src/legacy_notify.rs),
# stdin/stdout/stderr on the null device, not waited for. There is one notify per config, so a
# user's own is chained: our argv carries it (``--chain JSON``), capture runs it first with the
# same argument, and disconnect puts it back. Ours sits at the top of the file (a top-level key
# must come before every table) between two marker comments.
CODEX_NOTIFY_FLAG = "--codex-notify"
_NOTIFY_BEGIN = "# >>> memories agent capture (managed; `memories agent disconnect {name}` removes it)"
_NOTIFY_END = "# <<< memories agent capture"


def notify_command(home: Path, name: str, chain: list[str] | None) -> list[str]:
    """Codex's ``notify`` argv: ``memories --home HOME agent capture --codex-notify [--chain JSON] NAME``."""
    words = agent_command(home, name)[:-3]  # drop "mcp --agent NAME"
    chained = ["--chain", json.dumps(chain, ensure_ascii=False)] if chain else []
    return [*words, "agent", "capture", CODEX_NOTIFY_FLAG, *chained, name]


def _is_our_notify(value: Any) -> bool:
    return isinstance(value, list) and CODEX_NOTIFY_FLAG in value and "capture" in value


def chained_notify(value: Any) -> list[str] | None:
    """The user's notify that our argv runs first (None: none)."""
    if not _is_our_notify(value) or "--chain" not in value:
        return None
    at = value.index("--chain") + 1
    try:
        chain = json.loads(value[at]) if at < len(value) else None
    except ValueError:
        return None
    return [str(w) for w in chain] if isinstance(chain, list) and chain else None


def _split_notify(text: str) -> tuple[str, Any]:
    """The text without our notify block, and the notify that block held (None: no block)."""
    start = text.find("# >>> memories agent capture")
    if start < 0:
        return text, None
    end = text.find(_NOTIFY_END, start)
    if end < 0:
        raise MemoriesError(
            "invalid_input", "The managed Memories notify block in the Codex config has no end marker; fix it first."
        )
    end += len(_NOTIFY_END)
    if text[end : end + 1] == "\n":
        end += 1
    block = text[start:end]
    try:
        ours = tomllib.loads(block).get("notify")
    except tomllib.TOMLDecodeError:
        ours = None
    return text[:start] + text[end:], ours


def _notify_words(value: Any, path: Path) -> list[str] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and value and all(isinstance(w, str) for w in value)):
        raise MemoriesError("invalid_input", f"{path}: notify is not a list of strings; fix it first, nothing was changed.")
    return list(value)


def prepare_notify(path: Path, config: bytes, home: Path, name: str, inherited: Any = None) -> bytes:
    """The Codex config ``config`` with our notify in it; writes nothing.

    The notify it replaces is chained: the file's own, else for a project ``inherited`` (the
    user config's, which a project's notify overrides in Codex); a notify of ours already there
    keeps what it chained."""
    import tomlkit

    text, ours = _split_notify(config.decode("utf-8"))
    if ours is not None:
        chain = chained_notify(ours)
    else:
        doc = tomlkit.parse(text)
        chain = _notify_words(doc.get("notify"), path)
        if chain is not None:
            del doc["notify"]
            text = tomlkit.dumps(doc)
        elif inherited is not None and not _is_our_notify(inherited):
            chain = _notify_words(inherited, path)
    if chain is not None and _is_our_notify(chain):
        chain = chained_notify(chain)
    line = tomlkit.dumps({"notify": notify_command(home, name, chain)})
    out = f"{_NOTIFY_BEGIN.format(name=name)}\n{line}{_NOTIFY_END}\n{text}"
    tomllib.loads(out)  # what we write must parse
    return out.encode()


def user_notify(user_home: Path | None = None) -> Any:
    """The notify of the user's Codex config (what a project's notify replaces), or None."""
    try:
        return tomllib.loads(config_path("codex", None, user_home).read_text(encoding="utf-8")).get("notify")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


def remove_notify(path: Path, created: bool) -> bool:
    """Remove our notify (and put back the one it chained); delete the file if connect created it and nothing is left."""
    import tomlkit

    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    rest, ours = _split_notify(old)
    if ours is None:
        return False
    chain = chained_notify(ours)
    if chain is not None:
        rest = tomlkit.dumps({"notify": chain}) + rest
    if created and not rest.strip():
        path.unlink()
        with contextlib.suppress(OSError):  # the .codex folder connect may have made, if empty
            path.parent.rmdir()
    else:
        _write_atomic(path, rest.encode(), _mode_of(path, 0o644))
    return True


# -- tokens ---------------------------------------------------------------------------------
def _keyring_user(home: Path, name: str) -> str:
    return f"{home.resolve()}:{name}"


def ensure_session_bus() -> None:
    """Find the user's session bus when the client passed no D-Bus address (AG-11).

    Codex forwards only a few variables to its servers; without DBUS_SESSION_BUS_ADDRESS the
    Secret Service is unreachable. The bus of a systemd user session is a fixed socket,
    ``$XDG_RUNTIME_DIR/bus`` (``/run/user/UID/bus``): use it when it exists and is ours."""
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS") or not hasattr(os, "getuid"):
        return
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    bus = Path(runtime) / "bus"
    try:
        st = bus.stat()
    except OSError:
        return
    import stat as stat_mod

    if stat_mod.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={bus}"


def _keyring() -> Any | None:
    """The keyring module if a real backend is there (not the 'fail' or a null one), else None."""
    if os.environ.get("MEMORIES_AGENT_KEYRING") == "0":
        return None
    ensure_session_bus()
    try:
        import keyring
        from keyring.backends import fail

        backend = keyring.get_keyring()
    except Exception:  # a broken backend configuration is the same as none
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 0) <= 0:
        return None
    return keyring


def _token_file(home: Path, name: str) -> Path:
    return _agents_dir(home) / f"{_check_name(name)}.token"


def check_token_store(home: Path, name: str) -> None:
    """Refuse before anything changes when the token could not be stored in the data home (AG-11)."""
    for path in (_agents_dir(home), _token_file(home, name)):
        if path.is_symlink():
            raise MemoriesError("permission_denied", f"Refusing to write through a symlink: {path}; nothing was changed.")
    for path in (_token_file(home, name),):
        if path.is_dir():
            raise MemoriesError("invalid_input", f"{path} is a directory; nothing was changed.")


def save_token(home: Path, name: str, token: str) -> str:
    """Store the token; returns where: ``keyring`` or ``file``."""
    ring = _keyring()
    if ring is not None:
        try:
            ring.set_password(KEYRING_SERVICE, _keyring_user(home, name), token)
        except Exception as exc:  # a locked or absent keyring daemon: fall back to the file
            log.info("keyring unavailable (%s); the token goes to a 0600 file", type(exc).__name__)
        else:
            _token_file(home, name).unlink(missing_ok=True)
            return "keyring"
    directory = _agents_dir(home)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    _write_atomic(_token_file(home, name), token.encode(), 0o600)
    return "file"


def load_token(home: Path, name: str) -> str | None:
    try:
        token = _token_file(home, name).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if token:
        return token
    ring = _keyring()
    if ring is None:
        return None
    try:
        found = ring.get_password(KEYRING_SERVICE, _keyring_user(home, name))
    except Exception:
        return None
    return str(found) if found else None


def delete_token(home: Path, name: str) -> None:
    _token_file(home, name).unlink(missing_ok=True)
    ring = _keyring()
    if ring is not None:
        with contextlib.suppress(Exception):  # nothing stored there
            ring.delete_password(KEYRING_SERVICE, _keyring_user(home, name))


# -- what connect wrote ------------------------------------------------------------------------
def save_manifest(home: Path, manifest: Manifest) -> None:
    directory = _agents_dir(home)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = json.dumps(manifest.to_json(), indent=2) + "\n"
    _write_atomic(directory / f"{_check_name(manifest.name)}.json", data.encode(), 0o600)


def delete_manifest(home: Path, name: str) -> None:
    (_agents_dir(home) / f"{_check_name(name)}.json").unlink(missing_ok=True)


def reconnect_command(home: Path, name: str) -> str:
    """The command that repairs agent ``name``'s grant or token (named in the server's errors)."""
    try:
        manifest = load_manifest(home, name)
    except MemoriesError:
        manifest = None
    if manifest is None:
        return f"memories agent connect {name}"
    project = f" --project {shlex.quote(manifest.project)}" if manifest.project else ""
    scope = f" --scope {manifest.scope}" if manifest.scope != "read_write" else ""
    mode = manifest.transcripts_scope or ("all" if manifest.transcripts else "none")
    default = "this-project" if manifest.project else "none"
    transcripts = f" --transcripts {mode}" if mode != default else ""
    return f"memories agent connect {manifest.client}{project}{scope}{transcripts}"
