"""The analytics projection: fact tables kept next to the log, updated exactly once.

``update`` reads the log as stored rows with ``store.raw_events(types=...)`` when the store
declares the ``raw_copy`` capability (a SQLite file, PostgreSQL) and decodes them itself,
else with ``store.read_all``; ``follow`` then takes live events from ``store.subscribe``.
The projection writes the fact tables of ``_facts`` into a SQLite database: by default the
store's own file (through a connection of its own), else a separate analytics database
given as ``database=``. Each batch of facts and the checkpoint (the last position applied,
row ``analytics`` of the ``tracking`` table) are written in ONE transaction, so a crash at
any moment leaves facts and checkpoint agreeing: nothing is counted twice, nothing skipped.

Example::

    async with open_store("sqlite:///turnlog.db") as store:
        async with AnalyticsProjection(store) as analytics:
            await analytics.update()  # only the events after the checkpoint
            for row in await analytics.usage(by="model"):
                print(row.key, row.calls, row.cost_usd, row.latency_ms.p95)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import anyio
import anyio.to_thread

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore, RawCopy, RecordedEvent
from turnlog.projections._catalogue import CATALOGUE, decode_event

from . import _queries as q
from ._batch import Batch, StoredEvent
from ._database import reprice, transaction, wal_backlog
from ._errors import AnalyticsDatabaseError
from ._facts import (
    FACT_TABLES,
    MODEL_CALLS,
    RELEVANT_TYPES,
    RUNS,
    TOOL_CALLS,
    FactEvent,
    FactTable,
    RunEnd,
    RunStart,
    priced,
)
from ._pricing import PriceTable
from ._rollup import (
    RANK_INDEXES,
    ROLLUPS,
    add_facts_to_rollups,
    create_rank_indexes,
    drop_rank_indexes,
    rebuild_rollups,
    register_functions,
)

__all__ = ["CONSUMER", "SCHEMA_VERSION", "AnalyticsProjection", "UpdateReport", "analytics_database_of"]

CONSUMER = "analytics"
"""The projection's row in the ``tracking`` table."""

SCHEMA_VERSION = 3
"""Version of the fact tables' layout; a database with another version is rebuilt."""

_T = TypeVar("_T")
# A long update lets the WAL grow to this before copying it into the database; a finished
# one leaves at most this much behind. Few large checkpoints cost far less than many small.
_WAL_DURING_UPDATE = 256 * 1024 * 1024
_WAL_AFTER_UPDATE = 64 * 1024 * 1024
_CACHE_KIB = 64 * 1024
# Events per transaction while catching up (batch_size=None): the first, and the most.
_FIRST_BATCH = 5000
_LARGEST_BATCH = 50_000
# Stored events per raw read (the store's own page size, read inline on its connection).
_RAW_PAGE = 500
_BRANCHES = "analytics_branches"
_META = "analytics_meta"


@dataclass(frozen=True, slots=True)
class UpdateReport:
    """What one ``update`` (or ``rebuild``) did.

    Attributes:
        from_position: The checkpoint before the update.
        to_position: The checkpoint after it.
        events: Events read and applied (only the types analytics uses are read).
        model_calls: Model-call facts added.
        tool_calls: Tool-call facts added.
        runs: Run facts added or closed.
        seconds: Wall time of the update.
    """

    from_position: int
    to_position: int
    events: int
    model_calls: int
    tool_calls: int
    runs: int
    seconds: float


def analytics_database_of(store: EventStore) -> Path:
    """The file that keeps analytics for ``store``: the store's own SQLite file.

    Raises:
        AnalyticsDatabaseError: the store is not a SQLite file (in memory, or another
            backend); pass ``database=`` to ``AnalyticsProjection`` then.
    """
    path = getattr(store, "path", None)
    if path is None or str(path) in ("", ":memory:") or str(path).startswith("file::memory:"):
        raise AnalyticsDatabaseError(
            f"the store {getattr(store, 'url', store)!r} has no database file to keep analytics in; "
            "give the projection a separate analytics database (database=PATH, or --analytics-db PATH)"
        )
    return Path(path)


