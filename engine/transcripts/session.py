"""A stored transcript session: merge adapter events in, render, and read turns back (AG-5).

One encrypted asset of kind ``transcript`` per session. Its body is the readable rendering
(what search indexes and what recall returns); its summary holds the identities and a table
of threads, turns and events with their offsets in the body. Merging is by ``event_uid``, so
importing the same file again, or a longer version of it, adds only what is new; a turn
keeps the ``seq`` it got first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from engine.transcripts.model import Event, content_hash, event_uid, session_uid, thread_uid

__all__ = ["KIND", "Turn", "StoredEvent", "Session", "AGENT_NAMES", "ADAPTERS_OF"]

KIND: Final = "transcript"
AGENT_NAMES: Final = {"claude_code": "Claude Code", "codex": "Codex"}
ADAPTERS_OF: Final = frozenset(AGENT_NAMES)
_TITLE_CHARS = 80


@dataclass
class StoredEvent:
    uid: str
    turn: int  # index into Session.turns
    role: str
    type: str
    name: str
    ts: str
    text: str


@dataclass
class Turn:
    uid: str
    thread: int  # index into Session.threads
    seq: int  # 1-based, stable, session-wide
    events: list[int] = field(default_factory=list)  # indexes into Session.events


@dataclass
class Session:
    uid: str
    source_agent: str
    session_key: str
    agent_instance_id: str = ""
    threads: list[dict[str, str]] = field(default_factory=list)  # {"uid", "key", "parent"}
    turns: list[Turn] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # revision_id -> adapter version
    _event_uids: set[str] = field(default_factory=set, repr=False)
    _turn_uids: set[str] = field(default_factory=set, repr=False)

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def new(cls, source_agent: str, device_id: str, session_key: str, agent_instance_id: str = "") -> Session:
        uid = session_uid(source_agent, device_id, session_key, agent_instance_id or None)
        return cls(uid=uid, source_agent=source_agent, session_key=session_key, agent_instance_id=agent_instance_id)

    def _thread_index(self, key: str, parent: str) -> int:
        for i, t in enumerate(self.threads):
            if t["key"] == key:
                return i
        self.threads.append({"uid": thread_uid(self.uid, key), "key": key, "parent": parent})
        return len(self.threads) - 1

    def merge(self, events: Sequence[Event]) -> int:
        """Add the events not already here (by event_uid); returns how many were added.

        ``events`` are one source file's events in file order: occurrence numbers count
        identical (native key, content) pairs within a thread of that file, so a longer
        version of the same file gives the same identities for what it shared.
        """
        seen: Counter[tuple[str, str, str]] = Counter()
        last_turn: dict[int, int] = {}
        for ti, turn in enumerate(self.turns):
            last_turn[turn.thread] = ti
        added = 0
        for ev in events:
            tindex = self._thread_index(ev.thread_key, ev.parent_thread)
            tuid = self.threads[tindex]["uid"]
            chash = content_hash(ev.role, ev.type, ev.name, ev.text)
            key = (tuid, ev.native_key, chash)
            occurrence = seen[key]
            seen[key] += 1
            euid = event_uid(tuid, ev.native_key, chash, occurrence)
            if euid in self._event_uids:
                continue
            starts = ev.role == "user" and ev.type == "message"
            current = last_turn.get(tindex)
            if starts or current is None:
                turn_id = ev.turn_key or euid
                if turn_id in self._turn_uids:  # a native turn ID that continues
                    current = next(i for i, t in enumerate(self.turns) if t.uid == turn_id)
                else:
                    self.turns.append(Turn(uid=turn_id, thread=tindex, seq=len(self.turns) + 1))
                    self._turn_uids.add(turn_id)
                    current = len(self.turns) - 1
                last_turn[tindex] = current
            self.events.append(StoredEvent(euid, current, ev.role, ev.type, ev.name, ev.ts, ev.text))
            self.turns[current].events.append(len(self.events) - 1)
            self._event_uids.add(euid)
            added += 1
        return added

    # -- reading ---------------------------------------------------------------------------
    def title(self) -> str:
        agent = AGENT_NAMES.get(self.source_agent, self.source_agent)
        first = next((e.text for e in self.events if e.role == "user" and e.type == "message"), "")
        line = " ".join(first.split())[:_TITLE_CHARS]
        return f"{agent} session: {line}" if line else f"{agent} session {self.session_key[:12]}"

    def started(self) -> str:
        return next((e.ts for e in self.events if e.ts), "")

    def turn_by_uid(self, uid: str) -> int | None:
        for i, t in enumerate(self.turns):
            if t.uid == uid:
                return i
        return None

    def turn_by_seq(self, seq: int) -> int | None:
        return seq - 1 if 1 <= seq <= len(self.turns) else None

    def turn_view(self, index: int) -> dict[str, Any]:
        turn = self.turns[index]
        thread = self.threads[turn.thread]
        return {
            "turn_uid": turn.uid,
            "seq": turn.seq,
            "thread": thread["key"],
            "thread_uid": thread["uid"],
            "ts": next((self.events[e].ts for e in turn.events if self.events[e].ts), ""),
            "events": [
                {
                    "event_uid": self.events[e].uid,
                    "role": self.events[e].role,
                    "type": self.events[e].type,
                    **({"name": self.events[e].name} if self.events[e].name else {}),
                    "ts": self.events[e].ts,
                    "text": self.events[e].text,
                }
                for e in turn.events
            ],
        }

    def turn_text(self, index: int) -> str:
        return "\n".join(self.events[e].text for e in self.turns[index].events)

    # -- storage ---------------------------------------------------------------------------
    def render(self) -> tuple[str, list[tuple[int, int]]]:
        """The body (turns in seq order) and each event's (start, end) in it."""
        parts: list[str] = []
        offsets: list[tuple[int, int]] = [(0, 0)] * len(self.events)
        pos = 0
        for turn in self.turns:
            thread = self.threads[turn.thread]["key"]
            head = f"## Turn {turn.seq}" + ("" if thread == "main" else f" ({thread})") + "\n\n"
            parts.append(head)
            pos += len(head)
            for e in turn.events:
                ev = self.events[e]
                label = f"{ev.role}" + (f" [{ev.name}]" if ev.name else "") + (" (context)" if ev.type == "context" else "")
                prefix = f"**{label}:** "
                parts.append(prefix)
                pos += len(prefix)
                offsets[e] = (pos, pos + len(ev.text))
                parts.append(ev.text)
                parts.append("\n\n")
                pos += len(ev.text) + 2
        return "".join(parts), offsets

    def to_stored(self) -> tuple[dict[str, Any], str]:
        body, offsets = self.render()
        summary: dict[str, Any] = {
            "title": self.title(),
            "tags": ["transcript", self.source_agent],
            "meta": {},
            "transcript": {
                "session_uid": self.uid,
                "source_agent": self.source_agent,
                "session_key": self.session_key,
                "agent_instance_id": self.agent_instance_id,
                "started": self.started(),
                "sources": dict(sorted(self.sources.items())),
                "threads": [dict(t) for t in self.threads],
                "turns": [[t.uid, t.thread] for t in self.turns],
                "events": [
                    [e.uid, e.turn, e.role, e.type, e.name, e.ts, start, end]
                    for e, (start, end) in zip(self.events, offsets, strict=True)
                ],
            },
        }
        return summary, body

    @classmethod
    def from_stored(cls, summary: dict[str, Any], body: str) -> Session:
        t = summary["transcript"]
        session = cls(
            uid=str(t["session_uid"]),
            source_agent=str(t["source_agent"]),
            session_key=str(t["session_key"]),
            agent_instance_id=str(t.get("agent_instance_id", "")),
            threads=[{k: str(v) for k, v in th.items()} for th in t["threads"]],
            sources={str(k): str(v) for k, v in t.get("sources", {}).items()},
        )
        for seq, (uid, thread) in enumerate(t["turns"], start=1):
            session.turns.append(Turn(uid=str(uid), thread=int(thread), seq=seq))
            session._turn_uids.add(str(uid))
        for uid, turn, role, type_, name, ts, start, end in t["events"]:
            session.events.append(StoredEvent(str(uid), int(turn), str(role), str(type_), str(name), str(ts), body[start:end]))
            session.turns[int(turn)].events.append(len(session.events) - 1)
            session._event_uids.add(str(uid))
        return session

    def summary_view(self) -> dict[str, Any]:
        return {
            "session_uid": self.uid,
            "source_agent": self.source_agent,
            "session_key": self.session_key,
            "title": self.title(),
            "started": self.started(),
            "turns": len(self.turns),
            "events": len(self.events),
            "threads": [{"key": t["key"], "thread_uid": t["uid"], "parent": t["parent"]} for t in self.threads],
            "revisions": sorted(self.sources),
        }


def matching_turns(session: Session, words: Iterable[str]) -> list[tuple[int, int]]:
    """(score, turn index) of the turns whose text contains any of ``words`` (case-folded)."""
    needles = [w.casefold() for w in words if w.strip()]
    out = []
    for i in range(len(session.turns)):
        text = session.turn_text(i).casefold()
        score = sum(text.count(n) for n in needles)
        if score:
            out.append((score, i))
    return out
