"""Validation, canonical encoding and the hash chain, shared by every backend.

Every backend stores ``data`` and ``meta`` as the canonical bytes made here (orjson with
sorted keys), so the hash of an event can be recomputed from what is stored, on any
backend, and a copy between backends keeps its hashes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ._errors import EventTooLarge, InvalidEventError
from ._records import ANY, STREAM_EXISTS, ExpectedVersion, NewEvent

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "PreparedEvent",
    "check_expected_version",
    "check_stream_name",
    "decode_json",
    "encode_json",
    "event_hash",
    "from_micros",
    "prepare_events",
    "to_micros",
    "version_matches",
]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_STREAM_LEN = 200
MAX_TYPE_LEN = 200

_TYPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*(\.[A-Za-z][A-Za-z0-9_\-]*)*\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_OPTS = orjson.OPT_SORT_KEYS


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event with its canonical bytes, ready for a backend to insert."""

    id: str
    type: str
    schema: int
    data: bytes
    meta: bytes
    source: NewEvent


def encode_json(value: Mapping[str, Any]) -> bytes:
    """Encode a JSON object canonically (sorted keys, UTF-8, no whitespace)."""
    return orjson.dumps(value, option=_OPTS)


def decode_json(raw: bytes | str) -> Any:
    """Decode JSON bytes; raises ``orjson.JSONDecodeError`` (a ValueError) when malformed."""
    return orjson.loads(raw)


def check_stream_name(stream: object) -> str:
    """Return ``stream`` if it is a valid stream name, else raise ``InvalidEventError``."""
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
    return stream


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


def version_matches(expected: ExpectedVersion, actual: int) -> bool:
    """Tell whether a stream at ``actual`` satisfies ``expected``."""
    if expected is ANY:
        return True
    if expected is STREAM_EXISTS:
        return actual > 0
    return expected == actual


def _encode_object(value: object, what: str, stream: str, index: int) -> bytes:
    if not isinstance(value, Mapping):
        raise InvalidEventError(
            f"{what} must be a JSON object (a mapping), not {type(value).__name__}",
            stream=stream,
            index=index,
        )
    try:
        return orjson.dumps(value, option=_OPTS)
    except TypeError as exc:
        raise InvalidEventError(
            f"{what} is not JSON-serializable: {exc}", stream=stream, index=index
        ) from exc


def prepare_events(
    stream: object, events: Sequence[NewEvent], max_event_bytes: int
) -> tuple[str, list[PreparedEvent]]:
    """Validate a batch and encode it canonically; nothing is written if this raises."""
    name = check_stream_name(stream)
    if isinstance(events, NewEvent) or not isinstance(events, Sequence):
        raise InvalidEventError("events must be a sequence of NewEvent", stream=name)
    if not events:
        raise InvalidEventError("an append needs at least one event", stream=name)
    prepared: list[PreparedEvent] = []
    seen: set[str] = set()
    for index, event in enumerate(events):
        if not isinstance(event, NewEvent):
            raise InvalidEventError(
                f"expected a NewEvent, got {type(event).__name__}", stream=name, index=index
            )
        etype = event.type
        if not isinstance(etype, str) or not etype:
            raise InvalidEventError("event type must be a non-empty str", stream=name, index=index)
        if len(etype) > MAX_TYPE_LEN or not _TYPE_RE.match(etype):
            raise InvalidEventError(
                f"malformed event type {etype!r}: use dotted names such as 'message.added'",
                stream=name,
                index=index,
            )
        if isinstance(event.schema, bool) or not isinstance(event.schema, int) or event.schema < 1:
            raise InvalidEventError(
                f"schema must be an int >= 1, not {event.schema!r}", stream=name, index=index
            )
        data = _encode_object(event.data, "data", name, index)
        meta = _encode_object({} if event.meta is None else event.meta, "meta", name, index)
        size = len(data) + len(meta)
        if size > max_event_bytes:
            raise EventTooLarge(size, max_event_bytes, stream=name, index=index)
        eid = str(event.id)
        if eid in seen:
            raise InvalidEventError(f"event id {eid} appears twice in one batch", stream=name, index=index)
        seen.add(eid)
        prepared.append(PreparedEvent(eid, etype, event.schema, data, meta, event))
    return name, prepared


def event_hash(
    prev_hash: str,
    event_id: str,
    stream: str,
    version: int,
    type_: str,
    schema: int,
    data: bytes,
    meta: bytes,
    recorded_at_us: int,
) -> str:
    """SHA-256 over the previous hash and the canonical bytes of one event.

    Fields are length-prefixed so that no two different events share an input.
    The global position is not part of the hash: it belongs to the store, not the event,
    so a copy to another backend keeps every hash.
    """
    h = hashlib.sha256()
    for part in (
        prev_hash.encode(),
        event_id.encode(),
        stream.encode(),
        str(version).encode(),
        type_.encode(),
        str(schema).encode(),
        data,
        meta,
        str(recorded_at_us).encode(),
    ):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def to_micros(moment: datetime) -> int:
    """UTC microseconds since the Unix epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The inverse of ``to_micros`` (an aware UTC datetime)."""
    return datetime.fromtimestamp(micros // 1_000_000, tz=UTC).replace(microsecond=micros % 1_000_000)
