"""Errors raised by the conversation domain.

Every error derives from ``TurnlogError``; this layer's from ``ProjectionError``::

    TurnlogError
    └── ProjectionError
        ├── InvalidMessageError      a message dict or value fails validation (ValueError)
        ├── InvalidEventDataError    an event payload fails its schema on write (ValueError)
        ├── EventDecodeError         a stored event fails its schema on read (stream, version, type)
        │   └── UnknownEventType     no schema (or no fold rule) is registered for the type
        ├── FoldError                an event cannot be folded into the state (stream, version, type)
        ├── BranchNotFound           a branch stream has no event (at or before the target)
        └── InvalidTargetError       a time-travel target is malformed (ValueError)
"""

from __future__ import annotations

from turnlog.eventstore import TurnlogError

__all__ = [
    "BranchNotFound",
    "EventDecodeError",
    "FoldError",
    "InvalidEventDataError",
    "InvalidMessageError",
    "InvalidTargetError",
    "ProjectionError",
    "UnknownEventType",
]


class ProjectionError(TurnlogError):
    """Root of every error raised by ``turnlog.projections``."""


class InvalidMessageError(ProjectionError, ValueError):
    """A message (or a message dict) does not validate.

    Attributes:
        reason: What is wrong, with the offending field.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid message: {reason}")


class InvalidEventDataError(ProjectionError, ValueError):
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


class BranchNotFound(ProjectionError, LookupError):
    """The branch stream has no event (at or before the requested target).

    Attributes:
        branch_id: The branch looked up.
        stream: Its stream name.
    """

    def __init__(self, branch_id: str, detail: str = "has no event") -> None:
        self.branch_id = branch_id
        self.stream = f"branch-{branch_id}"
        super().__init__(f"branch {branch_id!r} (stream {self.stream!r}) {detail}")


class InvalidTargetError(ProjectionError, ValueError):
    """A time-travel target is malformed (e.g. two targets at once, a naive datetime)."""
