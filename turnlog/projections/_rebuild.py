"""``rebuild``: the state of a branch now, or at any past version, position or time.

Rebuild = the newest usable snapshot at or before the target, then the fold of the events
after it. A fork's stream starts with ``branch.forked``: its parent is rebuilt at
``parent_version`` first (recursively, for forks of forks). Snapshots only save time: deleting
every one of them never changes a result.

Versions of a fork: a fork's state counts the versions of its own stream. Version 1 of a fork
is its ``branch.forked`` event, and the state at version 1 shows the parent as of
``parent_version``. ``rebuild(store, fork_id, at_version=k)`` therefore means "the fork after
its own k-th event"; targets by position or time also only look at the fork's own events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore, RecordedEvent, Snapshot

from ._cache import StateCache
from ._catalogue import BranchForked
from ._errors import FoldError, InvalidTargetError, UnknownBranch
from ._fold import BATCH, Appliers, apply, decode_branch_event, fold_into, gc_paused
from ._snapshots import (
    PROJECTION_VERSION,
    SnapshotPolicy,
    delta_changes,
    load_snapshot_state,
    snapshot_records,
)
from ._state import BranchState, StateBuilder

__all__ = ["MAX_FORK_DEPTH", "event_at", "rebuild", "resolve_version", "write_snapshots"]


async def event_at(store: EventStore, branch_id: str, version: int) -> RecordedEvent:
    """The event at ``version`` of the branch's own stream.

    Raises:
        UnknownBranch: the stream has no such version.
    """
    return await _event_at(store, _stream(branch_id), version)


MAX_FORK_DEPTH = 1000
"""Forks of forks deeper than this are refused (a guard against a corrupt, cyclic log)."""


def _is_int(value: object) -> bool:
    """Whether a target is an int (callers may pass anything at runtime; a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _stream(branch_id: str) -> str:
    checked: object = branch_id  # callers may pass anything at runtime
    if not isinstance(checked, str) or not checked:
        raise InvalidTargetError(f"branch_id must be a non-empty string, got {branch_id!r}")
    return f"branch-{branch_id}"


@asynccontextmanager
async def _closing(events: AsyncIterator[RecordedEvent]) -> AsyncIterator[AsyncIterator[RecordedEvent]]:
    """Close the store's reader (an async generator) when the caller stops early."""
    try:
        yield events
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


async def _event_at(store: EventStore, stream: str, version: int) -> RecordedEvent:
    async with _closing(store.read_stream(stream, version, version)) as events:
        async for event in events:
            return event
    raise UnknownBranch(stream.removeprefix("branch-"), detail=f"has no version {version}")


async def _last_at_or_before(
    store: EventStore, stream: str, head: int, fits: Callable[[RecordedEvent], bool]
) -> int:
    """Binary search for the highest version whose event ``fits`` (0 when none does)."""
    low, high = 0, head  # invariant: version `low` fits (or is 0); versions above `high` do not
    while low < high:
        mid = (low + high + 1) // 2
        if fits(await _event_at(store, stream, mid)):
            low = mid
        else:
            high = mid - 1
    return low


async def resolve_version(
    store: EventStore,
    branch_id: str,
    *,
    at_version: int | None = None,
    at_position: int | None = None,
    at_time: datetime | None = None,
) -> int:
    """The version of the branch's own stream that a target names (the head when none is given).

    ``at_position`` and ``at_time`` pick the last event at or before the position / time
    (``recorded_at``, which the store stamps in commit order).

    Raises:
        InvalidTargetError: more than one target, a version outside the stream, a naive time.
        UnknownBranch: the branch has no event (at or before the target).
    """
    stream = _stream(branch_id)
    if sum(t is not None for t in (at_version, at_position, at_time)) > 1:
        raise InvalidTargetError("give at most one of at_version, at_position and at_time")
    head = await store.stream_version(stream)
    if head == 0:
        raise UnknownBranch(branch_id)
    if at_version is not None:
        if not _is_int(at_version) or at_version < 1:
            raise InvalidTargetError(f"at_version must be an int >= 1, got {at_version!r}")
        if at_version > head:
            raise InvalidTargetError(f"branch {branch_id!r} is at version {head}; at_version={at_version}")
        return at_version
    if at_position is not None:
        if not _is_int(at_position):
            raise InvalidTargetError(f"at_position must be an int, got {at_position!r}")
        version = await _last_at_or_before(store, stream, head, lambda e: e.position <= at_position)
        what = f"position {at_position}"
    elif at_time is not None:
        moment: object = at_time  # callers may pass anything at runtime
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise InvalidTargetError(f"at_time must be an aware datetime, got {at_time!r}")
        version = await _last_at_or_before(store, stream, head, lambda e: e.recorded_at <= at_time)
        what = f"time {at_time.isoformat()}"
    else:
        return head
    if version == 0:
        raise UnknownBranch(branch_id, detail=f"has no event at or before {what}")
    return version


async def rebuild(
    store: EventStore,
    branch_id: str,
    *,
    at_version: int | None = None,
    at_position: int | None = None,
    at_time: datetime | None = None,
    snapshots: bool = True,
    appliers: Appliers | None = None,
    cache: StateCache | None = None,
) -> BranchState:
    """Rebuild the state of a branch, now or at a past point.

    Args:
        store: The event store.
        branch_id: The branch (stream ``branch-<branch_id>``).
        at_version: State after this version of the branch's own stream.
        at_position: State after its last event at or before this global position.
        at_time: State after its last event recorded at or before this (aware) time.
        snapshots: Start from the newest usable snapshot (False: fold every event).
        appliers: Fold rules for event types outside the catalogue.
        cache: Start from (and keep) states folded earlier in this process.

    Raises:
        UnknownBranch: no such branch, or no event at or before the target.
        InvalidTargetError: a malformed target.
        EventDecodeError: a stored payload does not validate.
        FoldError: the log does not fold (e.g. a fork whose parent is too short).

    Example:
        >>> state = await rebuild(store, branch_id, at_version=3)  # doctest: +SKIP
    """
    if cache is not None and cache.store is not store:
        raise UsageError("this StateCache belongs to another store")
    version = await resolve_version(
        store, branch_id, at_version=at_version, at_position=at_position, at_time=at_time
    )
    return await _build(store, branch_id, version, _Options(snapshots, appliers, cache), 0)


class _Options:
    __slots__ = ("appliers", "cache", "rules", "snapshots")

    def __init__(self, snapshots: bool, appliers: Appliers | None, cache: StateCache | None) -> None:
        self.snapshots = snapshots
        self.appliers = appliers
        self.cache = cache
        self.rules = id(appliers) if appliers is not None else 0


async def _build(store: EventStore, branch_id: str, version: int, opts: _Options, depth: int) -> BranchState:
    stream = _stream(branch_id)
    cache = opts.cache
    state = cache.best(stream, version, opts.rules) if cache is not None else None
    if opts.snapshots and (state is None or version - state.version > cache.every):  # type: ignore[union-attr]
        # a snapshot head between the cached state and the target saves folding; it borrows
        # the messages the cached states around the target already hold (see StateCache)
        above = cache.above(stream, version, opts.rules) if cache is not None else None
        loaded = await load_snapshot_state(
            store,
            stream,
            version,
            newer_than=state.version if state is not None else 0,
            donors=(state, above),
            memo=cache.keyframes if cache is not None else None,
        )
        if loaded is not None:
            state = loaded
    if state is None:
        state = await _first_state(store, branch_id, stream, opts, depth)
    if cache is not None:
        cache.add(stream, state, opts.rules)
    return await _fold_range(store, stream, state, version, opts)


async def _fold_range(
    store: EventStore, stream: str, state: BranchState, version: int, opts: _Options
) -> BranchState:
    if state.version >= version:
        return state
    appliers, cache = opts.appliers, opts.cache
    every = cache.every if cache is not None else 0
    builder = StateBuilder(state)

    def keep(checkpoint: BranchState) -> None:
        cache.add(stream, checkpoint, opts.rules)  # type: ignore[union-attr]

    with gc_paused():
        batch: list[RecordedEvent] = []
        async for event in store.read_stream(stream, state.version + 1, version):
            batch.append(event)
            if len(batch) >= BATCH:
                fold_into(builder, batch, appliers, every, keep)
                batch = []
        if batch:
            fold_into(builder, batch, appliers, every, keep)
    result = builder.freeze()
    if cache is not None:
        cache.add(stream, result, opts.rules)
    return result


async def _first_state(
    store: EventStore, branch_id: str, stream: str, opts: _Options, depth: int
) -> BranchState:
    appliers = opts.appliers
    first = await _event_at(store, stream, 1)
    if first.type != "branch.forked":
        return apply(None, first, appliers=appliers)
    data = decode_branch_event(first, appliers)
    assert isinstance(data, BranchForked)
    if depth >= MAX_FORK_DEPTH:
        raise FoldError(stream, 1, first.type, f"forks nest deeper than {MAX_FORK_DEPTH} levels")
    if data.parent_stream != _stream(data.parent_branch_id):
        raise FoldError(
            stream, 1, first.type, f"parent_stream {data.parent_stream!r} is not that of the parent"
        )
    parent_head = await store.stream_version(data.parent_stream)
    if parent_head < data.parent_version:
        raise FoldError(
            stream,
            1,
            first.type,
            f"the parent {data.parent_stream!r} is at version {parent_head}, before {data.parent_version}",
        )
    parent = await _build(store, data.parent_branch_id, data.parent_version, opts, depth + 1)
    return apply(parent, first, data, appliers=appliers)


async def write_snapshots(
    store: EventStore,
    branch_id: str,
    policy: SnapshotPolicy | None = None,
    *,
    appliers: Appliers | None = None,
    progress: Callable[[int], Awaitable[None]] | None = None,
) -> int:
    """Fold a whole branch and write a snapshot every ``policy.every`` versions; return how many.

    Existing usable snapshots are reused as the starting point and as chain bases, so running
    it again only adds what is missing.
    """
    policy = policy or SnapshotPolicy()
    stream = _stream(branch_id)
    head = await store.stream_version(stream)
    if head == 0:
        raise UnknownBranch(branch_id)
    state = await load_snapshot_state(store, stream, head)
    if state is None:
        state = await _first_state(store, branch_id, stream, _Options(True, appliers, None), 0)
    base = await store.load_snapshot(stream, state.version, type="branch_state")
    if base is not None and base.meta.get("projection_version") != PROJECTION_VERSION:
        base = None
    with gc_paused():
        return await _write_chain(store, stream, state, head, base, policy, appliers, progress)


async def _write_chain(
    store: EventStore,
    stream: str,
    state: BranchState,
    head: int,
    base: Snapshot | None,
    policy: SnapshotPolicy,
    appliers: Appliers | None,
    progress: Callable[[int], Awaitable[None]] | None,
) -> int:
    written = 0
    builder = StateBuilder(state)
    due: list[BranchState] = []
    batch: list[RecordedEvent] = []
    pending: list[RecordedEvent] = []  # the events after the base: what its delta is made of
    async with _closing(store.read_stream(stream, state.version + 1, head)) as events:
        while True:
            async for event in events:  # resumes the same generator after each batch
                batch.append(event)
                if len(batch) >= BATCH:
                    break
            if not batch:
                return written
            fold_into(builder, batch, appliers, policy.every, due.append)
            pending.extend(batch)
            batch = []
            for frozen in due:
                for record in snapshot_records(
                    frozen, base, delta_changes(base, frozen, pending, policy.keyframe_every)
                ):
                    await store.save_snapshot(record)
                base = await store.load_snapshot(stream, frozen.version, type="branch_state")
                pending = [e for e in pending if e.version > frozen.version]
                written += 1
                if progress is not None:
                    await progress(frozen.version)
            due.clear()
