"""The fold of a branch stream: ``apply(state, event) -> state``, pure.

``apply`` thaws the state into a builder, folds one event and freezes the result; ``fold``
(used by ``rebuild``) keeps one builder for a whole run of events. Both go through the same
rules, so an incremental state always equals a rebuilt one.

Rules (one per event type):

- ``branch.created`` starts a branch; ``branch.forked`` starts a fork from the parent state
  at ``parent_version`` (the caller passes that state; provider sessions and the runs still
  open at that version are not inherited);
- ``branch.user_set`` changes the user the branch talks for;
- ``message.added`` appends the message, or replaces the message with the same id in place;
  a System message replaces the system message instead; an ActionResponse links its request
  (the request's view gets ``content.action_response_id``);
- ``message.annotated`` merges metadata into the message's view (the recorded message stays);
- ``messages.cleared`` empties the view but keeps the system message;
- ``provider.session_bound`` binds a provider session id per (provider, model);
- ``model.called`` counts the call; ``run.*`` track each run's status, times, usage, error.

Events of other streams (``stream.chunk``, ``session.*``, ``node.*``) are not branch events and
raise ``FoldError``; a type that is neither in the catalogue nor registered in ``Appliers``
raises ``UnknownEventType``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, TypeVar

from turnlog._errors import UsageError
from turnlog.eventstore import RecordedEvent

from ._catalogue import (
    CATALOGUE,
    BranchCreated,
    BranchForked,
    BranchUserSet,
    EventData,
    MessageAdded,
    MessageAnnotated,
    ModelCalled,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
)
from ._decode import MESSAGE_TYPES, Payload, decode, decode_payloads
from ._errors import FoldError, UnknownEventType
from ._messages import AnyMessage
from ._state import BranchState, ForkOrigin, RunInfo, StateBuilder

__all__ = [
    "BRANCH_EVENT_TYPES",
    "Applier",
    "Appliers",
    "BATCH",
    "apply",
    "apply_decoded",
    "decode_branch_event",
    "fold",
    "fold_into",
    "gc_paused",
]

Applier = Callable[[BranchState, Any, RecordedEvent], BranchState]
"""A fold rule for an extra event type: ``(state, data, event) -> new state`` (pure)."""

A = TypeVar("A", bound=Applier)

BRANCH_EVENT_TYPES = frozenset(
    {
        "branch.created",
        "branch.forked",
        "branch.user_set",
        "message.added",
        "message.annotated",
        "messages.cleared",
        "provider.session_bound",
        "model.called",
        "run.started",
        "run.ended",
        "run.failed",
    }
)
"""The catalogue's branch stream event types; ``apply`` handles each of them."""


