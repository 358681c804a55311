"""The SQLite store's layout: creating it, checking its format version, write transactions.

Layout (created with sqlite-utils; the format version is kept in ``meta``)::

    events(position INTEGER PRIMARY KEY AUTOINCREMENT, id UNIQUE, stream, version, type,
           schema, data BLOB, meta BLOB, recorded_at INTEGER (UTC µs), prev_hash, hash,
           UNIQUE(stream, version))
    snapshots(stream, type, version, schema, data BLOB, meta BLOB, recorded_at)
    tracking(consumer PRIMARY KEY, position)      -- for consumers that keep their place here
    meta(key PRIMARY KEY, value)                  -- format_version
"""

from __future__ import annotations

import sqlite3
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import StoreFormatError, StoreUnavailable

if TYPE_CHECKING:
    import sqlite_utils

__all__ = ["FORMAT_VERSION", "init_schema", "rollback", "write_transaction"]

FORMAT_VERSION = 1
"""The newest store layout this code writes and reads."""


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if there is one."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class _WriteTransaction:
    """``BEGIN IMMEDIATE`` on entry; ``COMMIT`` on a clean exit, ``ROLLBACK`` when the body raised.

    A class rather than a ``contextlib.contextmanager`` generator: every append enters one,
    and a generator-based manager costs several times more per use.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        else:
            rollback(self._conn)


def write_transaction(conn: sqlite3.Connection) -> _WriteTransaction:
    """A context manager running its body in one ``BEGIN IMMEDIATE`` transaction on ``conn``."""
    return _WriteTransaction(conn)


def init_schema(conn: sqlite3.Connection, path: str, busy_ms: int) -> None:
    """Create the layout in an empty database, or check the format of an existing store.

    Raises:
        StoreFormatError: the file is not SQLite, not a turnlog store, or a newer one.
        StoreUnavailable: the database could not be read.
    """
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    try:
        # Imported here: it is only needed when a store is opened, and takes a while to load.
        import sqlite_utils

        with write_transaction(conn):
            db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
            _create_or_check(db, path)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc) or "malformed" in str(exc):
            raise StoreFormatError(f"{path} is not a SQLite database: {exc}") from exc
        raise StoreUnavailable(f"cannot open {path}: {exc}") from exc
    finally:
        conn.execute("PRAGMA busy_timeout = 0")


def _create_or_check(db: sqlite_utils.Database, path: str) -> None:
    tables = set(db.table_names())
    if not tables:
        _create(db)
        return
    if "meta" not in tables or "events" not in tables:
        raise StoreFormatError(f"{path} is a SQLite database but not a turnlog store")
    row = db.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
    try:
        found = int(row[0]) if row is not None else None
    except ValueError:
        found = None
    if found is None:
        raise StoreFormatError(f"{path} has no turnlog format version; it is not a turnlog store")
    if found > FORMAT_VERSION:
        raise StoreFormatError(
            f"{path} was written by a newer turnlog (store format {found}; this version "
            f"reads formats up to {FORMAT_VERSION}); upgrade turnlog to open it",
            found=found,
            supported=FORMAT_VERSION,
        )
    # Older formats would be migrated here, one step at a time; format 1 is the first.


def _create(db: sqlite_utils.Database) -> None:
    # sqlite-utils has no public switch for AUTOINCREMENT, which keeps positions from
    # being reused after a delete, so the events table is spelled out.
    db.execute(
        """
        CREATE TABLE events (
            position INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE,
            stream TEXT NOT NULL,
            version INTEGER NOT NULL,
            type TEXT NOT NULL,
            schema INTEGER NOT NULL,
            data BLOB NOT NULL,
            meta BLOB NOT NULL,
            recorded_at INTEGER NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            UNIQUE (stream, version)
        )
        """
    )
    db["snapshots"].create(
        {
            "stream": str,
            "type": str,
            "version": int,
            "schema": int,
            "data": bytes,
            "meta": bytes,
            "recorded_at": int,
        },
        pk=("stream", "type", "version"),
        not_null={"stream", "type", "version", "schema", "data", "meta", "recorded_at"},
    )
    db["tracking"].create({"consumer": str, "position": int}, pk="consumer", not_null={"position"})
    db["meta"].create({"key": str, "value": str}, pk="key", not_null={"value"})
    db["meta"].insert({"key": "format_version", "value": str(FORMAT_VERSION)})
