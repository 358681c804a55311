"""Branch: the public facade of one conversation, recorded in the stream ``branch-<id>``.

Verbs build parameter objects and delegate to ``turnlog.kernel.operations.<verb>`` through
imports inside the verb functions (importing Branch loads no verb). A verb never touches the
store: it issues commands, which the Kernel validates, appends, folds and announces.

Branch implements the ``BranchPort`` (``_port``) that operations and the lifecycle use, and
composes the rest instead of inheriting it:

- the verbs are functions of the branch, written once in ``_verbs`` (API), ``_streams``
  (CLI streams) and ``_composed`` (act, operate, interpret, ReAct), bound here as methods;
- observers are an ``Observers`` list (``turnlog.kernel.signals``);
- the Kernel is injected (``Branch(kernel=...)``) or the store's default one.

Every way of opening a recorded branch (``load``, ``fork``, ``from_snapshot``, ``recover``
through ``load``) goes through one internal constructor, ``_open``, which restores the models
the same way. A Session attaches a branch through ``attach_to_session`` /
``detach_from_session``, never through its attributes.

Why this module is over 500 lines: ``Branch`` is one class on purpose (ADR-0021 D1: one
discoverable facade), and what is left in it after the verbs moved out is its public surface
(about 30 documented properties and commands), the port it implements, and the functions
that alone may touch its attributes (``attach_to_session`` and friends: the rule is that no
other module does). Splitting the class again would mean mixins, which this design removed.

Example::

    branch = Branch(store=store, system="Be brief.", chat_model=ScriptedModel("Paris."))
    assert await branch.communicate("Capital of France?") == "Paris."
    again = await Branch.load(store, branch.id, chat_model=...)   # same state, from the log
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, overload

import anyio

import turnlog.kernel._composed as _composed
import turnlog.kernel._streams as _streams
import turnlog.kernel._verbs as _verbs
from turnlog.eventstore import EventStore, RecordedEvent, uuid7
from turnlog.kernel._commands import (
    AddMessages,
    AnnotateMessage,
    BindProviderSession,
    ClearMessages,
    Command,
    CreateBranch,
)
from turnlog.kernel._context import ContextProviderRegistry, ProviderReport
from turnlog.kernel._control import LoopControl, LoopDirective, parse_directive
from turnlog.kernel._errors import AmbiguousBranch, BranchNameTaken, UsageError
from turnlog.kernel._kernel import Kernel, LiveBranch, branch_events
from turnlog.kernel._lookup import branches_named, find_branch, unique_branch_name
from turnlog.kernel._model_config import default_store, model_config, rebuild_model, resolve_model
from turnlog.kernel._persist import read_snapshot_file
from turnlog.kernel._port import messages_by_ids, provider_session
from turnlog.kernel._registry import OperationManager
from turnlog.kernel.models import ChatModel
from turnlog.kernel.signals import Observer, Observers, Signal, Subscription
from turnlog.projections import (
    AnyMessage,
    BranchCreated,
    BranchForked,
    BranchState,
    EventData,
    HistoryRow,
    Instruction,
    System,
    apply,
    history,
    new_event,
    rebuild,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from turnlog.kernel._port import SessionRef

__all__ = [
    "MAX_BRANCH_NAME",
    "Branch",
    "attach_to_session",
    "check_branch_name",
    "default_store",
    "detach_from_session",
    "model_config",
    "resolve_model",
    "store_of",
]


_log = logging.getLogger("turnlog.kernel")


def _system_message(system: Any) -> System | None:
    if system is None or isinstance(system, System):
        return system
    if isinstance(system, str):
        return System.create(system)
    raise UsageError(f"system must be a str or a System message, not {type(system).__name__}")


class Branch:
    """One conversation: its state is the projection of its own stream.

    The constructor does no I/O: ``branch.created`` is appended before the first command, or
    by ``await branch.save()``.

    Args:
        store: An open store (``open_store(...)``); None opens the default store on first use
            (or takes the store of ``kernel``).
        name: A human name, unique among the store's branches (``Branch.load`` finds a
            branch by it). A taken name raises ``BranchNameTaken`` when the branch is first
            recorded (``save()`` or its first command); ``Branch.load_or_create`` opens the
            branch of that name instead, for scripts that run more than once.
        user: Who the branch talks for (the default sender of instructions).
        system: The system prompt (a string or a ``System`` message).
        chat_model: A chat model, ``"provider/model"`` or a model config dict.
        parse_model: The model used to reformat answers for parsing (default: chat_model).
        tools: Callables the branch may offer as tools, by name.
        metadata: Free-form JSON facts about the branch.
        kernel: The Kernel that executes the branch's commands (default: the one Kernel of
            the store, ``Kernel.for_store``); pass a configured ``Kernel(store, ...)`` to
            choose its snapshot policy, retries or time-travel cache.

    Attributes:
        unrestored_models: After ``load`` (or ``from_snapshot``): why a recorded model config
            could not be rebuilt (say, a provider this installation does not know), by role
            (``chat_model``, ``parse_model``); that model is None and verbs that need it raise
            ``UsageError``.
        snapshot_unverified: After ``from_snapshot`` with a file of the format before digests:
            why its content could not be checked; None otherwise (a checked file, or a branch
            not opened from a file).

    Raises:
        UsageError: ``kernel`` serves another store than ``store``, or ``name`` is not one a
            person could type back.
    """

    id: str
    unrestored_models: dict[str, str]
    snapshot_unverified: str | None
    _store: EventStore | None
    _kernel: Kernel | None
    _readonly_at: int | None
    _live: LiveBranch
    _pending: BranchCreated | BranchForked | None
    _preview: BranchState | None
    _create_lock: anyio.Lock
    _observers: Observers
    _session: SessionRef | None
    _session_observers: Observers | None
    _on_recorded: Callable[[Branch], Awaitable[None]] | None
    _operation_manager: OperationManager
    _providers: ContextProviderRegistry | None
    _tools: dict[str, Callable[..., Any]]
    _chat_model: ChatModel | None
    _parse_model: ChatModel | None
    _loop_control: LoopControl | None

    # The verbs: functions of the branch, each written once in its module (see the module docstring).
    chat = _verbs.chat
    chat_and_record = _verbs.chat_and_record
    communicate = _verbs.communicate
    parse = _verbs.parse
    run = _streams.run
    run_and_collect = _streams.run_and_collect
    act = _composed.act
    operate = _composed.operate
    interpret = _composed.interpret
    ReAct = _composed.ReAct
    ReActStream = _composed.ReActStream

    def __init__(
        self,
        *,
        store: EventStore | None = None,
        name: str | None = None,
        user: str | None = None,
        system: str | System | None = None,
        chat_model: Any = None,
        parse_model: Any = None,
        tools: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]] | None = None,
        metadata: Mapping[str, Any] | None = None,
        kernel: Kernel | None = None,
    ) -> None:
        check_branch_name(name)
        self._setup(str(uuid7()), store, kernel=kernel, readonly_at=None)
        self._chat_model = resolve_model(chat_model)
        self._parse_model = resolve_model(parse_model)
        self._pending = BranchCreated(
            branch_id=self.id,
            name=name,
            user=user,
            system=_system_message(system),
            chat_model=model_config(self._chat_model),
            parse_model=model_config(self._parse_model),
            metadata=dict(metadata or {}),
        )
        if tools:
            self.register_tools(tools)

    def _setup(
        self, branch_id: str, store: EventStore | None, *, kernel: Kernel | None, readonly_at: int | None
    ) -> None:
        if kernel is not None and store is not None and kernel.store is not store:
            raise UsageError(f"the kernel given to branch {branch_id} serves another store")
        self.id = branch_id
        self._store = store if store is not None else (kernel.store if kernel is not None else None)
        self._kernel = kernel
        self._readonly_at = readonly_at
        self._live = LiveBranch(branch_id, listeners=self._listeners)
        self._pending = None
        self._preview = None
        self._create_lock = anyio.Lock()
        self._observers = Observers()
        self._session = None
        self._session_observers = None
        self._on_recorded = None
        self._operation_manager = OperationManager()
        self._providers = None
        self._tools = {}
        self._chat_model = None
        self._parse_model = None
        self._loop_control = None
        self.unrestored_models = {}
        self.snapshot_unverified = None

    @classmethod
    def _open(
        cls,
        branch_id: str,
        store: EventStore,
        *,
        kernel: Kernel | None,
        state: BranchState | None,
        readonly_at: int | None = None,
        chat_model: Any = None,
        parse_model: Any = None,
    ) -> Branch:
        """The one constructor of a recorded branch (``load``, ``from_snapshot``, ``fork``).

        A model that is given is used; else the recorded config in ``state`` is rebuilt, and
        when that fails the reason goes into ``unrestored_models``.
        """
        branch = cls.__new__(cls)
        branch._setup(branch_id, store, kernel=kernel, readonly_at=readonly_at)
        branch._live.state = state
        for role, given in (("chat_model", chat_model), ("parse_model", parse_model)):
            model = resolve_model(given)
            if model is None and state is not None:
                model, reason = rebuild_model(state.chat_model if role == "chat_model" else state.parse_model)
                if reason is not None:
                    branch.unrestored_models[role] = reason
            if role == "chat_model":
                branch._chat_model = model
            else:
                branch._parse_model = model
        return branch

    # ------------------------------------------------------------------------------- loading

    @classmethod
    async def load(
        cls,
        store: EventStore,
        ref: str,
        *,
        at_version: int | None = None,
        chat_model: Any = None,
        parse_model: Any = None,
        kernel: Kernel | None = None,
    ) -> Branch:
        """Open a recorded branch by id, unique id prefix or name.

        Args:
            store: The store holding the branch.
            ref: A branch id, a unique prefix of one, or a branch name.
            at_version: Open the branch as it was at this version, read-only.
            chat_model: The chat model to use (default: rebuilt from the recorded config,
                which test models cannot be).
            parse_model: The parse model to use (default: likewise, else the chat model).
            kernel: The Kernel to use (default: the store's, ``Kernel.for_store``).

        Raises:
            UnknownBranch: nothing matches ``ref`` (``candidates`` lists close names).
            AmbiguousBranch: several branches match ``ref``.
        """
        branch_id = await find_branch(store, ref)
        state = await (kernel or Kernel.for_store(store)).load(branch_id, at_version)
        return cls._open(
            branch_id,
            store,
            kernel=kernel,
            state=state,
            readonly_at=at_version,
            chat_model=chat_model,
            parse_model=parse_model,
        )

    @classmethod
    async def load_or_create(
        cls,
        store: EventStore,
        *,
        name: str,
        chat_model: Any = None,
        parse_model: Any = None,
        kernel: Kernel | None = None,
        **create: Any,
    ) -> Branch:
        """The branch called ``name``: opened when it exists, else created and recorded now.

        For scripts that run more than once against one store: the first run creates the
        branch, later runs continue it. ``create`` holds the other arguments of ``Branch(...)``
        (``user``, ``system``, ``tools``, ``metadata``), used only when the branch is created;
        ``chat_model`` and ``parse_model`` are used either way (test models are not rebuilt
        from the log). Two tasks of one process asking at once get the same branch.

        Example::

            branch = await Branch.load_or_create(store, name="geo", system="Be brief.", chat_model=model)

        Raises:
            AmbiguousBranch: several branches have the name (a log written before names were
                claimed in the store; since then, of processes creating a name at once, one wins
                and the others open its branch).
            UsageError: an argument ``Branch(...)`` does not take, or a name it refuses.
        """
        if not isinstance(name, str):  # None would make a new unnamed branch on every call
            raise UsageError(f"Branch.load_or_create() needs a name (a str), not {name!r}")
        check_branch_name(name)
        unknown = sorted(set(create) - {"user", "system", "tools", "metadata"})
        if unknown:
            raise UsageError(
                f"Branch.load_or_create() got arguments Branch() does not take: {', '.join(unknown)}"
            )
        models = {"chat_model": chat_model, "parse_model": parse_model, "kernel": kernel}
        for _ in range(2):  # a creator that loses the race to another one opens the winner's branch
            found = await branches_named(store, name)
            if len(found) > 1:
                raise AmbiguousBranch(name, found)
            if found:
                return await cls.load(store, found[0], **models)
            try:
                return await cls(store=store, name=name, **models, **create).save()
            except BranchNameTaken:
                continue
        raise UsageError(f"the branch named {name!r} could neither be opened nor created")  # pragma: no cover

    @classmethod
    async def from_snapshot(
        cls,
        path: str | os.PathLike[str],
        *,
        store: EventStore,
        chat_model: Any = None,
        parse_model: Any = None,
        kernel: Kernel | None = None,
    ) -> Branch:
        """Open a branch from a snapshot file written by ``stream_persist``.

        The state comes from the file; events the store holds after the snapshot's version
        are folded on top, so the branch is as current as the store. Models are restored as
        ``load`` restores them.

        A file written before snapshot files carried a digest opens too, but unverified:
        ``branch.snapshot_unverified`` says why (and a warning is logged); its content is the
        file's, checked only for standing at a version the store holds.

        Raises:
            SnapshotFileError: the file cannot be read as a branch snapshot, was edited (its
                digest differs), or stands at an event this store does not hold.
        """
        state, unverified = await read_snapshot_file(path, store=store)
        branch = cls._open(
            state.branch_id, store, kernel=kernel, state=state, chat_model=chat_model, parse_model=parse_model
        )
        if unverified is not None:
            branch.snapshot_unverified = unverified
            _log.warning("%s: snapshot file unverified: %s", os.fspath(path), unverified)
        await branch.kernel.catch_up(branch._live)
        return branch

    async def save(self) -> Branch:
        """Record ``branch.created`` now (otherwise it is recorded before the first command)."""
        await self._ensure_created()
        return self

    async def _ensure_created(
        self,
        then: AddMessages | None = None,
        run_id: str | None = None,
        extras: Mapping[str, Any] | None = None,
        *,
        terminal: bool = False,
    ) -> list[RecordedEvent] | None:
        """Record the branch's first event if it is still pending.

        A new branch (not a fork, not in a session) records ``then`` in the same append and
        returns the events of ``then``: one commit for a branch and its first messages.
        Otherwise returns None, and ``then`` is the caller's to execute.
        """
        if self._pending is None:
            return None
        async with self._create_lock:
            if self._pending is None:
                return None
            pending = self._pending
            if isinstance(pending, BranchCreated) and self._session is not None:
                # an included branch talks for its session (the seed's branch.user = session.id)
                session_id = self._session.id
                pending = pending.model_copy(update={"session_id": session_id, "user": session_id})
            # a session's branch is announced to the session between its creation and its
            # first messages (``on_recorded``), so it keeps two appends
            first = then if isinstance(pending, BranchCreated) and self._session is None else None
            async with unique_branch_name(self.store, pending.name):
                recorded = await self.kernel.execute(
                    self._live,
                    CreateBranch(pending, first),
                    meta=self._meta(run_id if first is not None else None),
                    extras=extras,
                    terminal=terminal and first is not None,
                )
            self._pending = None
            self._preview = None
        if self._on_recorded is not None:
            await self._on_recorded(self)
        return recorded[1:] if first is not None else None  # the command's events, as execute returns

    # ----------------------------------------------------------------------------- properties

    @property
    def store(self) -> EventStore:
        """The store the branch records to (the default store is opened on first access)."""
        if self._store is None:
            self._store = default_store()
        return self._store

    @property
    def kernel(self) -> Kernel:
        """The Kernel that executes the branch's commands (given, else the store's)."""
        if self._kernel is not None:
            return self._kernel
        return Kernel.for_store(self.store)

    @property
    def stream(self) -> str:
        """The branch's stream name, ``branch-<id>``."""
        return f"branch-{self.id}"

    @property
    def state(self) -> BranchState:
        """The folded state (``BranchState``); before the first write, what it will be."""
        if self._live.state is not None:
            return self._live.state
        if self._preview is None:
            assert self._pending is not None
            self._preview = preview_state(self.id, self._pending)
        return self._preview

    @property
    def version(self) -> int:
        """The stream version the state is at (0 before the first write)."""
        return self._live.version

    @property
    def read_only(self) -> bool:
        """True for a view of the past (``at``, ``load(at_version=...)``): verbs raise."""
        return self._readonly_at is not None

    @property
    def name(self) -> str | None:
        """The branch's name."""
        return self.state.name

    @property
    def user(self) -> str | None:
        """The user the branch talks for."""
        return self.state.user

    @property
    def metadata(self) -> dict[str, Any]:
        """Free-form facts about the branch."""
        return dict(self.state.metadata)

    @property
    def messages(self) -> Sequence[AnyMessage]:
        """The messages in progression order."""
        return self.state.messages

    @property
    def progression(self) -> list[str]:
        """The ids of the messages, in order."""
        return [m.id for m in self.messages]

    @property
    def system(self) -> System | None:
        """The current system message."""
        return self.state.system

    @property
    def provider_sessions(self) -> dict[tuple[str, str], str]:
        """Provider session ids to resume, by ``(provider, model)``."""
        return dict(self.state.provider_sessions)

    def provider_session(self, provider: str, model: str | None = None) -> str | None:
        """The provider session to resume for ``provider`` (and ``model``), if one is bound.

        Without ``model``, the most recently bound session of the provider.
        """
        return provider_session(self.state, provider, model)

    @property
    def chat_model(self) -> ChatModel | None:
        """The default model of the verbs."""
        return self._chat_model

    @chat_model.setter
    def chat_model(self, value: Any) -> None:
        self._chat_model = resolve_model(value)
        self.unrestored_models.pop("chat_model", None)

    @property
    def parse_model(self) -> ChatModel | None:
        """The model that reformats answers for parsing (default: the chat model)."""
        return self._parse_model if self._parse_model is not None else self._chat_model

    @parse_model.setter
    def parse_model(self, value: Any) -> None:
        self._parse_model = resolve_model(value)
        self.unrestored_models.pop("parse_model", None)

    @property
    def providers(self) -> ContextProviderRegistry:
        """The context providers of this branch."""
        if self._providers is None:
            self._providers = ContextProviderRegistry()
        return self._providers

    @property
    def session(self) -> SessionRef | None:
        """The session that includes the branch, if any (a ``Session``)."""
        return self._session

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """The tools of the branch, by name."""
        return dict(self._tools)

    def register_tools(
        self, tools: Iterable[Callable[..., Any]] | Mapping[str, Callable[..., Any]], *, update: bool = False
    ) -> None:
        """Add tools by name; a taken name raises ``UsageError`` unless ``update``."""
        items = tools.items() if isinstance(tools, Mapping) else ((t.__name__, t) for t in tools)
        for name, tool in items:
            if name in self._tools and not update:
                raise UsageError(f"tool {name!r} is registered already")
            self._tools[name] = tool

    def __repr__(self) -> str:
        past = f" at v{self._readonly_at}" if self._readonly_at is not None else ""
        return f"<Branch {self.id} name={self.name!r} v{self.version}{past}>"

    # ------------------------------------------------------------------------ the branch port

    @property
    def prompt_cache(self) -> dict[Any, Any]:
        """Derived data verbs keep between turns (rendered history), keyed by what it came from."""
        return self._live.cache

    def require_writable(self) -> None:
        """Raise ``UsageError`` when the branch is a read-only view of the past."""
        if self._readonly_at is not None:
            raise UsageError(f"branch {self.id} is a read-only view at version {self._readonly_at}")

    def require_chat_model(self, given: ChatModel | None = None) -> ChatModel:
        """``given``, else the branch's chat model.

        Raises:
            UsageError: neither is set (saying why a recorded model was not rebuilt, if so).
        """
        model = given if given is not None else self._chat_model
        if model is None:
            why = self.unrestored_models.get("chat_model")
            raise UsageError(
                f"branch {self.id} has no chat model: pass chat_model= to Branch(...) or Branch.load(...)"
                + (f" ({why})" if why else "")
            )
        return model

    def use_chat_model(self, model: ChatModel) -> None:
        """Make ``model`` (as given, not resolved) the chat model: ``run(chat_model=...)`` replaces it."""
        self._chat_model = model

    @property
    def models(self) -> BranchModels:
        """The models the verbs use, as one object (the port's ``ModelChoice``)."""
        return BranchModels(self)

    def messages_by_ids(self, ids: Iterable[str]) -> list[AnyMessage]:
        """The branch's messages with these ids, in that order.

        Raises:
            UsageError: an id names no message of the branch.
        """
        return messages_by_ids(self.state, ids)

    async def gather_context(self, instruction: Instruction) -> ProviderReport:
        """Run the context providers for one request (none run without a system message)."""
        if self._providers is None or not len(self._providers):
            return ProviderReport()
        if self.system is None:
            return self._providers.skip_all()
        return await self._providers.gather(self, instruction)

    @property
    def pending_creation(self) -> BranchCreated | None:
        """The ``branch.created`` this new branch records with its first command's events, in one append.

        None once the branch is in the store, for a fork, and for a session's branch (which
        records its creation on its own).
        """
        pending = self._pending
        return pending if isinstance(pending, BranchCreated) and self._session is None else None

    def _meta(self, run_id: str | None) -> dict[str, Any]:
        return {
            "branch_id": self.id,
            "run_id": run_id,
            "session_id": self._session.id if self._session is not None else None,
        }

    async def execute(
        self,
        command: Command,
        *,
        run_id: str | None = None,
        extras: Mapping[str, Any] | None = None,
        terminal: bool = False,
    ) -> list[RecordedEvent]:
        """Run a kernel command on this branch, creating its stream first when needed.

        Args:
            command: One of the commands of ``turnlog.kernel`` (``AddMessages``, ``FailRun``...).
            run_id: The run the events belong to (recorded in their meta).
            extras: In-process values handed to the observer signals.
            terminal: The command closes a run (the snapshot policy may write a snapshot).

        Raises:
            UsageError: the branch is read-only, or the command does not apply.
        """
        self.require_writable()
        if isinstance(command, AddMessages):
            created = await self._ensure_created(command, run_id, extras, terminal=terminal)
            if created is not None:
                return created
        else:
            await self._ensure_created()
        return await self.kernel.execute(
            self._live, command, meta=self._meta(run_id), extras=extras, terminal=terminal
        )

    # ------------------------------------------------------------------------------- commands

    async def add_message(self, message: AnyMessage, *, run_id: str | None = None) -> AnyMessage:
        """Record one message (``message.added``)."""
        await self.add_messages([message], run_id=run_id)
        return message

    async def add_messages(self, messages: Sequence[AnyMessage], *, run_id: str | None = None) -> None:
        """Record messages in one atomic append, in order."""
        await self.execute(AddMessages.of(messages, run_id=run_id), run_id=run_id)

    async def annotate(
        self, message_id: str, metadata: Mapping[str, Any], *, reason: str | None = None
    ) -> None:
        """Merge ``metadata`` into a message's view (``message.annotated``)."""
        await self.execute(AnnotateMessage(message_id, metadata, reason))

    async def clear_messages(self) -> None:
        """Remove every message from the view except the system message (``messages.cleared``)."""
        await self.execute(ClearMessages())

    async def set_system(self, system: str | System) -> System:
        """Replace the system message (a ``System`` message is recorded)."""
        message = _system_message(system)
        assert message is not None
        await self.add_message(message)
        return message

    async def bind_provider_session(self, provider: str, model: str, session_id: str) -> None:
        """Remember a provider session id so a later run (in any process) resumes it."""
        await self.execute(BindProviderSession(provider, model, session_id))

    async def refresh(self) -> Branch:
        """Fold events that other writers appended since the state was read."""
        await self.kernel.catch_up(self._live)
        return self

    # ------------------------------------------------------------------------------ observers

    @overload
    def observe(self, *types: type[Signal], handler: Observer) -> Observer: ...
    @overload
    def observe(self, *types: type[Signal], handler: None = None) -> Callable[[Observer], Observer]: ...
    def observe(
        self, *types: type[Signal], handler: Observer | None = None
    ) -> Observer | Callable[[Observer], Observer]:
        """Call ``handler`` with every signal of ``types`` (all signals when none), in log order.

        Usable as a decorator. Handlers may be sync or async; one that raises is logged and
        changes nothing. The signals are in ``turnlog.kernel.signals``.
        """
        return self._observers.observe(*types, handler=handler)

    def unobserve(self, handler: Observer) -> None:
        """Stop calling ``handler``."""
        self._observers.unobserve(handler)

    def _listeners(self) -> Sequence[Subscription]:
        own = self._observers.subscriptions()
        if self._session_observers is None:
            return own
        return own + self._session_observers.subscriptions()

    # ------------------------------------------------------------------------- loop control

    def control(self, directive: LoopDirective | str, reason: str | None = None) -> None:
        """Ask a running ``run()`` of this branch to ``cancel`` or ``break`` at its next check.

        Raises:
            UsageError: ``directive`` is not ``continue``, ``cancel`` or ``break``.
        """
        self._loop_control = LoopControl(parse_directive(directive), reason)

    def poll_control(self) -> LoopControl | None:
        """The directive set since the last poll (None when none); polling clears it."""
        found, self._loop_control = self._loop_control, None
        return found

    # ----------------------------------------------------------------------------- operations

    def get_operation(self, operation: str) -> Callable[..., Any] | None:
        """A built-in verb by name, else an operation registered in the branch's registry."""
        if not operation.startswith("_") and callable(getattr(type(self), operation, None)):
            found: Callable[..., Any] = getattr(self, operation)
            return found
        return self._operation_manager.registry.get(operation)

    # ----------------------------------------------------------------------------- time travel

    async def history(self) -> list[HistoryRow]:
        """One row per event of the branch's own stream: version, position, time, type, summary."""
        if self._readonly_at is None:
            await self._ensure_created()
        return await history(self.store, self.id, to_version=self._readonly_at)

    async def events(self) -> list[tuple[RecordedEvent, EventData]]:
        """Every event of the branch's own stream with its decoded payload, in order."""
        if self._readonly_at is None:
            await self._ensure_created()
        return await branch_events(self.store, self.id, self._readonly_at)

    async def at(self, version: int) -> Branch:
        """A read-only view of the branch as it was at ``version``; verbs on it raise."""
        await self._ensure_created()
        view = await Branch.load(self.store, self.id, at_version=version, kernel=self._kernel)
        view._chat_model = self._chat_model
        view._parse_model = self._parse_model
        return view

    async def at_time(self, when: datetime) -> Branch:
        """A read-only view of the branch as it was at the time ``when``; verbs on it raise.

        The view holds every event of the branch recorded at or before ``when`` (the store's
        ``recorded_at``, stamped in commit order), as ``at`` holds every event up to a version;
        its ``version`` says which one that is.

        Raises:
            InvalidTargetError: ``when`` is not an aware datetime (give it a time zone).
            UnknownBranch: the branch has no event at or before ``when``.
        """
        await self._ensure_created()
        state = await rebuild(self.store, self.id, at_time=when)
        return Branch._open(
            self.id,
            self.store,
            kernel=self._kernel,
            state=state,
            readonly_at=state.version,
            chat_model=self._chat_model,
            parse_model=self._parse_model,
        )

    async def fork(self, at_version: int | None = None, *, name: str | None = None) -> Branch:
        """A new branch that starts with this branch's state at ``at_version`` (default: now).

        The new stream begins with ``branch.forked``, which references the parent prefix.

        Raises:
            BranchNameTaken: another branch has ``name`` (nothing is written).
            UsageError: ``at_version`` is outside the branch.
        """
        check_branch_name(name)
        if self._readonly_at is None:
            await self._ensure_created()
        version = at_version if at_version is not None else (self._readonly_at or self.version)
        if not 1 <= version <= max(self.version, self._readonly_at or 0):
            raise UsageError(f"cannot fork branch {self.id} at version {version}: it has {self.version}")
        child = Branch._open(
            str(uuid7()),
            self.store,
            kernel=self._kernel,
            state=None,
            chat_model=self._chat_model,
            parse_model=self._parse_model,
        )
        child._tools = dict(self._tools)
        data = BranchForked(
            branch_id=child.id,
            parent_branch_id=self.id,
            parent_stream=self.stream,
            parent_version=version,
            name=name,
        )
        async with unique_branch_name(self.store, name):
            await child.kernel.execute(child._live, CreateBranch(data), meta=child._meta(None))
        return child


