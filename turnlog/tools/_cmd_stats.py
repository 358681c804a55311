"""``turnlog stats``: usage, cost, latency, errors and tools, from the analytics projection.

The projection is brought up to date first (only the events after its checkpoint are
read), then one table is printed: model calls grouped by model, provider, day, branch or
session (with the failed calls by error type below), tool calls by tool, or runs by verb.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from turnlog.analytics import (
    AnalyticsError,
    AnalyticsProjection,
    ErrorRow,
    Percentiles,
    RunRow,
    TimeRange,
    ToolRow,
    UpdateReport,
    UsageRow,
    load_price_table,
)

from ._command import Command, UserError, add_store_argument, emit_json, store_url
from ._inspect import check_store_exists, opened_store, parse_time
from ._output import print_table

__all__ = ["COMMAND", "add_analytics_arguments", "open_projection_args"]

_BY = ("model", "served_model", "provider", "day", "tool", "branch", "session", "verb")


def add_analytics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--prices``, ``--genai-prices`` and ``--analytics-db``, shared by ``stats`` and ``export``."""
    parser.add_argument(
        "--prices",
        default=None,
        metavar="FILE",
        help='JSON price file {"model": {"input": USD per 1M tokens, "output": ...}} on top of the '
        "defaults and $TURNLOG_PRICES",
    )
    parser.add_argument(
        "--genai-prices",
        action="store_true",
        help="price the models your prices do not name from genai-prices (cache prices, price "
        "history; needs turnlog[prices])",
    )
    parser.add_argument(
        "--analytics-db",
        default=None,
        metavar="PATH",
        help="SQLite file for the analytics tables; default: <store file>.analytics beside a SQLite "
        "store, the user's cache directory for PostgreSQL, memory for an in-memory store",
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser)
    parser.add_argument("--by", choices=_BY, default="model", help="group by (default: model)")
    parser.add_argument("--since", default=None, metavar="ISO", help="from this UTC time or date (inclusive)")
    parser.add_argument(
        "--until", default=None, metavar="ISO", help="up to this UTC time or date (exclusive)"
    )
    parser.add_argument(
        "--limit", type=int, default=50, metavar="N", help="show the N biggest groups (latest days); 0: all"
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="rebuild the analytics tables from the whole log"
    )
    add_analytics_arguments(parser)


