"""`memories agent connect|list|disconnect` (AG-6): one command connects an agent client.

The official MCP client starts the exact command line that connect wrote into the client's
config, with an environment that holds no token: the server must find the token itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import Cli
from tests.mcp.support import REPO, environ_without_token, error_of, grant, result_of, stdio_client
from tests.secret_service import secret_service


@pytest.fixture
def connected(vault: Cli, tmp_path: Path) -> Cli:
    """An elevated vault whose CLI runs with its own user home (configs and skills land there)."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    vault.env.pop("CODEX_HOME", None)
    vault.sudo()
    return vault


def _files_under(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


def _token_file(cli: Cli, name: str) -> Path:
    return cli.home / "agents" / f"{name}.token"


def _server_env(cli: Cli) -> dict[str, str]:
    env = environ_without_token()
    env.pop("MEMORIES_HOME", None)
    env.update(cli.environ())
    env.pop("MEMORIES_MCP_TOKEN", None)
    return env


async def _write_and_search(command: str, args: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with Client(params, read_timeout_seconds=60) as client:
        result_of(await client.call_tool("memory_write", {"title": "Cabin booking", "body": "Lake cabin, week 32"}))
        found = result_of(await client.call_tool("search", {"query": "cabin"}))
        return [r["title"] for r in found["results"]]


def test_connect_claude_code_project_runs_the_written_command_without_a_secret(connected: Cli, tmp_path: Path) -> None:
    """AG-6: grant + token outside the project (0600 file here, no keyring backend) + .mcp.json with
    absolute paths only + skill; the official client runs exactly that command; re-running is idempotent."""
    project = tmp_path / "project"
    project.mkdir()
    out = connected.ok("agent", "connect", "claude-code", "--project", str(project))
    assert out["grant"] == "created" and out["token_store"] == "file"
    name = out["name"]
    assert name.startswith("claude-code-project-") and out["project"] == str(project.resolve())

    config = json.loads((project / ".mcp.json").read_text())
    server = config["mcpServers"]["memories"]
    assert set(server) == {"type", "command", "args"}
    assert os.path.isabs(server["command"]) and Path(server["command"]).is_file()
    assert server["args"] == ["--home", str(connected.home.resolve()), "mcp", "--agent", name]

    token_file = _token_file(connected, name)
    token = token_file.read_text().strip()
    assert len(token) >= 20
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    user_home = Path(connected.env["HOME"])
    for path in _files_under(project, user_home):
        assert token not in path.read_text(errors="replace"), path
    assert (project / ".claude" / "skills" / "memories" / "SKILL.md").is_file()

    titles = asyncio.run(_write_and_search(server["command"], server["args"], _server_env(connected), project))
    assert titles == ["Cabin booking"]

    before = (project / ".mcp.json").read_bytes()
    again = connected.ok("agent", "connect", "claude-code", "--project", str(project))
    assert again["grant"] == "kept"
    assert (project / ".mcp.json").read_bytes() == before
    assert token_file.read_text().strip() == token
    grants = connected.ok("mcp", "grants", "--all")["grants"]
    assert [g["name"] for g in grants] == [name]

    listed = connected.ok("agent", "list")["agents"]
    assert [(a["name"], a["active"], a["token_present"]) for a in listed] == [(name, True, True)]


def test_disconnect_revokes_and_removes_only_what_connect_wrote(connected: Cli, tmp_path: Path) -> None:
    """AG-6: disconnect revokes the grant, removes our entries (files connect created go entirely),
    keeps the user's other servers and settings, and deletes the stored token."""
    project = tmp_path / "project"
    project.mkdir()
    user_opencode = {"theme": "dark", "mcp": {"other": {"type": "local", "command": ["x"]}}}
    (project / "opencode.json").write_text(json.dumps(user_opencode))
    codex_home = Path(connected.env["HOME"]) / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('model = "o3"\n\n[mcp_servers.other]\ncommand = "x"\n')
    theirs = project / ".opencode" / "skills" / "theirs" / "SKILL.md"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("the user's own skill\n")

    opencode_name = connected.ok("agent", "connect", "opencode", "--project", str(project), "--scope", "read")["name"]
    connected.ok("agent", "connect", "codex")
    assert (Path(connected.env["HOME"]) / ".agents" / "skills" / "memories" / "SKILL.md").is_file()
    opencode = json.loads((project / "opencode.json").read_text())
    assert opencode["theme"] == "dark" and set(opencode["mcp"]) == {"other", "memories"}
    assert opencode["mcp"]["memories"]["command"][-2:] == ["--agent", opencode_name]
    codex = tomllib.loads((codex_home / "config.toml").read_text())
    assert codex["model"] == "o3" and set(codex["mcp_servers"]) == {"other", "memories"}
    assert codex["mcp_servers"]["memories"]["args"][-2:] == ["--agent", "codex"]
    scopes = {g["name"]: g["scope"] for g in connected.ok("mcp", "grants")["grants"]}
    assert scopes == {opencode_name: "read", "codex": "read_write"}

    connected.ok("agent", "disconnect", "codex")
    connected.ok("agent", "disconnect", "opencode", "--project", str(project))
    assert json.loads((project / "opencode.json").read_text()) == user_opencode
    assert (codex_home / "config.toml").read_text() == 'model = "o3"\n\n[mcp_servers.other]\ncommand = "x"\n'
    assert not _token_file(connected, "codex").exists() and not _token_file(connected, opencode_name).exists()
    assert connected.ok("mcp", "grants")["grants"] == []
    assert connected.ok("agent", "list")["agents"] == []
    assert connected.err("agent", "disconnect", "codex")["code"] == "not_found"
    # The skill folders connect made are gone when empty; the user's own skill stays.
    assert theirs.read_text() == "the user's own skill\n"
    assert not (project / ".opencode" / "skills" / "memories").exists()
    assert not (Path(connected.env["HOME"]) / ".agents").exists()


def _run_server(connected: Cli, project: Path) -> subprocess.CompletedProcess[str]:
    server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["memories"]
    return subprocess.run(
        [server["command"], *server["args"]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=_server_env(connected),
        cwd=project,
    )


def test_revoked_or_missing_token_names_the_command_that_fixes_it(connected: Cli, tmp_path: Path) -> None:
    """AG-6: the written command with a revoked grant, or with no stored token, fails with a clear
    error naming `memories agent connect`; connecting again repairs it."""
    project = tmp_path / "project"
    project.mkdir()
    name = connected.ok("agent", "connect", "claude-code", "--project", str(project))["name"]
    token = _token_file(connected, name).read_text().strip()
    fix = f"memories agent connect claude-code --project {project.resolve()}"

    connected.ok("mcp", "revoke", name)
    revoked = _run_server(connected, project)
    assert revoked.returncode != 0
    assert "revoked" in revoked.stderr and fix in revoked.stderr
    assert token not in revoked.stderr + revoked.stdout

    _token_file(connected, name).unlink()
    missing = _run_server(connected, project)
    assert missing.returncode != 0
    assert "No token is stored" in missing.stderr and fix in missing.stderr

    again = connected.ok("agent", "connect", "claude-code", "--project", str(project))
    assert again["grant"] == "created"
    assert _token_file(connected, name).read_text().strip() != token
    listed = connected.ok("agent", "list")["agents"]
    assert [(a["name"], a["active"]) for a in listed] == [(name, True)]


def test_annotate_attaches_a_dated_attributed_note_without_rewriting(vault: Cli) -> None:
    """AG-7: the MCP `annotate` tool adds a note (time, agent) as a new revision with the body,
    title and tags unchanged; reads show it, history has the revision; a read grant is refused.
    Also issue 18's filters on the MCP search/retrieve tools (since, until, source)."""
    vault.sudo()
    writer = grant(vault, "scribe", "read_write")
    reader = grant(vault, "viewer", "read")
    item = vault.put("Deploy recipe", "Run make release\nthen tag it", "ops")
    before = vault.ok("get", item["id"])

    async def scenario() -> None:
        async with stdio_client(vault, writer) as client:
            short = item["id"][:12]
            done = result_of(await client.call_tool("annotate", {"id": short, "note": "Tagging needs the gpg key now"}))
            assert done["annotations"] == 1
            read = result_of(await client.call_tool("memory_read", {"id": short}))
            assert read["body"] == "Run make release\nthen tag it" and read["title"] == "Deploy recipe"
            assert [(a["note"], a["by"]) for a in read["annotations"]] == [("Tagging needs the gpg key now", "agent:scribe")]
            assert read["annotations"][0]["at_ms"] >= before["created_ms"]
            bad = error_of(await client.call_tool("annotate", {"id": short, "note": ""}))
            assert bad["code"] == "invalid_request"
            # Issue 18: the recall tools take a time window and a source filter.
            recent = result_of(await client.call_tool("search", {"query": "deploy", "since": "1h"}))
            assert [r["title"] for r in recent["results"]] == ["Deploy recipe"]
            future = result_of(await client.call_tool("retrieve", {"query": "deploy", "since": "2999-01-01"}))
            assert future["passages"] == []
            other = result_of(await client.call_tool("search", {"query": "deploy", "source": "chat:"}))
            assert other["results"] == []
            unreadable = error_of(await client.call_tool("search", {"query": "deploy", "until": "someday"}))
            assert unreadable["code"] == "invalid_input"
        async with stdio_client(vault, reader) as client:
            denied = error_of(await client.call_tool("annotate", {"id": item["id"][:12], "note": "nope"}))
            assert denied["code"] == "scope_denied"

    asyncio.run(scenario())
    after = vault.ok("get", item["id"])
    assert after["body"] == before["body"] and after["tags"] == before["tags"]
    assert [a["note"] for a in after["annotations"]] == ["Tagging needs the gpg key now"]
    history = vault.ok("history", item["id"])["revisions"]
    assert len(history) == 2 and history[-1]["head"]
    assert "annotations" not in history[0]
    assert [(a["note"], a["by"]) for a in history[1]["annotations"]] == [("Tagging needs the gpg key now", "agent:scribe")]
    for command in ("get", "history"):
        text = vault.run(command, item["id"]).stdout
        assert "by agent:scribe: Tagging needs the gpg key now" in text


def _secret_items(env: dict[str, str]) -> dict[str, str]:
    """Every (service, username) -> secret the Secret Service holds, read over D-Bus by a
    separate process the way any other desktop client would."""
    probe = (
        "import json, secretstorage\n"
        "bus = secretstorage.dbus_init()\n"
        "items = secretstorage.get_default_collection(bus).get_all_items()\n"
        "print(json.dumps({a.get('service', '') + '\\n' + a.get('username', ''): i.get_secret().decode()"
        " for i in items for a in [i.get_attributes()] if 'service' in a}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=True
    )
    return dict(json.loads(done.stdout))


def test_token_goes_to_the_os_keyring_when_one_exists(vault: Cli, tmp_path: Path) -> None:
    """AG-6: with an OS keyring (the real Secret Service: gnome-keyring on its own D-Bus) the
    token is stored there, not in any file of the data home, the project or the user's home;
    the written command reads it back; disconnect deletes it."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    with secret_service(user_home) as keyring_env:
        vault.env.update(keyring_env)
        vault.env["PYTHONPATH"] = str(REPO)
        vault.env.pop("PYTHON_KEYRING_BACKEND", None)
        vault.sudo()
        project = tmp_path / "project"
        project.mkdir()
        out = vault.ok("agent", "connect", "claude-code", "--project", str(project), "--scope", "read")
        assert out["token_store"] == "keyring"
        name = out["name"]
        stored = _secret_items(keyring_env)
        assert list(stored) == [f"memories-agent\n{vault.home.resolve()}:{name}"]
        token = next(iter(stored.values()))
        assert token
        assert not _token_file(vault, name).exists()
        # The keyring's own files live under the user's home too: encrypted, so the sweep covers them.
        for path in _files_under(project, user_home, vault.home):
            assert token.encode() not in path.read_bytes(), path

        server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["memories"]

        async def read_only() -> None:
            env = _server_env(vault)
            params = StdioServerParameters(command=server["command"], args=server["args"], env=env, cwd=str(project))
            async with Client(params, read_timeout_seconds=60) as client:
                found = result_of(await client.call_tool("search", {"query": "anything"}))
                assert found["results"] == []
                denied = error_of(await client.call_tool("memory_write", {"title": "x"}))
                assert denied["code"] == "scope_denied"

        asyncio.run(read_only())
        vault.ok("agent", "disconnect", "claude-code", "--project", str(project))
        assert _secret_items(keyring_env) == {}
