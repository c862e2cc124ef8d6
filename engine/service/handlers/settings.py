"""Settings ops (DT-9): read and change the settings of engine/settings.py, live.

``settings_set`` writes one key of config.toml (never a secret, never another key), applies it
to the running engine where the engine uses it (the idle lock), and is audited with the
setting's name and new value. The tray and the CLI read the other keys when they act (the
clipboard clearer at each copy, the tray at each screen-lock signal), so every change takes
effect without a restart. No elevation: whoever can reach this socket can already edit
config.toml as the same user; unlocked, so the change is in the audit log.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.service import requests_settings as srq
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.service import Service
from engine.settings import describe, write_setting

__all__ = ["settings_get", "settings_set"]


@op(srq.SettingsGet, needs_unlock=False, lock_free=True, touches_idle=False)
def settings_get(service: Service, request: srq.SettingsGet, caller: Caller) -> dict[str, Any]:
    """Reads config.toml only: answers while another op (an import) holds the service lock."""
    return {"config_file": str(service.paths.config_file), "settings": describe(service.paths.config_file)}


@op(srq.SettingsSet)
def settings_set(service: Service, request: srq.SettingsSet, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    # The dispatcher holds the service lock: no other write of config.toml runs meanwhile.
    old, new = write_setting(service.paths.config_file, request.name, request.value)
    if request.name == "idle_lock_minutes":
        seconds = float(new) * 60
        service.session.idle_seconds = seconds
        service.config = dataclasses.replace(service.config, idle_lock_seconds=seconds)
    audit = service.vault.audit_record(state, "settings_set", caller, outcome="ok", setting=request.name, value=new)
    service.vault.commit(state, [], [], [audit])
    return {"name": request.name, "value": new, "previous": old, "config_file": str(service.paths.config_file)}
