"""``turnlog bench writers``: single-event appends by many writers at once, checked end to end.

For each backend (SQLite at ``--sqlite-durability``, ``full`` by default, and PostgreSQL when
``--pg URL`` is given or ``TURNLOG_TEST_PG_DSN`` is set), in one run:

- **processes**: 1, 4 and 16 writer processes (``--procs``), each appending single events to
  its own stream as fast as it can: how appends scale with writers on other connections;
- **tasks**: 1 and 64 concurrent tasks in this process (``--tasks``), each appending single
  events to its own stream (many conversations in one server): what group commit gives.

Every scenario appends ``--events`` events in all, split evenly among its writers. Meanwhile a
subscriber and a reader polling ``read_all`` (on their own store objects in this process)
check that every event is seen exactly once and in increasing position order; skipped or
duplicated events are counted and reported (``--no-check`` runs neither, to measure what they
cost). Throughput is events per second from the start signal to the last acknowledgement. The
CPU time per append is printed too: the writer processes' own (``getrusage`` around their
append loops), and this process's (the subscriber and the reader, and the appends of the task
scenarios); for PostgreSQL's task scenarios, also the server's: the CPU time of the backend
processes serving the writers' store (read from ``/proc``, so only when the server runs on
this machine and its processes are readable). The machine's load average is printed with the figures: on a shared machine,
other work takes its share of the cores. ``--backends postgresql`` skips SQLite; PostgreSQL
settings can be passed in the URL (``options=-c%20synchronous_commit%3Doff``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio

from turnlog.eventstore import EventStore, NewEvent, RecordedEvent, open_store
from turnlog.tools._command import emit_json

__all__ = ["add_arguments", "run"]

_WRITER = textwrap.dedent(
    """
    import resource, sys, anyio
    from turnlog.eventstore import NewEvent, open_store

    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    async def main(url, stream, count):
        async with open_store(url) as store:
            await store.stream_version(stream)  # connect before the start signal
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            start = cpu()
            for i in range(count):
                await store.append(stream, [NewEvent("bench.appended", {"s": stream, "i": i})])
            print(f"done {cpu() - start:.6f}", flush=True)

    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
    """
)

_TARGETS = {
    # (backend, ratio name) -> the least ratio wanted
    # Four writer processes scale with the cores they have: 0.9 x min(4, cores) x one writer
    # (1.8x on 2 cores, 3.6x on 4 or more; issue 28).
    ("postgresql", "procs_4_over_1"): 0.9 * min(4, os.cpu_count() or 1),
    ("postgresql", "tasks_64_over_1"): 10.0,
    ("sqlite", "tasks_64_over_1"): 5.0,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--events", type=int, default=2000, help="events per scenario, split among its writers (default 2000)"
    )
    parser.add_argument("--procs", default="1,4,16", help="writer process counts (default 1,4,16)")
    parser.add_argument(
        "--tasks", default="1,64", help="concurrent task counts in one process (default 1,64)"
    )
    parser.add_argument(
        "--sqlite-durability",
        choices=("normal", "full"),
        default="full",
        help="durability of the SQLite store (default full: an fsync per commit)",
    )
    parser.add_argument(
        "--pg",
        default=None,
        help="PostgreSQL URL (default: $TURNLOG_TEST_PG_DSN; skipped when neither is set or empty)",
    )
    parser.add_argument(
        "--backends", default="sqlite,postgresql", help="backends to run (default sqlite,postgresql)"
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="run no subscriber and no reader meanwhile (for measuring what they cost; nothing is checked)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@dataclass
class Check:
    """What a subscriber or a reader saw: each event once, positions increasing."""

    seen: set[tuple[str, int]] = field(default_factory=set)
    last: int = 0
    duplicated: int = 0
    out_of_order: int = 0

    def add(self, event: RecordedEvent) -> None:
        key = (event.data["s"], event.data["i"])
        if key in self.seen:
            self.duplicated += 1
        self.seen.add(key)
        if event.position <= self.last:
            self.out_of_order += 1
        self.last = max(self.last, event.position)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scenario's figures."""

    name: str
    writers: int
    events: int
    seconds: float
    skipped: int
    duplicated: int
    out_of_order: int
    group_size: float | None
    writer_cpu: float
    """CPU seconds of the writers' appends (the writer processes', or this process's for tasks)."""
    bench_cpu: float
    """CPU seconds of this process (the subscriber and the reader, and the tasks' appends)."""
    server_cpu: float | None = None
    """CPU seconds of the PostgreSQL backends of the writers' store (task scenarios; None when unknown)."""

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def writer_ms(self) -> float:
        """Writer CPU per append, in milliseconds."""
        return 1000 * self.writer_cpu / self.events

    @property
    def server_ms(self) -> float | None:
        """Server CPU per append (the writers' backends), in milliseconds, when known."""
        return None if self.server_cpu is None else 1000 * self.server_cpu / self.events

    @property
    def bench_ms(self) -> float:
        """This process's CPU per append (observers, and for tasks the appends too), in milliseconds."""
        return 1000 * self.bench_cpu / self.events


