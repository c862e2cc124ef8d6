"""Adapters and identities (AG-5, seed 000) on hand-written real-format sample sessions; Hypothesis on outside bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.transcripts import claude_code, codex, sources
from engine.transcripts.model import MAX_EVENT_TEXT, revision_id
from engine.transcripts.session import Session

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
CLAUDE = DATA / "claude" / "projects" / "-home-ana-cabin"
MAIN = CLAUDE / "5f1c2d3e-8a9b-4c0d-9e1f-2a3b4c5d6e7f.jsonl"
AGENT_FILE = CLAUDE / "agent-a7f3c2e1.jsonl"
LIVE = CLAUDE / "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a.jsonl"
CODEX = next((DATA / "codex" / "sessions").rglob("rollout-*.jsonl"))
DEVICE = "d" * 64


def h(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def test_claude_code_events_threads_and_skipped_line() -> None:
    """AG-5: user/assistant/tool events; the sidechain is its own thread; a malformed line is skipped by number."""
    parsed = claude_code.parse(MAIN.read_bytes())
    assert parsed.warnings == [(11, "not valid JSON")]
    assert {e.thread_key for e in parsed.events} == {"main", "sidechain"}
    kinds = [(e.role, e.type) for e in parsed.events if e.thread_key == "main"]
    assert ("assistant", "tool_call") in kinds and ("tool", "tool_result") in kinds
    assert not any("Let me look." in e.text for e in parsed.events)  # thinking is not kept
    agent = claude_code.parse(AGENT_FILE.read_bytes())
    assert {e.thread_key for e in agent.events} == {"agent:a7f3c2e1"}
    assert {e.session_key for e in agent.events} == {e.session_key for e in parsed.events}


def test_codex_events_context_and_skipped_line() -> None:
    parsed = codex.parse(CODEX.read_bytes())
    assert parsed.warnings == [(14, "not a JSON object")]
    assert parsed.events[0].type == "context"  # <environment_context> never starts a turn
    texts = [e.text for e in parsed.events]
    assert "Add a --dry-run flag to the backup script" in texts
    assert texts.count("Added --dry-run: it runs rsync with -n.") == 1  # event_msg repeats are ignored
    assert [e.name for e in parsed.events if e.type == "tool_call"] == ["shell", "apply_patch"]


def test_session_still_being_written_stops_at_last_complete_line() -> None:
    data = LIVE.read_bytes()
    parsed = claude_code.parse(data)
    assert parsed.pending_bytes > 0 and parsed.consumed == data.rfind(b"\n") + 1
    assert [e.text for e in parsed.events] == [
        "Draft the release notes for 1.4",
        "Release 1.4: faster sync, cabin booking fixes.",
    ]


def test_identities_are_exactly_seed_000() -> None:
    """AG-5: session_uid / thread_uid / event_uid / turn_uid / revision_id as seed 000 defines them."""
    parsed = claude_code.parse(MAIN.read_bytes())
    session = Session.new("claude_code", DEVICE, parsed.events[0].session_key)
    session.merge(parsed.events)
    sid = h("claude_code", DEVICE, "5f1c2d3e-8a9b-4c0d-9e1f-2a3b4c5d6e7f")
    assert session.uid == sid
    main_uid = h(sid, "main")
    assert session.threads[0] == {"uid": main_uid, "key": "main", "parent": ""}
    first = parsed.events[0]
    chash = h("user", "message", "", first.text)
    expected_event = h(main_uid, "u-0001", chash, "0")
    assert session.events[0].uid == expected_event
    assert session.turns[0].uid == expected_event  # no native turn id: the first user message's event_uid
    assert [t.seq for t in session.turns] == list(range(1, len(session.turns) + 1))
    digest = hashlib.sha256(MAIN.read_bytes()).hexdigest()
    assert revision_id(digest, claude_code.VERSION) == h(digest, "claude_code/1", "1")
    assert revision_id(digest, "claude_code/2") != revision_id(digest, claude_code.VERSION)


def test_merge_is_idempotent_and_appends_with_stable_seq() -> None:
    data = LIVE.read_bytes()
    first = claude_code.parse(data)
    session = Session.new("claude_code", DEVICE, first.events[0].session_key)
    assert session.merge(first.events) == 2
    assert session.merge(first.events) == 0
    before = [(t.uid, t.seq) for t in session.turns]
    tail = data[data.rfind(b"\n") + 1 :]
    grown = data + b'Uuid":"l-0002","isSidechain":false}\n'  # not valid JSON: still skipped
    assert claude_code.parse(grown).warnings
    line = json.dumps(
        {
            "type": "user",
            "sessionId": first.events[0].session_key,
            "uuid": "l-0003",
            "message": {"role": "user", "content": "Add the migration note"},
        }
    )
    complete = data[: len(data) - len(tail)] + line.encode() + b"\n"
    assert session.merge(claude_code.parse(complete).events) == 1
    assert [(t.uid, t.seq) for t in session.turns][:1] == before and session.turns[-1].seq == 2
    summary, body = session.to_stored()
    again = Session.from_stored(summary, body)
    assert again.merge(claude_code.parse(complete).events) == 0
    assert [e.text for e in again.events] == [e.text for e in session.events]


def test_adapter_detection_by_place_and_content(tmp_path: Path) -> None:
    assert sources.adapter_for(Path("/h/.claude/projects/p/x.jsonl"), b"") == "claude_code"
    assert sources.adapter_for(Path("/h/.codex/sessions/2026/x.jsonl"), b"") == "codex"
    assert sources.adapter_for(MAIN, MAIN.read_bytes()) == "claude_code"
    assert sources.adapter_for(CODEX, CODEX.read_bytes()) == "codex"
    assert sources.adapter_for(tmp_path / "notes.jsonl", b'{"title": "x"}\n') is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "payload",
                    "message",
                    "content",
                    "role",
                    "uuid",
                    "sessionId",
                    "isSidechain",
                    "text",
                    "id",
                    "call_id",
                    "output",
                    "name",
                    "input",
                    "agentId",
                ]
            ),
            c,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash_an_adapter(data: bytes) -> None:
    for parse in (claude_code.parse, codex.parse):
        parsed = parse(data)
        assert parsed.consumed + parsed.pending_bytes == len(data)
        assert all(len(e.text) <= MAX_EVENT_TEXT + 20 for e in parsed.events)


@settings(max_examples=300, deadline=None)
@given(st.lists(_json, max_size=8))
def test_arbitrary_json_lines_give_events_or_warnings(values: list[object]) -> None:
    """Outside records of any shape: each is an event source, ignored bookkeeping, or a numbered warning."""
    data = "".join(json.dumps(v) + "\n" for v in values).encode()
    for parse in (claude_code.parse, codex.parse):
        parsed = parse(data)
        assert all(isinstance(e.text, str) and e.session_key for e in parsed.events)
        assert all(1 <= n <= len(values) for n, _ in parsed.warnings)
        session = Session.new("x", DEVICE, "k")
        session.merge(parsed.events)
        summary, body = session.to_stored()
        assert Session.from_stored(summary, body).merge(parsed.events) == 0


def test_counted_occurrences_give_the_same_identities() -> None:
    """AG-8: `watch` sends a grown file's new events with occurrence numbers it counted over the
    whole file; the identities are those of sending every event (duplicates included)."""
    import dataclasses

    from engine.transcripts.model import occurrences
    from engine.transcripts.turns import identify

    data = next(DATA.rglob("5f1c2d3e-*.jsonl")).read_bytes()
    events = claude_code.parse(data).events
    events = [*events, events[1], events[1]]  # equal events: occurrences 1 and 2
    whole = [uid for uid, _ in identify("s" * 64, events)]
    counted = [dataclasses.replace(e, occurrence=n) for e, n in zip(events, occurrences(events), strict=True)]
    assert [uid for uid, _ in identify("s" * 64, counted[-3:])] == whole[-3:]
    assert len(set(whole)) == len(whole)
