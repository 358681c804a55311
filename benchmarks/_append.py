"""``turnlog bench append``: append throughput of the store next to raw sqlite3 and eventsourcing.

Peers, each run on a fresh database in the same process run, at the same durability:

- ``ours single``: ``store.append(stream, [event], expected_version=v)``, one transaction per event;
- ``ours batch``: ``store.append(stream, events)`` with ``--batch`` events per transaction;
- ``raw sqlite3 single`` / ``batch``: the same rows (same table, same columns, the same canonical
  JSON bytes and the same SHA-256 chain, computed by the same functions) written by hand with
  the standard library: ``BEGIN IMMEDIATE``, one ``SELECT`` of the stream head, ``INSERT``,
  ``COMMIT``. It is the floor of what a correct appender has to do, so it is the reference;
- ``eventsourcing single`` / ``batch``: eventsourcing's ``SQLiteApplicationRecorder`` (it has
  global positions, like ours) storing the same data bytes, when eventsourcing is installed
  (``pip install turnlog[bench]``);
- ``raw psycopg single``, with ``--store postgresql://...``: raw async psycopg, one connection in
  autocommit, one statement per event that inserts the same row into the same table layout and
  notifies (``WITH ins AS (INSERT ... RETURNING position) SELECT pg_notify(...)``): the peer of
  the PostgreSQL targets (ours at least 0.9x its throughput, at most 0.25 ms of client CPU per
  append). On PostgreSQL every peer writes into a fresh scratch schema named after the URL's
  (``<schema>_bench_ours_<id>``, ``<schema>_bench_raw_<id>``), dropped after its run.

Every SQLite peer's figure includes closing its database, which checkpoints what its WAL
still holds: our store checkpoints on its worker thread after about 4 MiB of WAL, the others
inside a commit every 1,000 pages, and none may leave that work outside its figure.

Every peer's process CPU time per event (``time.process_time``) is printed beside its rate.
Each peer runs ``--repeat`` times, interleaved with the others; the best run is reported, since
on a shared machine noise only ever slows a run down (the advice of the ``timeit`` docs).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast
from uuid import UUID

import anyio

from turnlog.eventstore import EventStore, NewEvent, open_store, uuid7
from turnlog.eventstore._encoding import encode_json, event_hash
from turnlog.tools._command import emit_json

from . import _append_pg as _pg
from ._options import Durability, add_format, at_least, sqlite_url

__all__ = ["add_arguments", "run"]

TARGETS = {
    "single_vs_raw": 0.6,
    "single_vs_eventsourcing": 1.0,
    "batch_vs_raw": 0.6,
    "batch_vs_eventsourcing": 1.0,
}
PG_TARGETS = {
    "single_vs_psycopg": 0.9,  # ours single / raw psycopg single, events per second
    "single_cpu_ms": 0.25,  # our client CPU per single append, milliseconds
}
_STREAMS = 8  # single-event appends rotate over a few streams, as a busy conversation store does


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=None, help="store URL for our peers (default: a temporary SQLite file)"
    )
    parser.add_argument(
        "--durability",
        choices=("normal", "full"),
        default="normal",
        help="SQLite synchronous level for every SQLite peer (default: normal)",
    )
    parser.add_argument(
        "--single",
        type=at_least(1),
        default=None,
        help="single-event appends per run (default 3000; 1000 with --durability full, fsync-bound)",
    )
    parser.add_argument(
        "--batches", type=at_least(1), default=40, help="batched appends per run (default 40)"
    )
    parser.add_argument("--batch", type=at_least(1), default=1000, help="events per batch (default 1000)")
    parser.add_argument(
        "--repeat", type=at_least(1), default=5, help="runs per peer; the best is reported (default 5)"
    )
    add_format(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@dataclass(frozen=True, slots=True)
class Figure:
    """One peer's measurement: the best of its runs."""

    peer: str
    events: int
    seconds: float
    cpu_seconds: float

    @property
    def cpu_ms(self) -> float:
        """Process CPU time per event, in milliseconds (the best run's)."""
        return 1000 * self.cpu_seconds / self.events

    @property
    def rate(self) -> float:
        """Events per second."""
        return self.events / self.seconds if self.seconds > 0 else float("inf")


