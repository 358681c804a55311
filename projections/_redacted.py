"""Redacted events in the projections: what a redaction keeps, and how the fold sees it.

A redacted ``message.added`` keeps the structure of its message (``redaction_keep``): kind,
id, role, time, sender and recipient, and for a tool call its function name and links. The
fold reads such an event as that message with empty content and
``metadata["redacted"] = {"reason": ..., "record": ...}``, so the message keeps its place,
id and links in the branch and shows as redacted instead of its content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from turnlog.eventstore import RecordedEvent, redacted_marker

__all__ = ["REDACTED_KEY", "redaction_keep", "visible", "visible_many"]

REDACTED_KEY = "redacted"
"""The metadata key of a redacted message: ``{"reason": ..., "record": ...}``."""

_MESSAGE_FIELDS = ("kind", "id", "role", "created_at", "sender", "recipient")
_LINK_FIELDS = ("action_request_id", "action_response_id", "call_id")


def redaction_keep(
    event_type: str, data: Mapping[str, Any], *, keep_names: bool = True
) -> dict[str, Any] | None:
    """The fields of a payload a redaction keeps for the fold (None: nothing is kept).

    For ``message.added``: the message's kind, id, role, time, sender, recipient and
    ``run_id``, and for a tool call or result its links and (when ``keep_names``) its
    function name. Other types keep nothing.
    """
    if event_type != "message.added" or not isinstance(data.get("message"), Mapping):
        return None
    message = data["message"]
    kept: dict[str, Any] = {key: message[key] for key in _MESSAGE_FIELDS if key in message}
    content = message.get("content")
    if isinstance(content, Mapping) and message.get("kind") in ("ActionRequest", "ActionResponse"):
        fields = (*_LINK_FIELDS, "function") if keep_names else _LINK_FIELDS
        kept["content"] = {key: content[key] for key in fields if key in content}
        kept["content"].setdefault("function", "[redacted]")
    out: dict[str, Any] = {"message": kept}
    if data.get("run_id") is not None:
        out["run_id"] = data["run_id"]
    return out


def visible(event: RecordedEvent) -> RecordedEvent:
    """``event`` as the fold reads it: a redacted message.added becomes its kept message."""
    data = event.data
    if len(data) != 1 or "turnlog_redacted" not in data:
        return event
    marker = redacted_marker(data)
    if marker is None or marker.kept is None or event.type != "message.added":
        return event
    kept = dict(marker.kept)
    message = dict(kept.get("message") or {})
    message["metadata"] = {REDACTED_KEY: {"reason": marker.reason, "record": marker.record}}
    kept["message"] = message
    return replace(event, data=kept)


def visible_many(events: Sequence[RecordedEvent]) -> Sequence[RecordedEvent]:
    """``visible`` of each event; the same sequence when none is redacted (the common case)."""
    for event in events:
        data = event.data
        if len(data) == 1 and "turnlog_redacted" in data:
            return [visible(e) for e in events]
    return events
