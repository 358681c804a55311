"""Encode once, append many: ``EventEncoder``, ``encode_events`` and what ``append_encoded`` checks.

``append`` validates and canonically encodes its ``NewEvent`` s on every call. A writer that
makes many events of one kind (a stream's chunks), or that needs the canonical bytes itself
(a buffer line), encodes each event once with an ``EventEncoder`` and hands the resulting
``EncodedEvent`` s to ``EventStore.append_encoded``, which only checks what depends on the
append: the stream name, the expected version, the size limit of that store and that no id
repeats.

Example::

    encoder = EventEncoder("stream.chunk", meta={"run_id": "r1"})
    batch = [encoder.encode({"seq": n, "text": t}) for n, t in enumerate(texts, 1)]
    await store.append_encoded("run-r1", batch, expected_version=0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast
from uuid import UUID

import orjson

from ._encoding import check_finite, encode_object
from ._errors import EventTooLarge, InvalidEventError
from ._ids import check_event_id, uuid7
from ._records import EncodedEvent, NewEvent
from ._validation import (
    DEFAULT_MAX_EVENT_BYTES,
    PreparedAppend,
    check_event_type,
    check_expected_version,
    check_stream_name,
    encode_new_events,
)

__all__ = ["EventEncoder", "check_encoded", "encode_events"]

_SORTED = orjson.OPT_SORT_KEYS
_new_tuple = tuple.__new__
"""``_records.sealed_encoded`` inlined in ``EventEncoder.encode``, which runs once per event of a stream."""


class EventEncoder:
    """Validates and encodes events of one type, schema and meta, ready for ``append_encoded``.

    The type, schema and meta are checked and the meta encoded once, when the encoder is
    made; ``encode`` then checks and encodes only the payload. Errors are those of ``append``:
    ``InvalidEventError`` naming what is wrong, ``EventTooLarge`` over ``max_event_bytes``.

    Args:
        type: Dotted event type name, e.g. ``stream.chunk``.
        schema: The schema version of the payloads.
        meta: The meta object of every event (``{}`` when None).
        max_event_bytes: Size limit of one encoded event (data plus meta); use the store's
            ``max_event_bytes`` to fail here rather than at the append.

    Example:
        >>> encoder = EventEncoder("message.added", meta={"actor": "me"})
        >>> event = encoder.encode({"text": "hi", "lang": "en"})
        >>> event.data, event.meta
        (b'{"lang":"en","text":"hi"}', b'{"actor":"me"}')
    """

    __slots__ = ("max_event_bytes", "meta", "schema", "type")

    def __init__(
        self,
        type: str,
        *,
        schema: int = 1,
        meta: Mapping[str, Any] | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        check_event_type(type, None, None)
        given: object = schema
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise InvalidEventError(f"schema must be an int >= 1, not {given!r}")
        self.type: str = str(type)
        self.schema: int = int(schema)
        self.meta: bytes = encode_object({} if meta is None else meta, "meta", None, None)
        """The canonical bytes of the meta every event gets."""
        self.max_event_bytes = max_event_bytes

    def encode(self, data: Mapping[str, Any], id: UUID | int | None = None) -> EncodedEvent:
        """Validate and encode one event with payload ``data``.

        Args:
            data: The payload, a JSON object.
            id: The event id: a ``UUID``, or its 128-bit value (``UUID.int``) for a writer that
                makes ids as ints; a fresh UUIDv7 when None.

        Raises:
            InvalidEventError: ``data`` is not a JSON object or not JSON-serializable.
            EventTooLarge: data plus meta exceed ``max_event_bytes``.
        """
        if data.__class__ is dict:
            # The common case inlined: one canonical dump of a dict.
            try:
                raw = orjson.dumps(data, option=_SORTED)
            except TypeError as exc:
                raise InvalidEventError(f"data is not JSON-serializable: {exc}") from exc
            if raw.find(b"null") >= 0:  # cheaper than "in" on bytes
                check_finite(data, "data", None, None, raw)
        else:
            raw = encode_object(data, "data", None, None)
        # Kept as a copy of its own size: orjson's output sits in a larger allocation, and
        # when thousands are kept alive (a commit that is slow to come) each costs 2-10 µs
        # in fresh memory; the copy costs 0.15-0.25 µs (measured on chunk payloads).
        payload = memoryview(raw).tobytes()
        meta = self.meta
        size = len(payload) + len(meta)
        if size > self.max_event_bytes:
            raise EventTooLarge(size, self.max_event_bytes)
        if id.__class__ is int and 0 <= id < _UUID_LIMIT:
            # A writer's int id (the common case of a stream), formatted inline.
            digits = f"{id:032x}"
            text = f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
        else:
            text = _id_text(id)
        return cast(
            EncodedEvent, _new_tuple(cast(Any, EncodedEvent), (text, self.type, self.schema, payload, meta))
        )


def _id_text(id: object) -> str:
    """The canonical text of an event id (``str(UUID)``), made straight from its 128-bit value."""
    if id is None:
        value = uuid7().int
    elif isinstance(id, UUID):
        value = id.int
    elif isinstance(id, int) and not isinstance(id, bool):
        if not 0 <= id < _UUID_LIMIT:
            raise InvalidEventError(f"an int event id must be a 128-bit UUID value, not {id}")
        value = id
    else:
        return check_event_id(id)  # a str: only the canonical spelling, as append
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


_UUID_LIMIT = 1 << 128


def encode_events(
    events: Sequence[NewEvent], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> list[EncodedEvent]:
    """Validate and encode ``NewEvent`` s once, as ``append`` does, for ``append_encoded``.

    Useful to append the same events again (a retry after a lost acknowledgement) without
    encoding them again. Errors are those of ``append`` (they name the event's index).

    Raises:
        InvalidEventError: an event is malformed, or an id appears twice.
        EventTooLarge: an event's data plus meta exceed ``max_event_bytes``.
    """
    return encode_new_events(events, max_event_bytes, None)


def check_encoded(
    stream: object, events: object, expected_version: object, max_event_bytes: int
) -> PreparedAppend:
    """Check an ``append_encoded`` call; return it as a prepared append (nothing is encoded).

    Raises:
        InvalidEventError: the stream name or expected version is malformed, ``events`` is empty
            or holds something other than an ``EncodedEvent``, or an id appears twice.
        EventTooLarge: an event is over this store's ``max_event_bytes``.
    """
    name = check_stream_name(stream)
    if isinstance(events, EncodedEvent) or not isinstance(events, Sequence):
        raise InvalidEventError("events must be a sequence of EncodedEvent", stream=name)
    # A copy: the caller may keep adding to its list while a store's thread writes this one.
    batch: list[EncodedEvent] = list(events)
    if not batch:
        raise InvalidEventError("an append needs at least one event", stream=name)
    seen: set[str] = set()
    add = seen.add
    for index, event in enumerate(batch):
        if event.__class__ is not EncodedEvent:
            raise InvalidEventError(
                f"expected an EncodedEvent (made by EventEncoder or encode_events), got {type(event).__name__}",
                stream=name,
                index=index,
            )
        size = len(event[3]) + len(event[4])
        if size > max_event_bytes:
            raise EventTooLarge(size, max_event_bytes, stream=name, index=index)
        add(event[0])
    if len(seen) != len(batch):
        _raise_repeated_id(name, batch)
    expected = check_expected_version(name, expected_version)
    return PreparedAppend(name, batch, expected)


def _raise_repeated_id(stream: str, events: Sequence[EncodedEvent]) -> None:
    seen: set[str] = set()
    for index, event in enumerate(events):
        if event.id in seen:
            raise InvalidEventError(
                f"event id {event.id} appears twice in one batch", stream=stream, index=index
            )
        seen.add(event.id)
