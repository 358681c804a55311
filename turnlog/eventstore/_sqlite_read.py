"""The SQLite store's reads: pages of rows, read filters, snapshots bound to the log, ``verify``'s walk."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ._chain import ChainChecker
from ._errors import CorruptStoreError
from ._problem import Problem
from ._records import VerifyReport
from ._redaction import RedactionRecords
from ._sqlite_connect import lenient_text
from ._sqlite_layout import TEXT_LAYOUT, Layout, layout_of
from ._sqlite_redact import redaction_rows
from ._sqlite_schema import rollback
from ._validation import check_stream_prefix, check_type_filter

__all__ = ["BOUND_SNAPSHOTS", "read_filters", "rows_page", "verify_on"]

PAGE_BYTES = 4 * 1024 * 1024
"""A page of a read ends once it holds about this much payload."""
_PAGE_BYTES = PAGE_BYTES

BOUND_SNAPSHOTS = TEXT_LAYOUT.bound_snapshots
"""Snapshots with the hash of the log's event at their version, text layout (``Layout.bound_snapshots``)."""


def rows_page(
    conn: sqlite3.Connection, sql: str, *params: Any
) -> Callable[[bool], tuple[list[tuple[Any, ...]], bool]]:
    """A page of stored rows, and whether the query ran out of rows (the last param is the LIMIT).

    A page ends after ``LIMIT`` rows or once it holds about ``_PAGE_BYTES`` of payload,
    so that pages of large events stay small in memory. The rows are decoded one by one
    as the reader takes them, not here: an event then lives only as long as its reader
    keeps it, and the garbage collector never has to walk a page of decoded events.
    """

    def run(blocking: bool) -> tuple[list[tuple[Any, ...]], bool]:
        cursor = conn.execute(sql, params)
        rows: list[tuple[Any, ...]] = []
        size = 0
        full = False
        try:
            for row in cursor:
                rows.append(row)
                try:
                    size += len(row[6]) + len(row[7])
                except TypeError:  # a damaged row: decoding it raises CorruptEventError
                    pass
                if size >= _PAGE_BYTES:
                    full = True
                    break
        finally:
            cursor.close()
        return layout_of(conn).page(conn, rows), not full and len(rows) < params[-1]

    return run


def verify_on(conn: sqlite3.Connection, stream: str | None, quick: bool) -> VerifyReport:
    """``verify`` on ``conn``: SQLite's own check of the file (whole store only), then the chains and snapshots."""
    checker = ChainChecker(RedactionRecords(), derived_prev=layout_of(conn).compact)
    problems: list[Problem] = []
    checks: list[str] = []
    # Text that is not UTF-8 is kept (with surrogates) for the checker to report, instead
    # of failing the whole walk.
    conn.text_factory = lenient_text
    try:
        if stream is None:
            pragma = "quick_check" if quick else "integrity_check"
            checks.append(pragma)
            result = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}")]
            if result != ["ok"]:
                problems.extend(Problem("", 0, f"SQLite {pragma}: {line}") for line in result)
        conn.execute("BEGIN")  # one consistent view of the log while checking it
        try:
            layout = layout_of(conn)
            checker.redactions = RedactionRecords.from_rows(redaction_rows(conn))
            where = layout.stream_is() if stream is not None else "1"
            params = () if stream is None else (stream,)
            # Rows come grouped by stream (by its number in the compact layout), by version:
            # the (stream, version) index gives this order without sorting, and the cursor
            # streams rows, so memory stays flat however large the log is.
            stream_key = "e.stream_id" if layout.compact else "stream"
            sql = layout.select(where, f"ORDER BY {stream_key}, {layout.version_col}")
            for row in conn.execute(sql, params):
                checker.add_row(_logical(layout, row, problems))
            where = "WHERE s.stream = ?" if stream is not None else ""
            for row in conn.execute(
                f"{layout.bound_snapshots} {where} ORDER BY s.stream, s.type, s.version", params
            ):
                row = layout.snapshot_row(row)
                checker.add_snapshot(row, row[7])
            checker.finish(stream)
        finally:
            rollback(conn)
    except sqlite3.DatabaseError as exc:
        problems.append(Problem(stream or "", 0, f"SQLite could not read the log: {exc}"))
    except (ValueError, TypeError, OverflowError) as exc:  # a value SQLite hands back damaged
        problems.append(Problem(stream or "", 0, f"the log could not be read: {exc!r}"))
    finally:
        conn.text_factory = str
    return checker.report(problems, checks)


def _logical(layout: Layout, row: Sequence[Any], problems: list[Problem]) -> Sequence[Any]:
    """The logical row for the checker; a row that cannot be read is a problem, then checked as stored.

    Checked as stored (its compressed bytes as the payload), the row also fails its hash,
    so the chain is still followed past it.
    """
    if not layout.compact:
        return row
    try:
        return layout.row(row)
    except CorruptStoreError as exc:
        problems.append(Problem(str(row[2] or ""), row[3], exc.reason, position=row[0]))
        return (*row[:2], row[2] or "", row[3], row[4] or "", row[5], row[6], row[7] or b"", *row[8:11])


def read_filters(
    types: Iterable[str] | None, stream_prefix: str | None, layout: Layout = TEXT_LAYOUT
) -> tuple[str, list[Any]]:
    """``AND`` conditions (and their parameters) of a read by types and stream prefix."""
    check_stream_prefix(stream_prefix)
    return layout.filters(check_type_filter(types), stream_prefix)
