"""The Kernel: commands in, events out, the live projection folded with the rebuild fold.

A command is validated against the live state of its branch, turned into catalogue events,
appended with ``expected_version`` set to the version the state was folded to, and the
recorded events are folded into the live state with the fold rules a rebuild uses.
Observers are then told, in log order; an observer that raises is logged and never changes
the outcome.

When another writer got there first (``ConcurrencyError``) the kernel folds the new events
from the store and, for commands whose meaning does not depend on their position in the
stream (message appends, model calls, run lifecycle), tries again, a bounded number of
times; any other command surfaces the error.

A Kernel serves every branch of one store. ``Kernel.for_store`` is the convenience default
(one per store, made on first use); a configured ``Kernel(store, ...)`` can be handed to a
branch instead (``Branch(kernel=...)``, ``Branch.load(..., kernel=...)``).

Commands live in ``_commands``, signals in ``turnlog.kernel.signals``.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from turnlog.eventstore import NO_STREAM, AppendResult, ConcurrencyError, EventStore, NewEvent, RecordedEvent
from turnlog.kernel._commands import Command, CreateBranch
from turnlog.kernel._errors import BranchNameTaken
from turnlog.kernel._lookup import name_holder, name_stream
from turnlog.kernel.signals import (
    MessageRecorded,
    Observer,
    RunEnd,
    RunFailure,
    RunStart,
    Signal,
    Subscription,
)
from turnlog.projections import (
    BranchForked,
    BranchNameClaimed,
    BranchState,
    EventData,
    MessageAdded,
    RunEnded,
    RunFailed,
    RunStarted,
    SnapshotPolicy,
    StateCache,
    apply_decoded,
    decode_event,
    fold,
    maybe_snapshot,
    new_event,
    new_events,
    rebuild,
)

__all__ = ["Kernel", "LiveBranch", "branch_events", "signal_for"]

_log = logging.getLogger("turnlog.kernel")


# ------------------------------------------------------------------------------------- live branch


@dataclass(eq=False)
class LiveBranch:
    """The kernel's working copy of one branch: its folded state and its delivery queue.

    Attributes:
        branch_id: The branch id.
        state: The folded state (None until the stream exists).
        listeners: Returns the observers to tell, as ``(types, handler)`` pairs.
        cache: Free for verbs to keep derived data keyed by message ids (rendered prompts).
    """

    branch_id: str
    state: BranchState | None = None
    listeners: Callable[[], Sequence[Subscription]] = lambda: ()
    cache: dict[object, object] = field(default_factory=dict)
    # fast_acquire: an uncontended command does not yield to the event loop for the lock.
    lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    outbox: deque[tuple[RecordedEvent, EventData | None, Mapping[str, Any]]] = field(default_factory=deque)
    delivering: bool = False
    events_since_snapshot: int = 0
    # the events appended here since the last snapshot: the snapshot writer takes what changed
    # from them instead of reading them back (at most policy.every plus one command's worth)
    recent: list[RecordedEvent] = field(default_factory=list)

    @property
    def stream(self) -> str:
        """The branch's stream name."""
        return f"branch-{self.branch_id}"

    @property
    def version(self) -> int:
        """The stream version the state is folded to (0 before the stream exists)."""
        return self.state.version if self.state is not None else 0


# ------------------------------------------------------------------------------------------- kernel

_KERNELS: weakref.WeakKeyDictionary[EventStore, Kernel] = weakref.WeakKeyDictionary()

_DEFAULT_POLICY = SnapshotPolicy(keyframe_every=80)
"""The kernel's snapshot policy when none is given.

A head lands at a run end about every ``run_end_min_events`` (100) events, five times as
often as run ends of 500 events did; 80 heads between keyframes keeps a keyframe (a head with
every run of the branch) about every 8,000 events, as 16 heads of 500 events did.
A cold load reads every head of the chain for its messages anyway, so more deltas per
keyframe cost it nothing.
"""


