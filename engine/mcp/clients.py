"""Configuration snippets that connect agent clients to ``memories mcp`` (``memories mcp config``).

No token is ever written into a snippet: each client passes the grant token from the
environment variable ``MEMORIES_MCP_TOKEN`` (set it in the shell that starts the agent).
Stdlib only: this runs in the lean CLI.

Client documentation the formats follow:
- Claude Code, project ``.mcp.json`` (``mcpServers``; ``${VAR}`` expansion in command,
  args, env, url, headers): https://code.claude.com/docs/en/mcp
- Codex, ``~/.codex/config.toml`` ``[mcp_servers.NAME]`` (``command``/``args``,
  ``env_vars`` to forward variables, ``url`` + ``bearer_token_env_var`` for HTTP):
  https://developers.openai.com/codex/mcp
- OpenCode, ``opencode.json`` ``mcp.NAME`` with ``type`` local/remote, ``command`` array,
  ``environment``/``headers`` and ``{env:VAR}`` substitution: https://opencode.ai/docs/mcp-servers/
"""

from __future__ import annotations

import json

__all__ = ["CLIENTS", "TOKEN_ENV", "CONFIG_FILES", "config_snippet"]

TOKEN_ENV = "MEMORIES_MCP_TOKEN"  # noqa: S105  (a variable name, not a secret)
CLIENTS = ("claude-code", "codex", "opencode")
# Where each snippet goes (merge it into an existing file; never replace the file).
CONFIG_FILES = {
    "claude-code": ".mcp.json in the project (or `claude mcp add-json memories '<inner object>'`)",
    "codex": "~/.codex/config.toml (or .codex/config.toml in a trusted project)",
    "opencode": "opencode.json in the project, or ~/.config/opencode/opencode.json",
}


def _command(home: str | None) -> list[str]:
    return ["memories", *(["--home", home] if home else []), "mcp"]


def _claude(home: str | None, url: str | None) -> str:
    if url:
        server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
    else:
        cmd = _command(home)
        server = {"type": "stdio", "command": cmd[0], "args": cmd[1:], "env": {TOKEN_ENV: f"${{{TOKEN_ENV}}}"}}
    return json.dumps({"mcpServers": {"memories": server}}, indent=2) + "\n"


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _codex(home: str | None, url: str | None) -> str:
    lines = ["[mcp_servers.memories]"]
    if url:
        lines += [f"url = {json.dumps(url)}", f"bearer_token_env_var = {json.dumps(TOKEN_ENV)}"]
    else:
        cmd = _command(home)
        lines += [f"command = {json.dumps(cmd[0])}", f"args = {_toml_list(cmd[1:])}", f"env_vars = {_toml_list([TOKEN_ENV])}"]
    return "\n".join(lines) + "\n"


def _opencode(home: str | None, url: str | None) -> str:
    server: dict[str, object]
    if url:
        server = {"type": "remote", "url": url, "enabled": True, "headers": {"Authorization": f"Bearer {{env:{TOKEN_ENV}}}"}}
    else:
        server = {
            "type": "local",
            "command": _command(home),
            "enabled": True,
            "environment": {TOKEN_ENV: f"{{env:{TOKEN_ENV}}}"},
        }
    return json.dumps({"$schema": "https://opencode.ai/config.json", "mcp": {"memories": server}}, indent=2) + "\n"


def config_snippet(client: str, *, home: str | None = None, url: str | None = None) -> str:
    """The exact configuration text for ``client`` (stdio by default, HTTP when ``url`` is set)."""
    builders = {"claude-code": _claude, "codex": _codex, "opencode": _opencode}
    return builders[client](home, url)
