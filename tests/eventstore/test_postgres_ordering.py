"""Global ordering on PostgreSQL under real concurrency.

Writers run in separate processes or on separate connections; a reader tails the log by
position meanwhile. Positions must be strictly increasing, and a reader must never see
position k + 1 and only later find k (the skipped-event problem of sequence-based stores).
Positions may have gaps (an append that loses a race consumes its positions), so a reader
that never skipped is one whose positions, in the order it saw them, are exactly the stored
ones at the end.
"""

from __future__ import annotations

import random
import sys
import textwrap
from collections import Counter, defaultdict
from typing import Any

import anyio
import orjson
import pytest

from turnlog.eventstore import ANY, NewEvent, PostgresEventStore, RecordedEvent, VerifyReport

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
]

PROCESSES = 4
APPENDS_PER_PROCESS = 200
STREAMS = ("shared-0", "shared-1", "shared-2")

WORKER = textwrap.dedent(
    """
    import random, sys, time, anyio, orjson
    from turnlog.eventstore import ConcurrencyError, NewEvent
    from turnlog.eventstore import PostgresEventStore

    async def main(url, worker, count, streams):
        rng = random.Random(worker)
        acks, conflicts = [], 0
        async with PostgresEventStore(url, poll_interval=0.2) as store:
            for i in range(count):
                stream = rng.choice(streams)
                while True:
                    version = await store.stream_version(stream)
                    started = time.monotonic()
                    try:
                        result = await store.append(
                            stream, [NewEvent("test.appended", {"w": worker, "i": i})], version
                        )
                    except ConcurrencyError:
                        conflicts += 1
                        continue
                    break
                acks.append([stream, result.version, result.positions[0], i, started, time.monotonic()])
        print(orjson.dumps({"acks": acks, "conflicts": conflicts}).decode())

    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","))
    """
)


class Tail:
    """A reader tailing the log by position, checking it never skips one."""

    def __init__(self, store: PostgresEventStore) -> None:
        self.store = store
        self.seen: list[int] = []

    async def poll(self) -> None:
        after = self.seen[-1] if self.seen else 0
        async for event in self.store.read_all(after + 1):
            assert event.position > after, f"reader saw position {event.position} after {after}"
            self.seen.append(event.position)
            after = event.position

    async def run_until(self, total: int) -> None:
        while len(self.seen) < total:
            await self.poll()
            await anyio.sleep(0.002)


async def test_four_processes_with_expected_version_lose_nothing(pg_url: str) -> None:
    """4 processes x 200 appends to shared streams with retry: nothing lost, duplicated or skipped."""
    total = PROCESSES * APPENDS_PER_PROCESS
    async with PostgresEventStore(pg_url) as store:
        await store.head()  # create the schema before the writers race for it
        tail = Tail(store)
        outputs: dict[int, bytes] = {}

        async def worker(n: int) -> None:
            args = [sys.executable, "-c", WORKER, pg_url, str(n), str(APPENDS_PER_PROCESS), ",".join(STREAMS)]
            proc = await anyio.run_process(args, check=False)
            assert proc.returncode == 0, proc.stderr.decode()
            outputs[n] = proc.stdout

        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                for n in range(PROCESSES):
                    tg.start_soon(worker, n)
                tg.start_soon(tail.run_until, total)

        events = [event async for event in store.read_all()]
        reports = {n: orjson.loads(out) for n, out in outputs.items()}

    # nothing lost, nothing duplicated
    assert Counter((e.data["w"], e.data["i"]) for e in events) == Counter(
        (w, i) for w in range(PROCESSES) for i in range(APPENDS_PER_PROCESS)
    )
    # global positions strictly increasing, and exactly what the reader saw, in order
    stored_positions = [e.position for e in events]
    assert stored_positions == sorted(set(stored_positions)) == tail.seen
    # per-stream versions gapless, and in the same order as positions
    by_stream: dict[str, list[RecordedEvent]] = defaultdict(list)
    for event in events:
        by_stream[event.stream].append(event)
    for stream_events in by_stream.values():
        assert [e.version for e in stream_events] == list(range(1, len(stream_events) + 1))
    # every acknowledgement matches what is stored, and each writer's positions increase
    stored = {(e.data["w"], e.data["i"]): e for e in events}
    for w, report in reports.items():
        positions = [ack[2] for ack in report["acks"]]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
        for stream, version, position, i, _, _ in report["acks"]:
            event = stored[(w, i)]
            assert (event.stream, event.version, event.position) == (stream, version, position)
    _assert_commit_order([ack for report in reports.values() for ack in report["acks"]])
    assert sum(r["conflicts"] for r in reports.values()) > 0, (
        "the writers never raced; the test proves nothing"
    )
    assert (await _verify(pg_url)).ok


def _assert_commit_order(acks: list[list[Any]]) -> None:
    """An append started after another was acknowledged (any process) has a higher position."""
    by_ack = sorted(acks, key=lambda ack: ack[5])
    done, highest = 0, 0
    for ack in sorted(acks, key=lambda ack: ack[4]):
        while done < len(by_ack) and by_ack[done][5] < ack[4]:
            highest = max(highest, by_ack[done][2])
            done += 1
        assert ack[2] > highest, f"position {ack[2]} was given after position {highest} was acknowledged"


class SlowCommitStore(PostgresEventStore):
    """Holds every append transaction open for a random while before it commits."""

    def __init__(self, url: str, seed: int) -> None:
        super().__init__(url)
        self._rng = random.Random(seed)

    async def _insert(self, conn: Any, query: str, params: Any) -> tuple[Any, ...] | None:
        async with conn.transaction():
            row = await (await conn.execute(query, params)).fetchone()
            # the rows are inserted, the transaction stays open a while
            await anyio.sleep(self._rng.uniform(0.0, 0.015))
        return None if row is None else tuple(row)


