"""The SQLite store's layout: creating it, checking its format version, write transactions, inserts.

Tables (created with sqlite-utils; the format version is kept in ``meta``). Formats 1 and 2
(the text layout; 1 differs by the hash chain of its events only)::

    events(position INTEGER PRIMARY KEY, id UNIQUE, stream, version, type,
           schema, data BLOB, meta BLOB, recorded_at INTEGER (UTC µs), prev_hash, hash,
           UNIQUE(stream, version))
    TRIGGER events_no_delete BEFORE DELETE ON events  -- refuses every delete

(stores created before the trigger have ``AUTOINCREMENT`` instead, and keep it: see
``_create_text_events``)

Format 3 (the compact layout, what new stores get; see ``_sqlite_layout``)::

    events(position INTEGER PRIMARY KEY AUTOINCREMENT, id BLOB(16) UNIQUE, stream_id, version,
           type_id, schema, codec, data BLOB, meta_id, recorded_at, hash BLOB(32),
           UNIQUE(stream_id, version))   -- prev_hash: the hash of the row at version - 1
    streams(stream_id PRIMARY KEY, name UNIQUE)   event_types(type_id PRIMARY KEY, name UNIQUE)
    metas(meta_id PRIMARY KEY, meta UNIQUE)       dicts(dict_id PRIMARY KEY, zdict, sha256)

Both::

    snapshots(stream, type, version, schema, data BLOB, meta BLOB, recorded_at)
    tracking(consumer PRIMARY KEY, position)      -- for consumers that keep their place here
    meta(key PRIMARY KEY, value)                  -- format_version, store_id
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._errors import CorruptStoreError, StoreFormatError, StoreNotFound, StoreUnavailable
from ._ids import uuid7
from ._records import EncodedEvent
from ._sqlite_compact import COMPACT_FORMAT, ZSTD_FORMAT, add_snapshot_codec, create_compact
from ._sqlite_layout import Layout, blob_param, layout_of, writer

if TYPE_CHECKING:
    import sqlite_utils

__all__ = [
    "FORMAT_VERSION",
    "NEW_STORE_FORMAT",
    "TEXT_FORMAT",
    "bump_format",
    "read_format",
    "ensure_store_id",
    "init_schema",
    "insert_events",
    "read_store_id",
    "rollback",
    "write_transaction",
]

FORMAT_VERSION = ZSTD_FORMAT
"""The newest store layout this code writes and reads.

2: events are hashed by the digest chain (format 1 stores hold legacy-chain events, read as
they are; their first write by this turnlog records format 2). 3: the compact layout
(``_sqlite_compact``), payloads compressed with zlib. 4: the same with zstd. A store keeps
its format (so the turnlog that made it can still open it) until ``turnlog migrate`` copies it."""
TEXT_FORMAT = 2
"""The newest format of the text layout (what a format 1 store becomes on its first write)."""
NEW_STORE_FORMAT = TEXT_FORMAT
"""The format of a store created without asking for one (``new_format``, ``?format=`` in a URL).

Still the text layout: the compact one (formats 3 and 4) reads, appends and opens at a
higher CPU cost (measured in docs/performance.md, section Storage). ``turnlog migrate``
writes format 4 unless told otherwise."""


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if there is one."""
    layout_of(conn).discard()
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class _WriteTransaction:
    """``BEGIN IMMEDIATE`` on entry; ``COMMIT`` on a clean exit, ``ROLLBACK`` when the body raised.

    A class rather than a ``contextlib.contextmanager`` generator: every append enters one,
    and a generator-based manager costs several times more per use.
    """

    __slots__ = ("_conn", "_layout")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._layout = layout_of(conn)

    def __enter__(self) -> sqlite3.Connection:
        writer(self._conn).execute("BEGIN IMMEDIATE")
        self._layout.begin()
        return self._conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        layout = self._layout
        if exc_type is None:
            try:
                writer(self._conn).execute("COMMIT")
            except BaseException:
                layout.end()
                raise
            layout.committed()
        else:
            rollback(self._conn)
            layout.end()


def write_transaction(conn: sqlite3.Connection) -> _WriteTransaction:
    """A context manager running its body in one ``BEGIN IMMEDIATE`` transaction on ``conn``."""
    return _WriteTransaction(conn)


