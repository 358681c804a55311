"""What the SQLite store writes inside its transactions: appends, re-sends, raw copies, tracking.

Plain functions of an open write transaction (``_sqlite_schema.write_transaction``), so that
the store (``_sqlite``) and its redaction and chain upgrade (``_sqlite_redact``) write events
the same way without either importing the other.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import astuple
from typing import Any

from ._encoding import chain_hashes
from ._errors import ConcurrencyError, StoreError, TrackingError
from ._raw import RawEvent, RawSnapshot, check_continuation
from ._records import ANY, STREAM_EXISTS, AppendResult, EncodedEvent, ExpectedVersion, Tracking
from ._results import chained_result, match_resent
from ._sqlite_layout import layout_of, writer
from ._sqlite_schema import insert_events, rollback
from ._upcasting import Upcasters
from ._validation import PreparedAppend, version_matches

__all__ = [
    "COLUMNS",
    "SNAPSHOT_COLUMNS",
    "UPSERT_SNAPSHOT",
    "find_resent",
    "insert_entries",
    "insert_raw",
    "record_tracking",
    "tracking_position",
]

COLUMNS = "position, id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
"""Every column of an event, in ``RawEvent`` order (what ``decode_event`` and ``ChainChecker`` read)."""
SNAPSHOT_COLUMNS = "stream, type, version, schema, data, meta, recorded_at"
"""Every column of a snapshot, in ``RawSnapshot`` order."""
UPSERT_SNAPSHOT = f"INSERT OR REPLACE INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
_TRACKING = "SELECT position FROM tracking WHERE consumer = ?"
_SAVE_TRACKING = "INSERT OR REPLACE INTO tracking (consumer, position) VALUES (?, ?)"


def insert_entries(
    conn: sqlite3.Connection,
    entries: list[PreparedAppend],
    upcasters: Upcasters,
    location: str,
    *,
    savepoint: str | None = None,
) -> list[AppendResult]:
    """Check and insert ``entries`` in the open transaction (or in its ``savepoint``).

    A re-send of stored events returns the original results and inserts nothing.

    Raises:
        ConcurrencyError: an entry's expected version does not match its stream.
        IdempotencyError: stored ids with other content, or a mix of stored and new ones.
    """
    now = time.time_ns() // 1000
    layout = layout_of(conn)
    if len(entries) == 1:  # one stream (every append but append_batch): no plan to keep
        stream, events, expected = entries[0]
        key, version, prev = layout.head(conn, stream)
        if expected is not ANY and expected != version and not (expected is STREAM_EXISTS and version):
            return _refused(conn, entries, upcasters, stream, expected, version)
        if key is None:  # a new stream of the compact layout: its number, made now
            key = layout.stream_key(conn, stream)
        hashes = chain_hashes(stream, version, prev, events, now)
        last = _insert(
            conn, entries, upcasters, location, savepoint, (key, version, prev, events, hashes, now)
        )
        if isinstance(last, list):  # a re-send found by its ids
            return last
        return [chained_result(last - len(events) + 1, stream, version, prev, events, hashes, now, upcasters)]
    plans: list[tuple[str, Any, int, str, Sequence[EncodedEvent], list[str]]] = []
    heads: dict[str, tuple[Any, int, str]] = {}
    for stream, events, expected in entries:
        head = heads.get(stream)
        if head is None:
            head = layout.head(conn, stream)
        key, version, prev = head
        if not version_matches(expected, version):
            return _refused(conn, entries, upcasters, stream, expected, version)
        if key is None:
            key = layout.stream_key(conn, stream)
        hashes = chain_hashes(stream, version, prev, events, now)
        plans.append((stream, key, version, prev, events, hashes))
        heads[stream] = (key, version + len(hashes), hashes[-1])
    results: list[AppendResult] = []
    for stream, key, version, prev, events, hashes in plans:
        last = _insert(
            conn, entries, upcasters, location, savepoint, (key, version, prev, events, hashes, now)
        )
        if isinstance(last, list):
            return last
        results.append(
            chained_result(last - len(events) + 1, stream, version, prev, events, hashes, now, upcasters)
        )
    return results


def _refused(
    conn: sqlite3.Connection,
    entries: list[PreparedAppend],
    upcasters: Upcasters,
    stream: str,
    expected: ExpectedVersion,
    version: int,
) -> list[AppendResult]:
    """The original results of a re-send whose stream has moved on since; else ``ConcurrencyError``."""
    original = find_resent(conn, entries, upcasters)
    if original is not None:
        return original
    raise ConcurrencyError(stream, expected, version)


def _insert(
    conn: sqlite3.Connection,
    entries: list[PreparedAppend],
    upcasters: Upcasters,
    location: str,
    savepoint: str | None,
    args: tuple[Any, int, str, Sequence[EncodedEvent], list[str], int],
) -> int | list[AppendResult]:
    """``insert_events(conn, *args)``: the last position, or the original results of a re-send.

    A stored event id fails the insert: the transaction (or its ``savepoint``) is rolled back
    and the append is either a re-send of an acknowledged one or a clash.
    """
    try:
        last = insert_events(conn, *args)
    except sqlite3.IntegrityError as exc:
        if savepoint is None:
            rollback(conn)
            writer(conn).execute("BEGIN IMMEDIATE")
        else:
            layout_of(conn).discard()
            conn.execute(f"ROLLBACK TO {savepoint}")
        original = find_resent(conn, entries, upcasters)
        if original is not None:
            return original
        raise StoreError(f"{location}: unexpected constraint failure: {exc}") from exc
    if last is None:  # sqlite3 reports no rowid only for statements that insert nothing
        raise StoreError(f"{location}: the insert reported no position")
    return last


def find_resent(
    conn: sqlite3.Connection, entries: list[PreparedAppend], upcasters: Upcasters
) -> list[AppendResult] | None:
    """Original results if every event is already stored identically, None if none is.

    Raises:
        IdempotencyError: some ids are stored with other content, or only some are stored.
    """
    layout = layout_of(conn)
    ids = [layout.id_param(ev.id) for entry in entries for ev in entry.events]
    stored: dict[str, tuple[Any, ...]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(layout.select(f"{layout.id_col} IN ({marks})"), chunk):
            logical = layout.row(row)
            # keyed by id, then the rest in RawEvent order without the id
            stored[logical[1]] = (logical[0], *logical[2:])
    if not stored:
        return None
    return match_resent(entries, stored, upcasters)


def insert_raw(conn: sqlite3.Connection, events: list[RawEvent], snapshots: list[RawSnapshot]) -> None:
    """Check that ``events`` continue the log and their streams, then insert them as they are."""
    layout = layout_of(conn)
    head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    tips: dict[str, tuple[int, str]] = {}
    for event in events:
        tip = tips.get(event.stream)
        if tip is None:
            _, version, digest = layout.head(conn, event.stream)
            tip = (version, digest)
        check_continuation(event, tip, head)
        head = event.position
        tips[event.stream] = (event.version, event.hash)
    # Checked before any row is written: a refused import changes nothing.
    if events:
        layout.before_import(conn, [bytes(event.data) for event in events])
    conn.executemany(layout.raw_insert, [layout.raw_params(conn, event) for event in events])
    conn.executemany(layout.upsert_snapshot, [layout.snapshot_params(astuple(snap)) for snap in snapshots])


def tracking_position(conn: sqlite3.Connection, consumer: str) -> int | None:
    """The position recorded for ``consumer``, or None."""
    row = conn.execute(_TRACKING, (consumer,)).fetchone()
    return None if row is None else int(row[0])


def record_tracking(conn: sqlite3.Connection, tracking: Tracking) -> None:
    """Record ``tracking`` in the open write transaction, if it moves its consumer forward.

    Raises:
        TrackingError: the consumer's recorded position is at or above ``tracking.position``.
    """
    recorded = tracking_position(conn, tracking.consumer)
    if recorded is not None and tracking.position <= recorded:
        raise TrackingError(tracking.consumer, tracking.position, recorded)
    conn.execute(_SAVE_TRACKING, (tracking.consumer, tracking.position))
