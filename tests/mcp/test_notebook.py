"""AG-13: each connected agent's private notebook, through the official MCP client over real stdio
and Streamable HTTP, a real daemon and the real CLI.

Agent A holds every tool there is (allow_all, transcripts); agent B writes in its notebook
markers that A never sends anywhere. A then calls every tool it is listed, filling id-like
arguments with B's entry and notebook IDs and query-like arguments with the words B wrote:
no answer may carry B's markers. The user reads, exports and deletes notebooks from the CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from engine.agents import notebook as nb
from engine.errors import MemoriesError
from tests.helpers import Cli
from tests.mcp.support import NOTEBOOK_TOOLS, error_of, http_client, http_server, ipc, result_of, stdio_client, text_of

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"


def _call(cli: Cli, token: str, inner: dict[str, Any]) -> dict[str, Any]:
    client = ipc(cli)
    try:
        result: dict[str, Any] = client.request({"op": "mcp_call", "token": token, "request": inner})["result"]
        return result
    finally:
        client.close()


def _code(cli: Cli, body: dict[str, Any]) -> str:
    client = ipc(cli)
    try:
        with pytest.raises(MemoriesError) as exc:
            client.request(body)
        return exc.value.code
    finally:
        client.close()


class Agents:
    def __init__(self, cli: Cli, a: str, b: str, markers: dict[str, str], word: str, b_ids: list[str], b_notebook: str) -> None:
        self.cli, self.a, self.b = cli, a, b
        self.markers = markers  # text only B ever sent: must never reach A
        self.word = word  # a word of B's entries, for A's queries
        self.b_ids = b_ids  # B's entry IDs (short and full) and its notebook ID
        self.b_notebook = b_notebook


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    cli = Cli(home=tmp_path_factory.mktemp("notebook") / "home")
    cli.init()
    cli.ok("transcript", "import", str(DATA))
    cli.put("Shared memory", "an ordinary memory both agents may read")
    cli.sudo()
    a = cli.ok("mcp", "grant", "--name", "agent-a", "--scope", "allow_all", "--transcripts")["token"]
    b = cli.ok("mcp", "grant", "--name", "agent-b", "--scope", "read")["token"]
    tag = secrets.token_hex(4)
    word = f"nbword{tag}"
    markers = {
        "title": f"nbtitle{tag}",
        "body": f"nbbody{tag}",
        "scratch": f"nbscratch{tag}",
        "chinese": f"私人笔记{tag}",
        "tag": f"nbtag{tag}",
    }
    first = _call(cli, b, {"op": "notebook_write", "title": f"{markers['title']} plan", "body": f"{word} {markers['body']}"})
    _call(
        cli,
        b,
        {"op": "notebook_write", "id": first["id"], "title": f"{markers['title']} v2", "body": f"{word} {markers['chinese']}"},
    )
    second = _call(cli, b, {"op": "notebook_write", "title": word, "body": "second entry", "tags": [markers["tag"]]})
    _call(cli, b, {"op": "scratch_write", "text": f"{word} {markers['scratch']}"})
    shown = cli.ok("agent", "notebook", "agent-b")
    full_ids = [e["id"] for e in shown["entries"]]
    assert {first["id"], second["id"]} <= {i[:8] for i in full_ids}
    b_notebook = shown["notebook"]["id"]
    yield Agents(cli, a, b, markers, word, [first["id"], second["id"], *full_ids, b_notebook, b_notebook[:8]], b_notebook)
    cli.stop()


# -- building hostile arguments for every tool from its published schema -------------------------
_ID_FIELDS = {"id", "source", "target", "turn", "session", "base", "author"}
_QUERY_FIELDS = {"query", "question"}


def _value(name: str, schema: dict[str, Any], candidate: str, word: str) -> Any:
    kind = schema.get("type")
    options = schema.get("anyOf")
    if options:
        kind = next((o.get("type") for o in options if o.get("type") not in (None, "null")), None)
        schema = next((o for o in options if o.get("type") == kind), schema)
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "string":
        if name in _ID_FIELDS:
            return candidate
        if name in _QUERY_FIELDS:
            return word
        return "probe"  # content A writes is neutral: nothing of B's can come back as A's own
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return True
    if kind == "array":
        if name in ("turns", "ids"):
            return [candidate]
        return ["probe"]
    if kind == "object":
        return {}
    return None


def _arguments(schema: dict[str, Any], candidate: str, word: str) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    return {name: _value(name, sub, candidate, word) for name, sub in props.items()}


async def _sweep(client: Client, agents: Agents) -> list[str]:
    """Call every listed tool with B's IDs and words; return every answer's full text."""
    listed = (await client.list_tools()).tools
    names = {t.name for t in listed}
    assert NOTEBOOK_TOOLS <= names  # A has its own notebook tools…
    answers = []
    for tool in listed:
        for candidate in agents.b_ids:
            arguments = _arguments(tool.input_schema, candidate, agents.word)
            answers.append(text_of(await client.call_tool(tool.name, arguments)))
            # the same call with only the ID (other fields at their defaults)
            required = {k: v for k, v in arguments.items() if k in tool.input_schema.get("required", []) or k in _ID_FIELDS}
            answers.append(text_of(await client.call_tool(tool.name, required)))
    # …which show only its own entries.
    own = result_of(await client.call_tool("notebook_list", {}))
    assert all(e["id"] not in agents.b_ids for e in own["entries"])
    return answers


def _assert_no_leak(answers: list[str], agents: Agents) -> None:
    assert answers
    for text in answers:
        for what, marker in agents.markers.items():
            assert marker not in text, f"B's notebook {what} reached agent A"
        assert agents.b_notebook not in text


def test_other_agent_cannot_reach_notebook_through_any_tool_stdio(agents: Agents) -> None:
    """AG-13: agent A cannot list, read or search agent B's notebook through ANY tool (stdio)."""

    async def scenario() -> list[str]:
        async with stdio_client(agents.cli, agents.a) as client:
            return await _sweep(client, agents)

    _assert_no_leak(asyncio.run(scenario()), agents)


