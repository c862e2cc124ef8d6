"""Dashboard Settings page (DT-9): the settings people look for, each saying where it lives.

A route module of its own, like the Trash and Agents pages. The engine's settings (idle
lock, lock on screen lock, clipboard clear time, theme) go through the gateway's two fixed
requests, ``settings_get`` and ``settings_set``, which check, store and audit them (the CLI's
`memories config` uses the same ops, so the two always agree). Start at login is this host's
login entry (desktop/autostart.py through the tray launcher's helpers, as `memories
autostart` writes it).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from desktop.autostart import disable_entry, enable_entry, entries_status
from desktop.dashboard.security import json_body
from engine.errors import MemoriesError
from engine.home import data_home

__all__ = ["register", "screen_lock_support", "START_AT_LOGIN"]

START_AT_LOGIN = "start_at_login"
# Only the names and values the engine's table accepts travel on; the engine checks them again.
# The engine is not there (not started, restarting after a lock, busy): the page says so.
_ENGINE_AWAY = frozenset({"daemon_unavailable", "timeout", "busy", "not_initialized"})
_ENGINE_NAMES = frozenset({"idle_lock_minutes", "lock_on_screen_lock", "clipboard_clear_seconds", "theme", "transcript_watcher"})


def screen_lock_support(platform: str = sys.platform) -> dict[str, Any]:
    """What "lock when the screen locks" listens to on this platform, and whether it is built."""
    if platform.startswith("linux"):
        return {
            "implemented": True,
            "how": "The tray listens on D-Bus: logind's PrepareForSleep and session Lock (system bus) "
            "and the desktop's ScreenSaver ActiveChanged (session bus).",
        }
    if platform == "darwin":
        return {
            "implemented": False,
            "how": "macOS announces these with the com.apple.screenIsLocked distributed notification and "
            "NSWorkspace's willSleep notification; the tray does not listen to them yet.",
        }
    if platform == "win32":
        return {
            "implemented": False,
            "how": "Windows announces these with WTS session notifications (WTS_SESSION_LOCK) and "
            "WM_POWERBROADCAST (PBT_APMSUSPEND); the tray does not listen to them yet.",
        }
    return {"implemented": False, "how": "This platform has no screen-lock signal the tray knows."}


def _project(raw: dict[str, Any]) -> dict[str, Any]:
    """The engine's answer, kept to the fields the page shows."""
    settings = raw.get("settings")
    out: dict[str, Any] = {}
    for name, entry in (settings if isinstance(settings, dict) else {}).items():
        if name not in _ENGINE_NAMES or not isinstance(entry, dict):
            continue
        raw_stored = entry.get("stored_in")
        stored: dict[str, Any] = raw_stored if isinstance(raw_stored, dict) else {}
        out[name] = {
            "value": entry.get("value"),
            "default": entry.get("default"),
            "summary": str(entry.get("summary", "")),
            "min": entry.get("min"),
            "max": entry.get("max"),
            "choices": [str(c) for c in entry.get("choices", []) if isinstance(c, str)],
            "stored_in": f"{stored.get('file', '')} [{stored.get('table', '')}] {stored.get('key', '')}",
        }
    return out


def _start_at_login() -> dict[str, Any]:
    entries = entries_status()["entries"]
    return {
        "value": any(e["enabled"] for e in entries),
        "stored_in": ", ".join(str(e["path"]) for e in entries if e["enabled"]) or str(entries[0]["path"]),
        "entries": entries,
    }


def _chosen_home(config_file: object) -> Path | None:
    """The data home to write into a login entry: only one other than the default (as the CLI does)."""
    if not isinstance(config_file, str) or not config_file:
        return None
    home = Path(config_file).parent
    return None if home == Path(data_home(None)) else home


def _value(raw: object) -> bool | int | float | str:
    if isinstance(raw, (bool, int, float)) or (isinstance(raw, str) and len(raw) <= 64):
        return raw
    raise MemoriesError("invalid_input", "A setting's value is a number, true/false or a short word.")


def register(app: web.Application, ctx: Any) -> None:
    script = (resources.files("desktop.dashboard") / "static" / "settings.js").read_bytes()

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def show(request: web.Request) -> web.Response:
        try:
            raw = await ctx.engine(ctx.gateway.settings)
        except MemoriesError as exc:
            if exc.code not in _ENGINE_AWAY:
                raise
            # Every page asks at load (for the theme): an engine that is not there yet is a
            # state the page shows, not a failed request in the browser's console.
            return web.json_response({"available": False, "message": exc.message})
        login = await ctx.engine(_start_at_login)
        return web.json_response(
            {
                "available": True,
                "settings": {**_project(raw), START_AT_LOGIN: login},
                "screen_lock": screen_lock_support(),
                "tray": ctx.mode == "tray",
            }
        )

    async def change(request: web.Request) -> web.Response:
        payload = json_body(await request.read(), "The setting")
        if not isinstance(payload, dict) or set(payload) != {"name", "value"}:
            raise MemoriesError("invalid_input", "A change names exactly one setting (`name`) and its `value`.")
        name, value = payload["name"], _value(payload["value"])
        if name == START_AT_LOGIN:
            if not isinstance(value, bool):
                raise MemoriesError("invalid_input", "start_at_login is on or off (true or false).")
            if value:
                raw = await ctx.engine(ctx.gateway.settings)
                home = _chosen_home(raw.get("config_file"))
                await ctx.engine(lambda: enable_entry("auto", home))
            else:
                await ctx.engine(lambda: disable_entry("auto"))
            login = await ctx.engine(_start_at_login)
            return web.json_response({"name": name, "value": login["value"], "stored_in": login["stored_in"]})
        if name not in _ENGINE_NAMES:
            raise MemoriesError("invalid_input", "Unknown setting.")
        result = await ctx.engine(lambda: ctx.gateway.set_setting(name, value))
        return web.json_response({"name": name, "value": result.get("value")})

    app.router.add_get("/static/settings.js", serve_script)
    app.router.add_get("/api/settings", show)
    app.router.add_post("/api/settings", change)