def _payload(i: int) -> dict[str, Any]:
    # About 300 bytes of canonical JSON: a chat message as the kernel records it.
    return {
        "message": {
            "kind": "Instruction",
            "id": f"msg-{i:08d}",
            "role": "user",
            "sender": "user",
            "recipient": "assistant",
            "content": {"instruction": f"Summarize item {i} of the report in two sentences, please."},
            "metadata": {},
            "created_at": "2026-01-01T00:00:00.000000Z",
        },
        "run_id": None,
    }


_META = {"actor": "bench", "session_id": "session-bench"}


# --- our store ------------------------------------------------------------------------------


def _our_url(args: argparse.Namespace, workdir: Path, run_id: str) -> str:
    if args.store:
        return str(args.store)
    return sqlite_url(workdir / f"ours-{run_id}.db", args.format)


def _open_ours(url: str, durability: Durability) -> EventStore:
    if url.startswith("sqlite"):
        return open_store(url, durability=durability)
    return open_store(url)


async def _ours_single(url: str, durability: Durability, n: int, prefix: str) -> tuple[float, float]:
    streams = [f"{prefix}-single-{k}" for k in range(_STREAMS)]
    versions = [0] * _STREAMS
    async with _open_ours(url, durability) as store:
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            k = i % _STREAMS
            result = await store.append(
                streams[k], [NewEvent("message.added", _payload(i), _META)], expected_version=versions[k]
            )
            versions[k] = result.version
    # The close is timed, in every SQLite peer: it checkpoints what the WAL still holds, work
    # a peer must not leave out of its figure by deferring it (ours checkpoints off the loop,
    # the others inside a commit, every 1,000 pages).
    return time.perf_counter() - start, time.process_time() - cpu


async def _ours_batch(
    url: str, durability: Durability, batches: int, size: int, prefix: str
) -> tuple[float, float]:
    async with _open_ours(url, durability) as store:
        elapsed = cpu = 0.0
        for b in range(batches):
            # Building the events is the caller's work in every peer; it is not timed.
            events = [NewEvent("message.added", _payload(i), _META) for i in range(size)]
            start, started_cpu = time.perf_counter(), time.process_time()
            await store.append(f"{prefix}-batch-{b}", events, expected_version=0)
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - started_cpu
        start, started_cpu = time.perf_counter(), time.process_time()
    return elapsed + time.perf_counter() - start, cpu + time.process_time() - started_cpu


# --- raw sqlite3 ------------------------------------------------------------------------------


def _raw_connect(path: Path, durability: str, schema: list[str]) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={durability.upper()}")
    conn.execute("PRAGMA busy_timeout=5000")
    for statement in schema:
        conn.execute(statement)
    return conn


_RAW_HEAD = "SELECT version, hash FROM events WHERE stream = ? ORDER BY version DESC LIMIT 1"
_RAW_INSERT = (
    "INSERT INTO events (id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _raw_rows(
    stream: str, version: int, prev: str, events: list[tuple[UUID, dict[str, Any]]]
) -> list[tuple[Any, ...]]:
    rows = []
    now = to_micros_now()  # one timestamp per transaction, as the store records it
    for uuid_, payload in events:
        eid = str(uuid_)
        version += 1
        data = encode_json(payload)
        meta = encode_json(_META)
        digest = event_hash(prev, eid, stream, version, "message.added", 1, data, meta, now)
        rows.append((eid, stream, version, "message.added", 1, data, meta, now, prev, digest))
        prev = digest
    return rows


def to_micros_now() -> int:
    """The current UTC time in microseconds, as the store records it."""
    return time.time_ns() // 1000


