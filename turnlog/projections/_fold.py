"""The fold of a branch stream: ``apply(state, event) -> state``, pure.

``apply`` thaws the state into a builder, folds one event and freezes the result; ``fold``
(used by ``rebuild``) keeps one builder for a whole run of events. Both go through the same
rules, so an incremental state always equals a rebuilt one.

Rules (one per event type):

- ``branch.created`` starts a branch; ``branch.forked`` starts a fork from the parent state
  at ``parent_version`` (the caller passes that state; provider sessions are not inherited);
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

import dataclasses
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from turnlog._errors import UsageError
from turnlog.eventstore import RecordedEvent

from ._bulk import validate_messages
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
    decode_event,
)
from ._errors import FoldError, UnknownEventType
from ._messages import ActionRequest, ActionResponse, AnyMessage, AssistantResponse, Instruction, System
from ._redacted import visible, visible_many
from ._state import BranchState, ForkOrigin, RunInfo

__all__ = [
    "BRANCH_EVENT_TYPES",
    "Applier",
    "Appliers",
    "apply",
    "decode_many",
    "fold",
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


def _freeze_map(d: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A read-only view (the builder never writes to a dict it handed out: see ``_own``)."""
    return d if type(d) is MappingProxyType else MappingProxyType(d)


class _Builder:
    """Mutable twin of BranchState used while folding; ``freeze`` hands out immutable states.

    Dicts shared with a frozen state are copied before their first write (``_own`` flags);
    the message list is shared while this builder is its tip and copied otherwise.
    """

    __slots__ = (
        "action_links",
        "branch_id",
        "chat_model",
        "created_at",
        "forked_from",
        "index",
        "log",
        "metadata",
        "model_calls",
        "n",
        "name",
        "over",
        "own_index",
        "own_links",
        "own_over",
        "own_runs",
        "own_sessions",
        "parse_model",
        "position",
        "provider_cwds",
        "provider_sessions",
        "runs",
        "session_id",
        "start",
        "stream",
        "system",
        "updated_at",
        "user",
        "version",
    )

    def __init__(self, state: BranchState | None) -> None:
        if state is None:
            self.branch_id = ""
            self.stream = ""
            self.name = self.user = self.session_id = None
            self.system = None
            self.chat_model = self.parse_model = None
            self.metadata: Mapping[str, Any] = {}
            self.runs: dict[str, RunInfo] = {}
            self.provider_sessions: dict[tuple[str, str], str] = {}
            self.provider_cwds: dict[tuple[str, str], str] = {}
            self.action_links: dict[str, str] = {}
            self.forked_from = None
            self.version = self.position = self.model_calls = 0
            self.created_at = self.updated_at = None
            self.log: list[AnyMessage | None] = []
            self.n = self.start = 0
            self.index: dict[str, int] = {}
            self.over: dict[int, AnyMessage] = {}
            self.own_runs = self.own_sessions = self.own_links = self.own_over = self.own_index = True
            return
        self.branch_id = state.branch_id
        self.stream = f"branch-{state.branch_id}"
        self.name, self.user, self.session_id = state.name, state.user, state.session_id
        self.system = state.system
        self.chat_model, self.parse_model, self.metadata = state.chat_model, state.parse_model, state.metadata
        self.runs = state.runs  # type: ignore[assignment]  # read-only until copied
        self.provider_sessions = state.provider_sessions  # type: ignore[assignment]
        self.provider_cwds = state.provider_cwds  # type: ignore[assignment]
        self.action_links = state.action_links  # type: ignore[assignment]
        self.forked_from = state.forked_from
        self.version, self.position, self.model_calls = state.version, state.position, state.model_calls
        self.created_at, self.updated_at = state.created_at, state.updated_at
        self.log, self.n, self.start = state._log, state._n, state._start
        self.index = state._index
        self.over = state._over  # type: ignore[assignment]
        self.own_runs = self.own_sessions = self.own_links = self.own_over = self.own_index = False

    # ---------------------------------------------------------------------------- freezing

    def freeze(self) -> BranchState:
        state = object.__new__(BranchState)
        setter = object.__setattr__
        setter(state, "branch_id", self.branch_id)
        setter(state, "name", self.name)
        setter(state, "user", self.user)
        setter(state, "session_id", self.session_id)
        setter(state, "system", self.system)
        setter(state, "chat_model", self.chat_model)
        setter(state, "parse_model", self.parse_model)
        setter(state, "metadata", self.metadata)
        setter(state, "runs", _freeze_map(self.runs))
        setter(state, "provider_sessions", _freeze_map(self.provider_sessions))
        setter(state, "provider_cwds", _freeze_map(self.provider_cwds))
        setter(state, "action_links", _freeze_map(self.action_links))
        setter(state, "forked_from", self.forked_from)
        setter(state, "version", self.version)
        setter(state, "position", self.position)
        setter(state, "created_at", self.created_at)
        setter(state, "updated_at", self.updated_at)
        setter(state, "model_calls", self.model_calls)
        setter(state, "_log", self.log)
        setter(state, "_n", self.n)
        setter(state, "_start", self.start)
        setter(state, "_index", self.index)
        setter(state, "_over", self.over)
        setter(state, "_cache", None)
        # from now on the dicts belong to the state too: copy before the next write. The index
        # may keep growing in place with new keys only (see _append); an existing key never
        # changes in an index a frozen state holds
        self.own_runs = self.own_sessions = self.own_links = self.own_over = self.own_index = False
        return state

    # ------------------------------------------------------------------------------ folding

    def apply(self, event: RecordedEvent, data: EventData, appliers: Appliers | None = None) -> None:
        etype = event.type
        rule = _RULES.get(etype)
        if rule is None:
            extra = appliers.get(etype) if appliers is not None else None
            if extra is None:
                self._fail(
                    event, "not a branch event" if etype in CATALOGUE else "no fold rule is registered"
                )
            self._check_order(event)
            self._apply_extra(extra[1], data, event)  # type: ignore[index]
        elif etype == "branch.created" or etype == "branch.forked":
            rule(self, data, event)
        else:
            self._check_order(event)
            rule(self, data, event)
        self.version = event.version
        self.position = event.position
        self.updated_at = event.recorded_at

    def _fail(self, event: RecordedEvent, reason: str) -> None:
        if event.type not in CATALOGUE and reason == "no fold rule is registered":
            raise UnknownEventType(event.stream, event.version, event.type, reason, position=event.position)
        raise FoldError(event.stream, event.version, event.type, reason)

    def _check_order(self, event: RecordedEvent) -> None:
        if not self.branch_id:
            self._fail(event, "a branch stream must start with branch.created or branch.forked")
        if event.stream != self.stream:
            self._fail(event, f"the state is of stream {self.stream!r}")
        if event.version != self.version + 1:
            self._fail(event, f"the state is at version {self.version}; expected version {self.version + 1}")

    def _apply_extra(self, fn: Applier, data: EventData, event: RecordedEvent) -> None:
        result = fn(self.freeze(), data, event)
        if not isinstance(result, BranchState):
            self._fail(event, f"the fold rule returned {type(result).__name__}, not a BranchState")
        _Builder.__init__(self, result)

    # ---- branch lifecycle

    def created(self, data: BranchCreated, event: RecordedEvent) -> None:
        if self.branch_id:
            self._fail(event, f"branch {self.branch_id!r} already exists in this state")
        if event.version != 1 or event.stream != f"branch-{data.branch_id}":
            self._fail(event, f"branch.created for {data.branch_id!r} must be version 1 of its own stream")
        self.branch_id, self.stream = data.branch_id, event.stream
        self.name, self.user, self.session_id, self.system = (
            data.name,
            data.user,
            data.session_id,
            data.system,
        )
        self.chat_model = _freeze_map(dict(data.chat_model)) if data.chat_model is not None else None
        self.parse_model = _freeze_map(dict(data.parse_model)) if data.parse_model is not None else None
        self.metadata = _freeze_map(dict(data.metadata))
        self.created_at = event.recorded_at

    def user_set(self, data: BranchUserSet, event: RecordedEvent) -> None:
        self.user = data.user

    def forked(self, data: BranchForked, event: RecordedEvent) -> None:
        if event.version != 1 or event.stream != f"branch-{data.branch_id}":
            self._fail(event, f"branch.forked for {data.branch_id!r} must be version 1 of its own stream")
        if self.branch_id != data.parent_branch_id or self.version != data.parent_version:
            self._fail(
                event,
                f"needs the state of branch {data.parent_branch_id!r} at version {data.parent_version}, "
                f"got {self.branch_id or 'no branch'!r} at version {self.version}",
            )
        self.forked_from = ForkOrigin(data.parent_branch_id, data.parent_stream, data.parent_version)
        self.branch_id, self.stream = data.branch_id, event.stream
        if data.name is not None:
            self.name = data.name
        # a provider session carries the provider's own transcript, which may hold turns after
        # the fork point: a fork starts without one
        self.provider_sessions, self.provider_cwds, self.own_sessions = {}, {}, True
        self.created_at = event.recorded_at
        self.version = 0

    # ---- messages

    def added(self, data: MessageAdded | _Added, event: RecordedEvent) -> None:
        self.add(data.message)

    def add(self, msg: AnyMessage) -> None:
        """The message.added rule on the validated message (``_fold_batch`` calls it directly)."""
        if type(msg) is System:
            self.system = msg
            return
        links = self.action_links
        if links and type(msg) is ActionRequest and msg.id in links:
            msg = _linked(msg, links[msg.id])
        index = self.index
        slot = index.get(msg.id)
        if slot is None:
            n, log = self.n, self.log
            if len(log) == n:
                # the common case, _append's first step inlined: a new message at the tip
                log.append(msg)
                index[msg.id] = n
                self.n = n + 1
            else:
                self._append(msg, overwrite=False)
        elif self.start <= slot < self.n:
            self._set_over(slot, msg)
        else:
            self._append(msg, overwrite=True)
        if type(msg) is ActionResponse and msg.content.action_request_id is not None:
            self._link(msg.content.action_request_id, msg.id)

    def _append(self, msg: AnyMessage, *, overwrite: bool) -> None:
        n = self.n
        if len(self.log) != n:
            existing = self.log[n]
            if existing is not None and (existing is msg or existing == msg) and self.index.get(msg.id) == n:
                # refolding the same history (e.g. from a cached checkpoint): the slot already
                # holds this very message, so step over it instead of copying
                self.n = n + 1
                return
            # another state already grew this list past our end: continue on a private copy
            self.log = self.log[:n]
            self.index = {k: v for k, v in self.index.items() if v < n}
            self.own_index = True
        elif overwrite and not self.own_index:
            # an existing key points at an older slot that other states still resolve
            self.index = dict(self.index)
            self.own_index = True
        self.log.append(msg)
        self.index[msg.id] = n
        self.n = n + 1

    def _set_over(self, slot: int, msg: AnyMessage) -> None:
        if not self.own_over:
            self.over = dict(self.over)
            self.own_over = True
        self.over[slot] = msg

    def _link(self, request_id: str, response_id: str) -> None:
        if not self.own_links:
            self.action_links = dict(self.action_links)
            self.own_links = True
        self.action_links[request_id] = response_id
        slot = self.index.get(request_id)
        if slot is not None and self.start <= slot < self.n:
            current = self.over.get(slot) or self.log[slot]
            if type(current) is ActionRequest and current.id == request_id:
                self._set_over(slot, _linked(current, response_id))

    def annotated(self, data: MessageAnnotated, event: RecordedEvent) -> None:
        mid = data.message_id
        if self.system is not None and self.system.id == mid:
            self.system = _annotate(self.system, data.metadata)
            return
        slot = self.index.get(mid)
        if slot is not None and self.start <= slot < self.n:
            current = self.over.get(slot) or self.log[slot]
            if current is not None and current.id == mid:
                self._set_over(slot, _annotate(current, data.metadata))
        # an annotation of a message outside the view (cleared, or never added) changes nothing

    def cleared(self, data: EventData, event: RecordedEvent) -> None:
        self.start = self.n
        if self.over:
            self.over, self.own_over = {}, True

    # ---- provider, model calls, runs

    def session_bound(self, data: ProviderSessionBound, event: RecordedEvent) -> None:
        if not self.own_sessions:
            self.provider_sessions = dict(self.provider_sessions)
            self.provider_cwds = dict(self.provider_cwds)
            self.own_sessions = True
        key = (data.provider, data.model)
        self.provider_sessions[key] = data.session_id
        if data.cwd is not None:
            self.provider_cwds[key] = data.cwd
        else:
            self.provider_cwds.pop(key, None)

    def model_called(self, data: ModelCalled, event: RecordedEvent) -> None:
        self.model_calls += 1

    def _set_run(self, run: RunInfo) -> None:
        if not self.own_runs:
            self.runs = dict(self.runs)
            self.own_runs = True
        self.runs[run.run_id] = run

    def run_started(self, data: RunStarted, event: RecordedEvent) -> None:
        # a repeated run.started restarts the record: the log's latest word wins
        self._set_run(
            RunInfo(
                run_id=data.run_id,
                verb=data.verb,
                started_at=event.recorded_at,
                parent_run_id=data.parent_run_id,
                provider=data.provider,
                model=data.model,
            )
        )

    def _end_run(self, data: RunEnded | RunFailed, event: RecordedEvent, **outcome: Any) -> None:
        """Close a run (one started earlier, or one only its end names) with its outcome."""
        base = self.runs.get(data.run_id) or RunInfo(run_id=data.run_id, verb=data.verb)
        self._set_run(
            dataclasses.replace(
                base,
                verb=data.verb,
                ended_at=event.recorded_at,
                duration_ms=data.duration_ms,
                usage=data.usage,
                **outcome,
            )
        )

    def run_ended(self, data: RunEnded, event: RecordedEvent) -> None:
        self._end_run(data, event, status="ended", chunks=data.chunks)

    def run_failed(self, data: RunFailed, event: RecordedEvent) -> None:
        self._end_run(
            data,
            event,
            status="failed",
            error_type=data.error_type,
            error_message=data.error_message,
            reason=data.reason,
            recovered=dict(data.recovered) if data.recovered is not None else None,
        )


