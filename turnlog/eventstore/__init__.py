"""turnlog.eventstore: the append-only log. It knows nothing about conversations.

``PostgresEventStore`` is loaded on first use (``turnlog.eventstore.PostgresEventStore``), so
that the package imports without the PostgreSQL driver; without it, that name raises
``ImportError`` naming the extra to install (``pip install 'turnlog[postgres]'``).
``MemoryEventStore``, ``migrate`` and ``MigrateReport`` are loaded on first use too: a command
that only reads a SQLite store (``turnlog show``) needs neither.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._base import EventStore
from ._chain import verify_raw_events
from ._encoder import EventEncoder, encode_events
from ._encoding import encode_json, event_hash
from ._errors import (
    ConcurrencyError,
    CorruptEventError,
    CorruptStoreError,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    MigrationError,
    RedactionError,
    StoreError,
    StoreFormatError,
    StoreNotFound,
    StoreUnavailable,
    TrackingError,
    TurnlogError,
    UnsupportedStoreURL,
    UpgradeRefused,
    UsageError,
)
from ._ids import uuid7
from ._inline import run_inline
from ._leases import Lease, acquire_lease, held_leases
from ._open import open_store
from ._problem import Problem
from ._raw import RawCopy, RawEvent, RawSnapshot, StoredRow
from ._records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    Tracking,
    VerifyReport,
)
from ._redaction import (
    REDACTIONS_STREAM,
    Redacted,
    Redaction,
    RedactionResult,
    event_hash_matches,
    is_redacted,
    redacted_marker,
)
from ._shown import check_events, check_stream
from ._sqlite import SQLiteEventStore
from ._upcasting import Upcaster, Upcasters
from ._upgrade import UPGRADES_STREAM
from ._url import StoreURL, parse_store_url

if _TYPE_CHECKING:
    from ._memory import MemoryEventStore
    from ._migrate import MigrateReport, migrate
    from ._postgres import PostgresEventStore

__all__ = [
    "ANY",
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
    "Lease",
    "MemoryEventStore",
    "MigrateReport",
    "MigrationError",
    "NO_STREAM",
    "NewEvent",
    "NewSnapshot",
    "PostgresEventStore",
    "Problem",
    "REDACTIONS_STREAM",
    "RawCopy",
    "RawEvent",
    "RawSnapshot",
    "RecordedEvent",
    "Redacted",
    "Redaction",
    "RedactionError",
    "RedactionResult",
    "SQLiteEventStore",
    "STREAM_EXISTS",
    "Snapshot",
    "StoreError",
    "StoreFormatError",
    "StoreNotFound",
    "StoreURL",
    "StoreUnavailable",
    "StoredRow",
    "Tracking",
    "TrackingError",
    "TurnlogError",
    "UPGRADES_STREAM",
    "UnsupportedStoreURL",
    "Upcaster",
    "Upcasters",
    "UpgradeRefused",
    "UsageError",
    "VerifyReport",
    "acquire_lease",
    "check_events",
    "check_stream",
    "encode_events",
    "encode_json",
    "event_hash",
    "event_hash_matches",
    "held_leases",
    "is_redacted",
    "migrate",
    "open_store",
    "parse_store_url",
    "redacted_marker",
    "run_inline",
    "uuid7",
    "verify_raw_events",
]


def __getattr__(name: str) -> object:
    # PEP 562: the PostgreSQL backend needs an optional driver, so it is imported on first use.
    if name == "PostgresEventStore":
        from ._open import postgres_store_class

        return postgres_store_class()
    # Loaded on first use: the read path of the command line imports neither module.
    if name == "MemoryEventStore":
        from ._memory import MemoryEventStore

        return MemoryEventStore
    if name in ("migrate", "MigrateReport"):
        from . import _migrate

        return getattr(_migrate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
