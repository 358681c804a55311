"""Decoding of stored rows: payloads checked and upcast, ids and times parsed.

Every read of every backend turns its rows into ``RecordedEvent`` s with ``decode_event``,
and ``RawEvent.decode`` and snapshot loads use ``decode_payload``: one decoder, so a payload
that cannot be decoded raises the same ``CorruptEventError`` everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast
from uuid import UUID, SafeUUID

import orjson

from ._encoding import EPOCH, from_micros
from ._errors import CorruptEventError
from ._records import RecordedEvent
from ._upcasting import Upcasters

__all__ = ["decode_event", "decode_payload"]

_EPOCH = EPOCH


def decode_payload(
    upcasters: Upcasters | None,
    type_: str,
    schema: int,
    data: bytes | str,
    meta: bytes | str,
    *,
    stream: str,
    version: int,
    position: int | None,
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Decode stored ``data`` and ``meta`` and upcast ``data``; return ``(schema, data, meta)``.

    Raises:
        CorruptEventError: a payload is not valid JSON, not an object, or an upcaster failed.
    """
    try:
        data_obj = orjson.loads(data)
        # Most events carry no meta; skip the parser for the canonical empty object.
        meta_obj = {} if meta == b"{}" or meta == "{}" else orjson.loads(meta)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise CorruptEventError(
            stream, version, f"payload is not valid JSON: {exc}", position=position
        ) from exc
    if not isinstance(data_obj, dict) or not isinstance(meta_obj, dict):
        raise CorruptEventError(stream, version, "payload is not a JSON object", position=position)
    if upcasters and not (len(data_obj) == 1 and _MARKER_KEY in data_obj):  # a redacted payload stays so
        try:
            schema, data_obj = upcasters.upcast(type_, schema, data_obj)
        except Exception as exc:
            raise CorruptEventError(
                stream,
                version,
                f"upcasting {type_!r} from schema {schema} failed: {exc!r}",
                position=position,
            ) from exc
        if not isinstance(data_obj, dict):
            raise CorruptEventError(
                stream, version, f"an upcaster of {type_!r} returned a non-object", position=position
            )
    return schema, data_obj, meta_obj


_MARKER_KEY = "turnlog_redacted"
"""The key of a redaction marker (``_redaction.MARKER_KEY``): upcasters never see one."""
_new_uuid = object.__new__
_set_field = object.__setattr__
_UNKNOWN_SAFETY = SafeUUID.unknown


def _parse_id(eid: Any) -> UUID:
    """The ``UUID`` of a stored id; ``ValueError`` (or ``TypeError``) when it is not one.

    The canonical 36-character form, the one every backend stores, takes a path about twice
    as fast as ``UUID(text)`` and builds the same object: the same hexadecimal digits are
    parsed by ``int(..., 16)``, and any other form goes through ``UUID`` itself.
    """
    if eid.__class__ is str and len(eid) == 36:
        digits = eid.replace("-", "")
        if len(digits) == 32:
            value = int(digits, 16)
            uuid = _new_uuid(UUID)
            _set_field(uuid, "int", value)
            _set_field(uuid, "is_safe", _UNKNOWN_SAFETY)
            return uuid
    return UUID(eid)


class _RecordedFields:
    """``RecordedEvent``'s fields in a mutable twin with the same slots (see ``decode_event``).

    Written out rather than made with ``make_dataclass`` (as ``_raw`` does), which would cost
    every process that imports the store about 1 ms; the check below keeps it equal.
    """

    __slots__ = RecordedEvent.__slots__

    def __init__(  # one parameter per field of RecordedEvent, in order
        self,
        id: UUID,
        stream: str,
        version: int,
        position: int,
        type: str,
        schema: int,
        data: dict[str, Any],
        meta: dict[str, Any],
        recorded_at: datetime,
        prev_hash: str,
        hash: str,
    ) -> None:
        self.id = id
        self.stream = stream
        self.version = version
        self.position = position
        self.type = type
        self.schema = schema
        self.data = data
        self.meta = meta
        self.recorded_at = recorded_at
        self.prev_hash = prev_hash
        self.hash = hash


if _RecordedFields.__init__.__code__.co_varnames[1:12] != RecordedEvent.__slots__:  # pragma: no cover
    raise ImportError("_RecordedFields no longer matches the fields of RecordedEvent")


_last_moment: tuple[int, datetime] = (0, _EPOCH)
"""The latest ``recorded_at`` decoded: the events of one append share their timestamp."""


def decode_event(upcasters: Upcasters, row: Iterable[Any]) -> RecordedEvent:
    """Turn a stored row in ``RawEvent`` field order into a ``RecordedEvent`` (decoded, upcast).

    The id may be stored as text or as a ``UUID``.

    Raises:
        CorruptEventError: the payload cannot be decoded or the id is not a UUID.
    """
    global _last_moment
    position, eid, stream, version, type_, schema, data, meta, recorded_at, prev_hash, digest = row
    if upcasters:
        schema, data_obj, meta_obj = decode_payload(
            upcasters, type_, schema, data, meta, stream=stream, version=version, position=position
        )
    else:
        # decode_payload without upcasters, inlined: this runs once per event read.
        try:
            data_obj = orjson.loads(data)
            meta_obj = {} if meta == b"{}" or meta == "{}" else orjson.loads(meta)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CorruptEventError(
                stream, version, f"payload is not valid JSON: {exc}", position=position
            ) from exc
        if data_obj.__class__ is not dict or meta_obj.__class__ is not dict:
            raise CorruptEventError(stream, version, "payload is not a JSON object", position=position)
    if eid.__class__ is not UUID:
        try:
            eid = _parse_id(eid)
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptEventError(
                stream, version, f"malformed event id {eid!r}", position=position
            ) from exc
    last = _last_moment
    if last[0] == recorded_at:
        moment = last[1]
    else:
        try:
            moment = from_micros(recorded_at)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CorruptEventError(
                stream, version, f"recorded_at {recorded_at!r:.40} is not a time: {exc}", position=position
            ) from exc
        _last_moment = (recorded_at, moment)
    # Built as ``_raw.raw_event`` builds a RawEvent: in the mutable twin, which then becomes a
    # RecordedEvent (frozen, equal to one constructed). A frozen dataclass sets each of the
    # eleven fields through object.__setattr__, about a third of this function's cost.
    event: Any = _RecordedFields(
        eid, stream, version, position, type_, schema, data_obj, meta_obj, moment, prev_hash, digest
    )
    event.__class__ = RecordedEvent
    return cast(RecordedEvent, event)
