"""The transcript core (AG-5, seed 000): adapter-neutral events and their stable hash identities.

Adapters (``claude_code``, ``codex``) turn a client's private file format into ``Event``
values; nothing here knows any client format. Identities, exactly as seed 000 defines them
(``|`` is a literal separator, the parts are UTF-8, the hash is SHA-256 in lowercase hex; an
absent optional part is left out together with its separator):

- ``session_uid  = sha256(source_agent | device_id | session_key [| agent_instance_id])``
- ``thread_uid   = sha256(session_uid | thread_key)``
- ``event_uid    = sha256(thread_uid | native_key | content_hash | occurrence)``
- ``turn_uid     = the source's own turn id, else the event_uid of the turn's first user message``
- ``revision_id  = sha256(source_sha256 | adapter_version | ingest_version)``

``seq`` (a turn's step number inside its session) is assigned on first import and only
ever appended to: it is for display and citation, never an identity.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "INGEST_VERSION",
    "Role",
    "EventType",
    "Event",
    "Parsed",
    "sha256_hex",
    "session_uid",
    "thread_uid",
    "event_uid",
    "content_hash",
    "revision_id",
    "occurrences",
    "MAX_EVENT_TEXT",
]

# Bumped when the importer's own interpretation of events changes (part of revision_id).
INGEST_VERSION: Final = "1"
# One event's text is cut here (a tool that printed megabytes is not a memory).
MAX_EVENT_TEXT: Final = 64 * 1024

Role = Literal["user", "assistant", "tool", "system"]
# message: what a person or the model said; tool_call / tool_result: tool use;
# context: text a client injects into the conversation (instructions, environment) —
# kept, but it never starts a turn.
EventType = Literal["message", "tool_call", "tool_result", "context"]


def sha256_hex(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()


def session_uid(source_agent: str, device_id: str, session_key: str, agent_instance_id: str | None = None) -> str:
    parts = [source_agent, device_id, session_key]
    if agent_instance_id:
        parts.append(agent_instance_id)
    return sha256_hex(*parts)


def thread_uid(session: str, thread_key: str) -> str:
    return sha256_hex(session, thread_key)


def content_hash(role: str, type_: str, name: str, text: str) -> str:
    return sha256_hex(role, type_, name, text)


def event_uid(thread: str, native_key: str, chash: str, occurrence: int) -> str:
    return sha256_hex(thread, native_key, chash, str(occurrence))


def occurrences(events: list[Event], seen: dict[tuple[str, str, str, str, str], int] | None = None) -> list[int]:
    """Each event's occurrence number in its file: equal (thread, native key, content) events before it.

    ``seen``: the counts of the file's events before these (``transcript watch`` reading only what
    was appended, engine/transcripts/follow.py); updated in place."""
    seen = {} if seen is None else seen
    out: list[int] = []
    for ev in events:
        chash = content_hash(ev.role, ev.type, ev.name, ev.text)
        key = (ev.session_key, ev.agent_instance_id, ev.thread_key, ev.native_key, chash)
        n = seen.get(key, 0)
        out.append(n)
        seen[key] = n + 1
    return out


def revision_id(source_sha256: str, adapter_version: str, ingest_version: str = INGEST_VERSION) -> str:
    return sha256_hex(source_sha256, adapter_version, ingest_version)


@dataclass(frozen=True)
class Event:
    """One adapter-neutral event. ``native_key`` is the source's own ID for it when there is one."""

    session_key: str
    thread_key: str
    native_key: str
    role: Role
    type: EventType
    text: str
    name: str = ""  # the tool's name for tool calls/results
    ts: str = ""  # ISO 8601 as the source wrote it ("" when absent)
    turn_key: str = ""  # the source's own turn ID, when it has one
    parent_thread: str = ""  # for a sub-agent thread: the thread that started it
    agent_instance_id: str = ""
    # Equal (thread, native key, content) events before this one in its file, when the importer
    # counted them (it then sends only a growing file's new events, AG-8); -1: count here.
    occurrence: int = -1


@dataclass
class Parsed:
    """What an adapter read from one file: its events, what it skipped, and where it stopped."""

    adapter: str
    adapter_version: str
    events: list[Event] = field(default_factory=list)
    # (line number, reason) for each line that was skipped; never the line's content.
    warnings: list[tuple[int, str]] = field(default_factory=list)
    # Bytes of complete lines consumed; a last line without its newline is still being written.
    consumed: int = 0
    pending_bytes: int = 0
    lines: int = 0
    # session_key -> the working directory the client reported for it (the first one seen):
    # what `agent connect --transcripts this-project` matches against the project (AG-11).
    cwds: dict[str, str] = field(default_factory=dict)