async def test_readers_never_skip_with_long_write_transactions(pg_url: str) -> None:
    """Concurrent writers with long transactions: tailing readers and subscribers see k before k+1."""
    writers, appends = 4, 40
    stores = [SlowCommitStore(pg_url, seed) for seed in range(writers)]
    reader = PostgresEventStore(pg_url, poll_interval=0.1)
    expected = 0
    plans: list[list[list[tuple[str, int]]]] = []
    rng = random.Random(7)
    for w in range(writers):
        plan = []
        for _ in range(appends):
            # one to three streams per atomic append_batch, one to four events each
            entries = [(f"s-{w}-{rng.randrange(3)}", rng.randint(1, 4)) for _ in range(rng.randint(1, 3))]
            plan.append(entries)
            expected += sum(n for _, n in entries)
        plans.append(plan)
    try:
        await reader.head()
        tail = Tail(reader)
        subscribed: list[int] = []

        async def write(store: PostgresEventStore, plan: list[list[tuple[str, int]]]) -> None:
            for entries in plan:
                batch = [
                    (s, [NewEvent("test.appended", {"n": k}) for k in range(n)], ANY) for s, n in entries
                ]
                await store.append_batch(batch)

        async def subscribe() -> None:
            async for event in reader.subscribe():
                assert event.position > (subscribed[-1] if subscribed else 0)
                subscribed.append(event.position)
                if len(subscribed) == expected:
                    return

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscribe)
                tg.start_soon(tail.run_until, expected)
                for store, plan in zip(stores, plans, strict=True):
                    tg.start_soon(write, store, plan)
        stored = [event.position async for event in reader.read_all()]
        assert len(stored) == expected
        assert tail.seen == stored == subscribed
        assert (await reader.verify()).ok
    finally:
        for store in [*stores, reader]:
            await store.close()


async def _verify(url: str) -> VerifyReport:
    async with PostgresEventStore(url) as store:
        return await store.verify()


class HeldStore(PostgresEventStore):
    """Keeps its next append transaction open, rows inserted, until ``release`` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.inserted = anyio.Event()
        self.release = anyio.Event()

    async def _insert(self, conn: Any, query: str, params: Any) -> tuple[Any, ...] | None:
        async with conn.transaction():
            row = await (await conn.execute(query, params)).fetchone()
            self.inserted.set()
            await self.release.wait()
        return None if row is None else tuple(row)


async def positions_of(store: PostgresEventStore) -> list[int]:
    return [event.position async for event in store.read_all()]


async def test_a_later_commit_stays_hidden_until_the_older_transaction_ends(pg_url: str) -> None:
    """Open transaction A holds lower positions; B commits after it: readers see nothing, then A, B."""
    held = HeldStore(pg_url)
    other = PostgresEventStore(pg_url)
    reader = PostgresEventStore(pg_url, poll_interval=30.0)
    try:
        await reader.append("before", [NewEvent("test.appended", {})])
        results: dict[str, int] = {}
        subscribed: list[int] = []

        async def append_held() -> None:
            results["a"] = (await held.append("a", [NewEvent("test.appended", {"n": 1})])).positions[0]

        async def subscribe() -> None:
            async for event in reader.subscribe():
                subscribed.append(event.position)
                if len(subscribed) == 3:
                    return

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscribe)
                tg.start_soon(append_held)
                await held.inserted.wait()
                # B runs on its own connection and commits while A is still open: not blocked.
                results["b"] = (await other.append("b", [NewEvent("test.appended", {"n": 2})])).positions[0]
                assert results["b"] > 1
                # A reader (not the writer of B) does not see B yet: A's lower position may still appear.
                assert await positions_of(reader) == [1]
                assert await reader.head() == 1
                # B's writer sees its own append: its global read waits for A to end.
                own_read = anyio.Event()
                seen_by_b: list[int] = []

                async def read_own() -> None:
                    seen_by_b.extend(await positions_of(other))
                    own_read.set()

                tg.start_soon(read_own)
                await anyio.sleep(0.2)
                assert not own_read.is_set(), "the writer's read_all returned while an older append was open"
                assert subscribed == [1]
                held.release.set()
                await own_read.wait()
        assert results["a"] < results["b"]
        assert seen_by_b == [1, results["a"], results["b"]]
        assert await positions_of(reader) == [1, results["a"], results["b"]] == subscribed
    finally:
        held.release.set()
        for store in (held, other, reader):
            await store.close()


async def test_writers_on_other_connections_do_not_wait_for_an_open_append(pg_url: str) -> None:
    """While one append transaction stays open, appends to other streams keep committing."""
    held = HeldStore(pg_url)
    others = [PostgresEventStore(pg_url) for _ in range(3)]
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def append_held() -> None:
                    await held.append("held", [NewEvent("test.appended", {})])

                tg.start_soon(append_held)
                await held.inserted.wait()

                async def write(store: PostgresEventStore, n: int) -> None:
                    for i in range(10):
                        await store.append(f"s-{n}", [NewEvent("test.appended", {"i": i})], i)

                async with anyio.create_task_group() as writers:
                    for n, store in enumerate(others):
                        writers.start_soon(write, store, n)
                held.release.set()
        for n, store in enumerate(others):
            assert await store.stream_version(f"s-{n}") == 10
    finally:
        held.release.set()
        for store in (held, *others):
            await store.close()
