"""Where conversation content lives: the catalogue's declaration, read by every eraser.

Each event schema declares its content fields (``EventData.content_fields``). This module
turns that declaration into what ``redact``, ``forget``, retention and the exports need:

- ``content_fields(type)``: the declared fields (``None``: undeclared or unknown, so the whole
  payload counts as content);
- ``holds_content(type, data)``: whether a payload has anything to erase;
- ``redaction_keep(type, data)``: what a redaction keeps beside its marker, so the fold still
  reads the event: every field that is not content, a message's structure (kind, id, role,
  time, sender, recipient, tool links and function name) in place of the message, and an
  empty value for a required content field;
- ``without_content(type, data)``: a payload with its content removed, as an export that
  must not carry content writes it.

Example:
    >>> content_fields("run.failed")
    ('error_message', 'recovered')
    >>> holds_content("run.started", {"run_id": "r", "verb": "chat"})
    False
    >>> redaction_keep("run.failed", {"run_id": "r", "verb": "chat", "duration_ms": 1.0,
    ...     "error_type": "ValueError", "error_message": "no alice@example.org", "reason": "error"})
    {'run_id': 'r', 'verb': 'chat', 'duration_ms': 1.0, 'error_type': 'ValueError', 'reason': 'error', 'error_message': ''}
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import copy
from functools import cache
from typing import Any, TypeGuard

from pydantic import TypeAdapter, ValidationError

from ._catalogue import CATALOGUE, EventData, EventRegistry

__all__ = ["content_fields", "holds_content", "redaction_keep", "without_content"]

_MESSAGE_KINDS = frozenset({"System", "Instruction", "AssistantResponse", "ActionRequest", "ActionResponse"})
_MESSAGE_FIELDS = ("kind", "id", "role", "created_at", "sender", "recipient")
_LINK_FIELDS = ("action_request_id", "action_response_id", "call_id")


def content_fields(event_type: str, registry: EventRegistry | None = None) -> tuple[str, ...] | None:
    """The fields of ``event_type`` that hold conversation content, as its schema declares them.

    ``()`` when the type declares that it holds none; ``None`` when the type is not in the
    registry or declared nothing, and then every field counts as content.
    """
    schema = (registry or CATALOGUE).get(event_type)
    return None if schema is None else schema.content_fields


def holds_content(event_type: str, data: Mapping[str, Any], registry: EventRegistry | None = None) -> bool:
    """Whether ``data`` (a payload of ``event_type``) has content to erase.

    A declared content field counts when it is present and not empty (``None``, ``""``, ``{}``
    and ``[]`` hold nothing); an undeclared type counts whenever its payload is not empty.
    """
    fields = content_fields(event_type, registry)
    if fields is None:
        return bool(data)
    return any(_filled(data.get(name)) for name in fields)


def redaction_keep(
    event_type: str,
    data: Mapping[str, Any],
    *,
    keep_names: bool = True,
    registry: EventRegistry | None = None,
) -> dict[str, Any] | None:
    """The fields of a payload a redaction keeps for the fold (None: nothing is kept).

    Every field not declared as content stays. A content field that holds a message keeps
    the message's structure (kind, id, role, time, sender, recipient, and for a tool call or
    result its links and, when ``keep_names``, its function name); a required content field
    keeps an empty value so that the event still decodes; the other content fields go. A type
    that declares no content, or none at all, keeps nothing: redacting it explicitly erases
    the whole payload.
    """
    schema = (registry or CATALOGUE).get(event_type)
    fields = None if schema is None else schema.content_fields
    if schema is None or not fields:
        return None
    kept: dict[str, Any] = {key: value for key, value in data.items() if key not in fields}
    for name in fields:
        value = data.get(name)
        if _is_message(value):
            kept[name] = _kept_message(value, keep_names)
        elif name in data and (blank := _blank(schema, name)) is not _NO_BLANK:
            kept[name] = copy(blank)  # a fresh {} or [] per payload
    return kept


def without_content(
    event_type: str, data: Mapping[str, Any], registry: EventRegistry | None = None
) -> dict[str, Any]:
    """``data`` with its content gone (what ``redaction_keep`` keeps; ``{}`` for an undeclared type)."""
    fields = content_fields(event_type, registry)
    if fields is not None and not fields:
        return dict(data)
    return redaction_keep(event_type, data, registry=registry) or {}


def _filled(value: Any) -> bool:
    return value is not None and value != "" and value != {} and value != []


def _is_message(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and value.get("kind") in _MESSAGE_KINDS


def _kept_message(message: Mapping[str, Any], keep_names: bool) -> dict[str, Any]:
    kept: dict[str, Any] = {key: message[key] for key in _MESSAGE_FIELDS if key in message}
    content = message.get("content")
    if isinstance(content, Mapping) and message.get("kind") in ("ActionRequest", "ActionResponse"):
        fields = (*_LINK_FIELDS, "function") if keep_names else _LINK_FIELDS
        kept["content"] = {key: content[key] for key in fields if key in content}
        kept["content"].setdefault("function", "[redacted]")
    return kept


_NO_BLANK = object()


@cache
def _blank(schema: type[EventData], name: str) -> Any:
    """The empty value a required content field keeps, or ``_NO_BLANK`` when it has a default."""
    field = schema.model_fields.get(name)
    if field is None or field.annotation is None or not field.is_required():
        return _NO_BLANK  # the schema's default fills it on decode
    adapter: TypeAdapter[Any] = TypeAdapter(field.annotation)
    candidates: tuple[Any, ...] = (None, "", {}, [])
    for candidate in candidates:
        try:
            adapter.validate_python(candidate)
        except ValidationError:
            continue
        return candidate
    return _NO_BLANK
