"""What the PostgreSQL store adds to the port, kept apart from its append path: recorded events, tracking.

The append path (``_postgres``) plans its rows column by column (``_plan_group``); an
append's result carries those rows (``planned_result``). A re-sent append finds only part of
each stored row in its first lookup, so its result gets the rows it stands for afterwards
(``resent_rows_query``), in one more query that only re-sends pay for.

Tracking (the ``"tracking"`` capability) uses the schema's ``tracking`` table. An append with
tracking (``append_tracked``) inserts its events first and moves the consumer second, in one
transaction: the events' statement must take the transaction id together with the positions
(see ``_postgres``), so nothing may assign the id before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import TrackingError
from ._records import AppendResult, Tracking
from ._results import append_result
from ._upcasting import Upcasters

__all__ = ["TrackingSql", "planned_result", "record_tracking", "resent_rows_query", "stored_row"]


def planned_result(
    columns: Sequence[Sequence[Any]], first: int, offset: int, count: int, version: int, upcasters: Upcasters
) -> AppendResult:
    """The result of ``count`` planned rows from row ``offset`` on, inserted at positions ``first + offset`` on.

    ``columns`` are the insert's columns: stream, version, event id, type, schema, data, meta,
    recorded_at, prev_hash, hash.
    """
    stream, versions, ids, types, schemas, data, meta, recorded_at, prev_hash, hashes = columns
    rows = [
        (first + n, ids[n], stream[n], versions[n], types[n], schemas[n], data[n], meta[n], recorded_at[n],
         prev_hash[n], hashes[n])
        for n in range(offset, offset + count)
    ]  # fmt: skip
    return append_result(rows, version, upcasters)


def resent_rows_query(events_table: str, row_columns: str) -> str:
    """The rows at the positions given (one parameter: a bigint array), in position order."""
    return f"SELECT {row_columns} FROM {events_table} WHERE position = ANY(%s::bigint[]) ORDER BY position"


def stored_row(row: Sequence[Any]) -> tuple[Any, ...]:
    """A fetched event row (``RawEvent`` order) with the id as text and the payloads as bytes."""
    return (row[0], str(row[1]), *row[2:6], bytes(row[6]), bytes(row[7]), *row[8:])


class TrackingSql:
    """The statements of the ``tracking`` capability on the schema's ``tracking`` table."""

    def __init__(self, schema: str) -> None:
        table = f'"{schema}".tracking'
        # Moves the consumer forward only: a position at or below the recorded one returns no row.
        # ON CONFLICT locks the consumer's row, so two writers of one consumer take turns.
        self.advance = (
            f"INSERT INTO {table} (consumer, position) VALUES (%s, %s) "
            f"ON CONFLICT (consumer) DO UPDATE SET position = excluded.position "
            f"WHERE {table}.position < excluded.position RETURNING position"
        )
        self.position = f"SELECT position FROM {table} WHERE consumer = %s"


async def record_tracking(conn: Any, sql: TrackingSql, tracking: Tracking) -> None:
    """Move ``tracking.consumer`` to ``tracking.position`` on ``conn`` (inside the caller's transaction, if any).

    Raises:
        TrackingError: the consumer's recorded position is at or above ``tracking.position``.
    """
    moved = await (await conn.execute(sql.advance, [tracking.consumer, tracking.position])).fetchone()
    if moved is None:
        row = await (await conn.execute(sql.position, [tracking.consumer])).fetchone()
        raise TrackingError(tracking.consumer, tracking.position, int(row[0]) if row is not None else -1)