def open_projection_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The store URL and the ``AnalyticsProjection`` keyword arguments the options ask for."""
    url = store_url(args.store)
    check_store_exists(url)
    try:
        prices = load_price_table(args.prices, maintained=args.genai_prices)
    except AnalyticsError as exc:
        raise UserError(str(exc)) from exc
    if args.genai_prices and prices.maintained is None:
        # Without the package the table would silently fall back to the shipped defaults.
        raise UserError("--genai-prices needs the genai-prices package: pip install 'turnlog[prices]'")
    return url, {"database": args.analytics_db, "prices": prices}


def _ms(p: Percentiles) -> tuple[str | None, str | None, str | None]:
    # A tenth of a millisecond is finer than any latency a person compares; three decimals
    # only widen the latency columns until a terminal has no room for them (--json keeps all).
    return _tenth(p.p50), _tenth(p.p95), _tenth(p.p99)


def _tenth(ms: float | None) -> str | None:
    return None if ms is None else f"{ms:,.1f}"


def _money(cost: float | None) -> str | None:
    # Costs are often fractions of a cent: keep six decimals rather than the table's three.
    return None if cost is None else f"{cost:.6f}"


def _pct(rate: float) -> str:
    return f"{rate * 100:.1f}%"


async def _collect(args: argparse.Namespace) -> dict[str, Any]:
    _url, options = open_projection_args(args)
    since = parse_time(args.since, "--since") if args.since is not None else None
    until = parse_time(args.until, "--until") if args.until is not None else None
    if since is not None and until is not None and until <= since:
        raise UserError(f"--until ({args.until}) must be later than --since ({args.since})")
    window = TimeRange.of(since, until)
    if args.limit < 0:
        raise UserError(f"--limit must be >= 0, not {args.limit}")
    limit = args.limit or None
    async with opened_store(args.store) as store, AnalyticsProjection(store, **options) as analytics:
        report: UpdateReport = await (analytics.rebuild() if args.rebuild else analytics.update())
        result: dict[str, Any] = {
            "by": args.by,
            "since": window.since,
            "until": window.until,
            "position": report.to_position,
            "applied_events": report.events,
            "limit": limit,
        }
        if args.by == "tool":
            result["tools"] = await analytics.tool_usage("tool", since=since, until=until, limit=limit)
        elif args.by == "verb":
            result["runs"] = await analytics.run_usage("verb", since=since, until=until, limit=limit)
        else:
            result["usage"] = await analytics.usage(args.by, since=since, until=until, limit=limit)
            result["errors"] = await analytics.error_rates(args.by, since=since, until=until)
        return result


# Prompt-cache counts take two columns only where some row reports them: most logs have none,
# and the latency columns must still fit a 120-column terminal as one table.
_CACHE_COLUMNS = ("cache read", "cache write")


def _without_empty_cache(
    columns: list[str], rows: list[list[object]]
) -> tuple[list[str], list[list[object]]]:
    """``columns`` and ``rows`` without the cache columns when no row has a cache count."""
    at = [columns.index(name) for name in _CACHE_COLUMNS]
    if any(row[i] for row in rows for i in at):
        return columns, rows
    keep = [i for i in range(len(columns)) if i not in at]
    return [columns[i] for i in keep], [[row[i] for i in keep] for row in rows]


def _print_usage(by: str, rows: list[UsageRow], errors: list[ErrorRow]) -> None:
    columns = [
        by,
        "calls",
        "errors",
        "error rate",
        "input tok",
        "cache read",
        "cache write",
        "output tok",
        "cost $",
        "unpriced",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "ttft p50",
        "ttft p95",
        "ttft p99",
    ]
    table: list[list[object]] = [
        [
            _key(r.key, by),
            r.calls,
            r.errors,
            _pct(r.error_rate),
            r.input_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            r.output_tokens,
            _money(r.cost_usd),
            r.unpriced_calls,
            *_ms(r.latency_ms),
            *_ms(r.ttft_ms),
        ]
        for r in rows
    ]
    print_table(*_without_empty_cache(columns, table), title=f"model calls by {by}")
    if errors:
        print()
        print_table(
            [by, "error.type", "errors", "of calls"],
            [[_key(e.key, by), e.error_type, e.errors, _pct(e.rate)] for e in errors],
            title="failed calls by error type",
        )


def _key(key: object, by: str) -> object:
    # A CLI agent run on the CLI's own default model records no model name.
    return "(default model)" if by == "model" and key == "" else key


def _print_tools(rows: list[ToolRow]) -> None:
    print_table(
        ["tool", "calls", "ok", "errors", "denied", "error rate", "p50 ms", "p95 ms", "p99 ms"],
        [[r.key, r.calls, r.ok, r.errors, r.denied, _pct(r.error_rate), *_ms(r.duration_ms)] for r in rows],
        title="tool calls by tool",
    )


def _print_runs(rows: list[RunRow]) -> None:
    columns = [
        "verb",
        "runs",
        "ok",
        "failed",
        "running",
        "input tok",
        "cache read",
        "cache write",
        "output tok",
        "cost $",
        "p50 ms",
        "p95 ms",
        "p99 ms",
    ]
    table: list[list[object]] = [
        [
            r.key,
            r.runs,
            r.ok,
            r.failed,
            r.running,
            r.input_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            r.output_tokens,
            _money(r.cost_usd),
            *_ms(r.duration_ms),
        ]
        for r in rows
    ]
    print_table(*_without_empty_cache(columns, table), title="runs by verb")


def _run(args: argparse.Namespace) -> int:
    try:
        result = anyio.run(_collect, args)
    except AnalyticsError as exc:  # a price file, an option, where the analytics tables go
        raise UserError(str(exc)) from exc
    if args.json:
        emit_json({k: [row.to_dict() for row in v] if isinstance(v, list) else v for k, v in result.items()})
        return 0
    if "tools" in result:
        _print_tools(result["tools"])
    elif "runs" in result:
        _print_runs(result["runs"])
    else:
        _print_usage(args.by, result["usage"], result["errors"])
    shown = result.get("usage") or result.get("tools") or result.get("runs") or []
    if result["limit"] is not None and len(shown) == result["limit"]:
        print(f"\n(the {result['limit']} biggest groups; --limit 0 shows them all)")
    print(f"\nup to position {result['position']} ({result['applied_events']} new events applied)")
    return 0


COMMAND = Command(
    name="stats",
    help="tokens, cost, latency and TTFT percentiles, errors and tools, by model, day, tool, ...",
    description="Update the analytics projection with the events added since its last update, then print\n"
    "usage grouped by model, provider, day, branch, session, tool or verb. Percentiles are\n"
    "nearest-rank; the cost of a model the price table does not know is null, not zero.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog stats --by day --since 2026-12-01 --store turnlog.db",
)