def _raw_append(conn: sqlite3.Connection, stream: str, events: list[tuple[UUID, dict[str, Any]]]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        head = conn.execute(_RAW_HEAD, (stream,)).fetchone()
        version, prev = (head[0], head[1]) if head else (0, "")
        rows = _raw_rows(stream, version, prev, events)
        if len(rows) == 1:
            conn.execute(_RAW_INSERT, rows[0])
        else:
            conn.executemany(_RAW_INSERT, rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _raw_single(path: Path, durability: str, schema: list[str], n: int, prefix: str) -> tuple[float, float]:
    conn = _raw_connect(path, durability, schema)
    try:
        streams = [f"{prefix}-single-{k}" for k in range(_STREAMS)]
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            _raw_append(conn, streams[i % _STREAMS], [(uuid7(), _payload(i))])
    finally:
        conn.close()
    return time.perf_counter() - start, time.process_time() - cpu


def _raw_batch(
    path: Path, durability: str, schema: list[str], batches: int, size: int, prefix: str
) -> tuple[float, float]:
    conn = _raw_connect(path, durability, schema)
    try:
        elapsed = cpu = 0.0
        for b in range(batches):
            events = [(uuid7(), _payload(i)) for i in range(size)]
            start, started_cpu = time.perf_counter(), time.process_time()
            _raw_append(conn, f"{prefix}-batch-{b}", events)
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - started_cpu
        start, started_cpu = time.perf_counter(), time.process_time()
    finally:
        conn.close()
    return elapsed + time.perf_counter() - start, cpu + time.process_time() - started_cpu


# --- eventsourcing ------------------------------------------------------------------------------


def _eventsourcing() -> tuple[ModuleType, ModuleType] | None:
    try:
        from eventsourcing import persistence, sqlite
    except ImportError:
        return None
    return persistence, sqlite


def _es_recorder(path: Path, durability: str) -> Any:
    es = _eventsourcing()
    assert es is not None
    _, sqlite_mod = es
    datastore = sqlite_mod.SQLiteDatastore(str(path), originator_id_type="text")
    pool = datastore.pool
    create = pool._create_connection

    def create_at_our_durability() -> Any:
        # eventsourcing leaves `synchronous` at SQLite's default (FULL); set it like the others.
        conn = create()
        conn._sqlite_conn.execute(f"PRAGMA synchronous={durability.upper()}")
        return conn

    pool._create_connection = create_at_our_durability
    recorder = sqlite_mod.SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    return datastore, recorder


def _es_single(path: Path, durability: str, n: int, prefix: str) -> tuple[float, float]:
    es = _eventsourcing()
    assert es is not None
    persistence, _ = es
    datastore, recorder = _es_recorder(path, durability)
    try:
        streams = [f"{prefix}-single-{k}" for k in range(_STREAMS)]
        versions = [0] * _STREAMS
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            k = i % _STREAMS
            versions[k] += 1
            state = encode_json(_payload(i))
            recorder.insert_events([persistence.StoredEvent(streams[k], versions[k], "message.added", state)])
    finally:
        datastore.close()
    return time.perf_counter() - start, time.process_time() - cpu


def _es_batch(path: Path, durability: str, batches: int, size: int, prefix: str) -> tuple[float, float]:
    es = _eventsourcing()
    assert es is not None
    persistence, _ = es
    datastore, recorder = _es_recorder(path, durability)
    try:
        elapsed = cpu = 0.0
        for b in range(batches):
            stream = f"{prefix}-batch-{b}"
            payloads = [_payload(v) for v in range(size)]
            start, started_cpu = time.perf_counter(), time.process_time()
            # Serialising is part of the append in every peer (ours encodes inside append).
            events = [
                persistence.StoredEvent(stream, v + 1, "message.added", encode_json(payloads[v]))
                for v in range(size)
            ]
            recorder.insert_events(events)
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - started_cpu
        start, started_cpu = time.perf_counter(), time.process_time()
    finally:
        datastore.close()
    return elapsed + time.perf_counter() - start, cpu + time.process_time() - started_cpu


# --- the run ------------------------------------------------------------------------------------


def _schema_of_our_store(workdir: Path) -> list[str]:
    """The DDL of our SQLite store's events table and its indexes, so raw rows match exactly."""
    path = workdir / "schema-source.db"

    async def make() -> None:
        async with open_store(f"sqlite:///{path}"):
            pass

    anyio.run(make)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'events' AND sql IS NOT NULL "
            "ORDER BY type = 'index', name"
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows]


def _single_count(args: argparse.Namespace) -> int:
    if args.single is not None:
        return int(args.single)
    return 1000 if args.durability == "full" else 3000


def _is_postgres(args: argparse.Namespace) -> bool:
    return bool(args.store) and str(args.store).startswith(("postgresql:", "postgres:"))


def _measure(args: argparse.Namespace, workdir: Path) -> tuple[list[Figure], bool]:
    schema = _schema_of_our_store(workdir)
    have_es = _eventsourcing() is not None
    postgres = _is_postgres(args)
    n = _single_count(args)
    batches, size, dur = args.batches, args.batch, args.durability
    runs: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, int] = {}

    def add(peer: str, events: int, fn: Callable[[str, str], tuple[float, float]]) -> None:
        run_id = uuid.uuid4().hex[:8]
        runs.setdefault(peer, []).append(fn(run_id, f"bench-{run_id}"))
        counts[peer] = events

    def ours_url(run_id: str) -> str:
        return _pg.scratch_url(args.store, f"ours_{run_id}") if postgres else _our_url(args, workdir, run_id)

    def on_postgres(url: str, peer: Callable[[str], Any]) -> tuple[float, float]:
        # Every PostgreSQL peer writes into a fresh scratch schema of our layout, dropped after.
        try:
            anyio.run(_pg.make_schema, url)
            return cast(tuple[float, float], anyio.run(peer, url))
        finally:
            anyio.run(_pg.drop_schema, url)

    def ours_single(r: str, p: str) -> tuple[float, float]:
        if postgres:
            return on_postgres(ours_url(r), lambda url: _ours_single(url, dur, n, p))
        return anyio.run(_ours_single, ours_url(r), dur, n, p)

    def ours_batch(r: str, p: str) -> tuple[float, float]:
        if postgres:
            return on_postgres(ours_url(r), lambda url: _ours_batch(url, dur, batches, size, p))
        return anyio.run(_ours_batch, ours_url(r), dur, batches, size, p)

    def psycopg_single(r: str, p: str) -> tuple[float, float]:
        streams = [f"{p}-single-{k}" for k in range(_STREAMS)]
        return on_postgres(
            _pg.scratch_url(args.store, f"raw_{r}"),
            lambda url: _pg.raw_psycopg_single(url, n, streams, _payload, _META),
        )

    for _ in range(max(1, args.repeat)):
        add("ours single", n, ours_single)
        if postgres:
            add("raw psycopg single", n, psycopg_single)
        add("raw sqlite3 single", n, lambda r, p: _raw_single(workdir / f"raw-{r}.db", dur, schema, n, p))
        if have_es:
            add("eventsourcing single", n, lambda r, p: _es_single(workdir / f"es-{r}.db", dur, n, p))
        add("ours batch", batches * size, ours_batch)
        add(
            "raw sqlite3 batch",
            batches * size,
            lambda r, p: _raw_batch(workdir / f"raw-{r}.db", dur, schema, batches, size, p),
        )
        if have_es:
            add(
                "eventsourcing batch",
                batches * size,
                lambda r, p: _es_batch(workdir / f"es-{r}.db", dur, batches, size, p),
            )
        for leftover in workdir.glob("*-*.db*"):
            leftover.unlink()
    figures = [
        Figure(peer, counts[peer], min(t[0] for t in times), min(t[1] for t in times))
        for peer, times in runs.items()
    ]
    return figures, have_es


