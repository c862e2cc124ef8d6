"""A keyring backend for the tests: a JSON file named by $MEMORIES_TEST_KEYRING_FILE.

Selected with PYTHON_KEYRING_BACKEND=tests.mcp.keyring_backend.FileKeyring, it stands in for
the OS keyring (Secret Service, Keychain), which a test machine does not have. It is a fake of
the system component, not of our code: `memories agent connect` talks to it through `keyring`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class FileKeyring(KeyringBackend):
    priority = 1

    def _path(self) -> Path:
        return Path(os.environ["MEMORIES_TEST_KEYRING_FILE"])

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self._path().read_text())
        except FileNotFoundError:
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\n{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}\n{username}"] = password
        self._path().write_text(json.dumps(data))

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        if data.pop(f"{service}\n{username}", None) is None:
            raise PasswordDeleteError("not stored")
        self._path().write_text(json.dumps(data))
