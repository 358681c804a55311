"""Errors raised by the kernel (commands, verbs, sessions, tools, runs).

The whole tree is drawn in ``docs/errors.md``; the kernel's part of it::

    TurnlogError                      (turnlog._errors)
    ├── UsageError                    the API was used wrongly (ValueError): a verb on a read-only
    │   │                             view, a branch owned by another session, a missing model
    │   ├── RemovedArgument           a keyword of the seed's API that turnlog dropped (also a
    │   │                             TypeError): where, argument; the message names the
    │   │                             replacement and docs/from-lionagi.md
    │   ├── GraphCycleError           a flow graph has a cycle; nothing ran: cycle
    │   ├── BranchNameTaken           a new branch's name is another branch's; nothing was
    │   │                             written: name, branch_id
    │   └── UnknownOption             a verb keyword is a misspelt option or a parameter the
    │                                 model does not take; nothing was sent (also a TypeError):
    │                                 verb, option, suggestions
    ├── ProjectionError               (turnlog.projections)
    │   └── UnknownBranch             no branch matches a reference (LookupError): ref, candidates
    │       └── AmbiguousBranch       several branches match: ref, candidates
    └── KernelError
        ├── UnknownSession            no session matches a reference (LookupError): ref, candidates
        │   └── AmbiguousSession      several sessions match: ref, candidates
        ├── OperationError            an operation name resolves to nothing (UsageError): operation
        ├── ExecutionError            an operation could not be executed (RuntimeError)
        ├── ResponseParseError        a response could not be parsed into the requested format
        │                             (ValueError): target
        ├── ScriptExhaustedError      a scripted test model has no response left (RuntimeError)
        ├── ReplayMismatch            a replayed request is not the recorded one (LookupError):
        │                             actual, expected, call_index, call_id, version, difference
        ├── ToolError                 a tool cannot be called
        │   ├── UnknownTool           no tool has that name (LookupError): name, available
        │   └── ToolArgumentsError    the arguments do not fit the schema (ValueError): name
        ├── LoopBreak                 a run was broken off by control("break") (RuntimeError): reason
        ├── RunClosed                 a terminal event for a run that is not open: run_id, status
        ├── SnapshotFileError         a snapshot file cannot be read (ValueError): path
        └── UnsafePathError           an id or path cannot name a run file (ValueError): what, value

Provider failures keep their own tree (``turnlog.kernel.models.ProviderError``, every one a
``RuntimeError``) and propagate out of the verbs unchanged, after the failed call was recorded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from turnlog._errors import TurnlogError, UsageError
from turnlog.projections import UnknownBranch

__all__ = [
    "AmbiguousBranch",
    "AmbiguousSession",
    "BranchNameTaken",
    "ExecutionError",
    "GraphCycleError",
    "KernelError",
    "LoopBreak",
    "OperationError",
    "RemovedArgument",
    "ReplayMismatch",
    "ResponseParseError",
    "RunClosed",
    "ScriptExhaustedError",
    "SnapshotFileError",
    "ToolArgumentsError",
    "ToolError",
    "TurnlogError",
    "UnknownBranch",
    "UnknownOption",
    "UnknownSession",
    "UnknownTool",
    "UnsafePathError",
    "UsageError",
]


class KernelError(TurnlogError):
    """Root of every error raised by ``turnlog.kernel`` itself."""


class RemovedArgument(UsageError, TypeError):
    """A keyword argument the seed's API took and turnlog does not; nothing was written.

    It is a ``TypeError`` too, as an unexpected keyword argument is in Python. The message
    says what to use instead and names the migration guide, ``docs/from-lionagi.md``.

    Attributes:
        where: The verb called (``operate``, ``parse``, ...).
        argument: The keyword that was passed.
    """

    def __init__(self, where: str, argument: str, hint: str) -> None:
        self.where = where
        self.argument = argument
        super().__init__(
            f"{where}() does not accept {argument!r} any more: {hint} "
            "(see docs/from-lionagi.md, the guide for code ported from lionagi)"
        )


class BranchNameTaken(UsageError):
    """A new branch (``Branch(name=...)``, ``fork(name=...)``) got a name another branch has.

    Names are unique among the branches of a store, so that loading by name finds one. The
    branch was not created; nothing was written. ``Branch.load_or_create`` opens the branch
    of that name instead of failing.

    Attributes:
        name: The name asked for.
        branch_id: The id of the branch that has it.
    """

    def __init__(self, name: str, branch_id: str) -> None:
        self.name = name
        self.branch_id = branch_id
        super().__init__(
            f"a branch named {name!r} exists already ({branch_id}): choose another name, "
            "or open it with Branch.load(store, name) or Branch.load_or_create(store, name=...)"
        )


class UnknownOption(UsageError, TypeError):
    """A verb got a keyword that is a misspelt option, or a request parameter its model does not take.

    Raised before the request is sent: the seed's verbs pass extra keywords to the provider,
    and a provider that ignores what it does not know would never say that ``guidence=``
    was meant to be ``guidance=``. It is a ``TypeError`` too, as an unexpected keyword is.

    Attributes:
        verb: The verb called.
        option: The keyword that was refused.
        suggestions: What it may have meant (empty when nothing is close).
    """

    def __init__(self, verb: str, option: str, suggestions: Sequence[str], message: str) -> None:
        self.verb = verb
        self.option = option
        self.suggestions = tuple(suggestions)
        super().__init__(message)


def _several(ref: str, candidates: Sequence[str], kinds: str) -> str:
    """The message for a reference that matches several candidates."""
    return f"{ref!r} matches {len(candidates)} {kinds}: {', '.join(candidates)}"


class AmbiguousBranch(UnknownBranch):
    """Several branches match a reference; ``candidates`` lists them all."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        super().__init__(ref, candidates, _several(ref, candidates, "branches"))


