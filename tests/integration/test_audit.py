"""`memories audit`: the owner reads the audit log through the real CLI and daemon (AU-1)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from engine.errors import MemoriesError
from tests.cards.conftest import READ_BACK, clipboard
from tests.cards.conftest import xdisplay as xdisplay  # the private Xvfb fixture, for `copy`
from tests.helpers import PASSWORD, Cli, raw, raw_error
from tests.mcp.support import grant, ipc, result_of, stdio_client

ENTRY_KEYS = {"ts_ms", "time", "op", "actor", "surface", "who", "phase", "outcome", "error", "assets", "device"}
ASSET_KEYS = {"id", "short_id", "kind", "title", "state"}


def audit(cli: Cli, *args: str) -> list[dict[str, Any]]:
    result = cli.ok("audit", *args)
    entries: list[dict[str, Any]] = result["entries"]
    return entries


def iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def agent_reads(cli: Cli, token: str, *ids: str) -> None:
    async def scenario() -> None:
        async with stdio_client(cli, token) as client:
            for asset in ids:
                result_of(await client.call_tool("memory_read", {"id": asset}))

    asyncio.run(scenario())


def test_agent_reads_are_listed_with_current_titles(vault: Cli) -> None:
    """AU-1: after an agent reads over MCP and the user over the CLI, `--actor mcp:` lists exactly the agent's reads."""
    coffee = vault.put("Coffee notes", "espresso")["id"]
    taxes = vault.put("Tax papers", "in the blue folder")["id"]
    mine = vault.put("Diary", "private")["id"]
    vault.sudo()
    token = grant(vault, "claude", "read")
    agent_reads(vault, token, coffee[:12], taxes[:12])
    vault.ok("get", mine)
    # Titles are the current ones: one renamed, one deleted after the agent read it.
    vault.ok("edit", coffee, "--title", "Coffee (renamed)")
    vault.ok("delete", taxes)

    for actor in ("mcp:", "mcp", "mcp:claude"):
        entries = audit(vault, "--actor", actor)
        assert [(e["op"], e["phase"], e["who"], e["actor"], e["surface"]) for e in entries] == [
            ("get", "intent", "agent claude (mcp)", "mcp:claude", "mcp")
        ] * 2, actor
        shown = [{k: v for k, v in e["assets"][0].items() if k != "short_id"} for e in entries]
        assert shown == [
            {"id": taxes, "kind": "memory", "title": None, "state": "deleted"},
            {"id": coffee, "kind": "memory", "title": "Coffee (renamed)", "state": "current"},
        ]
        assert all(len(e["assets"]) == 1 and e["assets"][0]["id"].startswith(e["assets"][0]["short_id"]) for e in entries)
    assert audit(vault, "--actor", "mcp:claud") == []  # a name is matched exactly, not as a prefix
    assert audit(vault, "--actor", "mcp:other") == []

    mine_reads = audit(vault, "--actor", "cli:", "--op", "get")  # `edit` reads the current revision first
    assert [(e["who"], [a["id"] for a in e["assets"]]) for e in mine_reads] == [("you (cli)", [coffee]), ("you (cli)", [mine])]

    text = vault.run("audit", "--actor", "mcp:")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == 2
    assert "agent claude (mcp)  get (intent)" in lines[0] and lines[0].endswith("(deleted)")
    assert lines[1].endswith('"Coffee (renamed)"')
    assert datetime.fromisoformat(lines[1].split()[0]).tzinfo is not None  # local time with its offset


def test_entries_survive_lock_and_unlock(vault: Cli) -> None:
    """AU-1: entries committed in one session are read back from the store after the next unlock."""
    note = vault.put("Kept", "x")["id"]
    vault.ok("get", note)
    vault.ok("lock")
    vault.unlock()
    vault.sudo()
    entries = audit(vault, "--op", "get")
    assert [[a["id"] for a in e["assets"]] for e in entries] == [[note]]
    vault.ok("get", note)  # committed after this unlock: appended to the live log
    assert len(audit(vault, "--op", "get")) == 2


