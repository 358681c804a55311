"""The branch port: what operations and the run lifecycle need from a branch, and nothing more.

``Branch`` implements it; the verbs of ``turnlog.kernel.operations``, ``observed_run``, context
providers and ``Middle`` adapters depend on it, never on ``Branch`` itself. So the facade can
import the verbs (inside its methods) while no verb imports the facade: the kernel's import
graph has no circle, and a verb can be tested against any object that speaks the port.

What the port offers:

- facts: ``id``, ``store``, ``state`` (the folded ``BranchState``: version, user, system,
  messages and provider sessions are read from it, ``messages_by_ids`` and
  ``provider_session`` here are functions of it), ``session``, the tools;
- model choice, folded into one object: ``models`` (``chat``, ``parse``, ``require_chat``,
  ``parse_or``, ``use_chat``);
- commands: ``execute`` (the only way a verb changes the log), after ``require_writable``;
- the prompt cache (``prompt_cache``: rendered history kept between turns), the context
  providers (``gather_context``) and the loop directive (``poll_control``).

Eleven members: every one is used by a verb, and ``tests/kernel/test_port.py`` checks the count.

``VerbPort`` adds the verbs that composed operations (``ReAct``, ``select``) call back into.

Example (a ``Middle`` written against the port)::

    async def echo_middle(branch: BranchPort, instruction, chat_param, parse_param=None,
                          clear_messages=False, skip_validation=False):
        branch.require_writable()
        await branch.execute(AddMessages.of([Instruction.create(instruction)]))
        return instruction
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from turnlog.eventstore import EventStore, RecordedEvent
    from turnlog.kernel._commands import Command
    from turnlog.kernel._control import LoopControl
    from turnlog.kernel.models import ChatModel
    from turnlog.projections import AnyMessage, BranchState, Instruction

__all__ = [
    "BranchPort",
    "ContextReport",
    "ModelChoice",
    "SessionRef",
    "VerbPort",
    "messages_by_ids",
    "provider_session",
]


class ContextReport(Protocol):
    """What the context providers contributed to one request (``ProviderReport`` is one)."""

    @property
    def blocks(self) -> Sequence[str]:
        """The kept texts, in registration order."""
        ...

    @property
    def fired_names(self) -> list[str]:
        """Names of the providers whose text was kept."""
        ...


class SessionRef(Protocol):
    """The session a branch belongs to, as the branch sees it (a ``Session`` is one)."""

    @property
    def id(self) -> str:
        """The session id."""
        ...


class ModelChoice(Protocol):
    """Which models a branch's verbs use: the one object that decides (``Branch.models`` is one)."""

    @property
    def chat(self) -> ChatModel | None:
        """The default model of the verbs."""
        ...

    @property
    def parse(self) -> ChatModel | None:
        """The model that reformats answers for parsing (default: the chat model)."""
        ...

    def require_chat(self, given: ChatModel | None = None) -> ChatModel:
        """``given``, else the chat model; ``UsageError`` (saying why) when neither is set."""
        ...

    def parse_or(self, given: ChatModel | None) -> ChatModel | None:
        """``given``, else the parse model: the one rule of every verb that parses."""
        ...

    def use_chat(self, model: ChatModel) -> None:
        """Make ``model`` the chat model from now on (``run`` replaces the model)."""
        ...


class BranchPort(Protocol):
    """One branch, as operations and the lifecycle see it (see the module docstring)."""

    @property
    def id(self) -> str:
        """The branch id."""
        ...

    @property
    def store(self) -> EventStore:
        """The store the branch records to."""
        ...

    @property
    def state(self) -> BranchState:
        """The folded state (version, user, system, messages, sessions); before a write, what it will be."""
        ...

    @property
    def session(self) -> SessionRef | None:
        """The session that includes the branch, if any."""
        ...

    @property
    def models(self) -> ModelChoice:
        """The models the verbs use."""
        ...

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """The tools of the branch, by name."""
        ...

    @property
    def prompt_cache(self) -> dict[Any, Any]:
        """Derived data verbs keep between turns, keyed by what it was derived from."""
        ...

    def require_writable(self) -> None:
        """Raise ``UsageError`` when the branch is a read-only view of the past."""
        ...

    def poll_control(self) -> LoopControl | None:
        """The loop directive set since the last poll (polling clears it)."""
        ...

    async def gather_context(self, instruction: Instruction) -> ContextReport:
        """Run the branch's context providers for one request (nothing is recorded)."""
        ...

    async def execute(
        self,
        command: Command,
        *,
        run_id: str | None = None,
        extras: Mapping[str, Any] | None = None,
        terminal: bool = False,
    ) -> list[RecordedEvent]:
        """Run a kernel command on the branch; return the recorded events."""
        ...


def messages_by_ids(state: BranchState, ids: Iterable[str]) -> list[AnyMessage]:
    """The branch's messages with these ids, in that order.

    Raises:
        UsageError: an id names no message of the branch.
    """
    from turnlog.kernel._errors import UsageError

    wanted = list(ids)
    by_id = {m.id: m for m in state.messages}
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise UsageError(f"progression names messages that are not in branch {state.branch_id}: {missing}")
    return [by_id[i] for i in wanted]


def provider_session(state: BranchState, provider: str, model: str | None = None) -> str | None:
    """The provider session to resume for ``provider`` (and ``model``), if one is bound.

    Without ``model``, the most recently bound session of the provider.
    """
    sessions = state.provider_sessions
    if model is not None:
        return sessions.get((provider, model))
    found = [sid for (p, _), sid in sessions.items() if p == provider]
    return found[-1] if found else None


class VerbPort(BranchPort, Protocol):
    """A ``BranchPort`` with the verbs composed operations call back into."""

    async def operate(self, **kwargs: Any) -> Any:
        """One exchange, validation and actions in one run (``Branch.operate``)."""
        ...

    async def interpret(self, text: str, **kwargs: Any) -> str:
        """Rewrite ``text`` into a clearer prompt (``Branch.interpret``)."""
        ...
