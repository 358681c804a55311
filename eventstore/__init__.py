"""turnlog.eventstore: the append-only log. It knows nothing about conversations."""

from ._base import EventStore
from ._errors import (
    ConcurrencyError,
    CorruptEventError,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    StoreError,
    StoreFormatError,
    StoreUnavailable,
    TurnlogError,
    UnsupportedStoreURL,
)
from ._ids import uuid7
from ._records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    Problem,
    RecordedEvent,
    Snapshot,
    VerifyReport,
)
from ._upcasting import Upcaster, Upcasters

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AppendResult",
    "ConcurrencyError",
    "CorruptEventError",
    "EventStore",
    "EventTooLarge",
    "ExpectedVersion",
    "IdempotencyError",
    "InvalidEventError",
    "NewEvent",
    "NewSnapshot",
    "Problem",
    "RecordedEvent",
    "Snapshot",
    "StoreError",
    "StoreFormatError",
    "StoreUnavailable",
    "TurnlogError",
    "UnsupportedStoreURL",
    "Upcaster",
    "Upcasters",
    "VerifyReport",
    "uuid7",
]
