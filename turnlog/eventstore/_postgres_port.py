"""What the PostgreSQL store adds to the port, kept apart from its append path: recorded events.

The append path (``_postgres``) plans its rows column by column (``_plan_group``); an
append's result carries those rows (``planned_result``). A re-sent append finds only part of
each stored row in its first lookup, so its result gets the rows it stands for afterwards
(``resent_rows``), in one more query that only re-sends pay for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._records import AppendResult
from ._results import append_result
from ._upcasting import Upcasters

__all__ = ["planned_result", "resent_rows_query", "stored_row"]


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
