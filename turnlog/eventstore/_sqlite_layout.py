"""How the SQLite store's event rows are laid out: the ``Layout`` every reader and writer asks.

Everything that reads or writes event rows asks the connection's ``Layout`` for its SQL and
turns what it selects into logical rows (``RawEvent`` field order: text ids and hex hashes,
stream and type names, the payload bytes as hashed) with ``Layout.row``, so nothing above
the SQLite modules knows which format a store has. ``Layout`` itself is the text layout of
formats 1 and 2, where rows are stored as they read; the compact layout of formats 3 and 4 is
``_sqlite_compact.CompactLayout``. A store's connections are ``StoreConnection`` s, which
carry their layout (``_sqlite_compact.attach`` gives it when the store is opened).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ._records import EncodedEvent

__all__ = [
    "COLUMNS",
    "COPIED_BLOB_BYTES",
    "TEXT_LAYOUT",
    "Layout",
    "StoreConnection",
    "blob_param",
    "layout_of",
    "writer",
]

COLUMNS = "position, id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
"""Every column of an event in the text layout, in ``RawEvent`` order."""


COPIED_BLOB_BYTES = 64 * 1024
"""Payloads up to this size are bound as ``bytearray`` copies of their bytes.

Python's ``sqlite3`` binds an int, float, str or bytearray as it is, and looks anything else
up in ``sqlite3.adapters`` first, ``bytes`` included: after the dict, the lookups of
``__adapt__`` on its protocol and ``__conform__`` on the value each raise and clear an
``AttributeError``, about 1,900 instructions per parameter. A copy of a small payload costs
about 300 (both measured with callgrind on 300-byte blobs; the stored blob is the same). A
large payload keeps its bytes: its copy would cost more than the lookups, and the memory of
a whole block of them.
"""


def blob_param(value: Any) -> Any:
    """``value`` as bound cheaply: a ``bytearray`` copy of small ``bytes`` (see ``COPIED_BLOB_BYTES``)."""
    if value.__class__ is bytes and len(value) <= COPIED_BLOB_BYTES:
        return bytearray(value)
    return value


class Layout:
    """The text layout (formats 1 and 2): rows are stored as they read; the base of every layout."""

    compact = False
    events_from = "events"
    """The ``FROM`` clause of an event select."""
    select_columns = COLUMNS
    stream_col = "stream"
    type_col = "type"
    id_col = "id"
    position_col = "position"
    version_col = "version"
    insert_columns = "id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
    per_row = 6
    """Parameters of one row in a block insert, hash included."""
    bound_snapshots = (
        "SELECT s.stream, s.type, s.version, s.schema, s.data, s.meta, s.recorded_at, e.hash "
        "FROM snapshots s LEFT JOIN events e ON e.stream = s.stream AND e.version = s.version"
    )
    """Snapshots with the hash of the log's event at their version (NULL when there is none)."""

    snapshot_columns = "stream, type, version, schema, data, meta, recorded_at"
    """The columns of a snapshot in ``RawSnapshot`` order, then what ``snapshot_row`` needs."""
    upsert_snapshot = f"INSERT OR REPLACE INTO snapshots ({snapshot_columns}) VALUES (?, ?, ?, ?, ?, ?, ?)"

    def snapshot_params(self, values: Sequence[Any]) -> Sequence[Any]:
        """The stored values of a snapshot given in ``RawSnapshot`` order."""
        return values

    def snapshot_row(self, row: Sequence[Any]) -> Sequence[Any]:
        """A selected snapshot row (``snapshot_columns`` or ``bound_snapshots``) in ``RawSnapshot`` order.

        A bound row keeps the log's hash as its eighth field.
        """
        return row

    def select(self, where: str = "1", tail: str = "") -> str:
        """An event select of rows for ``row``; ``where`` names the columns as ``*_col`` say."""
        return f"SELECT {self.select_columns} FROM {self.events_from} WHERE {where} {tail}"

    def page_select(self, where: str = "1", tail: str = "") -> str:
        """An event select of pages of rows for ``page`` (then ``row``): reads by stream or position."""
        return self.select(where, tail)

    def page(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """A page of ``page_select`` rows as ``select`` gives them (still for ``row``)."""
        return rows

    stored_columns = "position, stream, version, type, schema, data, meta, recorded_at"
    """The columns of a ``StoredRow`` (``read_rows``), then what ``stored_rows`` needs."""

    def stored_select(self, where: str = "1", tail: str = "") -> str:
        """An event select of rows for ``stored_rows``."""
        return f"SELECT {self.stored_columns} FROM {self.events_from} WHERE {where} {tail}"

    def stored_rows(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        """``stored_select`` rows as ``StoredRow`` s (the text layout stores them as they read)."""
        return rows

    def stream_is(self) -> str:
        """A condition on one stream, given by name as the next parameter."""
        return f"{self.stream_col} = ?"

    def row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """The logical row (``RawEvent`` order) of a selected one."""
        return tuple(row)

    def event_row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """``row`` for ``decode_event``, which also takes the id as a ``UUID``."""
        return self.row(row)

    def id_param(self, event_id: str) -> Any:
        """An id as stored, to look it up."""
        return event_id

    def filters(self, types: list[str] | None, stream_prefix: str | None) -> tuple[str, list[Any]]:
        """``AND`` conditions for a read by type and stream prefix."""
        sql = ""
        params: list[Any] = []
        if types is not None:
            if not types:
                return " AND 0", []
            sql += f" AND {self.type_col} IN ({','.join('?' * len(types))})"
            params.extend(types)
        if stream_prefix:
            sql += f" AND substr({self.stream_col}, 1, ?) = ?"
            params.extend((len(stream_prefix), stream_prefix))
        return sql, params

    def list_streams_sql(self, prefix: str | None) -> tuple[str, list[Any]]:
        """``(stream, last version)`` of every stream under ``prefix``, by name."""
        filters, params = self.filters(None, prefix)
        return (
            f"SELECT stream, max(version) FROM events WHERE 1{filters} GROUP BY stream ORDER BY stream",
            params,
        )

    def stream_version_sql(self) -> str:
        """The last version of the stream named by the parameter."""
        return f"SELECT max(version) FROM events WHERE {self.stream_is()}"

    def head(self, conn: sqlite3.Connection, stream: str) -> tuple[Any, int, str]:
        """``(key, version, hash)`` of the stream's last event; key None when the stream is new."""
        row = writer(conn).execute(_TEXT_HEAD, (stream,)).fetchone()
        return (stream, row[0], row[1]) if row is not None else (stream, 0, "")

    def stream_key(self, conn: sqlite3.Connection, stream: str) -> Any:
        """What a new stream's rows store for it (made now if need be, in the write transaction)."""
        return stream

    def event_hash(self, conn: sqlite3.Connection, stream: str, version: int) -> str | None:
        """The hash of one event, or None when there is none."""
        found = conn.execute(
            f"SELECT hash FROM events e WHERE {self.stream_is()} AND version = ?", (stream, version)
        ).fetchone()
        return None if found is None else self._hash_text(found[0])

    def _hash_text(self, value: Any) -> Any:
        return value

    def encode(self, conn: sqlite3.Connection, ev: EncodedEvent) -> Sequence[Any]:
        """The stored values of one new event, in ``insert_columns`` order without the shared ones."""
        return ev  # id, type, schema, data, meta: the order of the row's placeholders

    def hash_param(self, digest: str) -> Any:
        """A hash as stored."""
        return digest

    single_insert = (
        "INSERT INTO events (id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def single_row(
        self,
        conn: sqlite3.Connection,
        key: Any,
        version: int,
        prev: str,
        ev: EncodedEvent,
        digest: str,
        now: int,
    ) -> tuple[Any, ...]:
        """The parameters of ``single_insert``: one event after ``version`` of the stream ``key``."""
        return (ev.id, key, version + 1, ev.type, ev.schema, ev.data, ev.meta, now, prev, digest)

    def raw_params(self, conn: sqlite3.Connection, event: Any) -> tuple[Any, ...]:
        """The stored values of a ``RawEvent``, in ``raw_insert`` order."""
        return tuple(event)

    raw_insert = f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    def block_row(self, n: int, j: int, prev: str) -> str:
        """One row of a block insert (see ``_sqlite_schema.insert_events``)."""
        return f"(?{n}, ?1, ?3 + {j}, ?{n + 1}, ?{n + 2}, ?{n + 3}, ?{n + 4}, ?2, {prev}, ?{n + 5})"

    def set_payload(
        self, conn: sqlite3.Connection, stream: str, version: int, data: bytes, meta: bytes
    ) -> None:
        """Replace one event's stored payload and meta (a redaction)."""
        conn.execute(
            "UPDATE events SET data = ?, meta = ? WHERE stream = ? AND version = ?",
            (data, meta, stream, version),
        )

    def set_hashes(self, conn: sqlite3.Connection, updates: Iterable[tuple[int, str, str]]) -> None:
        """Set ``(position, prev_hash, hash)`` of events (a chain upgrade)."""
        conn.executemany(
            "UPDATE events SET prev_hash = ?, hash = ? WHERE position = ?",
            [(prev, digest, position) for position, prev, digest in updates],
        )

    def after_write(self, conn: sqlite3.Connection, last_position: int) -> None:
        """After events are inserted, in the same transaction (the compact layout trains there)."""

    def before_import(self, conn: sqlite3.Connection, payloads: list[bytes]) -> None:
        """Before a raw copy's events are inserted (the compact layout may train from them)."""

    def end(self) -> None:
        """The write transaction ended without a commit."""

    def begin(self) -> None:
        """A write transaction began."""

    def committed(self) -> None:
        """The write transaction committed: what it learned is now true for every reader."""

    def discard(self) -> None:
        """The write transaction (or a savepoint of it) rolled back: forget what it learned."""


TEXT_LAYOUT = Layout()
_TEXT_HEAD = "SELECT version, hash FROM events WHERE stream = ? ORDER BY version DESC LIMIT 1"


class StoreConnection(sqlite3.Connection):
    """A store's connection: knows its store's layout (the text one until told otherwise).

    It keeps one cursor, ``writer``, for the statements of the append path (``BEGIN``, the
    head, the insert, ``COMMIT``): ``Connection.execute`` makes, registers and frees a new
    cursor on every call, about 0.7 µs of a 1.5 µs statement. A store's connection has one
    user at a time (the store's lock), and a cursor's next ``execute`` resets its previous
    statement, so a statement it ran never outlives the transaction it ran in.
    """

    layout: Layout = TEXT_LAYOUT
    writer: sqlite3.Cursor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writer = self.cursor()


def writer(conn: sqlite3.Connection) -> sqlite3.Cursor | sqlite3.Connection:
    """What runs the write path's statements on ``conn``: its kept cursor, or ``conn`` itself."""
    return conn.writer if isinstance(conn, StoreConnection) else conn


def layout_of(conn: sqlite3.Connection) -> Layout:
    """The layout of the store ``conn`` is open on (the text layout for a plain connection)."""
    return conn.layout if isinstance(conn, StoreConnection) else TEXT_LAYOUT
