"""The records that go into and come out of a store.

An event has one type per purpose on its way through the store (docs/eventstore.md, "One
event type per purpose"):

- ``NewEvent``: what a writer appends (Python payloads, the id made by the writer);
  nothing is checked until the append.
- ``EncodedEvent``: an event validated and canonically encoded once, not yet bound to a
  stream, so that a writer of many events (a stream's chunks) or a retry does not pay for it
  again (``append_encoded``). Only the encoders make one, so a store may trust it.
- ``RawEvent`` (``_raw``): a stored row exactly as kept (canonical bytes, position, hashes),
  for copies between backends, ``verify`` and readers that decode only what they need. The
  backends' rows are tuples in its field order, and the in-memory store keeps ``RawEvent`` s.
- ``RecordedEvent``: a stored event decoded and upcast, what readers fold; reads,
  subscriptions and ``AppendResult.events`` return it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple, NoReturn, TypeAlias, cast
from uuid import UUID

from ._ids import uuid7
from ._problem import Problem

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AppendResult",
    "EncodedEvent",
    "ExpectedVersion",
    "NewEvent",
    "NewSnapshot",
    "RecordedEvent",
    "Snapshot",
    "Tracking",
    "VerifyReport",
]


class _Expect(enum.Enum):
    ANY = "any"
    STREAM_EXISTS = "stream_exists"

    def __repr__(self) -> str:
        return self.name


ANY: Final = _Expect.ANY
"""Append whatever the stream's version is (no concurrency check)."""
STREAM_EXISTS: Final = _Expect.STREAM_EXISTS
"""Append only if the stream already has at least one event."""
NO_STREAM: Final = 0
"""Append only if the stream has no event yet; the same as the integer 0."""

ExpectedVersion: TypeAlias = int | Literal[_Expect.ANY, _Expect.STREAM_EXISTS]


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append.

    The id is made when the object is made (UUIDv7), so re-sending the same ``NewEvent``
    after a lost acknowledgement is idempotent: the store returns the original positions.

    Attributes:
        type: Dotted event type name, e.g. ``message.added``.
        data: The payload, a JSON object.
        meta: Correlation and causation data, a JSON object (``{}`` when None).
        id: The idempotency key; a fresh UUIDv7 when not given.
        schema: The schema version of ``data`` for this type; upcasters lift old ones on read.
    """

    type: str
    data: Mapping[str, Any]
    meta: Mapping[str, Any] | None = None
    id: UUID = field(default_factory=uuid7)
    schema: int = 1


class _EncodedFields(NamedTuple):
    id: str
    type: str
    schema: int
    data: bytes
    meta: bytes


class EncodedEvent(_EncodedFields):
    """An event validated and canonically encoded once, for ``EventStore.append_encoded``.

    Only ``EventEncoder.encode`` and ``encode_events`` make these (calling the class raises
    ``TypeError``), so a store can take one as proof that it was validated and skip the work
    ``append`` does again on every call. It is not bound to a stream: the stream, version and
    hash chain are given when it is appended. A tuple, because a streaming writer makes one per
    chunk.

    Attributes:
        id: The event id, in canonical UUID text form.
        type: The dotted event type name.
        schema: The schema version of ``data``.
        data: The canonical JSON bytes of the payload (sorted keys, no whitespace).
        meta: The canonical JSON bytes of the meta object (``b"{}"`` when empty).
    """

    __slots__ = ()

    def __new__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("an EncodedEvent is made by EventEncoder.encode or encode_events, which validate it")

    @classmethod
    def _make(cls, iterable: object) -> NoReturn:  # type: ignore[override]  # refuses, by design
        raise TypeError("an EncodedEvent is made by EventEncoder.encode or encode_events, which validate it")

    def _replace(self, **kwargs: object) -> NoReturn:
        raise TypeError("an EncodedEvent cannot be changed; encode a new one")

    def __reduce__(self) -> tuple[Any, tuple[tuple[str, str, int, bytes, bytes]]]:
        # copy, deepcopy and pickle rebuild it through the sealed constructor.
        return sealed_encoded, ((self.id, self.type, self.schema, self.data, self.meta),)


def sealed_encoded(fields: tuple[str, str, int, bytes, bytes]) -> EncodedEvent:
    """Build an ``EncodedEvent`` from fields already validated (for the encoders only)."""
    # tuple.__new__ directly: EncodedEvent's own __new__ refuses every caller.
    return cast(EncodedEvent, tuple.__new__(cast(Any, EncodedEvent), fields))


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored.

    Attributes:
        id: The event id (UUIDv7, made by the writer).
        stream: The stream it belongs to.
        version: 1-based position inside the stream.
        position: Global position in commit order.
        type: Dotted event type name.
        schema: Schema version of ``data`` (after upcasting, the newest known).
        data: The payload.
        meta: Correlation, causation and actor data.
        recorded_at: UTC time of the append.
        prev_hash: Hash of the previous event of the stream ("" for version 1).
        hash: SHA-256 over ``prev_hash`` and the canonical bytes of this event.
    """

    id: UUID
    stream: str
    version: int
    position: int
    type: str
    schema: int
    data: dict[str, Any]
    meta: dict[str, Any]
    recorded_at: datetime
    prev_hash: str
    hash: str