class Kernel:
    """Executes commands for the branches of one store.

    Snapshots go through the projections' snapshot policy: one every ``policy.every`` events
    of a branch, and one at the end of a run that recorded at least ``run_end_min_events``
    events since the last snapshot (a short exchange is cheaper to fold again than to snapshot).

    Args:
        store: The event store.
        max_retries: How many times a reorderable command is retried after a conflict.
        policy: The snapshot policy (default: ``SnapshotPolicy(keyframe_every=80)``).
        run_end_min_events: The fewest new events that make a run end worth a snapshot. The
            default, 100 (about twenty chat turns), bounds the fold of a cold read of a
            past turn to about 100 events; a snapshot adds a small head and the messages
            since the last one (about 1% more bytes per turn than a bound of 500).
        time_travel_streams: How many branches keep their past states in memory for
            ``load(at_version=...)`` (``Branch.at`` and ``Branch.load``); 0 keeps none. The
            first view of a branch's past reads its messages; later views, at any version,
            cost a snapshot head and a short fold (see ``StateCache``).

    Attributes:
        states: The ``StateCache`` of past views, None when ``time_travel_streams`` is 0.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        max_retries: int = 8,
        policy: SnapshotPolicy | None = None,
        run_end_min_events: int = 100,
        time_travel_streams: int = 16,
    ) -> None:
        self.store = store
        self.max_retries = max_retries
        self.policy = policy or _DEFAULT_POLICY
        self.run_end_min_events = run_end_min_events
        self.states = StateCache(store, max_streams=time_travel_streams) if time_travel_streams > 0 else None

    @classmethod
    def for_store(cls, store: EventStore) -> Kernel:
        """The one Kernel of ``store`` (made on first use)."""
        kernel = _KERNELS.get(store)
        if kernel is None:
            kernel = _KERNELS[store] = cls(store)
        return kernel

    # ------------------------------------------------------------------------------- commands

    async def execute(
        self,
        live: LiveBranch,
        command: Command,
        *,
        meta: Mapping[str, Any] | None = None,
        extras: Mapping[str, Any] | None = None,
        terminal: bool = False,
    ) -> list[RecordedEvent]:
        """Validate, append, fold and announce ``command``; return the recorded events.

        Args:
            live: The branch.
            command: What to do.
            meta: Event meta (correlation ids); None values are dropped.
            extras: In-process facts handed to the signals (a run's result or exception).
            terminal: The command closes a run: write a snapshot per the policy.

        Raises:
            UsageError: the command does not apply to the current state.
            ConcurrencyError: another writer moved the stream and the command is not
                reorderable (or the retries ran out).
        """
        clean_meta = {k: v for k, v in (meta or {}).items() if v is not None}
        async with live.lock:
            recorded, payloads = await self._append(live, command, clean_meta)
            live.events_since_snapshot += len(recorded)
            live.recent.extend(recorded)
            if live.listeners():
                for event, payload in zip(recorded, payloads, strict=True):
                    if event.type in _SIGNALLED:
                        live.outbox.append((event, payload, extras or {}))
            due = live.events_since_snapshot >= self.policy.every
            if due or (terminal and live.events_since_snapshot >= self.run_end_min_events):
                await self._snapshot(live, run_ended=terminal)
        await self._deliver(live)
        return recorded

    async def _append(
        self, live: LiveBranch, command: Command, meta: dict[str, object]
    ) -> tuple[list[RecordedEvent], Sequence[EventData | None]]:
        attempt = 0
        while True:
            payloads = command.build(live.state)
            if not payloads:
                return [], []
            if isinstance(command, CreateBranch) and "run_id" in meta:
                # a branch created with its first run's events belongs to no run itself
                creation = new_event(payloads[0], meta={k: v for k, v in meta.items() if k != "run_id"})
                events = [creation, *new_events(payloads[1:], meta=meta)]
            else:
                events = new_events(payloads, meta=meta)  # one meta object: the append encodes it once
            expected = live.version if live.state is not None else NO_STREAM
            name = command.data.name if isinstance(command, CreateBranch) else None
            try:
                if name is None:
                    result = await self.store.append(live.stream, events, expected)
                else:
                    result = await self._append_claiming(live, events, name, meta)
            except ConcurrencyError:
                await self.catch_up(live)
                attempt += 1
                if not command.reorderable or attempt > self.max_retries:
                    raise
                continue
            recorded = list(result.events)  # what the store recorded: no read-back
            if len(recorded) == len(payloads) and not isinstance(payloads[0], BranchForked):
                # The payloads were validated on the way in: fold them without decoding again,
                # the batch in one builder (one freeze per append, not one per event).
                live.state = apply_decoded(live.state, recorded, payloads)
                return recorded, payloads
            live.state = await rebuild(self.store, live.branch_id)
            return recorded, [None] * len(recorded)

    async def _append_claiming(
        self, live: LiveBranch, events: Sequence[NewEvent], name: str, meta: dict[str, object]
    ) -> AppendResult:
        """Append a named branch's first events and the name's claim in one transaction.

        The claim goes to the name's own stream on the condition that it has no event yet,
        so the store, not a check before the append, decides between two processes creating
        one name at once (SQLite serialises the writers; PostgreSQL's check of the stream's
        head runs in the inserting transaction).

        Raises:
            BranchNameTaken: the name's stream holds a claim already (nothing was written).
        """
        stream = name_stream(name)
        claim = new_event(BranchNameClaimed(name=name, branch_id=live.branch_id), meta=meta)
        try:
            results = await self.store.append_batch(
                [(live.stream, events, NO_STREAM), (stream, [claim], NO_STREAM)]
            )
        except ConcurrencyError as exc:
            if exc.stream != stream:
                raise
            holder = await name_holder(self.store, name)
            raise BranchNameTaken(name, holder or "?") from exc
        return results[0]

    async def catch_up(self, live: LiveBranch) -> list[RecordedEvent]:
        """Fold the events other writers appended since the live state; return them."""
        if live.state is None:
            if await self.store.stream_version(live.stream) > 0:
                live.state = await rebuild(self.store, live.branch_id)
            return []
        new = [e async for e in self.store.read_stream(live.stream, live.version + 1)]
        if new:
            live.state = fold(new, live.state)
        return new

    async def load(self, branch_id: str, at_version: int | None = None) -> BranchState:
        """Rebuild the state of ``branch_id`` (at ``at_version``) from snapshots and events.

        A past version goes through ``states``, so a process that looks at many versions of a
        branch reads its messages about once.
        """
        if at_version is None or self.states is None:
            return await rebuild(self.store, branch_id, at_version=at_version)
        return await rebuild(self.store, branch_id, at_version=at_version, cache=self.states)

    async def _snapshot(self, live: LiveBranch, *, run_ended: bool) -> None:
        live.events_since_snapshot = 0
        recent, live.recent = live.recent, []
        if live.state is not None:
            await maybe_snapshot(self.store, live.state, self.policy, run_ended=run_ended, events=recent)

    # ------------------------------------------------------------------------------ observers

    async def _deliver(self, live: LiveBranch) -> None:
        # One deliverer at a time per branch keeps log order; a command issued by an observer
        # queues its events and the running deliverer picks them up.
        if live.delivering:
            return
        live.delivering = True
        try:
            while live.outbox:
                event, payload, extras = live.outbox.popleft()
                signal = signal_for(live.branch_id, event, extras, payload)
                if signal is None:
                    continue
                for types, handler in live.listeners():
                    if types and not isinstance(signal, types):
                        continue
                    await _call_observer(handler, signal)
        finally:
            live.delivering = False


async def _call_observer(handler: Observer, signal: Signal) -> None:
    try:
        result = handler(signal)
        if inspect.isawaitable(result):
            await result
    except Exception:
        _log.exception("observer %r raised on %s; the outcome is unchanged", handler, type(signal).__name__)


def signal_for(
    branch_id: str, event: RecordedEvent, extras: Mapping[str, Any], data: EventData | None = None
) -> Signal | None:
    """The observer signal for a recorded event (None for types without one).

    ``data`` is the event's payload when the caller has it (else it is decoded).
    """
    if event.type not in _SIGNALLED:
        return None
    if data is None:
        data = decode_event(event)
    if isinstance(data, MessageAdded):
        return MessageRecorded(branch_id, event, data.message, data.run_id)
    if isinstance(data, RunStarted):
        return RunStart(branch_id, event, data.run_id, data.verb)
    if isinstance(data, RunEnded):
        return RunEnd(
            branch_id,
            event,
            data.run_id,
            data.verb,
            data.duration_ms,
            data.usage,
            extras.get("result"),
        )
    assert isinstance(data, RunFailed)
    return RunFailure(
        branch_id,
        event,
        data.run_id,
        data.verb,
        data.duration_ms,
        data.usage,
        data.error_type,
        data.error_message,
        data.reason,
        extras.get("error"),
    )


_SIGNALLED = frozenset({"message.added", "run.started", "run.ended", "run.failed"})


async def branch_events(
    store: EventStore, branch_id: str, at_version: int | None = None
) -> list[tuple[RecordedEvent, EventData]]:
    """The events of a branch stream with their decoded payloads, in order."""
    return [(e, decode_event(e)) async for e in store.read_stream(f"branch-{branch_id}", 1, at_version)]
