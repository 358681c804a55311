"""Message content in the shapes the GenAI conventions give it (pure).

Only the span view calls these, and only when content was asked for: the conventions advise
instrumentations not to capture message content by default. A redacted message has no content
here at all (``message_parts`` returns None), so what a redaction removed never leaves the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from turnlog.projections import redaction_of

__all__ = ["finish_reasons", "message_parts", "old_content_event", "to_json"]


def to_json(value: Any) -> str:
    """Compact JSON text of ``value`` (attributes hold strings, not structures)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def _is_redacted(message: Mapping[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and redaction_of(_Meta(metadata)) is not None


class _Meta:
    """Adapts a stored message dict to what ``redaction_of`` reads (a ``metadata`` attribute)."""

    __slots__ = ("metadata",)

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        self.metadata = metadata


def _instruction_text(content: Mapping[str, Any]) -> str:
    pieces = [content.get("instruction"), content.get("guidance"), content.get("plain_content")]
    text = "\n\n".join(str(p) for p in pieces if p)
    context = content.get("context")
    if context:
        text += "\n\n" + to_json(context)
    return text


def message_parts(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"role": ..., "parts": [...]}`` of a stored message, or None when it was redacted.

    Example:
        >>> message_parts({"kind": "AssistantResponse", "content": {"text": "hi"}, "metadata": {}})
        {'role': 'assistant', 'parts': [{'type': 'text', 'content': 'hi'}]}
    """
    if _is_redacted(message):
        return None
    kind = message.get("kind")
    content = message.get("content")
    content = content if isinstance(content, Mapping) else {}
    if kind == "System":
        return {"role": "system", "parts": [_text(content.get("system_message"))]}
    if kind == "Instruction":
        return {"role": "user", "parts": [_text(_instruction_text(content))]}
    if kind == "ActionRequest":
        return {"role": "assistant", "parts": [_tool_call(content.get("call_id"), content)]}
    if kind == "ActionResponse":
        part = {
            "type": "tool_call_response",
            "id": content.get("action_request_id"),
            "response": content.get("output"),
        }
        return {"role": "tool", "parts": [part]}
    parts = [_text(content.get("text"))] if content.get("text") else []
    metadata = message.get("metadata")
    calls = metadata.get("tool_calls") if isinstance(metadata, Mapping) else None
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, Mapping):
            parts.append(
                _tool_call(call.get("id"), {"function": call.get("name"), "arguments": call.get("arguments")})
            )
    return {"role": "assistant", "parts": parts}


def _text(value: Any) -> dict[str, Any]:
    return {"type": "text", "content": "" if value is None else str(value)}


def _tool_call(call_id: Any, content: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call_id,
        "name": content.get("function"),
        "arguments": content.get("arguments"),
    }


_OLD_EVENT = {"system": "gen_ai.system.message", "user": "gen_ai.user.message", "tool": "gen_ai.tool.message"}


def old_content_event(parts: Mapping[str, Any], *, output: bool) -> tuple[str, dict[str, str]]:
    """The v1.36 span event (name, attributes) of one message in the ``message_parts`` shape.

    Before ``gen_ai.input.messages`` existed, content travelled as one event per message
    (``gen_ai.user.message``, ...) and one ``gen_ai.choice`` per answer.
    """
    role = str(parts.get("role"))
    if output:
        return "gen_ai.choice", {"index": "0", "message": to_json(parts)}
    name = _OLD_EVENT.get(role, "gen_ai.assistant.message")
    return name, {"content": to_json(parts.get("parts", []))}


def finish_reasons(response: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The finish reasons a raw provider response gives (Chat Completions, Anthropic, Gemini).

    Example:
        >>> finish_reasons({"choices": [{"finish_reason": "stop"}]})
        ('stop',)
    """
    if not isinstance(response, Mapping):
        return ()
    found: list[str] = []
    for key, field in (("choices", "finish_reason"), ("candidates", "finishReason")):
        items = response.get(key)
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping) and isinstance(item.get(field), str):
                found.append(item[field])
    for key in ("stop_reason", "status"):
        if not found and isinstance(response.get(key), str):
            found.append(response[key])
    return tuple(found)
