"""Signals: what observers of a branch or a session are told, one per recorded event.

A signal is made from a recorded event of the branch stream, in log order, after the event
is stored and folded. Its name is not the event's name: events are the recorded facts
(``turnlog.projections``: ``RunStarted``, ``RunEnded``, ``RunFailed``, ``MessageAdded``),
signals are the in-process notifications about them and may carry what only the running
process has (a run's result or exception)::

    from turnlog.kernel.signals import MessageAdded, RunEnd, RunFailed, RunStart

    @branch.observe(RunStart, RunEnd, RunFailed)
    def log_run(signal):
        print(type(signal).__name__, signal.verb)

===================  ================  ===============================================
signal               event             carries
===================  ================  ===============================================
``RunStart``         ``run.started``   run_id, verb
``RunEnd``           ``run.ended``     run_id, verb, duration_ms, usage, result
``RunFailed``        ``run.failed``    ... error_type, error_message, reason, error
``MessageAdded``     ``message.added`` message, run_id
===================  ================  ===============================================

The names are the seed's (ADR-0021 D4) and lionagi's, so code written to that contract or
ported from lionagi imports them unchanged. The event catalogue has classes of the same name
(``turnlog.projections.RunFailed``, ``MessageAdded``): those are the recorded payloads, these
the notifications. ``RunFailure`` and ``MessageRecorded`` are aliases of ``RunFailed`` and
``MessageAdded`` (earlier names, kept so code that used them keeps working).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, overload

from turnlog.eventstore import RecordedEvent
from turnlog.kernel.models import Usage
from turnlog.projections import AnyMessage

__all__ = [
    "FailureReason",
    "MessageAdded",
    "MessageRecorded",
    "Observer",
    "Observers",
    "RunEnd",
    "RunFailed",
    "RunFailure",
    "RunStart",
    "Signal",
]

FailureReason = Literal["error", "cancelled", "timeout", "crashed"]
"""How a failed run ended: an exception, a cancellation, a timeout, or a crash found by ``recover``."""


@dataclass(frozen=True, slots=True)
class Signal:
    """Something observers are told about, made from one recorded event.

    Attributes:
        branch_id: The branch whose stream holds the event.
        event: The recorded event behind the signal (version, position, meta...).
    """

    branch_id: str
    event: RecordedEvent


@dataclass(frozen=True, slots=True)
class _RunSignal(Signal):
    run_id: str
    verb: str


@dataclass(frozen=True, slots=True)
class RunStart(_RunSignal):
    """A run began (``run.started``).

    Attributes:
        run_id: The run id.
        verb: The verb that owns the run.
    """


@dataclass(frozen=True, slots=True)
class _RunOutcome(_RunSignal):
    duration_ms: float
    usage: Usage


@dataclass(frozen=True, slots=True)
class RunEnd(_RunOutcome):
    """A run finished normally (``run.ended``).

    Attributes:
        run_id: The run id.
        verb: The verb that owned the run.
        duration_ms: Wall time of the run.
        usage: Tokens and cost of this run only.
        result: What the verb returned (only in the process that ran it).
    """

    result: Any = None


@dataclass(frozen=True, slots=True)
class RunFailed(_RunOutcome):
    """A run ended with an error, a cancellation or a timeout (``run.failed``).

    Attributes:
        run_id: The run id.
        verb: The verb that owned the run.
        duration_ms: Wall time until the failure.
        usage: Tokens and cost of this run only.
        error_type: The exception's class name.
        error_message: The exception's message.
        reason: ``error``, ``cancelled``, ``timeout`` or ``crashed``.
        error: The exception itself (only in the process that ran it).
    """

    error_type: str
    error_message: str
    reason: FailureReason
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class MessageAdded(Signal):
    """A message was appended (``message.added``).

    Attributes:
        message: The message.
        run_id: The run that produced it, if any.
    """

    message: AnyMessage
    run_id: str | None = None


RunFailure = RunFailed
"""Alias of ``RunFailed`` (the name the seed and lionagi use)."""

MessageRecorded = MessageAdded
"""Alias of ``MessageAdded`` (the name the seed and lionagi use)."""


Observer = Callable[[Signal], Any]
"""A sync or async callable receiving signals; what it returns is ignored."""

Subscription = tuple[tuple[type[Signal], ...], Observer]


class Observers:
    """The observers of one branch or session, each with the signal types it wants.

    ``Branch.observe`` and ``Session.observe`` register here; the kernel reads the
    subscriptions when it delivers signals.
    """

    __slots__ = ("_subscriptions",)

    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []

    @overload
    def observe(self, *types: type[Signal], handler: Observer) -> Observer: ...
    @overload
    def observe(self, *types: type[Signal], handler: None = None) -> Callable[[Observer], Observer]: ...
    def observe(
        self, *types: type[Signal], handler: Observer | None = None
    ) -> Observer | Callable[[Observer], Observer]:
        """Call ``handler`` with every signal of ``types`` (all signals when none), in log order.

        Usable as a decorator. Handlers may be sync or async; one that raises is logged and
        changes nothing.
        """

        def register(func: Observer) -> Observer:
            self._subscriptions.append((tuple(types), func))
            return func

        return register(handler) if handler is not None else register

    def unobserve(self, handler: Observer) -> None:
        """Stop calling ``handler``."""
        self._subscriptions = [(t, h) for t, h in self._subscriptions if h is not handler]

    def subscriptions(self) -> list[Subscription]:
        """The ``(types, handler)`` pairs, in registration order (read them, do not change them).

        Not a copy: the kernel asks on every command. ``unobserve`` replaces the list, so a
        delivery already iterating keeps the list it started with.
        """
        return self._subscriptions

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._subscriptions))

    def __len__(self) -> int:
        return len(self._subscriptions)
