"""JSON-RPC at the edge of our transports: what reaches the SDK, and the spec's error for the rest.

The SDK's stdio transport hands a line it cannot validate to the server as an ``Exception``
item, and the server only logs it: the client gets no answer and waits for its own timeout
(issue 27, item 9). That covers invalid JSON, a lone UTF-16 surrogate (``"\\ud83d"``: half an
emoji, as JavaScript clients send when they cut a string between the two halves), a batch,
``params`` that is not an object, a message without ``method``. Here every inbound line is
screened before the SDK sees it, and whatever the SDK would drop is answered with the error
JSON-RPC 2.0 names for it (and the request's ``id`` whenever it can be read):

* ``-32700`` parse error: not JSON, or not valid Unicode (a lone surrogate: pydantic, which
  the SDK parses with, refuses it, and so do the HTTP transport and the engine);
* ``-32600`` invalid request: not a JSON-RPC 2.0 request object, an empty batch, a batch in a
  protocol version without batches, a message over the size limit;
* ``-32602`` invalid params: ``params`` present but not an object (MCP's params are named).

A notification or a client's response that is malformed is dropped, as JSON-RPC requires (a
notification is never answered). Messages are never echoed back: an error names the problem,
not the input (it may hold a secret the agent put in the wrong place).

Batches: MCP 2025-03-26 requires a server to accept JSON-RPC batches; the versions before and
after it have none. :class:`Exchange` splits a batch into single messages for the SDK when the
session negotiated 2025-03-26 and joins their answers into one array line, and answers
``-32600`` otherwise. The HTTP transport does the same per POST (``engine.mcp.http``).

Nothing here does I/O: the transports call :meth:`Exchange.inbound` per line read and
:meth:`Exchange.outbound` per message to write.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from engine.mcp import tools

__all__ = [
    "BATCH_VERSIONS",
    "Exchange",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_MESSAGE_BYTES",
    "PARSE_ERROR",
    "Refusal",
    "error_line",
    "screen",
    "screen_value",
]

log = logging.getLogger("memories.mcp")

PARSE_ERROR = types.PARSE_ERROR  # -32700
INVALID_REQUEST = types.INVALID_REQUEST  # -32600
INVALID_PARAMS = types.INVALID_PARAMS  # -32602

# The protocol versions whose transports carry JSON-RPC batches (added in 2025-03-26, removed
# again in 2025-06-18).
BATCH_VERSIONS = frozenset({"2025-03-26"})

# The largest message either transport accepts, derived from the tool schemas so that every
# call the schemas allow fits: the largest text field (8 Mi characters) can grow six-fold in
# JSON (``\u00XX`` for control characters); card_write's 64 meta values of 10 000 characters
# add at most 64 × 10 000 × 6 bytes, and the envelope and short fields far less than 4 MiB.
MAX_MESSAGE_BYTES = 6 * tools.MAX_TEXT_CHARS + 6 * 64 * 10_000 + 4 * 1024 * 1024

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Refusal:
    """A message that gets an error answer instead of reaching the SDK."""

    id: str | int | None
    code: int
    message: str

    def to_message(self) -> types.JSONRPCError:
        return types.JSONRPCError(jsonrpc="2.0", id=self.id, error=types.ErrorData(code=self.code, message=self.message))


@dataclass(frozen=True)
class _Batch:
    items: list[Any]


def error_line(refusal: Refusal) -> bytes:
    return refusal.to_message().model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    return False


def _readable_id(value: dict[str, Any]) -> str | int | None:
    rid = value.get("id")
    if type(rid) is int or (type(rid) is str and not _has_surrogate(rid)):
        return rid
    return None


def screen_value(value: Any) -> SessionMessage | Refusal | None:
    """One parsed message: for the SDK, refused with the spec's error, or dropped (``None``)."""
    if isinstance(value, dict) and not _has_surrogate(value):
        try:
            message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
        except ValidationError:
            pass
        else:
            if not (isinstance(message, types.JSONRPCNotification) and "id" in value):
                return SessionMessage(message)
    return _diagnose(value)


