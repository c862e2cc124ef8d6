"""Adapter: Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One JSON object per line: ``{"timestamp", "type", "payload"}``. ``session_meta`` names the
session (``payload.id``; its working directory ``payload.cwd``; a sub-agent's session names its parent in ``payload.source``);
``response_item`` payloads are the conversation: ``message`` (role ``user``/``assistant``,
content blocks ``input_text``/``output_text``), ``function_call`` / ``custom_tool_call``
(``name``, ``arguments``/``input``, ``call_id``) and their ``*_output``; ``reasoning`` is
not kept. ``event_msg`` lines repeat what ``response_item`` already says (plus token
counts) and ``turn_context`` holds settings: both are ignored. User messages that the
client injects (``<environment_context>``, ``<user_instructions>``, AGENTS.md) are kept as
context and never start a turn.
"""

from __future__ import annotations

from typing import Any, Final

from engine.transcripts.jsonl import clip, json_lines, text_of
from engine.transcripts.model import Event, EventType, Parsed

__all__ = ["ADAPTER", "VERSION", "parse"]

ADAPTER: Final = "codex"
VERSION: Final = "codex/1"
_IGNORED = frozenset({"event_msg", "turn_context", "compacted"})
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions")


def _subagent(payload: dict[str, Any]) -> str:
    source = payload.get("source")
    if isinstance(source, dict):
        sub = source.get("subagent")
        if isinstance(sub, str) and sub:
            return sub
        if isinstance(sub, dict) and sub:
            return str(next(iter(sub)))
    return ""


def parse(data: bytes) -> Parsed:
    parsed = Parsed(ADAPTER, VERSION)
    session = ""
    thread = "main"
    parent = ""
    for lineno, line in json_lines(data, parsed):
        kind = line.get("type")
        if not isinstance(kind, str):
            parsed.warnings.append((lineno, "record without a type"))
            continue
        payload = line.get("payload")
        if kind in _IGNORED:
            continue
        if not isinstance(payload, dict):
            parsed.warnings.append((lineno, "missing payload"))
            continue
        ts = line.get("timestamp") if isinstance(line.get("timestamp"), str) else ""
        if kind == "session_meta":
            sid = payload.get("id")
            if isinstance(sid, str) and sid:
                session = sid
                cwd = payload.get("cwd")
                if isinstance(cwd, str) and cwd and len(cwd) <= 4096:
                    parsed.cwds.setdefault(sid, cwd)
                sub = _subagent(payload)
                thread, parent = (f"agent:{sub}", "main") if sub else ("main", "")
            else:
                parsed.warnings.append((lineno, "session_meta without id"))
            continue
        if kind != "response_item":
            parsed.warnings.append((lineno, "unknown record type"))
            continue
        if not session:
            parsed.warnings.append((lineno, "record before session_meta"))
            continue
        base: dict[str, Any] = {"session_key": session, "thread_key": thread, "ts": str(ts), "parent_thread": parent}
        ptype = payload.get("type")
        native = f"{ts}/{ptype}"
        if ptype == "message":
            role = payload.get("role")
            text = text_of(payload.get("content"))
            if role == "user":
                etype: EventType = "context" if text.lstrip().startswith(_INJECTED) else "message"
                parsed.events.append(Event(native_key=native, role="user", type=etype, text=clip(text), **base))
            elif role == "assistant":
                parsed.events.append(Event(native_key=native, role="assistant", type="message", text=clip(text), **base))
            else:  # developer / system instructions
                parsed.events.append(Event(native_key=native, role="system", type="context", text=clip(text), **base))
        elif ptype in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
            call_id = str(payload.get("call_id", ""))
            args = payload.get("arguments", payload.get("input", payload.get("action")))
            name = str(payload.get("name", ptype))
            key = f"call:{call_id}" if call_id else native
            parsed.events.append(
                Event(native_key=key, role="assistant", type="tool_call", name=name, text=clip(text_of(args)), **base)
            )
        elif ptype in ("function_call_output", "custom_tool_call_output"):
            call_id = str(payload.get("call_id", ""))
            key = f"output:{call_id}" if call_id else native
            parsed.events.append(
                Event(native_key=key, role="tool", type="tool_result", text=clip(text_of(payload.get("output"))), **base)
            )
        # reasoning and anything newer: not kept
    return parsed