def test_other_agent_cannot_reach_notebook_through_any_tool_http(agents: Agents) -> None:
    """AG-13: the same sweep over Streamable HTTP; B still reads its own entries meanwhile."""
    with http_server(agents.cli, agents.a) as server:

        async def scenario() -> list[str]:
            async with http_client(server.url, agents.a) as client:
                return await _sweep(client, agents)

        answers = asyncio.run(scenario())
    _assert_no_leak(answers, agents)
    mine = _call(agents.cli, agents.b, {"op": "notebook_search", "query": agents.word})["results"]
    assert {r["id"] for r in mine} >= {agents.b_ids[0], agents.b_ids[1], "scratch"}


def test_own_notebook_over_mcp_entries_revisions_scratch(agents: Agents) -> None:
    """AG-13: a read-only grant writes, revises, reads back, searches (Chinese too), forgets; scratch appends."""

    async def scenario() -> None:
        async with stdio_client(agents.cli, agents.b) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert NOTEBOOK_TOOLS <= listed and "memory_write" not in listed  # read scope, own notebook
            entries = result_of(await client.call_tool("notebook_list", {}))
            assert entries["total"] == 2 and entries["scratch"]["rev"] == 1
            first = result_of(await client.call_tool("notebook_read", {"id": agents.b_ids[0], "history": True}))
            assert first["rev"] == 2 and agents.markers["chinese"] in first["body"] and len(first["revisions"]) == 2
            old = result_of(await client.call_tool("notebook_read", {"id": agents.b_ids[0], "rev": 1}))
            assert agents.markers["body"] in old["body"]
            hits = result_of(await client.call_tool("notebook_search", {"query": agents.markers["chinese"]}))["results"]
            assert [h["id"] for h in hits] == [agents.b_ids[0]]
            wrote = result_of(await client.call_tool("scratch_write", {"text": "next: check port", "append": True}))
            assert wrote["rev"] == 2
            pad = result_of(await client.call_tool("scratch_read", {}))
            assert pad["text"].endswith("\nnext: check port") and agents.markers["scratch"] in pad["text"]
            temp = result_of(await client.call_tool("notebook_write", {"title": "temporary", "body": "drop me"}))
            assert result_of(await client.call_tool("notebook_forget", {"id": temp["id"]}))["forgotten"] is True
            assert error_of(await client.call_tool("notebook_read", {"id": temp["id"]}))["code"] == "not_found"
            after = result_of(await client.call_tool("notebook_list", {}))
            assert after["total"] == 2
            bad = error_of(await client.call_tool("notebook_write", {"title": "x", "notebook": agents.b_notebook}))
            assert bad["code"] == "unknown_field"

    asyncio.run(scenario())


