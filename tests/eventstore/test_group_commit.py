"""Group commit: concurrent appends of one process share a transaction, each keeps its own outcome.

``GroupCommit`` alone (with a fake commit), then the two backends that use it: SQLite at
``durability="full"`` (every append goes through it) and PostgreSQL (every append does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from conformance import StoreConformance, ev

from turnlog.eventstore import (
    AppendResult,
    ConcurrencyError,
    EventStore,
    IdempotencyError,
    NewEvent,
    PostgresEventStore,
    SQLiteEventStore,
    StoreError,
    StoreUnavailable,
    open_store,
)
from turnlog.eventstore._group_commit import GroupCommit

# -- GroupCommit alone ------------------------------------------------------------------------


class FakeBackend:
    """Commits groups after a checkpoint; a unit that is an exception fails alone."""

    def __init__(self) -> None:
        self.groups: list[list[Any]] = []
        self.gate = anyio.Event()
        self.fail_with: str | None = None

    async def commit(self, units: list[Any]) -> Sequence[Any]:
        self.groups.append(list(units))
        await self.gate.wait()
        if self.fail_with is not None:
            raise StoreUnavailable(self.fail_with)
        return [unit if isinstance(unit, BaseException) else unit * 10 for unit in units]


async def test_callers_queued_behind_a_commit_share_the_next_one() -> None:
    """While one commit runs, every caller that arrives joins one group; each gets its own result."""
    backend = FakeBackend()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    results: dict[int, int] = {}

    async def call(n: int) -> None:
        results[n] = await group.submit(n)

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(call, n)
        await anyio.wait_all_tasks_blocked()
        backend.gate.set()
    assert results == {n: n * 10 for n in range(20)}
    assert backend.groups == [[0], list(range(1, 20))]
    assert (group.groups, group.units) == (2, 20)


async def test_callers_woken_by_a_group_share_the_next_commit() -> None:
    """Callers that append again as soon as their results arrive make one group, not a lone one and the rest."""
    backend = FakeBackend()
    backend.gate.set()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)

    async def call(n: int) -> None:
        for round_ in range(3):
            assert await group.submit(100 * round_ + n) == (100 * round_ + n) * 10

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(call, n)
    # The first caller commits alone (nobody queued yet); from then on every group holds
    # every caller still appending. Without the leader's yield after a group of several,
    # the sizes alternate: 1, 8, 1, 8, 1, 5.
    assert [len(g) for g in backend.groups] == [1, 8, 8, 7]
    assert sorted(u for g in backend.groups for u in g) == sorted(
        100 * r + n for r in range(3) for n in range(8)
    )


async def test_a_lone_caller_after_a_group_of_one_does_not_yield() -> None:
    """A caller alone commits at once: its group of one leaves the next lone caller nothing to wait for."""
    backend = FakeBackend()
    backend.gate.set()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    for n in range(3):
        assert await group.submit(n) == n * 10
    assert backend.groups == [[0], [1], [2]]
    assert not group._gather


async def test_a_caller_cancelled_while_gathering_hands_over() -> None:
    """The leader gathering after a group of several is cancelled: its unit is dropped, the others commit."""
    backend = FakeBackend()
    backend.gate.set()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    results: dict[int, int] = {}

    async def call(n: int) -> None:
        results[n] = await group.submit(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(call, n)
    assert group._gather  # the last group held two
    with anyio.CancelScope() as doomed:
        doomed.cancel()
        await group.submit(99)
    assert all(99 not in g for g in backend.groups)
    assert not group._busy and not group._queue
    assert await group.submit(5) == 50


async def test_a_failing_unit_fails_alone() -> None:
    """One unit's own error reaches its caller only; the others get their results."""
    backend = FakeBackend()
    backend.gate.set()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    outcomes: dict[int, Any] = {}
    bad = ConcurrencyError("s-3", 0, 1)

    async def call(n: int) -> None:
        try:
            outcomes[n] = await group.submit(bad if n == 3 else n)
        except ConcurrencyError as exc:
            outcomes[n] = exc

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(call, n)
    assert outcomes.pop(3) is bad
    assert outcomes == {n: n * 10 for n in range(8) if n != 3}


async def test_a_failed_commit_reaches_every_caller_of_its_group() -> None:
    """When the transaction itself fails, every caller of the group raises, each its own exception."""
    backend = FakeBackend()
    backend.fail_with = "connection lost"
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    errors: list[BaseException] = []

    async def call(n: int) -> None:
        with pytest.raises(StoreUnavailable, match="connection lost") as info:
            await group.submit(n)
        errors.append(info.value)

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(call, n)
        await anyio.wait_all_tasks_blocked()
        backend.gate.set()
    assert len(errors) == 5 and len({id(e) for e in errors}) == 5
    # the committer is free again
    backend.fail_with = None
    assert await group.submit(7) == 70


async def test_a_cancelled_queued_caller_is_dropped_and_the_rest_proceed() -> None:
    """A caller cancelled before its group starts is not committed; leadership passes on."""
    backend = FakeBackend()
    group: GroupCommit[Any, int] = GroupCommit(backend.commit)
    results: dict[int, int] = {}

    async def call(n: int) -> None:
        results[n] = await group.submit(n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 0)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as doomed:
            doomed.cancel()
            async with anyio.create_task_group() as inner:
                inner.start_soon(call, 1)
        tg.start_soon(call, 2)
        await anyio.wait_all_tasks_blocked()
        backend.gate.set()
    assert results == {0: 0, 2: 20}
    assert [1] not in backend.groups and all(1 not in g for g in backend.groups)