_RULES: dict[str, Callable[[_Builder, Any, RecordedEvent], None]] = {
    "branch.created": _Builder.created,
    "branch.forked": _Builder.forked,
    "branch.user_set": _Builder.user_set,
    "message.added": _Builder.added,
    "message.annotated": _Builder.annotated,
    "messages.cleared": _Builder.cleared,
    "provider.session_bound": _Builder.session_bound,
    "model.called": _Builder.model_called,
    "run.started": _Builder.run_started,
    "run.ended": _Builder.run_ended,
    "run.failed": _Builder.run_failed,
}
assert frozenset(_RULES) == BRANCH_EVENT_TYPES


def _linked(request: ActionRequest, response_id: str) -> ActionRequest:
    content = request.content.model_copy(update={"action_response_id": response_id})
    return request.model_copy(update={"content": content})


def _annotate(msg: Any, metadata: Mapping[str, Any]) -> Any:
    return msg.model_copy(update={"metadata": {**msg.metadata, **metadata}})


class _Added(NamedTuple):
    """A validated ``message.added`` payload without the wrapper model (the fold's hot path)."""

    message: AnyMessage
    run_id: str | None


_KINDS: dict[str, type[BaseModel]] = {
    cls.__name__: cls for cls in (System, Instruction, AssistantResponse, ActionRequest, ActionResponse)
}
_ADDED_KEYS = frozenset({"message", "run_id"})


