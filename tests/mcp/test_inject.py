"""`memories inject` and `memories mcp config` (AG-4): no data home, no daemon, careful publishing."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.skills import inject as injector
from tests.helpers import Cli

SKILL = (Path(__file__).resolve().parents[2] / "assets" / "skills" / "memories" / "SKILL.md").read_bytes()
USER_PATHS = {
    "claude-code": Path(".claude/skills/memories/SKILL.md"),
    "codex": Path(".agents/skills/memories/SKILL.md"),
    "opencode": Path(".config/opencode/skills/memories/SKILL.md"),
}
PROJECT_PATHS = {
    "claude-code": Path(".claude/skills/memories/SKILL.md"),
    "codex": Path(".agents/skills/memories/SKILL.md"),
    "opencode": Path(".opencode/skills/memories/SKILL.md"),
}


@pytest.fixture
def user(tmp_path: Path) -> Cli:
    """A CLI whose HOME is a scratch directory and whose data home does not exist."""
    home = tmp_path / "user"
    home.mkdir()
    return Cli(home=tmp_path / "data-home", env={"HOME": str(home), "XDG_CONFIG_HOME": ""})


def user_home(cli: Cli) -> Path:
    return Path(cli.env["HOME"])


def assert_no_data_home(cli: Cli) -> None:
    assert not cli.home.exists()
    assert not Paths(cli.home).socket.exists()


def test_inject_all_user_scope_then_identical_rerun(user: Cli) -> None:
    """AG-4: installs into each client's discovery directory; a re-run keeps identical files; no data home."""
    installed = user.ok("inject", "--client", "all")["installed"]
    home = user_home(user)
    assert {(r["client"], r["action"]) for r in installed} == {(c, "created") for c in USER_PATHS}
    for client, rel in USER_PATHS.items():
        path = home / rel
        assert path.read_bytes() == SKILL, client
        assert {r["path"] for r in installed if r["client"] == client} == {str(path)}
    stamps = {c: (home / rel).stat().st_mtime_ns for c, rel in USER_PATHS.items()}
    again = user.ok("inject", "--client", "all")["installed"]
    assert {r["action"] for r in again} == {"unchanged"}
    assert stamps == {c: (home / rel).stat().st_mtime_ns for c, rel in USER_PATHS.items()}
    assert_no_data_home(user)
    # The skill is the packaged one: versioned frontmatter, no path, token or vault ID.
    text = SKILL.decode()
    assert text.startswith("---\nname: memories\n") and 'version: "3"' in text
    assert str(home) not in text and "mem_" not in text


def test_inject_project_scope_keeps_siblings_and_config(user: Cli, tmp_path: Path) -> None:
    """AG-4: project scope writes under the project; sibling skills and client config are untouched."""
    project = tmp_path / "proj"
    (project / ".claude" / "skills" / "other").mkdir(parents=True)
    (project / ".claude" / "skills" / "other" / "SKILL.md").write_text("other skill")
    (project / ".claude" / "settings.json").write_text('{"keep": true}')
    (project / ".opencode").mkdir()
    (project / ".opencode" / "opencode.json").write_text("{}")
    user.ok("inject", "--client", "all", "--scope", "project", "--dir", str(project))
    for rel in PROJECT_PATHS.values():
        assert (project / rel).read_bytes() == SKILL
    assert (project / ".claude" / "skills" / "other" / "SKILL.md").read_text() == "other skill"
    assert (project / ".claude" / "settings.json").read_text() == '{"keep": true}'
    assert (project / ".opencode" / "opencode.json").read_text() == "{}"
    assert sorted(p.name for p in (project / ".claude" / "skills" / "memories").iterdir()) == ["SKILL.md"]
    assert_no_data_home(user)


def test_inject_different_content_needs_force_and_changes_nothing(user: Cli) -> None:
    """AG-4: a differing file fails the whole run before anything is written; --force replaces it."""
    home = user_home(user)
    claude = home / USER_PATHS["claude-code"]
    claude.parent.mkdir(parents=True)
    claude.write_text("my own edits")
    error = user.err("inject", "--client", "all")
    assert error["code"] == "invalid_input" and "--force" in error["message"]
    assert claude.read_text() == "my own edits"
    assert not (home / USER_PATHS["codex"]).exists()  # pre-checked: no other target was written either
    assert not (home / USER_PATHS["opencode"]).exists()
    replaced = user.ok("inject", "--client", "all", "--force")["installed"]
    assert {r["client"]: r["action"] for r in replaced} == {"claude-code": "replaced", "codex": "created", "opencode": "created"}
    assert claude.read_bytes() == SKILL
    assert [p.name for p in claude.parent.iterdir()] == ["SKILL.md"]  # no temp file left behind
    assert_no_data_home(user)


