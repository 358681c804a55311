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

from tests.conftest import pg_url_for
from turnlog.eventstore import (
    ANY,
    ConcurrencyError,
    NewEvent,
    PostgresEventStore,
    StoreError,
    Tracking,
    TrackingError,
)

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = [
    pytest.mark.postgres,
]


class CountingStore(PostgresEventStore):
    """Counts append statements, those whose gate was shut (no row back), and one-trip appends."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.statements = 0
        self.shut = 0
        self.one_trip = 0

    async def _store(self, conn: Any, query: str, params: Any, tips: Any, *, notify: bool = False) -> Any:
        row = await super()._store(conn, query, params, tips, notify=notify)
        self.statements += 1
        self.shut += row is None
        self.one_trip += notify
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
        assert store.one_trip == 6, "an append to known streams is not one round trip"
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


async def test_a_single_append_wakes_a_subscriber_that_does_not_poll(pg_url: str) -> None:
    """The notification sent in the append's round trip wakes a subscriber polling every minute."""
    async with CountingStore(pg_url) as writer, PostgresEventStore(pg_url, poll_interval=60.0) as reader:
        seen: list[int] = []
        listening = anyio.Event()

        async def subscribe() -> None:
            async for e in reader.subscribe():
                seen.append(e.version)
                listening.set()
                if len(seen) == 3:
                    return

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscribe)
                await writer.append("s", [event(0)], 0)
                await listening.wait()  # it listens before its first query
                await writer.append("s", [event(1)], 1)
                await writer.append("s", [event(2)], 2)
        assert seen == [1, 2, 3]
        assert writer.one_trip == 3


async def test_a_single_append_after_a_rollback_on_its_connection(pg_dsn: str, pg_schema: str) -> None:
    """psycopg deallocates the prepared append after a rollback; the next append prepares it again."""
    async with CountingStore(pg_url_for(pg_dsn, schema=pg_schema, pool_size="1")) as store:
        for _ in range(6):  # psycopg prepares a statement of its own from the fifth run on
            await store.stream_version("s")
        await store.append("s", [event(0)], 0)
        await store.save_tracking("c", 5)
        with pytest.raises(TrackingError):  # rolls back the tracked append's transaction
            await store.append_tracked([("t", [event(1)], 0)], Tracking("c", 3))
        assert (await store.append("s", [event(2)], 1)).version == 2
        await store.append("s", [event(3)], 2)
        assert store.one_trip == 3
        assert [e.version async for e in store.read_stream("s")] == [1, 2, 3]


@pytest.mark.parametrize(
    "settings",
    [{}, {"client_encoding": "LATIN1", "options": "-c standard_conforming_strings=off"}],
    ids=["defaults", "latin1-no-standard-strings"],
)
async def test_one_trip_appends_keep_every_value_as_sent(
    pg_dsn: str, pg_schema: str, settings: dict[str, str]
) -> None:
    """The one-trip append's text parameters are encoded by the store: quotes, backslashes and non-ASCII survive."""
    url = pg_url_for(pg_dsn, schema=pg_schema, **settings)
    streams = ["it's", "back\\slash", "naïve-流", "x'); DROP TABLE events; --"]
    data = {"text": "quote ' backslash \\ nul-free \u00e9 \U0001f600", "n": [1, 2.5, None]}
    async with CountingStore(url) as store:
        for stream in streams:
            for version in range(2):
                await store.append(stream, [NewEvent("test.appended", data, {"who": "o'neil \\"})], version)
        assert store.one_trip == 2 * len(streams)
        for stream in streams:
            events = [e async for e in store.read_stream(stream)]
            assert [(e.stream, e.version, e.data, e.meta) for e in events] == [
                (stream, v, data, {"who": "o'neil \\"}) for v in (1, 2)
            ]
        assert (await store.verify()).ok


async def test_a_group_with_a_value_beyond_its_column_fails_as_a_lone_append_does(pg_url: str) -> None:
    """A schema above 2**31 - 1 cannot go as a binary integer: the group falls back, the server refuses it."""
    async with CountingStore(pg_url) as store:
        await store.append_batch([("a", [event(0)], 0), ("b", [event(1)], 0)])
        too_big = NewEvent("test.appended", {"n": 2}, schema=2**31)
        with pytest.raises(StoreError, match="out of range for type integer"):
            await store.append("a", [too_big], 1)
        with pytest.raises(StoreError, match="integer out of range"):
            await store.append_batch([("a", [too_big], 1), ("b", [event(3)], 1)])
        assert (await store.stream_version("a"), await store.stream_version("b")) == (1, 1)
        results = await store.append_batch([("a", [event(4)], 1), ("b", [event(5)], 1)])
        assert [r.version for r in results] == [2, 2]
        assert store.one_trip == 2  # the first and the last batch (a failed statement counts for none)
        assert (await store.verify()).ok
