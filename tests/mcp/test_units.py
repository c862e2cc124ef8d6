"""Pure pieces of the MCP feature: tokens, scopes, result shaping, tool argument validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.agents import grants as g
from engine.errors import MemoriesError
from engine.mcp import tools
from engine.service.handlers.mcp_grants import scrub_result
from tests.mcp.support import TOOLS


def make_grant(token: str, name: str = "a", revoked: bool = False) -> g.Grant:
    return g.Grant(
        grant_id=name.encode().ljust(16, b"\0"),
        name=name,
        scope="read",
        vaults=(b"v" * 16,),
        token_hash=g.token_digest(token),
        hint=g.token_hint(token),
        created_ms=1,
        revoked_ms=5 if revoked else None,
    )


def test_tokens_hints_and_authentication() -> None:
    """AG-2: random prefixed tokens; masked hint; only an active grant's exact token authenticates."""
    one, two = g.new_token(), g.new_token()
    assert one != two and one.startswith("mem_") and len(one) == 47
    assert g.token_hint(one) == one[:8] + "…" + one[-4:]
    grants = [make_grant(one, "a"), make_grant(two, "b", revoked=True)]
    assert g.authenticate(grants, one).name == "a"
    for bad in (two, one[:-1], one + "x", "", "mem_", one.upper()):
        with pytest.raises(MemoriesError) as caught:
            g.authenticate(grants, bad)
        assert caught.value.code == "unauthorized" and caught.value.message == MemoriesError("unauthorized").message


def test_scopes_are_nested_and_unclassified_ops_need_allow_all() -> None:
    """AG-2: read ⊂ read_write ⊂ read_write_delete ⊂ allow_all; write alone is write-only."""
    table = {
        ("read", "get"): True,
        ("read", "put"): False,
        ("read", "delete"): False,
        ("write", "put"): True,
        ("write", "get"): False,
        ("write", "delete"): False,
        ("read_write", "card_link"): True,
        ("read_write", "delete"): False,
        ("read_write_delete", "delete"): True,
        ("read_write_delete", "some_future_op"): False,
        ("allow_all", "some_future_op"): True,
    }
    for (scope, op), ok in table.items():
        if ok:
            g.require_capability(scope, op)
        else:
            with pytest.raises(MemoriesError) as caught:
                g.require_capability(scope, op)
            assert caught.value.code == "scope_denied"
    with pytest.raises(MemoriesError):
        g.require_capability("unknown-scope", "get")


def test_records_round_trip_with_revocation_and_last_use() -> None:
    token = g.new_token()
    grant = make_grant(token)
    records = {
        g.GRANT_KIND: [(1, grant.to_record())],
        g.USED_KIND: [(2, {"t": g.USED_KIND, "grant_id": grant.grant_id, "used_ms": 10})],
        g.REVOKE_KIND: [(3, {"t": g.REVOKE_KIND, "grant_id": grant.grant_id, "revoked_ms": 20})],
    }
    (loaded,) = g.load_grants(records)
    assert loaded.used_ms == 10 and loaded.revoked_ms == 20 and not loaded.active
    stored = repr(grant.to_record())
    assert token not in stored and token.encode() not in stored.encode()
    assert set(grant.to_record()) == {"t", "grant_id", "name", "scope", "vaults", "token_hash", "hint", "created_ms"}


def test_scrub_and_short_handles() -> None:
    """CD-7/AG-3: secret maps never leave; ids become short handles."""
    result = {
        "id": "a" * 32,
        "short_id": "aaaaaaaa",
        "revision": "b" * 64,
        "short_revision": "bbbbbbbbbbbb",
        "secrets": {"k": "c" * 32},
        "items": [{"secret": "x", "title": "t", "id": "d" * 32, "short_id": "dddddddd"}],
    }
    shown = tools.agent_view(scrub_result(result))
    assert shown == {"id": "aaaaaaaa", "revision": "bbbbbbbbbbbb", "items": [{"title": "t", "id": "dddddddd"}]}


