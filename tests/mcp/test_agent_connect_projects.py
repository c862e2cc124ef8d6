"""AG-11: one grant per project, a failed connect changes nothing, Codex's restricted environment.

Everything runs through the real CLI against a real daemon; the MCP server is started by the
official MCP client with exactly the command line connect wrote.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import Cli
from tests.mcp.support import REPO
from tests.secret_service import secret_service

# What Codex passes to a stdio MCP server on Unix besides the config's `env_vars`:
# openai/codex, codex-rs/rmcp-client/src/utils.rs, DEFAULT_ENV_VARS.
CODEX_DEFAULT_ENV = (
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "USER",
    "__CF_USER_TEXT_ENCODING",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "TZ",
)


@pytest.fixture
def connected(vault: Cli, tmp_path: Path) -> Cli:
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    vault.env.pop("CODEX_HOME", None)
    vault.sudo()
    return vault


def _project(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def _grants(cli: Cli) -> dict[str, tuple[str, bool]]:
    return {g["name"]: (g["scope"], g["transcripts"]) for g in cli.ok("mcp", "grants")["grants"]}


def _snapshot(*roots: Path) -> dict[str, bytes]:
    """Every file (and dangling link) under the roots, with its bytes: "changed nothing" means equal."""
    found: dict[str, bytes] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_symlink():
                found[str(path)] = b"-> " + os.fsencode(os.readlink(path))
            elif path.is_file():
                found[str(path)] = path.read_bytes()
    return found


def test_ag11_two_projects_keep_their_own_scopes_and_disconnect_alone(connected: Cli, tmp_path: Path) -> None:
    """AG-11: a connect per project makes a grant for that project; a later connect of the same client
    in another project (or for the user) does not change it; list shows each; disconnect --project
    removes only that project's grant, config and token."""
    alpha, beta = _project(tmp_path, "alpha"), _project(tmp_path, "beta")
    a = connected.ok("agent", "connect", "claude-code", "--project", str(alpha), "--scope", "read")
    b = connected.ok("agent", "connect", "claude-code", "--project", str(beta), "--transcripts", "all")
    user = connected.ok("agent", "connect", "claude-code")
    assert len({a["name"], b["name"], user["name"]}) == 3 and user["name"] == "claude-code"
    assert _grants(connected) == {
        a["name"]: ("read", True),  # --transcripts this-project, the default with --project
        b["name"]: ("read_write", True),
        "claude-code": ("read_write", False),
    }
    args_of = {p: json.loads((p / ".mcp.json").read_text())["mcpServers"]["memories"]["args"][-1] for p in (alpha, beta)}
    assert args_of == {alpha: a["name"], beta: b["name"]}

    listed = {i["name"]: i for i in connected.ok("agent", "list")["agents"]}
    assert {n: (i["project"], i["scope"], i["transcripts"], i["active"]) for n, i in listed.items()} == {
        a["name"]: (str(alpha.resolve()), "read", True, True),
        b["name"]: (str(beta.resolve()), "read_write", True, True),
        "claude-code": (None, "read_write", False, True),
    }
    text = connected.run("agent", "list").stdout
    assert f"project: {alpha.resolve()}" in text and "+transcripts" in text

    # Re-connecting alpha keeps its grant; beta's is untouched by anything done to alpha.
    assert connected.ok("agent", "connect", "claude-code", "--project", str(alpha), "--scope", "read")["grant"] == "kept"
    beta_token = (connected.home / "agents" / f"{b['name']}.token").read_bytes()
    connected.ok("agent", "disconnect", "claude-code", "--project", str(alpha))
    assert _grants(connected) == {b["name"]: ("read_write", True), "claude-code": ("read_write", False)}
    assert not (alpha / ".mcp.json").exists() and not (alpha / ".claude").exists()
    assert (beta / ".mcp.json").is_file() and (beta / ".claude" / "skills" / "memories" / "SKILL.md").is_file()
    assert (connected.home / "agents" / f"{b['name']}.token").read_bytes() == beta_token
    assert connected.err("agent", "disconnect", "claude-code", "--project", str(alpha))["code"] == "not_found"


