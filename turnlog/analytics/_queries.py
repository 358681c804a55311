"""Queries over the fact tables: usage, tools, runs and errors, grouped and time-filtered.

Every query takes an open ``sqlite3.Connection`` to the analytics database, a grouping and
a ``TimeRange``, and returns frozen rows. Percentiles are exact **nearest-rank**
percentiles: the p-th percentile of n values is the value at 1-based rank ⌈p·n/100⌉ of
the sorted values, so it is always a value that was observed (p50 of 1, 2, 3, 4 is 2).
Durations are reported in milliseconds.

Example::

    conn = sqlite3.connect("turnlog.db")
    for row in usage(conn, "day", TimeRange.of("2026-12-01", None)):
        print(row.key, row.calls, row.cost_usd, row.latency_ms.p95)
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, time
from typing import Any, Literal, get_args

from ._errors import InvalidQueryError
from ._rollup import MODEL_ROLLUP, TOOL_ROLLUP, rebuilding, register_functions
from ._tables import MODEL_CALLS, RUNS, TOOL_CALLS, FactTable

__all__ = [
    "GROUPINGS",
    "ErrorRow",
    "Grouping",
    "Percentiles",
    "RunRow",
    "TimeRange",
    "ToolRow",
    "UsageRow",
    "error_rates",
    "percentiles",
    "ranked",
    "run_usage",
    "tool_usage",
    "usage",
]

Grouping = Literal["model", "served_model", "provider", "day", "branch", "session", "tool", "verb"]
GROUPINGS: tuple[str, ...] = get_args(Grouping)
"""Every dimension a query can group by."""

_COLUMN = {
    "model": '"gen_ai.request.model"',
    "served_model": '"gen_ai.response.model"',
    "provider": '"gen_ai.provider.name"',
    "day": "day",
    "branch": '"gen_ai.conversation.id"',
    "session": '"turnlog.session.id"',
    "tool": '"gen_ai.tool.name"',
    "verb": '"turnlog.verb"',
}
_ALLOWED = {
    MODEL_CALLS.name: ("model", "served_model", "provider", "day", "branch", "session", "verb"),
    TOOL_CALLS.name: ("tool", "day", "branch", "session"),
    RUNS.name: ("verb", "model", "provider", "day", "branch", "session"),
}
_DURATION = '"gen_ai.client.operation.duration"'
_TTFT = '"gen_ai.response.time_to_first_chunk"'


def _moment(value: datetime | date | str | None, argument: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidQueryError(argument, value, "not an ISO 8601 date or time") from exc
    if not isinstance(value, datetime):
        if not isinstance(value, date):
            raise InvalidQueryError(argument, value, "expected a datetime, a date or an ISO string")
        value = datetime.combine(value, time(), tzinfo=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # a naive time is taken as UTC, like the log's clock
    return value.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A half-open time window over ``recorded_at``: ``since <= t < until``; None is unbounded.

    Attributes:
        since: Inclusive lower bound, as the UTC ISO string the fact tables store.
        until: Exclusive upper bound, likewise.
    """

    since: str | None = None
    until: str | None = None

    @classmethod
    def of(cls, since: datetime | date | str | None, until: datetime | date | str | None) -> TimeRange:
        """Build a range from datetimes, dates (midnight UTC) or ISO strings (naive means UTC).

        Raises:
            InvalidQueryError: a bound is malformed, or ``until`` is not after ``since``.
        """
        low, high = _moment(since, "since"), _moment(until, "until")
        if low is not None and high is not None and high <= low:
            raise InvalidQueryError("until", until, f"must be later than since={since!r}")
        return cls(low, high)

    @property
    def unbounded(self) -> bool:
        """True when neither bound is set."""
        return self.since is None and self.until is None

    def where(self) -> tuple[str, list[str]]:
        """The SQL condition and its parameters."""
        parts, params = ["1"], []
        if self.since is not None:
            parts.append("recorded_at >= ?")
            params.append(self.since)
        if self.until is not None:
            parts.append("recorded_at < ?")
            params.append(self.until)
        return " AND ".join(parts), params


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Nearest-rank p50, p95 and p99 in milliseconds; None when there is no value."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Model calls of one group.

    Attributes:
        key: The group's value (a model, provider, day, branch, session or verb); None groups
            the calls that lack it.
        calls: How many calls.
        errors: How many failed.
        error_rate: ``errors / calls``.
        input_tokens: Sum of the reported input tokens.
        output_tokens: Sum of the reported output tokens.
        cost_usd: Sum of the known costs; None when no call's cost is known.
        unpriced_calls: Calls whose cost is unknown (not counted in ``cost_usd``).
        latency_ms: Latency percentiles.
        ttft_ms: Time-to-first-chunk percentiles (streamed calls only).
        cache_read_tokens: Sum of the input tokens read from the prompt cache (part of
            ``input_tokens``).
        cache_write_tokens: Sum of the input tokens written to the prompt cache (part of
            ``input_tokens``).
    """

    key: str | None
    calls: int
    errors: int
    error_rate: float
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced_calls: int
    latency_ms: Percentiles
    ttft_ms: Percentiles
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ToolRow:
    """Tool calls of one group: the market-standard trio of count, errors and latency.

    Attributes:
        key: The tool (or day, branch, session).
        calls: How many calls.
        ok: Calls that succeeded.
        errors: Calls that raised.
        denied: Calls refused by a permission check.
        error_rate: ``(errors + denied) / calls``.
        duration_ms: Duration percentiles (calls with a known duration).
    """

    key: str | None
    calls: int
    ok: int
    errors: int
    denied: int
    error_rate: float
    duration_ms: Percentiles

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RunRow:
    """Runs of one group.

    Attributes:
        key: The verb (or model, provider, day, branch, session).
        runs: How many runs.
        ok: Runs that ended.
        failed: Runs that failed (any reason).
        running: Runs with no end in the log.
        input_tokens: Sum of the runs' input tokens.
        output_tokens: Sum of the runs' output tokens.
        cost_usd: Sum of the known costs; None when none is known.
        duration_ms: Duration percentiles of the closed runs.
        cache_read_tokens: Sum of the runs' input tokens read from the prompt cache.
        cache_write_tokens: Sum of the runs' input tokens written to the prompt cache.
    """

    key: str | None
    runs: int
    ok: int
    failed: int
    running: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    duration_ms: Percentiles
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Failed model calls of one ``error.type`` within one group.

    Attributes:
        key: The group's value.
        error_type: The error class name (None when the call did not name one).
        errors: How many calls failed with it.
        calls: All calls of the group.
        rate: ``errors / calls``.
    """

    key: str | None
    error_type: str | None
    errors: int
    calls: int
    rate: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _key(table: FactTable, by: str) -> str:
    allowed = _ALLOWED[table.name]
    if by not in allowed:
        raise InvalidQueryError("by", by, f"{table.name} can be grouped by {', '.join(allowed)}")
    return _COLUMN[by]