def _decode_added(data: Any) -> _Added | None:
    """Validate a message.added payload strictly and fast; None means: take the general path.

    Strict mode skips coercions that JSON-decoded data never needs; anything it refuses is
    validated again the general (lax) way, so the result never depends on which path ran.
    """
    if type(data) is not dict or not data.keys() <= _ADDED_KEYS:
        return None
    message, run_id = data.get("message"), data.get("run_id")
    cls = _KINDS.get(message.get("kind")) if type(message) is dict else None  # type: ignore[arg-type]
    if cls is None or not (run_id is None or type(run_id) is str):
        return None
    try:
        return _Added(cls.model_validate(message, strict=True), run_id)  # type: ignore[arg-type]
    except ValidationError:
        return None


_MESSAGE_LIST: TypeAdapter[list[AnyMessage]] = TypeAdapter(list[AnyMessage])


def decode_many(events: Sequence[RecordedEvent], appliers: Appliers | None = None) -> list[Any]:
    """Validated payloads of ``events``, in order; the same results as decoding one by one.

    The messages of ``message.added`` events are validated in one call (strictly), which
    saves the per-call overhead of the validator on long runs of messages. If any of them is
    refused, every event is decoded on its own, so errors and results never depend on batching.
    """
    events = visible_many(events)
    out = _decode_batch(events, appliers)
    for i, data in enumerate(out):
        if type(data) in _MESSAGE_TYPES:
            out[i] = _Added(data, events[i].data.get("run_id"))
    return out