class Appliers:
    """Fold rules for event types outside the catalogue.

    Example:
        >>> class NoteAdded(EventData):
        ...     event_type: ClassVar[str] = "note.added"
        ...     text: str
        >>> extra = Appliers()
        >>> @extra.register(NoteAdded)
        ... def _note(state, data, event):
        ...     return state.evolve(metadata={**state.metadata, "note": data.text})

    Pass ``appliers=extra`` to ``apply``, ``fold`` and ``rebuild``. The version, position and
    ``updated_at`` of the result are set by the fold, not by the rule.
    """

    __slots__ = ("_rules",)

    def __init__(self) -> None:
        self._rules: dict[str, tuple[type[EventData], Applier]] = {}

    def register(self, schema: type[EventData]) -> Callable[[A], A]:
        """Register a rule for ``schema.event_type`` (a decorator)."""
        name = schema.event_type
        if name in CATALOGUE:
            raise UsageError(f"{name!r} is a catalogue type; its fold rule cannot be replaced")

        def decorate(fn: A) -> A:
            if name in self._rules:
                raise UsageError(f"a fold rule for {name!r} is already registered")
            self._rules[name] = (schema, fn)
            return fn

        return decorate

    def get(self, type_name: str) -> tuple[type[EventData], Applier] | None:
        """The schema and rule registered for ``type_name``, or None."""
        return self._rules.get(type_name)

    def schema(self, type_name: str) -> type[EventData] | None:
        """The schema registered for ``type_name``, or None."""
        found = self._rules.get(type_name)
        return found[0] if found is not None else None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a fold allocates many long-lived objects.

    A fold creates a few container objects per message and keeps them all; with the collector
    on, its generational passes over that growing heap cost more than the fold itself (about
    3x on a long branch). Folds create no reference cycles, so nothing is lost by waiting:
    the collector is switched back on (when it was on) as soon as the fold ends or fails.

    On the way out, every tracked object is moved into the oldest generation (``gc.freeze``
    then ``gc.unfreeze``: two constant-time list splices). Otherwise the first allocation
    after ``gc.enable`` runs a young collection over everything the fold made (about 30% of
    a long fold's time), only to find it all alive. Nothing escapes collection: the
    objects are still examined by the next full collection, which also finds any cycle of
    them. It is skipped when the process keeps objects frozen itself (``gc.freeze`` before a
    fork), since ``gc.unfreeze`` would thaw those too.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# ------------------------------------------------------------------------------------- the rules


def _fail(event: RecordedEvent, reason: str) -> FoldError:
    return FoldError(event.stream, event.version, event.type, reason)


def _check_order(b: StateBuilder, event: RecordedEvent) -> None:
    if not b.branch_id:
        raise _fail(event, "a branch stream must start with branch.created or branch.forked")
    if event.stream != b.stream:
        raise _fail(event, f"the state is of stream {b.stream!r}")
    if event.version != b.version + 1:
        raise _fail(event, f"the state is at version {b.version}; expected version {b.version + 1}")


def _created(b: StateBuilder, data: BranchCreated, event: RecordedEvent) -> None:
    if b.branch_id:
        raise _fail(event, f"branch {b.branch_id!r} already exists in this state")
    if event.version != 1 or event.stream != f"branch-{data.branch_id}":
        raise _fail(event, f"branch.created for {data.branch_id!r} must be version 1 of its own stream")
    b.branch_id, b.stream = data.branch_id, event.stream
    b.name, b.user, b.session_id, b.system = data.name, data.user, data.session_id, data.system
    b.chat_model = MappingProxyType(dict(data.chat_model)) if data.chat_model is not None else None
    b.parse_model = MappingProxyType(dict(data.parse_model)) if data.parse_model is not None else None
    b.metadata = MappingProxyType(dict(data.metadata))
    b.created_at = event.recorded_at


def _forked(b: StateBuilder, data: BranchForked, event: RecordedEvent) -> None:
    if event.version != 1 or event.stream != f"branch-{data.branch_id}":
        raise _fail(event, f"branch.forked for {data.branch_id!r} must be version 1 of its own stream")
    if b.branch_id != data.parent_branch_id or b.version != data.parent_version:
        raise _fail(
            event,
            f"needs the state of branch {data.parent_branch_id!r} at version {data.parent_version}, "
            f"got {b.branch_id or 'no branch'!r} at version {b.version}",
        )
    b.forked_from = ForkOrigin(data.parent_branch_id, data.parent_stream, data.parent_version)
    b.branch_id, b.stream = data.branch_id, event.stream
    if data.name is not None:
        b.name = data.name
    # a provider session carries the provider's own transcript, which may hold turns after
    # the fork point: a fork starts without one
    b.drop_sessions()
    # A run still open at the fork point goes on (and ends) in the parent, never in the fork:
    # inherited, it would show "running" forever and no writer or recover would close it.
    # The fork keeps the messages that run recorded up to the fork point, not the run.
    b.drop_open_runs()
    b.created_at = event.recorded_at
    b.version = 0


def _user_set(b: StateBuilder, data: BranchUserSet, event: RecordedEvent) -> None:
    b.user = data.user


def _added(b: StateBuilder, data: MessageAdded | AnyMessage, event: RecordedEvent) -> None:
    b.add(data.message if isinstance(data, MessageAdded) else data)


def _annotated(b: StateBuilder, data: MessageAnnotated, event: RecordedEvent) -> None:
    b.annotate(data.message_id, data.metadata)


def _cleared(b: StateBuilder, data: EventData, event: RecordedEvent) -> None:
    b.clear()


def _session_bound(b: StateBuilder, data: ProviderSessionBound, event: RecordedEvent) -> None:
    b.bind_session(data.provider, data.model, data.session_id, data.cwd)


def _model_called(b: StateBuilder, data: ModelCalled, event: RecordedEvent) -> None:
    b.model_calls += 1


def _run_started(b: StateBuilder, data: RunStarted, event: RecordedEvent) -> None:
    # a repeated run.started restarts the record: the log's latest word wins
    b.put_run(
        RunInfo(
            run_id=data.run_id,
            verb=data.verb,
            started_at=event.recorded_at,
            parent_run_id=data.parent_run_id,
            provider=data.provider,
            model=data.model,
        )
    )


def _run_ended(b: StateBuilder, data: RunEnded, event: RecordedEvent) -> None:
    b.end_run(
        data.run_id,
        data.verb,
        ended_at=event.recorded_at,
        duration_ms=data.duration_ms,
        usage=data.usage,
        status="ended",
        chunks=data.chunks,
    )


def _run_failed(b: StateBuilder, data: RunFailed, event: RecordedEvent) -> None:
    b.end_run(
        data.run_id,
        data.verb,
        ended_at=event.recorded_at,
        duration_ms=data.duration_ms,
        usage=data.usage,
        status="failed",
        error_type=data.error_type,
        error_message=data.error_message,
        reason=data.reason,
        recovered=dict(data.recovered) if data.recovered is not None else None,
    )


_Rule = Callable[[StateBuilder, Any, RecordedEvent], None]
_RULES: dict[str, _Rule] = {
    "branch.created": _created,
    "branch.forked": _forked,
    "branch.user_set": _user_set,
    "message.added": _added,
    "message.annotated": _annotated,
    "messages.cleared": _cleared,
    "provider.session_bound": _session_bound,
    "model.called": _model_called,
    "run.started": _run_started,
    "run.ended": _run_ended,
    "run.failed": _run_failed,
}
assert frozenset(_RULES) == BRANCH_EVENT_TYPES
_STARTS = frozenset({"branch.created", "branch.forked"})


def _step(b: StateBuilder, event: RecordedEvent, data: Payload, appliers: Appliers | None) -> None:
    """Fold one event into the builder: the order checks, the rule, then version/position/time."""
    etype = event.type
    rule = _RULES.get(etype)
    if rule is not None:
        if etype not in _STARTS:
            _check_order(b, event)
        rule(b, data, event)
    else:
        extra = appliers.get(etype) if appliers is not None else None
        if extra is None:
            if etype in CATALOGUE:
                raise _fail(event, "not a branch event")
            raise UnknownEventType(
                event.stream, event.version, etype, "no fold rule is registered", position=event.position
            )
        _check_order(b, event)
        result = extra[1](b.freeze(), data, event)
        if not isinstance(result, BranchState):
            raise _fail(event, f"the fold rule returned {type(result).__name__}, not a BranchState")
        b.thaw(result)
    b.version = event.version
    b.position = event.position
    b.updated_at = event.recorded_at


# --------------------------------------------------------------------------------- entry points


def apply(
    state: BranchState | None,
    event: RecordedEvent,
    data: EventData | None = None,
    *,
    appliers: Appliers | None = None,
) -> BranchState:
    """Fold one recorded event into ``state`` and return the new state; ``state`` is unchanged.

    Args:
        state: The state before the event: None for ``branch.created``, the parent's state at
            ``parent_version`` for ``branch.forked``.
        event: The recorded event (its version must follow ``state.version``).
        data: The decoded payload when the caller has it already; decoded (and validated) from
            ``event.data`` otherwise.
        appliers: Fold rules for event types outside the catalogue.

    Raises:
        EventDecodeError: the payload does not validate.
        UnknownEventType: the type has no schema or no fold rule.
        FoldError: the event does not fit the state (order, stream, non-branch type, fork parent).
    """
    builder = StateBuilder(state)
    if data is None:
        [payload] = decode_payloads([event], _schemas(appliers))
    else:
        payload = data
    _step(builder, event, payload, appliers)
    return builder.freeze()


def apply_decoded(
    state: BranchState | None,
    events: Sequence[RecordedEvent],
    datas: Sequence[EventData],
    *,
    appliers: Appliers | None = None,
) -> BranchState | None:
    """Fold recorded events whose payloads the caller holds; the same as ``apply`` on each in turn.

    A writer folding what it just appended (the kernel: three to five events a turn) has the
    validated payloads already; one builder for the batch thaws and freezes the state once
    instead of once per event. Returns ``state`` itself when there is no event.

    Raises:
        ValueError: ``events`` and ``datas`` differ in length.
        UnknownEventType, FoldError: as ``apply``, for the first event that does not fold
            (nothing is returned then, and ``state`` is unchanged).
    """
    if len(events) != len(datas):
        raise ValueError(f"{len(events)} events but {len(datas)} payloads")
    if not events:
        return state
    builder = StateBuilder(state)
    for event, data in zip(events, datas, strict=True):
        _step(builder, event, data, appliers)
    return builder.freeze()


def fold(
    events: Iterable[RecordedEvent],
    state: BranchState | None = None,
    *,
    appliers: Appliers | None = None,
) -> BranchState | None:
    """Fold ``events`` in order, starting from ``state``; the same as repeated ``apply``, faster.

    Returns None only when there is no state and no event.
    """
    builder = StateBuilder(state)
    folded = False
    with gc_paused():
        batch: list[RecordedEvent] = []
        for event in events:
            batch.append(event)
            if len(batch) >= BATCH:
                fold_into(builder, batch, appliers)
                batch, folded = [], True
        if batch:
            fold_into(builder, batch, appliers)
            folded = True
    return builder.freeze() if folded or state is not None else None


BATCH = 256
"""Events decoded together by ``fold`` and ``rebuild``."""


def _schemas(appliers: Appliers | None) -> Callable[[str], type[EventData] | None] | None:
    return appliers.schema if appliers is not None else None


def decode_branch_event(event: RecordedEvent, appliers: Appliers | None = None) -> EventData:
    """The payload model of one branch event, with the schemas of ``appliers`` (for listings)."""
    return decode(event, _schemas(appliers))


def fold_into(
    builder: StateBuilder,
    events: Sequence[RecordedEvent],
    appliers: Appliers | None = None,
    every: int = 0,
    on_checkpoint: Callable[[BranchState], None] | None = None,
) -> None:
    """Decode ``events`` together and fold them into ``builder`` in order.

    With ``every`` and ``on_checkpoint``, the state after each version that is a multiple of
    ``every`` is frozen and handed to ``on_checkpoint``.
    """
    kinds = MESSAGE_TYPES
    checkpoints = on_checkpoint if every else None
    add = builder.add
    for event, data in zip(events, decode_payloads(events, _schemas(appliers)), strict=True):
        if (
            type(data) in kinds
            and event.version == builder.version + 1
            and event.stream == builder.stream
            and builder.branch_id
        ):
            # a message in order on this branch (most events of a long branch): the checks of
            # _step passed already, so only the message.added rule and the step remain
            add(data)  # type: ignore[arg-type]
            builder.version = event.version
            builder.position = event.position
            builder.updated_at = event.recorded_at
        else:
            _step(builder, event, data, appliers)
        if checkpoints is not None and event.version % every == 0:
            checkpoints(builder.freeze())