# -- the backends -----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite-full", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "sqlite-full":
        async with SQLiteEventStore(tmp_path / "store.db", durability="full") as sqlite_store:
            yield sqlite_store
        return
    url = request.getfixturevalue("pg_url")  # skips (or fails in CI) without a server
    async with PostgresEventStore(url) as pg_store:
        yield pg_store


def groups_of(store: EventStore) -> GroupCommit[Any, Any]:
    group = store._group  # type: ignore[attr-defined]
    assert group is not None
    return group


async def test_concurrent_appends_share_commits_and_get_their_own_results(store: EventStore) -> None:
    """64 tasks append one event each to their own stream: fewer commits than appends, right results."""
    results: dict[int, AppendResult] = {}

    async def append(n: int) -> None:
        results[n] = await store.append(f"conv-{n}", [ev(n=n)], expected_version=0)

    async with anyio.create_task_group() as tg:
        for n in range(64):
            tg.start_soon(append, n)
    group = groups_of(store)
    assert group.units == 64 and group.groups < 64
    assert sorted(p for r in results.values() for p in r.positions) == sorted(
        {p for r in results.values() for p in r.positions}
    )
    for n, result in results.items():
        assert result.version == 1
        (event,) = [e async for e in store.read_stream(f"conv-{n}")]
        assert (event.position, event.data) == (result.positions[0], {"n": n})
    assert [e.position async for e in store.read_all()] == sorted(r.positions[0] for r in results.values())
    assert (await store.verify()).ok


async def test_one_bad_append_among_many_fails_alone(store: EventStore) -> None:
    """A wrong expected_version, a clashing id and a conflicting batch fail; the rest are stored."""
    await store.append("taken", [ev()])
    clash = NewEvent("thing.happened", {"v": 1})
    await store.append("clash", [clash])
    outcomes: dict[str, Any] = {}

    async def attempt(name: str, call: Any) -> None:
        try:
            outcomes[name] = await call()
        except StoreError as exc:
            outcomes[name] = exc

    calls: dict[str, Any] = {
        f"ok-{n}": (lambda n=n: store.append(f"ok-{n}", [ev(n=n)], 0)) for n in range(30)
    }
    calls["stale"] = lambda: store.append("taken", [ev()], expected_version=0)
    calls["clash"] = lambda: store.append("clash", [NewEvent("thing.happened", {"v": 2}, id=clash.id)])
    calls["batch"] = lambda: store.append_batch([("fresh", [ev()], 0), ("taken", [ev()], 5)])
    async with anyio.create_task_group() as tg:
        for name, call in calls.items():
            tg.start_soon(attempt, name, call)
    assert isinstance(outcomes.pop("stale"), ConcurrencyError)
    assert isinstance(outcomes.pop("clash"), IdempotencyError)
    batch = outcomes.pop("batch")
    assert isinstance(batch, ConcurrencyError) and batch.stream == "taken"
    assert all(isinstance(r, AppendResult) and r.version == 1 for r in outcomes.values())
    assert await store.stream_version("fresh") == 0  # the failed batch stored none of its entries
    assert await store.stream_version("taken") == 1
    stored = [e.position async for e in store.read_all()]
    assert len(stored) == 2 + 30
    if "gapless_positions" in store.capabilities:
        # the failed appends were rolled back to their savepoints, positions included
        assert stored == list(range(1, 33))
    assert groups_of(store).groups < groups_of(store).units
    assert (await store.verify()).ok


async def test_resends_inside_a_group_return_the_original_results(store: EventStore) -> None:
    """The same append sent by several tasks at once is stored once; every sender gets its result."""
    earlier = [ev(n=0)]
    first = await store.append("s", earlier)
    same = [ev(n=1), ev(n=2)]
    results: list[AppendResult] = []

    async def send(events: list[NewEvent]) -> None:
        results.append(await store.append("s", events))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(send, same)
        tg.start_soon(send, earlier)
        for n in range(5):
            tg.start_soon(send, [ev(n=10 + n)])
    assert results.count(first) == 1
    resent = [r for r in results if r.version == 3 and len(r.positions) == 2]
    assert len(resent) == 4 and len(set(resent)) == 1
    assert await store.stream_version("s") == 1 + 2 + 5
    assert [e.data["n"] async for e in store.read_stream("s")][:3] == [0, 1, 2]
    assert (await store.verify()).ok


async def test_appends_to_one_stream_in_a_group_chain_in_order(store: EventStore) -> None:
    """Tasks appending to the same stream with ANY all succeed with distinct, chained versions."""
    versions: list[int] = []

    async def append(n: int) -> None:
        versions.append((await store.append("shared", [ev(n=n)])).version)

    async with anyio.create_task_group() as tg:
        for n in range(40):
            tg.start_soon(append, n)
    assert sorted(versions) == list(range(1, 41))
    assert (await store.verify("shared")).ok


class TestSQLiteFullDurabilityConformance(StoreConformance):
    """The store contract holds when every append goes through group commit (SQLite, full)."""

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[EventStore]:
        async with open_store(f"sqlite:///{tmp_path / 'full.db'}", durability="full") as opened:
            yield opened
