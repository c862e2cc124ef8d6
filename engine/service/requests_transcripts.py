"""Request types of agent transcripts (AG-5): import, list, show, and the MCP recall ops."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import Request

__all__ = [
    "EventIn",
    "TranscriptKnown",
    "TranscriptImport",
    "TranscriptList",
    "TranscriptShow",
    "RecallTurn",
    "RecallSession",
    "MemoryCycle",
    "ConclusionWrite",
]

Hex64 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Key = Annotated[str, msgspec.Meta(max_length=512)]
# A turn or session: a handle from an earlier result ("[2]" or "2"), a turn_uid/session_uid
# or a unique prefix of one (at least 6 hex digits), or a memory ID whose `source` names a turn.
Locator = Annotated[str, msgspec.Meta(min_length=1, max_length=80)]
Adapter = Literal["claude_code", "codex"]


class EventIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One adapter-neutral event (engine.transcripts.model.Event) as sent by the importer."""

    session_key: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    thread_key: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    native_key: Key
    role: Literal["user", "assistant", "tool", "system"]
    type: Literal["message", "tool_call", "tool_result", "context"]
    text: Annotated[str, msgspec.Meta(max_length=80 * 1024)]
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    ts: Annotated[str, msgspec.Meta(max_length=64)] = ""
    turn_key: Key = ""
    parent_thread: Key = ""
    agent_instance_id: Key = ""
    # The event's occurrence number in its file, when the importer sends only new events (watch).
    occurrence: Annotated[int, msgspec.Meta(ge=-1, le=1_000_000_000)] | None = None  # -1 or absent: count here


class TranscriptKnown(Request, tag="transcript_known"):
    """Which of these source revision_ids are already imported (re-import skips them unread)."""

    revisions: Annotated[list[Hex64], msgspec.Meta(max_length=100_000)]


class TranscriptImport(Request, tag="transcript_import"):
    """One batch of one source file's events; ``final`` marks the file's last batch."""

    adapter: Adapter
    adapter_version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    source_sha256: Hex64
    events: Annotated[list[EventIn], msgspec.Meta(max_length=20_000)]
    final: bool = True
    # session_key -> the working directory its client reported (AG-11: project-scoped transcript grants).
    cwds: Annotated[
        dict[
            Annotated[str, msgspec.Meta(min_length=1, max_length=512)],
            Annotated[str, msgspec.Meta(min_length=1, max_length=4096)],
        ],
        msgspec.Meta(max_length=1000),
    ] = msgspec.field(default_factory=dict)


class TranscriptList(Request, tag="transcript_list"):
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    agent: Adapter | None = None


class TranscriptAssign(Request, tag="transcript_assign"):
    """AG-11: record the working directory of a session imported before directories were recorded."""

    session: Locator
    project: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class TranscriptScrub(Request, tag="transcript_scrub"):
    """AG-10: redact the stored turns again (turns stored before redaction, or before a value joined the vault)."""

    dry_run: bool = False


class TranscriptShow(Request, tag="transcript_show"):
    session: Locator
    turn: Annotated[int, msgspec.Meta(ge=1)] | None = None
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000


class RecallTurn(Request, tag="recall_turn"):
    """A turn (by locator, or the best match of ``query``) with up to 10 turns before and after."""

    turn: Locator | None = None
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)] | None = None
    before: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3
    after: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3


class RecallSession(Request, tag="recall_session"):
    """A session's turns, one page at a time (``offset`` counts turns)."""

    session: Locator
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=50)] = 20


class MemoryCycle(Request, tag="memory_cycle"):
    """AG-9: distil new turns into conclusions with the model seat, or with recorded ``replies`` (in order)."""

    replies: Annotated[list[Annotated[str, msgspec.Meta(max_length=1_000_000)]], msgspec.Meta(max_length=10_000)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 40  # turns per batch (one seat call)
    batches: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100


class ConclusionWrite(Request, tag="conclusion_write", kw_only=True):
    """AG-9: a conclusion an agent distilled, citing the turns it rests on."""

    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    body: Annotated[str, msgspec.Meta(max_length=4000)] = ""
    kind: Literal["decision", "fact", "preference", "entity"] = "fact"
    turns: Annotated[list[Locator], msgspec.Meta(min_length=1, max_length=20)]
    key: Annotated[str, msgspec.Meta(min_length=1, max_length=80)] | None = None
