"""Errors raised by the kernel (commands, verbs, sessions).

::

    TurnlogError                      (turnlog.eventstore)
    └── KernelError
        ├── UsageError                the API was used wrongly (ValueError): a verb on a read-only
        │   │                         view, a branch owned by another session, a missing model
        │   └── RemovedArgument       a keyword of the seed's API that turnlog dropped (also a
        │                             TypeError): where, argument; the message names the
        │                             replacement and docs/from-lionagi.md
        ├── UnknownBranch             no branch matches a reference (LookupError): ref, candidates
        │   └── AmbiguousBranch       several branches match: ref, candidates
        ├── UnknownSession            no session matches a reference (LookupError): ref, candidates
        │   └── AmbiguousSession      several sessions match: ref, candidates
        ├── OperationError            an operation name resolves to nothing (ValueError): operation
        ├── ExecutionError            an operation could not be executed (RuntimeError)
        ├── ResponseParseError        a response could not be parsed into the requested format
        │                             (ValueError): target
        ├── ScriptExhaustedError      a scripted test model has no response left (RuntimeError)
        └── ReplayMismatch            a replayed request is not the recorded one (LookupError):
                                      actual, expected, call_index, call_id, version, difference

Provider failures keep their own tree (``turnlog.kernel.models.ProviderError``, every one a
``RuntimeError``) and propagate out of the verbs unchanged, after the failed call was recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.eventstore import TurnlogError

__all__ = [
    "AmbiguousBranch",
    "AmbiguousSession",
    "ExecutionError",
    "KernelError",
    "OperationError",
    "RemovedArgument",
    "ReplayMismatch",
    "ResponseParseError",
    "ScriptExhaustedError",
    "UnknownBranch",
    "UnknownSession",
    "UsageError",
]


class KernelError(TurnlogError):
    """Root of every error raised by ``turnlog.kernel`` itself."""


class UsageError(KernelError, ValueError):
    """The API was used in a way it does not support; nothing was written."""


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


class _Unresolved(KernelError, LookupError):
    """No recorded stream of ``kind`` matches a reference (see the subclasses)."""

    kind = "stream"
    kinds = "streams"

    def __init__(self, ref: str, candidates: Sequence[str] = (), message: str | None = None) -> None:
        self.ref = ref
        self.candidates = tuple(candidates)
        super().__init__(message if message is not None else f"no {self.kind} matches {ref!r}")

    @classmethod
    def several(cls, ref: str, candidates: Sequence[str]) -> str:
        """The message for a reference that matches several candidates."""
        return f"{ref!r} matches {len(candidates)} {cls.kinds}: {', '.join(candidates)}"


class UnknownBranch(_Unresolved):
    """No branch of the store matches a reference.

    Attributes:
        ref: The id, id prefix or name that was looked up.
        candidates: Branch names (with their ids) that came close (empty when none did).
    """

    kind, kinds = "branch", "branches"


class AmbiguousBranch(UnknownBranch):
    """Several branches match a reference; ``candidates`` lists them all."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        super().__init__(ref, candidates, self.several(ref, candidates))


class UnknownSession(_Unresolved):
    """No session of the store matches a reference.

    Attributes:
        ref: The id, id prefix or name that was looked up.
        candidates: Session names (with their ids) that came close (empty when none did).
    """

    kind, kinds = "session", "sessions"


class AmbiguousSession(UnknownSession):
    """Several sessions match a reference; ``candidates`` lists them all."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        super().__init__(ref, candidates, self.several(ref, candidates))


class OperationError(KernelError, ValueError):
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


class ScriptExhaustedError(KernelError, RuntimeError):
    """A scripted test model was called more often than its script allows."""


class ReplayMismatch(KernelError, LookupError):
    """A replayed request is not one that was recorded: the conversation diverged.

    Raised by ``turnlog.kernel.testing.RecordedModel``, and reported by
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
