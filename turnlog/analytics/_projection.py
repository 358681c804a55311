"""The analytics projection: fact tables kept in a database of their own, updated exactly once.

``update`` reads the log as stored rows with ``store.read_rows(types=...)`` when the store
keeps them in a file or a server (it declares the ``raw_copy`` capability: a SQLite file,
PostgreSQL) and decodes them itself, else with ``store.read_all``; ``follow`` then takes live events from ``store.subscribe``.
The facts go into the projection's own SQLite database (``_database``), never into the
store's: by default ``<store file>.analytics`` beside a SQLite store, a private in-memory
database for a store that lives in this process, a file in the user's cache directory for
a server store (``_location``); ``database=`` chooses another. Each batch of facts and the
checkpoint (the last position applied) are written in ONE transaction, so a crash at any
moment leaves facts and checkpoint agreeing: nothing is counted twice, nothing skipped.

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
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore, RecordedEvent

from . import _queries as q
from ._batch import Batch
from ._database import WAL_AFTER_UPDATE, WAL_DURING_UPDATE, AnalyticsDatabase, Stale
from ._errors import AnalyticsDatabaseError
from ._location import analytics_database_of, prepare_file
from ._pricing import PriceTable
from ._tables import RELEVANT_TYPES

__all__ = ["AnalyticsProjection", "UpdateReport"]

_T = TypeVar("_T")
# Events per transaction while catching up (batch_size=None): the first, and the most.
_FIRST_BATCH = 5000
_LARGEST_BATCH = 50_000
# Stored rows per read_rows call (the store's own page size, read inline on its connection).
_ROWS_PAGE = 500


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


class AnalyticsProjection:
    """Fact tables over one store, updated incrementally and exactly once.

    Args:
        store: The event store to read.
        database: Where to keep the fact tables: a SQLite file, or ``":memory:"``. By default
            (None) ``<store file>.analytics`` beside a SQLite store, a private in-memory
            database for a store in this process (``memory://``), and
            ``$XDG_CACHE_HOME/turnlog/analytics/<store id>.db`` for a server store
            (PostgreSQL); see ``analytics_database_of``. Never the store's own file.
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
        self._chosen = str(database) if database is not None else None
        self.prices = prices if prices is not None else PriceTable()
        self.batch_size = batch_size
        self._db: AnalyticsDatabase | None = None
        self._lock = anyio.Lock()

    @property
    def database(self) -> str:
        """The analytics database: the one given, else the store's default (known once open for a server store)."""
        if self._db is not None:
            return self._db.path
        return self._chosen if self._chosen is not None else analytics_database_of(self.store)

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
        if self._db is not None:
            return
        if self._chosen is None and self.store.store_id is None:
            await self.store.head()  # a server store learns its id with its first operation
        path = self.database
        prepare_file(path, self.store)
        db = AnalyticsDatabase(path, self.store.store_id)
        await self._in_thread(db.open, database=path)
        self._db = db

    async def close(self) -> None:
        """Close the database connection. Idempotent."""
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _open_db(self) -> AnalyticsDatabase:
        if self._db is None:
            raise AnalyticsDatabaseError("the analytics projection is not open", database=self.database)
        return self._db

    async def _in_thread(self, fn: Callable[..., _T], *args: Any, database: str | None = None) -> _T:
        # sqlite3 blocks; keep it off the event loop. Its errors are translated here, once.
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except sqlite3.Error as exc:
            where = database or self.database
            raise AnalyticsDatabaseError(f"{where}: {exc}", database=where) from exc

    # ------------------------------------------------------------------------------ checkpoint

    async def checkpoint(self) -> int:
        """The last global position applied (0 before the first update)."""
        await self.open()
        return await self._in_thread(self._open_db().checkpoint)

    # ---------------------------------------------------------------------------------- update

    async def update(self) -> UpdateReport:
        """Apply every event after the checkpoint, in batches, each with its checkpoint.

        Safe to run from several processes at once: a batch another process applied first
        is detected inside the transaction and not applied again.
        """
        await self.open()
        db = self._open_db()
        async with self._lock:
            started = time.perf_counter()
            start = await self._in_thread(self._prepare, db)
            counts = [0, 0, 0, 0]
            position = start
            while True:
                try:
                    position = await self._catch_up(db, position, counts)
                    break
                except Stale:
                    position = await self._in_thread(db.sync)
            if not db.ranks_ready:
                await self._in_thread(db.finish)
            if position > start:
                await self._in_thread(db.checkpoint_wal, WAL_AFTER_UPDATE)
            return _report(start, position, counts, started)

    def _prepare(self, db: AnalyticsDatabase) -> int:
        # One hop to the thread for both: each hop waits for a scheduler slot on a busy machine.
        db.reprice_if_needed(self.prices)
        return db.sync()

    def _batch(self, db: AnalyticsDatabase, events: Sequence[RecordedEvent] = ()) -> Batch:
        return Batch(self.prices, db.sessions, self.store.upcasters, events)

    async def _catch_up(self, db: AnalyticsDatabase, position: int, counts: list[int]) -> int:
        head = await self.store.head()
        if head <= position:
            return position
        # Each event becomes its facts as soon as it is read, and only the facts are kept
        # until the batch is written: an event is garbage the moment it is read, so the
        # collector never walks a batch of decoded payloads.
        batch = self._batch(db)
        size = self.batch_size or _FIRST_BATCH
        seen = position
        if "raw_copy" in self.store.capabilities:
            # Stored rows of our types as plain tuples, decoded here (data and meta only):
            # no object per row and none of the columns no fact reads (id, hashes).
            while True:
                page = await self.store.read_rows(seen, _ROWS_PAGE, types=RELEVANT_TYPES, to_position=head)
                add = batch.add_row
                for row in page:
                    add(row)
                    if batch.events >= size:
                        position = await self._apply(db, batch, position, row[0], counts)
                        batch = self._batch(db)
                        add = batch.add_row
                        size = self._next_size(size)
                if page:
                    seen = page[-1][0]
                if len(page) < _ROWS_PAGE:
                    break
        else:
            take = batch.add
            async for event in self.store.read_all(position + 1, head, types=RELEVANT_TYPES):
                take(event)
                seen = event.position
                if batch.events >= size:
                    position = await self._apply(db, batch, position, seen, counts)
                    batch = self._batch(db)
                    take = batch.add
                    size = self._next_size(size)
        # Every event up to the head read at the start is committed and was delivered when
        # positions are gapless; otherwise only what was seen is safe to checkpoint.
        if "gapless_positions" in self.store.capabilities:
            last = head
        else:
            last = seen if batch.events else position
        if last > position:
            position = await self._apply(db, batch, position, last, counts)
        return position

    def _next_size(self, size: int) -> int:
        """The size of the transaction after one of ``size`` events (see ``batch_size``)."""
        return size if self.batch_size is not None else min(2 * size, _LARGEST_BATCH)

    async def _apply(
        self, db: AnalyticsDatabase, batch: Batch, expected: int, last: int, counts: list[int]
    ) -> int:
        added = await self._in_thread(db.apply_batch, batch, self.prices, expected, last, WAL_DURING_UPDATE)
        for i, n in enumerate(added):
            counts[i] += n
        return last

    async def rebuild(self) -> UpdateReport:
        """Drop every fact and build the tables again from the whole log."""
        await self.open()
        db = self._open_db()
        async with self._lock:
            await self._in_thread(db.clear, self.prices)
        return await self.update()

    async def compact(self) -> None:
        """Rewrite the database file so no freed page keeps a copy of facts it no longer holds.

        Run it after a ``rebuild`` that follows a redaction (``turnlog redact`` does).

        Raises:
            AnalyticsDatabaseError: another connection kept the write-ahead log from being
                truncated.
        """
        await self.open()
        db = self._open_db()
        async with self._lock:
            await self._in_thread(db.compact)

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
        db = self._open_db()
        async with self._lock:
            started = time.perf_counter()
            expected = await self._in_thread(db.sync)
            if expected == applied_to:
                counts = [0, 0, 0, 0]
                try:
                    await self._apply(db, self._batch(db, batch), expected, batch[-1].position, counts)
                    return _report(expected, batch[-1].position, counts, started)
                except Stale:
                    pass
        # Another process moved the checkpoint (it applied these, or rebuilt from scratch):
        # catch up from wherever it is now with read_all, never from the live batch alone.
        return await self.update()

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
        conn = self._open_db().conn()
        return await self._in_thread(lambda: fn(conn, by, window, **options))

    async def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL query over the fact tables (quote the dotted column names)."""
        await self.open()
        return await self._in_thread(self._open_db().read, query, params)


def _report(start: int, end: int, counts: list[int], started: float) -> UpdateReport:
    events, model_calls, tool_calls, runs = counts
    return UpdateReport(start, end, events, model_calls, tool_calls, runs, time.perf_counter() - started)


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
