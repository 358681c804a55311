"""Commands: what a verb asks the Kernel to do to one branch.

A command is validated against the branch's current state and turned into catalogue event
payloads (``build``); the Kernel appends them, folds them and announces them. A command
whose meaning does not depend on where it lands in the stream is ``reorderable``: after a
concurrency conflict the Kernel folds the other writer's events and tries it again.

A run's terminal (``EndRun``, ``FailRun``, or a ``run.ended`` / ``run.failed`` inside
``AddMessages``) is conditional on the run being open in that state: ``RunClosed`` otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

from turnlog.kernel._errors import RunClosed, UsageError
from turnlog.kernel.models import Usage
from turnlog.projections import (
    AnyMessage,
    BranchCreated,
    BranchForked,
    BranchState,
    EventData,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
)

__all__ = [
    "AddMessages",
    "AnnotateMessage",
    "BindProviderSession",
    "ClearMessages",
    "Command",
    "CreateBranch",
    "EndRun",
    "FailRun",
    "StartRun",
]


class Command(Protocol):
    """Something to do to one branch: validated against its state, turned into event payloads."""

    reorderable: ClassVar[bool]
    """True when the command means the same wherever it lands in the stream."""

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        """The payloads to append, given the current state (None before the stream exists).

        Raise ``UsageError`` to refuse.
        """
        ...


def _payload(schema: type[EventData], command: Any, **converted: Any) -> EventData:
    """The ``schema`` payload holding a command's fields (``converted`` replaces some of them)."""
    values = {f.name: getattr(command, f.name) for f in fields(command)}
    return schema(**(values | converted))


def _require_open(state: BranchState | None, run_id: str) -> None:
    """``RunClosed`` unless ``run_id`` is running in ``state``: a run gets one terminal, after its start.

    The Kernel builds a command against the state folded to the version its append expects,
    and builds it again after a conflict, so this check and the append are one decision.
    """
    run = state.runs.get(run_id) if state is not None else None
    if run is None:
        raise RunClosed(run_id, "not started")
    if run.status != "running":
        raise RunClosed(run_id, run.status)


def _has_message(state: BranchState | None, message_id: str) -> bool:
    return state is not None and state.message(message_id) is not None


@dataclass(frozen=True, slots=True)
class CreateBranch:
    """Start the branch stream with ``branch.created`` or ``branch.forked`` (version 1).

    ``then``, the branch's first command, is recorded in the same append: a new branch and
    its first messages cost one commit instead of two.
    """

    reorderable: ClassVar[bool] = False
    data: BranchCreated | BranchForked
    then: AddMessages | None = None

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        if state is not None:
            raise UsageError(f"branch {self.data.branch_id} exists already")
        return (self.data, *(self.then.build(None) if self.then is not None else ()))


@dataclass(frozen=True, slots=True)
class AddMessages:
    """Append messages and model-call records as one atomic batch, in the given order.

    ``items`` holds ``message.added`` and ``model.called`` payloads; message ids must be new.
    """

    reorderable: ClassVar[bool] = True
    items: tuple[EventData, ...]

    @classmethod
    def of(cls, messages: Iterable[AnyMessage], *, run_id: str | None = None) -> AddMessages:
        """Record ``messages`` (``message.added`` each, carrying ``run_id``), in order."""
        return cls(tuple(MessageAdded(message=m, run_id=run_id) for m in messages))

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        seen: set[str] = set()
        started: set[str] = set()  # a run may start and end in one batch (a call recorded whole)
        for item in self.items:
            if isinstance(item, MessageAdded):
                mid = item.message.id
                if mid in seen or _has_message(state, mid):
                    raise UsageError(f"message {mid} is recorded in this branch already")
                seen.add(mid)
            elif isinstance(item, RunStarted):
                started.add(item.run_id)
            elif isinstance(item, RunEnded | RunFailed):
                if item.run_id in started:
                    started.discard(item.run_id)  # one terminal per run, in a batch too
                else:
                    _require_open(state, item.run_id)  # recover closes a run this way
        return self.items


@dataclass(frozen=True, slots=True)
class AnnotateMessage:
    """Merge metadata into a recorded message's view (``message.annotated``)."""

    reorderable: ClassVar[bool] = False
    message_id: str
    metadata: Mapping[str, Any]
    reason: str | None = None

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        if not _has_message(state, self.message_id):
            raise UsageError(f"message {self.message_id} is not in this branch")
        return (_payload(MessageAnnotated, self, metadata=dict(self.metadata)),)


@dataclass(frozen=True, slots=True)
class ClearMessages:
    """Every message leaves the view except the system message (``messages.cleared``)."""

    reorderable: ClassVar[bool] = False

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        return (MessagesCleared(),)


@dataclass(frozen=True, slots=True)
class BindProviderSession:
    """Remember the provider session to resume (``provider.session_bound``)."""

    reorderable: ClassVar[bool] = False
    provider: str
    model: str
    session_id: str
    cwd: str | None = None

    def build(self, state: BranchState | None) -> Sequence[EventData]:
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

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        return (_payload(RunStarted, self),)


@dataclass(frozen=True, slots=True)
class EndRun:
    """``run.ended`` with the duration and the usage of this run only."""

    reorderable: ClassVar[bool] = True
    run_id: str
    verb: str
    duration_ms: float
    usage: Usage = Usage.NONE
    chunks: int | None = None

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        _require_open(state, self.run_id)
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

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        _require_open(state, self.run_id)
        recovered = dict(self.recovered) if self.recovered is not None else None
        return (_payload(RunFailed, self, usage=self.usage, recovered=recovered),)
