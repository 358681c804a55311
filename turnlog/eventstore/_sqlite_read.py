"""The SQLite store's reads: pages of rows, read filters, snapshots bound to the log, ``verify``'s walk."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from ._chain import ChainChecker
from ._problem import Problem
from ._records import VerifyReport
from ._redaction import RedactionRecords
from ._sqlite_connect import lenient_text
from ._sqlite_redact import redaction_rows
from ._sqlite_schema import rollback
from ._sqlite_write import COLUMNS
from ._validation import check_stream_prefix, check_type_filter

__all__ = ["BOUND_SNAPSHOTS", "read_filters", "rows_page", "verify_on"]

PAGE_BYTES = 4 * 1024 * 1024
"""A page of a read ends once it holds about this much payload."""
_PAGE_BYTES = PAGE_BYTES

BOUND_SNAPSHOTS = (
    "SELECT s.stream, s.type, s.version, s.schema, s.data, s.meta, s.recorded_at, e.hash "
    "FROM snapshots s LEFT JOIN events e ON e.stream = s.stream AND e.version = s.version"
)
"""Snapshots with the hash of the log's event at their version (NULL when there is none)."""


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
        try:
            for row in cursor:
                rows.append(row)
                try:
                    size += len(row[6]) + len(row[7])
                except TypeError:  # a damaged row: decoding it raises CorruptEventError
                    pass
                if size >= _PAGE_BYTES:
                    return rows, False
        finally:
            cursor.close()
        return rows, len(rows) < params[-1]

    return run


def verify_on(conn: sqlite3.Connection, stream: str | None, quick: bool) -> VerifyReport:
    """``verify`` on ``conn``: SQLite's own check of the file (whole store only), then the chains and snapshots."""
    checker = ChainChecker(RedactionRecords())
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
            checker.redactions = RedactionRecords.from_rows(redaction_rows(conn))
            where = "WHERE stream = ?" if stream is not None else ""
            params = () if stream is None else (stream,)
            sql = f"SELECT {COLUMNS} FROM events {where} ORDER BY stream, version"
            # The (stream, version) index gives this order without sorting, and the cursor
            # streams rows, so memory stays flat however large the log is.
            for row in conn.execute(sql, params):
                checker.add_row(row)
            where = "WHERE s.stream = ?" if stream is not None else ""
            for row in conn.execute(
                f"{BOUND_SNAPSHOTS} {where} ORDER BY s.stream, s.type, s.version", params
            ):
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


def read_filters(types: Iterable[str] | None, stream_prefix: str | None) -> tuple[str, list[Any]]:
    check_stream_prefix(stream_prefix)
    sql = ""
    params: list[Any] = []
    wanted = check_type_filter(types)
    if wanted is not None:
        if not wanted:
            return " AND 0", []
        sql += f" AND type IN ({','.join('?' * len(wanted))})"
        params.extend(wanted)
    if stream_prefix:
        sql += " AND substr(stream, 1, ?) = ?"
        params.extend((len(stream_prefix), stream_prefix))
    return sql, params
