"""The backend conformance suite: every store backend subclasses ``StoreConformance``.

A subclass provides an async ``store`` fixture (an open, empty store, closed after the test)
and may implement ``tamper`` to overwrite stored bytes behind the store's back. Tests of
optional behaviour check ``store.capabilities`` and skip with a reason.

Example::

    class TestMyBackend(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            async with open_store(...) as store:
                yield store
"""

from __future__ import annotations

import sys
from contextlib import aclosing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import UUID

import anyio
import pytest
from encoded_conformance import EncodedAppendConformance
from recorded_conformance import RecordedEventsConformance
from redaction_conformance import RedactionConformance
from tracking_conformance import TrackingConformance

from turnlog.eventstore import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    ConcurrencyError,
    CorruptEventError,
    EventEncoder,
    EventStore,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    NewEvent,
    NewSnapshot,
    RawCopy,
    RawEvent,
    RecordedEvent,
    StoreError,
    Upcasters,
    encode_events,
    encode_json,
    event_hash,
    uuid7,
)

__all__ = ["StoreConformance", "collect", "ev"]


def ev(type_: str = "thing.happened", **data: Any) -> NewEvent:
    """A new event with ``data`` as keyword arguments."""
    return NewEvent(type_, data)


async def collect(iterator: Any) -> list[RecordedEvent]:
    """Every event of an async iterator, closing it."""
    async with aclosing(iterator) as events:
        return [event async for event in events]


async def versions(store: EventStore, stream: str, **kwargs: Any) -> list[int]:
    return [e.version for e in await collect(store.read_stream(stream, **kwargs))]


async def positions(store: EventStore, **kwargs: Any) -> list[int]:
    return [e.position for e in await collect(store.read_all(**kwargs))]


async def fill(store: EventStore, stream: str, count: int) -> list[int]:
    result = await store.append(stream, [ev(n=i) for i in range(1, count + 1)])
    return list(result.positions)


