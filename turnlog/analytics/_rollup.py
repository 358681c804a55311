"""Rollups and rank indexes: what keeps a grouped query fast on millions of events.

The fact tables hold one row per call; a grouped query over them reads every row. Two
structures, kept in the same transaction as the facts, answer the unfiltered queries
without a full scan:

- a rollup per fact table: one row per combination of the grouping columns (day,
  provider, model, branch, session, verb; for tools: day, tool, branch, session) with the
  counts and sums of its calls. Costs are summed as integer nano-dollars, so a sum never
  depends on the order the rows were added in: an incremental update and a rebuild agree
  to the last digit;
- rank indexes ``(group column, metric)``: the value at rank r of a group is one index seek
  (``ORDER BY metric LIMIT 1 OFFSET r-1``), so exact percentiles need no sort.

Both are derived data: ``rebuild_rollups`` recomputes the rollups from the facts in SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from ._tables import MODEL_CALLS, TOOL_CALLS, FactTable

__all__ = [
    "MODEL_ROLLUP",
    "BUILD_INDEXES",
    "RANK_INDEXES",
    "WINDOW_INDEXES",
    "ROLLUPS",
    "TOOL_ROLLUP",
    "Rollup",
    "RollupSums",
    "add_facts_to_rollups",
    "create_rank_indexes",
    "drop_rank_indexes",
    "insert_rollups",
    "nanos",
    "rebuild_rollups",
    "rebuilding",
    "register_functions",
]


def nanos(cost: float | None) -> int | None:
    """A cost in US dollars as integer nano-dollars (1e-9 USD), the unit rollups sum in."""
    return None if cost is None else round(cost * 1e9)


def _q(name: str) -> str:
    return '"' + name + '"'


@dataclass(frozen=True, slots=True)
class Rollup:
    """A rollup table over a fact table.

    Attributes:
        name: The SQL table name.
        facts: The fact table it summarizes.
        dims: The fact columns it groups by.
        measures: ``(name, SQL aggregate over the facts)`` pairs, summed when rows merge.
    """

    name: str
    facts: FactTable
    dims: tuple[str, ...]
    measures: tuple[tuple[str, str], ...]

    def create_sql(self) -> str:
        """The CREATE TABLE statement."""
        dims = ", ".join(f"{_q(d)} TEXT" for d in self.dims)
        measures = ", ".join(f"{m} INTEGER NOT NULL" for m, _ in self.measures)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (key TEXT PRIMARY KEY, {dims}, {measures})"

    def add_sql(self, where: str = "1") -> str:
        """The INSERT ... SELECT that adds the facts matching ``where`` into the rollup."""
        dims = ", ".join(_q(d) for d in self.dims)
        aggregates = ", ".join(agg for _, agg in self.measures)
        names = ", ".join(["key", dims, *(m for m, _ in self.measures)])
        merge = ", ".join(f"{m} = {m} + excluded.{m}" for m, _ in self.measures)
        return (
            f"INSERT INTO {self.name} ({names}) SELECT json_array({dims}), {dims}, {aggregates} "
            f"FROM {self.facts.name} WHERE {where} GROUP BY {dims} "
            f"ON CONFLICT (key) DO UPDATE SET {merge}"
        )


MODEL_ROLLUP = Rollup(
    "analytics_model_rollup",
    MODEL_CALLS,
    (
        "day",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.conversation.id",
        "turnlog.session.id",
        "turnlog.verb",
    ),
    (
        ("calls", "COUNT(*)"),
        ("errors", "TOTAL(\"turnlog.status\" = 'error')"),
        ("input_tokens", 'TOTAL("gen_ai.usage.input_tokens")'),
        ("output_tokens", 'TOTAL("gen_ai.usage.output_tokens")'),
        ("cost_nanos", 'COALESCE(SUM(turnlog_nanos("turnlog.cost_usd")), 0)'),
        ("priced", 'COUNT("turnlog.cost_usd")'),
        ("ttft_calls", 'COUNT("gen_ai.response.time_to_first_chunk")'),
        ("cache_read_tokens", 'TOTAL("gen_ai.usage.cache_read.input_tokens")'),
        ("cache_write_tokens", 'TOTAL("gen_ai.usage.cache_creation.input_tokens")'),
    ),
)

TOOL_ROLLUP = Rollup(
    "analytics_tool_rollup",
    TOOL_CALLS,
    ("day", "gen_ai.tool.name", "gen_ai.conversation.id", "turnlog.session.id"),
    (
        ("calls", "COUNT(*)"),
        ("ok", "TOTAL(\"turnlog.status\" = 'ok')"),
        ("errors", "TOTAL(\"turnlog.status\" = 'error')"),
        ("denied", "TOTAL(\"turnlog.status\" = 'denied')"),
        ("timed", 'COUNT("gen_ai.client.operation.duration")'),
    ),
)

ROLLUPS: tuple[Rollup, ...] = (MODEL_ROLLUP, TOOL_ROLLUP)


def _upsert_sql(rollup: Rollup) -> str:
    # The key is made by SQLite's json_array from the same values, as in Rollup.add_sql.
    dims = ", ".join(_q(d) for d in rollup.dims)
    names = ", ".join(["key", dims, *(m for m, _ in rollup.measures)])
    dim_marks = ", ".join("?" * len(rollup.dims))
    measure_marks = ", ".join("?" * len(rollup.measures))
    merge = ", ".join(f"{m} = {m} + excluded.{m}" for m, _ in rollup.measures)
    return (
        f"INSERT INTO {rollup.name} ({names}) VALUES (json_array({dim_marks}), {dim_marks}, {measure_marks}) "
        f"ON CONFLICT (key) DO UPDATE SET {merge}"
    )


def _column(table: FactTable, name: str) -> int:
    return table.column_names.index(name)


_MODEL_KEY = itemgetter(*(_column(MODEL_CALLS, d) for d in MODEL_ROLLUP.dims))
_MODEL_STATUS, _MODEL_IN, _MODEL_OUT, _MODEL_COST, _MODEL_TTFT, _MODEL_READ, _MODEL_WRITE = (
    _column(MODEL_CALLS, name)
    for name in (
        "turnlog.status",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "turnlog.cost_usd",
        "gen_ai.response.time_to_first_chunk",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
    )
)
_TOOL_KEY = itemgetter(*(_column(TOOL_CALLS, d) for d in TOOL_ROLLUP.dims))
_TOOL_STATUS, _TOOL_DURATION = (
    _column(TOOL_CALLS, name) for name in ("turnlog.status", "gen_ai.client.operation.duration")
)
assert [m for m, _ in MODEL_ROLLUP.measures] == [
    "calls", "errors", "input_tokens", "output_tokens", "cost_nanos", "priced", "ttft_calls",
    "cache_read_tokens", "cache_write_tokens",
]  # fmt: skip
assert [m for m, _ in TOOL_ROLLUP.measures] == ["calls", "ok", "errors", "denied", "timed"]


def _model_sums(
    rows: Iterable[Sequence[Any]], sums: dict[Any, list[int]] | None = None
) -> dict[Any, list[int]]:
    # The measures of MODEL_ROLLUP, in its order, as exact integers (added to ``sums`` when given).
    if sums is None:
        sums = {}
    key_of = _MODEL_KEY
    status, tokens_in, tokens_out, cost_at, ttft, read_at, write_at = (
        _MODEL_STATUS,
        _MODEL_IN,
        _MODEL_OUT,
        _MODEL_COST,
        _MODEL_TTFT,
        _MODEL_READ,
        _MODEL_WRITE,
    )
    for row in rows:
        key = key_of(row)
        cost = row[cost_at]
        t_in, t_out = row[tokens_in], row[tokens_out]
        this = sums.get(key)
        if this is None:
            sums[key] = this = [0, 0, 0, 0, 0, 0, 0, 0, 0]
        this[0] += 1
        if row[status] == "error":
            this[1] += 1
        if t_in is not None:
            this[2] += t_in
        if t_out is not None:
            this[3] += t_out
        if cost is not None:
            this[4] += round(cost * 1e9)
            this[5] += 1
        if row[ttft] is not None:
            this[6] += 1
        read, write = row[read_at], row[write_at]
        if read is not None:
            this[7] += read
        if write is not None:
            this[8] += write
    return sums


def _tool_sums(
    rows: Iterable[Sequence[Any]], sums: dict[Any, list[int]] | None = None
) -> dict[Any, list[int]]:
    # The measures of TOOL_ROLLUP, in its order (added to ``sums`` when given).
    if sums is None:
        sums = {}
    key_of, status_at, duration = _TOOL_KEY, _TOOL_STATUS, _TOOL_DURATION
    for row in rows:
        key = key_of(row)
        this = sums.get(key)
        if this is None:
            sums[key] = this = [0, 0, 0, 0, 0]
        this[0] += 1
        status = row[status_at]
        if status == "ok":
            this[1] += 1
        elif status == "error":
            this[2] += 1
        elif status == "denied":
            this[3] += 1
        if row[duration] is not None:
            this[4] += 1
    return sums


def add_facts_to_rollups(
    conn: sqlite3.Connection, model_rows: Sequence[Sequence[Any]], tool_rows: Sequence[Sequence[Any]]
) -> None:
    """Add fact rows (in ``MODEL_CALLS`` / ``TOOL_CALLS`` column order) to the rollups.

    Runs in the caller's transaction, the one that inserts the rows. The rows are summed per
    rollup key here, so a batch costs one upsert per key it touches; the sums are those of
    ``Rollup.add_sql`` (costs as nano-dollars rounded per fact, ``nanos``), so a rollup built
    either way is the same to the last digit.
    """
    for rollup, rows, summed in (
        (MODEL_ROLLUP, model_rows, _model_sums),
        (TOOL_ROLLUP, tool_rows, _tool_sums),
    ):
        if rows:
            conn.executemany(_upsert_sql(rollup), [(*key, *key, *sums) for key, sums in summed(rows).items()])


class RollupSums:
    """The rollups of a build from scratch, summed in memory batch by batch (see ``insert_rollups``).

    A build writes no rollup until its end; summing its facts here as each batch is written
    spares the end the ``GROUP BY`` over all the facts that ``rebuild_rollups`` runs (a sort
    of every fact by seven columns and a ``turnlog_nanos`` call per row), which costs more
    than this pass over tuples already in memory. The sums are those of ``Rollup.add_sql``
    (``add_facts_to_rollups`` says why).
    """

    __slots__ = ("model", "tool")

    def __init__(self) -> None:
        self.model: dict[Any, list[int]] = {}
        self.tool: dict[Any, list[int]] = {}

    def add(self, model_rows: Sequence[Sequence[Any]], tool_rows: Sequence[Sequence[Any]]) -> None:
        """Add fact rows (in ``MODEL_CALLS`` / ``TOOL_CALLS`` column order)."""
        _model_sums(model_rows, self.model)
        _tool_sums(tool_rows, self.tool)


def insert_rollups(conn: sqlite3.Connection, sums: RollupSums) -> None:
    """Replace every rollup with ``sums``, inside the caller's transaction (the end of a build)."""
    for rollup, summed in ((MODEL_ROLLUP, sums.model), (TOOL_ROLLUP, sums.tool)):
        conn.execute(f"DELETE FROM {rollup.name}")
        if summed:
            conn.executemany(_upsert_sql(rollup), [(*key, *key, *total) for key, total in summed.items()])


