"""Redaction on PostgreSQL: records, then the erasure, then ``VACUUM (FULL)``.

The records are appended through the store's ordinary append (so they take their place in
the global order as any event does); then one transaction replaces the payloads and deletes
the streams' snapshots. The two are separate transactions: if the process dies between them,
``verify`` reports each record whose payload is still stored, and redacting again finishes
the work. Last, ``VACUUM (FULL)`` rewrites the events and snapshots tables (their TOAST tables
included) into new files, so no dead tuple keeps the old bytes in the database's files.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from ._errors import RedactionError
from ._postgres_sql import ROW_COLUMNS, Sql
from ._records import NewEvent
from ._redaction import REDACTIONS_STREAM, Plan, Redaction, RedactionResult, plan_redaction

__all__ = ["Connect", "redact_postgres", "redaction_rows_query"]

Connect = Callable[[str], AbstractAsyncContextManager[Any]]
"""The store's pooled connection for an action (``PostgresEventStore._connection``).

The store hands this module what it needs instead of itself, so the store's module imports
this one and not the other way round.
"""


def redaction_rows_query(events_table: str) -> str:
    """The query of ``(version, data, id)`` of every redaction record (one parameter: the stream)."""
    return f"SELECT version, data, event_id FROM {events_table} WHERE stream = %s ORDER BY version"


async def redact_postgres(
    connection: Connect,
    sql: Sql,
    append: Callable[[str, Sequence[NewEvent]], Awaitable[object]],
    targets: list[Redaction],
) -> list[RedactionResult]:
    """Redact ``targets`` (see the module docstring for the steps).

    Args:
        connection: The store's pooled connections.
        sql: The store's statements.
        append: The store's ``append``, for the redaction records.
        targets: What to redact.
    """
    plans: list[Plan | RedactionResult] = []
    async with connection("redact") as conn:
        for target in targets:
            cursor = await conn.execute(
                f"SELECT {ROW_COLUMNS} FROM {sql.events} WHERE stream = %s AND version = %s",
                (target.stream, target.version),
            )
            row: Any = await cursor.fetchone()
            if row is None:
                raise RedactionError(target.stream, target.version, "no such event")
            plans.append(plan_redaction(target, (row[0], str(row[1]), *row[2:])))
    changed = [plan for plan in plans if isinstance(plan, Plan)]
    if changed:
        await append(REDACTIONS_STREAM, [plan.record for plan in changed])
        async with connection("redact") as conn, conn.transaction():
            for plan in changed:
                await conn.execute(
                    f"UPDATE {sql.events} SET data = %s, meta = %s WHERE stream = %s AND version = %s",
                    (plan.data, plan.meta, plan.target.stream, plan.target.version),
                )
            await conn.execute(
                f"DELETE FROM {sql.snapshots} WHERE stream = ANY(%s)",
                (sorted({plan.target.stream for plan in changed}),),
            )
        await vacuum_full(connection, sql)
    return [plan.result() if isinstance(plan, Plan) else plan for plan in plans]


async def vacuum_full(connection: Connect, sql: Sql) -> None:
    """Rewrite the events and snapshots tables (and their TOAST tables) without dead tuples."""
    async with connection("vacuum") as conn:
        await conn.execute(f"VACUUM (FULL) {sql.events}")
        await conn.execute(f"VACUUM (FULL) {sql.snapshots}")