class UnknownSession(KernelError, LookupError):
    """No session of the store matches a reference.

    Attributes:
        ref: The id, id prefix or name that was looked up.
        candidates: Session names (with their ids) that came close (empty when none did).
    """

    def __init__(self, ref: str, candidates: Sequence[str] = (), message: str | None = None) -> None:
        self.ref = ref
        self.candidates = tuple(candidates)
        super().__init__(message if message is not None else f"no session matches {ref!r}")


class AmbiguousSession(UnknownSession):
    """Several sessions match a reference; ``candidates`` lists them all."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        super().__init__(ref, candidates, _several(ref, candidates, "sessions"))


class OperationError(KernelError, UsageError):
    """An operation name resolves to no built-in verb and no registered operation.

    Attributes:
        operation: The name that was looked up.
    """

    def __init__(self, message: str, *, operation: str) -> None:
        self.operation = operation
        super().__init__(message)


class ExecutionError(KernelError, RuntimeError):
    """An operation could not be executed, e.g. a graph node without a branch."""


class ResponseParseError(KernelError, ValueError):
    """A model response could not be parsed into the requested format.

    Attributes:
        target: The name of the requested format (a pydantic model name or ``dict``).
    """

    def __init__(self, message: str, *, target: str) -> None:
        self.target = target
        super().__init__(message)


class RunClosed(KernelError):
    """A run's terminal event (``run.ended`` / ``run.failed``) was refused: the run is not open.

    The branch stream holds at most one terminal per run, after its ``run.started``: the
    check runs against the state folded to the version the append expects, and the store
    refuses the append if another writer moved the stream in between, so of two racing
    closers (the run's own process and ``recover``) exactly one wins. Nothing was written.

    Attributes:
        run_id: The run.
        status: What the branch says of it: ``ended``, ``failed``, or ``not started``.
    """

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        what = "was never started in this branch" if status == "not started" else f"is {status} already"
        super().__init__(f"run {run_id} {what}: a run is closed exactly once, so this terminal was refused")


class ScriptExhaustedError(KernelError, RuntimeError):
    """A scripted test model was called more often than its script allows."""


class ReplayMismatch(KernelError, LookupError):
    """A replayed request is not one that was recorded: the conversation diverged.

    Raised by ``turnlog.testing.RecordedModel``, and reported by
    ``turnlog.kernel.execute_replay`` as the first divergence of a branch.

    Attributes:
        actual: The fingerprint of the request built now.
        expected: The recorded fingerprint it was held against (None: no recorded call was
            expected at this point, and none has this fingerprint).
        call_index: 1-based index of the replayed call.
        call_id: The ``call_id`` of the recorded ``model.called`` event (None without one).
        version: The version of that event in its branch stream (None without one).
        difference: What differs, in one or a few lines.
    """

    def __init__(
        self,
        actual: str,
        difference: str,
        *,
        call_index: int,
        expected: str | None = None,
        call_id: str | None = None,
        version: int | None = None,
    ) -> None:
        self.actual = actual
        self.expected = expected
        self.call_index = call_index
        self.call_id = call_id
        self.version = version
        self.difference = difference
        where = f" (model.called at version {version}, call {call_id})" if call_id is not None else ""
        super().__init__(f"call #{call_index}{where} diverges: {difference}")


class GraphCycleError(UsageError):
    """The graph has a cycle; nothing ran.

    Attributes:
        cycle: Ids of nodes on a cycle, in order.
    """

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__(f"Graph must be acyclic; cycle: {' -> '.join([*cycle, cycle[0]])}")


class ToolError(KernelError):
    """A tool could not be called."""


class UnknownTool(ToolError, LookupError):
    """No registered tool has the requested name.

    Attributes:
        name: The name asked for.
        available: The names that are registered.
    """

    def __init__(self, name: str, available: Sequence[str]) -> None:
        self.name = name
        self.available = tuple(available)
        listed = ", ".join(self.available) or "none"
        super().__init__(f"unknown tool {name!r} (registered: {listed})")


class ToolArgumentsError(ToolError, ValueError):
    """The arguments of a call do not fit the tool's schema.

    Attributes:
        name: The tool name.
    """

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        super().__init__(f"invalid arguments for tool {name!r}: {message}")


class LoopBreak(KernelError, RuntimeError):
    """A run was broken off by ``branch.control("break")``.

    It is the run's failure, not a signal handled inside turnlog: it leaves ``run()`` after
    the cleanup and the ``run.failed`` event.

    Attributes:
        reason: The reason given to ``control``, if any.
    """

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        super().__init__(reason or "loop broken by control")


class SnapshotFileError(KernelError, ValueError):
    """A snapshot file cannot be read: not JSON, another format, or an outdated projection.

    Attributes:
        path: The file.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {reason}")


class UnsafePathError(KernelError, ValueError):
    """An id that names a file is not a canonical UUID, or a path leaves its directory.

    Attributes:
        what: What the value is (``"branch id"``, ``"run id"``, ``"path"``).
        value: The value refused.
    """

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what = what
        self.value = value
        super().__init__(f"{what} {value!r} cannot name a run file: {reason}")