def test_tool_schemas_are_inline_and_closed() -> None:
    """AG-3: every tool publishes a closed object schema without $ref."""
    assert len(tools.TOOL_NAMES) == len(set(tools.TOOL_NAMES)) and set(tools.TOOL_NAMES) == TOOLS
    for spec in tools.TOOLS:
        schema = tools.input_schema(spec)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert "$ref" not in json.dumps(schema)


@given(st.dictionaries(st.text(max_size=12), st.one_of(st.text(max_size=30), st.integers(), st.none()), max_size=4))
def test_tool_arguments_never_crash_and_never_echo_values(arguments: dict[str, object]) -> None:
    """API-8: arbitrary arguments give a result or a typed error that does not repeat the values."""
    for spec in tools.TOOLS:
        try:
            parsed = tools.parse_arguments(spec, arguments)
        except MemoriesError as exc:
            assert exc.code in {"invalid_request", "unknown_field"}
            for value in arguments.values():
                if isinstance(value, str) and len(value) >= 6:
                    assert value not in exc.message
        else:
            try:
                body = spec.build(parsed)
            except MemoriesError as exc:
                assert exc.code == "invalid_request"
            else:
                assert isinstance(body["op"], str)


def test_memory_write_update_needs_base() -> None:
    spec = tools.tool("memory_write")
    with pytest.raises(MemoriesError) as caught:
        spec.build(tools.parse_arguments(spec, {"title": "t", "id": "abcd1234"}))
    assert caught.value.code == "invalid_request"
    body = spec.build(tools.parse_arguments(spec, {"title": "t", "id": "abcd1234", "base": "ef012345"}))
    assert body["op"] == "edit" and body["base"] == "ef012345"
    with pytest.raises(MemoriesError) as caught:
        tools.tool("nope")
    assert caught.value.code == "unknown_op"


def test_http_listener_is_loopback_tcp_with_nodelay_on_accepted_sockets() -> None:
    """AG-1: the HTTP listener binds 127.0.0.1 only; proto=TCP so asyncio sets TCP_NODELAY per connection."""
    import socket

    from engine.mcp.http import bind_loopback

    sock = bind_loopback(0)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_tool_whose_op_the_engine_lacks_answers_unknown_op() -> None:
    """AG-3, API-8: the tool layer reports the engine's code as an MCP tool error (in-process SDK server)."""
    import asyncio
    from typing import Any

    from mcp import Client

    from engine.mcp.server import build_server

    sent: list[dict[str, Any]] = []

    async def engine_without_ask(inner: dict[str, Any]) -> dict[str, Any]:
        sent.append(inner)
        if inner["op"] == "ask":
            raise MemoriesError("unknown_op")
        return {"items": [], "total": 0, "conflicts": 0}

    async def scenario() -> None:
        async with Client(build_server(engine_without_ask)) as client:
            missing = await client.call_tool("ask", {"question": "why?"})
            assert missing.is_error
            assert missing.structured_content == {"error": {"code": "unknown_op", "message": MemoriesError("unknown_op").message}}
            listed = await client.call_tool("memory_list", {})
            assert not listed.is_error and listed.structured_content == {"items": [], "total": 0, "conflicts": 0}

    asyncio.run(scenario())
    assert sent == [{"op": "ask", "query": "why?", "limit": 5}, {"op": "list", "limit": 20, "offset": 0}]