# ---------------------------------------------------------------------- the session's handle


def store_of(branch: Branch) -> EventStore | None:
    """The store a branch was given (None: it opens the default store on first use)."""
    return branch._store


def attach_to_session(
    branch: Branch,
    session: SessionRef,
    *,
    store: EventStore,
    operations: OperationManager,
    observers: Observers,
    on_recorded: Callable[[Branch], Awaitable[None]],
) -> None:
    """Make ``branch`` part of ``session`` (what ``Session`` calls; not for other callers).

    The branch then records to ``store`` (when it had no store yet), shares the session's
    operation registry and observers, and calls ``on_recorded`` after its first event.
    """
    if branch._store is None:
        branch._store = store
    branch._session = session
    branch._session_observers = observers
    branch._on_recorded = on_recorded
    branch._operation_manager = operations


def detach_from_session(branch: Branch) -> None:
    """Undo ``attach_to_session``: the branch gets a private operation registry again."""
    branch._session = None
    branch._session_observers = None
    branch._on_recorded = None
    branch._operation_manager = OperationManager()


MAX_BRANCH_NAME = 200
"""The longest branch name, in characters."""


def check_branch_name(name: object) -> None:
    """Refuse a branch name a person could not type back: empty, blank, control characters, too long.

    None (no name) is allowed. That a name is free is checked where the branch is recorded
    (``unique_branch_name``), since only the store knows.

    Raises:
        UsageError: naming what is wrong with the name.
    """
    if name is None:
        return
    if not isinstance(name, str):
        raise UsageError(f"a branch name must be a str, not {type(name).__name__}")
    if not name.strip():
        raise UsageError("a branch name must not be empty or only spaces")
    if len(name) > MAX_BRANCH_NAME:
        raise UsageError(f"a branch name has at most {MAX_BRANCH_NAME} characters, not {len(name)}")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        raise UsageError(f"a branch name must not contain control characters: {name!r:.80}")


