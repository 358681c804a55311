"""The branch port: what operations and the run lifecycle need from a branch, and nothing more.

``Branch`` implements it; the verbs of ``turnlog.kernel.operations``, ``observed_run``, context
providers and ``Middle`` adapters depend on it, never on ``Branch`` itself. So the facade can
import the verbs (inside its methods) while no verb imports the facade: the kernel's import
graph has no circle, and a verb can be tested against any object that speaks the port.

What the port offers:

- facts: ``id``, ``store``, ``state`` (the folded ``BranchState``), ``version``, ``user``,
  ``system``, ``messages``, ``session``, the models, the tools, ``provider_session``;
- commands: ``execute`` (the only way a verb changes the log), after ``require_writable``;
- the prompt cache (``prompt_cache``: rendered history kept between turns), the context
  providers (``gather_context``) and the model a verb uses (``require_chat_model``).

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
    from turnlog.projections import AnyMessage, BranchState, Instruction, System

__all__ = ["BranchPort", "ContextReport", "SessionRef", "VerbPort"]


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
        """The folded state; before the first write, what it will be."""
        ...

    @property
    def version(self) -> int:
        """The stream version the state is at (0 before the first write)."""
        ...

    @property
    def user(self) -> str | None:
        """The user the branch talks for."""
        ...

    @property
    def system(self) -> System | None:
        """The current system message."""
        ...

    @property
    def messages(self) -> Sequence[AnyMessage]:
        """The messages in progression order."""
        ...

    @property
    def session(self) -> SessionRef | None:
        """The session that includes the branch, if any."""
        ...

    @property
    def chat_model(self) -> ChatModel | None:
        """The default model of the verbs."""
        ...

    @property
    def parse_model(self) -> ChatModel | None:
        """The model that reformats answers for parsing."""
        ...

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """The tools of the branch, by name."""
        ...

    @property
    def prompt_cache(self) -> dict[Any, Any]:
        """Derived data verbs keep between turns, keyed by what it was derived from."""
        ...

    def provider_session(self, provider: str, model: str | None = None) -> str | None:
        """The provider session to resume for ``provider`` (and ``model``), if one is bound."""
        ...

    def require_writable(self) -> None:
        """Raise ``UsageError`` when the branch is a read-only view of the past."""
        ...

    def require_chat_model(self, given: ChatModel | None = None) -> ChatModel:
        """``given``, else the branch's chat model; ``UsageError`` (saying why) when neither is set."""
        ...

    def use_chat_model(self, model: ChatModel) -> None:
        """Make ``model`` the branch's chat model from now on (``run`` replaces the model)."""
        ...

    def poll_control(self) -> LoopControl | None:
        """The loop directive set since the last poll (polling clears it)."""
        ...

    def messages_by_ids(self, ids: Iterable[str]) -> list[AnyMessage]:
        """The branch's messages with these ids, in that order; ``UsageError`` for an unknown id."""
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


class VerbPort(BranchPort, Protocol):
    """A ``BranchPort`` with the verbs composed operations call back into."""

    async def operate(self, **kwargs: Any) -> Any:
        """One exchange, validation and actions in one run (``Branch.operate``)."""
        ...

    async def interpret(self, text: str, **kwargs: Any) -> str:
        """Rewrite ``text`` into a clearer prompt (``Branch.interpret``)."""
        ...