def test_since_until_and_limit_filter(vault: Cli) -> None:
    """AU-1: --since (inclusive) and --until (exclusive) take ISO times and spans; --limit keeps the newest."""
    first = vault.put("First", "1")["id"]
    second = vault.put("Second", "2")["id"]
    vault.sudo()
    vault.ok("get", first)
    vault.ok("get", second)
    everything = audit(vault, "--limit", "1000")
    stamps = [e["ts_ms"] for e in everything]
    read_first = next(e for e in everything if e["op"] == "get" and e["assets"][0]["id"] == first)
    cut = read_first["ts_ms"]

    since = audit(vault, "--since", iso(cut), "--limit", "1000")
    assert read_first in since and all(e["ts_ms"] >= cut for e in since)
    # Only `audit` intents were committed since `everything`: the rest is exactly the entries from `cut` on.
    assert [e for e in since if e["op"] != "audit"] == [e for e in everything if e["ts_ms"] >= cut and e["op"] != "audit"]
    assert any(e["op"] == "put" and e["ts_ms"] < cut for e in everything)
    local = datetime.fromtimestamp(cut / 1000).isoformat(timespec="milliseconds")  # no offset: local time
    assert [e for e in audit(vault, "--since", local, "--limit", "1000") if e["op"] != "audit"] == [
        e for e in since if e["op"] != "audit"
    ]

    until = audit(vault, "--until", iso(cut), "--limit", "1000")
    assert [e["ts_ms"] for e in until] == [s for s in stamps if s < cut]

    assert audit(vault, "--since", "2999-01-01") == []
    assert audit(vault, "--until", "1990-01-01") == []
    assert {e["op"] for e in audit(vault, "--since", "1h", "--limit", "1000")} >= {"init", "put", "get"}

    newest = vault.ok("audit", "--limit", "2")
    assert len(newest["entries"]) == 2 and newest["more"] is True
    listed = audit(vault, "--limit", "1000")
    assert listed[0]["op"] == "audit" and newest["entries"] == listed[1:3]  # listed[0]: the `--limit 2` read


def test_audit_needs_elevation_and_is_not_for_agents(vault: Cli) -> None:
    """AU-1, API-3, AG-2: without sudo → elevation_required; an agent can never call `audit`."""
    vault.put("Anything", "x")
    assert vault.err("audit")["code"] == "elevation_required"
    vault.sudo()
    token = grant(vault, "sneaky", "allow_all")
    with ipc(vault) as client:
        try:
            client.request({"op": "mcp_call", "token": token, "request": {"op": "audit"}})
        except MemoriesError as exc:
            assert exc.code == "permission_denied"
        else:
            raise AssertionError("an agent read the audit log")
    assert audit(vault, "--op", "audit") == []  # neither refused call was audited as a read


def test_bad_input_is_a_typed_error_and_changes_nothing(vault: Cli) -> None:
    """AU-1, API-8: malformed times, an empty range and out-of-range limits answer invalid_input; nothing is read."""
    vault.sudo()
    audit(vault)  # one successful read: exactly one `audit` intent
    for args in (
        ("--since", "yesterday"),
        ("--since", "2026-13-45"),
        ("--until", "7 days"),
        ("--since", "99999999w"),
        ("--since", "2026-05-02", "--until", "2026-05-01"),
        ("--limit", "0"),
        ("--limit", "1001"),
    ):
        error = vault.err("audit", *args)
        assert error["code"] == "invalid_input", args
        assert error["message"].endswith(".") and "\n" not in error["message"], args
    assert "--since takes a date" in vault.err("audit", "--since", "soon")["message"]
    raw(vault, {"op": "sudo", "password": PASSWORD})  # this test process's own namespace, for direct requests
    assert raw_error(vault, {"op": "audit", "since_ms": 10, "until_ms": 5}).code == "invalid_input"
    assert raw_error(vault, {"op": "audit", "limit": "many"}).code == "invalid_request"
    assert raw_error(vault, {"op": "audit", "secret": "x"}).code == "unknown_field"
    reads = audit(vault, "--op", "audit")
    assert [(e["who"], e["phase"], e["assets"]) for e in reads] == [("you (cli)", "intent", [])]