def register_functions(conn: sqlite3.Connection) -> None:
    """Register ``turnlog_nanos(cost)`` on a connection (rollup rebuilds and scans use it)."""
    conn.create_function("turnlog_nanos", 1, nanos, deterministic=True)


def rebuild_rollups(conn: sqlite3.Connection) -> None:
    """Recompute every rollup from its facts (after a re-pricing); inside the caller's transaction."""
    for rollup in ROLLUPS:
        conn.execute(f"DELETE FROM {rollup.name}")
        conn.execute(rollup.add_sql())


_DURATION = "gen_ai.client.operation.duration"
_TTFT = "gen_ai.response.time_to_first_chunk"

_SHORT = {
    "day": "day",
    "gen_ai.provider.name": "provider",
    "gen_ai.request.model": "model",
    "gen_ai.response.model": "served_model",
    "gen_ai.conversation.id": "branch",
    "turnlog.session.id": "session",
    "turnlog.verb": "verb",
    "gen_ai.tool.name": "tool",
    _DURATION: "duration",
    _TTFT: "ttft",
}

RANK_INDEXES: tuple[tuple[str, FactTable, str, str], ...] = tuple(
    (f"{table.name}_rank_{_SHORT[dim]}_{_SHORT[metric]}", table, dim, metric)
    for table, dims, metrics in (
        (MODEL_CALLS, MODEL_ROLLUP.dims, (_DURATION, _TTFT)),
        (TOOL_CALLS, ("gen_ai.tool.name",), (_DURATION,)),
    )
    for dim in dims
    for metric in metrics
)
"""``(index name, fact table, group column, metric column)`` of every rank index."""


