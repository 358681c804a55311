"""The conformance tests of what an append returns (``AppendResult.events``), mixed into ``StoreConformance``.

An append returns the events it recorded, equal to what a read of them returns, so a writer
never reads back what it just wrote. Every backend runs them through ``StoreConformance``.
"""

from __future__ import annotations

import copy
import pickle
from contextlib import aclosing
from typing import Any

import pytest

from turnlog.eventstore import (
    NO_STREAM,
    AppendResult,
    EventEncoder,
    EventStore,
    NewEvent,
    RecordedEvent,
    Upcasters,
)

__all__ = ["RecordedEventsConformance"]


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    async with aclosing(store.read_stream(stream)) as events:
        return [event async for event in events]


def _ev(**data: Any) -> NewEvent:
    return NewEvent("thing.happened", data, {"actor": "test"})


class RecordedEventsConformance:
    """An append returns the events it recorded, exactly as a read returns them."""

    async def test_append_returns_the_events_a_read_returns(self, store: EventStore) -> None:
        """append's result holds its RecordedEvents, equal to those read back."""
        await store.append("s-0", [_ev(n=0)])
        result = await store.append("s-1", [_ev(n=1), _ev(n=2, nested={"a": [1, 2.5, None]})])
        assert list(result.events) == await _read(store, "s-1")
        assert [e.position for e in result.events] == list(result.positions)
        assert result.events[-1].version == result.version

    async def test_append_batch_returns_each_entrys_events(self, store: EventStore) -> None:
        """Each append_batch result holds the events of its entry, also for one stream twice."""
        results = await store.append_batch(
            [("s-1", [_ev(n=1)], NO_STREAM), ("s-2", [_ev(n=2), _ev(n=3)], NO_STREAM), ("s-1", [_ev(n=4)], 1)]
        )
        one, two = await _read(store, "s-1"), await _read(store, "s-2")
        assert [list(r.events) for r in results] == [one[:1], two, one[1:]]

    async def test_append_encoded_returns_its_events(self, store: EventStore) -> None:
        """append_encoded's result holds its events, as a read returns them."""
        encoder = EventEncoder("stream.chunk", meta={"run_id": "r1"}, max_event_bytes=store.max_event_bytes)
        result = await store.append_encoded("run-1", [encoder.encode({"seq": n}) for n in (1, 2, 3)], 0)
        assert list(result.events) == await _read(store, "run-1")

    async def test_resent_append_returns_the_original_events(self, store: EventStore) -> None:
        """A re-sent append returns the events first recorded (same times and hashes)."""
        batch = [_ev(n=1), _ev(n=2)]
        first = await store.append("s-1", batch, expected_version=NO_STREAM)
        await store.append("s-2", [_ev(n=3)])
        again = await store.append("s-1", batch, expected_version=NO_STREAM)
        (batch_again,) = await store.append_batch([("s-1", batch, NO_STREAM)])
        assert again.events == first.events == batch_again.events
        assert list(again.events) == await _read(store, "s-1")

    async def test_recorded_events_are_upcast_as_a_read_is(self, store: EventStore) -> None:
        """Events appended at an old schema come back lifted, as a read returns them."""
        ups = Upcasters()
        ups.add("note.added", 1, lambda d: {"content": d["text"]})
        store.upcasters = ups
        result = await store.append("s-1", [NewEvent("note.added", {"text": "hi"}, schema=1)])
        (event,) = result.events
        assert (event.schema, event.data) == (2, {"content": "hi"})
        assert list(result.events) == await _read(store, "s-1")

    async def test_result_survives_copy_and_pickle(self, store: EventStore) -> None:
        """A result compares by positions and version, and a copy keeps its events."""
        result = await store.append("s-1", [_ev(n=1)])
        for twin in (copy.copy(result), copy.deepcopy(result), pickle.loads(pickle.dumps(result))):
            assert twin == result and twin.events == result.events
        assert result == AppendResult(result.positions, result.version)
        with pytest.raises(AttributeError):
            result.version = 9  # type: ignore[misc]
        with pytest.raises(AttributeError, match="without the events"):
            _ = AppendResult((1,), 1).events
