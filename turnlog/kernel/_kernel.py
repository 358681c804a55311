"""The Kernel: commands in, events out, the live projection folded with the rebuild fold.

A command is validated against the live state of its branch, turned into catalogue events,
appended with ``expected_version`` set to the version the state was folded to, and the
recorded events are folded into the live state with the same ``apply`` a rebuild uses.
Observers are then told, in log order; an observer that raises is logged and never changes
the outcome.

When another writer got there first (``ConcurrencyError``) the kernel folds the new events
from the store and, for commands whose meaning does not depend on their position in the
stream (message appends, model calls, run lifecycle), tries again, a bounded number of
times; any other command surfaces the error.

One Kernel per store (``Kernel.for_store``) serves every branch of it.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, overload

import anyio

from turnlog.eventstore import NO_STREAM, ConcurrencyError, EventStore, RecordedEvent
from turnlog.kernel._errors import UsageError
from turnlog.kernel._lifecycle import MessageAdded, RunEnd, RunFailed, RunStart, Signal
from turnlog.kernel.models import Usage
from turnlog.projections import (
    AnyMessage,
    BranchCreated,
    BranchForked,
    BranchState,
    EventData,
    MessageAnnotated,
    MessagesCleared,
    ProviderSessionBound,
    RunEnded,
    RunStarted,
    SnapshotPolicy,
    StateCache,
    apply,
    decode_event,
    fold,
    maybe_snapshot,
    new_event,
    rebuild,
)
from turnlog.projections import MessageAdded as MessageAddedData
from turnlog.projections import RunFailed as RunFailedData

__all__ = [
    "AddMessages",
    "AnnotateMessage",
    "BindProviderSession",
    "ClearMessages",
    "Command",
    "CreateBranch",
    "EndRun",
    "FailRun",
    "Kernel",
    "LiveBranch",
    "Observable",
    "Observer",
    "StartRun",
]

_log = logging.getLogger("turnlog.kernel")

Observer = Callable[[Signal], Any]
"""A sync or async callable receiving signals; what it returns is ignored."""


class Observable:
    """``observe`` / ``unobserve`` over ``self._observers`` (mixed into Branch and Session)."""

    _observers: list[tuple[tuple[type[Signal], ...], Observer]]

    @overload
    def observe(self, *types: type[Signal], handler: Observer) -> Observer: ...
    @overload
    def observe(self, *types: type[Signal], handler: None = None) -> Callable[[Observer], Observer]: ...
    def observe(self, *types: type[Signal], handler: Observer | None = None) -> Any:
        """Call ``handler`` with every signal of ``types`` (all signals when none), in log order.

        On a Session, the signals of every included branch. Usable as a decorator. Handlers
        may be sync or async; one that raises is logged and changes nothing.
        """

        def register(func: Observer) -> Observer:
            self._observers.append((tuple(types), func))
            return func

        return register(handler) if handler is not None else register

    def unobserve(self, handler: Observer) -> None:
        """Stop calling ``handler``."""
        self._observers = [(t, h) for t, h in self._observers if h is not handler]


# ------------------------------------------------------------------------------------------ commands


class Command(Protocol):
    """Something to do to one branch: validated against its state, turned into event payloads."""

    reorderable: ClassVar[bool]
    """True when the command means the same wherever it lands in the stream."""

    def build(self, state: Any) -> Sequence[EventData]:
        """The payloads to append, given the current state; raise ``UsageError`` to refuse."""
        ...


def _payload(schema: type[EventData], command: Any, **converted: Any) -> EventData:
    """The ``schema`` payload holding a command's fields (``converted`` replaces some of them)."""
    values = {f.name: getattr(command, f.name) for f in fields(command)}
    return schema(**(values | converted))


@dataclass(frozen=True, slots=True)
class CreateBranch:
    """Start the branch stream with ``branch.created`` or ``branch.forked`` (version 1)."""

    reorderable: ClassVar[bool] = False
    data: BranchCreated | BranchForked

    def build(self, state: Any) -> Sequence[EventData]:
        if state is not None:
            raise UsageError(f"branch {self.data.branch_id} exists already")
        return (self.data,)


@dataclass(frozen=True, slots=True)
class AddMessages:
    """Append messages and model-call records as one atomic batch, in the given order.

    ``items`` holds ``message.added`` and ``model.called`` payloads; message ids must be new.
    """

    reorderable: ClassVar[bool] = True
    items: tuple[EventData, ...]

    def build(self, state: Any) -> Sequence[EventData]:
        seen: set[str] = set()
        for item in self.items:
            if isinstance(item, MessageAddedData):
                mid = item.message.id
                if mid in seen or _has_message(state, mid):
                    raise UsageError(f"message {mid} is recorded in this branch already")
                seen.add(mid)
        return self.items


@dataclass(frozen=True, slots=True)
class AnnotateMessage:
    """Merge metadata into a recorded message's view (``message.annotated``)."""

    reorderable: ClassVar[bool] = False
    message_id: str
    metadata: Mapping[str, Any]
    reason: str | None = None

    def build(self, state: Any) -> Sequence[EventData]:
        if not _has_message(state, self.message_id):
            raise UsageError(f"message {self.message_id} is not in this branch")
        return (_payload(MessageAnnotated, self, metadata=dict(self.metadata)),)


@dataclass(frozen=True, slots=True)
class ClearMessages:
    """Every message leaves the view except the system message (``messages.cleared``)."""

    reorderable: ClassVar[bool] = False

    def build(self, state: Any) -> Sequence[EventData]:
        return (MessagesCleared(),)


@dataclass(frozen=True, slots=True)
class BindProviderSession:
    """Remember the provider session to resume (``provider.session_bound``)."""

    reorderable: ClassVar[bool] = False
    provider: str
    model: str
    session_id: str
    cwd: str | None = None

    def build(self, state: Any) -> Sequence[EventData]:
        return (_payload(ProviderSessionBound, self),)