def test_ag11_a_refused_config_changes_nothing(connected: Cli, tmp_path: Path) -> None:
    """AG-11: an unparsable .mcp.json or config.toml is refused before the grant, the token, the
    skill or the record of what connect wrote change: a project already connected keeps its
    scope and token; a new one gets no grant at all."""
    project = _project(tmp_path, "proj")
    first = connected.ok("agent", "connect", "claude-code", "--project", str(project))
    (project / ".mcp.json").write_text('{"mcpServers": {"memories": ')  # the user broke it
    before = _snapshot(project, connected.home / "agents", Path(connected.env["HOME"]))
    error = connected.err("agent", "connect", "claude-code", "--project", str(project), "--scope", "read")
    assert error["code"] == "invalid_input" and "nothing was changed" in error["message"]
    assert _snapshot(project, connected.home / "agents", Path(connected.env["HOME"])) == before
    assert _grants(connected) == {first["name"]: ("read_write", True)}

    codex_project = _project(tmp_path, "codexproj")
    (codex_project / ".codex").mkdir()
    (codex_project / ".codex" / "config.toml").write_text("model = \n")
    before = _snapshot(codex_project, connected.home / "agents", Path(connected.env["HOME"]))
    error = connected.err("agent", "connect", "codex", "--project", str(codex_project))
    assert error["code"] == "invalid_input" and "not valid TOML" in error["message"]
    assert _snapshot(codex_project, connected.home / "agents", Path(connected.env["HOME"])) == before
    assert _grants(connected) == {first["name"]: ("read_write", True)}


def test_ag11_a_locked_vault_refuses_before_any_file_is_written(connected: Cli, tmp_path: Path) -> None:
    """AG-11: when the engine refuses (locked vault) the project's config and skill are not written."""
    project = _project(tmp_path, "proj")
    connected.ok("lock")
    assert connected.err("agent", "connect", "opencode", "--project", str(project))["code"] == "locked"
    assert _snapshot(project) == {} and not (connected.home / "agents").exists()


def test_ag11_a_late_failure_undoes_grant_token_config_and_skill(connected: Cli, tmp_path: Path) -> None:
    """AG-11: the last step (recording what connect wrote) fails on a dangling symlink in the data
    home: the new grant is revoked, its token deleted, the user's config restored byte for byte and
    the skill connect had installed removed."""
    project = _project(tmp_path, "proj")
    user_config = '{\n  "mcpServers": {"other": {"command": "x"}}\n}\n'
    (project / ".mcp.json").write_text(user_config)
    agents = connected.home / "agents"
    agents.mkdir(mode=0o700)
    name = f"claude-code-proj-{hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:6]}"
    (agents / f"{name}.json").symlink_to(tmp_path / "elsewhere.json")
    before = _snapshot(project, agents)

    error = connected.err("agent", "connect", "claude-code", "--project", str(project))
    assert error["code"] == "permission_denied" and "symlink" in error["message"]
    assert _snapshot(project, agents) == before
    assert (project / ".mcp.json").read_text() == user_config
    assert connected.ok("mcp", "grants")["grants"] == []
    revoked = connected.ok("mcp", "grants", "--all")["grants"]
    assert [(g["name"], g["active"]) for g in revoked] == [(name, False)]
    assert not (tmp_path / "elsewhere.json").exists()


def _codex_env(cli: Cli, forwarded: list[str], source: dict[str, str]) -> dict[str, str]:
    """What Codex gives its server: its defaults plus the config's `env_vars`, from ``source``."""
    env = {k: source[k] for k in (*CODEX_DEFAULT_ENV, *forwarded) if k in source}
    env["HOME"] = cli.env["HOME"]
    return env


