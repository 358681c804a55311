"""``turnlog bench analytics``: build, incremental update and query times of the analytics projection.

A synthetic SQLite store with a realistic mix (runs with instructions, model calls,
assistant responses, tool rounds, stream chunks on run streams, failures) is built once
with large ``append_batch`` calls and cached in the temp directory; every run works on a
copy. Side by side with a bare ``read_all`` of the whole log (what any reader of the log
pays before its own work) and the read limit (every row read with plain ``sqlite3`` and its
data and meta parsed with ``orjson``), it measures, in wall and CPU time:

- build: ``rebuild()`` from scratch, events of the store per second;
- incremental: ``update()`` after 1,000 new events are appended (median of ``--repeat``);
- query: ``usage(by=..., limit=50)`` for each grouping as ``turnlog stats`` asks it,
  ``tool_usage``, and every branch at once (median of ``--repeat``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import orjson

from turnlog.analytics import AnalyticsProjection
from turnlog.eventstore import NewEvent, uuid7
from turnlog.eventstore._sqlite import SQLiteEventStore

from ._options import at_least

__all__ = ["add_arguments", "build_store", "run", "synthetic_batches"]

_GENERATOR_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``turnlog bench analytics``."""
    parser.add_argument("--events", type=at_least(1), default=1_000_000, help="events in the synthetic store")
    parser.add_argument(
        "--new", type=at_least(1), default=1_000, help="events appended before the incremental update"
    )
    parser.add_argument(
        "--repeat", type=at_least(1), default=5, help="repetitions of the incremental and query timings"
    )
    parser.add_argument(
        "--cache-dir", default=None, help="where the synthetic store is cached (default: tmp)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@functools.cache
def _synthlog() -> Any:
    """``tests/analytics/synthlog.py`` of this checkout: the generator the analytics tests use too."""
    path = Path(__file__).resolve().parent.parent / "tests" / "analytics" / "synthlog.py"
    spec = importlib.util.spec_from_file_location("_turnlog_synthlog", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_batches(
    total: int, *, seed: int = 7, batch: int = 20_000
) -> Iterator[list[tuple[str, list[NewEvent], Any]]]:
    """Yield lists of ``append_batch`` entries holding about ``total`` events in all."""
    synth = _synthlog().SyntheticLog(seed, datetime(2026, 11, 1, tzinfo=UTC))
    branches = [str(uuid7()) for _ in range(max(1, total // 400))]
    made = 0
    entries: list[tuple[str, list[NewEvent], Any]] = []
    size = 0
    while made < total:
        for entry in synth.turn(synth.rng.choice(branches)):
            entries.append(entry)
            size += len(entry[1])
            made += len(entry[1])
        if size >= batch or made >= total:
            yield entries
            entries, size = [], 0
    if entries:
        yield entries


async def build_store(path: Path, total: int, *, seed: int = 7) -> int:
    """Create a synthetic store of about ``total`` events at ``path``; return the event count."""
    async with SQLiteEventStore(path) as store:
        for entries in synthetic_batches(total, seed=seed):
            await store.append_batch(entries)
        return await store.head()


async def _cached_store(total: int, cache_dir: Path) -> Path:
    cached = cache_dir / f"turnlog-bench-analytics-v{_GENERATOR_VERSION}-{total}.db"
    if not await anyio.Path(cached).exists():
        partial = cached.with_suffix(".partial")
        for suffix in ("", "-wal", "-shm"):
            await anyio.Path(str(partial) + suffix).unlink(missing_ok=True)
        await build_store(partial, total)
        await anyio.Path(partial).rename(cached)
    return cached


class _Clock:
    """Wall and CPU time of one measured step (CPU time is the process's, every thread included).

    On a shared machine the wall time also counts waiting for a core; the CPU time does not.
    """

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> _Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


async def _read_all(store: SQLiteEventStore) -> _Clock:
    with _Clock() as clock:
        async for _ in store.read_all():
            pass
    return clock


def _read_limit(path: Path) -> _Clock:
    # The floor of any build: every stored row read with plain sqlite3 and its data and meta
    # parsed with orjson, nothing else (no store object, no checks, no event objects).
    conn = sqlite3.connect(path)
    loads = orjson.loads
    try:
        with _Clock() as clock:
            for data, meta in conn.execute("SELECT data, meta FROM events"):
                loads(data)
                loads(meta)
    finally:
        conn.close()
    return clock


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _median(clocks: list[_Clock]) -> dict[str, float]:
    return {
        "wall_ms": _ms(statistics.median(c.wall for c in clocks)),
        "cpu_ms": _ms(statistics.median(c.cpu for c in clocks)),
    }


async def _incremental(
    store: SQLiteEventStore, analytics: AnalyticsProjection, args: argparse.Namespace
) -> list[_Clock]:
    synth = _synthlog().SyntheticLog(99, datetime(2026, 12, 1, tzinfo=UTC))
    branch = str(uuid7())
    clocks = []
    for _ in range(args.repeat):
        entries: list[tuple[str, list[NewEvent], Any]] = []
        while sum(len(e[1]) for e in entries) < args.new:
            entries.extend(synth.turn(branch))
        await store.append_batch(entries)
        with _Clock() as clock:
            await analytics.update()
        clocks.append(clock)
    return clocks


async def _queries(analytics: AnalyticsProjection, repeat: int) -> dict[str, dict[str, float]]:
    # As `turnlog stats --by X` asks (the 50 biggest groups), plus every branch at once.
    cases: list[tuple[str, Any]] = [
        (by, lambda by=by: analytics.usage(by, limit=50))
        for by in ("model", "provider", "day", "branch", "session", "verb")
    ]
    cases.append(("tool", lambda: analytics.tool_usage("tool", limit=50)))
    cases.append(("branch, no limit", lambda: analytics.usage("branch")))
    out = {}
    for name, query in cases:
        clocks = []
        for _ in range(repeat):
            with _Clock() as clock:
                await query()
            clocks.append(clock)
        out[name] = _median(clocks)
    return out


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    cache_dir = Path(args.cache_dir or tempfile.gettempdir())
    cached = await _cached_store(args.events, cache_dir)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        work = Path(tmp) / "store.db"
        shutil.copyfile(cached, work)
        async with SQLiteEventStore(work) as store, AnalyticsProjection(store) as analytics:
            events = await store.head()
            read = await _read_all(store)
            limit = _read_limit(work)
            with _Clock() as build_clock:
                build = await analytics.rebuild()
            facts = await analytics.sql(
                "SELECT (SELECT COUNT(*) FROM analytics_model_calls), "
                "(SELECT COUNT(*) FROM analytics_tool_calls), "
                "(SELECT COUNT(*) FROM analytics_runs)"
            )
            incremental = await _incremental(store, analytics, args)
            queries = await _queries(analytics, args.repeat)
    build_rate, build_cpu_rate = events / build_clock.wall, events / build_clock.cpu
    inc = _median(incremental)
    slowest = max(q["wall_ms"] for name, q in queries.items() if "no limit" not in name)
    return {
        "events": events,
        "events_read_by_projection": build.events,
        "facts": {"model_calls": facts[0][0], "tool_calls": facts[0][1], "runs": facts[0][2]},
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "raw_read_all_events_per_s": {"wall": round(events / read.wall), "cpu": round(events / read.cpu)},
        "read_limit_events_per_s": {"wall": round(events / limit.wall), "cpu": round(events / limit.cpu)},
        "build_events_per_s": {"wall": round(build_rate), "cpu": round(build_cpu_rate)},
        "build_seconds": {"wall": round(build_clock.wall, 2), "cpu": round(build_clock.cpu, 2)},
        "build_vs_raw_read": round(build_clock.cpu and read.cpu / build_clock.cpu, 2),
        "build_vs_read_limit": {
            "wall": round(limit.wall / build_clock.wall, 2),
            "cpu": round(limit.cpu / build_clock.cpu, 2),
        },
        "incremental_new_events": args.new,
        "incremental_ms_median": inc,
        "query_ms_median": queries,
        "targets_wall": {
            "build_events_per_s>=100000": build_rate >= 100_000,
            "build>=0.4x_read_limit": limit.wall / build_clock.wall >= 0.4,
            "incremental_ms<=50": inc["wall_ms"] <= 50,
            "query_ms<=200": slowest <= 200,
        },
    }


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures (``--json`` for machine-readable output)."""
    if args.events < 1000:
        print("turnlog bench analytics: --events must be at least 1000")
        return 2
    result = anyio.run(_bench, args)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return 0
    r = result
    print(
        f"store: {r['events']:,} events ({r['events_read_by_projection']:,} of the types analytics reads); "
        f"facts: {r['facts']}; load average {r['load_average'][0]} -> {r['load_average'][1]}"
    )
    print(f"{'':28}{'wall':>14}{'cpu':>14}")
    raw, build = r["raw_read_all_events_per_s"], r["build_events_per_s"]
    print(f"{'raw read_all (events/s)':28}{raw['wall']:>14,}{raw['cpu']:>14,}")
    limit, ratio = r["read_limit_events_per_s"], r["build_vs_read_limit"]
    print(f"{'read limit (events/s)':28}{limit['wall']:>14,}{limit['cpu']:>14,}")
    print(f"{'build from scratch (events/s)':28}{build['wall']:>14,}{build['cpu']:>14,}")
    print(f"{'  build / read limit':28}{ratio['wall']:>14}{ratio['cpu']:>14}")
    print(f"{'  build / raw read_all (cpu)':28}{r['build_vs_raw_read']:>28}")
    inc = r["incremental_ms_median"]
    print(
        f"{'incremental ' + format(r['incremental_new_events'], ',') + ' (ms)':28}{inc['wall_ms']:>14}{inc['cpu_ms']:>14}"
    )
    for by, q in r["query_ms_median"].items():
        print(f"{'query by ' + by + ' (ms)':28}{q['wall_ms']:>14}{q['cpu_ms']:>14}")
    print(
        "targets met (wall): "
        + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["targets_wall"].items())
    )
    return 0
