"""Redacted events in the projections: what a redaction keeps, and how the fold sees it.

A redaction keeps what ``redaction_keep`` (``_content.py``) chooses from the catalogue's
declaration of content fields. A redacted ``message.added`` keeps the structure of its
message: kind, id, role, time, sender and recipient, and for a tool call its function name
and links. The fold reads such an event as that message with empty content and
``metadata["redacted"] = {"reason": ..., "record": ...}``, so the message keeps its place,
id and links in the branch and shows as redacted instead of its content. Any other event
that kept fields reads as those fields (its content fields empty or at their defaults).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from turnlog.eventstore import RecordedEvent, redacted_marker

__all__ = [
    "REDACTED_KEY",
    "redaction_note",
    "redaction_of",
    "visible",
    "visible_data",
    "visible_event",
    "visible_many",
]

REDACTED_KEY = "redacted"
"""The metadata key of a redacted message: ``{"reason": ..., "record": ...}``."""


def _redacted_message(message: Mapping[str, Any], note: dict[str, str]) -> dict[str, Any]:
    out = dict(message)
    out["metadata"] = {REDACTED_KEY: note}
    if out.get("kind") == "System":
        out["content"] = {"system_message": ""}
    return out


def visible(event: RecordedEvent) -> RecordedEvent:
    """``event`` as the fold reads it: a redacted payload becomes what it kept, marked redacted."""
    data = event.data
    if len(data) != 1 or "turnlog_redacted" not in data:
        return event
    view = visible_data(event.type, data)
    return event if view is data else replace(event, data=view)


def visible_data(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """The payload of an event of ``event_type`` as the fold reads it (``data`` itself unless redacted)."""
    if len(data) != 1 or "turnlog_redacted" not in data:
        return data
    marker = redacted_marker(data)
    if marker is None or marker.kept is None:
        return data
    kept = dict(marker.kept)
    note = {"reason": marker.reason, "record": marker.record}
    if event_type == "message.added" and isinstance(kept.get("message"), Mapping):
        kept["message"] = _redacted_message(kept["message"], note)
    elif event_type == "branch.created":
        if isinstance(kept.get("system"), Mapping):
            kept["system"] = _redacted_message(kept["system"], note)
        kept["metadata"] = {REDACTED_KEY: note}
    elif event_type == "message.annotated":
        kept["metadata"] = {}
    # Any other type: what the redaction kept (its fields that are not content, see
    # ``redaction_keep``) is the payload the fold reads.
    return kept


def visible_many(events: Sequence[RecordedEvent]) -> Sequence[RecordedEvent]:
    """``visible`` of each event; the same sequence when none is redacted (the common case)."""
    for event in events:
        data = event.data
        if len(data) == 1 and "turnlog_redacted" in data:
            return [visible(e) for e in events]
    return events


def redaction_of(message: Any) -> dict[str, Any] | None:
    """``{"reason": ..., "record": ...}`` when a folded message was redacted, else None."""
    found = getattr(message, "metadata", {}).get(REDACTED_KEY)
    return found if isinstance(found, dict) and isinstance(found.get("reason"), str) else None


def redaction_note(message: Any) -> str | None:
    """The one-line summary of a redacted message (``user: [redacted: gdpr]``), else None."""
    found = redaction_of(message)
    if found is None:
        return None
    note = f"[redacted: {found['reason']}]"
    kind = getattr(message, "kind", "")
    if kind == "ActionRequest":
        return f"tool call {message.content.function} {note}"
    if kind == "ActionResponse":
        return f"tool result {message.content.function} {note}"
    return f"{message.role}: {note}"


visible_event = visible
"""The public name of ``visible``: read a branch event as the fold does (redactions resolved)."""