_MESSAGE_TYPES = frozenset(_KINDS.values())


def _wrap(event: RecordedEvent, data: Any) -> Any:
    """The ``_Added`` payload for a bare message from ``_decode_batch``; anything else as is."""
    return _Added(data, event.data.get("run_id")) if type(data) in _MESSAGE_TYPES else data


def _decode_batch(events: Sequence[RecordedEvent], appliers: Appliers | None) -> list[Any]:
    """``decode_many``, except that a batch-validated message.added payload is the bare message.

    The fold needs only the message of a ``message.added`` payload (its ``run_id`` is checked
    here, then unused), so the fold's hot path skips the ``_Added`` wrapper. Every other entry
    is what ``_decode`` returns (an ``EventData`` or an ``_Added``), never a message.
    """
    events = visible_many(events)
    picked: list[int] = []
    messages: list[Any] = []
    for i, event in enumerate(events):
        if event.type != "message.added" or event.schema != 1:
            continue
        data = event.data
        if type(data) is not dict or not data.keys() <= _ADDED_KEYS:
            continue
        run_id = data.get("run_id")
        if run_id is None or type(run_id) is str:
            picked.append(i)
            messages.append(data.get("message"))
    if len(picked) < 2:
        return [_decode(e, appliers) for e in events]
    # the bulk path first; what it does not take as is, pydantic validates (strictly) in one
    # call; if that refuses too, every event is decoded on its own (errors name the event)
    validated = validate_messages(messages)
    if validated is None:
        try:
            validated = _MESSAGE_LIST.validate_python(messages, strict=True)
        except ValidationError:
            return [_decode(e, appliers) for e in events]
    if len(picked) == len(events):
        return validated
    out: list[Any] = [None] * len(events)
    for i, message in zip(picked, validated, strict=True):
        out[i] = message
    for i, event in enumerate(events):
        if out[i] is None:
            out[i] = _decode(event, appliers)
    return out


