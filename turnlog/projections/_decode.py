"""Reading stored payloads: the one way this layer turns what the store holds into models.

Stored messages (in ``message.added`` events and in snapshot parts) go through
``decode_messages``; it tries the bulk fast path (``_bulk``) and otherwise validates the
general way, with pydantic's ``TypeAdapter(list[AnyMessage])``. Events go through
``decode_payloads`` (the fold: the messages of a run of ``message.added`` events in one
``decode_messages`` call) or ``decode`` (one event, the full payload model). Both read an event
with ``decode_with``: redactions resolved, old schemas lifted, an error that names the event.

Which path ran never shows in a result or an error: the fast path takes only what the general
path would take alike (``tests/projections/test_bulk.py`` holds it to that), and a batch that
fails is decoded again one event at a time so that the error names the event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from turnlog.eventstore import RecordedEvent

from ._bulk import GENERAL, validate_messages
from ._catalogue import CATALOGUE, EventData, MessageAdded, decode_with
from ._errors import UnknownEventType
from ._messages import ActionRequest, ActionResponse, AnyMessage, AssistantResponse, Instruction, System
from ._redacted import visible_many

__all__ = ["MESSAGE_TYPES", "Payload", "SchemaLookup", "decode", "decode_messages", "decode_payloads"]

MESSAGE_TYPES = frozenset({System, Instruction, AssistantResponse, ActionRequest, ActionResponse})
"""The message classes (a decoded ``message.added`` payload of the fold is one of them)."""

Payload = EventData | AnyMessage
"""What ``decode_payloads`` gives for one event: the message of a ``message.added``, else the model."""

SchemaLookup = Callable[[str], "type[EventData] | None"]
"""Where the schemas of types outside the catalogue come from (``Appliers.schema``)."""

_ADDED_KEYS = frozenset({"message", "run_id"})


def decode_messages(items: list[Any]) -> list[AnyMessage]:
    """The messages of stored message dicts, in order (``items`` is not changed).

    Raises:
        pydantic.ValidationError: an item is not a valid message.
    """
    fast = validate_messages(items)
    return fast if fast is not None else GENERAL.validate_python(items)


def _schema(event: RecordedEvent, extra: SchemaLookup | None) -> type[EventData]:
    schema = CATALOGUE.get(event.type)
    if schema is None and extra is not None:
        schema = extra(event.type)
    if schema is None:
        raise UnknownEventType(
            event.stream, event.version, event.type, "no schema is registered", position=event.position
        )
    return schema


def decode(event: RecordedEvent, extra: SchemaLookup | None = None) -> EventData:
    """The validated payload model of one event (catalogue types, then ``extra``).

    Raises:
        UnknownEventType: no schema is registered for the type.
        EventDecodeError: the payload does not validate (naming stream, version and type).
    """
    return decode_with(_schema(event, extra), event)


def decode_payloads(events: Sequence[RecordedEvent], extra: SchemaLookup | None = None) -> list[Payload]:
    """The payloads of ``events`` for the fold, in order.

    Each is what ``decode`` gives, except that a ``message.added`` gives its bare message (the
    fold uses nothing else of it; its ``run_id`` is still checked to be a string or None).

    The messages of the ``message.added`` events are decoded in one ``decode_messages`` call.
    If that refuses one of them, every event is decoded on its own, so an error names its event.
    """
    events = visible_many(events)
    picked: list[int] = []
    messages: list[Any] = []
    for i, event in enumerate(events):
        data = event.data
        if (
            event.type == "message.added"
            and event.schema == 1
            and type(data) is dict
            and data.keys() <= _ADDED_KEYS
            and type(data.get("run_id")) in (str, type(None))
        ):
            picked.append(i)
            messages.append(data.get("message"))
    try:
        validated = decode_messages(messages) if messages else []
    except ValidationError:
        return [_one(e, extra) for e in events]
    if len(picked) == len(events):
        return list(validated)
    out: list[Any] = [None] * len(events)
    for i, message in zip(picked, validated, strict=True):
        out[i] = message
    for i, event in enumerate(events):
        if out[i] is None:
            out[i] = _one(event, extra)
    return out


def _one(event: RecordedEvent, extra: SchemaLookup | None) -> Payload:
    data = decode(event, extra)
    return data.message if isinstance(data, MessageAdded) else data
