"""BranchState: the fold of a branch stream, an immutable view of one branch at one version.

The state shares its message storage with the states it was folded from and into: a branch's
recorded messages live in an append-only list, and every state knows how many slots of it are
its own (``_n``) and where its view starts (``_start``, moved by ``messages.cleared``). Messages
whose view differs from what was recorded (annotated metadata, the derived
``action_response_id`` link, an upsert by id) are kept per state in ``_over`` (slot -> message).
Appending to a state that is the tip of its list is therefore O(1); appending to an older state
copies first. No state ever sees a change after it was made.

This module owns that storage: ``StateBuilder`` (the mutable twin the fold works on) and the
snapshot support of ``BranchState`` (``slot_bounds``, ``recorded_slots``, ``restored``, ...)
are the only code that reads or writes it. That is why the builder lives here and the module is
longer than most: split in two, one half would have to reach into the other's private slots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer

from ._messages import ActionRequest, ActionResponse, AnyMessage, AssistantResponse, Instruction, System
from ._runs import RunTable
from ._usage import Usage

__all__ = ["BranchState", "ForkOrigin", "IsoTime", "MessageView", "RunInfo", "RunStatus", "StateBuilder"]

RunStatus = Literal["running", "ended", "failed"]


def _parse_time(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


IsoTime = Annotated[
    datetime | None,
    BeforeValidator(_parse_time),
    PlainSerializer(lambda t: t.isoformat() if t is not None else None, return_type=str | None),
]
"""A time stored as ``isoformat()`` text and read back with ``datetime.fromisoformat``.