def _decode(event: RecordedEvent, appliers: Appliers | None) -> Any:
    """The validated payload of ``event`` (an EventData, or ``_Added`` for message.added)."""
    event = visible(event)
    if event.type == "message.added" and event.schema == 1:
        added = _decode_added(event.data)
        if added is not None:
            return added
    schema = CATALOGUE.get(event.type)
    if schema is None and appliers is not None:
        extra = appliers.get(event.type)
        if extra is not None:
            schema = extra[0]
    if schema is None:
        raise UnknownEventType(
            event.stream, event.version, event.type, "no schema is registered", position=event.position
        )
    if event.schema == schema.schema_version:
        try:
            return schema.model_validate(event.data)
        except ValueError:
            pass  # decode_event raises the error naming stream, version and type
    registry = CATALOGUE.copy()
    if schema.event_type not in registry:
        registry.register(schema)
    return decode_event(event, registry)


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
    builder = _Builder(state)
    builder.apply(event, data if data is not None else _decode(event, appliers), appliers)
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
    builder = _Builder(state)
    folded = False
    with gc_paused():
        batch: list[RecordedEvent] = []
        for event in events:
            batch.append(event)
            if len(batch) >= _BATCH:
                _fold_batch(builder, batch, appliers)
                batch, folded = [], True
        if batch:
            _fold_batch(builder, batch, appliers)
            folded = True
    return builder.freeze() if folded or state is not None else None


_BATCH = 256


def _fold_batch(
    builder: _Builder,
    events: Sequence[RecordedEvent],
    appliers: Appliers | None,
    every: int = 0,
    on_checkpoint: Callable[[BranchState], None] | None = None,
) -> None:
    """Decode ``events`` together and fold them into ``builder`` in order.

    With ``every`` and ``on_checkpoint``, the state after each version that is a multiple of
    ``every`` is frozen and handed to ``on_checkpoint``.
    """
    kinds = _MESSAGE_TYPES
    checkpoints = bool(every) and on_checkpoint is not None
    for event, data in zip(events, _decode_batch(events, appliers), strict=True):
        # a batch-validated message.added in order on this branch: the same steps as
        # builder.apply (order checks, the rule, version/position/time), inlined for speed;
        # anything else, including every failure, goes through builder.apply
        cls = type(data)
        if (
            cls in kinds
            and event.version == builder.version + 1
            and event.stream == builder.stream
            and builder.branch_id
        ):
            n, log, index = builder.n, builder.log, builder.index
            if (cls is Instruction or cls is AssistantResponse) and len(log) == n and data.id not in index:
                # the common case of builder.add inlined: a new message (of a kind that
                # neither replaces the system message nor links actions) at the tip
                log.append(data)
                index[data.id] = n
                builder.n = n + 1
            else:
                builder.add(data)
            builder.version = event.version
            builder.position = event.position
            builder.updated_at = event.recorded_at
        else:
            builder.apply(event, _wrap(event, data), appliers)
        if checkpoints and event.version % every == 0:
            on_checkpoint(builder.freeze())  # type: ignore[misc]
