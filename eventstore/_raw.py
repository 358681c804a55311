"""The raw copy capability: events and snapshots exactly as stored, for copies between backends.

A backend that declares ``"raw_copy"`` in its ``capabilities`` implements ``RawCopy``: it
exports its log as stored rows (canonical bytes, hashes, positions and times, nothing decoded
or upcast) and imports such rows unchanged. ``migrate`` uses only this API, so it knows no
backend's tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ._errors import InvalidEventError

__all__ = ["RAW_PAGE", "RawCopy", "RawEvent", "RawSnapshot", "check_continuation"]

RAW_PAGE = 500
"""The default number of events ``raw_events`` returns."""


@dataclass(frozen=True, slots=True)
class RawEvent:
    """A stored event exactly as kept: canonical bytes, not the decoded payload.

    The field order is the order in which every backend selects its rows for a raw read
    and for ``verify``.
    """

    position: int
    id: str
    stream: str
    version: int
    type: str
    schema: int
    data: bytes
    meta: bytes
    recorded_at_us: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """A stored snapshot exactly as kept."""

    stream: str
    type: str
    version: int
    schema: int
    data: bytes
    meta: bytes
    recorded_at_us: int


class RawCopy(Protocol):
    """What a store declaring the ``"raw_copy"`` capability offers.

    Example::

        if "raw_copy" in source.capabilities and "raw_copy" in target.capabilities:
            while batch := await source.raw_events(target_head):
                await target.import_raw(batch)
                target_head = batch[-1].position
    """

    async def raw_events(self, after_position: int = 0, limit: int = RAW_PAGE) -> list[RawEvent]:
        """Up to ``limit`` stored events after ``after_position``, by position."""
        ...

    async def raw_snapshots(self) -> list[RawSnapshot]:
        """Every stored snapshot, ordered by stream, type and version."""
        ...

    async def import_raw(self, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot] = ()) -> None:
        """Store already-hashed events and snapshots unchanged, in one transaction.

        Raises:
            InvalidEventError: an event does not continue its stream (version and ``prev_hash``)
                or its position is not after the head; nothing is written.
        """
        ...


def check_continuation(event: RawEvent, tip: tuple[int, str], head: int) -> None:
    """Check that ``event`` may follow a stream at ``tip`` (version, hash) in a log at ``head``.

    Raises:
        InvalidEventError: the event would break the stream's versions or hash chain, or
            the log's position order.
    """
    version, last_hash = tip
    if event.position <= head:
        raise InvalidEventError(
            f"event {event.id} has position {event.position}, not after the head {head}", stream=event.stream
        )
    if event.version != version + 1 or event.prev_hash != last_hash:
        raise InvalidEventError(
            f"event {event.id} (version {event.version}) does not continue the stream at version {version}",
            stream=event.stream,
        )
