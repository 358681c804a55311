"""The conformance tests of the ``"tracking"`` capability, mixed into ``StoreConformance``.

A consumer's position is recorded on its own (``save_tracking``) or in the transaction of
the events it led to (``append_tracked``); it only moves forward, and a refused append
records no position.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import pytest

from turnlog.eventstore import (
    NO_STREAM,
    ConcurrencyError,
    EventStore,
    InvalidEventError,
    NewEvent,
    RecordedEvent,
    Tracking,
    TrackingError,
)

__all__ = ["TrackingConformance"]


def _ev(**data: Any) -> NewEvent:
    return NewEvent("thing.happened", data)


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    async with aclosing(store.read_stream(stream)) as events:
        return [event async for event in events]


class TrackingConformance:
    """Every backend keeps consumers' positions, alone or atomically with an append."""

    async def test_store_declares_tracking(self, store: EventStore) -> None:
        """Every backend declares the tracking capability."""
        assert "tracking" in store.capabilities

    async def test_a_new_consumer_has_no_position(self, store: EventStore) -> None:
        """tracking_position is None for a consumer never recorded."""
        assert await store.tracking_position("projector") is None

    async def test_save_tracking_moves_forward(self, store: EventStore) -> None:
        """save_tracking records a position; a later one replaces it; consumers are separate."""
        await store.save_tracking("projector", 3)
        await store.save_tracking("projector", 7)
        await store.save_tracking("mailer", 1)
        assert (await store.tracking_position("projector"), await store.tracking_position("mailer")) == (7, 1)
        assert await store.head() == 0  # tracking is not an event

    @pytest.mark.parametrize("again", [7, 2])
    async def test_going_back_raises_with_the_facts(self, store: EventStore, again: int) -> None:
        """A position at or below the recorded one raises TrackingError naming all three facts."""
        await store.save_tracking("projector", 7)
        with pytest.raises(TrackingError) as info:
            await store.save_tracking("projector", again)
        assert (info.value.consumer, info.value.position, info.value.recorded) == ("projector", again, 7)
        assert await store.tracking_position("projector") == 7

    async def test_append_tracked_records_events_and_position_together(self, store: EventStore) -> None:
        """append_tracked stores the events and the consumer's position in one transaction."""
        results = await store.append_tracked(
            [("out-1", [_ev(n=1)], NO_STREAM), ("out-2", [_ev(n=2), _ev(n=3)], NO_STREAM)],
            Tracking("projector", 41),
        )
        assert [r.version for r in results] == [1, 2]
        assert list(results[1].events) == await _read(store, "out-2")
        assert await store.tracking_position("projector") == 41

    async def test_a_stale_tracked_append_stores_nothing(self, store: EventStore) -> None:
        """A tracked append whose position does not move forward stores no event."""
        await store.append_tracked([("out-1", [_ev(n=1)], NO_STREAM)], Tracking("projector", 5))
        with pytest.raises(TrackingError) as info:
            await store.append_tracked([("out-1", [_ev(n=2)], 1)], Tracking("projector", 5))
        assert info.value.recorded == 5
        assert await store.stream_version("out-1") == 1
        assert [e.data for e in await _read(store, "out-1")] == [{"n": 1}]

    async def test_a_failed_append_records_no_position(self, store: EventStore) -> None:
        """A tracked append refused for its expected version leaves the position where it was."""
        await store.append("out-1", [_ev(n=0)])
        await store.save_tracking("projector", 2)
        with pytest.raises(ConcurrencyError):
            await store.append_tracked([("out-1", [_ev(n=1)], NO_STREAM)], Tracking("projector", 3))
        with pytest.raises(InvalidEventError):
            await store.append_tracked([("out-1", [NewEvent("bad type", {})], 1)], Tracking("projector", 3))
        assert await store.tracking_position("projector") == 2
        assert await store.stream_version("out-1") == 1

    async def test_a_resent_tracked_append_returns_the_original(self, store: EventStore) -> None:
        """Re-sending a tracked append (a lost acknowledgement) returns its results, storing nothing."""
        entries = [("out-1", [_ev(n=1)], NO_STREAM)]
        first = await store.append_tracked(entries, Tracking("projector", 9))
        assert await store.append_tracked(entries, Tracking("projector", 9)) == first
        assert await store.head() == 1 and await store.tracking_position("projector") == 9

    async def test_bad_tracking_is_refused(self, store: EventStore) -> None:
        """A malformed consumer name or position is refused before anything is written."""
        for consumer, position in (("", 1), ("a\x00b", 1), ("ok", -1), ("ok", True), ("ok", "3")):
            with pytest.raises(InvalidEventError):
                await store.save_tracking(consumer, position)  # type: ignore[arg-type]
        with pytest.raises(InvalidEventError):
            await store.append_tracked([("out-1", [_ev()], NO_STREAM)], ("ok", 1))  # type: ignore[arg-type]
        assert await store.head() == 0
