"""The public names of ``turnlog.eventstore``: exactly these, sorted, and nothing public left out.

A name added to or removed from the layer's surface is a decision, so it changes this list.
"""

from __future__ import annotations

import turnlog.eventstore

PUBLIC = [
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


def test_all_is_exactly_the_public_api() -> None:
    """__all__ is the intended list, in sorted order."""
    assert turnlog.eventstore.__all__ == PUBLIC == sorted(PUBLIC)


# Names the package resolves through ``__getattr__`` (PEP 562), so they are not in its globals:
# the PostgreSQL backend (an optional driver) and what a read of a SQLite store never needs.
LOADED_ON_FIRST_USE = {"PostgresEventStore", "MemoryEventStore", "migrate", "MigrateReport"}


def test_every_public_attribute_is_exported() -> None:
    """No public name is importable from the package without being in __all__ (httpx style)."""
    public = sorted(name for name in vars(turnlog.eventstore) if not name.startswith("_"))
    assert public == sorted(set(PUBLIC) - LOADED_ON_FIRST_USE)


def test_every_exported_name_resolves() -> None:
    """Each name of __all__ is an attribute of the package (PostgresEventStore through __getattr__)."""
    for name in PUBLIC:
        assert getattr(turnlog.eventstore, name) is not None