def test_notebook_ops_bound_to_the_authenticated_grant(agents: Agents) -> None:
    """AG-13: the daemon takes the notebook from the authenticated grant, never from the request."""
    cli = agents.cli
    # Not through mcp_call (the local CLI, the dashboard): refused, whatever it names.
    assert _code(cli, {"op": "notebook_list"}) == "permission_denied"
    assert _code(cli, {"op": "notebook_read", "id": agents.b_ids[0]}) == "permission_denied"
    # A request cannot name a grant, a notebook or a key.
    for extra in ({"grant": "agent-b"}, {"notebook": agents.b_notebook}, {"grant_id": agents.b_notebook}):
        assert _code(cli, {"op": "mcp_call", "token": agents.a, "request": {"op": "notebook_list", **extra}}) == "unknown_field"
    # The user's ops are not open to agents, whatever the scope.
    for inner in ({"op": "notebook_show", "name": "agent-b"}, {"op": "notebook_delete", "name": "agent-b"}):
        assert _code(cli, {"op": "mcp_call", "token": agents.a, "request": inner}) == "permission_denied"
    # A's entry prefix of B's entry finds nothing in A's own notebook.
    a_read = {"op": "mcp_call", "token": agents.a, "request": {"op": "notebook_read", "id": agents.b_ids[0]}}
    assert _code(cli, a_read) == "not_found"


def test_wrapped_key_opens_only_for_its_grant() -> None:
    """AG-13: a notebook key wrapped for one grant's token cannot be opened with another grant's key."""
    notebook_id, grant_b, grant_a = os.urandom(16), os.urandom(16), os.urandom(16)
    key = nb.new_notebook_key()
    wrapped = nb.wrap_key(nb.grant_wrap_key("mem_tokenB", grant_b), notebook_id, grant_b, key)
    assert nb.unwrap_key(nb.grant_wrap_key("mem_tokenB", grant_b), notebook_id, grant_b, wrapped) == key
    for wrapping, grant in (
        (nb.grant_wrap_key("mem_tokenA", grant_a), grant_a),  # another grant
        (nb.grant_wrap_key("mem_tokenA", grant_b), grant_b),  # another token, B's grant ID claimed
        (nb.grant_wrap_key("mem_tokenB", grant_b), grant_a),  # B's key, bound to another grant ID
    ):
        with pytest.raises(MemoriesError) as exc:
            nb.unwrap_key(wrapping, notebook_id, grant, wrapped)
        assert exc.value.code == "permission_denied"
    blob = nb.seal_entry(key, notebook_id, b"\x01" * 16, 1, {"title": "t"})
    with pytest.raises(MemoriesError):  # a row moved to another entry or revision does not open
        nb.open_entry(key, notebook_id, b"\x01" * 16, 2, blob)