def _create_sql(table: FactTable) -> str:
    types = {"int": "INTEGER", "float": "REAL", "text": "TEXT", "bool": "INTEGER"}
    cols = []
    for column in table.columns:
        decl = f"{column.sql} {types[column.kind]}"
        if column.name == table.key:
            decl += " PRIMARY KEY"
        cols.append(decl)
    return f"CREATE TABLE IF NOT EXISTS {table.name} ({', '.join(cols)})"


def _insert_sql(table: FactTable, verb: str = "INSERT") -> str:
    names = ", ".join(c.sql for c in table.columns)
    marks = ", ".join("?" * len(table.columns))
    return f"{verb} INTO {table.name} ({names}) VALUES ({marks})"


_RUN_INDEX = {name: i for i, name in enumerate(RUNS.column_names)}
_RUN_MODEL = _RUN_INDEX["gen_ai.request.model"]
_RUN_ENDED = _RUN_INDEX["ended_at"]
_RUN_VERB = _RUN_INDEX["turnlog.verb"]
_RUN_STATUS = _RUN_INDEX["turnlog.status"]
_RUN_COST = _RUN_INDEX["turnlog.cost_usd"]
_RUN_TOKENS_IN = _RUN_INDEX["gen_ai.usage.input_tokens"]
assert RUNS.column_names[_RUN_STATUS:_RUN_COST + 2] == (
    "turnlog.status", "turnlog.reason", "error.type", "gen_ai.client.operation.duration", "turnlog.chunks",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "turnlog.cost_usd", "turnlog.cost_source",
)  # fmt: skip


class _Stale(Exception):
    """The checkpoint moved under us (another process applied the batch first)."""