Snapshots store times this way: a time reads back as the very value the fold made (timezone
object included), not as pydantic's own timezone class, and the stored text is the one it
always was.
"""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the branch log says about one run.

    Attributes:
        run_id: The run id (its chunks are in ``run-<run_id>``).
        verb: The verb that ran.
        status: ``running`` until ``run.ended`` or ``run.failed`` is folded.
        started_at: ``recorded_at`` of ``run.started`` (None when the log has no start).
        ended_at: ``recorded_at`` of the terminal event.
        duration_ms: Duration reported by the terminal event.
        usage: Usage of this run.
        parent_run_id: The enclosing run, if nested.
        provider: The provider used.
        model: The model used.
        chunks: Stream chunks recorded (streamed runs).
        error_type: Error class name of a failed run.
        error_message: Error message of a failed run.
        reason: Why a failed run failed (error, cancelled, timeout, crashed).
        recovered: What recovery materialized for a crashed run.
    """

    run_id: str
    verb: str
    status: RunStatus = "running"
    started_at: IsoTime = None
    ended_at: IsoTime = None
    duration_ms: float | None = None
    usage: Usage = Usage.NONE
    parent_run_id: str | None = None
    provider: str | None = None
    model: str | None = None
    chunks: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    reason: str | None = None
    recovered: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork starts.

    Attributes:
        parent_branch_id: The branch forked from.
        parent_stream: Its stream name.
        parent_version: The last parent version included in the fork.
    """

    parent_branch_id: str
    parent_stream: str
    parent_version: int


_EMPTY: Mapping[Any, Any] = MappingProxyType({})


class BranchState:
    """One branch as of one event: immutable; ``apply`` returns a new one.

    Two states are equal when everything they show is equal (messages, system, runs, provider
    sessions, model configs, fork origin, version, position, ...), however they were built.

    States may be shared freely between tasks. Folding onto the *same* state from two OS
    threads at once is not supported (the shared message storage is grown without a lock).

    Snapshots read and restore the message storage through ``slot_bounds``,
    ``recorded_slots``, ``overrides``, ``overridden_slots``, ``lendable_slots``, ``holds_ids``,
    ``can_grow_at``, ``grow`` and ``restored``; nothing outside this module touches it.

    Attributes:
        branch_id: The branch id (stream ``branch-<branch_id>``).
        name: Human name.
        user: The user (or session) the branch talks for.
        session_id: The session that created the branch.
        system: The current System message (not part of ``messages``).
        chat_model: Chat model configuration.
        parse_model: Parse model configuration.
        metadata: Branch metadata from ``branch.created``.
        runs: Run id -> RunInfo, in start order.
        provider_sessions: ``(provider, model)`` -> provider session id to resume.
        provider_cwds: ``(provider, model)`` -> working directory the bound session belongs
            to (only for bindings that recorded one).
        action_links: ActionRequest id -> id of the ActionResponse answering it.
        forked_from: Fork origin, None for a branch made by ``branch.created``.
        version: Version of the last folded event of this branch's own stream.
        position: Global position of that event.
        created_at: ``recorded_at`` of the branch's first event.
        updated_at: ``recorded_at`` of the last folded event.
        model_calls: How many ``model.called`` events were folded.
    """

    __slots__ = (
        "_cache",
        "_index",
        "_log",
        "_n",
        "_over",
        "_start",
        "action_links",
        "branch_id",
        "chat_model",
        "created_at",
        "forked_from",
        "metadata",
        "model_calls",
        "name",
        "parse_model",
        "position",
        "provider_cwds",
        "provider_sessions",
        "runs",
        "session_id",
        "system",
        "updated_at",
        "user",
        "version",
    )

    branch_id: str
    name: str | None
    user: str | None
    session_id: str | None
    system: System | None
    chat_model: Mapping[str, Any] | None
    parse_model: Mapping[str, Any] | None
    metadata: Mapping[str, Any]
    runs: Mapping[str, RunInfo]
    provider_sessions: Mapping[tuple[str, str], str]
    provider_cwds: Mapping[tuple[str, str], str]
    action_links: Mapping[str, str]
    forked_from: ForkOrigin | None
    version: int
    position: int
    created_at: datetime | None
    updated_at: datetime | None
    model_calls: int
    _log: list[AnyMessage | None]
    _n: int
    _start: int
    _index: dict[str, int]
    _over: Mapping[int, AnyMessage]
    _cache: tuple[AnyMessage, ...] | None

    def __init__(self, branch_id: str, **fields: Any) -> None:
        """Make an empty branch state; ``fields`` set public attributes (for tests and tools)."""
        values: dict[str, Any] = {
            "branch_id": branch_id,
            "name": None,
            "user": None,
            "session_id": None,
            "system": None,
            "chat_model": None,
            "parse_model": None,
            "metadata": _EMPTY,
            "runs": _EMPTY,
            "provider_sessions": _EMPTY,
            "provider_cwds": _EMPTY,
            "action_links": _EMPTY,
            "forked_from": None,
            "version": 0,
            "position": 0,
            "created_at": None,
            "updated_at": None,
            "model_calls": 0,
        }
        unknown = set(fields) - set(values)
        if unknown:
            raise TypeError(f"BranchState has no field(s) {sorted(unknown)}")
        values.update(fields)
        for key in ("metadata", "runs", "provider_sessions", "provider_cwds", "action_links"):
            # a RunTable is immutable already, and a copy would decode its deferred runs
            if type(values[key]) is not RunTable:
                values[key] = MappingProxyType(dict(values[key]))
        for key, value in values.items():
            object.__setattr__(self, key, value)
        self._set_storage([], 0, 0, {}, _EMPTY)

    def _set_storage(
        self,
        log: list[AnyMessage | None],
        n: int,
        start: int,
        index: dict[str, int],
        over: Mapping[int, AnyMessage],
    ) -> None:
        setter = object.__setattr__
        setter(self, "_log", log)
        setter(self, "_n", n)
        setter(self, "_start", start)
        setter(self, "_index", index)
        setter(self, "_over", over)
        setter(self, "_cache", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"BranchState is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"BranchState is immutable; cannot delete {name!r}")

    # ------------------------------------------------------------------------------ the view

    @property
    def messages(self) -> tuple[AnyMessage, ...]:
        """The messages in progression order (the system message excluded), as the view shows them."""
        cached = self._cache
        if cached is None:
            cached = self.message_view[:]
            object.__setattr__(self, "_cache", cached)
        return cached

    @property
    def message_view(self) -> MessageView:
        """``messages`` as a lazy sequence: an item or a slice costs its own size, not the view's.

        Prompt assembly reads only the messages it has not rendered yet (and two ids to check
        its cache), so a turn does not copy the whole history into ``messages`` first.
        """
        return MessageView(self._log, self._over, self._start, self._n)

    def __len__(self) -> int:
        """How many messages the view holds (the system message excluded)."""
        return self._n - self._start

    def __iter__(self) -> Iterator[AnyMessage]:
        return iter(self.messages)

    def message(self, message_id: str) -> AnyMessage | None:
        """The message with this id as the view shows it (the system included), or None."""
        slot = self._index.get(message_id)
        if slot is not None and self._start <= slot < self._n:
            msg = self._over.get(slot) or self._log[slot]
            if msg is not None and msg.id == message_id:
                return msg
        if self.system is not None and self.system.id == message_id:
            return self.system
        return None

    def response_for(self, request_id: str) -> ActionResponse | None:
        """The ActionResponse answering the ActionRequest ``request_id``, if it is in the view."""
        response_id = self.action_links.get(request_id)
        found = self.message(response_id) if response_id is not None else None
        return found if isinstance(found, ActionResponse) else None

    def provider_session(self, provider: str, model: str) -> str | None:
        """The provider session id to resume for ``provider``/``model``, if one is bound."""
        return self.provider_sessions.get((provider, model))

    def provider_cwd(self, provider: str, model: str) -> str | None:
        """The working directory the bound session of ``provider``/``model`` belongs to, if recorded."""
        return self.provider_cwds.get((provider, model))

    @property
    def last_response(self) -> AssistantResponse | None:
        """The last AssistantResponse in the view."""
        return next((m for m in reversed(self.messages) if isinstance(m, AssistantResponse)), None)

    @property
    def last_instruction(self) -> Instruction | None:
        """The last Instruction in the view."""
        return next((m for m in reversed(self.messages) if isinstance(m, Instruction)), None)

    @property
    def action_requests(self) -> tuple[ActionRequest, ...]:
        """Every ActionRequest in the view."""
        return tuple(m for m in self.messages if isinstance(m, ActionRequest))

    @property
    def action_responses(self) -> tuple[ActionResponse, ...]:
        """Every ActionResponse in the view."""
        return tuple(m for m in self.messages if isinstance(m, ActionResponse))

    @property
    def open_runs(self) -> tuple[RunInfo, ...]:
        """Runs started and not (yet) ended or failed."""
        return tuple(r for r in self.runs.values() if r.status == "running")

    def evolve(self, **changes: Any) -> BranchState:
        """A copy with some public fields changed (not the messages: those change by events).

        Meant for fold rules of extra event types (see ``Appliers``).
        """
        settable = set(BranchState.__slots__) - {"_cache", "_index", "_log", "_n", "_over", "_start"}
        unknown = set(changes) - settable
        if unknown:
            raise TypeError(f"BranchState.evolve cannot set {sorted(unknown)}")
        new = object.__new__(BranchState)
        for name in BranchState.__slots__:
            object.__setattr__(new, name, getattr(self, name))
        for name, value in changes.items():
            if name in ("metadata", "runs", "provider_sessions", "provider_cwds", "action_links"):
                value = MappingProxyType(dict(value))
            object.__setattr__(new, name, value)
        object.__setattr__(new, "_cache", self._cache)
        return new

    # ------------------------------------------------------------- storage, for snapshots

    # The view is the slots ``[start, n)`` of the branch's append-only message log; a slot
    # holds the message as recorded, and ``overrides`` what the view shows instead. Snapshots
    # store exactly that, and a loaded state may share its log with a state in memory.

    def slot_bounds(self) -> tuple[int, int]:
        """``(start, n)``: the view is slots ``start`` to ``n - 1`` of the branch's message log."""
        return self._start, self._n

    def recorded_slots(self, first: int) -> list[AnyMessage | None]:
        """The recorded messages of slots ``first`` to ``n - 1``; None for slots before the view."""
        start, log = self._start, self._log
        return [m if i >= start else None for i, m in enumerate(log[first : self._n], start=first)]

    def overrides(self) -> dict[int, AnyMessage]:
        """Slot -> the message the view shows there instead of the recorded one (view slots only)."""
        start, n = self._start, self._n
        return {slot: msg for slot, msg in self._over.items() if start <= slot < n}

    def overridden_slots(self, message_ids: Iterable[str]) -> set[int]:
        """The slots of ``message_ids`` (by the id index) that hold an override."""
        index, over = self._index, self._over
        return {slot for slot in map(index.get, message_ids) if slot is not None and slot in over}

    def lendable_slots(self, start: int, n: int, last_id: str | None) -> int:
        """How many message slots this state can share with a snapshot head (0: none).

        The head's view is slots ``start`` to ``n - 1`` and its last slot holds ``last_id``.
        This state lends its slots below ``min(its n, n)`` when its view starts at ``start``:
        every message in a view has a unique id whose index entry is its slot, and a key of an
        index never changes once a state holds it, so this state's index is right for every
        message of the head's view too. A state whose view starts elsewhere may index a
        message of the head's view under a later slot (an id added again after
        ``messages.cleared``). A state that lends every slot must hold ``last_id`` there.
        """
        if self._start != start or self._n <= start:
            return 0
        lends = min(self._n, n)
        if lends == n:
            last = self._log[n - 1]
            if last_id is None or last is None or last.id != last_id:
                return 0
        return lends

    def holds_ids(self, stored: Sequence[Any], first: int) -> bool:
        """Whether stored message dicts of slots ``first``... carry the ids this log holds there."""
        log = self._log
        for slot, item in enumerate(stored, start=first):
            held = log[slot]
            if item is None or held is None:
                continue  # before the view's start: never shown
            if not isinstance(item, dict) or item.get("id") != held.id:
                return False
        return True

    def can_grow_at(self, slot: int) -> bool:
        """Whether the shared log ends at ``slot``, so messages can be appended there in place."""
        return len(self._log) == slot

    def grow(self, messages: Sequence[AnyMessage]) -> bool:
        """Append ``messages`` to the shared log and index in place, as a fold at its tip does.

        Only when the log still ends where ``can_grow_at`` said and no id is indexed yet;
        whether it did. States already made never see the new slots (each knows its ``n``).
        """
        ids = [m.id for m in messages]
        index, log = self._index, self._log
        if len(set(ids)) != len(ids) or any(i in index for i in ids):
            return False
        first = len(log)
        log.extend(messages)
        index.update(zip(ids, range(first, first + len(ids)), strict=True))
        return True

    @classmethod
    def restored(
        cls,
        branch_id: str,
        fields: Mapping[str, Any],
        *,
        start: int,
        n: int,
        overrides: Mapping[int, AnyMessage],
        slots: list[AnyMessage | None] | None = None,
        lender: BranchState | None = None,
    ) -> BranchState:
        """A state read back from a snapshot: public ``fields`` and the message slots.

        The slots are either ``slots`` (slot 0 on; None before ``start``) or the log of
        ``lender`` (shared; see ``lendable_slots``). Overrides outside the view are dropped.

        Raises:
            ValueError: the log holds fewer than ``n`` slots.
        """
        if lender is not None:
            log, index = lender._log, lender._index
        elif slots is not None:
            log = slots
            # a later slot of the same id wins, as in the fold
            index = {m.id: i for i, m in enumerate(slots) if m is not None}
        else:
            raise TypeError("BranchState.restored needs slots or a lender")
        if len(log) < n:
            raise ValueError(f"the message log holds {len(log)} slots, expected {n}")
        state = cls(branch_id, **fields)
        over = {slot: msg for slot, msg in overrides.items() if start <= slot < n}
        state._set_storage(log, n, start, index, MappingProxyType(over))
        return state

    # ------------------------------------------------------------------------------ equality

    def _key(self) -> tuple[Any, ...]:
        return (
            self.branch_id,
            self.name,
            self.user,
            self.session_id,
            self.system,
            dict(self.chat_model) if self.chat_model is not None else None,
            dict(self.parse_model) if self.parse_model is not None else None,
            dict(self.metadata),
            list(self.runs.items()),
            dict(self.provider_sessions),
            dict(self.provider_cwds),
            dict(self.action_links),
            self.forked_from,
            self.version,
            self.position,
            self.created_at,
            self.updated_at,
            self.model_calls,
            self.messages,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BranchState):
            return NotImplemented
        return self is other or self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"BranchState(branch_id={self.branch_id!r}, name={self.name!r}, version={self.version}, "
            f"messages={len(self)}, runs={len(self.runs)})"
        )


