"""What the real Chat Completions API refuses with 400 before it generates anything.

``request_problem(body)`` returns the ``(message, param, code)`` of the API's error for the
first problem of a request body, or None for a request the API accepts. The messages follow
the real API's wording, so a client sees the same error it would get from api.openai.com:

- no ``model``; ``messages`` missing, not a list, or empty;
- a message without a known ``role``; an assistant message with neither ``content`` nor
  ``tool_calls``; a ``tool`` message that answers no open ``tool_call_id``; an assistant
  message with ``tool_calls`` not followed by a ``tool`` message for each call id;
- ``n`` not a positive integer;
- a strict ``json_schema`` response format whose object schemas do not set
  ``additionalProperties: false`` or leave properties out of ``required``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["request_problem"]

Problem = tuple[str, str | None, str | None]
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def request_problem(body: Any) -> Problem | None:
    """The 400 error the real API answers ``body`` with, or None when it accepts it."""
    if not isinstance(body, Mapping):
        return ("We could not parse the JSON body of your request.", None, None)
    if not body.get("model"):
        return ("you must provide a model parameter", None, None)
    messages = body.get("messages")
    if messages is None:
        return ("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    if not isinstance(messages, list):
        return (f"Invalid type for 'messages': expected an array, but got {type(messages).__name__} instead.",
                "messages", "invalid_type")  # fmt: skip
    if not messages:
        return ("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
                "empty array instead.", "messages", "empty_array")  # fmt: skip
    n = body.get("n", 1)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return (f"{n!r} is less than the minimum of 1 - 'n'", "n", None)
    return _message_problem(messages) or _schema_problem(body.get("response_format"))


def _message_problem(messages: list[Any]) -> Problem | None:
    open_ids: list[str] = []
    opened_at = 0
    for i, message in enumerate(messages):
        where = f"messages.[{i}]"
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            role = message.get("role") if isinstance(message, Mapping) else None
            return (f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                    "'function', 'tool', and 'developer'.", f"{where}.role", "invalid_value")  # fmt: skip
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                        "message with 'tool_calls'.", f"{where}.role", None)  # fmt: skip
            open_ids.remove(call_id)
            continue
        if open_ids:
            return _unanswered(opened_at, open_ids)
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if message.get("content") is None and not calls:
                return ("Invalid value for 'content': expected a string, got null.", f"{where}.content", None)
            open_ids = [str(c.get("id")) for c in calls if isinstance(c, Mapping)]
            opened_at = i
    if open_ids:
        return _unanswered(opened_at, open_ids)
    return None


def _unanswered(index: int, ids: list[str]) -> Problem:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(ids)}",
        f"messages.[{index}].role",
        None,
    )


def _schema_problem(fmt: Any) -> Problem | None:
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return None
    inner = fmt.get("json_schema")
    if not isinstance(inner, Mapping) or not inner.get("name"):
        return ("Missing required parameter: 'response_format.json_schema.name'.",
                "response_format.json_schema.name", "missing_required_parameter")  # fmt: skip
    schema = inner.get("schema")
    if not inner.get("strict") or not isinstance(schema, Mapping):
        return None
    name = inner["name"]
    for path, node in _objects(schema, ()):
        context = f"context=({', '.join(repr(p) for p in path)})"
        if node.get("additionalProperties") is not False:
            return (f"Invalid schema for response_format '{name}': In {context}, 'additionalProperties' "
                    "is required to be supplied and to be false.", "response_format", None)  # fmt: skip
        properties = node.get("properties")
        keys = list(properties) if isinstance(properties, Mapping) else []
        required = node.get("required")
        missing = [k for k in keys if not isinstance(required, list) or k not in required]
        if missing:
            return (f"Invalid schema for response_format '{name}': In {context}, 'required' is required "
                    "to be supplied and to be an array including every key in properties. "
                    f"Missing '{missing[0]}'.", "response_format", None)  # fmt: skip
    return None


def _objects(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Mapping[str, Any]]]:
    """Every object schema inside ``node`` with its path (properties, items, $defs, anyOf)."""
    if not isinstance(node, Mapping):
        return
    if node.get("type") == "object" or "properties" in node:
        yield path, node
    for key, value in (node.get("properties") or {}).items():
        yield from _objects(value, (*path, "properties", str(key)))
    if isinstance(node.get("items"), Mapping):
        yield from _objects(node["items"], (*path, "items"))
    for group in ("$defs", "definitions"):
        for key, value in (node.get(group) or {}).items():
            yield from _objects(value, (*path, group, str(key)))
    for group in ("anyOf", "allOf"):
        for i, value in enumerate(node.get(group) or []):
            yield from _objects(value, (*path, group, str(i)))
