"""Validation of what is appended, before anything is written: names, versions, batches.

``append`` and ``append_batch`` check and encode their ``NewEvent`` s here
(``prepare_events``, ``prepare_batch``); ``append_encoded`` checks less, because its
``EncodedEvent`` s were checked when they were made (``_encoder``). Reads check their
arguments here too, so every backend refuses the same input the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from ._encoding import check_all_finite, dump_dict, encode_object
from ._errors import EventTooLarge, InvalidEventError
from ._ids import check_event_id
from ._records import ANY, STREAM_EXISTS, EncodedEvent, ExpectedVersion, NewEvent, Tracking

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "MAX_STREAM_LEN",
    "MAX_TYPE_LEN",
    "TYPE_RE",
    "PreparedAppend",
    "check_event_type",
    "check_expected_version",
    "check_read_range",
    "check_stream_name",
    "check_stream_prefix",
    "check_tracking",
    "check_type_filter",
    "encode_new_events",
    "prepare_batch",
    "prepare_events",
    "valid_types",
    "version_matches",
]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_STREAM_LEN = 200
MAX_TYPE_LEN = 200

TYPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*(\.[A-Za-z][A-Za-z0-9_\-]*)*\Z")
"""A dotted event (or snapshot) type name."""
_TYPE_RE = TYPE_RE
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_stream_name(stream: object) -> str:
    """Return ``stream`` if it is a valid stream name, else raise ``InvalidEventError``."""
    if stream.__class__ is str and stream in _valid_streams:
        return stream
    if not isinstance(stream, str):
        raise InvalidEventError(f"stream name must be a str, not {type(stream).__name__}")
    if not stream:
        raise InvalidEventError("stream name must not be empty")
    if len(stream) > MAX_STREAM_LEN:
        raise InvalidEventError(
            f"stream name is {len(stream)} characters, over the limit of {MAX_STREAM_LEN}"
        )
    if _CONTROL_RE.search(stream):
        raise InvalidEventError(f"stream name {stream!r} contains a control character")
    if not stream.isascii():
        _check_text(stream, "stream name")
    if stream.__class__ is str:
        if len(_valid_streams) >= _VALID_STREAMS:
            _valid_streams.clear()
        _valid_streams.add(stream)
    return stream


_valid_streams: set[str] = set()
"""Stream names already checked: a writer appends to the same few streams again and again."""
_VALID_STREAMS = 4096
"""Names remembered; the set starts over when it is full."""


def check_stream_prefix(prefix: object) -> str | None:
    """Return a ``stream_prefix`` or ``prefix`` argument of a read if valid (None or text)."""
    if prefix is None:
        return None
    if not isinstance(prefix, str):
        raise InvalidEventError(f"stream prefix must be a str, not {type(prefix).__name__}")
    if not prefix.isascii():
        _check_text(prefix, "stream prefix")
    return prefix


def check_type_filter(types: Iterable[str] | None) -> list[str] | None:
    """The ``types`` argument of a read as a list (None: every type); each must be a str of text."""
    if types is None:
        return None
    wanted = [types] if isinstance(types, str) else list(types)
    for name in wanted:
        if not isinstance(name, str):
            raise InvalidEventError(f"an event type to read must be a str, not {type(name).__name__}")
        if not name.isascii():
            _check_text(name, "event type")
    return wanted


def _check_text(value: str, what: str) -> None:
    """Refuse a str that is not Unicode text (a lone surrogate cannot be stored or hashed)."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidEventError(
            f"{what} {value!r} holds a lone surrogate at index {exc.start}: not valid Unicode text"
        ) from None


def check_expected_version(stream: str, expected: object) -> ExpectedVersion:
    """Validate the type and range of an ``expected_version`` argument."""
    if expected is ANY or expected is STREAM_EXISTS:
        return expected
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise InvalidEventError(
            "expected_version must be an int, ANY, NO_STREAM or STREAM_EXISTS, "
            f"not {type(expected).__name__} {expected!r}",
            stream=stream,
        )
    if expected < 0:
        raise InvalidEventError(f"expected_version must be >= 0, not {expected}", stream=stream)
    return expected


def check_read_range(low_name: str, low: object, high_name: str, high: object, limit: object) -> None:
    """Validate the bounds and limit of a read (ints >= 0; the upper bound and limit may be None)."""
    for name, value, optional in ((low_name, low, False), (high_name, high, True), ("limit", limit, True)):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidEventError(f"{name} must be an int >= 0, not {value!r}")


def version_matches(expected: ExpectedVersion, actual: int) -> bool:
    """Tell whether a stream at ``actual`` satisfies ``expected``."""
    if expected is ANY:
        return True
    if expected is STREAM_EXISTS:
        return actual > 0
    return expected == actual


valid_types: set[str] = set()
"""Event type names already validated: a store sees few distinct ones, again and again."""


def check_event_type(etype: object, stream: str | None, index: int | None) -> None:
    """Raise ``InvalidEventError`` unless ``etype`` is a dotted event type name (remembered when it is)."""
    if not isinstance(etype, str) or not etype:
        raise InvalidEventError("event type must be a non-empty str", stream=stream, index=index)
    if len(etype) > MAX_TYPE_LEN or not _TYPE_RE.match(etype):
        raise InvalidEventError(
            f"malformed event type {etype!r}: use dotted names such as 'message.added'",
            stream=stream,
            index=index,
        )
    if type(etype) is str and len(valid_types) < 10_000:
        valid_types.add(etype)


def prepare_events(
    stream: object, events: Sequence[NewEvent], max_event_bytes: int
) -> tuple[str, list[EncodedEvent]]:
    """Validate a batch and encode it canonically; nothing is written if this raises."""
    name = check_stream_name(stream)
    return name, encode_new_events(events, max_event_bytes, name)


