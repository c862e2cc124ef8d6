"""The body of every POST to ``/mcp``, screened before the SDK's Streamable HTTP handler (issue 27).

Over HTTP the SDK answers what it cannot validate itself, but:

* its validation error is pydantic's text, which quotes the input (``input_value='…'``): an
  agent that put a secret in the wrong place would see it echoed back (docs/security-mcp.md
  says errors never echo values);
* a body over its size limit gets a plain-text ``413`` that a JSON-RPC client cannot read;
* a JSON-RPC batch is refused although protocol version 2025-03-26 requires batches.

Here the body is read once (up to :data:`~engine.mcp.jsonrpc.MAX_MESSAGE_BYTES`, the size every
call the tool schemas allow fits in) and screened exactly as a stdio line is
(``engine.mcp.jsonrpc``): a message the SDK can take goes on with the same bytes; anything else
is answered here with the JSON-RPC error the spec names, with the id where it can be read, and
never the input. A batch on a 2025-03-26 session (the ``MCP-Protocol-Version`` header says so,
or is absent: the spec's rule for a client of that version) is split into single POSTs to the
SDK and their answers joined into one JSON array; other versions get ``-32600``.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.mcp.jsonrpc import (
    BATCH_VERSIONS,
    INVALID_REQUEST,
    MAX_MESSAGE_BYTES,
    PARSE_ERROR,
    Refusal,
    error_line,
    screen,
    screen_value,
    too_large,
)

__all__ = ["ScreenedPost"]

_VERSION_HEADER = b"mcp-protocol-version"
# What the spec tells a server to assume when a client sends no version header.
_VERSION_WITHOUT_HEADER = "2025-03-26"


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(scope: Scope, receive: Receive) -> bytes | None:
    """The whole body, or ``None`` once it is known to exceed the limit (not read further)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                if int(value) > MAX_MESSAGE_BYTES:
                    return None
            except ValueError:
                pass
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away: what arrived is screened (and fails to parse)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _with_body(scope: Scope, body: bytes) -> tuple[Scope, Receive]:
    """A copy of the request for the SDK carrying ``body`` (and its length)."""
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return {**scope, "headers": headers}, receive


class _Captured:
    """One SDK answer held in memory (a batch member's)."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


class ScreenedPost:
    """ASGI wrapper for the SDK's ``/mcp`` handler: POST bodies are screened first."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await _read_body(scope, receive)
        if body is None:
            await _answer(send, 413, error_line(too_large()))
            return
        screened = screen(body)
        if screened is None:
            await _answer(send, 400, error_line(Refusal(None, PARSE_ERROR, "Parse error: the request body is empty.")))
        elif isinstance(screened, SessionMessage):
            inner_scope, inner_receive = _with_body(scope, body)
            await self.app(inner_scope, inner_receive, send)
        elif isinstance(screened, Refusal):
            await _answer(send, 400, error_line(screened))
        else:
            await self._batch(scope, screened.items, send)

    async def _batch(self, scope: Scope, items: list[Any], send: Send) -> None:
        version = next((v.decode("latin-1") for k, v in scope["headers"] if k == _VERSION_HEADER), _VERSION_WITHOUT_HEADER)
        if version not in BATCH_VERSIONS:
            refusal = Refusal(
                None,
                INVALID_REQUEST,
                f"Invalid request: JSON-RPC batches exist only in protocol version 2025-03-26 (this request: {version}).",
            )
            await _answer(send, 400, error_line(refusal))
            return
        answers: list[bytes] = []
        session: list[tuple[bytes, bytes]] = []
        for item in items:  # in order: a batch's members may depend on nothing but their order is kept
            screened = screen_value(item)
            if screened is None:
                continue
            if isinstance(screened, Refusal):
                answers.append(error_line(screened))
                continue
            message = screened.message
            request_id = message.id if isinstance(message, types.JSONRPCRequest) else None
            if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
                refusal = Refusal(request_id, INVALID_REQUEST, "Invalid request: initialize cannot be part of a batch.")
                answers.append(error_line(refusal))
                continue
            captured = _Captured()
            member = message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
            inner_scope, inner_receive = _with_body(scope, member)
            await self.app(inner_scope, inner_receive, captured.send)
            session = session or [(k, v) for k, v in captured.headers if k.lower() == b"mcp-session-id"]
            if request_id is None:
                continue  # a notification (or a response): no answer in the array
            answers.append(_member_answer(captured, request_id))
        if not answers:
            await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0"), *session]})
            await send({"type": "http.response.body", "body": b""})
            return
        await _answer(send, 200, b"[" + b",".join(answers) + b"]", session)


def _member_answer(captured: _Captured, request_id: str | int) -> bytes:
    """The SDK's JSON answer to one member, or an error carrying the member's id."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(bytes(captured.body), by_name=False)
    except Exception:
        message = None
    if isinstance(message, types.JSONRPCResponse):
        return bytes(captured.body)
    if isinstance(message, types.JSONRPCError):
        error = message.error
    else:
        error = types.ErrorData(code=INVALID_REQUEST, message=f"The request was refused (HTTP {captured.status}).")
    answer = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
    return answer.model_dump_json(by_alias=True, exclude_unset=True).encode()
