"""AG-8 (issue 28): `transcript watch` reads only what was appended to a session file, and sends
exactly the events, occurrence numbers and working directories a full read would give."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.transcripts import follow, sources
from engine.transcripts.model import occurrences


def _claude_line(n: int, text: str) -> dict[str, Any]:
    role = "user" if n % 2 == 0 else "assistant"
    return {
        "type": role,
        "cwd": "/home/ana/proj",
        "sessionId": "s-1",
        "uuid": f"u-{n}",
        "isSidechain": False,
        "timestamp": f"2026-12-01T09:00:{n % 60:02d}.000Z",
        "message": {"role": role, "content": text},
    }


def _codex_lines(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "timestamp": f"2026-12-01T10:00:{n % 60:02d}.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user" if n % 2 == 0 else "assistant",
                "content": [{"type": "input_text", "text": "same words"}],
            },
        }
        for n in range(start, start + count)
    ]


def _write(path: Path, lines: list[dict[str, Any]], mode: str = "w") -> None:
    with path.open(mode, encoding="utf-8") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in lines))


def _full(path: Path) -> tuple[list[Any], dict[str, str], str]:
    source = sources.read_source(path)
    assert source is not None
    parsed = sources.parse(source)
    counts = occurrences(parsed.events)
    return [dataclasses.replace(e, occurrence=n) for e, n in zip(parsed.events, counts, strict=True)], parsed.cwds, source.sha256


def _follow(path: Path) -> follow.Followed:
    source = sources.read_source(path)
    assert source is not None
    state = follow.start(path, source.data, source.adapter, sources.ADAPTERS[source.adapter], sources.parse(source))
    assert state is not None
    return state


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_appended_lines_read_alone_give_what_a_full_read_gives(tmp_path: Path, kind: str) -> None:
    """AG-8: each round reads the new lines only; events (with occurrence numbers counted over the
    whole file, repeated texts included), cwds and the file's SHA-256 equal a full read's."""
    path = tmp_path / ("s.jsonl" if kind == "claude" else "rollout-1.jsonl")
    if kind == "claude":
        _write(path, [_claude_line(n, "same words") for n in range(6)])
    else:
        _write(path, [{"timestamp": "2026-12-01T10:00:00.000Z", "type": "session_meta", "payload": {"id": "c-1", "cwd": "/w"}}])
        _write(path, _codex_lines(0, 6), "a")
    state = _follow(path)
    sent = len(_full(path)[0])
    for round_ in range(3):
        extra = (
            [_claude_line(100 + 10 * round_ + n, "same words") for n in range(3)]
            if kind == "claude"
            else _codex_lines(10 * round_ + 50, 3)
        )
        _write(path, extra, "a")
        with path.open("a", encoding="utf-8") as handle:
            handle.write('{"type": "user", "still being wri')  # a line the client is still writing
        appended = follow.read_appended(path, state, sources.ADAPTERS[state.adapter], sources.MAX_FILE_BYTES)
        assert appended is not None
        events, cwds, digest = _full(path)
        assert appended.parsed.events == events[sent:] and len(appended.parsed.events) == 3
        assert appended.sha256 == digest and appended.parsed.pending_bytes > 0
        assert set(appended.parsed.cwds.items()) <= set(cwds.items())
        follow.advance(state, appended)
        sent = len(events)
        # the partial line is completed before the next round
        with path.open("rb+") as handle:
            data = handle.read()
            handle.seek(data.rfind(b"\n") + 1)
            handle.truncate()


def test_only_the_appended_bytes_are_read(tmp_path: Path) -> None:
    """AG-8: bytes before the last 4 KiB already read are not read again (an in-place change there
    goes unnoticed: the cost of one more turn does not grow with the file)."""
    path = tmp_path / "s.jsonl"
    _write(path, [_claude_line(n, "x" * 200) for n in range(200)])
    state = _follow(path)
    with path.open("rb+") as handle:  # same size, same inode: the first byte changes
        handle.write(b" ")
    _write(path, [_claude_line(1000, "new turn")], "a")
    appended = follow.read_appended(path, state, sources.ADAPTERS[state.adapter], sources.MAX_FILE_BYTES)
    assert appended is not None and [e.text for e in appended.parsed.events] == ["new turn"]
    assert len(appended.complete) < 1000


def test_a_rewritten_file_is_read_whole_again(tmp_path: Path) -> None:
    """AG-8: a shorter file, another inode or changed bytes just before the offset: not an append."""
    path = tmp_path / "s.jsonl"
    _write(path, [_claude_line(n, f"turn {n}") for n in range(20)])
    parse = sources.ADAPTERS["claude_code"]
    state = _follow(path)
    _write(path, [_claude_line(n, f"turn {n}") for n in range(10)])  # shorter
    assert follow.read_appended(path, state, parse, sources.MAX_FILE_BYTES) is None
    _write(path, [_claude_line(n, f"turn {n}") for n in range(20)])
    state = _follow(path)
    data = path.read_bytes()
    path.write_bytes(data[:-5] + b"XXXX\n")  # the last line changed
    assert follow.read_appended(path, state, parse, sources.MAX_FILE_BYTES) is None
    state = _follow(path)
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(path.read_bytes() + json.dumps(_claude_line(99, "more")).encode() + b"\n")
    os.replace(replacement, path)  # another inode (an editor's save)
    assert follow.read_appended(path, state, parse, sources.MAX_FILE_BYTES) is None