def _ratios(by_peer: dict[str, Figure]) -> dict[str, float | None]:
    def ratio(a: str, b: str) -> float | None:
        if a in by_peer and b in by_peer:
            return round(by_peer[a].rate / by_peer[b].rate, 3)
        return None

    return {
        "single_vs_raw": ratio("ours single", "raw sqlite3 single"),
        "single_vs_eventsourcing": ratio("ours single", "eventsourcing single"),
        "batch_vs_raw": ratio("ours batch", "raw sqlite3 batch"),
        "batch_vs_eventsourcing": ratio("ours batch", "eventsourcing batch"),
        "single_vs_psycopg": ratio("ours single", "raw psycopg single"),
    }


def _targets(by_peer: dict[str, Figure], ratios: dict[str, float | None], store: str) -> list[dict[str, Any]]:
    """Each target of this store's run: its name, goal, direction, the value measured and whether met."""
    if store.startswith("sqlite"):
        goals = [(name, goal, ">=", ratios[name]) for name, goal in TARGETS.items()]
    elif "raw psycopg single" in by_peer:
        cpu = round(by_peer["ours single"].cpu_ms, 3)
        goals = [
            ("single_vs_psycopg", PG_TARGETS["single_vs_psycopg"], ">=", ratios["single_vs_psycopg"]),
            ("single_cpu_ms", PG_TARGETS["single_cpu_ms"], "<=", cpu),
        ]
    else:
        goals = []
    return [
        {
            "name": name,
            "target": goal,
            "direction": direction,
            "value": value,
            "met": None if value is None else (value >= goal if direction == ">=" else value <= goal),
        }
        for name, goal, direction, value in goals
    ]


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
        workdir = Path(tmp)
        figures, have_es = _measure(args, workdir)
    by_peer = {f.peer: f for f in figures}
    ratios = _ratios(by_peer)
    store = "sqlite (temporary file)" if not args.store else str(args.store).split("://", 1)[0]
    # The SQLite targets are set for the SQLite backend, the PostgreSQL ones against raw psycopg.
    targets = _targets(by_peer, ratios, store)
    if args.json:
        emit_json(
            {
                "benchmark": "append",
                "store": store,
                "durability": args.durability,
                "cpus": os.cpu_count(),
                "sqlite_version": sqlite3.sqlite_version,
                "sizes": {
                    "single": _single_count(args),
                    "batches": args.batches,
                    "batch": args.batch,
                    "repeat": args.repeat,
                },
                "eventsourcing": have_es,
                "results": {
                    f.peer: {
                        "events": f.events,
                        "seconds": round(f.seconds, 4),
                        "events_per_s": round(f.rate),
                        "cpu_ms_per_event": round(f.cpu_ms, 4),
                    }
                    for f in figures
                },
                "ratios": ratios,
                "targets": {
                    t["name"]: {
                        "target": t["target"],
                        "direction": t["direction"],
                        "value": t["value"],
                        "met": t["met"],
                    }
                    for t in targets
                },
            }
        )
        return 0
    print(
        f"append benchmark: our store = {store}, SQLite durability = {args.durability}, "
        f"{os.cpu_count()} cpus, SQLite {sqlite3.sqlite_version}, best of {args.repeat} runs"
    )
    for f in figures:
        print(
            f"  {f.peer:<22} {f.rate:>12,.0f} events/s   ({f.events} events in {f.seconds:.3f} s)"
            f"   client CPU {f.cpu_ms:.3f} ms/event"
        )
    if not have_es:
        print("  eventsourcing          not installed (pip install 'turnlog[bench]')")
    print("ratios (higher is better for ours):")
    for name, value in ratios.items():
        if value is not None:
            print(f"  {name:<24} {value:.2f}x")
    print("targets:" if targets else "targets: none for this store")
    for t in targets:
        value, goal, direction = t["value"], t["target"], t["direction"]
        shown = "n/a" if value is None else f"{value:.3g}"
        verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "NOT met")
        print(f"  {t['name']:<24} {shown} (target {direction} {goal}): {verdict}")
    return 0