class AnalyticsProjection:
    """Fact tables over one store, updated incrementally and exactly once.

    Args:
        store: The event store to read.
        database: Where to keep the fact tables; by default the store's SQLite file. Give a
            path (or ``":memory:"``) for a store without a file, e.g. PostgreSQL.
        prices: The price table for costs (``PriceTable()`` defaults when None). When it
            differs from the table the stored facts were priced with, ``update`` re-prices
            every fact whose cost was not reported by the provider.
        batch_size: Events applied per transaction. By default (None) a catch-up starts
            with transactions of 5,000 events and doubles them up to 50,000 while it goes on:
            a short update stays one small transaction, and a long one (a rebuild) rewrites
            the rollup pages it touches in every batch a few times instead of hundreds.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        database: str | Path | None = None,
        prices: PriceTable | None = None,
        batch_size: int | None = None,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, not {batch_size}")
        self.store = store
        self.database = str(database) if database is not None else str(analytics_database_of(store))
        self.prices = prices if prices is not None else PriceTable()
        self.batch_size = batch_size
        self._conn: sqlite3.Connection | None = None
        self._sessions: dict[str, str | None] = {}
        # The checkpoint the session map is complete for (None: unknown, read it again).
        self._synced_at: int | None = None
        self._lock = anyio.Lock()
        self._ranks_ready = False
        self._expected_schema = {name: CATALOGUE.get(name) for name in RELEVANT_TYPES}
        self._versions = {
            name: s.schema_version for name, s in self._expected_schema.items() if s is not None
        }

    # ----------------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the database and create (or migrate) the fact tables. Idempotent."""
        if self._conn is None:
            await self._in_thread(self._open)

    async def close(self) -> None:
        """Close the database connection. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _open(self) -> None:
        try:
            conn = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False, timeout=60)
        except sqlite3.Error as exc:
            raise AnalyticsDatabaseError(
                f"cannot open {self.database!r}: {exc}", database=self.database
            ) from exc
        try:
            if self.database != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            # A lost tail after a power cut loses facts AND their checkpoint together.
            conn.execute("PRAGMA synchronous=NORMAL")
            # No automatic checkpoint inside our commits (each one syncs the whole file and
            # stalls the batch); _checkpoint_wal runs one, passively, when the WAL grows large.
            conn.execute("PRAGMA wal_autocheckpoint=0")
            # The WAL file keeps its largest size after a checkpoint; when this connection
            # starts it over, cut it back rather than leave hundreds of MiB on disk.
            conn.execute(f"PRAGMA journal_size_limit={_WAL_AFTER_UPDATE}")
            # The rollups and rank indexes take writes all over their pages; SQLite's default
            # 2 MiB cache would read most pages back from the OS in every batch. The cache
            # grows only as pages are used, and only this connection's.
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            register_functions(conn)
            self._conn = conn
            self._migrate()
            present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            self._ranks_ready = all(name in present for name, *_ in RANK_INDEXES)
        except BaseException:
            self._conn = None
            conn.close()
            raise

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise AnalyticsDatabaseError("the analytics projection is not open", database=self.database)
        return self._conn

    def _migrate(self) -> None:
        conn = self._db()
        with transaction(conn):
            conn.execute(f"CREATE TABLE IF NOT EXISTS {_META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tracking (consumer TEXT PRIMARY KEY, position INTEGER NOT NULL)"
            )
            row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) != SCHEMA_VERSION:
                # Read models are disposable: an old layout is dropped and rebuilt from the log.
                for table in (*FACT_TABLES, *ROLLUPS, _BRANCHES):
                    conn.execute(f"DROP TABLE IF EXISTS {getattr(table, 'name', table)}")
                conn.execute("DELETE FROM tracking WHERE consumer = ?", (CONSUMER,))
                conn.execute(f"DELETE FROM {_META} WHERE key = 'prices'")
            for table in FACT_TABLES:
                conn.execute(_create_sql(table))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_BRANCHES} (branch_id TEXT PRIMARY KEY, session_id TEXT)"
            )
            for rollup in ROLLUPS:
                conn.execute(rollup.create_sql())
            for table in (MODEL_CALLS, TOOL_CALLS):
                conn.execute(f"CREATE INDEX IF NOT EXISTS {table.name}_time ON {table.name} (recorded_at)")
            conn.execute(
                f'CREATE INDEX IF NOT EXISTS {MODEL_CALLS.name}_errors ON {MODEL_CALLS.name} ("error.type") '
                "WHERE \"turnlog.status\" = 'error'"
            )
            conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    def _sync(self) -> int:
        """The checkpoint, with the branch-to-session map as of that checkpoint.

        Another process may have applied batches (and learnt branches) since this one last
        committed; facts taken after its checkpoint must see its branches. Both are read in
        one read transaction, so the map is never older than the checkpoint it goes with.
        """
        conn = self._db()
        conn.execute("BEGIN")
        try:
            position = self._checkpoint()
            if position != self._synced_at:
                rows = conn.execute(f"SELECT branch_id, session_id FROM {_BRANCHES}").fetchall()
                self._sessions = dict(rows)
                self._synced_at = position
        finally:
            conn.execute("COMMIT")
        return position

    async def _in_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        # sqlite3 blocks; keep it off the event loop. Its errors are translated here, once.
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except sqlite3.Error as exc:
            raise AnalyticsDatabaseError(f"{self.database}: {exc}", database=self.database) from exc

    # ------------------------------------------------------------------------------ checkpoint

    async def checkpoint(self) -> int:
        """The last global position applied (0 before the first update)."""
        await self.open()
        return await self._in_thread(self._checkpoint)

    def _checkpoint(self) -> int:
        row = self._db().execute("SELECT position FROM tracking WHERE consumer = ?", (CONSUMER,)).fetchone()
        return 0 if row is None else int(row[0])

    # ---------------------------------------------------------------------------------- update

    async def update(self) -> UpdateReport:
        """Apply every event after the checkpoint, in batches, each with its checkpoint.

        Safe to run from several processes at once: a batch another process applied first
        is detected inside the transaction and not applied again.
        """
        await self.open()
        async with self._lock:
            started = time.perf_counter()
            start = await self._in_thread(self._prepare)
            counts = [0, 0, 0, 0]
            position = start
            while True:
                try:
                    position = await self._catch_up(position, counts)
                    break
                except _Stale:
                    position = await self._in_thread(self._sync)
            if not self._ranks_ready:
                await self._in_thread(self._finish)
            if position > start:
                await self._in_thread(self._checkpoint_wal, _WAL_AFTER_UPDATE)
            return UpdateReport(start, position, *counts, seconds=time.perf_counter() - started)

    async def _catch_up(self, position: int, counts: list[int]) -> int:
        head = await self.store.head()
        if head <= position:
            return position
        # Each event becomes its facts as soon as it is read, and only the facts are kept
        # until the batch is written: an event is garbage the moment it is read, so the
        # collector never walks a batch of decoded payloads.
        batch = Batch(self)
        size = self.batch_size or _FIRST_BATCH
        seen = position
        raw = self._raw_reader()
        if raw is not None:
            # Stored rows of our types, decoded here (data and meta only): less than half of
            # what read_all costs per event, which also parses the id and builds the event.
            while True:
                page = await raw.raw_events(seen, _RAW_PAGE, types=RELEVANT_TYPES, to_position=head)
                add = batch.add_stored
                for stored in page:
                    add(stored)
                    if batch.events >= size:
                        position = await self._apply(batch, position, stored.position, counts)
                        batch = Batch(self)
                        add = batch.add_stored
                        size = self._next_size(size)
                if page:
                    seen = page[-1].position
                if len(page) < _RAW_PAGE:
                    break
        else:
            take = batch.add
            async for event in self.store.read_all(position + 1, head, types=RELEVANT_TYPES):
                take(event)
                seen = event.position
                if batch.events >= size:
                    position = await self._apply(batch, position, seen, counts)
                    batch = Batch(self)
                    take = batch.add
                    size = self._next_size(size)
        # Every event up to the head read at the start is committed and was delivered when
        # positions are gapless; otherwise only what was seen is safe to checkpoint.
        if "gapless_positions" in self.store.capabilities:
            last = head
        else:
            last = seen if batch.events else position
        if last > position:
            position = await self._apply(batch, position, last, counts)
        return position

    def _next_size(self, size: int) -> int:
        """The size of the transaction after one of ``size`` events (see ``batch_size``)."""
        return size if self.batch_size is not None else min(2 * size, _LARGEST_BATCH)

    def _raw_reader(self) -> RawCopy | None:
        """The store as a raw reader when it offers ``raw_events``, else None (read ``read_all``)."""
        return cast(RawCopy, self.store) if "raw_copy" in self.store.capabilities else None

    async def _apply(self, batch: Batch, expected: int, last: int, counts: list[int]) -> int:
        added = await self._in_thread(self._apply_batch, batch, expected, last, _WAL_DURING_UPDATE)
        for i, n in enumerate(added):
            counts[i] += n
        return last

    def _prepare(self) -> int:
        # One hop to the thread for both: each hop waits for a scheduler slot on a busy machine.
        self._reprice_if_needed()
        return self._sync()

    def _finish(self) -> None:
        conn = self._db()
        if self._ranks_ready:
            return
        with transaction(conn):
            create_rank_indexes(conn)
        self._ranks_ready = True

    async def rebuild(self) -> UpdateReport:
        """Drop every fact and build the tables again from the whole log."""
        await self.open()
        async with self._lock:
            await self._in_thread(self._clear)
        return await self.update()

    def _clear(self) -> None:
        conn = self._db()
        with transaction(conn):
            for table in (*FACT_TABLES, *ROLLUPS):
                conn.execute(f"DELETE FROM {table.name}")
            conn.execute(f"DELETE FROM {_BRANCHES}")
            # Built again in one sort each when the rebuild is done (see _finish).
            drop_rank_indexes(conn)
            conn.execute("DELETE FROM tracking WHERE consumer = ?", (CONSUMER,))
            conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('prices', ?)",
                (self.prices.fingerprint(),),
            )
        self._sessions = {}
        self._synced_at = None
        self._ranks_ready = False

    async def follow(self, *, on_batch: Callable[[UpdateReport], Any] | None = None) -> None:
        """Catch up, then apply live events as they are appended, until cancelled.

        Events that arrive together are applied in one transaction. ``on_batch`` is called
        after each commit with what it applied.
        """
        report = await self.update()
        if on_batch is not None:
            on_batch(report)
        most = self.batch_size or _FIRST_BATCH
        send, receive = anyio.create_memory_object_stream[RecordedEvent](most)

        async def pump() -> None:
            async with send:
                subscription = self.store.subscribe(report.to_position + 1, types=RELEVANT_TYPES)
                try:
                    async for event in subscription:
                        await send.send(event)
                finally:
                    await _aclose(subscription)

        applied_to = report.to_position
        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(pump)
            async for first in receive:
                batch = [first]
                while len(batch) < most:
                    try:
                        batch.append(receive.receive_nowait())
                    except anyio.WouldBlock:
                        break
                batch = [event for event in batch if event.position > applied_to]
                if not batch:
                    continue
                report = await self._follow_batch(batch, applied_to)
                applied_to = report.to_position
                if on_batch is not None and report.events:
                    on_batch(report)

    async def _follow_batch(self, batch: list[RecordedEvent], applied_to: int) -> UpdateReport:
        async with self._lock:
            started = time.perf_counter()
            expected = await self._in_thread(self._sync)
            if expected == applied_to:
                counts = [0, 0, 0, 0]
                try:
                    await self._apply(Batch(self, batch), expected, batch[-1].position, counts)
                    return UpdateReport(expected, batch[-1].position, *counts, time.perf_counter() - started)
                except _Stale:
                    pass
        # Another process moved the checkpoint (it applied these, or rebuilt from scratch):
        # catch up from wherever it is now with read_all, never from the live batch alone.
        return await self.update()

    # ----------------------------------------------------------------------------- the batch

    def _lifted(self, event: FactEvent) -> FactEvent:
        schema = self._expected_schema.get(event.type)
        if schema is None or event.schema == schema.schema_version:
            return event
        # An older payload the store did not upcast: lift it through the catalogue.
        data = decode_event(cast(RecordedEvent, event)).model_dump(mode="json")
        return StoredEvent(
            event.stream, event.version, event.position, event.type, schema.schema_version,
            data, event.meta, event.recorded_at,
        )  # fmt: skip

    def _apply_batch(
        self, batch: Batch, expected: int, last: int, wal_limit: int | None = None
    ) -> tuple[int, int, int, int]:
        conn = self._db()
        try:
            with transaction(conn):
                # The batch's facts were taken with the session map as of ``expected``.
                if self._checkpoint() != expected or self._synced_at != expected:
                    raise _Stale
                counts = self._write_facts(conn, batch)
                conn.execute(
                    "INSERT INTO tracking (consumer, position) VALUES (?, ?) "
                    "ON CONFLICT (consumer) DO UPDATE SET position = excluded.position",
                    (CONSUMER, last),
                )
        except BaseException:
            # Another process may have applied batches (and their branches) meanwhile:
            # the next _sync reads the map again with the checkpoint.
            self._synced_at = None
            raise
        # Only a committed batch's branches join the session map.
        self._sessions.update(batch.branches)
        self._synced_at = last
        if wal_limit is not None:
            self._checkpoint_wal(wal_limit)
        return (batch.events, *counts)

    def _checkpoint_wal(self, limit: int) -> None:
        """Copy the WAL into the database (PASSIVE: never waits for readers) once its backlog passes ``limit`` bytes."""
        if self.database == ":memory:":
            return
        if wal_backlog(self.database) > limit:
            self._db().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _write_facts(self, conn: sqlite3.Connection, batch: Batch) -> tuple[int, int, int]:
        runs: dict[str, list[Any]] = {}
        for item in batch.runs:
            if item.__class__ is RunStart:
                runs[item.run_id] = list(item.row)
            else:
                self._close_run(conn, runs, item)
        model_rows, tool_rows, branches = batch.model_rows, batch.tool_rows, batch.branches
        if model_rows:
            conn.executemany(_insert_sql(MODEL_CALLS), model_rows)
        if tool_rows:
            conn.executemany(_insert_sql(TOOL_CALLS), tool_rows)
        if runs:
            conn.executemany(_insert_sql(RUNS, "INSERT OR REPLACE"), runs.values())
        if branches:
            conn.executemany(f"INSERT OR REPLACE INTO {_BRANCHES} VALUES (?, ?)", branches.items())
        add_facts_to_rollups(conn, model_rows, tool_rows)
        return len(model_rows), len(tool_rows), len(runs)

    def _close_run(self, conn: sqlite3.Connection, runs: dict[str, list[Any]], end: RunEnd) -> None:
        row = runs.get(end.run_id)
        if row is None:
            found = conn.execute(
                f"SELECT * FROM {RUNS.name} WHERE {RUNS.columns[0].sql} = ?", (end.run_id,)
            ).fetchone()
            row = list(found) if found is not None else list(end.row)
            runs[end.run_id] = row
        closing = end.row
        row[_RUN_ENDED] = closing[_RUN_ENDED]
        row[_RUN_VERB] = row[_RUN_VERB] or closing[_RUN_VERB]
        # The closing facts (status .. output tokens) sit side by side in RUNS.
        row[_RUN_STATUS:_RUN_COST] = closing[_RUN_STATUS:_RUN_COST]
        row[_RUN_COST : _RUN_COST + 2] = priced(
            self.prices, row[_RUN_MODEL], row[_RUN_TOKENS_IN], row[_RUN_TOKENS_IN + 1], end.reported_cost
        )

    # ------------------------------------------------------------------------------- pricing

    def _reprice_if_needed(self) -> None:
        conn = self._db()
        fingerprint = self.prices.fingerprint()
        row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'prices'").fetchone()
        if row is not None and row[0] == fingerprint:
            return
        with transaction(conn):
            for table in (MODEL_CALLS, RUNS):
                reprice(conn, table, self.prices)
            rebuild_rollups(conn)
            conn.execute(f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('prices', ?)", (fingerprint,))

    # ------------------------------------------------------------------------------- queries

    async def usage(
        self,
        by: q.Grouping = "model",
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
    ) -> list[q.UsageRow]:
        """Model calls grouped ``by`` a dimension: calls, errors, tokens, cost, latency, TTFT."""
        return await self._query(q.usage, by, since, until, limit=limit)

    async def tool_usage(
        self,
        by: q.Grouping = "tool",
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
    ) -> list[q.ToolRow]:
        """Tool calls grouped ``by`` a dimension: calls, errors, denials, duration."""
        return await self._query(q.tool_usage, by, since, until, limit=limit)

    async def run_usage(
        self,
        by: q.Grouping = "verb",
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
    ) -> list[q.RunRow]:
        """Runs grouped ``by`` a dimension: outcomes, duration, tokens, cost."""
        return await self._query(q.run_usage, by, since, until, limit=limit)

    async def error_rates(
        self,
        by: q.Grouping = "model",
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> list[q.ErrorRow]:
        """Failed model calls by ``error.type`` within each group, with their share of calls."""
        return await self._query(q.error_rates, by, since, until)

    async def _query(
        self, fn: Callable[..., _T], by: q.Grouping, since: Any, until: Any, **options: Any
    ) -> _T:
        await self.open()
        window = q.TimeRange.of(since, until)
        return await self._in_thread(lambda: fn(self._db(), by, window, **options))

    async def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL query over the fact tables (quote the dotted column names)."""
        await self.open()
        return await self._in_thread(lambda: self._db().execute(query, params).fetchall())


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