def _counts(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"not a comma-separated list of counts: {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"counts must be >= 1: {text!r}")
    return values


async def _observe(
    url: str, prefix: str, expected: int, run_writers: Any, check: bool
) -> tuple[float, float, float, Check, Check]:
    """Run the writers while a subscriber and a reader check what they see.

    Returns the seconds, the writers' CPU seconds (None: this process's), this process's CPU
    seconds, and what the subscriber and the reader saw.
    """
    subscribed, polled = Check(), Check()
    seconds, writer_cpu = 0.0, None
    async with open_store(url) as observer:
        await observer.head()
        start = _cpu()
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:

                async def subscribe() -> None:
                    async for event in observer.subscribe(stream_prefix=prefix):
                        subscribed.add(event)
                        if len(subscribed.seen) >= expected:
                            return

                async def poll() -> None:
                    while len(polled.seen) < expected:
                        async for event in observer.read_all(polled.last + 1, stream_prefix=prefix):
                            polled.add(event)
                        await anyio.sleep(0.01)

                async def write() -> None:
                    nonlocal seconds, writer_cpu
                    seconds, writer_cpu = await run_writers()

                if check:
                    tg.start_soon(subscribe)
                    tg.start_soon(poll)
                tg.start_soon(write)
        bench_cpu = _cpu() - start
        stored = [event.position async for event in observer.read_all(stream_prefix=prefix)]
    if len(stored) != expected or stored != sorted(set(stored)):
        raise SystemExit(f"{prefix}: {len(stored)} events stored, {expected} appended")
    return seconds, bench_cpu if writer_cpu is None else writer_cpu, bench_cpu, subscribed, polled


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _processes(url: str, prefix: str, writers: int, each: int) -> tuple[float, float]:
    """The seconds from the start signal to the last acknowledgement, and the writers' CPU seconds."""
    procs = []
    try:
        for w in range(writers):
            args = [sys.executable, "-c", _WRITER, url, f"{prefix}w{w}", str(each)]
            procs.append(await anyio.open_process(args))
        for proc in procs:
            if await _readline(proc) != b"ready":
                raise SystemExit("a writer process did not start")
        start = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            await proc.stdin.send(b"go\n")
        cpu = 0.0
        for proc in procs:
            done, _, used = (await _readline(proc)).partition(b" ")
            if done != b"done":
                raise SystemExit("a writer process did not finish")
            cpu += float(used)
        return time.perf_counter() - start, cpu
    finally:
        for proc in procs:
            await proc.wait()
            await proc.aclose()


async def _readline(proc: Any) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await proc.stdout.receive(1)
        if not chunk:
            err = b"".join([c async for c in proc.stderr]) if proc.stderr else b""
            raise SystemExit(f"a writer process exited early: {err.decode(errors='replace')[-2000:]}")
        buf += chunk
    return buf.strip()


async def _tasks(store: EventStore, prefix: str, tasks: int, each: int) -> tuple[float, None]:
    async def write(t: int) -> None:
        stream = f"{prefix}t{t}"
        for i in range(each):
            await store.append(stream, [NewEvent("bench.appended", {"s": stream, "i": i})])

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for t in range(tasks):
            tg.start_soon(write, t)
    return time.perf_counter() - start, None


class _ServerCpu:
    """The CPU time of the PostgreSQL backends whose ``application_name`` is ``name`` (``/proc``).

    A backend that starts during the run counts from zero; one that ends before ``stop`` is
    lost (the pool keeps the writers' connections open, so none should).
    """

    def __init__(self, url: str, name: str) -> None:
        self.dsn = url.split("?", 1)[0]
        self.name = name
        self.start: dict[int, float] = {}

    async def _pids(self) -> list[int]:
        import psycopg

        query = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            return [row[0] for row in await (await conn.execute(query, [self.name])).fetchall()]

    @staticmethod
    def _cpu(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    async def begin(self) -> None:
        self.start = {pid: cpu for pid in await self._pids() if (cpu := self._cpu(pid)) is not None}

    async def stop(self) -> float | None:
        used = [
            (cpu, self.start.get(pid, 0.0))
            for pid in await self._pids()
            if (cpu := self._cpu(pid)) is not None
        ]
        return sum(end - begin for end, begin in used) if used else None


async def _scenario(url: str, kind: str, writers: int, total: int, check: bool) -> Scenario:
    each = max(1, total // writers)
    expected = each * writers
    prefix = f"{kind}{writers}-{uuid.uuid4().hex[:6]}-"
    group_size: float | None = None
    server_cpu: float | None = None
    if kind == "procs":

        async def run_writers() -> tuple[float, float | None]:
            return await _processes(url, prefix, writers, each)

        seconds, writer_cpu, bench_cpu, subscribed, polled = await _observe(
            url, prefix, expected, run_writers, check
        )
    else:
        server: _ServerCpu | None = None
        store_url = url
        if url.startswith(("postgresql:", "postgres:")):
            name = f"turnlog-bench-{uuid.uuid4().hex[:8]}"
            store_url = url + ("&" if "?" in url else "?") + urlencode({"application_name": name})
            server = _ServerCpu(url, name)
        async with open_store(store_url) as store:
            await store.head()

            async def run_writers() -> tuple[float, float | None]:
                return await _tasks(store, prefix, writers, each)

            if server is not None:
                await server.begin()

            seconds, writer_cpu, bench_cpu, subscribed, polled = await _observe(
                url, prefix, expected, run_writers, check
            )
            if server is not None:
                server_cpu = await server.stop()
            group = getattr(store, "_group", None)
            if group is not None and group.groups:
                group_size = round(group.units / group.groups, 1)
    skipped = max(expected - len(subscribed.seen), 0) + max(expected - len(polled.seen), 0) if check else 0
    return Scenario(
        f"{kind}-{writers}",
        writers,
        expected,
        seconds,
        skipped,
        subscribed.duplicated + polled.duplicated,
        subscribed.out_of_order + polled.out_of_order,
        group_size,
        writer_cpu,
        bench_cpu,
        server_cpu,
    )


async def _backend(url: str, args: argparse.Namespace) -> list[Scenario]:
    results = []
    for writers in _counts(args.procs):
        results.append(await _scenario(url, "procs", writers, args.events, not args.no_check))
    for tasks in _counts(args.tasks):
        results.append(await _scenario(url, "tasks", tasks, args.events, not args.no_check))
    return results


def _pg_url(args: argparse.Namespace) -> tuple[str, str] | None:
    base = os.environ.get("TURNLOG_TEST_PG_DSN") if args.pg is None else args.pg
    if not base:
        return None
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    return base + ("&" if "?" in base else "?") + urlencode({"schema": schema}), schema


async def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(url.split("?", 1)[0], autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _run_all(args: argparse.Namespace, workdir: Path) -> dict[str, list[Scenario]]:
    backends = {name.strip() for name in args.backends.split(",")}
    results = {}
    if "sqlite" in backends:
        sqlite_url = f"sqlite:///{workdir / 'bench.db'}?durability={args.sqlite_durability}"
        results["sqlite"] = await _backend(sqlite_url, args)
    pg = _pg_url(args) if "postgresql" in backends else None
    if pg is not None:
        url, schema = pg
        try:
            results["postgresql"] = await _backend(url, args)
        finally:
            await _drop_schema(url, schema)
    return results


def _ratios(scenarios: list[Scenario]) -> dict[str, float]:
    by = {s.name: s.events_per_s for s in scenarios}
    ratios = {}
    for kind in ("procs", "tasks"):
        one = by.get(f"{kind}-1")
        if one is None:
            continue
        for s in scenarios:
            if s.name.startswith(f"{kind}-") and s.writers > 1:
                ratios[f"{kind}_{s.writers}_over_1"] = round(s.events_per_s / one, 2)
    return ratios


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


def run(args: argparse.Namespace) -> int:
    load_before = _loadavg()
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        results = anyio.run(_run_all, args, Path(tmp))
    load_after = _loadavg()
    report: dict[str, Any] = {
        "benchmark": "writers",
        "cpus": os.cpu_count(),
        "events_per_scenario": args.events,
        "sqlite_durability": args.sqlite_durability,
        "checked": not args.no_check,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "results": {},
    }
    for backend, scenarios in results.items():
        ratios = _ratios(scenarios)
        report["results"][backend] = {
            "scenarios": {
                s.name: {
                    "events": s.events,
                    "events_per_s": round(s.events_per_s),
                    "skipped": s.skipped,
                    "duplicated": s.duplicated,
                    "out_of_order": s.out_of_order,
                    "mean_group": s.group_size,
                    "writer_cpu_ms_per_append": round(s.writer_ms, 3),
                    "bench_cpu_ms_per_append": round(s.bench_ms, 3),
                    "server_cpu_ms_per_append": None if s.server_ms is None else round(s.server_ms, 3),
                }
                for s in scenarios
            },
            "ratios": ratios,
            "targets": {
                name: {"wanted": wanted, "got": ratios.get(name), "met": (ratios.get(name) or 0) >= wanted}
                for (target_backend, name), wanted in _TARGETS.items()
                if target_backend == backend and name in ratios
            },
        }
    if args.json:
        emit_json(report)
        return 0
    print(
        f"writers benchmark: {args.events} single-event appends per scenario, {os.cpu_count()} cpus, "
        f"SQLite durability={args.sqlite_durability}"
    )
    print(f"  load average before: {load_before}; after: {load_after}")
    for backend, figures in report["results"].items():
        print(f"  {backend}")
        for name, s in figures["scenarios"].items():
            group = "" if s["mean_group"] is None else f"  mean group {s['mean_group']:g}"
            checked = (
                f"skipped {s['skipped']}  duplicated {s['duplicated']}  out of order {s['out_of_order']}"
                if report["checked"]
                else "not checked"
            )
            server = s["server_cpu_ms_per_append"]
            print(
                f"    {name:<10} {s['events_per_s']:8,} events/s  {checked}{group}  "
                f"cpu/append: writers {s['writer_cpu_ms_per_append']:.3f} ms, "
                f"this process {s['bench_cpu_ms_per_append']:.3f} ms"
                + ("" if server is None else f", server {server:.3f} ms")
            )
        for name, value in figures["ratios"].items():
            target = figures["targets"].get(name)
            note = (
                ""
                if target is None
                else f"  (target >= {target['wanted']:g}x: {'met' if target['met'] else 'MISSED'})"
            )
            print(f"    {name:<18} {value:.2f}x{note}")
    if "postgresql" not in results and "postgresql" in args.backends:
        print("  postgresql  skipped: pass --pg URL or set TURNLOG_TEST_PG_DSN")
    return 0