def test_parsed_grants_are_cached_until_a_grant_record_is_added() -> None:
    """AG-2: the per-call check does not re-parse every grant record, yet sees a revocation at once."""
    from types import SimpleNamespace
    from typing import Any, cast

    from engine.service.handlers.mcp_grants import _McpRuntime

    token = g.new_token()
    grant = make_grant(token)
    used = [(2 + i, {"t": g.USED_KIND, "grant_id": grant.grant_id, "used_ms": 10 + i}) for i in range(3)]
    records: dict[str, list[tuple[int, dict[str, Any]]]] = {g.GRANT_KIND: [(1, grant.to_record())], g.USED_KIND: used}
    state = cast(Any, SimpleNamespace(extra_records=records))
    runtime = _McpRuntime()
    first = runtime.grants(state)
    assert runtime.grants(state) is first  # nothing added: no re-parse
    assert g.authenticate(first, token).used_ms == 12
    records[g.REVOKE_KIND] = [(9, {"t": g.REVOKE_KIND, "grant_id": grant.grant_id, "revoked_ms": 20})]
    with pytest.raises(MemoriesError):
        g.authenticate(runtime.grants(state), token)
    runtime.clear()  # on lock
    assert runtime.grants(state) is not first


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(), st.text(max_size=6), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)),
        "method": st.one_of(st.sampled_from(["tools/list", "tools/call", "notifications/x"]), st.integers()),
        "params": _JSON,
        "result": _JSON,
    },
)


@given(
    st.one_of(
        st.binary(max_size=60), _JSON.map(json.dumps), _MESSAGE.map(json.dumps), st.lists(_MESSAGE, max_size=3).map(json.dumps)
    )
)
def test_every_line_is_passed_on_or_answered_with_a_jsonrpc_error(line: str | bytes) -> None:
    """Issue 27: no line makes the screen raise; what it answers is a JSON-RPC error object (or
    an array of answers) whose code is one the spec names, and no answer quotes the line."""
    from engine.mcp.jsonrpc import Exchange

    for negotiated in (None, "2025-03-26"):
        exchange = Exchange()
        exchange.negotiated = negotiated
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        messages, answers = exchange.inbound(raw)
        for answer in answers:
            decoded = json.loads(answer)
            for item in decoded if isinstance(decoded, list) else [decoded]:
                assert item["jsonrpc"] == "2.0" and set(item) == {"jsonrpc", "id", "error"}
                assert item["error"]["code"] in (-32700, -32600, -32602)
                assert item["id"] is None or type(item["id"]) in (int, str)
        if isinstance(line, str) and len(line) >= 12 and answers:
            assert line not in b"".join(answers).decode()
        assert len(messages) <= 3


def test_replayed_writes_wait_for_a_running_one_and_expire() -> None:
    """Issue 27: the same key while the first write runs waits for its answer; another grant's
    key differs; an expired or no-longer-valid answer is written anew."""
    import threading

    from engine.agents.replay import Replays

    replays = Replays(window_ms=60_000)
    key = replays.key(b"g1", {"op": "put", "title": "t"})
    assert key != replays.key(b"g2", {"op": "put", "title": "t"})
    assert key == replays.key(b"g1", {"title": "t", "op": "put"})  # key order does not matter
    started, release = threading.Event(), threading.Event()
    writes: list[int] = []

    def slow_write() -> dict[str, object]:
        writes.append(1)
        started.set()
        assert release.wait(30)
        return {"id": "abc"}

    first: list[dict[str, object]] = []
    worker = threading.Thread(target=lambda: first.append(replays.run(key, slow_write, lambda _a: True)))
    worker.start()
    assert started.wait(30)
    second: list[dict[str, object]] = []
    retry = threading.Thread(target=lambda: second.append(replays.run(key, slow_write, lambda _a: True)))
    retry.start()
    release.set()
    worker.join(30)
    retry.join(30)
    assert writes == [1] and first == [{"id": "abc"}] and second == [{"id": "abc", "replayed": True}]
    # The item is gone: the write runs again.
    assert replays.run(key, lambda: {"id": "def"}, lambda _a: False) == {"id": "def"}
    expired = Replays(window_ms=-1)
    expired.run(key, lambda: {"id": "x"}, lambda _a: True)
    assert expired.run(key, lambda: {"id": "y"}, lambda _a: True) == {"id": "y"}
