"""A retried agent write does not duplicate (issue 27, item 9), through the official MCP client.

A client that gives up on a ``memory_write`` (its timeout, the user pressing stop) cancels
the call; the engine may have saved it already, and the client's retry must not save it
again. Writes are idempotent per grant and content within a window (engine.agents.replay).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.shared.exceptions import MCPError

from tests.helpers import Cli
from tests.mcp.support import error_of, grant, ipc, result_of, stdio_client


def _titled(cli: Cli, title: str) -> list[dict[str, Any]]:
    with ipc(cli) as client:
        listed = client.request({"op": "list", "limit": 200})
    return [item for item in listed["items"] if item["title"] == title]


def test_a_cancelled_write_retried_is_saved_once(vault: Cli) -> None:
    """Issue 27: a memory_write the client cancels while the engine is still saving it (a body
    of a few hundred KB takes the engine a second or more), then retries at once: one memory,
    and the retry's answer is the first write's (`replayed`). A retry that reaches the engine
    while the first write runs waits for it rather than writing again."""
    vault.sudo()
    token = grant(vault, "retry", "read_write")

    async def attempt(client: Any, title: str, timeout: float) -> dict[str, Any] | None:
        """The retry's answer, or None when the engine answered before the client gave up (a
        fast machine: that try proves nothing, and a shorter one is made)."""
        arguments = {"title": title, "body": "release notes " * 50_000, "tags": ["retry"]}
        try:
            # The client gives up before the engine is done, and cancels the call.
            await client.call_tool("memory_write", arguments, read_timeout_seconds=timeout)
        except (MCPError, TimeoutError):
            pass
        else:
            return None
        retried = result_of(await client.call_tool("memory_write", arguments))
        items = _titled(vault, title)
        assert len(items) == 1, f"{len(items)} copies of one write"
        assert items[0]["short_id"] == retried["id"]
        return retried

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            # The cancelled call has to reach the engine before the client gives up, and the
            # engine must still be saving it then. How long that window lasts depends on the
            # machine (a loaded one passes the call on later, a quiet one saves it sooner), so
            # several bounds are tried; each try either proves the replay or proves nothing.
            for number, timeout in enumerate((1.0, 0.5, 0.25, 0.1, 2.0), start=1):
                retried = await attempt(client, f"Cancelled then retried {number}", timeout)
                if retried is not None and retried.get("replayed") is True:
                    return
            raise AssertionError("no cancelled call reached the engine while it was still saving it")

    asyncio.run(scenario())


def test_the_same_write_twice_is_one_item_and_an_update_one_revision(vault: Cli) -> None:
    """Issue 27: a write repeated by the same grant answers the first write again (create and
    update alike); another grant, or the same content after a delete, is a new write."""
    vault.sudo()
    token = grant(vault, "twice", "read_write_delete")
    other = grant(vault, "other", "read_write")
    note: dict[str, Any] = {"title": "Standup at nine", "body": "daily, room 4", "tags": ["team"]}

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            first = result_of(await client.call_tool("memory_write", note))
            again = result_of(await client.call_tool("memory_write", note))
            assert "replayed" not in first and again["replayed"] is True
            assert again["id"] == first["id"] and again["revision"] == first["revision"]
            assert len(_titled(vault, note["title"])) == 1

            update = {**note, "id": first["id"], "base": first["revision"], "body": "daily, room 5"}
            edited = result_of(await client.call_tool("memory_write", update))
            edited_again = result_of(await client.call_tool("memory_write", update))
            assert edited_again["revision"] == edited["revision"] and edited_again["replayed"] is True
            history = result_of(await client.call_tool("history", {"id": first["id"]}))
            assert len(history["revisions"]) == 2  # no second revision from the same base (no conflict)
            read = result_of(await client.call_tool("memory_read", {"id": first["id"]}))
            assert read["body"] == "daily, room 5" and read.get("conflict") in (None, False)

            # A different note is a different write.
            assert "replayed" not in result_of(await client.call_tool("memory_write", {**note, "body": "weekly"}))

        async with stdio_client(vault, other) as client:
            theirs = result_of(await client.call_tool("memory_write", note))
            assert "replayed" not in theirs and theirs["id"] != first["id"]

        async with stdio_client(vault, token) as client:
            # After the first item is deleted, the same content is written anew.
            assert result_of(await client.call_tool("memory_delete", {"id": first["id"]}))
            anew = result_of(await client.call_tool("memory_write", note))
            assert "replayed" not in anew and anew["id"] != first["id"]
            assert error_of(await client.call_tool("memory_read", {"id": first["id"]}))["code"] == "not_found"

    asyncio.run(scenario())
