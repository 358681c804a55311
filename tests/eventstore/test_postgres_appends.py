"""PostgreSQL appends in one statement: a store object's known heads are a guess the server checks.

A store object remembers the head of each stream it appended to; its next append to that
stream is planned from it and sent as one gated statement. These tests make the guess wrong
in every way (another writer, a re-send, a wrong expected version, a stream new to this
object but not to the store) and check that the outcome is the one the two-statement path
gives, and that a shut gate consumes no position.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from turnlog.eventstore import ANY, ConcurrencyError, NewEvent, PostgresEventStore

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = [
    pytest.mark.postgres,
]


class CountingStore(PostgresEventStore):
    """Counts append statements, and those whose gate was shut (no row back)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.statements = 0
        self.shut = 0

    async def _insert(self, conn: Any, query: str, params: Any) -> tuple[Any, ...] | None:
        row = await super()._insert(conn, query, params)
        self.statements += 1
        self.shut += row is None
        return row


def event(n: int) -> NewEvent:
    return NewEvent("test.appended", {"n": n})


async def test_appends_to_a_known_stream_take_one_statement_each(pg_url: str) -> None:
    """Single events and a batch, on a new and then a known stream: no lookup, no shut gate."""
    async with CountingStore(pg_url) as store:
        for n in range(5):
            await store.append("s", [event(n)], n)
        await store.append_batch([("s", [event(5), event(6)], 5), ("t", [event(7)], 0)])
        assert (store.statements, store.shut) == (6, 0)
        assert [e.version async for e in store.read_stream("s")] == [1, 2, 3, 4, 5, 6, 7]
        assert (await store.verify()).ok


async def test_a_head_moved_by_another_writer_is_read_again(pg_url: str) -> None:
    """The guess is stale: ANY gets the next version, an exact version its ConcurrencyError."""
    async with CountingStore(pg_url) as store, PostgresEventStore(pg_url) as other:
        await store.append("s", [event(1)])
        await other.append("s", [event(2)])
        result = await store.append("s", [event(3)], ANY)
        assert result.version == 3
        await other.append("s", [event(4)])
        with pytest.raises(ConcurrencyError) as caught:
            await store.append("s", [event(5)], 3)
        assert caught.value.actual == 4
        assert (await store.append("s", [event(6)], 4)).version == 5
        positions = [e.position async for e in store.read_all()]
        assert positions == [1, 2, 3, 4, 5], "a shut gate took a position"
        assert (await store.verify()).ok


async def test_a_resend_returns_the_original_result(pg_url: str) -> None:
    """The same events again (ids stored, head known): the original positions, nothing stored."""
    async with CountingStore(pg_url) as store:
        events = [event(1)]
        first = await store.append("s", events)
        again = await store.append("s", events)
        assert again == first
        assert await store.stream_version("s") == 1
        assert store.shut == 1


async def test_a_stream_new_to_this_object_but_not_to_the_store(pg_url: str) -> None:
    """An unknown stream is guessed new; when another writer made it, the append still chains on."""
    async with CountingStore(pg_url) as store, PostgresEventStore(pg_url) as other:
        await other.append("s", [event(1), event(2)])
        result = await store.append("s", [event(3)])
        assert (result.positions, result.version) == ((3,), 3)
        await other.append("u", [event(4)])
        with pytest.raises(ConcurrencyError) as caught:
            await store.append("u", [event(5)], 0)
        assert caught.value.actual == 1
        assert store.shut == 2
        # Position 4 is the other object's: a global read shows it once every older transaction
        # of the server (other tests' too) has ended, which a subscriber waits for.
        seen: list[int] = []
        with anyio.fail_after(30):
            async for e in store.subscribe():
                seen.append(e.position)
                if len(seen) == 4:
                    break
        assert seen == [1, 2, 3, 4]
        assert (await store.verify()).ok
