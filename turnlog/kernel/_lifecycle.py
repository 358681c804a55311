"""Run lifecycle: ``run.started`` then exactly one of ``run.ended`` / ``run.failed``.

The wrapper that owns an exchange owns its lifecycle (``communicate``, later ``operate`` and
``ReAct``); ``chat`` and ``chat_and_record`` own none. ``observed_run(branch, verb)`` is that
wrapper, as an async context manager::

    async with observed_run(branch, "communicate") as run:
        ...                      # model calls made here carry run.run_id
        run.result = value       # delivered with the RunEnd signal

A run nested inside another run of the same branch in the same task is suppressed: it
records no lifecycle of its own and its model calls count towards the enclosing run. The
suppression lives in a ContextVar, so concurrent tasks never suppress each other.

While a run is open its process holds the run's liveness lease (``run_lease_key``, see
``turnlog.eventstore.acquire_lease``), taken before ``run.started`` and given up after the
terminal: ``recover`` closes only runs whose lease nobody holds.

Observers receive typed signals (``turnlog.kernel.signals``), built from the recorded
events in log order: ``RunStart``, ``RunEnd``, ``RunFailed`` and ``MessageAdded``.

The wrapper works on any ``BranchPort``: it needs the branch id, its chat model and
``execute`` for the three commands ``StartRun``, ``EndRun`` and ``FailRun``.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import anyio

from turnlog.eventstore import Lease, acquire_lease, uuid7
from turnlog.kernel._commands import EndRun, FailRun, StartRun
from turnlog.kernel.models import Usage
from turnlog.kernel.models._contract import model_identity
from turnlog.kernel.signals import FailureReason

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = [
    "RunScope",
    "run_lease_key",
    "current_run",
    "failure_reason",
    "lifecycle",
    "observed_run",
]


@dataclass(slots=True, eq=False)
class RunScope:
    """The run a block of work belongs to.

    Attributes:
        branch_id: The branch that owns the run.
        run_id: The run id (model calls and messages of the run carry it).
        verb: The owning verb.
        usage: Usage accumulated by the model calls of this run so far.
        result: Set it to deliver a value with the ``RunEnd`` signal.
        chunks: For streamed runs, how many chunks were recorded (goes into ``run.ended``).
        suppressed: True for a nested run that records no lifecycle of its own.
        parent_run_id: The enclosing run, for a run started inside another branch's run.
    """

    branch_id: str
    run_id: str
    verb: str
    started: float = field(default_factory=time.perf_counter)
    usage: Usage = Usage.NONE
    result: Any = None
    chunks: int | None = None
    suppressed: bool = False
    parent_run_id: str | None = None

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` towards this run."""
        self.usage = self.usage + usage

    @property
    def duration_ms(self) -> float:
        """Milliseconds since the run started."""
        return (time.perf_counter() - self.started) * 1000


# The runs open in the current task, one per branch id (a task-scoped stack through copies).
_open_runs: contextvars.ContextVar[dict[str, RunScope] | None] = contextvars.ContextVar(
    "turnlog_open_runs", default=None
)
# The innermost run of any branch in the current task (to link parent runs).
_innermost: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar(
    "turnlog_innermost", default=None
)


def run_lease_key(run_id: str) -> str:
    """The name of a run's liveness lease (``turnlog.eventstore.acquire_lease``)."""
    return f"run-{run_id}"


def current_run(branch_id: str) -> RunScope | None:
    """The run of ``branch_id`` open in the current task, if any."""
    runs = _open_runs.get()
    return runs.get(branch_id) if runs else None