WINDOW_INDEXES: tuple[tuple[str, str], ...] = (
    (f"{MODEL_CALLS.name}_time", f"{MODEL_CALLS.name} (recorded_at)"),
    (f"{TOOL_CALLS.name}_time", f"{TOOL_CALLS.name} (recorded_at)"),
    (f"{MODEL_CALLS.name}_errors", f'{MODEL_CALLS.name} ("error.type") WHERE "turnlog.status" = \'error\''),
)
"""``(index name, what it indexes)`` of the other indexes of the fact tables: the time windows of
``--since``/``--until`` and the breakdown of errors."""

BUILD_INDEXES: tuple[str, ...] = (*(name for name, *_ in RANK_INDEXES), *(name for name, _ in WINDOW_INDEXES))
"""Every index a build from scratch drops first and creates at its end (one sort each)."""


def create_rank_indexes(conn: sqlite3.Connection) -> None:
    """Create the indexes of ``BUILD_INDEXES`` that are missing (after a rebuild, one sort each)."""
    for name, table, dim, metric in RANK_INDEXES:
        where = f"WHERE {_q(metric)} IS NOT NULL"
        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table.name} ({_q(dim)}, {_q(metric)}) {where}")
    for name, target in WINDOW_INDEXES:
        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")


def rebuilding(conn: sqlite3.Connection) -> bool:
    """Whether a build from scratch is under way: the rank indexes are missing.

    A rebuild (or the first update of a new database) drops the rank indexes and leaves the
    rollups empty; its last step sums the rollups from the facts in SQL and creates the
    indexes, in one transaction. Until then the rollups do not follow the facts, so an
    unbounded query scans the facts instead. The indexes are dropped and created in one
    transaction each, so the first one stands for all of them, and their absence is also
    what tells a process that opens the database after a crash mid-rebuild to finish it.
    """
    name = RANK_INDEXES[0][0]
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)).fetchone()
    return found is None


def drop_rank_indexes(conn: sqlite3.Connection) -> None:
    """Drop the indexes of ``BUILD_INDEXES`` (before a rebuild: inserting into each row by row is slow)."""
    for name in BUILD_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
