"""Errors raised by the conversation domain.

Every error derives from ``TurnlogError`` (``turnlog._errors``); this layer's from
``ProjectionError``. The whole tree is drawn in ``docs/errors.md``::

    TurnlogError                     (turnlog._errors)
    └── ProjectionError
        ├── InvalidMessageError      a message dict or value fails validation (UsageError)
        ├── InvalidEventDataError    an event payload fails its schema on write (UsageError)
        ├── EventDecodeError         a stored event fails its schema on read (stream, version, type)
        │   └── UnknownEventType     no schema (or no fold rule) is registered for the type
        ├── FoldError                an event cannot be folded into the state (stream, version, type)
        ├── UnknownBranch            no branch matches a reference, or it has no event at or
        │   │                        before the target (LookupError): ref, candidates, stream
        │   └── AmbiguousBranch      several branches match (turnlog.kernel): ref, candidates
        └── InvalidTargetError       a time-travel target is malformed (UsageError)
"""

from __future__ import annotations

from collections.abc import Sequence

from turnlog._errors import TurnlogError, UsageError

__all__ = [
    "EventDecodeError",
    "FoldError",
    "InvalidEventDataError",
    "InvalidMessageError",
    "InvalidTargetError",
    "ProjectionError",
    "TurnlogError",
    "UnknownBranch",
    "UnknownEventType",
    "UsageError",
]


class ProjectionError(TurnlogError):
    """Root of every error raised by ``turnlog.projections``."""


class InvalidMessageError(ProjectionError, UsageError):
    """A message (or a message dict) does not validate.

    Attributes:
        reason: What is wrong, with the offending field.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid message: {reason}")


class InvalidEventDataError(ProjectionError, UsageError):
    """An event payload was rejected before anything was written.

    Attributes:
        type: The event type name.
        reason: What is wrong.
    """

    def __init__(self, type: str, reason: str) -> None:
        self.type = type
        self.reason = reason
        super().__init__(f"event {type!r}: {reason}")


class EventDecodeError(ProjectionError):
    """A recorded event does not decode into its schema; it never turns into None.

    Attributes:
        stream: The stream of the event.
        version: Its version inside the stream.
        type: The event type name.
        position: Its global position.
        reason: What failed.
    """

    def __init__(
        self, stream: str, version: int, type: str, reason: str, *, position: int | None = None
    ) -> None:
        self.stream = stream
        self.version = version
        self.type = type
        self.position = position
        self.reason = reason
        at = f" (position {position})" if position is not None else ""
        super().__init__(f"stream {stream!r} version {version}{at}, type {type!r}: {reason}")


class UnknownEventType(EventDecodeError):
    """No schema or fold rule is registered for the event type."""


class FoldError(ProjectionError):
    """A valid event cannot be folded where it is.

    It is out of order, on the wrong stream, not a branch event on a branch stream, or a fork
    whose parent state does not match.

    Attributes:
        stream: The stream of the event.
        version: Its version.
        type: Its type.
        reason: What is wrong.
    """

    def __init__(self, stream: str, version: int, type: str, reason: str) -> None:
        self.stream = stream
        self.version = version
        self.type = type
        self.reason = reason
        super().__init__(f"cannot fold stream {stream!r} version {version}, type {type!r}: {reason}")


class UnknownBranch(ProjectionError, LookupError):
    """No branch matches a reference, or the branch has no event (at or before a target).

    The rebuilds and time travel of this layer raise it for a branch stream without an event
    where one was asked for; ``turnlog.kernel.find_branch`` and ``Branch.load`` raise it when
    no branch has the id, id prefix or name given.

    Attributes:
        ref: The id, id prefix or name that was looked up.
        candidates: Branch names (with their ids) that came close (empty when none did).
        stream: The stream ``ref`` names when it is an id (``branch-<ref>``).
    """

    def __init__(
        self,
        ref: str,
        candidates: Sequence[str] = (),
        message: str | None = None,
        *,
        detail: str = "has no event",
    ) -> None:
        self.ref = ref
        self.candidates = tuple(candidates)
        self.stream = f"branch-{ref}"
        super().__init__(
            message if message is not None else f"branch {ref!r} (stream {self.stream!r}) {detail}"
        )

    @property
    def branch_id(self) -> str:
        """The branch looked up (``ref``), as the rebuilds name it."""
        return self.ref


class InvalidTargetError(ProjectionError, UsageError):
    """A time-travel target is malformed (e.g. two targets at once, a naive datetime)."""