async def _tool_names(command: str, args: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with Client(params, read_timeout_seconds=60) as client:
        return sorted(t.name for t in (await client.list_tools()).tools)


def _codex_server(project: Path) -> dict[str, object]:
    server: dict[str, object] = tomllib.loads((project / ".codex" / "config.toml").read_text())["mcp_servers"]["memories"]
    return server


def test_ag11_codex_environment_finds_the_file_token_and_names_the_fix(connected: Cli, tmp_path: Path) -> None:
    """AG-11: started as Codex starts it (HOME, PATH and Codex's few defaults, plus the config's
    env_vars), the server finds its 0600 token file and lists its tools; with the token gone it
    fails naming the exact connect command that fixes it."""
    project = _project(tmp_path, "proj")
    out = connected.ok("agent", "connect", "codex", "--project", str(project), "--scope", "read")
    server = _codex_server(project)
    forwarded = list(server["env_vars"])  # type: ignore[call-overload]
    assert "DBUS_SESSION_BUS_ADDRESS" in forwarded
    env = _codex_env(connected, forwarded, connected.environ())
    assert "MEMORIES_HOME" not in env and "MEMORIES_MCP_TOKEN" not in env
    command, args = str(server["command"]), [str(a) for a in server["args"]]  # type: ignore[attr-defined]
    names = asyncio.run(_tool_names(command, args, env, project))
    assert "search" in names and "memory_write" not in names  # a read grant lists only what it can call (issue 27)

    (connected.home / "agents" / f"{out['name']}.token").unlink()
    failed = subprocess.run(
        [command, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=env, cwd=project
    )
    assert failed.returncode != 0
    assert "No token is stored" in failed.stderr
    assert f"memories agent connect codex --project {project.resolve()} --scope read" in failed.stderr


def test_ag11_codex_environment_reads_a_keyring_token_through_forwarded_variables(vault: Cli, tmp_path: Path) -> None:
    """AG-11: with the token in the OS keyring (a real Secret Service on its own session bus), the
    Codex config forwards the bus address, so a server started with Codex's environment reads it."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    with secret_service(user_home) as keyring_env:
        vault.env.update(keyring_env)
        vault.env["PYTHONPATH"] = str(REPO)
        vault.env.pop("PYTHON_KEYRING_BACKEND", None)
        vault.env.pop("CODEX_HOME", None)
        vault.sudo()
        project = _project(tmp_path, "proj")
        out = vault.ok("agent", "connect", "codex", "--project", str(project))
        assert out["token_store"] == "keyring"
        server = _codex_server(project)
        env = _codex_env(vault, list(server["env_vars"]), vault.environ())  # type: ignore[call-overload]
        command, args = str(server["command"]), [str(a) for a in server["args"]]  # type: ignore[attr-defined]
        names = asyncio.run(_tool_names(command, args, env, project))
        assert "search" in names
        # Without the forwarded bus address (and no /run/user bus of this test's own) it is unreachable,
        # and the error says what to run.
        bare = {k: v for k, v in env.items() if k != "DBUS_SESSION_BUS_ADDRESS"}
        failed = subprocess.run(
            [command, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=bare, cwd=project
        )
        assert failed.returncode != 0 and "memories agent connect codex --project" in failed.stderr
        vault.ok("agent", "disconnect", "codex", "--project", str(project))


SESSION = REPO / "tests" / "data" / "transcripts" / "claude" / "projects" / "-home-ana-cabin"


def _hook(cli: Cli, command: str, stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a hook command as Claude Code does: through the shell, the event's JSON on stdin."""
    return subprocess.run(
        ["/bin/sh", "-c", command], input=stdin, capture_output=True, text=True, timeout=120, env=cli.environ(), cwd=cwd
    )


def test_ag11_claude_code_hooks_capture_sessions_quietly_and_go_on_disconnect(connected: Cli, tmp_path: Path) -> None:
    """AG-11 automatic capture: connect merges Stop and SessionEnd hooks into the project's
    .claude/settings.json (the user's settings kept); the hook, given Claude Code's JSON with a
    transcript_path, imports that session and prints nothing; bad input fails with exit 1 (never 2,
    which would block the agent); disconnect leaves the user's settings as they were."""
    project = _project(tmp_path, "proj")
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    user_settings = {
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]},
    }
    settings.write_text(json.dumps(user_settings))
    out = connected.ok("agent", "connect", "claude-code", "--project", str(project))
    assert out["hooks"] == str(settings)
    merged = json.loads(settings.read_text())
    assert merged["permissions"] == {"allow": ["Bash(ls)"]}
    stop = [h["command"] for e in merged["hooks"]["Stop"] for h in e["hooks"]]
    end = [h["command"] for e in merged["hooks"]["SessionEnd"] for h in e["hooks"]]
    assert stop[0] == "true" and len(stop) == 2 and end == [stop[1]]
    ours = stop[1]
    assert ours.endswith(f"agent capture {out['name']}") and "--home" in ours
    # Idempotent: connecting again adds nothing.
    connected.ok("agent", "connect", "claude-code", "--project", str(project))
    assert json.loads(settings.read_text()) == merged

    session = tmp_path / "sessions" / "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a.jsonl"
    session.parent.mkdir()
    session.write_bytes((SESSION / session.name).read_bytes())
    event = {
        "session_id": "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a",
        "transcript_path": str(session),
        "cwd": str(project),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    ran = _hook(connected, ours, json.dumps(event), project)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert len(connected.ok("transcript", "list")["sessions"]) == 1
    again = _hook(connected, ours, json.dumps({**event, "hook_event_name": "SessionEnd", "reason": "exit"}), project)
    assert again.returncode == 0 and len(connected.ok("transcript", "list")["sessions"]) == 1

    bad = _hook(connected, ours, '{"hook_event_name": "Stop"}', project)
    assert bad.returncode == 1 and "transcript_path" in bad.stderr and bad.stdout == ""

    connected.ok("agent", "disconnect", "claude-code", "--project", str(project))
    assert json.loads(settings.read_text()) == user_settings


CODEX_THREAD = "019b0c1d-2e3f-7a4b-8c5d-6e7f8a9b0c1d"


def _codex_rollout(project: Path, turn_id: str, words: str) -> list[dict[str, object]]:
    """One Codex turn as the rollout recorder writes it today (codex-rs/protocol RolloutLine):
    session_meta, the injected environment context, turn_context with its turn_id, the user's
    message, reasoning, a shell call and its output, the reply, and event_msg lines (task_started,
    user_message, agent_message, task_complete naming the turn)."""
    ts = "2026-12-07T04:00:0{}.000Z"
    reply = f"The retry queue of the invoice worker is the Redis list `{words}`."
    return [
        {
            "timestamp": ts.format(0),
            "type": "session_meta",
            "payload": {
                "id": CODEX_THREAD,
                "timestamp": ts.format(0),
                "cwd": str(project),
                "originator": "codex_cli_rs",
                "cli_version": "0.64.0",
                "instructions": None,
                "source": "cli",
                "model_provider": "openai",
            },
        },
        {
            "timestamp": ts.format(1),
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": f"<environment_context>\n  <cwd>{project}</cwd>\n</environment_context>"}
                ],
            },
        },
        {"timestamp": ts.format(1), "type": "event_msg", "payload": {"type": "task_started", "turn_id": turn_id}},
        {
            "timestamp": ts.format(1),
            "type": "turn_context",
            "payload": {"turn_id": turn_id, "cwd": str(project), "approval_policy": "on-request", "model": "gpt-5-codex"},
        },
        {
            "timestamp": ts.format(2),
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Where does the invoice worker keep its retry queue?"}],
            },
        },
        {"timestamp": ts.format(2), "type": "event_msg", "payload": {"type": "user_message", "message": "Where …", "images": []}},
        {
            "timestamp": ts.format(3),
            "type": "response_item",
            "payload": {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "gAAAA"},
        },
        {
            "timestamp": ts.format(3),
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps({"command": ["rg", "RETRY_QUEUE"], "workdir": str(project)}),
                "call_id": "call_1",
            },
        },
        {
            "timestamp": ts.format(4),
            "type": "response_item",
            "payload": {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": json.dumps({"output": f"worker.py: RETRY_QUEUE = '{words}'\n", "metadata": {"exit_code": 0}}),
            },
        },
        {
            "timestamp": ts.format(5),
            "type": "response_item",
            "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": reply}]},
        },
        {"timestamp": ts.format(5), "type": "event_msg", "payload": {"type": "agent_message", "message": reply}},
        {
            "timestamp": ts.format(6),
            "type": "event_msg",
            "payload": {"type": "task_complete", "turn_id": turn_id, "last_agent_message": reply},
        },
    ]