def failure_reason(exc: BaseException) -> FailureReason:
    """How a run that raised ``exc`` is classified in ``run.failed``."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error"


class observed_run:
    """Own the lifecycle of one run of ``verb`` on ``branch`` (see the module docstring).

    Args:
        branch: The branch the run records to.
        verb: The owning verb's name.
        provider: The provider used, when known (recorded in ``run.started``).
        model: The model used, when known.
        cwd: The working directory of a CLI agent run (recorded in ``run.started``).

    ``observed_run.using(branch, verb, chat_model)`` takes both from the model in use.
    """

    __slots__ = ("_branch", "_cwd", "_lease", "_model", "_provider", "_scope", "_tokens", "_verb")

    def __init__(
        self,
        branch: BranchPort,
        verb: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self._branch = branch
        self._verb = verb
        self._provider = provider
        self._model = model
        self._cwd = cwd
        self._scope: RunScope | None = None
        self._lease: Lease | None = None
        self._tokens: tuple[contextvars.Token[Any], contextvars.Token[Any]] | None = None

    @classmethod
    def using(cls, branch: BranchPort, verb: str, chat_model: object = None) -> observed_run:
        """A run that records the provider and model of ``chat_model`` (default: the branch's).

        Analytics attributes a run's cost by them, so every verb owning a run passes its model.
        """
        used = chat_model if chat_model is not None else branch.models.chat
        if used is None:
            return cls(branch, verb)
        provider, model = model_identity(used)
        return cls(branch, verb, provider=provider or None, model=model or None)

    async def __aenter__(self) -> RunScope:
        branch = self._branch
        outer = current_run(branch.id)
        if outer is not None:
            # Nested in a run of the same branch: no lifecycle of its own.
            # Its model calls find the outer run through current_run() and count there.
            self._scope = RunScope(branch.id, outer.run_id, self._verb, suppressed=True)
            return self._scope
        parent = _innermost.get()
        scope = RunScope(
            branch.id, str(uuid7()), self._verb, parent_run_id=parent.run_id if parent is not None else None
        )
        # The run's liveness lease is taken before the run is visible and held until its terminal
        # is written: ``recover`` closes only runs whose lease nobody holds (their writer is gone).
        self._lease = await acquire_lease(branch.store, run_lease_key(scope.run_id))
        try:
            await branch.execute(
                StartRun(
                    scope.run_id, self._verb, scope.parent_run_id, self._provider, self._model, self._cwd
                ),
                run_id=scope.run_id,
            )
        except BaseException:
            await self._release()
            raise
        scope.started = time.perf_counter()
        runs = dict(_open_runs.get() or {})
        runs[branch.id] = scope
        self._tokens = (_open_runs.set(runs), _innermost.set(scope))
        self._scope = scope
        return scope

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        scope = self._scope
        assert scope is not None, "observed_run exited without being entered"
        if scope.suppressed:
            return
        self._reset()

        # The terminal event must be written even when the task is being cancelled. A stream
        # closed by its consumer (GeneratorExit) ends cleanly: abandonment is not a failure.
        with anyio.CancelScope(shield=True):
            try:
                await self._close(scope, exc)
            finally:
                # Written or not, this process is done with the run: recover may close it now.
                await self._release()

    async def _release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease.release()

    async def _close(self, scope: RunScope, exc: BaseException | None) -> None:
        """Write the run's one terminal: ``run.ended``, or ``run.failed`` with the error."""
        if exc is None or isinstance(exc, GeneratorExit):
            await self._branch.execute(
                EndRun(scope.run_id, scope.verb, scope.duration_ms, scope.usage, scope.chunks),
                run_id=scope.run_id,
                extras={"result": scope.result},
                terminal=True,
            )
        else:
            await self._branch.execute(
                FailRun(
                    scope.run_id,
                    scope.verb,
                    scope.duration_ms,
                    scope.usage,
                    type(exc).__name__,
                    str(exc),
                    failure_reason(exc),
                ),
                run_id=scope.run_id,
                extras={"error": exc},
                terminal=True,
            )

    def _reset(self) -> None:
        if self._tokens is None:
            return
        runs_token, inner_token = self._tokens
        self._tokens = None
        try:
            _open_runs.reset(runs_token)
            _innermost.reset(inner_token)
        except ValueError:
            # Exited in another context (an async generator closed elsewhere): drop the entry.
            runs = dict(_open_runs.get() or {})
            runs.pop(self._branch.id, None)
            _open_runs.set(runs)


P = ParamSpec("P")
R = TypeVar("R")


def lifecycle(verb: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate ``async def f(branch, ...)`` so that each call runs inside ``observed_run``.

    ``branch`` (a ``BranchPort``) is the first argument or the keyword ``branch``. The value
    returned by ``f`` is delivered with the ``RunEnd`` signal.
    """

    def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(func)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            # ParamSpec cannot name the first argument's type; the decorated function's own
            # signature says it is a branch.
            branch = cast("BranchPort", args[0] if args else kwargs["branch"])
            async with observed_run.using(branch, verb) as run:
                result = await func(*args, **kwargs)
                run.result = result
                return result

        return wrapper

    return decorate