def test_json_shape(vault: Cli) -> None:
    """AU-1: --json is a stable shape: {"v": 1, "entries": [...], "more": bool}."""
    note = vault.put("Shape", "x")["id"]
    vault.sudo()
    proc = vault.run("audit", "--json")
    result = json.loads(proc.stdout)  # raw: Cli.ok drops the envelope's "v"
    assert set(result) == {"v", "entries", "more"} and result["v"] == 1 and result["more"] is False
    for entry in result["entries"]:
        assert set(entry) == ENTRY_KEYS
        assert isinstance(entry["ts_ms"], int) and datetime.fromisoformat(entry["time"]).tzinfo is not None
        for asset in entry["assets"]:
            assert set(asset) == ASSET_KEYS
    put = next(e for e in result["entries"] if e["op"] == "put")
    assert put["outcome"] == "ok" and put["phase"] is None and put["error"] is None
    assert put["assets"][0]["id"] == note and put["assets"][0]["title"] == "Shape"
    assert [e["op"] for e in result["entries"]][-1] == "init"  # newest first


def test_text_output_escapes_control_characters(vault: Cli) -> None:
    """AU-1, issue 12: a title from an agent or an import cannot drive the terminal through the audit view."""
    note = raw(vault, {"op": "put", "title": "evil \x1b]52;c;aGk=\x07 \x1b[2J\r\nline \u202e", "body": "x"})
    vault.sudo()
    proc = vault.run("audit")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\r" not in proc.stdout
    assert "\u202e" not in proc.stdout
    line = next(line for line in proc.stdout.splitlines() if note["id"][:8] in line)
    assert "\\x1b]52;c;aGk=\\x07 \\x1b[2J\\r\\nline \\u202e" in line


CANARY = "CANARY-audit-9d41e7"
TOKEN_CANARY = "CANARY-audit-token-3b"
PASSWORD_CANARY = "CANARY-audit-pw-71"


def test_no_secret_in_the_audit_view(vault: Cli, xdisplay: str) -> None:
    """AU-1, CD-7, CD-8: protect a secret, copy it, read the audit — no secret value appears, a credential shows its name."""
    card = raw(vault, {"op": "card_write", "type": "knowledge", "title": "DB", "body": f"password {CANARY}"})
    vault.ok("secret", "protect", card["id"], "--label", "db_password", "--value-stdin", input=CANARY + "\n")
    raw(vault, {"op": "protected_card", "title": "Deploy API", "token": TOKEN_CANARY})
    credential = {"op": "credential_new", "name": "prod-db", "type": "postgres", "host": "db.example", "user": "app"}
    raw(vault, {**credential, "password": PASSWORD_CANARY})
    vault.sudo()
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    assert vault.ok("copy", "db_password", "--clear-after", READ_BACK) == {"copied": True}
    assert clipboard(xdisplay) == CANARY  # the copy did reach the secret
    vault.ok("get", card["id"])

    as_json = vault.run("audit", "--limit", "1000", "--json")
    as_text = vault.run("audit", "--limit", "1000")
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    entries = json.loads(as_json.stdout)["entries"]
    ops = {e["op"] for e in entries}
    assert {"protect_secret", "credential_copy", "protected_card", "get"} <= ops
    copied = next(e for e in entries if e["op"] == "credential_copy")
    assert copied["assets"][0]["kind"] == "credential"
    for output in (as_json.stdout, as_text.stdout, as_json.stderr, as_text.stderr):
        for canary in (CANARY, TOKEN_CANARY, PASSWORD_CANARY):
            assert canary not in output
    names = {a["title"] for e in entries for a in e["assets"]}
    assert "prod-db" in names  # a credential shows its name, never a value