class MessageView(Sequence[AnyMessage]):
    """The messages of one state's view, read from its storage on demand (``BranchState.message_view``).

    Slots below the state's ``_n`` never change once a state holds them, so the view stays
    what it was when it was taken.
    """

    __slots__ = ("_log", "_n", "_over", "_start")

    def __init__(
        self, log: list[AnyMessage | None], over: Mapping[int, AnyMessage], start: int, n: int
    ) -> None:
        self._log, self._over, self._start, self._n = log, over, start, n

    def __len__(self) -> int:
        return self._n - self._start

    def __getitem__(self, index: Any) -> Any:
        start, n, log, over = self._start, self._n, self._log, self._over
        if isinstance(index, slice):
            first, stop, step = index.indices(n - start)
            if step != 1:
                return tuple(self[i] for i in range(first, stop, step))
            if not over:
                return tuple(log[start + first : start + max(first, stop)])
            get = over.get
            return tuple(get(i) or log[i] for i in range(start + first, start + max(first, stop)))
        size = n - start
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("message view index out of range")
        slot = start + index
        return over.get(slot) or log[slot] if over else log[slot]


def _freeze_map(d: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """A read-only view (the builder never writes to a dict it handed out: see the ``own_`` flags)."""
    return d if type(d) is MappingProxyType else MappingProxyType(d)


class StateBuilder:
    """The mutable twin of BranchState that a fold works on; ``freeze`` hands out immutable states.

    The fold rules set the public fields directly and change the messages, runs and provider
    sessions through the methods below, which own the storage sharing: dicts shared with a
    frozen state are copied before their first write (``own_`` flags), and the message log is
    shared while this builder is its tip and copied otherwise.
    """

    __slots__ = (
        "_index",
        "_log",
        "_n",
        "_over",
        "_own_index",
        "_own_links",
        "_own_over",
        "_own_sessions",
        "_start",
        "action_links",
        "branch_id",
        "chat_model",
        "created_at",
        "forked_from",
        "metadata",
        "model_calls",
        "name",
        "parse_model",
        "position",
        "provider_cwds",
        "provider_sessions",
        "runs",
        "session_id",
        "stream",
        "system",
        "updated_at",
        "user",
        "version",
    )

    branch_id: str
    stream: str
    name: str | None
    user: str | None
    session_id: str | None
    system: System | None
    chat_model: Mapping[str, Any] | None
    parse_model: Mapping[str, Any] | None
    metadata: Mapping[str, Any]
    runs: Mapping[str, RunInfo]
    provider_sessions: Mapping[tuple[str, str], str]
    provider_cwds: Mapping[tuple[str, str], str]
    action_links: Mapping[str, str]
    forked_from: ForkOrigin | None
    version: int
    position: int
    created_at: datetime | None
    updated_at: datetime | None
    model_calls: int

    def __init__(self, state: BranchState | None) -> None:
        self.thaw(state)

    def thaw(self, state: BranchState | None) -> None:
        """Start over from ``state`` (None: no branch yet); the state itself never changes."""
        if state is None:
            self.branch_id = ""
            self.stream = ""
            self.name = self.user = self.session_id = None
            self.system = None
            self.chat_model = self.parse_model = None
            self.metadata = {}
            self.runs, self.provider_sessions, self.provider_cwds, self.action_links = {}, {}, {}, {}
            self.forked_from = None
            self.version = self.position = self.model_calls = 0
            self.created_at = self.updated_at = None
            self._log: list[AnyMessage | None] = []
            self._n = self._start = 0
            self._index: dict[str, int] = {}
            self._over: Mapping[int, AnyMessage] = {}
            self._own_sessions = self._own_links = self._own_over = self._own_index = True
            return
        self.branch_id = state.branch_id
        self.stream = f"branch-{state.branch_id}"
        self.name, self.user, self.session_id = state.name, state.user, state.session_id
        self.system = state.system
        self.chat_model, self.parse_model, self.metadata = state.chat_model, state.parse_model, state.metadata
        # read-only until copied (the own_ flags say so)
        self.runs, self.action_links = state.runs, state.action_links
        self.provider_sessions, self.provider_cwds = state.provider_sessions, state.provider_cwds
        self.forked_from = state.forked_from
        self.version, self.position, self.model_calls = state.version, state.position, state.model_calls
        self.created_at, self.updated_at = state.created_at, state.updated_at
        self._log, self._n, self._start = state._log, state._n, state._start
        self._index, self._over = state._index, state._over
        self._own_sessions = self._own_links = self._own_over = self._own_index = False

    def freeze(self) -> BranchState:
        """The state as of now (immutable; later changes to this builder never show in it)."""
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
        runs = self.runs
        setter(state, "runs", runs if type(runs) is RunTable else _freeze_map(runs))
        setter(state, "provider_sessions", _freeze_map(self.provider_sessions))
        setter(state, "provider_cwds", _freeze_map(self.provider_cwds))
        setter(state, "action_links", _freeze_map(self.action_links))
        setter(state, "forked_from", self.forked_from)
        setter(state, "version", self.version)
        setter(state, "position", self.position)
        setter(state, "created_at", self.created_at)
        setter(state, "updated_at", self.updated_at)
        setter(state, "model_calls", self.model_calls)
        state._set_storage(self._log, self._n, self._start, self._index, self._over)
        # from now on the dicts belong to the state too: copy before the next write. The index
        # may keep growing in place with new keys only (see _append); an existing key never
        # changes in an index a frozen state holds
        self._own_sessions = self._own_links = self._own_over = self._own_index = False
        return state

    # ---------------------------------------------------------------------------- messages

    def add(self, msg: AnyMessage) -> None:
        """``message.added``: append, replace the message of the same id in the view, or set the system.

        An ActionRequest that already has an answer shows its link; an ActionResponse links its
        request.
        """
        if type(msg) is System:
            self.system = msg
            return
        links = self.action_links
        if links and type(msg) is ActionRequest and msg.id in links:
            msg = _linked(msg, links[msg.id])
        index = self._index
        slot = index.get(msg.id)
        if slot is None:
            n, log = self._n, self._log
            if len(log) == n:
                # a new message at the tip of the log (most messages of a fold): _append without
                # the call, since nothing needs copying
                log.append(msg)
                index[msg.id] = n
                self._n = n + 1
            else:
                self._append(msg, overwrite=False)
        elif self._start <= slot < self._n:
            self._set_over(slot, msg)
        else:
            self._append(msg, overwrite=True)
        if type(msg) is ActionResponse and msg.content.action_request_id is not None:
            self._link(msg.content.action_request_id, msg.id)

    def _append(self, msg: AnyMessage, *, overwrite: bool) -> None:
        n, log = self._n, self._log
        if len(log) == n:
            if overwrite and not self._own_index:
                # an existing key points at an older slot that other states still resolve
                self._index = dict(self._index)
                self._own_index = True
        else:
            existing = log[n]
            if existing is not None and (existing is msg or existing == msg) and self._index.get(msg.id) == n:
                # refolding the same history (e.g. from a cached checkpoint): the slot already
                # holds this very message, so step over it instead of copying
                self._n = n + 1
                return
            # another state already grew this list past our end: continue on a private copy
            log = self._log = log[:n]
            self._index = {k: v for k, v in self._index.items() if v < n}
            self._own_index = True
        log.append(msg)
        self._index[msg.id] = n
        self._n = n + 1

    def _set_over(self, slot: int, msg: AnyMessage) -> None:
        if not self._own_over:
            self._over = dict(self._over)
            self._own_over = True
        self._over[slot] = msg  # type: ignore[index]  # owned: a dict

    def _link(self, request_id: str, response_id: str) -> None:
        if not self._own_links:
            self.action_links = dict(self.action_links)
            self._own_links = True
        self.action_links[request_id] = response_id  # type: ignore[index]  # owned: a dict
        slot = self._index.get(request_id)
        if slot is not None and self._start <= slot < self._n:
            current = self._over.get(slot) or self._log[slot]
            if type(current) is ActionRequest and current.id == request_id:
                self._set_over(slot, _linked(current, response_id))

    def annotate(self, message_id: str, metadata: Mapping[str, Any]) -> None:
        """``message.annotated``: merge metadata into the view of a message (the system included).

        An annotation of a message outside the view (cleared, or never added) changes nothing.
        """
        if self.system is not None and self.system.id == message_id:
            self.system = _annotate(self.system, metadata)
            return
        slot = self._index.get(message_id)
        if slot is not None and self._start <= slot < self._n:
            current = self._over.get(slot) or self._log[slot]
            if current is not None and current.id == message_id:
                self._set_over(slot, _annotate(current, metadata))

    def clear(self) -> None:
        """``messages.cleared``: the view starts after the last message (the system stays)."""
        self._start = self._n
        if self._over:
            self._over, self._own_over = {}, True

    # ------------------------------------------------------------------- sessions and runs

    def bind_session(self, provider: str, model: str, session_id: str, cwd: str | None) -> None:
        """Bind a provider session (and the directory it belongs to, if recorded)."""
        self._own_session_maps()
        key = (provider, model)
        self.provider_sessions[key] = session_id  # type: ignore[index]  # owned: a dict
        if cwd is not None:
            self.provider_cwds[key] = cwd  # type: ignore[index]
        else:
            self.provider_cwds.pop(key, None)  # type: ignore[attr-defined]

    def drop_sessions(self) -> None:
        """Forget every provider session (a fork starts without one)."""
        self.provider_sessions, self.provider_cwds, self._own_sessions = {}, {}, True

    def drop_open_runs(self) -> None:
        """Forget the runs still running (a fork cut them: their writer records to the parent)."""
        if any(r.status == "running" for r in self.runs.values()):
            self.runs = RunTable({k: r for k, r in self.runs.items() if r.status != "running"})

    def _own_session_maps(self) -> None:
        if not self._own_sessions:
            self.provider_sessions = dict(self.provider_sessions)
            self.provider_cwds = dict(self.provider_cwds)
            self._own_sessions = True

    def put_run(self, run: RunInfo) -> None:
        """Set the record of ``run.run_id`` (a new run goes last, a known one keeps its place).

        The table is persistent (``RunTable``): a change shares all but a few entries with the
        table the last frozen state holds, so it costs the same at 10 runs or 10,000.
        """
        self.runs = RunTable.of(self.runs).set(run.run_id, run)

    def end_run(self, run_id: str, verb: str, **outcome: Any) -> None:
        """Close a run (one started earlier, or one only its end names) with its outcome."""
        base = self.runs.get(run_id) or RunInfo(run_id=run_id, verb=verb)
        self.put_run(dataclasses.replace(base, verb=verb, **outcome))


def _linked(request: ActionRequest, response_id: str) -> ActionRequest:
    content = request.content.model_copy(update={"action_response_id": response_id})
    return request.model_copy(update={"content": content})


def _annotate(msg: Any, metadata: Mapping[str, Any]) -> Any:
    return msg.model_copy(update={"metadata": {**msg.metadata, **metadata}})
