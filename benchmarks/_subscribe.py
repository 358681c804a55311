"""``turnlog bench subscribe``: subscription lag under concurrent writers, SQLite and PostgreSQL side by side.

For each backend, in one run:

- **lag**: ``--writers`` writer processes append single events at ``--rate`` events/s each
  for ``--seconds``; one subscriber in this process measures, for every event, the time from
  the writer's ``append`` call (a wall-clock stamp inside the event) to its delivery by
  ``subscribe()``. Writers are separate processes, as agents on other hosts would be: SQLite
  finds their events by polling its file, PostgreSQL is woken by LISTEN/NOTIFY.
- **write throughput**: one writer, then ``--writers`` writers at once, each appending
  ``--burst`` single-event transactions as fast as it can. On PostgreSQL every append takes
  the table lock that keeps positions in commit order, so concurrent writers queue; this shows
  what that costs.

PostgreSQL is measured when ``--pg URL`` is given or ``TURNLOG_TEST_PG_DSN`` is set; the run
uses a fresh schema and drops it afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import orjson
from anyio.abc import Process

from turnlog.eventstore import EventStore, open_store
from turnlog.tools._command import emit_json

from ._options import at_least, positive_float

__all__ = ["add_arguments", "run"]

_WRITER = textwrap.dedent(
    """
    import sys, time, anyio, orjson
    from turnlog.eventstore import NewEvent, open_store

    async def main(url, worker, count, rate):
        async with open_store(url) as store:
            await store.head()  # connect before the start signal
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            start = time.perf_counter()
            acks = []
            for i in range(count):
                if rate > 0:
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        await anyio.sleep(delay)
                data = {"w": worker, "i": i, "sent": time.time(), "text": "x" * 200}
                await store.append(f"bench-{worker}", [NewEvent("bench.appended", data)])
                acks.append(time.time())
            seconds = time.perf_counter() - start
            print(orjson.dumps({"seconds": seconds, "acks": acks}).decode(), flush=True)

    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--writers", type=at_least(1), default=4, help="concurrent writer processes (default 4)"
    )
    parser.add_argument(
        "--rate", type=positive_float, default=50.0, help="events/s per writer in the lag test (default 50)"
    )
    parser.add_argument(
        "--seconds", type=positive_float, default=5.0, help="length of the lag test (default 5)"
    )
    parser.add_argument(
        "--burst",
        type=at_least(1),
        default=300,
        help="appends per writer in the throughput test (default 300)",
    )
    parser.add_argument(
        "--pg",
        default=None,
        help="PostgreSQL URL (default: $TURNLOG_TEST_PG_DSN; skipped when neither is set)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@dataclass(frozen=True, slots=True)
class Result:
    """One backend's figures."""

    backend: str
    lag_ms: dict[str, float]
    """From the writer's append call to delivery: p50, p95, max."""
    lag_after_ack_ms: dict[str, float]
    """From the append's acknowledgement to delivery (negative: delivered before the ack)."""
    events: int
    one_writer_eps: float
    many_writers_eps: float


async def _spawn(url: str, writers: int, count: int, rate: float) -> list[Any]:
    procs = []
    for w in range(writers):
        proc = await anyio.open_process([sys.executable, "-c", _WRITER, url, str(w), str(count), str(rate)])
        procs.append(proc)
    for proc in procs:
        line = await _readline(proc)
        if line != b"ready":
            raise RuntimeError(f"a writer did not start: {line!r}")
    return procs


async def _readline(proc: Process) -> bytes:
    assert proc.stdout is not None
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await proc.stdout.receive(1)
        if not chunk:
            err = b"".join([c async for c in proc.stderr]) if proc.stderr else b""
            raise RuntimeError(f"a writer exited early: {err.decode(errors='replace')[-2000:]}")
        buf += chunk
    return buf.strip()


async def _go_and_wait(procs: list[Any]) -> list[dict[str, Any]]:
    for proc in procs:
        await proc.stdin.send(b"go\n")
    reports = [orjson.loads(await _readline(proc)) for proc in procs]
    for proc in procs:
        await proc.wait()
        await proc.aclose()
    return reports


async def _lag(
    store: EventStore, url: str, writers: int, count: int, rate: float
) -> tuple[list[float], list[float]]:
    """Delivery lag in ms, measured from the append call and from its acknowledgement."""
    received: dict[tuple[int, int], tuple[float, float]] = {}
    reports: list[dict[str, Any]] = []
    start_at = await store.head() + 1
    procs = await _spawn(url, writers, count, rate)
    with anyio.fail_after(120 + count / max(rate, 1)):
        async with anyio.create_task_group() as tg:

            async def consume() -> None:
                async for event in store.subscribe(start_at, types=["bench.appended"]):
                    received[(event.data["w"], event.data["i"])] = (time.time(), event.data["sent"])
                    if len(received) == writers * count:
                        return

            tg.start_soon(consume)
            reports.extend(await _go_and_wait(procs))
    from_call = [(got - sent) * 1000 for got, sent in received.values()]
    from_ack = [
        (received[(w, i)][0] - acked) * 1000
        for w, report in enumerate(reports)
        for i, acked in enumerate(report["acks"])
    ]
    return from_call, from_ack


async def _throughput(url: str, writers: int, count: int) -> float:
    procs = await _spawn(url, writers, count, 0.0)
    start = time.perf_counter()
    await _go_and_wait(procs)
    return writers * count / (time.perf_counter() - start)


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2), "max": round(ordered[-1], 2)}