@dataclass(frozen=True, slots=True)
class StartRun:
    """``run.started``."""

    reorderable: ClassVar[bool] = True
    run_id: str
    verb: str
    parent_run_id: str | None = None
    provider: str | None = None
    model: str | None = None
    cwd: str | None = None

    def build(self, state: Any) -> Sequence[EventData]:
        return (_payload(RunStarted, self),)


@dataclass(frozen=True, slots=True)
class EndRun:
    """``run.ended`` with the duration and the usage of this run only."""

    reorderable: ClassVar[bool] = True
    run_id: str
    verb: str
    duration_ms: float
    usage: Usage = field(default_factory=Usage)
    chunks: int | None = None

    def build(self, state: Any) -> Sequence[EventData]:
        return (_payload(RunEnded, self, usage=self.usage),)


@dataclass(frozen=True, slots=True)
class FailRun:
    """``run.failed`` with the error and the usage of this run only."""

    reorderable: ClassVar[bool] = True
    run_id: str
    verb: str
    duration_ms: float
    usage: Usage
    error_type: str
    error_message: str
    reason: str = "error"
    recovered: Mapping[str, Any] | None = None

    def build(self, state: Any) -> Sequence[EventData]:
        recovered = dict(self.recovered) if self.recovered is not None else None
        return (_payload(RunFailedData, self, usage=self.usage, recovered=recovered),)


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
    state: Any = None
    listeners: Callable[[], Sequence[tuple[tuple[type[Signal], ...], Observer]]] = lambda: ()
    cache: dict[Any, Any] = field(default_factory=dict)
    # fast_acquire: an uncontended command does not yield to the event loop for the lock.
    lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    outbox: deque[tuple[RecordedEvent, EventData | None, Mapping[str, Any]]] = field(default_factory=deque)
    delivering: bool = False
    events_since_snapshot: int = 0

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


class Kernel:
    """Executes commands for the branches of one store.

    Snapshots go through the projections' snapshot policy: one every ``policy.every`` events
    of a branch, and one at the end of a run that recorded at least ``run_end_min_events``
    events since the last snapshot (a short exchange is cheaper to fold again than to snapshot).

    Args:
        store: The event store.
        max_retries: How many times a reorderable command is retried after a conflict.
        policy: The snapshot policy (default: ``SnapshotPolicy()``).
        run_end_min_events: The fewest new events that make a run end worth a snapshot.
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
        run_end_min_events: int = 500,
        time_travel_streams: int = 16,
    ) -> None:
        self.store = store
        self.max_retries = max_retries
        self.policy = policy or SnapshotPolicy()
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
        self, live: LiveBranch, command: Command, meta: dict[str, Any]
    ) -> tuple[list[RecordedEvent], Sequence[EventData | None]]:
        attempt = 0
        while True:
            payloads = command.build(live.state)
            if not payloads:
                return [], []
            events = [new_event(p, meta=meta) for p in payloads]
            expected = live.version if live.state is not None else NO_STREAM
            try:
                result = await self.store.append(live.stream, events, expected)
            except ConcurrencyError:
                await self.catch_up(live)
                attempt += 1
                if not command.reorderable or attempt > self.max_retries:
                    raise
                continue
            recorded = [e async for e in self.store.read_stream(live.stream, expected + 1, result.version)]
            if len(recorded) == len(payloads) and not isinstance(payloads[0], BranchForked):
                # The payloads were validated on the way in: fold them without decoding again.
                state = live.state
                for event, payload in zip(recorded, payloads, strict=True):
                    state = apply(state, event, payload)
                live.state = state
                return recorded, payloads
            live.state = await rebuild_state(self.store, live.branch_id)
            return recorded, [None] * len(recorded)

    async def catch_up(self, live: LiveBranch) -> list[RecordedEvent]:
        """Fold the events other writers appended since the live state; return them."""
        if live.state is None:
            if await self.store.stream_version(live.stream) > 0:
                live.state = await rebuild_state(self.store, live.branch_id)
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
            return await rebuild_state(self.store, branch_id, at_version)
        return await rebuild(self.store, branch_id, at_version=at_version, cache=self.states)

    async def _snapshot(self, live: LiveBranch, *, run_ended: bool) -> None:
        live.events_since_snapshot = 0
        if live.state is not None:
            await maybe_snapshot(self.store, live.state, self.policy, run_ended=run_ended)

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
    if isinstance(data, MessageAddedData):
        return MessageAdded(branch_id, event, _message(data), data.run_id)
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
    assert isinstance(data, RunFailedData)
    return RunFailed(
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


def _message(data: MessageAddedData) -> AnyMessage:
    return data.message


_SIGNALLED = frozenset({"message.added", "run.started", "run.ended", "run.failed"})


# --------------------------------------------------------------------------- projections bridge


def _has_message(state: BranchState | None, message_id: str) -> bool:
    return state is not None and state.message(message_id) is not None


def fold_one(state: BranchState | None, event: RecordedEvent) -> BranchState:
    """Fold one event with the projections' fold."""
    return apply(state, event)


async def rebuild_state(store: EventStore, branch_id: str, at_version: int | None = None) -> BranchState:
    """The state of ``branch_id`` at ``at_version`` (default: the latest): snapshot plus tail."""
    return await rebuild(store, branch_id, at_version=at_version)


async def branch_events(
    store: EventStore, branch_id: str, at_version: int | None = None
) -> list[tuple[RecordedEvent, EventData]]:
    """The events of a branch stream with their decoded payloads, in order."""
    return [(e, decode_event(e)) async for e in store.read_stream(f"branch-{branch_id}", 1, at_version)]