def _order(by: str, limit: int | None) -> str:
    given: object = limit  # callers may be untyped: a bool or a float is refused as well
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
        raise InvalidQueryError("limit", limit, "must be an integer >= 1")
    cap = "" if limit is None else f" LIMIT {limit}"
    # Days read best in calendar order (the latest ones when limited); other groups biggest first.
    if by == "day":
        return "k IS NULL, k" if limit is None else f"k IS NULL, k DESC{cap}"
    return f"n DESC, k IS NULL, k{cap}"


def _chronological(by: str, limit: int | None, rows: list[Any]) -> list[Any]:
    return rows[::-1] if by == "day" and limit is not None else rows


def _ms(value: float | None) -> float | None:
    # Stored in seconds (OpenTelemetry); rounding to the nanosecond removes binary noise.
    return None if value is None else round(value * 1000.0, 6)


def _nanos_to_usd(nanos: int | None, priced: int) -> float | None:
    return None if not priced else (nanos or 0) / 1e9


def _rank_of(p: int, n: int) -> int:
    return -(-p * n // 100)  # ceil(p * n / 100) in integers: no rounding question


def percentiles(
    conn: sqlite3.Connection, table: FactTable, column: str, by: str, window: TimeRange
) -> dict[str | None, Percentiles]:
    """Nearest-rank p50/p95/p99 (ms) of ``column`` per group, over the window's rows.

    Rows with a null value are left out. The values are sorted here rather than by a SQL
    window function: fetching two columns and sorting floats in Python is faster.
    """
    key = _key(table, by)
    where, params = window.where()
    groups: dict[Any, list[float]] = {}
    sql = f"SELECT {key}, {column} FROM {table.name} WHERE {column} IS NOT NULL AND {where}"
    for k, v in conn.execute(sql, params):
        values = groups.get(k)
        if values is None:
            groups[k] = [v]
        else:
            values.append(v)
    return {k: _picked(sorted(values)) for k, values in groups.items()}


def _picked(ordered: list[float]) -> Percentiles:
    n = len(ordered)
    return Percentiles(*(_ms(ordered[_rank_of(p, n) - 1]) for p in (50, 95, 99)))


_SEEK_GROUPS = 64
"""Up to this many groups, percentiles are index seeks; beyond, one ordered pass over the index."""


def ranked(
    conn: sqlite3.Connection, table: FactTable, by: str, column: str, value: Any, n: int
) -> Percentiles:
    """Nearest-rank p50/p95/p99 (ms) of one group of ``n`` non-null values, by index seeks.

    With the rank index ``(group column, column)`` each percentile is one seek; without it
    the answer is the same, only slower.
    """
    if n <= 0:
        return Percentiles()
    key = _key(table, by)
    test = f"{key} IS NULL" if value is None else f"{key} = ?"
    sql = (
        f"SELECT {column} FROM {table.name} WHERE {test} AND {column} IS NOT NULL "
        f"ORDER BY {column} LIMIT 1 OFFSET ?"
    )
    found = []
    for p in (50, 95, 99):
        rank = _rank_of(p, n)
        params = (rank - 1,) if value is None else (value, rank - 1)
        row = conn.execute(sql, params).fetchone()
        found.append(None if row is None else _ms(row[0]))
    return Percentiles(*found)


def _ranked_groups(
    conn: sqlite3.Connection, table: FactTable, by: str, column: str, counts: dict[Any, int]
) -> dict[Any, Percentiles]:
    """Percentiles of the groups in ``counts`` (group -> non-null values), seeks or one pass."""
    if len(counts) <= _SEEK_GROUPS:
        return {k: ranked(conn, table, by, column, k, n) for k, n in counts.items()}
    # Many small groups: walk the rank index once in (group, value) order and pick the ranks.
    key = _key(table, by)
    sql = f"SELECT {key}, {column} FROM {table.name} WHERE {column} IS NOT NULL ORDER BY {key}, {column}"
    out: dict[Any, Percentiles] = {}
    current: Any = object()
    values: list[float] = []

    def close() -> None:
        if counts.get(current, 0) and values:
            out[current] = _picked(values)

    for k, v in conn.execute(sql):
        if k != current:
            close()
            current, values = k, []
        values.append(v)
    close()
    return {k: out.get(k, Percentiles()) for k in counts}


_CACHE_TOTALS = (
    'TOTAL("gen_ai.usage.cache_read.input_tokens"), TOTAL("gen_ai.usage.cache_creation.input_tokens")'
)


def usage(
    conn: sqlite3.Connection, by: str = "model", window: TimeRange | None = None, *, limit: int | None = None
) -> list[UsageRow]:
    """Model calls grouped ``by`` a dimension, biggest first (days in calendar order).

    Without a time window the answer comes from the rollup and the rank indexes; with one,
    or while a rebuild is under way (the rollups are summed at its end), from a scan of the
    window's facts. Both give the same figures.
    """
    window = window or TimeRange()
    key = _key(MODEL_CALLS, by)
    register_functions(conn)
    if window.unbounded and not rebuilding(conn):
        sql = (
            f"SELECT {key} AS k, SUM(calls) AS n, SUM(errors), SUM(input_tokens), SUM(output_tokens), "
            f"SUM(cost_nanos), SUM(priced), SUM(ttft_calls), SUM(cache_read_tokens), "
            f"SUM(cache_write_tokens) FROM {MODEL_ROLLUP.name} "
            f"GROUP BY k ORDER BY {_order(by, limit)}"
        )
        rows = conn.execute(sql).fetchall()
        latency = _ranked_groups(conn, MODEL_CALLS, by, _DURATION, {r[0]: r[1] for r in rows})
        ttft = _ranked_groups(conn, MODEL_CALLS, by, _TTFT, {r[0]: r[7] for r in rows})
    else:
        where, params = window.where()
        sql = (
            f"SELECT {key} AS k, COUNT(*) AS n, SUM(\"turnlog.status\" = 'error'), "
            'TOTAL("gen_ai.usage.input_tokens"), TOTAL("gen_ai.usage.output_tokens"), '
            'SUM(turnlog_nanos("turnlog.cost_usd")), COUNT("turnlog.cost_usd"), 0, '
            f"{_CACHE_TOTALS} "
            f"FROM {MODEL_CALLS.name} WHERE {where} GROUP BY k ORDER BY {_order(by, limit)}"
        )
        rows = conn.execute(sql, params).fetchall()
        latency = percentiles(conn, MODEL_CALLS, _DURATION, by, window)
        ttft = percentiles(conn, MODEL_CALLS, _TTFT, by, window)
    empty = Percentiles()
    result = [
        UsageRow(
            k, n, int(errors), errors / n, int(tin), int(tout), _nanos_to_usd(nanos, priced), n - priced,
            latency.get(k, empty), ttft.get(k, empty), int(read), int(write),
        )
        for k, n, errors, tin, tout, nanos, priced, _, read, write in rows
    ]  # fmt: skip
    return _chronological(by, limit, result)


def tool_usage(
    conn: sqlite3.Connection, by: str = "tool", window: TimeRange | None = None, *, limit: int | None = None
) -> list[ToolRow]:
    """Tool calls grouped ``by`` a dimension (tool, day, branch or session)."""
    window = window or TimeRange()
    key = _key(TOOL_CALLS, by)
    if window.unbounded and not rebuilding(conn):
        sql = (
            f"SELECT {key} AS k, SUM(calls) AS n, SUM(ok), SUM(errors), SUM(denied), SUM(timed) "
            f"FROM {TOOL_ROLLUP.name} GROUP BY k ORDER BY {_order(by, limit)}"
        )
        rows = conn.execute(sql).fetchall()
        durations = _ranked_groups(conn, TOOL_CALLS, by, _DURATION, {r[0]: r[5] for r in rows})
    else:
        where, params = window.where()
        sql = (
            f"SELECT {key} AS k, COUNT(*) AS n, SUM(\"turnlog.status\" = 'ok'), "
            "SUM(\"turnlog.status\" = 'error'), SUM(\"turnlog.status\" = 'denied'), 0 "
            f"FROM {TOOL_CALLS.name} WHERE {where} GROUP BY k ORDER BY {_order(by, limit)}"
        )
        rows = conn.execute(sql, params).fetchall()
        durations = percentiles(conn, TOOL_CALLS, _DURATION, by, window)
    empty = Percentiles()
    result = [
        ToolRow(k, n, int(ok), int(err), int(denied), (err + denied) / n, durations.get(k, empty))
        for k, n, ok, err, denied, _ in rows
    ]
    return _chronological(by, limit, result)


def run_usage(
    conn: sqlite3.Connection, by: str = "verb", window: TimeRange | None = None, *, limit: int | None = None
) -> list[RunRow]:
    """Runs grouped ``by`` a dimension (verb, model, provider, day, branch or session); a scan of the runs."""
    window = window or TimeRange()
    key = _key(RUNS, by)
    where, params = window.where()
    register_functions(conn)
    sql = (
        f"SELECT {key} AS k, COUNT(*) AS n, SUM(\"turnlog.status\" = 'ok'), "
        "SUM(\"turnlog.status\" = 'failed'), SUM(\"turnlog.status\" = 'running'), "
        'TOTAL("gen_ai.usage.input_tokens"), TOTAL("gen_ai.usage.output_tokens"), '
        f'SUM(turnlog_nanos("turnlog.cost_usd")), COUNT("turnlog.cost_usd"), {_CACHE_TOTALS} '
        f"FROM {RUNS.name} WHERE {where} GROUP BY k ORDER BY {_order(by, limit)}"
    )
    rows = conn.execute(sql, params).fetchall()
    durations = percentiles(conn, RUNS, _DURATION, by, window)
    empty = Percentiles()
    result = [
        RunRow(
            k,
            n,
            ok,
            failed,
            running,
            int(tin),
            int(tout),
            _nanos_to_usd(nanos, priced),
            durations.get(k, empty),
            int(read),
            int(write),
        )
        for k, n, ok, failed, running, tin, tout, nanos, priced, read, write in rows
    ]
    return _chronological(by, limit, result)


def error_rates(
    conn: sqlite3.Connection, by: str = "model", window: TimeRange | None = None
) -> list[ErrorRow]:
    """Failed model calls per group and ``error.type``, most frequent first."""
    window = window or TimeRange()
    key = _key(MODEL_CALLS, by)
    where, params = window.where()
    failed = (
        f'SELECT {key} AS k, "error.type" AS e, COUNT(*) AS n FROM {MODEL_CALLS.name} '
        f"WHERE \"turnlog.status\" = 'error' AND {where} GROUP BY k, e"
    )
    if window.unbounded and not rebuilding(conn):
        totals = f"SELECT {key} AS k, SUM(calls) AS calls FROM {MODEL_ROLLUP.name} GROUP BY k"
        totals_params: list[str] = []
    else:
        totals = f"SELECT {key} AS k, COUNT(*) AS calls FROM {MODEL_CALLS.name} WHERE {where} GROUP BY k"
        totals_params = params
    sql = (
        f"WITH t AS ({totals}), m AS ({failed}) SELECT m.k, m.e, m.n, t.calls FROM m "
        "JOIN t ON t.k IS m.k ORDER BY m.n DESC, m.k IS NULL, m.k, m.e"
    )
    return [
        ErrorRow(k, e, n, calls, n / calls) for k, e, n, calls in conn.execute(sql, [*totals_params, *params])
    ]
