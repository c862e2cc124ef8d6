"""The settings a person changes (SPEC DT-9): one table of names, where each is stored, its
checks, and reading/writing them in config.toml.

`memories config`, the engine's ``settings_get``/``settings_set`` ops and the dashboard's
Settings page all go through this table, so they can never disagree on a name, a range or a
file. config.toml never holds secrets; these keys are no exception. Writes keep the rest of
the file as the person wrote it (comments, order, other tables: tomlkit) and replace it
atomically.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError

__all__ = ["Setting", "SETTINGS", "THEMES", "WATCHER_MODES", "spec", "check", "read_settings", "write_setting", "describe"]

THEMES = ("system", "light", "dark")
WATCHER_MODES = ("auto", "on", "off")  # AG-11: desktop/tray/transcript_watcher.py
_TRUE = ("true", "on", "yes", "1")
_FALSE = ("false", "off", "no", "0")


@dataclass(frozen=True)
class Setting:
    name: str
    table: str
    key: str
    kind: type  # float (a number), int, bool or str (one of ``choices``)
    default: Any
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()
    summary: str = ""


# Bounds: a lock sooner than a minute would lock while someone reads; a day is the longest
# an unattended unlocked vault is allowed to mean "on purpose". The clipboard keeps a copied
# secret from 1 s to an hour (engine/cli/clipboard.py clears it only if it is still ours).
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "idle_lock_minutes", "engine", "idle_lock_minutes", float, 15, 1, 1440,
            summary="Lock the vault after this many minutes without use.",
        ),
        Setting(
            "lock_on_screen_lock", "desktop", "lock_on_screen_lock", bool, True,
            summary="The tray locks the vault when the screen locks or the machine suspends.",
        ),
        Setting(
            "clipboard_clear_seconds", "clipboard", "clear_seconds", int, 30, 1, 3600,
            summary="A copied secret is cleared from the clipboard after this many seconds.",
        ),
        Setting(
            "theme", "desktop", "theme", str, "system", choices=THEMES,
            summary="The dashboard's colours: the system's choice, light or dark.",
        ),
        Setting(
            "transcript_watcher", "desktop", "transcript_watcher", str, "auto", choices=WATCHER_MODES,
            summary="The tray imports agent sessions as they grow while unlocked: auto (when an agent is "
            "connected with transcripts), on or off.",
        ),
    )
}  # fmt: skip


def spec(name: object) -> Setting:
    if not isinstance(name, str) or name not in SETTINGS:
        raise MemoriesError("invalid_input", f"Unknown setting; the settings are {', '.join(SETTINGS)}.")
    return SETTINGS[name]


def check(name: object, value: object) -> Any:
    """The value as stored, from JSON (typed) or the command line (text); ``invalid_input`` otherwise.

    The message names the setting and its allowed values, never the value given (it could be
    anything a person pasted)."""
    s = spec(name)
    if s.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise MemoriesError("invalid_input", f"{s.name} is on or off (true or false).")
    if s.kind is str:
        if isinstance(value, str) and value.strip().lower() in s.choices:
            return value.strip().lower()
        raise MemoriesError("invalid_input", f"{s.name} is one of {', '.join(s.choices)}.")
    number = _number(value)
    whole = s.kind is int
    if number is None or (whole and number != int(number)) or not s.low <= number <= s.high:
        what = "a whole number" if whole else "a number"
        raise MemoriesError("invalid_input", f"{s.name} is {what} from {s.low:g} to {s.high:g}.")
    return int(number) if whole or number == int(number) else number


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None  # `true` is not a duration
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and 0 < len(value) <= 32:
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _stored(s: Setting, data: dict[str, Any]) -> Any:
    """The file's value when it is one this setting accepts, else the default (as load_config
    treats a bad ``[engine]`` value: the engine starts, with the default)."""
    table = data.get(s.table)
    raw = table.get(s.key) if isinstance(table, dict) else None
    if raw is None:
        return s.default
    if s.name == "idle_lock_minutes":
        # The engine honours any positive number here (tests use fractions of a minute).
        number = _number(raw)
        return (int(number) if number == int(number) else number) if number and number > 0 else s.default
    try:
        return check(s.name, raw)
    except MemoriesError:
        return s.default


def _load(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}  # unreadable: every setting is at its default, as the engine runs


def read_settings(config_file: Path) -> dict[str, Any]:
    """Each setting's effective value (the file's, else the default)."""
    data = _load(config_file)
    return {name: _stored(s, data) for name, s in SETTINGS.items()}


def describe(config_file: Path) -> dict[str, Any]:
    """What the page and ``memories config`` show: value, default, summary and where it is stored."""
    values = read_settings(config_file)
    out: dict[str, Any] = {}
    for name, s in SETTINGS.items():
        entry: dict[str, Any] = {
            "value": values[name],
            "default": s.default,
            "summary": s.summary,
            "stored_in": {"file": str(config_file), "table": s.table, "key": s.key},
        }
        if s.choices:
            entry["choices"] = list(s.choices)
        if s.kind in (int, float):
            entry["min"], entry["max"] = s.low, s.high
        out[name] = entry
    return out


def write_setting(config_file: Path, name: str, value: object) -> tuple[Any, Any]:
    """Check and store one setting; returns (old, new) effective values.

    A config.toml that does not parse is refused (``invalid_config``) rather than rewritten:
    the person's file is never replaced by a guess."""
    import tomlkit  # only writers need it; reading stays on the stdlib
    from tomlkit.exceptions import TOMLKitError

    s = spec(name)
    new = check(name, value)
    try:
        text = config_file.read_text("utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError):
        raise MemoriesError("io_error", f"{config_file} could not be read; nothing was changed.") from None
    try:
        document = tomlkit.parse(text)
        old = _stored(s, tomllib.loads(text))
        table = document.get(s.table)
        if table is None:
            table = tomlkit.table()
            document[s.table] = table
        elif not isinstance(table, dict):
            raise MemoriesError("invalid_config", f"[{s.table}] in {config_file} is not a table; nothing was changed.")
        table[s.key] = new
        updated = tomlkit.dumps(document)
    except (TOMLKitError, tomllib.TOMLDecodeError):
        raise MemoriesError("invalid_config", f"{config_file} is not valid TOML; fix it first. Nothing was changed.") from None
    config_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = config_file.with_name(config_file.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(updated)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, config_file)  # never a half-written config
    return old, new
