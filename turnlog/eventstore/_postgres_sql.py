"""The PostgreSQL store's settings and statements: URL parsing, the driver import, every SQL text.

Tables (in the schema named by ``?schema=``, default ``public``): ``turnlog_meta`` (the format
version), ``events``, ``snapshots`` and ``tracking``, and the sequence ``events_position``;
``Sql.create`` spells them out and ``Sql.upgrade`` lifts a format-1 schema to format 2.

Format 2 (this code) adds ``events.xid``, the writing transaction's id, and takes positions
from the sequence (format 1 took ``max(position) + 1`` under a table lock); see
``_postgres`` for why global readers then never skip an event.
"""

from __future__ import annotations

import hashlib
import logging
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

from ._errors import StoreError

__all__ = [
    "EVENT_COLUMNS",
    "FORMAT_VERSION",
    "LOCK_TIMEOUT",
    "MANY_STATEMENT",
    "ONE_FORMATS",
    "ONE_KEYS",
    "ONE_STATEMENT",
    "ROW_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "Sql",
    "advisory_key",
    "import_psycopg",
    "masked",
]

FORMAT_VERSION = 2
"""The newest table layout this code reads and writes (format 1 is upgraded on open)."""

LOCK_TIMEOUT = "30s"
"""How long a statement waits for a lock (the position lock, a row) before ``StoreUnavailable``."""
EVENT_COLUMNS = "position, stream, version, event_id, type, schema, data, meta, recorded_at, prev_hash, hash"
"""The columns in table order (inserts and the idempotency lookup)."""
ROW_COLUMNS = "position, event_id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
"""The columns in ``RawEvent`` order (reads, ``verify`` and raw copies)."""
SNAPSHOT_COLUMNS = "stream, type, version, schema, data, meta, recorded_at"
"""The columns of a snapshot in ``RawSnapshot`` order."""


ONE_KEYS = (
    "stream",
    "version",
    "event_id",
    "type",
    "schema",
    "data",
    "meta",
    "recorded_at",
    "prev_hash",
    "hash",
)
"""The parameters of ``Sql.insert_one`` (one event), in the order of the prepared statement's."""
ONE_TYPES = ("text", "bigint", "uuid", "text", "integer", "bytea", "bytea", "bigint", "text", "text")
"""Their types."""
ONE_FORMATS = (0, 0, 0, 0, 0, 1, 1, 0, 0, 0)
"""Their formats when the prepared statement is executed: the payloads in binary, the rest as text."""
ONE_STATEMENT = "turnlog_append_one"
"""The name of ``Sql.insert_one`` prepared on each pooled connection."""
MANY_STATEMENT = "turnlog_append_many"
"""The name of ``Sql.insert_many`` (a group's rows) prepared on each pooled connection."""