def _diagnose(value: Any) -> Refusal | None:
    if not isinstance(value, dict):
        return Refusal(None, INVALID_REQUEST, "Invalid request: a JSON-RPC message is a JSON object.")
    rid = _readable_id(value)
    answerable = "method" in value and "id" in value  # a request (not a notification or a response)
    if "method" not in value and ("result" in value or "error" in value):
        log.warning("dropped a malformed response from the client")
        return None
    if "id" not in value and "method" in value:
        log.warning("dropped a malformed notification from the client")
        return None
    if _has_surrogate(value):
        return Refusal(
            rid if answerable else None,
            PARSE_ERROR,
            "Parse error: the message holds a lone UTF-16 surrogate (half of a character such as an "
            "emoji, e.g. \\ud83d without its pair), which is not valid Unicode. Send whole characters.",
        )
    if value.get("jsonrpc") != "2.0":
        return Refusal(rid, INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0".')
    if "method" not in value:
        return Refusal(rid, INVALID_REQUEST, 'Invalid request: the message has no "method".')
    if not isinstance(value["method"], str):
        return Refusal(rid, INVALID_REQUEST, 'Invalid request: "method" must be a string.')
    if rid is None:
        return Refusal(None, INVALID_REQUEST, 'Invalid request: "id" must be a string or an integer.')
    if "params" in value and not isinstance(value["params"], dict):
        return Refusal(rid, INVALID_PARAMS, 'Invalid params: "params" must be an object (MCP parameters are named).')
    return Refusal(rid, INVALID_REQUEST, "Invalid request: the message is not a JSON-RPC 2.0 request.")


def screen(line: bytes | str) -> SessionMessage | Refusal | _Batch | None:
    """One line of the stdio wire: a message for the SDK, a refusal, a batch, or nothing (blank)."""
    # Raw bytes that are not UTF-8 are replaced, as the SDK's transport does.
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    if not text.strip():
        return None  # a blank line between messages is not a message
    try:
        # The SDK's own parser first: the common case costs what it did before.
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        pass
    else:
        # An "id" that is not a string or an integer makes pydantic read a request as a
        # notification (the id an ignored extra field), which would never be answered.
        if not (isinstance(message, types.JSONRPCNotification) and '"id"' in text):
            return SessionMessage(message)
        value = json.loads(text)
        if isinstance(value, dict) and "id" not in value:  # "id" was inside params
            return SessionMessage(message)
        return _diagnose(value)
    try:
        # Python's parser accepts lone surrogates, so the id of such a request can be read.
        value = json.loads(text)
    except RecursionError:
        return Refusal(None, PARSE_ERROR, "Parse error: the message is nested too deeply.")
    except ValueError:
        return Refusal(None, PARSE_ERROR, "Parse error: the message is not valid JSON.")
    if isinstance(value, list):
        if not value:
            return Refusal(None, INVALID_REQUEST, "Invalid request: an empty batch.")
        return _Batch(value)
    return _diagnose(value)


def too_large() -> Refusal:
    limit = MAX_MESSAGE_BYTES // (1024 * 1024)
    return Refusal(None, INVALID_REQUEST, f"Invalid request: the message is larger than the {limit} MiB this server accepts.")


@dataclass
class _PendingBatch:
    waiting: set[str | int]
    answers: list[types.JSONRPCMessage] = field(default_factory=list)


class Exchange:
    """Per-connection JSON-RPC bookkeeping between the wire and the SDK (stdio).

    Tracks the protocol version the ``initialize`` answer negotiated (to know whether batches
    exist) and the batches whose answers are still being collected.
    """

    def __init__(self) -> None:
        self.negotiated: str | None = None
        # The id of an ``initialize`` already answered before the SDK was loaded
        # (engine/mcp_handshake.py): the SDK's own answer to it is noted, then not written.
        self.answered_early: str | int | None = None
        self._initialize_ids: set[str | int] = set()
        self._batches: list[_PendingBatch] = []

    def inbound(self, line: bytes) -> tuple[list[SessionMessage], list[bytes]]:
        """One line read: the messages to hand to the SDK, and the lines to answer at once."""
        screened = screen(line)
        if screened is None:
            return [], []
        if isinstance(screened, SessionMessage):
            self._note(screened)
            return [screened], []
        if isinstance(screened, Refusal):
            return [], [error_line(screened)]
        return self._batch(screened.items)

    def _note(self, message: SessionMessage) -> None:
        inner = message.message
        if isinstance(inner, types.JSONRPCRequest) and inner.method == "initialize":
            self._initialize_ids.add(inner.id)

    def _batch(self, items: list[Any]) -> tuple[list[SessionMessage], list[bytes]]:
        if self.negotiated not in BATCH_VERSIONS:
            version = self.negotiated or "none negotiated yet"
            refusal = Refusal(
                None,
                INVALID_REQUEST,
                f"Invalid request: JSON-RPC batches exist only in protocol version 2025-03-26 (this session: "
                f"{version}); send one message per line.",
            )
            return [], [error_line(refusal)]
        forward: list[SessionMessage] = []
        pending = _PendingBatch(waiting=set())
        for item in items:
            screened = screen_value(item)
            if screened is None:
                continue
            if isinstance(screened, Refusal):
                pending.answers.append(screened.to_message())
                continue
            inner = screened.message
            if isinstance(inner, types.JSONRPCRequest) and inner.method == "initialize":
                # 2025-03-26: "the initialize request MUST NOT be part of a JSON-RPC batch".
                pending.answers.append(
                    Refusal(inner.id, INVALID_REQUEST, "Invalid request: initialize cannot be part of a batch.").to_message()
                )
                continue
            if isinstance(inner, types.JSONRPCRequest):
                pending.waiting.add(inner.id)
            forward.append(screened)
        if pending.waiting:
            self._batches.append(pending)
            return forward, []
        # Only notifications/responses (and refusals): nothing to wait for.
        return forward, ([_array(pending.answers)] if pending.answers else [])

    def outbound(self, message: types.JSONRPCMessage) -> list[bytes]:
        """One message from the SDK: the lines to write now (none while its batch is incomplete)."""
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError) and message.id is not None:
            if message.id in self._initialize_ids:
                self._initialize_ids.discard(message.id)
                if isinstance(message, types.JSONRPCResponse):
                    version = message.result.get("protocolVersion")
                    self.negotiated = version if isinstance(version, str) else None
            if self.answered_early is not None and message.id == self.answered_early:
                self.answered_early = None
                return []
            for pending in self._batches:
                if message.id in pending.waiting:
                    pending.waiting.discard(message.id)
                    pending.answers.append(message)
                    if pending.waiting:
                        return []
                    self._batches.remove(pending)
                    return [_array(pending.answers)]
        return [message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")]


def _array(messages: list[types.JSONRPCMessage]) -> bytes:
    return b"[" + b",".join(m.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") for m in messages) + b"]"
