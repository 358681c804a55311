"""The store wrapper ``turnlog ui`` serves through without ``--allow-writes``."""

from __future__ import annotations

import pytest

from turnlog.eventstore import MemoryEventStore, NewEvent, NewSnapshot, StoreError
from turnlog.tools.ui import ReadOnlyStore, WriteRefused


async def test_reads_pass_through_and_writes_are_refused() -> None:
    inner = MemoryEventStore()
    await inner.append("branch-1", [NewEvent("message.added", {"n": 1})])
    store = ReadOnlyStore(inner)
    assert [e.data async for e in store.read_stream("branch-1")] == [{"n": 1}]
    assert [e.position async for e in store.read_all()] == [1]
    assert [row[:4] for row in await store.read_rows(0, types=["message.added"])] == [
        (1, "branch-1", 1, "message.added")
    ]
    assert await store.head() == 1 and await store.stream_version("branch-1") == 1
    assert await store.list_streams() == [("branch-1", 1)]
    assert (await store.verify()).ok
    with pytest.raises(WriteRefused, match="read-only"):
        await store.append("branch-1", [NewEvent("message.added", {"n": 2})])
    with pytest.raises(WriteRefused):
        await store.append_batch([("branch-2", [NewEvent("message.added", {})], 0)])
    with pytest.raises(WriteRefused):
        await store.save_snapshot(NewSnapshot("branch-1", 1, "branch_state", {}))
    with pytest.raises(WriteRefused):
        await store.delete_snapshots()
    assert issubclass(WriteRefused, StoreError)
    assert await inner.head() == 1  # nothing reached the store
    assert "raw_copy" not in store.capabilities
