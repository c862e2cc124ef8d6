"""Issue 19: `--json` output is versioned ("v": 1) and its shapes are pinned (docs/cli-json.md).

The key sets of each command's JSON output are compared with tests/data/cli_json_shapes.json.
A changed shape fails unless "v" was bumped too (then regenerate the fixture with
MEMORIES_UPDATE_JSON_SHAPES=1 and document the change in docs/cli-json.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engine.cli.context import JSON_VERSION
from tests.helpers import Cli

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "cli_json_shapes.json"


def shape(value: Any, path: str = "") -> dict[str, list[str]]:
    """Sorted key sets of every object in ``value``, by path (``items[]`` for list elements)."""
    found: dict[str, list[str]] = {}
    if isinstance(value, dict):
        found[path or "."] = sorted(value)
        for key, child in value.items():
            found.update(shape(child, f"{path}.{key}"))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        merged: set[str] = set()
        for item in value:
            merged |= set(item)
            for sub_path, keys in shape(item, f"{path}[]").items():
                found[sub_path] = sorted(set(found.get(sub_path, [])) | set(keys))
        found[f"{path}[]"] = sorted(merged)
    return found


def _json(cli: Cli, *args: str) -> Any:
    proc = cli.run(*args, "--json")
    assert proc.returncode == 0, f"{args}: {proc.stdout} {proc.stderr}"
    return json.loads(proc.stdout)


def _outputs(vault: Cli) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["status"] = _json(vault, "status")
    out["put"] = _json(vault, "put", "--title", "Shape", "--body", "one", "--tag", "t")
    short = out["put"]["short_id"]
    out["edit"] = _json(vault, "edit", short, "--body", "two")
    out["list"] = _json(vault, "list")
    out["get"] = _json(vault, "get", short)
    out["history"] = _json(vault, "history", short)
    out["diff"] = _json(vault, "diff", short)
    out["search"] = _json(vault, "search", "two")
    out["daemon status"] = _json(vault, "daemon", "status")
    out["help"] = _json(vault, "help", "ids")
    out["error"] = json.loads(vault.run("get", "ffffffff", "--json").stdout)
    out["delete"] = _json(vault, "delete", short)
    out["lock"] = _json(vault, "lock")
    return out


def test_every_json_output_carries_the_version_and_its_pinned_shape(vault: Cli) -> None:
    """Every command's --json object starts with "v"; a shape change without a new "v" fails."""
    outputs = _outputs(vault)
    for name, value in outputs.items():
        assert value.get("v") == JSON_VERSION, name
    shapes = {name: shape(value) for name, value in outputs.items()}
    # Keys whose presence depends on timing (a search's "partial" while the index builds).
    for name in shapes:
        shapes[name] = {p: [k for k in keys if k not in {"warnings", "partial"}] for p, keys in shapes[name].items()}
    if os.environ.get("MEMORIES_UPDATE_JSON_SHAPES") == "1":
        # Shapes pinned by other tests (tests/jobs: `job …`) stay; the ones produced here are replaced.
        kept = json.loads(FIXTURE.read_text())["shapes"] if FIXTURE.exists() else {}
        FIXTURE.write_text(json.dumps({"v": JSON_VERSION, "shapes": {**kept, **shapes}}, indent=1, sort_keys=True) + "\n")
    pinned = json.loads(FIXTURE.read_text())
    if pinned["v"] == JSON_VERSION:
        for name, got in shapes.items():
            assert got == pinned["shapes"].get(name), (
                f'the --json shape of `{name}` changed without bumping "v" (engine/cli/context.py JSON_VERSION); '
                "document it in docs/cli-json.md and regenerate tests/data/cli_json_shapes.json"
            )
    else:
        assert pinned["v"] < JSON_VERSION, "the fixture is newer than the code"
