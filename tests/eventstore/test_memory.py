"""The pure-Python in-memory backend runs the same conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from conformance import StoreConformance, collect, ev
from freezegun import freeze_time

from turnlog.eventstore import EventStore, MemoryEventStore, open_store


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        async with open_store("memory://") as store:
            yield store

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        assert isinstance(store, MemoryEventStore)
        position = store._streams[stream][version - 1]
        store._rows[position - 1] = replace(store._rows[position - 1], **{column: data})

    async def tamper_snapshot(self, store: EventStore, stream: str, version: int, data: bytes) -> None:
        assert isinstance(store, MemoryEventStore)
        for key, (schema, _, meta, recorded_at) in list(store._snapshots.items()):
            if key[0] == stream and key[2] == version:
                store._snapshots[key] = (schema, data, meta, recorded_at)


async def test_recorded_at_is_the_append_time() -> None:
    """recorded_at is the UTC time of the append, to the microsecond."""
    async with MemoryEventStore() as store:
        with freeze_time("2026-03-04 05:06:07.891011"):
            await store.append("s-1", [ev()])
        (event,) = await collect(store.read_all())
    assert event.recorded_at.isoformat() == "2026-03-04T05:06:07.891011+00:00"


async def test_read_data_cannot_change_the_store() -> None:
    """Mutating a returned payload does not change what the store holds."""
    async with MemoryEventStore() as store:
        await store.append("s-1", [ev(items=[1])])
        (first,) = await collect(store.read_all())
        first.data["items"].append(2)
        (again,) = await collect(store.read_all())
    assert again.data == {"items": [1]}
