"""Adapter: Claude Code session files (``~/.claude/projects/<project>/<session>.jsonl``).

One JSON object per line. Lines of ``type`` ``user`` / ``assistant`` carry ``uuid``,
``sessionId``, ``timestamp``, ``isSidechain`` and ``message`` (``role`` plus ``content``: a
string, or blocks ``text`` / ``thinking`` / ``tool_use`` / ``tool_result`` / ``image``).
Sub-agents (the Task tool) are sidechains: ``isSidechain: true``, in the parent's file
(older clients) or in their own ``agent-<agentId>.jsonl`` file with ``agentId`` (newer
clients); either way they become their own thread of the parent's session. ``summary``,
``system``, ``file-history-snapshot`` and other bookkeeping lines carry no turn and are
ignored; ``thinking`` blocks are not kept. Each line's ``cwd`` is the session's working directory.
"""

from __future__ import annotations

import json
from typing import Any, Final

from engine.transcripts.jsonl import clip, json_lines, text_of
from engine.transcripts.model import Event, Parsed, Role

__all__ = ["ADAPTER", "VERSION", "parse"]

ADAPTER: Final = "claude_code"
VERSION: Final = "claude_code/1"
_IGNORED = frozenset({"summary", "system", "file-history-snapshot", "queue-operation", "progress"})


def _thread(line: dict[str, Any]) -> tuple[str, str]:
    """(thread_key, parent_thread) of a line."""
    if line.get("isSidechain") is True:
        agent = line.get("agentId")
        key = f"agent:{agent}" if isinstance(agent, str) and agent else "sidechain"
        return key, "main"
    return "main", ""


def parse(data: bytes) -> Parsed:
    parsed = Parsed(ADAPTER, VERSION)
    for lineno, line in json_lines(data, parsed):
        kind = line.get("type")
        if not isinstance(kind, str):
            parsed.warnings.append((lineno, "record without a type"))
            continue
        if kind in _IGNORED:
            continue
        if kind not in ("user", "assistant"):
            parsed.warnings.append((lineno, "unknown record type"))
            continue
        session = line.get("sessionId")
        uuid = line.get("uuid")
        message = line.get("message")
        if not isinstance(session, str) or not session or not isinstance(uuid, str) or not isinstance(message, dict):
            parsed.warnings.append((lineno, "missing sessionId, uuid or message"))
            continue
        thread_key, parent = _thread(line)
        cwd = line.get("cwd")
        if isinstance(cwd, str) and cwd and len(cwd) <= 4096:
            parsed.cwds.setdefault(session, cwd)
        ts = line.get("timestamp") if isinstance(line.get("timestamp"), str) else ""
        role: Role = "assistant" if kind == "assistant" else "user"
        content = message.get("content")
        base: dict[str, Any] = {"session_key": session, "thread_key": thread_key, "ts": str(ts), "parent_thread": parent}
        if isinstance(content, str):
            parsed.events.append(Event(native_key=uuid, role=role, type="message", text=clip(content), **base))
            continue
        if not isinstance(content, list):
            parsed.warnings.append((lineno, "message content is neither text nor blocks"))
            continue
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            native = f"{uuid}#{i}"
            btype = block.get("type")
            if btype == "text" and isinstance(block.get("text"), str):
                parsed.events.append(Event(native_key=native, role=role, type="message", text=clip(block["text"]), **base))
            elif btype == "tool_use":
                name = str(block.get("name", ""))
                args = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
                parsed.events.append(
                    Event(native_key=native, role="assistant", type="tool_call", name=name, text=clip(args), **base)
                )
            elif btype == "tool_result":
                text = text_of(block.get("content"))
                parsed.events.append(Event(native_key=native, role="tool", type="tool_result", text=clip(text), **base))
            # thinking, redacted_thinking, image-only blocks: not kept
    return parsed
