"""What ``turnlog redact`` and ``turnlog forget`` share: choosing events and redacting them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnlog.eventstore import EventStore, RecordedEvent, Redaction, RedactionResult, is_redacted
from turnlog.projections._redacted import redaction_keep

__all__ = ["apply_redactions", "describe", "target_of"]


def target_of(event: RecordedEvent, reason: str, actor: str, include_meta: bool = False) -> Redaction:
    """The redaction of ``event``, keeping what the fold needs of a message."""
    return Redaction(
        event.stream, event.version, reason, actor, include_meta, redaction_keep(event.type, event.data)
    )


async def apply_redactions(
    store: EventStore, events: Sequence[RecordedEvent], reason: str, actor: str, *, dry_run: bool
) -> list[dict[str, Any]]:
    """Redact ``events`` (those not redacted yet) in one transaction; rows describing each."""
    todo = [event for event in events if not is_redacted(event.data)]
    rows = [describe(event) for event in todo]
    if todo and not dry_run:
        results: list[RedactionResult] = await store.redact_many([target_of(e, reason, actor) for e in todo])
        erased = {(r.stream, r.version): r.erased_bytes for r in results}
        for row in rows:
            row["erased_bytes"] = erased.get((row["stream"], row["version"]), 0)
    return rows


def describe(event: RecordedEvent) -> dict[str, Any]:
    return {"stream": event.stream, "version": event.version, "type": event.type, "position": event.position}