async def _measure(name: str, url: str, args: argparse.Namespace) -> Result:
    count = max(2, int(args.rate * args.seconds))
    async with open_store(url) as store:
        from_call, from_ack = await _lag(store, url, args.writers, count, args.rate)
    one = await _throughput(url, 1, args.burst)
    many = await _throughput(url, args.writers, args.burst)
    return Result(name, _percentiles(from_call), _percentiles(from_ack), len(from_call), one, many)


def _pg_url(args: argparse.Namespace) -> tuple[str, str] | None:
    base = args.pg or os.environ.get("TURNLOG_TEST_PG_DSN")
    if not base:
        return None
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    return base + ("&" if "?" in base else "?") + urlencode({"schema": schema}), schema


async def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    base = url.split("?", 1)[0]
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _settings(url: str) -> dict[str, str]:
    import psycopg

    names = [
        "server_version",
        "synchronous_commit",
        "fsync",
        "shared_buffers",
        "wal_level",
        "max_connections",
    ]
    async with await psycopg.AsyncConnection.connect(url.split("?", 1)[0], autocommit=True) as conn:
        out = {}
        for setting in names:
            row = await (await conn.execute("SELECT current_setting(%s)", [setting])).fetchone()
            out[setting] = str(row[0]) if row else "?"
        return out


async def _run_all(args: argparse.Namespace, workdir: Path) -> tuple[list[Result], dict[str, str] | None]:
    results = [await _measure("sqlite", f"sqlite:///{workdir / 'bench.db'}", args)]
    pg = _pg_url(args)
    settings = None
    if pg is not None:
        url, schema = pg
        try:
            settings = await _settings(url)
            results.append(await _measure("postgresql", url, args))
        finally:
            await _drop_schema(url, schema)
    return results, settings


_RATIOS = (
    "lag_p50_pg_over_sqlite",
    "lag_p95_pg_over_sqlite",
    "writes_pg_over_sqlite",
    "pg_many_over_one_writer",
)


def _ratios(results: list[Result]) -> dict[str, float | None]:
    by = {r.backend: r for r in results}
    if "postgresql" not in by:
        return dict.fromkeys(_RATIOS)
    s, p = by["sqlite"], by["postgresql"]
    values = [
        p.lag_ms["p50"] / s.lag_ms["p50"],
        p.lag_ms["p95"] / s.lag_ms["p95"],
        p.many_writers_eps / s.many_writers_eps,
        p.many_writers_eps / p.one_writer_eps,
    ]
    return {name: round(value, 2) for name, value in zip(_RATIOS, values, strict=True)}


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        results, settings = anyio.run(_run_all, args, Path(tmp))
    ratios = _ratios(results)
    if args.json:
        emit_json(
            {
                "benchmark": "subscribe",
                "cpus": os.cpu_count(),
                "writers": args.writers,
                "rate_per_writer": args.rate,
                "seconds": args.seconds,
                "burst": args.burst,
                "postgresql_settings": settings,
                "results": {
                    r.backend: {
                        "lag_ms": r.lag_ms,
                        "lag_after_ack_ms": r.lag_after_ack_ms,
                        "events": r.events,
                        "one_writer_events_per_s": round(r.one_writer_eps),
                        "many_writers_events_per_s": round(r.many_writers_eps),
                    }
                    for r in results
                },
                "ratios": ratios,
            }
        )
        return 0
    print(
        f"subscribe benchmark: {args.writers} writer processes x {args.rate:g} events/s for "
        f"{args.seconds:g} s, {os.cpu_count()} cpus"
    )
    for r in results:
        print(f"  {r.backend} ({r.events} events)")
        for label, lag in (("from append call", r.lag_ms), ("from ack", r.lag_after_ack_ms)):
            print(
                f"    lag {label:<18} p50 {lag['p50']:8.2f} ms  p95 {lag['p95']:8.2f} ms  "
                f"max {lag['max']:8.2f} ms"
            )
        print(
            f"    writes                 1 writer {r.one_writer_eps:8,.0f} events/s, "
            f"{args.writers} writers {r.many_writers_eps:8,.0f} events/s"
        )
    if settings is None:
        print("  postgresql  skipped: pass --pg URL or set TURNLOG_TEST_PG_DSN")
    else:
        print("  postgresql settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    print("ratios:")
    for name, value in ratios.items():
        print(f"  {name:<24} {'n/a' if value is None else f'{value:.2f}x'}")
    return 0