class AppendResult:
    """What an append stored: positions, the stream's new version, and the events themselves.

    ``events`` are the ``RecordedEvent`` s a read of those positions returns (decoded and
    upcast the same way), so a writer that folds what it appended needs no read-back. A
    re-sent append (same ids, same content) returns the original result, events included.
    The events are decoded on first access, from the rows the store kept: an append whose
    caller never looks at them pays nothing for them.

    Two results are equal when their positions and versions are (the events follow from
    those in one store).

    Attributes:
        positions: Global positions of the appended events, in order.
        version: The stream's version after the append.
    """

    __slots__ = ("_decode", "_events", "_rows", "positions", "version")

    positions: tuple[int, ...]
    version: int
    _rows: Sequence[Iterable[Any]] | None
    _decode: Callable[[Iterable[Any]], RecordedEvent] | None
    _events: tuple[RecordedEvent, ...] | None

    def __init__(
        self,
        positions: tuple[int, ...],
        version: int,
        *,
        rows: Sequence[Iterable[Any]] | None = None,
        decode: Callable[[Iterable[Any]], RecordedEvent] | None = None,
    ) -> None:
        """Make a result; a store passes its stored ``rows`` (``RawEvent`` order) and their ``decode``."""
        # One is made per append: the slots are set directly (``_events`` stays unset until
        # ``events`` decodes them), which costs about half of a frozen dataclass's __init__.
        _set = object.__setattr__
        _set(self, "positions", positions)
        _set(self, "version", version)
        _set(self, "_rows", rows)
        _set(self, "_decode", decode)

    @property
    def events(self) -> tuple[RecordedEvent, ...]:
        """The events stored, in order, exactly as a read returns them.

        Raises:
            AttributeError: the result was made without its rows (by hand, not by a store).
        """
        events: tuple[RecordedEvent, ...] | None = getattr(self, "_events", None)
        if events is None:
            rows, decode = self._rows, self._decode
            if rows is None or decode is None:
                raise AttributeError("this AppendResult was made without the events it stands for")
            events = tuple(map(decode, rows))
            object.__setattr__(self, "_events", events)
        return events

    @property
    def rows(self) -> Sequence[Iterable[Any]] | None:
        """The stored rows behind ``events`` (``RawEvent`` field order), None when not known."""
        return self._rows

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"AppendResult is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"AppendResult is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not AppendResult:
            return NotImplemented
        assert isinstance(other, AppendResult)
        return self.positions == other.positions and self.version == other.version

    def __hash__(self) -> int:
        return hash((self.positions, self.version))

    def __repr__(self) -> str:
        return f"AppendResult(positions={self.positions!r}, version={self.version!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy carries the decoded events, not the decoder (whose upcasters may not pickle).
        events = self.events if self._rows is not None and self._decode is not None else None
        return _rebuilt_result, (self.positions, self.version, self._rows, events)


def _rebuilt_result(
    positions: tuple[int, ...],
    version: int,
    rows: Sequence[Iterable[Any]] | None,
    events: tuple[RecordedEvent, ...] | None,
) -> AppendResult:
    result = AppendResult(positions, version, rows=rows)
    object.__setattr__(result, "_events", events)
    return result


@dataclass(frozen=True, slots=True)
class Tracking:
    """A consumer's place in a log: the last position it has processed.

    Record it with ``EventStore.save_tracking``, or with the events it led to in one
    transaction (``EventStore.append_tracked``); read it with ``tracking_position``. A
    consumer's position only moves forward.

    Attributes:
        consumer: The consumer's name (the rules of a stream name apply).
        position: The last position it processed (of this store's log or of another one).
    """

    consumer: str
    position: int


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of ``verify``.

    Attributes:
        problems: Every problem found; empty when the store is sound.
        streams: How many streams were checked.
        events: How many events were checked.
        snapshots: How many snapshots were checked against their digest and the log.
        checks: What ran: ``"chains"`` and ``"snapshots"`` always; on SQLite, when the whole
            store is checked, ``"integrity_check"`` or ``"quick_check"`` as well.
        redacted: How many events checked hold an erased payload (or meta) whose redaction
            record the chain confirms; these are not problems.
        redaction_reasons: The distinct reasons given by the redaction records.
    """

    problems: tuple[Problem, ...]
    streams: int
    events: int
    snapshots: int = 0
    checks: tuple[str, ...] = ()
    redacted: int = 0
    redaction_reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class NewSnapshot:
    """A snapshot to save: the state of a projection of ``stream`` after ``version``.

    Attributes:
        stream: The stream the snapshot summarizes.
        version: The last stream version folded into ``data``.
        type: What kind of state this is, e.g. ``branch_state``; upcasters apply to it.
        data: The state, a JSON object.
        schema: Schema version of ``data``.
        meta: Free-form facts, e.g. the projection code version.
    """

    stream: str
    version: int
    type: str
    data: Mapping[str, Any]
    schema: int = 1
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A stored snapshot (see ``NewSnapshot``), with the time it was recorded.

    Attributes:
        event_hash: The hash of the stream's event at ``version`` when the snapshot was saved
            (``""`` when there was none); a store returns only snapshots whose ``event_hash``
            is the log's and whose ``digest`` matches their stored bytes.
        digest: SHA-256 over the snapshot's stored bytes and ``event_hash``.
    """

    stream: str
    version: int
    type: str
    schema: int
    data: dict[str, Any]
    meta: dict[str, Any]
    recorded_at: datetime
    event_hash: str = ""
    digest: str = ""