def _wait_for_file(path: Path, timeout: float = 60) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.stat().st_size:
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_ag11_codex_notify_captures_each_turn_and_chains_the_users_notify(connected: Cli, tmp_path: Path) -> None:
    """AG-11 automatic capture for Codex: connect puts its notify program at the top of the project's
    .codex/config.toml, chaining the notify the user had (their comments and keys kept); run as Codex
    runs it (argv + the agent-turn-complete JSON, stdin/stdout on the null device) it starts the
    user's program with the same JSON, finds the thread's rollout under CODEX_HOME, and the turn
    becomes searchable (AG-8), printing nothing; disconnect puts the user's notify back."""
    project = _project(tmp_path, "proj")
    config = project / ".codex" / "config.toml"
    config.parent.mkdir()
    marker = tmp_path / "user-notify.json"
    user_notify = ["/bin/sh", "-c", f'printf %s "$0" > {marker}']
    config.write_text(f'# my settings\nmodel = "gpt-5-codex"\nnotify = {json.dumps(user_notify)}\n\n[tools]\nweb_search = true\n')
    before = tomllib.loads(config.read_text())
    out = connected.ok("agent", "connect", "codex", "--project", str(project))
    assert out["hooks"] == str(config)
    text = config.read_text()
    merged = tomllib.loads(text)
    assert text.startswith("# >>> memories agent capture") and "# my settings" in text
    assert merged["model"] == "gpt-5-codex" and merged["tools"] == {"web_search": True}
    assert "memories" in merged["mcp_servers"]
    notify = [str(w) for w in merged["notify"]]
    assert notify[-1] == out["name"] and "--codex-notify" in notify
    assert json.loads(notify[notify.index("--chain") + 1]) == user_notify
    connected.ok("agent", "connect", "codex", "--project", str(project))  # idempotent
    assert config.read_text() == text

    codex_home = tmp_path / "codex-home"
    rollout = codex_home / "sessions" / "2026" / "12" / "07" / f"rollout-2026-12-07T04-00-00-{CODEX_THREAD}.jsonl"
    rollout.parent.mkdir(parents=True)
    words = "invoices-retry-zq7"
    rollout.write_text("".join(json.dumps(line) + "\n" for line in _codex_rollout(project, "turn-1", words)))
    payload = json.dumps(
        {
            "type": "agent-turn-complete",
            "thread-id": CODEX_THREAD,
            "turn-id": "turn-1",
            "cwd": str(project),
            "client": "codex-tui",
            "input-messages": ["Where does the invoice worker keep its retry queue?"],
            "last-assistant-message": f"The retry queue of the invoice worker is the Redis list `{words}`.",
        }
    )
    env = {**connected.environ(), "CODEX_HOME": str(codex_home)}
    ran = subprocess.run([*notify, payload], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert json.loads(_wait_for_file(marker)) == json.loads(payload)
    hits = connected.ok("search", words, "--kind", "transcript")["results"]
    assert hits and hits[0]["turn"]["seq"] == 1
    assert len(connected.ok("transcript", "list")["sessions"]) == 1

    # An unknown thread fails with exit 1 and one line, never the notification's text.
    bad = subprocess.run(
        [*notify, payload.replace(CODEX_THREAD, "0000aaaa-0000-0000-0000-000000000000")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad.returncode == 1 and "rollout" in bad.stderr and words not in bad.stderr

    connected.ok("agent", "disconnect", "codex", "--project", str(project))
    after = config.read_text()
    assert tomllib.loads(after) == before and "memories" not in after and "# my settings" in after


def test_ag11_codex_notify_of_another_shape_is_refused_and_nothing_changes(connected: Cli, tmp_path: Path) -> None:
    """AG-11: a notify that is not a list of strings cannot be chained: connect refuses, naming the
    file, and changes nothing; without any notify, disconnect removes the config connect created."""
    project = _project(tmp_path, "proj")
    config = project / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('notify = "notify-send"\n')
    snapshot = _snapshot(tmp_path)
    error = connected.err("agent", "connect", "codex", "--project", str(project))
    assert error["code"] == "invalid_input" and str(config) in error["message"] and "notify" in error["message"]
    assert _snapshot(tmp_path) == snapshot
    assert not any(g.startswith("codex") for g in _grants(connected))

    other = _project(tmp_path, "other")
    connected.ok("agent", "connect", "codex", "--project", str(other))
    assert tomllib.loads((other / ".codex" / "config.toml").read_text())["notify"][-1].startswith("codex-other")
    connected.ok("agent", "disconnect", "codex", "--project", str(other))
    assert not (other / ".codex").exists()