def test_inject_refuses_symlinks(user: Cli, tmp_path: Path) -> None:
    """AG-4: a symlinked skill file or skill directory is refused, even with --force."""
    home = user_home(user)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "SKILL.md").write_text("target")
    skill_dir = home / USER_PATHS["claude-code"].parent
    skill_dir.parent.mkdir(parents=True)
    skill_dir.symlink_to(elsewhere, target_is_directory=True)
    for force in ([], ["--force"]):
        assert user.err("inject", "--client", "claude-code", *force)["code"] == "permission_denied"
    assert (elsewhere / "SKILL.md").read_text() == "target"

    codex = home / USER_PATHS["codex"]
    codex.parent.mkdir(parents=True)
    codex.symlink_to(elsewhere / "SKILL.md")
    assert user.err("inject", "--client", "codex", "--force")["code"] == "permission_denied"
    assert (elsewhere / "SKILL.md").read_text() == "target"
    assert_no_data_home(user)


def test_inject_never_overwrites_a_concurrently_created_file(tmp_path: Path) -> None:
    """AG-4: a file created between the pre-check and the publish is kept, not overwritten."""
    home = tmp_path / "user"
    (target,) = injector.targets(["codex"], "user", home=home)
    planned = injector._plan(target, SKILL, force=False)
    assert planned.action == "create"
    target.file.parent.mkdir(parents=True)
    target.file.write_text("written by someone else meanwhile")
    with pytest.raises(MemoriesError) as caught:
        injector._publish(planned, SKILL)
    assert caught.value.code == "conflict"
    assert target.file.read_text() == "written by someone else meanwhile"
    assert [p.name for p in target.file.parent.iterdir()] == ["SKILL.md"]

    # With --force, a file changed after the check is not overwritten either.
    target.file.write_text("version one")
    forced = injector._plan(target, SKILL, force=True)
    target.file.write_text("version two")
    with pytest.raises(MemoriesError):
        injector._publish(forced, SKILL)
    assert target.file.read_text() == "version two"


def test_inject_bad_usage(user: Cli) -> None:
    """API-8: bad input is a typed usage error; nothing is created."""
    assert user.run("inject", "--client", "vim", "--json").returncode == 2
    assert user.run("inject", "--client", "codex", "--scope", "global", "--json").returncode == 2
    assert not (user_home(user) / ".agents").exists()
    assert_no_data_home(user)


def test_mcp_config_snippets(user: Cli) -> None:
    """AG-4 README flow: `memories mcp config --client X` prints a parseable snippet with no token."""
    # The test CLI names its data home explicitly, so the snippet keeps it (a default home is omitted).
    args = ["--home", str(user.home), "mcp"]
    claude = user.ok("mcp", "config", "--client", "claude-code")["config"]
    server = json.loads(claude)["mcpServers"]["memories"]
    assert server["command"] == "memories" and server["args"] == args
    assert server["env"] == {"MEMORIES_MCP_TOKEN": "${MEMORIES_MCP_TOKEN}"}

    codex = tomllib.loads(user.ok("mcp", "config", "--client", "codex")["config"])["mcp_servers"]["memories"]
    assert codex == {"command": "memories", "args": args, "env_vars": ["MEMORIES_MCP_TOKEN"]}

    opencode = user.ok("mcp", "config", "--client", "opencode")["config"]
    local = json.loads(opencode)["mcp"]["memories"]
    assert local["type"] == "local" and local["command"] == ["memories", *args]
    assert local["environment"] == {"MEMORIES_MCP_TOKEN": "{env:MEMORIES_MCP_TOKEN}"}

    http = tomllib.loads(user.ok("mcp", "config", "--client", "codex", "--http", "--port", "9000")["config"])
    assert http["mcp_servers"]["memories"] == {
        "url": "http://127.0.0.1:9000/mcp",
        "bearer_token_env_var": "MEMORIES_MCP_TOKEN",
    }
    assert_no_data_home(user)


def test_mcp_serve_without_token_is_a_typed_error(user: Cli) -> None:
    """AG-1, API-8: no token → `unauthorized`, before any SDK or engine work."""
    env_token = os.environ.get("MEMORIES_MCP_TOKEN")
    assert env_token is None or env_token == ""
    assert user.err("mcp")["code"] == "unauthorized"
    assert_no_data_home(user)