class StoreConformance(
    EncodedAppendConformance, RecordedEventsConformance, TrackingConformance, RedactionConformance
):
    """Guarantees every backend keeps (DESIGN.md §2), one short test each.

    The tests of ``append_encoded`` and of long appends come from ``EncodedAppendConformance``,
    those of the events an append returns from ``RecordedEventsConformance``, those of
    consumers' positions from ``TrackingConformance``.
    """

    shares_across_processes = True
    """False for a store that another process cannot open (e.g. a private in-memory one)."""

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        """Overwrite the stored ``data`` (or ``column``: ``meta``) bytes of one event behind the store's back."""
        pytest.skip("this backend gives the suite no raw access to stored bytes")

    async def tamper_snapshot(self, store: EventStore, stream: str, version: int, data: bytes) -> None:
        """Overwrite the stored ``data`` bytes of one snapshot behind the store's back."""
        pytest.skip("this backend gives the suite no raw access to stored snapshots")

    # ---------------------------------------------------------------- 1. atomic appends

    async def test_round_trip_keeps_every_field(self, store: EventStore) -> None:
        """An appended event reads back with the same id, type, schema, data and meta."""
        new = NewEvent(
            "message.added", {"a": [1, 2.5, None, True], "b": {"c": "d"}}, {"run_id": "r1"}, schema=3
        )
        result = await store.append("branch-1", [new])
        (got,) = await collect(store.read_stream("branch-1"))
        assert (got.id, got.stream, got.version, got.type, got.schema) == (
            new.id,
            "branch-1",
            1,
            "message.added",
            3,
        )
        assert (got.data, got.meta, got.position) == (dict(new.data), {"run_id": "r1"}, result.positions[0])
        assert got.recorded_at.tzinfo is not None and got.recorded_at.utcoffset() == UTC.utcoffset(None)
        assert got.prev_hash == "" and len(got.hash) == 64

    async def test_append_returns_positions_and_version(self, store: EventStore) -> None:
        """append returns the global positions in order and the stream's new version."""
        first = await store.append("s-1", [ev(), ev()])
        second = await store.append("s-2", [ev()])
        assert first.version == 2 and second.version == 1
        assert list(first.positions) + list(second.positions) == await positions(store)

    async def test_conflicting_batch_stores_nothing(self, store: EventStore) -> None:
        """A batch whose expected_version fails stores none of its events."""
        await fill(store, "s-1", 2)
        with pytest.raises(ConcurrencyError):
            await store.append("s-1", [ev(), ev(), ev()], expected_version=1)
        assert await store.stream_version("s-1") == 2 and await store.head() == 2

    async def test_append_batch_is_atomic_across_streams(self, store: EventStore) -> None:
        """One failing entry of append_batch leaves every stream untouched."""
        await fill(store, "s-2", 1)
        with pytest.raises(ConcurrencyError):
            await store.append_batch([("s-1", [ev()], NO_STREAM), ("s-2", [ev()], NO_STREAM)])
        assert await store.stream_version("s-1") == 0 and await store.head() == 1

    async def test_append_batch_returns_one_result_per_entry(self, store: EventStore) -> None:
        """append_batch writes every entry and reports each one's positions and version."""
        results = await store.append_batch([("s-1", [ev(), ev()], NO_STREAM), ("s-2", [ev()], ANY)])
        assert [r.version for r in results] == [2, 1]
        assert [p for r in results for p in r.positions] == await positions(store)

    async def test_append_batch_may_touch_one_stream_twice(self, store: EventStore) -> None:
        """Two entries for one stream apply in order, the second seeing the first."""
        results = await store.append_batch([("s-1", [ev()], NO_STREAM), ("s-1", [ev()], 1)])
        assert [r.version for r in results] == [1, 2]

    # ---------------------------------------------------------------- 2. expected_version

    async def test_no_stream_accepts_new_and_refuses_existing(self, store: EventStore) -> None:
        """NO_STREAM (== 0) succeeds on a new stream and fails once it exists."""
        assert NO_STREAM == 0
        await store.append("s-1", [ev()], expected_version=NO_STREAM)
        with pytest.raises(ConcurrencyError):
            await store.append("s-1", [ev()], expected_version=NO_STREAM)

    async def test_stream_exists_refuses_new_stream(self, store: EventStore) -> None:
        """STREAM_EXISTS fails on a stream without events and succeeds after one."""
        with pytest.raises(ConcurrencyError):
            await store.append("s-1", [ev()], expected_version=STREAM_EXISTS)
        await store.append("s-1", [ev()])
        assert (await store.append("s-1", [ev()], expected_version=STREAM_EXISTS)).version == 2

    async def test_any_always_appends(self, store: EventStore) -> None:
        """ANY appends whatever the stream's version."""
        for expected_version in (1, 2, 3):
            result = await store.append("s-1", [ev()], expected_version=ANY)
            assert result.version == expected_version

    async def test_exact_version_must_match(self, store: EventStore) -> None:
        """An int expected_version succeeds only at exactly that version."""
        await fill(store, "s-1", 3)
        for wrong in (2, 4):
            with pytest.raises(ConcurrencyError):
                await store.append("s-1", [ev()], expected_version=wrong)
        assert (await store.append("s-1", [ev()], expected_version=3)).version == 4

    async def test_concurrency_error_names_stream_expected_and_actual(self, store: EventStore) -> None:
        """ConcurrencyError carries the stream, the expected and the actual version."""
        await fill(store, "s-1", 2)
        with pytest.raises(ConcurrencyError) as info:
            await store.append("s-1", [ev()], expected_version=5)
        assert (info.value.stream, info.value.expected, info.value.actual) == ("s-1", 5, 2)
        assert "s-1" in str(info.value)

    async def test_concurrent_writers_lose_nothing(self, store: EventStore) -> None:
        """Tasks racing with expected_version and retry leave a gapless, duplicate-free stream."""

        async def writer(name: str) -> None:
            for i in range(10):
                while True:
                    version = await store.stream_version("shared")
                    try:
                        await store.append("shared", [ev(w=name, i=i)], expected_version=version)
                        break
                    except ConcurrencyError:
                        await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for name in "abcd":
                tg.start_soon(writer, name)
        events = await collect(store.read_stream("shared"))
        assert [e.version for e in events] == list(range(1, 41))
        assert len({(e.data["w"], e.data["i"]) for e in events}) == 40

    # ---------------------------------------------------------------- 3. idempotency

    async def test_resend_returns_original_result(self, store: EventStore) -> None:
        """Re-sending stored events returns the original positions and stores nothing."""
        batch = [ev(n=1), ev(n=2)]
        first = await store.append("s-1", batch, expected_version=NO_STREAM)
        await fill(store, "s-2", 1)
        again = await store.append("s-1", batch, expected_version=NO_STREAM)
        assert again == first and await store.head() == 3

    async def test_resend_is_checked_before_expected_version(self, store: EventStore) -> None:
        """A re-send succeeds even after the stream moved on (the lost-ack retry)."""
        batch = [ev()]
        first = await store.append("s-1", batch, expected_version=0)
        await store.append("s-1", [ev()])
        assert await store.append("s-1", batch, expected_version=0) == first

    async def test_resend_of_append_batch_returns_original_results(self, store: EventStore) -> None:
        """Re-sending a whole append_batch returns its original results."""
        entries = [("s-1", [ev()], NO_STREAM), ("s-2", [ev(), ev()], NO_STREAM)]
        assert await store.append_batch(entries) == await store.append_batch(entries)
        assert await store.head() == 3

    async def test_same_id_different_content_raises(self, store: EventStore) -> None:
        """A stored id with different content raises IdempotencyError."""
        original = ev(text="a")
        await store.append("s-1", [original])
        forged = NewEvent(original.type, {"text": "b"}, id=original.id)
        with pytest.raises(IdempotencyError) as info:
            await store.append("s-1", [forged])
        assert info.value.event_id == str(original.id)
        assert await store.head() == 1

    async def test_same_id_in_other_stream_raises(self, store: EventStore) -> None:
        """A stored id re-sent to another stream raises IdempotencyError."""
        original = ev()
        await store.append("s-1", [original])
        with pytest.raises(IdempotencyError):
            await store.append("s-2", [original])
        assert await store.stream_version("s-2") == 0

    async def test_batch_mixing_stored_and_new_ids_raises(self, store: EventStore) -> None:
        """A batch with some stored and some new ids raises and stores nothing."""
        stored = ev()
        await store.append("s-1", [stored])
        with pytest.raises(IdempotencyError):
            await store.append("s-1", [stored, ev()])
        assert await store.head() == 1

    # ---------------------------------------------------------------- 4. ordering

    async def test_positions_increase_in_commit_order(self, store: EventStore) -> None:
        """Positions grow strictly in the order appends were acknowledged."""
        acked: list[int] = []
        for i in range(20):
            acked.extend((await store.append(f"s-{i % 3}", [ev(i=i)])).positions)
        assert acked == sorted(acked) and len(set(acked)) == 20
        assert await positions(store) == acked

    async def test_a_tailing_reader_never_skips_a_position(self, store: EventStore) -> None:
        """Concurrent appenders and a reader tailing by position: it sees every event once, in order.

        Positions may have gaps on some backends; what every backend promises is that a reader
        reading "after the last position seen" ends up with exactly the stored positions.
        """
        seen: list[int] = []
        done = anyio.Event()

        async def tail() -> None:
            while True:
                finished = done.is_set()
                async for event in store.read_all((seen[-1] if seen else 0) + 1):
                    assert not seen or event.position > seen[-1]
                    seen.append(event.position)
                if finished:
                    return
                await anyio.sleep(0.001)

        async def write(n: int) -> None:
            for i in range(10):
                await store.append(f"s-{n}", [ev(i=i) for _ in range(1 + i % 3)])

        async with anyio.create_task_group() as tg:
            tg.start_soon(tail)
            async with anyio.create_task_group() as writers:
                for n in range(6):
                    writers.start_soon(write, n)
            done.set()
        stored = await positions(store)
        assert len(stored) == 6 * sum(1 + i % 3 for i in range(10))
        assert seen == stored == sorted(set(stored))

    async def test_positions_are_gapless_after_failures(self, store: EventStore) -> None:
        """Failed appends leave no hole in the global positions."""
        if "gapless_positions" not in store.capabilities:
            pytest.skip("this backend does not promise gapless positions")
        await fill(store, "s-1", 1)
        for bad in (
            lambda: store.append("s-1", [ev()], expected_version=0),
            lambda: store.append("", [ev()]),
        ):
            with pytest.raises(StoreError):
                await bad()
        await fill(store, "s-2", 1)
        assert await positions(store) == [1, 2]

    # ---------------------------------------------------------------- 6. reads

    async def test_read_stream_ranges_forwards(self, store: EventStore) -> None:
        """read_stream returns the inclusive version range in order, with limit."""
        await fill(store, "s-1", 10)
        assert await versions(store, "s-1", from_version=3, to_version=6) == [3, 4, 5, 6]
        assert await versions(store, "s-1", from_version=8, limit=5) == [8, 9, 10]
        assert await versions(store, "s-1", from_version=0, limit=2) == [1, 2]
        assert await versions(store, "s-1", from_version=11) == []

    async def test_read_stream_backwards(self, store: EventStore) -> None:
        """backwards=True reads descending; limit applies in reading order."""
        await fill(store, "s-1", 10)
        assert await versions(store, "s-1", backwards=True, limit=1) == [10]
        assert await versions(store, "s-1", to_version=4, backwards=True, limit=2) == [4, 3]
        assert await versions(store, "s-1", from_version=8, backwards=True) == [10, 9, 8]

    async def test_read_stream_is_isolated_and_empty_when_absent(self, store: EventStore) -> None:
        """A stream's read holds only its events; an unknown stream reads as empty."""
        await fill(store, "s-1", 2)
        await fill(store, "s-10", 3)
        assert await versions(store, "s-1") == [1, 2]
        assert await versions(store, "nope") == []

    async def test_read_all_ranges_and_limit(self, store: EventStore) -> None:
        """read_all returns the inclusive position range, forwards or backwards, with limit."""
        acked = await fill(store, "s-1", 6)
        assert await positions(store, from_position=acked[1], to_position=acked[3]) == acked[1:4]
        assert await positions(store, limit=2) == acked[:2]
        assert await positions(store, backwards=True, limit=2) == acked[::-1][:2]

    async def test_read_all_filters_by_type_and_stream_prefix(self, store: EventStore) -> None:
        """types and stream_prefix filter the whole-log read."""
        await store.append("branch-1", [ev("a.x"), ev("b.y")])
        await store.append("run-1", [ev("a.x")])
        await store.append("branch-2", [ev("c.z")])
        found = await collect(store.read_all(types=["a.x", "c.z"], stream_prefix="branch-"))
        assert [(e.stream, e.type) for e in found] == [("branch-1", "a.x"), ("branch-2", "c.z")]
        assert await collect(store.read_all(types=[])) == []

    async def test_read_all_pages_through_a_long_log(self, store: EventStore) -> None:
        """Long reads page internally and return every event exactly once, in order."""
        acked: list[int] = []
        for start in range(0, 1300, 100):
            acked.extend((await store.append("s-1", [ev(n=start + i) for i in range(100)])).positions)
        assert await positions(store) == acked
        assert await positions(store, backwards=True) == acked[::-1]
        assert await versions(store, "s-1", from_version=2, limit=1200) == list(range(2, 1202))
        assert await versions(store, "s-1", backwards=True, limit=700) == list(range(1300, 600, -1))

    async def test_head_stream_version_and_list_streams(self, store: EventStore) -> None:
        """head, stream_version and list_streams describe the log (0 and [] when empty)."""
        assert (await store.head(), await store.stream_version("s-1"), await store.list_streams()) == (
            0,
            0,
            [],
        )
        await fill(store, "run-1", 2)
        await fill(store, "branch-1", 3)
        assert await store.head() == 5 and await store.stream_version("branch-1") == 3
        assert await store.list_streams() == [("branch-1", 3), ("run-1", 2)]
        assert await store.list_streams("run-") == [("run-1", 2)]

    async def test_bad_read_bounds_are_refused(self, store: EventStore) -> None:
        """A negative or non-int bound or limit raises InvalidEventError."""
        for kwargs in ({"from_version": -1}, {"limit": "2"}, {"to_version": 1.5}):
            with pytest.raises(InvalidEventError):
                await collect(store.read_stream("s-1", **kwargs))

    # ---------------------------------------------------------------- subscriptions

    async def test_subscribe_catches_up_then_goes_live(self, store: EventStore) -> None:
        """A subscription delivers stored events from a position, then new ones."""
        await fill(store, "s-1", 3)
        got: list[int] = []
        with anyio.fail_after(10):
            async with aclosing(store.subscribe(2)) as events:
                async for event in events:
                    got.append(event.position)
                    if len(got) == 2:
                        await store.append("s-2", [ev()])
                    if len(got) == 3:
                        break
        assert got == [2, 3, 4]

    async def test_subscribe_from_empty_store_sees_appends_of_another_task(self, store: EventStore) -> None:
        """A subscriber on an empty store receives events another task appends."""
        got: list[RecordedEvent] = []

        async def consume(task_status: anyio.abc.TaskStatus[None]) -> None:
            async with aclosing(store.subscribe()) as events:
                task_status.started()
                async for event in events:
                    got.append(event)
                    if len(got) == 25:
                        return

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                await tg.start(consume)
                for i in range(25):
                    await store.append(f"s-{i % 2}", [ev(i=i)])
        assert [e.position for e in got] == list(range(1, 26))

    async def test_subscribe_filters_by_type_and_prefix(self, store: EventStore) -> None:
        """A filtered subscription delivers only matching events, in order."""
        await store.append("run-1", [ev("a.x"), ev("b.y")])
        await store.append("branch-1", [ev("a.x")])
        got = []
        with anyio.fail_after(10):
            async with aclosing(store.subscribe(types=["a.x"], stream_prefix="branch-")) as events:
                async for event in events:
                    got.append(event.stream)
                    if len(got) == 1:
                        await store.append("run-2", [ev("a.x")])
                        await store.append("branch-2", [ev("a.x")])
                    else:
                        break
        assert got == ["branch-1", "branch-2"]

    async def test_subscribe_stops_cleanly_when_cancelled(self, store: EventStore) -> None:
        """Cancelling a waiting subscriber ends it at once; the store stays usable."""
        with anyio.move_on_after(0.2) as scope:
            async with aclosing(store.subscribe()) as events:
                async for _ in events:
                    pytest.fail("nothing was appended")
        assert scope.cancelled_caught
        assert (await store.append("s-1", [ev()])).positions == (1,)

    async def test_subscriber_may_break_out_without_closing(self, store: EventStore) -> None:
        """Leaving a subscription loop with break needs no clean-up call; later calls work."""
        await fill(store, "s-1", 3)
        with anyio.fail_after(10):
            async for event in store.subscribe():
                if event.position == 2:
                    break
        assert await store.head() == 3

    async def test_subscribe_sees_appends_of_another_process(self, store: EventStore) -> None:
        """Live delivery includes events appended by another process."""
        if "cross_process_subscribe" not in store.capabilities or not self.shares_across_processes:
            pytest.skip("this store is not shared with other processes")
        script = (
            "import anyio, sys\n"
            "from turnlog.eventstore import NewEvent, open_store\n"
            "async def main():\n"
            "    async with open_store(sys.argv[1]) as store:\n"
            "        for i in range(3):\n"
            "            await store.append('other-1', [NewEvent('thing.happened', {'i': i})])\n"
            "anyio.run(main)\n"
        )
        got: list[RecordedEvent] = []
        with anyio.fail_after(30):
            async with aclosing(store.subscribe()) as events:
                await anyio.run_process([sys.executable, "-c", script, store.url], check=True)
                async for event in events:
                    got.append(event)
                    if len(got) == 3:
                        break
        assert [(e.stream, e.data["i"]) for e in got] == [("other-1", 0), ("other-1", 1), ("other-1", 2)]

    # ---------------------------------------------------------------- verify

    async def test_verify_clean_store(self, store: EventStore) -> None:
        """verify finds no problem in a store written only through the API."""
        await fill(store, "s-1", 3)
        await store.append_batch([("s-2", [ev()], NO_STREAM), ("s-1", [ev()], 3)])
        report = await store.verify()
        assert report.ok and (report.streams, report.events) == (2, 5)
        assert (await store.verify("s-2")).events == 1

    async def test_hash_chain_links_each_version(self, store: EventStore) -> None:
        """Each event's prev_hash is the hash of the previous version of its stream."""
        await fill(store, "s-1", 4)
        events = await collect(store.read_stream("s-1"))
        assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]

    async def test_verify_names_a_tampered_event(self, store: EventStore) -> None:
        """A changed payload breaks the chain and verify names its stream and version."""
        await fill(store, "s-1", 3)
        await fill(store, "s-2", 2)
        await self.tamper(store, "s-1", 2, b'{"n":99}')
        report = await store.verify()
        assert not report.ok
        assert {(p.stream, p.version) for p in report.problems} == {("s-1", 2)}
        assert (await store.verify("s-2")).ok

    async def test_undecodable_payload_raises_on_read(self, store: EventStore) -> None:
        """A stored payload that is not JSON raises CorruptEventError naming where it is."""
        await fill(store, "s-1", 2)
        await self.tamper(store, "s-1", 2, b"\xff not json")
        with pytest.raises(CorruptEventError) as info:
            await collect(store.read_stream("s-1"))
        assert (info.value.stream, info.value.version, info.value.position) == ("s-1", 2, 2)
        assert any(p.version == 2 for p in (await store.verify()).problems)

    # ---------------------------------------------------------------- snapshots

    async def test_snapshot_at_or_before_version(self, store: EventStore) -> None:
        """load_snapshot returns the newest snapshot at or before the asked version."""
        for version in (2, 5):
            await store.save_snapshot(
                NewSnapshot("s-1", version, "branch_state", {"v": version}, meta={"p": 1})
            )
        assert (await store.load_snapshot("s-1")).version == 5  # type: ignore[union-attr]
        snap = await store.load_snapshot("s-1", 4)
        assert snap is not None and (snap.version, snap.data, snap.meta) == (2, {"v": 2}, {"p": 1})
        assert await store.load_snapshot("s-1", 1) is None and await store.load_snapshot("s-2") is None

    async def test_snapshot_upsert_type_filter_and_delete(self, store: EventStore) -> None:
        """Saving the same stream, type and version replaces; delete reports how many went."""
        await store.save_snapshot(NewSnapshot("s-1", 3, "branch_state", {"old": True}))
        await store.save_snapshot(NewSnapshot("s-1", 3, "branch_state", {"old": False}))
        await store.save_snapshot(NewSnapshot("s-1", 4, "other_state", {}))
        await store.save_snapshot(NewSnapshot("s-2", 1, "branch_state", {}))
        snap = await store.load_snapshot("s-1", type="branch_state")
        assert snap is not None and snap.data == {"old": False}
        assert await store.delete_snapshots("s-1") == 2
        assert await store.load_snapshot("s-1") is None
        assert await store.delete_snapshots() == 1

    async def test_snapshot_is_bound_to_the_event_it_stands_at(self, store: EventStore) -> None:
        """A loaded snapshot carries the hash of the log's event at its version and its digest;
        the binding never shows in meta, and a caller cannot set it."""
        await fill(store, "s-1", 2)
        await store.save_snapshot(NewSnapshot("s-1", 2, "branch_state", {"n": 2}, meta={"p": 1}))
        snap = await store.load_snapshot("s-1")
        (event,) = await collect(store.read_stream("s-1", 2, 2))
        assert snap is not None and snap.meta == {"p": 1}
        assert snap.event_hash == event.hash and len(snap.digest) == 64
        with pytest.raises(InvalidEventError, match="turnlog_chain"):
            await store.save_snapshot(NewSnapshot("s-1", 2, "branch_state", {}, meta={"turnlog_chain": {}}))
        report = await store.verify()
        assert report.ok and report.snapshots == 1 and {"chains", "snapshots"} <= set(report.checks)

    async def test_altered_snapshot_is_ignored_and_reported(
        self, store: EventStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An edited snapshot is never returned (the one before it is, with a warning), and
        verify names it."""
        await fill(store, "s-1", 3)
        for version in (2, 3):
            await store.save_snapshot(NewSnapshot("s-1", version, "branch_state", {"n": version}))
        await self.tamper_snapshot(store, "s-1", 3, encode_json({"n": 1000}))
        with caplog.at_level("WARNING", logger="turnlog.eventstore"):
            snap = await store.load_snapshot("s-1")
        assert snap is not None and (snap.version, snap.data) == (2, {"n": 2})
        assert "ignoring snapshot" in caplog.text and "altered" in caplog.text
        report = await store.verify()
        assert not report.ok and report.events == 3 and report.snapshots == 2
        ((stream, version, what),) = [(p.stream, p.version, p.what) for p in report.problems]
        assert (stream, version) == ("s-1", 3) and "snapshot 'branch_state'" in what and "altered" in what
        stream_report = await store.verify("s-1")
        assert [p.version for p in stream_report.problems] == [3]

    async def test_snapshot_of_another_history_is_ignored(self, store: EventStore) -> None:
        """A snapshot that does not stand on the log's event at its version is not used."""
        await fill(store, "s-1", 1)
        await store.save_snapshot(NewSnapshot("s-1", 1, "branch_state", {"n": 1}))
        await store.save_snapshot(NewSnapshot("s-1", 2, "branch_state", {"n": 2}))  # ahead of the log
        assert (await store.load_snapshot("s-1", 1)) is not None
        await fill(store, "s-1", 1)  # now the log has a version 2 the snapshot never saw
        snap = await store.load_snapshot("s-1")
        assert snap is not None and snap.version == 1
        report = await store.verify()
        assert [(p.stream, p.version) for p in report.problems] == [("s-1", 2)]
        assert "hash differs" in report.problems[0].what

    async def test_bad_snapshot_is_refused(self, store: EventStore) -> None:
        """A snapshot with non-object data or a malformed type raises InvalidEventError."""
        for snap in (NewSnapshot("s-1", 1, "branch_state", [1]), NewSnapshot("s-1", 1, "", {})):  # type: ignore[arg-type]
            with pytest.raises(InvalidEventError):
                await store.save_snapshot(snap)
        assert await store.load_snapshot("s-1") is None

    # ---------------------------------------------------------------- stored rows (read_rows)

    async def test_read_rows_are_the_stored_events_as_tuples(self, store: EventStore) -> None:
        """read_rows gives (position, stream, version, type, schema, data, meta, recorded_at_us) by position."""
        await store.append("a", [ev(n=1), NewEvent("b.y", {"n": 2}, meta={"run_id": "r-1"})])
        await store.append("b", [ev(n=3)])
        rows = await store.read_rows(0, 100)
        recorded = await collect(store.read_all())
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        assert rows == [
            (r.position, r.stream, r.version, r.type, r.schema, encode_json(r.data), encode_json(r.meta),
             (r.recorded_at - epoch) // timedelta(microseconds=1))
            for r in recorded
        ]  # fmt: skip
        assert all(type(row) is tuple and type(row[5]) is bytes and type(row[6]) is bytes for row in rows)
        assert rows[1][6] == encode_json({"run_id": "r-1"}) and rows[0][6] == b"{}"

    async def test_read_rows_filter_bound_and_page(self, store: EventStore) -> None:
        """types= filters in the store, to_position bounds, limit pages; paging loses and repeats nothing."""
        recorded = await self._mixed_log(store)
        wanted = [r.position for r in recorded if r.type in ("a.x", "c.z")]
        assert [row[0] for row in await store.read_rows(0, 100, types=["c.z", "a.x"])] == wanted
        assert [row[3] for row in await store.read_rows(0, 100, types="b.y")] == ["b.y"] * 4
        assert await store.read_rows(0, 100, types=[]) == []
        assert await store.read_rows(0, 100, types=["no.such"]) == []
        middle = recorded[5].position
        assert [row[0] for row in await store.read_rows(0, 100, to_position=middle)] == [
            r.position for r in recorded[:6]
        ]
        bounded = await store.read_rows(recorded[1].position, 100, types=["b.y"], to_position=middle)
        assert [row[0] for row in bounded] == [r.position for r in recorded[2:6] if r.type == "b.y"]
        assert await store.read_rows(middle, 100, to_position=middle) == []
        assert len(await store.read_rows(0, 3)) == 3 and await store.read_rows(0, 0) == []
        whole = await store.read_rows(0, 100, types=["a.x", "b.y"])
        for size in (1, 2, 3):
            paged: list[Any] = []
            while page := await store.read_rows(paged[-1][0] if paged else 0, size, types=["a.x", "b.y"]):
                assert len(page) <= size
                paged.extend(page)
            assert paged == whole
        last = recorded[-1].position
        assert await store.read_rows(last, 100) == [] and len(await store.read_rows(last - 1, 100)) == 1

    async def test_read_rows_refuses_bad_bounds(self, store: EventStore) -> None:
        """A bound or limit that is not an int >= 0 raises InvalidEventError naming it."""
        for kwargs, name in (
            ({"after_position": -1}, "after_position"),
            ({"to_position": -1}, "to_position"),
            ({"to_position": True}, "to_position"),
            ({"limit": None}, "limit"),
            ({"limit": 1.5}, "limit"),
        ):
            with pytest.raises(InvalidEventError, match=name):
                await store.read_rows(**kwargs)

    async def test_read_rows_are_not_upcast(self, store: EventStore) -> None:
        """An event stored under an old schema comes back with that schema and its stored bytes."""
        await store.append("s-1", [NewEvent("message.added", {"text": "hi"}, schema=1)])
        ups = Upcasters()
        ups.add("message.added", 1, lambda d: {"content": d["text"]})
        store.upcasters = ups
        ((_, _, _, _, schema, data, _, _),) = await store.read_rows(0, types=["message.added"])
        assert (schema, data) == (1, encode_json({"text": "hi"}))

    # ---------------------------------------------------------------- raw copy (optional)

    def raw(self, store: EventStore) -> RawCopy:
        if "raw_copy" not in store.capabilities:
            pytest.skip("this store does not declare raw_copy")
        return cast(RawCopy, store)

    async def test_raw_events_are_the_stored_events_by_position(self, store: EventStore) -> None:
        """raw_events pages through the log by position with the ids, versions and hashes read_all gives."""
        raw = self.raw(store)
        await store.append("a", [ev(n=1), ev(n=2)])
        await store.append("b", [ev(n=3)])
        await store.append("a", [ev(n=4)])
        events = await raw.raw_events(0, 100)
        recorded = await collect(store.read_all())
        assert [(e.position, e.id, e.stream, e.version, e.prev_hash, e.hash) for e in events] == [
            (r.position, str(r.id), r.stream, r.version, r.prev_hash, r.hash) for r in recorded
        ]
        assert [e.position for e in await raw.raw_events(1, 2)] == [2, 3]
        assert events[0].data == encode_json({"n": 1}) and events[0].meta == b"{}"

    async def _mixed_log(self, store: EventStore) -> list[RecordedEvent]:
        """Eleven events of three types over three streams, as ``read_all`` returns them."""
        kinds = ["a.x", "b.y", "a.x", "c.z", "b.y", "b.y", "a.x", "c.z", "a.x", "b.y", "c.z"]
        for index, kind in enumerate(kinds):
            await store.append(f"s-{index % 3}", [ev(kind, n=index)])
        return await collect(store.read_all())

    async def test_raw_events_filter_by_type_in_the_store(self, store: EventStore) -> None:
        """types= keeps only those types, by position, exactly as stored; a string is one type."""
        raw = self.raw(store)
        recorded = await self._mixed_log(store)
        wanted = [r for r in recorded if r.type in ("a.x", "c.z")]
        events = await raw.raw_events(0, 100, types=["c.z", "a.x"])
        assert [(e.position, e.id, e.type, e.stream, e.version, e.hash) for e in events] == [
            (r.position, str(r.id), r.type, r.stream, r.version, r.hash) for r in wanted
        ]
        assert [e.data for e in events] == [encode_json(r.data) for r in wanted]
        assert [e.position for e in await raw.raw_events(0, 100, types="b.y")] == [
            r.position for r in recorded if r.type == "b.y"
        ]
        assert await raw.raw_events(0, 100, types=iter(["a.x"])) == [e for e in events if e.type == "a.x"]
        assert await raw.raw_events(0, 100, types=[]) == []
        assert await raw.raw_events(0, 100, types=["no.such"]) == []

    async def test_raw_events_bounds_limit_and_paging(self, store: EventStore) -> None:
        """to_position bounds the read (inclusive), limit the page; paging on loses and repeats nothing."""
        raw = self.raw(store)
        recorded = await self._mixed_log(store)
        middle = recorded[5].position
        assert [e.position for e in await raw.raw_events(0, 100, to_position=middle)] == [
            r.position for r in recorded[:6]
        ]
        bounded = await raw.raw_events(recorded[1].position, 100, types=["b.y"], to_position=middle)
        assert [e.position for e in bounded] == [r.position for r in recorded[2:6] if r.type == "b.y"]
        assert await raw.raw_events(middle, 100, to_position=middle) == []
        assert len(await raw.raw_events(0, 3)) == 3
        assert await raw.raw_events(0, 0) == []
        whole = await raw.raw_events(0, 100, types=["a.x", "b.y"])
        for size in (1, 2, 3):
            paged: list[RawEvent] = []
            while page := await raw.raw_events(
                paged[-1].position if paged else 0, size, types=["a.x", "b.y"]
            ):
                assert len(page) <= size
                paged.extend(page)
            assert paged == whole
        last = recorded[-1].position
        assert await raw.raw_events(last, 100) == [] and len(await raw.raw_events(last - 1, 100)) == 1

    async def test_raw_events_refuses_bad_bounds(self, store: EventStore) -> None:
        """A bound or limit that is not an int >= 0 raises InvalidEventError naming it."""
        raw = self.raw(store)
        for kwargs, name in (
            ({"after_position": -1}, "after_position"),
            ({"to_position": -1}, "to_position"),
            ({"to_position": True}, "to_position"),
            ({"limit": None}, "limit"),
            ({"limit": 1.5}, "limit"),
        ):
            with pytest.raises(InvalidEventError, match=name):
                await raw.raw_events(**kwargs)

    async def test_raw_events_are_not_upcast(self, store: EventStore) -> None:
        """An event stored under an old schema comes back with that schema and its stored bytes."""
        raw = self.raw(store)
        await store.append("s-1", [NewEvent("message.added", {"text": "hi"}, schema=1)])
        ups = Upcasters()
        ups.add("message.added", 1, lambda d: {"content": d["text"]})
        store.upcasters = ups
        (event,) = await raw.raw_events(0, types=["message.added"])
        assert (event.schema, event.data) == (1, encode_json({"text": "hi"}))
        (read,) = await collect(store.read_all())
        assert (read.schema, read.data) == (2, {"content": "hi"})

    async def test_import_raw_continues_chains_and_refuses_a_break(self, store: EventStore) -> None:
        """An imported event that continues its stream is stored as is; one that breaks it stores nothing."""
        raw = self.raw(store)
        await store.append("a", [ev(n=1)])
        (first,) = await raw.raw_events(0)
        data, eid = encode_json({"n": 2}), str(uuid7())
        digest = event_hash(first.hash, eid, "a", 2, "thing.happened", 1, data, b"{}", 7)
        follower = RawEvent(5, eid, "a", 2, "thing.happened", 1, data, b"{}", 7, first.hash, digest)
        broken = replace(follower, position=9, version=3, id=str(uuid7()))
        with pytest.raises(InvalidEventError, match="does not continue"):
            await raw.import_raw([follower, broken])
        assert await store.head() == 1
        await raw.import_raw([follower])
        assert await raw.raw_events(1) == [follower]
        assert (await store.verify()).ok
        assert (await collect(store.read_stream("a")))[-1].data == {"n": 2}

    async def test_import_raw_refuses_what_append_refuses(self, store: EventStore) -> None:
        """A raw event with a non-canonical id or a bad stream name is refused like an append."""
        raw = self.raw(store)
        data = encode_json({"n": 1})
        for eid, stream in (("payment-42", "a"), (str(uuid7()).upper(), "a"), (str(uuid7()), "a\ud800")):
            digest = event_hash("", eid, "a", 1, "thing.happened", 1, data, b"{}", 7)
            with pytest.raises(InvalidEventError):
                await raw.import_raw(
                    [RawEvent(1, eid, stream, 1, "thing.happened", 1, data, b"{}", 7, "", digest)]
                )
        assert await store.head() == 0

    async def test_raw_snapshots_round_trip(self, store: EventStore) -> None:
        """raw_snapshots returns what was saved; import_raw of a snapshot makes it loadable if intact."""
        raw = self.raw(store)
        await store.save_snapshot(NewSnapshot("a", 1, "state", {"v": 1}))
        (saved,) = await raw.raw_snapshots()
        assert (saved.stream, saved.type, saved.version, saved.data) == (
            "a",
            "state",
            1,
            encode_json({"v": 1}),
        )
        await store.delete_snapshots()
        await raw.import_raw([], [saved])
        loaded = await store.load_snapshot("a")
        assert loaded is not None and (loaded.version, loaded.data) == (1, {"v": 1})
        # bytes edited on the way are not trusted: the digest no longer matches
        await raw.import_raw([], [replace(saved, data=encode_json({"v": 2}))])
        assert await store.load_snapshot("a") is None

    # ---------------------------------------------------------------- 7. schemas

    async def test_old_event_schema_is_upcast_on_read(self, store: EventStore) -> None:
        """Events stored at an old schema read back lifted to the newest one."""
        await store.append("s-1", [NewEvent("message.added", {"text": "hi"}, schema=1)])
        ups = Upcasters()
        ups.add("message.added", 1, lambda d: {"content": d["text"]})
        ups.add("message.added", 2, lambda d: {**d, "sender": "user"})
        store.upcasters = ups  # newer code reading what older code wrote
        (got,) = await collect(store.read_all())
        assert (got.schema, got.data) == (3, {"content": "hi", "sender": "user"})
        assert (await store.verify()).ok  # stored bytes are never rewritten

    async def test_old_snapshot_schema_is_upcast_on_read(self, store: EventStore) -> None:
        """Snapshots stored at an old schema load lifted to the newest one."""
        await store.save_snapshot(NewSnapshot("s-1", 1, "branch_state", {"n": 1}, schema=1))
        ups = Upcasters()
        ups.add("branch_state", 1, lambda d: {**d, "m": 2})
        store.upcasters = ups
        snap = await store.load_snapshot("s-1")
        assert snap is not None and (snap.schema, snap.data) == (2, {"n": 1, "m": 2})

    # ---------------------------------------------------------------- 8. bad input

    @pytest.mark.parametrize(
        ("stream", "events", "expected", "error"),
        [
            ("s-1", [NewEvent("a.b", [1, 2])], ANY, InvalidEventError),  # type: ignore[arg-type]
            ("s-1", [NewEvent("a.b", {"x": object()})], ANY, InvalidEventError),
            ("s-1", [NewEvent("a.b", {}, meta="m")], ANY, InvalidEventError),  # type: ignore[arg-type]
            ("s-1", [NewEvent("", {})], ANY, InvalidEventError),
            ("s-1", [NewEvent("bad type!", {})], ANY, InvalidEventError),
            ("s-1", [NewEvent("a..b", {})], ANY, InvalidEventError),
            ("s-1", [NewEvent("a.b", {}, schema=0)], ANY, InvalidEventError),
            ("s-1", [ev(), "not an event"], ANY, InvalidEventError),
            ("s-1", ev(), ANY, InvalidEventError),
            ("s-1", [], ANY, InvalidEventError),
            ("s-1", [ev()], "1", InvalidEventError),
            ("s-1", [ev()], None, InvalidEventError),
            ("s-1", [ev()], 1.0, InvalidEventError),
            ("s-1", [ev()], True, InvalidEventError),
            ("s-1", [ev()], -1, InvalidEventError),
            ("", [ev()], ANY, InvalidEventError),
            ("x" * 201, [ev()], ANY, InvalidEventError),
            ("s\n1", [ev()], ANY, InvalidEventError),
            (7, [ev()], ANY, InvalidEventError),
        ],
    )
    async def test_bad_input_is_refused_before_writing(
        self, store: EventStore, stream: Any, events: Any, expected: Any, error: type[Exception]
    ) -> None:
        """Malformed appends raise a clear error and write nothing."""
        await store.append("s-1", [ev()])
        with pytest.raises(error):
            await store.append(stream, events, expected_version=expected)
        assert await store.head() == 1

    async def test_bad_entry_of_append_batch_stores_nothing(self, store: EventStore) -> None:
        """A malformed entry anywhere in append_batch rejects the whole call."""
        for entries in ([("s-1", [ev()], ANY), ("s-2", [NewEvent("", {})], ANY)], [], [("s-1", [ev()])]):
            with pytest.raises(InvalidEventError):
                await store.append_batch(entries)  # type: ignore[arg-type]
        shared = ev()
        with pytest.raises(InvalidEventError):
            await store.append_batch([("s-1", [shared], ANY), ("s-2", [shared], ANY)])
        assert await store.head() == 0

    async def test_oversized_event_is_refused(self, store: EventStore) -> None:
        """An event over max_event_bytes raises EventTooLarge with its size and the limit."""
        limit = store.max_event_bytes
        with pytest.raises(EventTooLarge) as info:
            await store.append("s-1", [ev(blob="x" * limit)])
        assert info.value.limit == limit and info.value.size > limit
        assert await store.head() == 0

    async def test_payload_just_under_the_limit_round_trips(self, store: EventStore) -> None:
        """An event just under max_event_bytes is stored and read back intact."""
        overhead = len(b'{"blob":""}') + len(b"{}")
        blob = "y" * (store.max_event_bytes - overhead)
        await store.append("s-1", [ev(blob=blob)])
        (got,) = await collect(store.read_stream("s-1"))
        assert got.data["blob"] == blob
        assert (await store.verify()).ok

    async def test_unicode_payloads_round_trip(self, store: EventStore) -> None:
        """Emoji, CJK, combining marks and escapes in data and stream names survive."""
        data = {"text": 'héllo 🌍 漢字 e\u0301 \u0000 "q" \\', "键": ["ß", "🧪"], "nested": {"ü": None}}
        await store.append("branch-ñ-漢", [NewEvent("message.added", data, {"actor": "José"})])
        (got,) = await collect(store.read_stream("branch-ñ-漢"))
        assert (got.data, got.meta) == (data, {"actor": "José"})

    # ---------------------------------------------------------------- 8b. ids, numbers and names

    _SOME_ID = UUID("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")

    @pytest.mark.parametrize(
        "bad_id",
        [
            "payment-42",
            "",
            str(_SOME_ID).upper(),
            "{" + str(_SOME_ID) + "}",
            _SOME_ID.hex,
            _SOME_ID.urn,
            " " + str(_SOME_ID),
            str(_SOME_ID) + "\n",
            _SOME_ID.int,
            _SOME_ID.bytes,
            None,
        ],
    )
    async def test_event_ids_must_be_canonical_uuids(self, store: EventStore, bad_id: Any) -> None:
        """Any id but a UUID (or its canonical lower-case text) is refused the same way on every
        backend, by append, append_batch and the encoders, before anything is written."""
        with pytest.raises(InvalidEventError, match="event id") as info:
            await store.append("s-1", [ev(), NewEvent("a.b", {}, id=bad_id)])
        assert info.value.index == 1
        with pytest.raises(InvalidEventError, match="event id"):
            await store.append_batch([("s-1", [NewEvent("a.b", {}, id=bad_id)], ANY)])
        with pytest.raises(InvalidEventError, match="event id"):
            encode_events([NewEvent("a.b", {}, id=bad_id)])
        if not isinstance(bad_id, int | None):  # EventEncoder takes an int as a UUID's value
            with pytest.raises(InvalidEventError, match="event id"):
                EventEncoder("a.b").encode({}, id=bad_id)
        assert await store.head() == 0
        assert (await store.verify()).ok

    async def test_one_uuid_is_one_idempotency_key(self, store: EventStore) -> None:
        """A UUID and its canonical text are the same id; no other spelling reaches the store."""
        first = NewEvent("a.b", {"n": 1}, id=self._SOME_ID)
        result = await store.append("s-1", [first])
        again = NewEvent("a.b", {"n": 1}, id=str(self._SOME_ID))  # type: ignore[arg-type]
        assert await store.append("s-1", [again]) == result
        for spelling in (str(self._SOME_ID).upper(), self._SOME_ID.hex, self._SOME_ID.urn):
            with pytest.raises(InvalidEventError):
                await store.append("s-1", [NewEvent("a.b", {"n": 1}, id=spelling)])  # type: ignore[arg-type]
        assert [e.id for e in await collect(store.read_all())] == [self._SOME_ID]

    @pytest.mark.parametrize(
        ("data", "meta", "where"),
        [
            ({"x": float("nan")}, None, "data['x']"),
            ({"x": float("inf")}, None, "data['x']"),
            ({"x": [1.5, {"y": -float("inf")}]}, None, "data['x'][1]['y']"),
            ({"x": None}, {"score": float("nan")}, "meta['score']"),
            ({"x": (1, float("nan"))}, None, "data['x'][1]"),
        ],
    )
    async def test_nan_and_infinity_are_refused(
        self, store: EventStore, data: dict[str, Any], meta: dict[str, Any] | None, where: str
    ) -> None:
        """NaN and infinities (which JSON cannot hold) are refused, naming where, not stored as null."""
        with pytest.raises(InvalidEventError) as info:
            await store.append("s-1", [NewEvent("a.b", data, meta)])
        assert where in str(info.value)
        with pytest.raises(InvalidEventError):
            await store.append_batch([("s-1", [NewEvent("a.b", data, meta)], ANY)])
        with pytest.raises(InvalidEventError):
            encode_events([NewEvent("a.b", data, meta)])
        with pytest.raises(InvalidEventError):
            EventEncoder("a.b", meta=meta).encode(data)
        with pytest.raises(InvalidEventError):
            await store.save_snapshot(NewSnapshot("s-1", 0, "branch_state", data, meta))
        assert await store.head() == 0
        assert await store.load_snapshot("s-1") is None

    async def test_nulls_and_finite_floats_still_round_trip(self, store: EventStore) -> None:
        """The NaN check leaves real nulls and extreme finite floats alone."""
        data = {"a": None, "b": [None, 1e308, -1e-308, 0.1], "null": "null"}
        await store.append("s-1", [NewEvent("a.b", data, {"m": None})])
        (got,) = await collect(store.read_stream("s-1"))
        assert (got.data, got.meta) == (data, {"m": None})

    async def test_a_meta_shared_by_a_batch_is_stored_with_each_event(self, store: EventStore) -> None:
        """Events given one meta object each store it; a different meta after it is its own."""
        shared = {"actor": "me", "session_id": "session-1"}
        other = {"actor": "you"}
        metas = [shared, shared, None, shared, other, other, shared]
        await store.append("s-1", [NewEvent("a.b", {"n": n}, meta) for n, meta in enumerate(metas)])
        got = await collect(store.read_stream("s-1"))
        assert [e.meta for e in got] == [meta or {} for meta in metas]

    async def test_a_shared_meta_holding_nan_is_refused_at_its_first_event(self, store: EventStore) -> None:
        """A meta shared by every event of a batch is checked: a NaN in it refuses the batch."""
        shared = {"score": None, "weight": float("nan")}
        with pytest.raises(InvalidEventError) as info:
            await store.append("s-1", [NewEvent("a.b", {"n": n}, shared) for n in range(3)])
        assert "meta['weight']" in str(info.value)
        assert await store.head() == 0

    async def test_stream_name_with_a_lone_surrogate_is_refused(self, store: EventStore) -> None:
        """A stream name that is not valid Unicode text is refused by appends and reads alike."""
        bad = "branch-\ud800"
        with pytest.raises(InvalidEventError, match="stream name"):
            await store.append(bad, [ev()])
        with pytest.raises(InvalidEventError, match="stream name"):
            await store.append_encoded(bad, encode_events([ev()]))
        with pytest.raises(InvalidEventError, match="stream name"):
            await store.save_snapshot(NewSnapshot(bad, 0, "branch_state", {}))
        for read in (
            lambda: collect(store.read_stream(bad)),
            lambda: store.stream_version(bad),
            lambda: store.load_snapshot(bad),
            lambda: store.verify(bad),
        ):
            with pytest.raises(InvalidEventError, match="stream name"):
                await read()
        with pytest.raises(InvalidEventError):
            await store.list_streams(prefix=bad)
        with pytest.raises(InvalidEventError):
            await collect(store.read_all(stream_prefix=bad))
        with pytest.raises(InvalidEventError):
            await collect(store.read_all(types=["a.\ud800"]))
        assert await store.head() == 0

    # ---------------------------------------------------------------- lifecycle

    async def test_closed_store_refuses_calls(self, store: EventStore) -> None:
        """Every call on a closed store raises StoreError; close is idempotent."""
        await store.append("s-1", [ev()])
        await store.close()
        await store.close()
        calls = [
            lambda: store.append("s-1", [ev()]),
            lambda: store.head(),
            lambda: store.stream_version("s-1"),
            lambda: collect(store.read_stream("s-1")),
            lambda: collect(store.read_all()),
            lambda: store.verify(),
            lambda: store.list_streams(),
            lambda: store.load_snapshot("s-1"),
            lambda: store.save_snapshot(NewSnapshot("s-1", 1, "branch_state", {})),
            lambda: store.delete_snapshots(),
            lambda: store.append_batch([("s-1", [ev()], ANY)]),
            lambda: store.append_encoded("s-1", encode_events([ev()])),
            lambda: collect(store.subscribe()),
        ]
        for call in calls:
            with pytest.raises(StoreError, match="closed"):
                await call()
