"""No secret reaches any MCP result: protected cards, secret maps, credentials, grant tokens (AG-2, CD-7, CD-8)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.helpers import Cli
from tests.mcp.support import TOOLS, TRANSCRIPT_TOOLS, grant, ipc, stdio_client, text_of

TOKEN_CANARY = "CANARY-token-7f3a9c"
BODY_CANARY = "CANARY-body-secret-55e1"
PASSWORD_CANARY = "CANARY-password-0b8d"


def test_no_secret_in_any_mcp_result(vault: Cli) -> None:
    """AG-2, CD-3, CD-7, CD-8: every tool, on every item, returns no secret value or secret map."""
    vault.sudo()
    token = grant(vault, "sweep", "allow_all")
    with ipc(vault) as owner:
        card = owner.request({"op": "protected_card", "title": "Deploy API", "body": "for CI", "token": TOKEN_CANARY})
        note = owner.request({"op": "put", "title": "Server notes", "body": f"login with {BODY_CANARY} then deploy"})
        owner.request({"op": "protect_secret", "id": note["id"], "label": "deploy_key", "value": BODY_CANARY})
        cred = owner.request(
            {
                "op": "credential_new",
                "name": "db",
                "type": "postgres",
                "host": "db.example",
                "user": "app",
                "password": PASSWORD_CANARY,
            }
        )
        knowledge = owner.request({"op": "card_write", "type": "knowledge", "title": "Deploys", "body": "see notes"})
        owner.request({"op": "card_link", "src": knowledge["id"], "dst": note["id"], "rel": "explains"})
        ids = [card["id"], note["id"], knowledge["id"], cred.get("id", "")]

    transcripts: list[str] = []

    async def sweep() -> None:
        async with stdio_client(vault, token) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS - TRANSCRIPT_TOOLS  # no transcripts in this grant

            async def run(name: str, arguments: dict[str, Any]) -> Any:
                result = await client.call_tool(name, arguments)
                transcripts.append(text_of(result))
                return result

            # Queries are echoed back, so they name the canaries only in part.
            for query in ("deploy", "CANARY", "token 7f3a9c", "secret 55e1", "password", "notes", "login"):
                await run("search", {"query": query})
                await run("retrieve", {"query": query})
            await run("memory_list", {"limit": 50})
            for asset in filter(None, ids):
                short = asset[:12]
                for name in ("memory_read", "card_read", "history", "connections", "recall_connected"):
                    await run(name, {"id": short})
            # An agent cannot attach or replace the secret map through card_write (CD-7).
            changed = await run("card_write", {"id": note["id"][:12], "body": "rewritten"})
            assert changed.is_error

    asyncio.run(sweep())
    everything = "\n".join(transcripts)
    assert "Server notes" in everything  # the sweep did reach the items
    for canary in (TOKEN_CANARY, BODY_CANARY, PASSWORD_CANARY, token):
        assert canary not in everything, canary
    assert '"secrets"' not in everything
