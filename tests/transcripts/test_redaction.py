"""AG-10: transcripts never keep secrets. Canaries a tool printed (`cat .env`) and a value the vault
protects are replaced by [redacted:KIND] before the turn is stored or indexed: search, MCP, the
CLI, the daemon's log and the store file never show them, and the import counts them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.transcripts.redact import Redactor
from tests.helpers import Cli
from tests.mcp.support import ipc

SESSION = "7e57c0de-0000-4000-8000-00000000c0de"
VAULT_PASSWORD = "Canary-Login-Passw0rd-91"  # a login's password, stored in the vault first
CANARIES = {
    "aws_access_key": "AKIAZCANARY7EXAMPLE1",
    "github_token": "ghp_CanaryCanaryCanaryCanaryCanary123456",
    "gitlab_token": "glpat-CanaryCanary12345678",
    "slack_token": "xoxb-1234567890-0987654321-CanaryCanaryCan",
    "stripe_key": "sk_live_CanaryCanary12345678",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJjYW5hcnkiOiJ5ZXMifQ.c2lnbmF0dXJlY2FuYXJ5",
    "secret": "pw-canary-424242",
    "private_key": "MIIEcanaryPRIVATEkeyBODY",
}
ENV_FILE = f"""AWS_ACCESS_KEY_ID={CANARIES["aws_access_key"]}
GITHUB_TOKEN={CANARIES["github_token"]}
GITLAB_TOKEN={CANARIES["gitlab_token"]}
SLACK_BOT_TOKEN={CANARIES["slack_token"]}
STRIPE_SECRET_KEY={CANARIES["stripe_key"]}
SESSION_JWT={CANARIES["jwt"]}
DB_PASSWORD={CANARIES["secret"]}
-----BEGIN OPENSSH PRIVATE KEY-----
{CANARIES["private_key"]}
-----END OPENSSH PRIVATE KEY-----
"""


def _line(n: int, kind: str, message: dict[str, Any]) -> str:
    return json.dumps(
        {
            "type": kind,
            "sessionId": SESSION,
            "uuid": f"c-{n}",
            "timestamp": f"2026-12-02T10:00:0{n}.000Z",
            "isSidechain": False,
            "cwd": "/home/ana/shop",
            "message": message,
        }
    )


def _session(path: Path) -> None:
    tool = {"type": "tool_use", "id": "toolu_env", "name": "Bash", "input": {"command": "cat .env"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_env", "content": ENV_FILE}
    lines = [
        _line(1, "user", {"role": "user", "content": "Why can't the canary service reach the database?"}),
        _line(2, "assistant", {"role": "assistant", "content": [{"type": "text", "text": "Reading the env file."}, tool]}),
        _line(3, "user", {"role": "user", "content": [result]}),
        _line(4, "assistant", {"role": "assistant", "content": "The canary service uses the DB_PASSWORD from .env."}),
        _line(5, "user", {"role": "user", "content": f"my bank login password is {VAULT_PASSWORD}, use the canary account"}),
        _line(6, "assistant", {"role": "assistant", "content": "Noted the canary account."}),
    ]
    path.write_text("\n".join(lines) + "\n")


def test_redactor_shapes_and_false_friends() -> None:
    """AG-10: each token shape is replaced with its kind; references and prose are left alone."""
    redact = Redactor([VAULT_PASSWORD])
    out = redact(ENV_FILE + f"\nlogin: {VAULT_PASSWORD}\n")
    for value in (*CANARIES.values(), VAULT_PASSWORD):
        assert value not in out
    for kind in (*CANARIES, "vault"):
        assert f"[redacted:{kind}]" in out, kind
    assert redact.kinds["secret"] == 1 and redact.count == len(CANARIES) + 1
    prose = "the password is in the vault; secret = settings.STRIPE_WEBHOOK_SECRET; max_tokens: 4096; token=${TOKEN}"
    assert Redactor()(prose) == prose
    assert Redactor()("postgres://app:hunter22@db:5432/shop") == "postgres://app:[redacted:url_password]@db:5432/shop"


def test_imported_turns_hold_no_secrets(tmp_path: Path) -> None:
    """AG-10: canaries through search, MCP recall, transcript show, the log and the store bytes."""
    cli = Cli(home=tmp_path / "home")
    cli.init()
    try:
        cli.ok("login", "new", "--title", "Bank", "--username", "ana", "--password-stdin", input=VAULT_PASSWORD)
        folder = tmp_path / "sessions"
        folder.mkdir()
        _session(folder / f"{SESSION}.jsonl")
        imported = cli.ok("transcript", "import", str(folder))
        assert imported["redacted"] == len(CANARIES) + 1
        for value in (*CANARIES.values(), VAULT_PASSWORD):
            results = cli.ok("search", value)["results"]  # other words of it (canary) may match; the value never
            assert all(value not in json.dumps(r) for r in results), value
        assert cli.ok("search", "424242")["results"] == []  # a word only the password held was never indexed
        assert cli.ok("search", "Passw0rd")["results"] == []
        hits = cli.ok("search", "canary env file", "--kind", "transcript")["results"]
        assert hits and all(v not in json.dumps(hits) for v in CANARIES.values())
        session = cli.ok("transcript", "list")["sessions"][0]
        shown = json.dumps(cli.ok("transcript", "show", session["session_uid"][:12]))
        assert "[redacted:github_token]" in shown and "[redacted:vault]" in shown
        cli.sudo()
        token = cli.ok("mcp", "grant", "--name", "canary", "--scope", "read", "--transcripts")["token"]
        client = ipc(cli)
        try:
            recalled = client.request(
                {"op": "mcp_call", "token": token, "request": {"op": "recall_session", "session": session["session_uid"]}}
            )
            found = client.request(
                {"op": "mcp_call", "token": token, "request": {"op": "recall_turn", "query": "canary database env"}}
            )
        finally:
            client.close()
        seen = json.dumps([recalled, found, shown])
        for value in (*CANARIES.values(), VAULT_PASSWORD):
            assert value not in seen, value
    finally:
        cli.stop()
    on_disk = b"".join(p.read_bytes() for p in cli.home.rglob("*") if p.is_file())
    for value in (*CANARIES.values(), VAULT_PASSWORD):
        assert value.encode() not in on_disk, value