def import_psycopg() -> tuple[ModuleType, ModuleType]:
    """The ``psycopg`` and ``psycopg_pool`` modules, or a ``StoreError`` naming the extra to install."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'turnlog[postgres]'"
        ) from exc
    # The pool logs each connection it discards or fails to open (at WARNING); the store
    # reports what matters as StoreUnavailable. Without a handler of its own anywhere above it,
    # a record would go to stderr through logging's last resort; with this one it reaches only
    # the handlers the application configured.
    logger = logging.getLogger("psycopg")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return psycopg, psycopg_pool


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and reprs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Sql:
    """Every statement, with the schema name filled in once."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.schema = schema
        self.events = f"{s}.events"
        self.snapshots = f"{s}.snapshots"
        self.channel = "turnlog_" + hashlib.sha256(schema.encode()).hexdigest()[:24]
        self.position_lock = advisory_key(f"turnlog-positions:{schema}")
        self.sequence = f"{s}.events_position"
        self.create = [
            f"CREATE SCHEMA IF NOT EXISTS {s}",
            f"CREATE TABLE IF NOT EXISTS {s}.turnlog_meta (key text PRIMARY KEY, value text NOT NULL)",
            f"""CREATE TABLE IF NOT EXISTS {s}.events (
                position bigint PRIMARY KEY,
                stream text NOT NULL,
                version bigint NOT NULL,
                event_id uuid NOT NULL UNIQUE,
                type text NOT NULL,
                schema integer NOT NULL,
                data bytea NOT NULL,
                meta bytea NOT NULL,
                recorded_at bigint NOT NULL,
                prev_hash text NOT NULL,
                hash text NOT NULL,
                xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
                UNIQUE (stream, version)
            ) WITH (autovacuum_vacuum_threshold = 100000000, autovacuum_analyze_scale_factor = 0.01)""",
            f"CREATE INDEX IF NOT EXISTS events_type_position ON {s}.events (type, position)",
            f"CREATE SEQUENCE IF NOT EXISTS {self.sequence} AS bigint",
            f"""CREATE TABLE IF NOT EXISTS {s}.snapshots (
                stream text NOT NULL,
                type text NOT NULL,
                version bigint NOT NULL,
                schema integer NOT NULL,
                data bytea NOT NULL,
                meta bytea NOT NULL,
                recorded_at bigint NOT NULL,
                PRIMARY KEY (stream, type, version)
            )""",
            f"""CREATE TABLE IF NOT EXISTS {s}.tracking (
                consumer text PRIMARY KEY,
                position bigint NOT NULL
            )""",
            f"INSERT INTO {s}.turnlog_meta (key, value) VALUES ('format_version', '{FORMAT_VERSION}') "
            "ON CONFLICT (key) DO NOTHING",
        ]
        self.upgrade = [
            # Format 1 writers hold this lock until they commit: wait for them, keep them out.
            f"LOCK TABLE {s}.events IN EXCLUSIVE MODE",
            # Every existing row is committed: xid 0 makes it visible to global readers at once
            # (a constant default adds the column without rewriting the table).
            f"ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS xid xid8 NOT NULL DEFAULT '0'",
            f"ALTER TABLE {s}.events ALTER COLUMN xid SET DEFAULT pg_current_xact_id()",
            f"CREATE SEQUENCE IF NOT EXISTS {self.sequence} AS bigint",
            f"SELECT setval('{self.sequence}', coalesce(max(position), 0) + 1, false) FROM {s}.events",
            f"UPDATE {s}.turnlog_meta SET value = '{FORMAT_VERSION}' WHERE key = 'format_version'",
        ]
        self.format = f"SELECT value FROM {s}.turnlog_meta WHERE key = 'format_version'"
        self.store_id = f"SELECT value FROM {s}.turnlog_meta WHERE key = 'store_id'"
        self.store_id_insert = (
            f"INSERT INTO {s}.turnlog_meta (key, value) VALUES ('store_id', %s) ON CONFLICT (key) DO NOTHING"
        )
        self.lock = f"LOCK TABLE {s}.events IN EXCLUSIVE MODE"
        # What an append reads first, in one statement: its ids already stored ('id' rows) and
        # the head of each of its streams ('head' rows).
        self.lookup = f"""
            SELECT 'id', position, stream, version, event_id::text, type, schema, data, meta, NULL::text
            FROM {s}.events WHERE event_id = ANY(%b::uuid[])
            UNION ALL
            SELECT 'head', NULL, q.stream, e.version, NULL, NULL, NULL, NULL, NULL, e.hash
            FROM unnest(%b::text[]) AS q(stream)
            LEFT JOIN LATERAL (
                SELECT version, hash FROM {s}.events WHERE stream = q.stream ORDER BY version DESC LIMIT 1
            ) AS e ON true"""
        self.heads = f"""
            SELECT q.stream, e.version, e.hash
            FROM unnest(%s::text[]) AS q(stream)
            LEFT JOIN LATERAL (
                SELECT version, hash FROM {s}.events WHERE stream = q.stream ORDER BY version DESC LIMIT 1
            ) AS e ON true"""
        # The append itself: one statement, so in autocommit it is its own transaction and
        # commits in the same round trip (the notification follows, see ``notify``). See
        # ``_append_statement`` for how it reserves positions. ``insert`` takes what the
        # lookup above planned; ``insert_checked`` and ``insert_one`` take a plan made from
        # the heads this store object last wrote or read, and store nothing (no row back,
        # no position taken) unless those are still the heads and no id is stored yet: then
        # an append is one statement instead of two.
        # Arrays go in binary (%b): psycopg's text format escapes every element with a regex.
        unnest_rows = """unnest(%b::text[], %b::bigint[], %b::uuid[], %b::text[], %b::integer[],
                               %b::bytea[], %b::bytea[], %b::bigint[], %b::text[], %b::text[])
                     WITH ORDINALITY AS u(stream, version, event_id, type, schema, data, meta,
                                          recorded_at, prev_hash, hash, n)"""
        self.insert = self._append_statement("true", "%s", unnest_rows)
        self.insert_checked = self._append_statement(
            f"""NOT EXISTS (SELECT FROM {s}.events WHERE event_id = ANY(%b::uuid[]))
                AND NOT EXISTS (
                    SELECT FROM unnest(%b::text[], %b::text[]) AS q(stream, hash)
                    WHERE coalesce((SELECT e.hash FROM {s}.events e WHERE e.stream = q.stream
                                    ORDER BY e.version DESC LIMIT 1), '') <> q.hash)""",
            "%s",
            unnest_rows,
        )
        # The same statement for a group, prepared on each pooled connection (at the protocol
        # level, with ``one_trip_statements``) and sent with the arrays already in binary
        # (``_postgres_write.group_params``): $1 the count of rows, $2 and $3 the streams and
        # hashes of the heads the plan followed, $4 to $13 the columns.
        self.insert_many = self._append_statement(
            # The id probe is a subquery per id, as the head probe is per stream: the plan is
            # generic (made once per connection, maybe while the table is small), and
            # ``event_id = ANY(...)`` could then stay a sequential scan as the table grows.
            f"""NOT EXISTS (SELECT FROM unnest($6::uuid[]) AS i(id)
                            WHERE (SELECT true FROM {s}.events e WHERE e.event_id = i.id))
                AND NOT EXISTS (
                    SELECT FROM unnest($2::text[], $3::text[]) AS q(stream, hash)
                    WHERE coalesce((SELECT e.hash FROM {s}.events e WHERE e.stream = q.stream
                                    ORDER BY e.version DESC LIMIT 1), '') <> q.hash)""",
            "$1::bigint",
            """unnest($4::text[], $5::bigint[], $6::uuid[], $7::text[], $8::integer[],
                      $9::bytea[], $10::bytea[], $11::bigint[], $12::text[], $13::text[])
                 WITH ORDINALITY AS u(stream, version, event_id, type, schema, data, meta,
                                      recorded_at, prev_hash, hash, n)""",
        )
        # One event: scalar parameters (cheaper to send than eleven one-element arrays) and a
        # statement of its own (``_one_event_statement``): the insert reads the reservation as a
        # subquery, not through two CTEs. The head it must follow is its own prev_hash.
        self.insert_one = self._one_event_statement()
        # A single-event append in one round trip (``PostgresEventStore._insert_notified``):
        # BEGIN, ``insert_one``, COMMIT and NOTIFY sent together in libpq's pipeline mode with
        # one Sync, so the server answers all four at once; the notification is a transaction of
        # its own (see ``notify`` for why). ``insert_one`` is prepared on every pooled connection
        # (``prepare_one``, run when the pool opens a connection), so the server plans it once
        # per connection, and its payloads travel in binary (no hex to write and parse). On an
        # error in the insert, the server skips the rest up to the Sync and leaves the session in
        # the aborted transaction (the caller rolls it back).
        one = self.insert_one
        for number, key in enumerate(ONE_KEYS, 1):
            one = one.replace(f"%({key})s", f"${number}")
        self.prepare_one = f"PREPARE {ONE_STATEMENT} ({', '.join(ONE_TYPES)}) AS {one}"
        # BEGIN, COMMIT and the NOTIFY of a one-trip append, prepared on each pooled connection
        # too (at the protocol level: SQL's PREPARE takes none of them), so the server parses
        # none of the four statements per append.
        self.one_trip_statements = (
            (b"turnlog_begin", b"BEGIN"),
            (b"turnlog_commit", b"COMMIT"),
            (b"turnlog_notify", f'NOTIFY "{self.channel}"'.encode()),
            (MANY_STATEMENT.encode(), self.insert_many.encode()),
        )
        # Sent after the append has committed, in a transaction of its own: a transaction that
        # notifies holds a database-wide lock from before its commit until after it (so that
        # notifications queue in commit order), which would make appends commit, WAL flush
        # included, one at a time. A notification-only transaction writes no WAL to flush.
        self.notify = f"SELECT pg_notify('{self.channel}', %s)"
        self.take_lock = f"SELECT pg_advisory_lock({self.position_lock})"
        self.release_lock = f"SELECT pg_advisory_unlock({self.position_lock})"
        # What import_raw must stay above: every position handed out so far, and every one stored
        # (the sequence runs ahead of the stored ones after a rollback, or an import killed
        # after moving it: setval is not undone by a rollback).
        self.positions_high = f"""
            SELECT (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {self.sequence}),
                   (SELECT coalesce(max(position), 0) FROM {s}.events)"""
        self.reserved_high = f"SELECT pg_current_xact_id()::text, r.* FROM ({self.positions_high}) AS r"
        # SHARE conflicts with the ROW EXCLUSIVE lock every writer of events holds from the
        # start of its statement (before it takes positions) to its end: once granted, no
        # position handed out can still be stored by anyone, and none is handed out until commit.
        self.quiesce = f"LOCK TABLE {s}.events IN SHARE MODE"
        self.advance = f"SELECT setval('{self.sequence}', greatest(%s, 1), %s)"
        self.insert_raw = f"""
            WITH ins AS (
                INSERT INTO {s}.events ({EVENT_COLUMNS})
                SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::uuid[], %s::text[],
                                     %s::integer[], %s::bytea[], %s::bytea[], %s::bigint[], %s::text[],
                                     %s::text[])
                RETURNING position
            )
            SELECT pg_notify('{self.channel}', max(position)::text) FROM ins"""
        # A row is visible to global readers (read_all, subscribe, head, raw_events) once no
        # transaction older than the one that wrote it is still running: nothing before it in
        # the log can appear any more. The snapshot is the statement's own.
        self.settled = "xid < pg_snapshot_xmin(pg_current_snapshot())"
        self.xmin = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
        self.head = (
            f"SELECT coalesce((SELECT position FROM {s}.events WHERE {self.settled} "
            "ORDER BY position DESC LIMIT 1), 0)"
        )
        self.stream_version = f"SELECT coalesce(max(version), 0) FROM {s}.events WHERE stream = %s"
        self.listen = f'LISTEN "{self.channel}"'

    def _append_statement(self, gate: str, count: str, rows: str) -> str:
        """The append statement: reserve ``count`` positions when ``gate`` holds, insert ``rows``.

        ``r`` takes the session-level advisory lock, then the transaction's id (assigning it)
        and a block of positions from the sequence, then releases the lock: subqueries with
        volatile functions (and OFFSET 0) are evaluated inside out, once, and a
        data-modifying CTE reads ``r`` after it is complete. So the lock is held for the
        reservation only, not through the insert or the commit, and between appenders a
        higher transaction id always comes with higher positions. ``gate`` is a one-time
        filter on the innermost subquery: when it is false, no lock is taken, no position
        is reserved and no row is inserted or returned. ``rows`` yields the columns of the
        events and ``n``, their order (from 1).
        """
        s = f'"{self.schema}"'
        # One position: nextval alone (setval would write the sequence on every append).
        take = f"nextval('{self.sequence}')"
        if count != "1":
            take = f"setval('{self.sequence}', {take} + {count} - 1)"
        return f"""
            WITH r AS MATERIALIZED (
                SELECT x.xid, x.last, pg_advisory_unlock({self.position_lock}) AS unlocked
                FROM (
                    SELECT pg_current_xact_id()::text AS xid,
                           {take} AS last
                    FROM (SELECT pg_advisory_lock({self.position_lock}) WHERE {gate} OFFSET 0) AS l
                    OFFSET 0
                ) AS x
            ), ins AS (
                INSERT INTO {s}.events ({EVENT_COLUMNS})
                SELECT r.last - {count} + u.n, u.stream, u.version, u.event_id, u.type, u.schema,
                       u.data, u.meta, u.recorded_at, u.prev_hash, u.hash
                FROM r, {rows}
            )
            SELECT r.xid, r.last, r.unlocked FROM r"""

    def _one_event_statement(self) -> str:
        """The append of one event (``insert_one``): ``_append_statement`` cut down to one row.

        The same reservation (lock, transaction id and position, unlock, evaluated inside out)
        and the same gate (no id stored, the stream head still the one planned), read by the
        insert as a subquery, which yields its row, unlock included, before the row is
        inserted: no CTE to materialize and scan, about 7,000 fewer server instructions.
        """
        s = f'"{self.schema}"'
        gate = f"""NOT EXISTS (SELECT FROM {s}.events WHERE event_id = %(event_id)s::uuid)
                AND coalesce((SELECT e.hash FROM {s}.events e WHERE e.stream = %(stream)s::text
                              ORDER BY e.version DESC LIMIT 1), '') = %(prev_hash)s::text"""
        return f"""
            INSERT INTO {s}.events ({EVENT_COLUMNS}, xid)
            SELECT r.last, %(stream)s::text, %(version)s::bigint, %(event_id)s::uuid, %(type)s::text,
                   %(schema)s::integer, %(data)s::bytea, %(meta)s::bytea, %(recorded_at)s::bigint,
                   %(prev_hash)s::text, %(hash)s::text, r.xid
            FROM (
                SELECT x.xid, x.last, pg_advisory_unlock({self.position_lock}) AS unlocked
                FROM (
                    SELECT pg_current_xact_id() AS xid, nextval('{self.sequence}') AS last
                    FROM (SELECT pg_advisory_lock({self.position_lock}) WHERE {gate} OFFSET 0) AS l
                    OFFSET 0
                ) AS x
                OFFSET 0
            ) AS r
            RETURNING xid::text, position"""


def advisory_key(text: str) -> int:
    """A signed 64-bit advisory lock key derived from ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)
