"""Errors raised by the event store.

Every error turnlog raises derives from ``TurnlogError`` (``turnlog._errors``); the
store's errors from ``StoreError``, so a caller can catch either and still act on the
precise subclass. The whole tree is drawn in ``docs/errors.md``::

    TurnlogError                    (turnlog._errors)
    └── StoreError
        ├── ConcurrencyError        expected_version did not match (stream, expected, actual)
        ├── IdempotencyError        an event id is already stored with different content
        ├── InvalidEventError       bad input, rejected before anything is written (UsageError)
        │   └── EventTooLarge       encoded event over the configured size limit
        ├── StoreFormatError        the store was written by a newer turnlog, or is not a store
        ├── StoreNotFound           opened for reading only, but there is no store there (location)
        ├── CorruptEventError       a stored payload cannot be decoded
        ├── CorruptStoreError       the store's files or rows are damaged beyond one event
        ├── StoreUnavailable        the backend cannot be reached or dropped the connection
        ├── UnsupportedStoreURL     open_store() got a scheme it does not know (UsageError)
        ├── MigrationError          migrate() refused; the refusing step wrote nothing (reason, position)
        ├── UpgradeRefused          the log does not verify, so its chain was not upgraded (problems)
        ├── RedactionError          a redaction could not be done; nothing changed (stream, version)
        └── TrackingError           a consumer's position would not move forward (consumer, position, recorded)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnlog._errors import TurnlogError, UsageError

if TYPE_CHECKING:
    from ._problem import Problem

__all__ = [
    "TurnlogError",
    "UsageError",
    "ConcurrencyError",
    "CorruptEventError",
    "CorruptStoreError",
    "EventTooLarge",
    "IdempotencyError",
    "InvalidEventError",
    "MigrationError",
    "RedactionError",
    "StoreError",
    "StoreFormatError",
    "StoreNotFound",
    "StoreUnavailable",
    "UnsupportedStoreURL",
    "UpgradeRefused",
    "TrackingError",
]


class StoreError(TurnlogError):
    """Root of every error raised by ``turnlog.eventstore``."""


class ConcurrencyError(StoreError):
    """The stream's version differs from the ``expected_version`` of an append.

    Nothing of the batch was stored.

    Attributes:
        stream: The stream whose version did not match.
        expected: The expected version the caller passed (an int or a constant).
        actual: The stream's version at the time of the check.
    """

    def __init__(self, stream: str, expected: Any, actual: int) -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream!r}: expected version {expected!r}, but the stream is at version {actual}"
        )


class IdempotencyError(StoreError):
    """An event id is already stored, but with different content (or in another place).

    Attributes:
        event_id: The conflicting event id.
        stream: The stream of the append that was refused.
        reason: What differs.
    """

    def __init__(self, event_id: str, stream: str, reason: str) -> None:
        self.event_id = event_id
        self.stream = stream
        self.reason = reason
        super().__init__(f"event {event_id} (stream {stream!r}): {reason}")


class InvalidEventError(StoreError, UsageError):
    """An append was rejected before anything was written: the input is malformed.

    Attributes:
        stream: The stream of the append, when known.
        index: The position of the offending event inside its batch, when known.
    """

    def __init__(self, message: str, *, stream: str | None = None, index: int | None = None) -> None:
        self.stream = stream
        self.index = index
        where = []
        if stream is not None:
            where.append(f"stream {stream!r}")
        if index is not None:
            where.append(f"event #{index}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)


class EventTooLarge(InvalidEventError):
    """The encoded event is larger than the store's ``max_event_bytes``.

    Attributes:
        size: The encoded size of data and meta in bytes.
        limit: The configured limit in bytes.
    """

    def __init__(self, size: int, limit: int, *, stream: str | None = None, index: int | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"event is {size} bytes encoded, over the limit of {limit} bytes",
            stream=stream,
            index=index,
        )


class StoreFormatError(StoreError):
    """The store cannot be opened: written by a newer format version, or not a turnlog store.

    Attributes:
        found: The format version found in the store (None when there is none).
        supported: The newest format version this code understands.
    """

    def __init__(self, message: str, *, found: int | None = None, supported: int | None = None) -> None:
        self.found = found
        self.supported = supported
        super().__init__(message)


class StoreNotFound(StoreError):
    """The store was opened with ``create=False`` and there is none at its location; nothing was created.

    Attributes:
        location: The SQLite file, or the PostgreSQL URL (password masked) and schema.
    """

    def __init__(self, location: str, detail: str = "") -> None:
        self.location = location
        super().__init__(f"no turnlog store at {location}" + (f" ({detail})" if detail else ""))


class CorruptEventError(StoreError):
    """A stored event or snapshot could not be decoded; it is never returned as None.

    Attributes:
        stream: The stream of the undecodable record.
        version: Its version inside the stream.
        position: Its global position, when it has one.
        reason: What failed.
    """

    def __init__(self, stream: str, version: int, reason: str, *, position: int | None = None) -> None:
        self.stream = stream
        self.version = version
        self.position = position
        self.reason = reason
        at = f" (position {position})" if position is not None else ""
        super().__init__(f"stream {stream!r} version {version}{at}: {reason}")


class CorruptStoreError(StoreError):
    """The store's files or rows are damaged in a way no single event accounts for.

    Raised by reads (``verify`` reports such damage as problems instead of raising).

    Attributes:
        location: The store (a file or a masked URL).
        reason: What failed.
        position: The position of the damaged event, when one is to blame.
    """

    def __init__(self, location: str, reason: str, *, position: int | None = None) -> None:
        self.location = location
        self.reason = reason
        self.position = position
        super().__init__(f"{location}: the store is damaged: {reason}")


class StoreUnavailable(StoreError):
    """The backend could not be reached, or the connection broke during the call."""


class UnsupportedStoreURL(StoreError, UsageError):
    """``open_store`` was given a URL whose scheme no backend handles."""


class MigrationError(StoreError):
    """A migration was refused; nothing was written by the step that refused.

    Attributes:
        reason: Why, in one sentence.
        position: The global position concerned, when there is one.
    """

    def __init__(self, reason: str, *, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        super().__init__(reason if position is None else f"position {position}: {reason}")


class UpgradeRefused(StoreError):
    """The log did not verify, so it was not upgraded (nothing was changed).

    Attributes:
        problems: What ``verify`` found.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        shown = "; ".join(str(p) for p in self.problems[:3])
        super().__init__(f"the log does not verify, so its chain is not upgraded: {shown}")


class RedactionError(StoreError):
    """A redaction could not be done; nothing was changed.

    Attributes:
        stream: The stream named.
        version: The version named.
        reason: Why (the event is missing, or it is hashed by the legacy chain).
    """

    def __init__(self, stream: str, version: int, reason: str) -> None:
        self.stream = stream
        self.version = version
        self.reason = reason
        super().__init__(f"cannot redact {stream!r} version {version}: {reason}")


class TrackingError(StoreError):
    """A consumer's position would not move forward; nothing was stored (no event either).

    Attributes:
        consumer: The consumer named.
        position: The position it tried to record.
        recorded: The position already recorded for it.
    """

    def __init__(self, consumer: str, position: int, recorded: int) -> None:
        self.consumer = consumer
        self.position = position
        self.recorded = recorded
        super().__init__(
            f"consumer {consumer!r} is at position {recorded}; position {position} does not move it forward"
        )