def test_canary_never_in_shared_search_or_other_answers(agents: Agents) -> None:
    """AG-13: notebook text never reaches the shared search (user or agent), retrieve or ask."""
    cli = agents.cli
    for marker in (agents.word, agents.markers["body"], agents.markers["chinese"], agents.markers["scratch"]):
        found = cli.ok("search", marker)
        assert found["results"] == [] and found["total"] == 0
        for token in (agents.a, agents.b):
            assert _call(cli, token, {"op": "search", "query": marker})["results"] == []
            assert _call(cli, token, {"op": "retrieve", "query": marker})["passages"] == []


def test_revocation_keeps_notebook_export_then_delete(agents: Agents, tmp_path: Path) -> None:
    """AG-13: revoking an agent keeps its notebook; the user reads and exports it; deleting needs sudo."""
    cli = agents.cli
    cli.sudo()
    cli.ok("mcp", "revoke", "agent-b")
    assert _code(cli, {"op": "mcp_call", "token": agents.b, "request": {"op": "notebook_list"}}) == "unauthorized"
    listed = {n["agent"]: n for n in cli.ok("agent", "notebook")["notebooks"]}
    assert listed["agent-b"]["agent_active"] is False and listed["agent-b"]["entries"] >= 2
    text = cli.run("agent", "notebook", "agent-b")
    assert text.returncode == 0 and agents.markers["chinese"] in text.stdout and agents.markers["scratch"] in text.stdout
    target = tmp_path / "b-notebook.json"
    done = cli.ok("agent", "notebook", "agent-b", "--export", str(target))
    assert done["exported"] == str(target) and (target.stat().st_mode & 0o777) == 0o600
    exported = json.loads(target.read_text(encoding="utf-8"))
    assert exported["format"] == "memories-notebook" and exported["notebook"]["id"] == agents.b_notebook
    bodies = [r.get("body", "") for e in exported["entries"] for r in e["revisions"]]
    assert any(agents.markers["body"] in b for b in bodies) and any(agents.markers["chinese"] in b for b in bodies)
    assert exported["scratch"]["revisions"][0]["text"].endswith(agents.markers["scratch"])
    again = cli.err("agent", "notebook", "agent-b", "--export", str(target))
    assert again["code"] == "invalid_input"  # never over an existing file
    # Deleting is elevated: a fresh namespace (no sudo) is refused and nothing changes.
    assert _code(cli, {"op": "notebook_delete", "name": "agent-b"}) == "elevation_required"
    assert cli.ok("agent", "notebook", "agent-b")["notebook"]["id"] == agents.b_notebook
    gone = cli.ok("agent", "notebook", "agent-b", "--delete")
    assert gone["id"] == agents.b_notebook and gone["revisions_erased"] >= 5
    assert cli.err("agent", "notebook", "agent-b")["code"] == "not_found"
    assert "agent-b" not in {n["agent"] for n in cli.ok("agent", "notebook")["notebooks"]}


def test_connect_again_keeps_the_notebook(vault: Cli, tmp_path: Path) -> None:
    """AG-13: `agent connect` again (a scope change replaces the grant) hands the notebook to the new grant."""
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    vault.env.pop("CODEX_HOME", None)
    project = tmp_path / "proj"
    project.mkdir()
    vault.sudo()
    first = vault.ok("agent", "connect", "codex", "--project", str(project))
    token_file = vault.home / "agents" / f"{first['name']}.token"
    old = token_file.read_text().strip()
    wrote = _call(vault, old, {"op": "notebook_write", "title": "kept across connects", "body": "port 5433"})
    again = vault.ok("agent", "connect", "codex", "--project", str(project), "--scope", "read")
    assert again["grant"] == "created"
    new = token_file.read_text().strip()
    assert new != old
    assert _code(vault, {"op": "mcp_call", "token": old, "request": {"op": "notebook_list"}}) == "unauthorized"
    read = _call(vault, new, {"op": "notebook_read", "id": wrote["id"]})
    assert read["body"] == "port 5433"
    listed = vault.ok("agent", "notebook")["notebooks"]
    assert len(listed) == 1 and listed[0]["agent"] == first["name"] and listed[0]["agent_active"] is True