def init_schema(
    conn: sqlite3.Connection,
    path: str,
    busy_ms: int,
    *,
    create: bool = True,
    new_format: int = FORMAT_VERSION,
) -> None:
    """Check the format of an existing store, or create the layout in an empty database.

    ``new_format`` is the format an empty database gets: the newest, or ``TEXT_FORMAT`` (2)
    for a store an older turnlog can still open.

    An existing store is checked with reads only, so opening it never waits for a writer
    of another process: the write lock is taken only to create the tables.

    Raises:
        StoreFormatError: the file is not SQLite, not a turnlog store, or a newer one.
        CorruptStoreError: the file is damaged.
        StoreNotFound: the database holds no tables and ``create`` is false.
        StoreUnavailable: the database could not be read.
    """
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    try:
        if _table_names(conn):
            _check(conn, path)
            return
        if not create:
            raise StoreNotFound(path, "the database is empty")
        # Imported here, only to create a store: it takes longer to import (about 70 ms)
        # than opening an existing store takes in all.
        import sqlite_utils

        db = sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
        with write_transaction(conn):
            _create_or_check(db, path, new_format)
    except sqlite3.DatabaseError as exc:
        if "malformed" in str(exc):
            raise CorruptStoreError(path, str(exc)) from exc
        if "not a database" in str(exc):
            raise StoreFormatError(f"{path} is not a SQLite database: {exc}") from exc
        raise StoreUnavailable(f"cannot open {path}: {exc}") from exc
    except (UnicodeError, ValueError, TypeError, AttributeError) as exc:  # a damaged schema table
        raise CorruptStoreError(path, f"its schema cannot be read ({exc!r})") from exc
    finally:
        conn.execute("PRAGMA busy_timeout = 0")


