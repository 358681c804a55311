"""Redaction on SQLite: the transaction, then the physical erasure of the old bytes.

The transaction replaces the payloads, appends the records and deletes the stream's
snapshots with ``PRAGMA secure_delete`` on, so the freed cells and pages are zeroed. Then
the write-ahead log, which still holds the pages as they were, is checkpointed and truncated
to zero bytes, and ``VACUUM`` rebuilds the file so no free page keeps an old copy; a last
checkpoint truncates the log that ``VACUUM`` wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ._errors import RedactionError, StoreUnavailable
from ._records import ANY
from ._redaction import REDACTIONS_STREAM, Plan, Redaction, RedactionResult, plan_redaction
from ._sqlite_layout import layout_of
from ._sqlite_schema import write_transaction
from ._sqlite_write import insert_entries
from ._upcasting import Upcasters
from ._upgrade import UPGRADES_STREAM, plan_upgrade
from ._validation import PreparedAppend, prepare_events

__all__ = ["erase_freed", "redact_sync", "redaction_rows", "upgrade_sync"]


def redaction_rows(conn: sqlite3.Connection) -> list[tuple[int, bytes, str]]:
    """``(version, data, id)`` of every redaction record, for ``RedactionRecords.from_rows``."""
    layout = layout_of(conn)
    sql = layout.select(layout.stream_is(), f"ORDER BY {layout.version_col}")
    rows = [layout.row(row) for row in conn.execute(sql, (REDACTIONS_STREAM,))]
    return [(row[3], row[6], row[1]) for row in rows]


def redact_sync(
    conn: sqlite3.Connection,
    targets: list[Redaction],
    *,
    path: str,
    in_memory: bool,
    upcasters: Upcasters,
    before_write: Callable[[sqlite3.Connection], None],
) -> list[RedactionResult]:
    """Redact ``targets`` in one transaction on ``conn`` (the writer), then erase the old bytes.

    ``before_write`` runs in the transaction before anything is written (the store's first
    write to an older store records its id and format there).
    """
    layout = layout_of(conn)
    conn.execute("PRAGMA secure_delete = ON")
    try:
        with write_transaction(conn) as c:
            plans: list[Plan | RedactionResult] = []
            sql = layout.select(f"{layout.stream_is()} AND {layout.version_col} = ?")
            for target in targets:
                row = c.execute(sql, (target.stream, target.version)).fetchone()
                if row is None:
                    raise RedactionError(target.stream, target.version, "no such event")
                plans.append(plan_redaction(target, layout.row(row)))
            changed = [plan for plan in plans if isinstance(plan, Plan)]
            if changed:
                before_write(c)
                _, records = prepare_events(REDACTIONS_STREAM, [plan.record for plan in changed], 2**62)
                insert_entries(c, [PreparedAppend(REDACTIONS_STREAM, records, ANY)], upcasters, path)
                for plan in changed:
                    layout.set_payload(c, plan.target.stream, plan.target.version, plan.data, plan.meta)
                c.executemany(
                    "DELETE FROM snapshots WHERE stream = ?",
                    [(name,) for name in sorted({plan.target.stream for plan in changed})],
                )
        if changed and not in_memory:
            erase_freed(conn, path)
    finally:
        conn.execute("PRAGMA secure_delete = OFF")
    return [plan.result() if isinstance(plan, Plan) else plan for plan in plans]


def erase_freed(conn: sqlite3.Connection, path: str) -> None:
    """Leave no copy of deleted or overwritten content in the database file or its WAL.

    Raises:
        StoreUnavailable: another connection kept the log from being truncated (the
            redaction is committed; run it again, a no-op, to finish the erasure).
    """
    for step in ("checkpoint", "VACUUM", "checkpoint"):
        if step == "VACUUM":
            conn.execute("VACUUM")
            continue
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise StoreUnavailable(
                f"{path}: the redaction is committed, but another connection kept the write-ahead "
                "log from being truncated, so it may still hold the old bytes; close the other "
                "readers and redact again (a no-op that finishes the erasure)"
            )


def upgrade_sync(
    conn: sqlite3.Connection,
    actor: str,
    *,
    path: str,
    upcasters: Upcasters,
    before_write: Callable[[sqlite3.Connection], None],
) -> list[str]:
    """``upgrade_chain`` in one transaction on ``conn`` (the writer); ``before_write`` as in ``redact_sync``."""
    layout = layout_of(conn)
    with write_transaction(conn) as c:
        rows = [
            layout.row(row)
            for row in c.execute(layout.select("1", f"ORDER BY {layout.stream_col}, {layout.version_col}"))
        ]
        plan = plan_upgrade(rows, actor)
        if plan.streams:
            before_write(c)
            _, records = prepare_events(UPGRADES_STREAM, plan.records, 2**62)
            insert_entries(c, [PreparedAppend(UPGRADES_STREAM, records, ANY)], upcasters, path)
            layout.set_hashes(c, plan.updates)
            c.executemany("DELETE FROM snapshots WHERE stream = ?", [(name,) for name in plan.streams])
    return plan.streams
