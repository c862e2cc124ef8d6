"""Typed requests of the settings ops (DT-9); the names and checks are engine/settings.py's."""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import Request

__all__ = ["SettingsGet", "SettingsSet"]

SettingName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
SettingValue = bool | int | float | Annotated[str, msgspec.Meta(max_length=64)]


class SettingsGet(Request, tag="settings_get"):
    pass


class SettingsSet(Request, tag="settings_set"):
    name: SettingName
    value: SettingValue