def _table_names(conn: sqlite3.Connection) -> list[str]:
    """The tables of the database (what ``sqlite_utils.Database.table_names`` reads)."""
    return [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _create_or_check(db: sqlite_utils.Database, path: str, new_format: int) -> None:
    if not _table_names(db.conn):  # another process may have created it since the first look
        _create(db, new_format)
        return
    _check(db.conn, path)


def _check(conn: sqlite3.Connection, path: str) -> None:
    tables = set(_table_names(conn))
    if "meta" not in tables or "events" not in tables:
        raise StoreFormatError(f"{path} is a SQLite database but not a turnlog store")
    row = conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
    try:
        found = int(row[0]) if row is not None else None
    except (ValueError, TypeError):
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
    # Format 1 differs only by the hash chain of its events, which verify reads as it is; the
    # first write records format 2 (``bump_format``), so an older turnlog then refuses it.


def _create(db: sqlite_utils.Database, new_format: int) -> None:
    if new_format not in (TEXT_FORMAT, COMPACT_FORMAT, ZSTD_FORMAT):
        raise ValueError(
            f"turnlog creates stores of format {TEXT_FORMAT}, {COMPACT_FORMAT} or {ZSTD_FORMAT}, "
            f"not {new_format}"
        )
    if new_format >= COMPACT_FORMAT:
        create_compact(db.conn, new_format)
    else:
        _create_text_events(db)
    _create_common(db, new_format)


def _create_text_events(db: sqlite_utils.Database) -> None:
    # Positions must never be reused. A rowid is one more than the largest one, so only a
    # delete of the newest row could make its position available again, and the store never
    # deletes an event: the trigger refuses every delete, so the database keeps that promise.
    # AUTOINCREMENT kept it before (stores made so keep it), at the price of a fourth b-tree,
    # ``sqlite_sequence``, written by every commit: one more WAL page per single-event append,
    # 5-6 µs of its 35-40 µs in SQLite (measured, same rows, best of 7 runs of 3,000 appends).
    # Neither resists a deliberate edit of the file (the trigger can be dropped as
    # ``sqlite_sequence`` can be rewritten); ``verify`` is what detects those.
    db.execute(
        """
        CREATE TABLE events (
            position INTEGER PRIMARY KEY,
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
    db.execute(
        "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
        "BEGIN SELECT RAISE(ABORT, 'turnlog never deletes events'); END"
    )


def _create_common(db: sqlite_utils.Database, new_format: int) -> None:
    db.table("snapshots").create(
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
    if new_format >= COMPACT_FORMAT:
        add_snapshot_codec(db.conn)
    db.table("tracking").create({"consumer": str, "position": int}, pk="consumer", not_null={"position"})
    db.table("meta").create({"key": str, "value": str}, pk="key", not_null={"value"})
    db.table("meta").insert({"key": "format_version", "value": str(new_format)})
    ensure_store_id(db.conn)


def read_store_id(conn: sqlite3.Connection) -> str | None:
    """The store id kept in ``meta``, or None (a store made before store ids)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    return None if row is None else str(row[0])


def read_format(conn: sqlite3.Connection) -> int:
    """The store's format version as kept in ``meta``."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
    return int(row[0]) if row is not None else FORMAT_VERSION


def bump_format(conn: sqlite3.Connection) -> None:
    """Record format 2 in a format 1 store (call inside a write transaction, before writing events)."""
    conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (str(TEXT_FORMAT),))


def ensure_store_id(conn: sqlite3.Connection) -> str:
    """The store id, made now when there is none (call inside a write transaction)."""
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", (str(uuid7()),))
    found = read_store_id(conn)
    assert found is not None  # just inserted or already there
    return found


def insert_events(
    conn: sqlite3.Connection,
    stream: Any,
    version: int,
    prev: str,
    events: Sequence[EncodedEvent],
    hashes: list[str],
    now: int,
) -> int | None:
    """Insert the events of one stream (versions after ``version``); return the last position.

    ``stream`` is what the layout stores for the stream (``Layout.stream_key``).

    Several events go in multi-row statements of ``_BLOCK`` rows (then of halving sizes for
    the rest), each binding the stream, the time, its first version and previous hash once and
    six values per row: about half the cost of one statement per row (measured on 1,024-event
    appends: 3.9 µs per row with ``executemany``, 2.1 µs in blocks of 64).
    """
    layout = layout_of(conn)
    execute = writer(conn).execute
    count = len(events)
    if count == 1:  # the common case, one statement with a row of plain parameters
        if layout.compact:
            last = execute(
                layout.single_insert,
                layout.single_row(conn, stream, version, prev, events[0], hashes[0], now),
            ).lastrowid
            if last is not None:
                layout.after_write(conn, last)
            return last
        eid, etype, schema, data, meta = events[0]
        # blobs bound without sqlite3's adapter lookup (blob_param)
        row = (
            eid,
            stream,
            version + 1,
            etype,
            schema,
            blob_param(data),
            blob_param(meta),
            now,
            prev,
            hashes[0],
        )
        return execute(layout.single_insert, row).lastrowid
    encode, hash_param = layout.encode, layout.hash_param
    last = None
    done = 0
    while done < count:
        left = count - done
        size = _BLOCK if left >= _BLOCK else 1 << (left.bit_length() - 1)
        params: list[Any] = [stream, now, version + done + 1, hash_param(hashes[done - 1] if done else prev)]
        extend, append = params.extend, params.append
        if layout.compact:
            for ev, digest in zip(events[done : done + size], hashes[done : done + size], strict=True):
                extend(encode(conn, ev))
                append(hash_param(digest))
        else:  # the text layout stores an event's fields and its hash as they are
            last_meta: bytes | None = None
            meta_param: Any = b""
            for (eid, etype, schema, data, meta), digest in zip(
                events[done : done + size], hashes[done : done + size], strict=True
            ):
                if meta is not last_meta:  # the events of a batch mostly share one meta object
                    meta_param = blob_param(meta)
                    last_meta = meta
                extend((eid, etype, schema, blob_param(data), meta_param, digest))
        last = execute(_block_insert(layout, size), params).lastrowid
        done += size
    if last is not None:
        layout.after_write(conn, last)
    return last


_BLOCK = 64
"""Rows per multi-row insert; 64 to 256 cost the same per row, and 64 keeps statements short."""
_BLOCK_SQL: dict[tuple[bool, int], str] = {}


def _block_insert(layout: Layout, size: int) -> str:
    """The insert of ``size`` consecutive events of one stream, made once per layout and size.

    Parameters: ``?1`` stream, ``?2`` recorded_at, ``?3`` the first version, ``?4`` the first
    previous hash, then ``layout.per_row`` per row (``Layout.encode``'s values, then the hash);
    each row's version is ``?3`` plus its offset and its previous hash is the hash parameter
    of the row before.
    """
    key = (layout.compact, size)
    sql = _BLOCK_SQL.get(key)
    if sql is None:
        rows = []
        per_row = layout.per_row
        for j in range(size):
            n = 5 + per_row * j
            prev = "?4" if j == 0 else f"?{n - 1}"
            rows.append(layout.block_row(n, j, prev))
        sql = _BLOCK_SQL[key] = f"INSERT INTO events ({layout.insert_columns}) VALUES " + ", ".join(rows)
    return sql