def encode_new_events(events: object, max_event_bytes: int, stream: str | None) -> list[EncodedEvent]:
    """Validate and encode a non-empty sequence of ``NewEvent`` s; errors name ``stream`` when given."""
    # A list first: the ABC check costs a call into ``abc`` on every append.
    if events.__class__ is not list and (isinstance(events, NewEvent) or not isinstance(events, Sequence)):
        raise InvalidEventError("events must be a sequence of NewEvent", stream=stream)
    if not events:
        raise InvalidEventError("an append needs at least one event", stream=stream)
    prepared: list[EncodedEvent] = []
    append = prepared.append
    seen: set[str] = set()
    add = seen.add
    types = valid_types
    # Callers often give every event of a batch the same meta object (its correlation ids):
    # it is encoded once. Only within this call, where nothing can change it in between.
    last_meta: object = None
    meta = b"{}"
    # Payload dicts whose bytes hold null, checked for NaN after the loop, all together
    # (``check_all_finite``); an error in the loop checks them first, since an earlier
    # event's NaN is the error a check in order would raise.
    null_values: list[object] = []
    null_raws: list[bytes] = []
    null_indexes: list[int] = []
    # The loop runs once per event of every append: the common case (a known type, a UUID
    # id) is written out, everything else goes the long way round.
    try:
        for index, event in enumerate(events):
            if event.__class__ is not NewEvent and not isinstance(event, NewEvent):
                hint = (
                    " (append EncodedEvents with append_encoded)" if isinstance(event, EncodedEvent) else ""
                )
                raise InvalidEventError(
                    f"expected a NewEvent, got {type(event).__name__}{hint}", stream=stream, index=index
                )
            etype, schema, value = event.type, event.schema, event.data
            if etype.__class__ is not str or etype not in types:
                check_event_type(etype, stream, index)
            if schema.__class__ is not int or schema < 1:
                raise InvalidEventError(
                    f"schema must be an int >= 1, not {schema!r}", stream=stream, index=index
                )
            if value.__class__ is dict:
                data = dump_dict(value, "data", stream, index)
                if data.find(b"null") >= 0:  # cheaper than "in" on bytes
                    null_values.append(value)
                    null_raws.append(data)
                    null_indexes.append(index)
            else:
                data = encode_object(value, "data", stream, index)
            given_meta = event.meta
            if given_meta is None:
                meta = b"{}"
            elif given_meta is not last_meta:
                meta = encode_object(given_meta, "meta", stream, index)
            last_meta = given_meta
            if len(data) + len(meta) > max_event_bytes:
                raise EventTooLarge(len(data) + len(meta), max_event_bytes, stream=stream, index=index)
            given: object = event.id
            if given.__class__ is UUID:
                # str(UUID) in fewer steps: the same lower-case 8-4-4-4-12 text
                h = given.int.to_bytes(16).hex()
                eid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
            else:
                eid = check_event_id(given, stream, index)
            if eid in seen:
                raise InvalidEventError(
                    f"event id {eid} appears twice in one batch", stream=stream, index=index
                )
            add(eid)
            append(_new_tuple(_ENCODED, (eid, etype, schema, data, meta)))
    except Exception:
        if null_values:  # an earlier event's NaN is the error a check in order raises
            try:
                check_all_finite(null_values, null_raws, "data", stream, null_indexes)
            except InvalidEventError as earlier:
                raise earlier from None
        raise
    if null_values:
        check_all_finite(null_values, null_raws, "data", stream, null_indexes)
    return prepared


_new_tuple: Any = tuple.__new__
_ENCODED: Any = EncodedEvent
"""``sealed_encoded`` written out in ``encode_new_events``, which runs once per appended event."""


class PreparedAppend(NamedTuple):
    """One validated entry of an append: the stream, its encoded events, the expected version."""

    stream: str
    events: Sequence[EncodedEvent]
    expected: ExpectedVersion


def prepare_batch(entries: object, max_event_bytes: int) -> list[PreparedAppend]:
    """Validate every entry of an ``append_batch`` call; nothing is written if this raises.

    Each entry is ``(stream, events, expected_version)``. An event id may appear only once
    in the whole call, across entries too.
    """
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise InvalidEventError("append_batch needs a sequence of (stream, events, expected_version)")
    if not entries:
        raise InvalidEventError("append_batch needs at least one entry")
    prepared: list[PreparedAppend] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries):
        if not isinstance(entry, tuple | list) or len(entry) != 3:
            raise InvalidEventError(
                f"append_batch entry #{number} must be (stream, events, expected_version)"
            )
        stream, events, expected = entry
        name, evs = prepare_events(stream, events, max_event_bytes)
        expected = check_expected_version(name, expected)
        for index, ev in enumerate(evs):
            if ev.id in seen:
                raise InvalidEventError(
                    f"event id {ev.id} appears twice in one append_batch", stream=name, index=index
                )
            seen.add(ev.id)
        prepared.append(PreparedAppend(name, evs, expected))
    return prepared


def check_tracking(tracking: object) -> Tracking:
    """Return ``tracking`` if it is a ``Tracking`` with a valid consumer name and an int position >= 0.

    Raises:
        InvalidEventError: naming what is wrong.
    """
    if not isinstance(tracking, Tracking):
        raise InvalidEventError(f"expected a Tracking, got {type(tracking).__name__}")
    try:
        check_stream_name(tracking.consumer)
    except InvalidEventError as exc:
        raise InvalidEventError(f"tracking: {str(exc).replace('stream name', 'consumer name')}") from None
    position: object = tracking.position
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise InvalidEventError(f"tracking position must be an int >= 0, not {position!r}")
    return tracking