def preview_state(branch_id: str, data: BranchCreated | BranchForked) -> BranchState:
    """The state a branch will have once its first event is recorded (nothing is written)."""
    event = new_event(data)
    recorded = RecordedEvent(
        id=event.id,
        stream=f"branch-{branch_id}",
        version=1,
        position=0,
        type=event.type,
        schema=event.schema,
        data=dict(event.data),
        meta={},
        recorded_at=datetime.now(UTC),
        prev_hash="",
        hash="",
    )
    return apply(None, recorded)


class BranchModels:
    """The models of one branch, as its verbs choose them (``Branch.models``, a ``ModelChoice``)."""

    __slots__ = ("_branch",)

    def __init__(self, branch: Branch) -> None:
        self._branch = branch

    @property
    def chat(self) -> ChatModel | None:
        """The default model of the verbs."""
        return self._branch.chat_model

    @property
    def parse(self) -> ChatModel | None:
        """The model that reformats answers for parsing (default: the chat model)."""
        return self._branch.parse_model

    def require_chat(self, given: ChatModel | None = None) -> ChatModel:
        """``given``, else the chat model; ``UsageError`` (saying why) when neither is set."""
        return self._branch.require_chat_model(given)

    def parse_or(self, given: ChatModel | None) -> ChatModel | None:
        """``given``, else the parse model (``is None``: a model object may be falsy)."""
        return given if given is not None else self.parse

    def use_chat(self, model: ChatModel) -> None:
        """Make ``model`` the chat model from now on (``run`` replaces the model)."""
        self._branch.use_chat_model(model)
