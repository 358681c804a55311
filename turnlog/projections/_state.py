"""BranchState: the fold of a branch stream, an immutable view of one branch at one version.

The state shares its message storage with the states it was folded from and into: a branch's
recorded messages live in an append-only list, and every state knows how many slots of it are
its own (``_n``) and where its view starts (``_start``, moved by ``messages.cleared``). Messages
whose view differs from what was recorded (annotated metadata, the derived
``action_response_id`` link, an upsert by id) are kept per state in ``_over`` (slot -> message).
Appending to a state that is the tip of its list is therefore O(1); appending to an older state
copies first. No state ever sees a change after it was made.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from ._catalogue import UsageData
from ._messages import ActionRequest, ActionResponse, AnyMessage, AssistantResponse, Instruction, System

__all__ = ["BranchState", "ForkOrigin", "RunInfo", "RunStatus"]

RunStatus = Literal["running", "ended", "failed"]


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
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_ms: float | None = None
    usage: UsageData = field(default_factory=UsageData)
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
            values[key] = MappingProxyType(dict(values[key]))
        for key, value in values.items():
            object.__setattr__(self, key, value)
        _set_storage(self, [], 0, 0, {}, _EMPTY)

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
            log, over = self._log, self._over
            if over:
                get = over.get
                cached = tuple(get(i) or log[i] for i in range(self._start, self._n))  # type: ignore[misc]
            else:
                cached = tuple(log[self._start : self._n])  # type: ignore[arg-type]
            object.__setattr__(self, "_cache", cached)
        return cached

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


def _set_storage(
    state: BranchState,
    log: list[AnyMessage | None],
    n: int,
    start: int,
    index: dict[str, int],
    over: Mapping[int, AnyMessage],
) -> None:
    setter = object.__setattr__
    setter(state, "_log", log)
    setter(state, "_n", n)
    setter(state, "_start", start)
    setter(state, "_index", index)
    setter(state, "_over", over)
    setter(state, "_cache", None)
