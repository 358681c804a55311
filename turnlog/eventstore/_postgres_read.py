"""The PostgreSQL store's reads: the queries of the global log, of snapshots, and ``verify``.

Global reads filter rows with ``Sql.settled`` (see ``_postgres``'s module docstring); the
functions here build those queries, and ``PostgresEventStore`` runs them.
"""

from __future__ import annotations

from typing import Any

from ._chain import ChainChecker
from ._errors import InvalidEventError
from ._postgres_redact import redaction_rows_query
from ._postgres_sql import ROW_COLUMNS, Sql
from ._raw import RawEvent, StoredRow, raw_event
from ._records import VerifyReport
from ._redaction import REDACTIONS_STREAM, RedactionRecords

__all__ = [
    "bound_snapshots",
    "check_bound",
    "live_query",
    "range_query",
    "raw_events_of",
    "stored_rows_of",
    "stored_rows_query",
    "verify_on",
]

_STORED_COLUMNS = "position, stream, version, type, schema, data, meta, recorded_at"
"""The columns of a ``StoredRow``, in its order."""


def range_query(
    sql: Sql,
    low: int,
    high: int | None,
    types: list[str] | None,
    prefix: str | None,
    backwards: bool,
    page: int,
    bound: str | None = None,
) -> tuple[str, list[Any]]:
    """A page of the global log from ``low`` (to ``high``), filtered; its query and parameters."""
    where = ["position >= %s", sql.settled]
    params: list[Any] = [low]
    if bound is not None:
        where.append(bound)
    if high is not None:
        where.append("position <= %s")
        params.append(high)
    if types is not None:
        where.append("type = ANY(%s::text[])")
        params.append(types)
    if prefix is not None:
        where.append("starts_with(stream, %s)")
        params.append(prefix)
    order = "DESC" if backwards else "ASC"
    query = (
        f"SELECT {ROW_COLUMNS} FROM {sql.events} WHERE {' AND '.join(where)} "
        f"ORDER BY position {order} LIMIT {page}"
    )
    return query, params


def live_query(
    sql: Sql, low: int, types: list[str] | None, prefix: str | None, page: int
) -> tuple[str, list[Any]]:
    """Matching events from ``low`` up to the head, that head and the top: one statement, one snapshot.

    Each row is the head, the top, then an event's columns (NULL columns when none matched).
    The head is the last settled position; the top is the last committed one, settled or not.
    A top above the head means events are committed but held back by an older transaction,
    which may end without any notification (it need not be an append of this store): the
    subscriber must look again soon rather than wait for one.
    """
    # The head is read first, in the same statement: everything at or below it is final.
    query, params = range_query(sql, low, None, types, prefix, False, page, "position <= h.head")
    query = (
        f"WITH h(head) AS MATERIALIZED ({sql.head}), "
        f"t(top) AS MATERIALIZED (SELECT coalesce(max(position), 0) FROM {sql.events}) "
        f"SELECT h.head, t.top, e.* FROM h CROSS JOIN t LEFT JOIN LATERAL ({query}) AS e ON true"
    )
    return query, params


def bound_snapshots(sql: Sql) -> str:
    """Snapshots with the hash of the log's event at their version (NULL when there is none)."""
    return (
        f"SELECT s.stream, s.type, s.version, s.schema, s.data, s.meta, s.recorded_at, e.hash "
        f"FROM {sql.snapshots} s LEFT JOIN {sql.events} e "
        "ON e.stream = s.stream AND e.version = s.version"
    )


def raw_events_of(rows: list[tuple[Any, ...]]) -> list[RawEvent]:
    """Rows of ``ROW_COLUMNS`` as ``RawEvent`` (psycopg's ``UUID`` and ``memoryview`` made plain)."""
    return [raw_event((r[0], str(r[1]), r[2], r[3], r[4], r[5], bytes(r[6]), bytes(r[7]), r[8], r[9], r[10]))
            for r in rows]  # fmt: skip


def stored_rows_query(
    sql: Sql,
    after_position: int,
    to_position: int | None,
    types: list[str] | None,
    columns: str = _STORED_COLUMNS,
) -> tuple[str, list[Any]]:
    """The query of a ``read_rows`` page (its ``LIMIT`` the last parameter) and its parameters.

    ``raw_events`` pages the same way, with the columns of a whole row (``ROW_COLUMNS``).
    """
    where: list[str] = ["position > %s", sql.settled]
    params: list[Any] = [after_position]
    if to_position is not None:
        where.append("position <= %s")
        params.append(to_position)
    if types is not None:
        where.append("type = ANY(%s::text[])")
        params.append(types)
    query = f"SELECT {columns} FROM {sql.events} WHERE {' AND '.join(where)} ORDER BY position LIMIT %s"
    return query, params


def stored_rows_of(rows: list[tuple[Any, ...]]) -> list[StoredRow]:
    """Rows of ``stored_rows_query`` as ``StoredRow`` s (psycopg's ``memoryview`` s made bytes)."""
    return [(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), bytes(r[6]), r[7]) for r in rows]


async def verify_on(conn: Any, sql: Sql, stream: str | None) -> VerifyReport:
    """Check the chains of ``stream`` (or all) and the snapshots, on ``conn`` in one transaction."""
    checker = ChainChecker()
    where, params = ("", []) if stream is None else ("WHERE stream = %s", [stream])
    records_query = redaction_rows_query(sql.events)
    query = f'SELECT {ROW_COLUMNS} FROM {sql.events} {where} ORDER BY stream COLLATE "C", version'
    snapshot_where = "" if stream is None else "WHERE s.stream = %s"
    snapshots = f'{bound_snapshots(sql)} {snapshot_where} ORDER BY s.stream COLLATE "C", s.type, s.version'
    async with conn.transaction():
        found = await (await conn.execute(records_query, (REDACTIONS_STREAM,))).fetchall()
        checker.redactions = RedactionRecords.from_rows(found)
        async with conn.cursor(name="turnlog_verify") as cursor:
            await cursor.execute(query, params)
            while rows := await cursor.fetchmany(2000):
                for row in rows:
                    checker.add_row(row)
        async with conn.cursor(name="turnlog_verify_snapshots") as cursor:
            await cursor.execute(snapshots, params)
            while rows := await cursor.fetchmany(200):
                for row in rows:
                    checker.add_snapshot(row, row[7])
    checker.finish(stream)
    return checker.report()


def check_bound(name: str, value: object, *, minimum: int = 0) -> None:
    """Refuse a bound that is not an int, or is below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEventError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise InvalidEventError(f"{name} must be >= {minimum}, not {value}")
