"""turnlog.eventstore: the append-only log. It knows nothing about conversations."""

from ._base import EventStore
from ._encoder import EventEncoder, encode_events
from ._encoding import encode_json, event_hash
from ._errors import (
    ConcurrencyError,
    CorruptEventError,
    CorruptStoreError,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    StoreError,
    StoreFormatError,
    StoreNotFound,
    StoreUnavailable,
    TurnlogError,
    UnsupportedStoreURL,
    UsageError,
)
from ._ids import uuid7
from ._memory import MemoryEventStore
from ._migrate import MigrateReport, MigrationError, migrate
from ._open import open_store
from ._raw import RawCopy, RawEvent, RawSnapshot
from ._records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    Problem,
    RecordedEvent,
    Snapshot,
    VerifyReport,
)
from ._redaction import (
    REDACTIONS_STREAM,
    Redacted,
    Redaction,
    RedactionError,
    RedactionResult,
    event_hash_matches,
    is_redacted,
    redacted_marker,
)
from ._sqlite import SQLiteEventStore
from ._upcasting import Upcaster, Upcasters
from ._upgrade import UPGRADES_STREAM, UpgradeRefused

__all__ = [
    "REDACTIONS_STREAM",
    "UPGRADES_STREAM",
    "UpgradeRefused",
    "Redacted",
    "Redaction",
    "RedactionError",
    "RedactionResult",
    "event_hash_matches",
    "is_redacted",
    "redacted_marker",
    "encode_events",
    "encode_json",
    "event_hash",
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "AppendResult",
    "ConcurrencyError",
    "CorruptEventError",
    "CorruptStoreError",
    "EncodedEvent",
    "EventEncoder",
    "EventStore",
    "EventTooLarge",
    "ExpectedVersion",
    "IdempotencyError",
    "InvalidEventError",
    "MemoryEventStore",
    "MigrateReport",
    "MigrationError",
    "NewEvent",
    "NewSnapshot",
    "Problem",
    "RawCopy",
    "RawEvent",
    "RawSnapshot",
    "RecordedEvent",
    "SQLiteEventStore",
    "Snapshot",
    "StoreError",
    "StoreFormatError",
    "StoreNotFound",
    "StoreUnavailable",
    "TurnlogError",
    "UnsupportedStoreURL",
    "Upcaster",
    "Upcasters",
    "UsageError",
    "VerifyReport",
    "migrate",
    "open_store",
    "uuid7",
]
