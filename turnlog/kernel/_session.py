"""Session: a set of branches sharing one operation registry and one set of observers.

Session changes are events in ``session-<id>``: ``session.created`` (before the first
change), ``branch.included``, ``branch.removed`` and ``session.default_branch_set``.

An included branch talks for the session: its ``user`` becomes the session id (recorded in
the branch's own stream, in ``branch.created`` or as ``branch.user_set``). A session without
a branch makes a default one when it is first asked for (``session.default_branch``, or a
``run_operation`` without ``branch=``); nothing is written then, and its inclusion is
recorded when the branch (or the session) is first written.

Example::

    session = Session(store=store)
    await session.include_branches(branch)

    @session.operation()
    async def summarize(text: str) -> str:
        return await branch.chat_and_record(f"Summarize: {text}")

    await session.run_operation("summarize", text="...")
    again = await Session.load(store, session.id)   # same branches and default, from the log
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, overload

import anyio

from turnlog.eventstore import EventStore, RecordedEvent, uuid7
from turnlog.kernel._branch import Branch, attach_to_session, default_store, detach_from_session, store_of
from turnlog.kernel._errors import OperationError, UsageError
from turnlog.kernel._flow import FlowResult, Graph
from turnlog.kernel._flow import flow as run_flow
from turnlog.kernel._lookup import find_session
from turnlog.kernel._registry import OperationManager
from turnlog.kernel.signals import Observer, Observers, Signal
from turnlog.projections import (
    BranchIncluded,
    BranchRemoved,
    BranchState,
    BranchUserSet,
    DefaultBranchSet,
    EventData,
    SessionCreated,
    decode_event,
    new_events,
)

__all__ = ["OperationManager", "Session"]  # OperationManager lives in _registry

F = TypeVar("F", bound=Callable[..., Any])
_log = logging.getLogger("turnlog.kernel")


@dataclass(frozen=True, slots=True)
class _SetUser:
    """``branch.user_set``: the branch now talks for ``user``."""

    reorderable: ClassVar[bool] = True
    user: str
    session_id: str

    def build(self, state: BranchState | None) -> Sequence[EventData]:
        return (BranchUserSet(user=self.user, session_id=self.session_id),)


class Session:
    """Branches that share one operation registry, one set of observers and a default branch.

    The constructor does no I/O; the session stream is written on the first change.

    Args:
        store: The store (None: the store of the first included branch, else the default).
        name: A human name (``Session.load`` finds a session by it).

    Attributes:
        missing_branches: After ``load``: included branches of which nothing was recorded.
    """

    def __init__(self, *, store: EventStore | None = None, name: str | None = None) -> None:
        self.id = str(uuid7())
        self.name = name
        self._store = store
        self._created = False
        self._lock = anyio.Lock()
        self._operation_manager = OperationManager()
        self._observers = Observers()
        self._branches: dict[str, Branch] = {}
        self._default: Branch | None = None
        self._unrecorded: dict[str, Branch] = {}  # made on demand; inclusion not written yet
        self.missing_branches: list[str] = []

    @classmethod
    async def load(
        cls, store: EventStore, ref: str, *, chat_model: Any = None, parse_model: Any = None
    ) -> Session:
        """Restore a recorded session: its included branches (loaded) and its default branch.

        The operation registry and observers are not recorded: register them again.

        Args:
            store: The store holding the session.
            ref: A session id, a unique prefix of one, or a session name.
            chat_model: The chat model of every branch (default: each branch's recorded one).
            parse_model: The parse model of every branch (default: likewise).

        Raises:
            UnknownSession: nothing matches ``ref`` (``candidates`` lists close names).
            AmbiguousSession: several sessions match ``ref``.
        """
        session_id = await find_session(store, ref)
        events = [e async for e in store.read_stream(f"session-{session_id}")]
        name, included, default = _fold_session(events)
        session = cls(store=store, name=name)
        session.id = session_id
        session._created = True
        for branch_id in included:
            if await store.stream_version(f"branch-{branch_id}") == 0:
                # Included before anything of it was recorded: there is nothing to restore.
                _log.debug("session %s: branch %s has no events; not restored", session_id, branch_id)
                session.missing_branches.append(branch_id)
                continue
            branch = await Branch.load(store, branch_id, chat_model=chat_model, parse_model=parse_model)
            session._adopt(branch)
        session.default_branch = session._branches.get(default or "") or next(
            iter(session._branches.values()), None
        )
        return session

    @property
    def default_branch(self) -> Branch:
        """The branch verbs run on when none is named.

        A session without any branch makes one here (no I/O: its ``branch.created`` and its
        inclusion are recorded when it, or the session, is first written).
        """
        if self._default is None:
            if self._branches:
                self._default = next(iter(self._branches.values()))
            else:
                branch = Branch(store=self.store, user=self.id)
                self._adopt(branch)
                self._unrecorded[branch.id] = branch
                self._default = branch
        return self._default

    @default_branch.setter
    def default_branch(self, branch: Branch | None) -> None:
        self._default = branch

    @property
    def stream(self) -> str:
        """The session's stream name, ``session-<id>``."""
        return f"session-{self.id}"

    @property
    def store(self) -> EventStore:
        """The store the session records to."""
        if self._store is None:
            self._store = default_store()
        return self._store

    @property
    def branches(self) -> list[Branch]:
        """The included branches, in inclusion order."""
        return list(self._branches.values())

    @property
    def operations(self) -> Mapping[str, Callable[..., Any]]:
        """The registered operations, by name."""
        return dict(self._operation_manager.registry)

    @overload
    def observe(self, *types: type[Signal], handler: Observer) -> Observer: ...
    @overload
    def observe(self, *types: type[Signal], handler: None = None) -> Callable[[Observer], Observer]: ...
    def observe(
        self, *types: type[Signal], handler: Observer | None = None
    ) -> Observer | Callable[[Observer], Observer]:
        """Call ``handler`` with every signal of ``types`` of every included branch, in log order.

        Usable as a decorator; see ``Branch.observe``.
        """
        return self._observers.observe(*types, handler=handler)

    def unobserve(self, handler: Observer) -> None:
        """Stop calling ``handler``."""
        self._observers.unobserve(handler)

    # -------------------------------------------------------------------------------- events

    async def _record(self, *items: EventData) -> None:
        items = (*await self._lazy_inclusions(), *items)
        async with self._lock:
            if not self._created:
                items = (SessionCreated(session_id=self.id, name=self.name), *items)
            events = new_events(items, meta=self._meta())
            if not events:
                return  # another task recorded it first
            await self.store.append(self.stream, events)
            self._created = True

    def _meta(self) -> dict[str, Any]:
        return {"session_id": self.id}

    async def _lazy_inclusions(self) -> list[EventData]:
        """Create the branches made on demand and return their inclusion events."""
        items: list[EventData] = []
        while self._unrecorded:
            _, branch = self._unrecorded.popitem()
            if branch.id not in self._branches:
                continue  # removed before anything of it was written
            await branch.save()  # no longer unrecorded: _branch_recorded does nothing
            items.append(BranchIncluded(branch_id=branch.id))
            if self._default is branch:
                items.append(DefaultBranchSet(branch_id=branch.id))
        return items

    async def _branch_recorded(self, branch: Branch) -> None:
        """A branch of this session wrote its first event: record its inclusion if still due."""
        if branch.id in self._unrecorded:
            await self._record()

    async def save(self) -> Session:
        """Record ``session.created`` now (otherwise it is recorded with the first change)."""
        if not self._created:
            await self._record()
        return self

    # ------------------------------------------------------------------------------ branches

    async def include_branches(self, branches: Branch | Iterable[Branch], *more: Branch) -> None:
        """Include branches: they share this session's registry and observers.

        Takes one branch, several (``include_branches(a, b)``) or an iterable of them
        (``include_branches([a, b])``, the seed's form). The first branch included becomes
        the default when there is none. Including a branch twice changes nothing.

        Raises:
            UsageError: a branch belongs to another session (the whole batch is refused),
                lives in another store, or is not a ``Branch``.
        """
        passed: list[object] = [branches] if isinstance(branches, Branch) else list(branches)
        passed.extend(more)
        # callers may pass anything at runtime: say what is wrong before anything is recorded
        wrong = [type(b).__name__ for b in passed if not isinstance(b, Branch)]
        if wrong:
            raise UsageError(f"include_branches() takes branches, or one iterable of them, not a {wrong[0]}")
        batch = [b for b in passed if isinstance(b, Branch)]
        for branch in batch:
            owner = branch.session
            if owner is not None and owner is not self:
                raise UsageError(
                    f"branch {branch.id} is already owned by session {owner.id}; "
                    "call remove_branch() on the owning session first"
                )
        if self._store is None and batch and (first := store_of(batch[0])) is not None:
            self._store = first
        for branch in batch:
            given = store_of(branch)
            if given is not None and given is not self.store:
                raise UsageError(f"branch {branch.id} is in another store than session {self.id}")
        items: list[EventData] = []
        for branch in batch:
            if branch.id in self._branches:
                continue
            self._adopt(branch)
            # Recorded before the inclusion, so that Session.load finds every branch it names.
            await branch.save()
            if branch.user != self.id and not branch.read_only:
                await branch.execute(_SetUser(self.id, self.id))
            items.append(BranchIncluded(branch_id=branch.id))
            if self._default is None:
                self._default = branch
                items.append(DefaultBranchSet(branch_id=branch.id))
        if items:
            await self._record(*items)

    def _adopt(self, branch: Branch) -> None:
        attach_to_session(
            branch,
            self,
            store=self.store,
            operations=self._operation_manager,
            observers=self._observers,
            on_recorded=self._branch_recorded,
        )
        self._branches[branch.id] = branch

    async def new_branch(self, *, as_default_branch: bool = False, **kwargs: Any) -> Branch:
        """Make a branch in this session's store (``Branch`` keyword arguments) and include it."""
        branch = Branch(store=self.store, **kwargs)
        await self.include_branches(branch)
        if as_default_branch:
            await self.change_default_branch(branch)
        return branch

    async def remove_branch(self, ref: Branch | str) -> None:
        """Remove a branch; it keeps its messages and gets a private registry again."""
        branch = self.get_branch(ref)
        del self._branches[branch.id]
        if self._unrecorded.pop(branch.id, None) is not None and branch.version == 0:
            # made on demand and never written: nothing of it is in the log
            detach_from_session(branch)
            self._default = next(iter(self._branches.values()), None)
            return
        detach_from_session(branch)
        items: list[EventData] = [BranchRemoved(branch_id=branch.id)]
        if self._default is branch:
            self._default = next(iter(self._branches.values()), None)
            if self._default is not None:
                items.append(DefaultBranchSet(branch_id=self._default.id))
        await self._record(*items)

    async def change_default_branch(self, ref: Branch | str) -> None:
        """Make an included branch the default."""
        branch = self.get_branch(ref)
        self.default_branch = branch
        await self._record(DefaultBranchSet(branch_id=branch.id))

    def get_branch(self, ref: Branch | str) -> Branch:
        """An included branch by object, id, unique id prefix or name.

        Raises:
            UsageError: no included branch (or several) match.
        """
        if isinstance(ref, Branch):
            if ref.id in self._branches:
                return ref
            raise UsageError(f"branch {ref.id} is not in session {self.id}")
        if ref in self._branches:
            return self._branches[ref]
        found = [b for b in self._branches.values() if b.id.startswith(ref) or b.name == ref]
        if len(found) == 1:
            return found[0]
        what = "several branches" if found else "no branch"
        raise UsageError(f"{what} of session {self.id} match {ref!r}")

    # ---------------------------------------------------------------------------- operations

    def register_operation(self, operation: str, func: Callable[..., Any], *, update: bool = False) -> None:
        """Register an async callable under ``operation`` for every included branch.

        A registered name never shadows a built-in verb: ``get_operation`` looks verbs up first.

        Raises:
            ValueError: the name is taken (and ``update`` is false), or ``func`` is not async.
        """
        self._operation_manager.register(operation, func, update=update)

    def operation(self, name: str | None = None, *, update: bool = False) -> Callable[[F], F]:
        """Decorator registering an async function under ``name`` (default: its ``__name__``)."""

        def decorate(func: F) -> F:
            self.register_operation(name or func.__name__, func, update=update)
            return func

        return decorate

    async def run_operation(
        self, operation: str, *, branch: Branch | str | None = None, **kwargs: Any
    ) -> Any:
        """Run a built-in verb or a registered operation on a branch (default: the default one).

        Registered operations receive only ``kwargs``; the branch is not passed to them.

        Raises:
            ValueError: ``Unknown operation: ...`` when the name resolves to nothing.
            UsageError: there is no such branch (or no default branch).
        """
        if branch is None:
            target = self.default_branch
        else:
            target = self.get_branch(branch)
        method = target.get_operation(operation)
        if method is None:
            raise OperationError(f"Unknown operation: {operation!r}", operation=operation)
        return await method(**kwargs)

    async def flow(
        self,
        graph: Graph,
        *,
        context: Mapping[str, Any] | None = None,
        max_concurrent: int | None = 5,
        parallel: bool = True,
        default_branch: Branch | str | None = None,
    ) -> FlowResult:
        """Run a ``Graph`` of operation nodes on this session's branches (``turnlog.kernel.flow``)."""
        return await run_flow(
            self,
            graph,
            context=context,
            max_concurrent=max_concurrent,
            parallel=parallel,
            default_branch=default_branch,
        )


def _fold_session(events: list[RecordedEvent]) -> tuple[str | None, list[str], str | None]:
    """``(name, included branch ids in inclusion order, default branch id)`` of a session stream."""
    name: str | None = None
    included: dict[str, None] = {}
    default: str | None = None
    for event in events:
        data = decode_event(event)
        if isinstance(data, SessionCreated):
            name = data.name
        elif isinstance(data, BranchIncluded):
            included[data.branch_id] = None
        elif isinstance(data, BranchRemoved):
            included.pop(data.branch_id, None)
        elif isinstance(data, DefaultBranchSet):
            default = data.branch_id
    return name, list(included), default if default in included else None
