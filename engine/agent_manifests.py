"""What `memories agent connect` recorded per connected agent: ``agents/NAME.json`` in the
data home (client, scope, project, configs and hooks it wrote, whether transcripts are read).

A kernel module (standard library only): the CLI's connect writes these files, and the tray
reads them to decide whether to run its transcript watcher (AG-11), without importing the
agents package.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError

__all__ = ["Manifest", "agents_dir", "check_name", "load_manifest", "manifests"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def agents_dir(home: Path) -> Path:
    return home / "agents"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise MemoriesError("invalid_input", "An agent name is 1-32 lowercase letters, digits, '-' or '_'.")
    return name


@dataclass
class Manifest:
    name: str
    client: str
    scope: str
    token_store: str
    configs: dict[str, bool]  # config path -> connect created the file
    skills: list[str]  # SKILL.md paths connect created
    project: str | None = None  # AG-11: the project this grant is for (None: the user's config)
    transcripts: bool = False
    hooks: dict[str, bool] = field(default_factory=dict)  # settings path -> connect created the file
    transcripts_scope: str = ""  # AG-11: "this-project", "all" or "none" ("": written before the choice existed)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "client": self.client,
            "scope": self.scope,
            "token_store": self.token_store,
            "configs": self.configs,
            "skills": self.skills,
            "project": self.project,
            "transcripts": self.transcripts,
            "hooks": self.hooks,
            "transcripts_scope": self.transcripts_scope,
        }


def load_manifest(home: Path, name: str) -> Manifest | None:
    path = agents_dir(home) / f"{check_name(name)}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Manifest(
            name=str(raw["name"]),
            client=str(raw["client"]),
            scope=str(raw["scope"]),
            token_store=str(raw["token_store"]),
            configs={str(k): bool(v) for k, v in dict(raw["configs"]).items()},
            skills=[str(s) for s in raw["skills"]],
            project=str(raw["project"]) if raw.get("project") else None,
            transcripts=raw.get("transcripts") is True,
            hooks={str(k): bool(v) for k, v in dict(raw.get("hooks") or {}).items()},
            transcripts_scope=str(raw.get("transcripts_scope") or ""),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        raise MemoriesError("invalid_input", f"{path} is damaged; remove it and connect again.") from None


def manifests(home: Path) -> list[Manifest]:
    directory = agents_dir(home)
    if not directory.is_dir():
        return []
    found = [load_manifest(home, p.stem) for p in sorted(directory.glob("*.json")) if _NAME.match(p.stem)]
    return [m for m in found if m is not None]
