"""The SQLite backend: the embedded default store.

Layout (created and migrated with sqlite-utils; the format version is kept in ``meta``)::

    events(position INTEGER PRIMARY KEY AUTOINCREMENT, id UNIQUE, stream, version, type,
           schema, data BLOB, meta BLOB, recorded_at INTEGER (UTC µs), prev_hash, hash,
           UNIQUE(stream, version))
    snapshots(stream, type, version, schema, data BLOB, meta BLOB, recorded_at)
    tracking(consumer PRIMARY KEY, position)      -- for consumers that keep their place here
    meta(key PRIMARY KEY, value)                  -- format_version

SQLite has one writer at a time, so positions are given in commit order and, with
AUTOINCREMENT, are gapless and never reused. Every write is one ``BEGIN IMMEDIATE``
transaction that checks ``expected_version`` before inserting.

Keeping the event loop free without losing SQLite's speed. Single-event appends of the
same rows on a 2-core machine (Python 3.11, SQLite 3.40, WAL, ``synchronous=NORMAL``):

- raw sqlite3, called directly: 29-39 k commits/s;
- through a dedicated worker thread, the result handed back in a future: 9-11 k/s;
- through ``anyio.to_thread.run_sync`` with a ``CapacityLimiter(1)``: 7-9 k/s.

The hand-off to a thread costs 60-100 µs, two to three times the commit itself, so either
thread design would cap single appends at about a third of raw sqlite3. A commit in WAL
with ``synchronous=NORMAL`` never waits for the disk (no fsync on commit), so the store
runs short operations inline on the event loop, like a non-blocking socket write, and
sends to its worker thread (the dedicated one: the cheaper of the two) only what may block:

- a write that finds the database locked by another connection (tried inline with a zero
  busy timeout, then retried on the worker thread with the configured ``busy_timeout``);
- every write under ``durability="full"`` (an fsync per commit);
- large batches (over 64 events or 256 KiB), where the hand-off is noise;
- ``verify`` (on its own connection) and WAL checkpoints. Automatic checkpoints are
  switched off on the write connection because they would fsync inside an inline commit;
  the store instead queues a checkpoint on the worker thread after about 4 MiB of writes.

Reads run inline too, one page at a time (500 rows or about 4 MiB of payload), with a
checkpoint between pages so other tasks get their turn. The connection is shared between
the loop and the worker thread under a lock, so there is never more than one user of it
at a time; an inline call that finds the lock taken goes to the worker's queue instead.

Durability: ``"normal"`` (the default) survives a crash of the writing process but a power
loss may roll back the latest commits; ``"full"`` survives power loss too, at the price of
an fsync per commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar
from uuid import UUID

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._base import EventStore
from ._encoding import (
    DEFAULT_MAX_EVENT_BYTES,
    ChainChecker,
    PreparedAppend,
    check_expected_version,
    check_read_range,
    decode_payload,
    event_hash,
    from_micros,
    match_resent,
    prepare_batch,
    prepare_events,
    prepare_snapshot,
    version_matches,
)
from ._errors import (
    ConcurrencyError,
    CorruptEventError,
    StoreError,
    StoreFormatError,
    StoreUnavailable,
)
from ._records import (
    ANY,
    AppendResult,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    Problem,
    RecordedEvent,
    Snapshot,
    VerifyReport,
)
from ._upcasting import Upcasters

if TYPE_CHECKING:
    import sqlite_utils

__all__ = ["FORMAT_VERSION", "SQLiteEventStore"]

FORMAT_VERSION = 1
"""The newest store layout this code writes and reads."""

Durability = Literal["normal", "full"]
T = TypeVar("T")

_PAGE = 500
_PAGE_BYTES = 4 * 1024 * 1024
_INLINE_MAX_EVENTS = 64
_INLINE_MAX_BYTES = 256 * 1024
_CHECKPOINT_WAL_BYTES = 4 * 1024 * 1024
_POLL_INTERVAL = 0.025
_COLUMNS = "position, id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
_INSERT = (
    "INSERT INTO events (id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_STREAM_HEAD = "SELECT version, hash FROM events WHERE stream = ? ORDER BY version DESC LIMIT 1"


class _WouldBlock(Exception):
    """An inline attempt found the database busy; retry on the worker thread."""


class _Worker:
    """One daemon thread running blocking jobs in order; results go back to the event loop."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], Callable[[BaseException | None, Any], None]] | None
        ]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done = job
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting task, which re-raises it
                outcome: tuple[BaseException | None, Any] = (exc, None)
            else:
                outcome = (None, result)
            try:
                done(*outcome)
            except RuntimeError:
                # The event loop that waited for this job has been closed: nobody is left
                # to tell, and the thread must keep serving the store's other callers.
                continue

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and return its result.

        The wait is shielded: once a job is handed over it runs to its end (a write is then
        either committed or not, never abandoned mid-way); a cancellation is delivered at
        the caller's next checkpoint.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: take the generic path
            return await anyio.to_thread.run_sync(self._blocking_call, fn)
        future: asyncio.Future[T] = loop.create_future()

        def settle(exc: BaseException | None, result: Any) -> None:
            if not future.done():
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(result)

        self._jobs.put((fn, lambda exc, result: loop.call_soon_threadsafe(settle, exc, result)))
        with anyio.CancelScope(shield=True):
            return await future

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it (background housekeeping)."""
        self._jobs.put((fn, _ignore_result))

    def _blocking_call(self, fn: Callable[[], T]) -> T:
        box: list[Any] = []
        ready = threading.Event()

        def done(exc: BaseException | None, result: Any) -> None:
            box.append((exc, result))
            ready.set()

        self._jobs.put((fn, done))
        ready.wait()
        exc, result = box[0]
        if exc is not None:
            raise exc
        return result

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()


def _parse_target(path: str) -> tuple[str, bool]:
    """Return the sqlite3 target and whether it is a private in-memory database."""
    if path == ":memory:":
        return ":memory:", True
    return os.fspath(path), False


class SQLiteEventStore(EventStore):
    """The event store in one SQLite file (or a private in-memory database).

    Args:
        path: The database file, or ``":memory:"`` for a store that lives as long as the object.
        upcasters: Applied on read to events and snapshots.
        max_event_bytes: Size limit of one encoded event (data plus meta).
        durability: ``"normal"`` (survives a process crash) or ``"full"`` (survives power loss).
        busy_timeout: Seconds a write waits for another process holding the write lock.

    Example:
        >>> import anyio
        >>> from turnlog.eventstore import NewEvent
        >>> async def main():
        ...     async with SQLiteEventStore(":memory:") as store:
        ...         result = await store.append("branch-1", [NewEvent("message.added", {"text": "hi"})])
        ...         return result.version
        >>> anyio.run(main)
        1
    """

    capabilities: ClassVar[frozenset[str]] = frozenset({"gapless_positions", "cross_process_subscribe"})

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        upcasters: Upcasters | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        durability: Durability = "normal",
        busy_timeout: float = 5.0,
    ) -> None:
        super().__init__(upcasters=upcasters, max_event_bytes=max_event_bytes)
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
        target, in_memory = _parse_target(os.fspath(path))
        self.path = target
        self.url = "sqlite:///:memory:" if in_memory else f"sqlite:///{target}"
        self.durability = durability
        self._in_memory = in_memory
        self._busy_ms = max(0, int(busy_timeout * 1000))
        self._lock = threading.Lock()
        self._closed = False
        self._wake: anyio.Event | None = None
        self._checkpoint_pending = False
        self._wal_bytes = 0
        self._conn = self._connect(target)
        self._aux: sqlite3.Connection | None = None
        try:
            self._init_schema()
            if not in_memory:
                self._aux = self._connect(target)
        except BaseException:
            self._conn.close()
            raise
        self._worker = _Worker(f"turnlog-sqlite:{os.path.basename(target)}")

    # ------------------------------------------------------------------ connection

    def _connect(self, target: str) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=0)
            # A file that is not SQLite only fails on first access.
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            if not self._in_memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise StoreError(f"cannot switch {target} to WAL mode (got {mode!r})")
                conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute(f"PRAGMA synchronous = {self.durability.upper()}")
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                conn.close()
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreFormatError(f"{target} is not a SQLite database: {exc}") from exc
            raise StoreUnavailable(f"cannot open {target}: {exc}") from exc
        return conn

    def _init_schema(self) -> None:
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        try:
            # Imported here: it is only needed when a store is opened, and takes a while to load.
            import sqlite_utils

            conn.execute("BEGIN IMMEDIATE")
            try:
                self._create_or_check_schema(
                    sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)
                )
            except BaseException:
                _rollback(conn)
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise StoreFormatError(f"{self.path} is not a SQLite database: {exc}") from exc
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    def _create_or_check_schema(self, db: sqlite_utils.Database) -> None:
        tables = set(db.table_names())
        if not tables:
            self._create_schema(db)
            return
        if "meta" not in tables or "events" not in tables:
            raise StoreFormatError(f"{self.path} is a SQLite database but not a turnlog store")
        row = db.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
        try:
            found = int(row[0]) if row is not None else None
        except ValueError:
            found = None
        if found is None:
            raise StoreFormatError(f"{self.path} has no turnlog format version; it is not a turnlog store")
        if found > FORMAT_VERSION:
            raise StoreFormatError(
                f"{self.path} was written by a newer turnlog (store format {found}; this version "
                f"reads formats up to {FORMAT_VERSION}); upgrade turnlog to open it",
                found=found,
                supported=FORMAT_VERSION,
            )
        # Older formats would be migrated here, one step at a time; format 1 is the first.

    @staticmethod
    def _create_schema(db: sqlite_utils.Database) -> None:
        # sqlite-utils has no public switch for AUTOINCREMENT, which keeps positions from
        # being reused after a delete, so the events table is spelled out.
        db.execute(
            """
            CREATE TABLE events (
                position INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                stream TEXT NOT NULL,
                version INTEGER NOT NULL,
                type TEXT NOT NULL,
                schema INTEGER NOT NULL,
                data BLOB NOT NULL,
                meta BLOB NOT NULL,
                recorded_at INTEGER NOT NULL,
                prev_hash TEXT NOT NULL,
                hash TEXT NOT NULL,
                UNIQUE (stream, version)
            )
            """
        )
        db["snapshots"].create(
            {
                "stream": str,
                "type": str,
                "version": int,
                "schema": int,
                "data": bytes,
                "meta": bytes,
                "recorded_at": int,
            },
            pk=("stream", "type", "version"),
            not_null={"stream", "type", "version", "schema", "data", "meta", "recorded_at"},
        )
        db["tracking"].create({"consumer": str, "position": int}, pk="consumer", not_null={"position"})
        db["meta"].create({"key": str, "value": str}, pk="key", not_null={"value"})
        db["meta"].insert({"key": "format_version", "value": str(FORMAT_VERSION)})

    # ------------------------------------------------------------------ running jobs

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    async def _run(self, fn: Callable[[bool], T], *, inline: bool = True) -> T:
        """Run ``fn(blocking)`` on the connection: inline when possible, else on the worker.

        ``fn`` raises ``_WouldBlock`` (having changed nothing) when called with
        ``blocking=False`` and the database is locked.
        """
        self._check_open()
        if inline and self._lock.acquire(blocking=False):
            try:
                return self._translate(fn, False)
            except _WouldBlock:
                pass
            finally:
                self._lock.release()
        return await self._worker.call(lambda: self._locked_blocking(fn))

    def _locked_blocking(self, fn: Callable[[bool], T]) -> T:
        with self._lock:
            self._conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            try:
                return self._translate(fn, True)
            finally:
                self._conn.execute("PRAGMA busy_timeout = 0")

    def _translate(self, fn: Callable[[bool], T], blocking: bool) -> T:
        try:
            return fn(blocking)
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                if not blocking:
                    raise _WouldBlock from exc
                raise StoreUnavailable(
                    f"{self.path}: the database stayed locked by another connection for "
                    f"{self._busy_ms} ms: {exc}"
                ) from exc
            raise StoreError(f"{self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    def _notify(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    # ------------------------------------------------------------------ appends

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        self._check_open()
        name, prepared = prepare_events(stream, events, self.max_event_bytes)
        expected = check_expected_version(name, expected_version)
        entries = [PreparedAppend(name, prepared, expected)]
        return (await self._write(entries))[0]

    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        self._check_open()
        return await self._write(prepare_batch(entries, self.max_event_bytes))

    async def _write(self, entries: list[PreparedAppend]) -> list[AppendResult]:
        count = 0
        size = 0
        for entry in entries:
            count += len(entry.events)
            for ev in entry.events:
                size += len(ev.data) + len(ev.meta)
        inline = self.durability == "normal" and count <= _INLINE_MAX_EVENTS and size <= _INLINE_MAX_BYTES
        results = await self._run(lambda blocking: self._write_sync(entries, blocking), inline=inline)
        self._notify()
        if not self._in_memory:
            self._wal_bytes += size + 200 * count  # payload plus a rough row overhead
            if self._wal_bytes >= _CHECKPOINT_WAL_BYTES:
                self._wal_bytes = 0
                self._schedule_checkpoint()
        return results

    def _write_sync(self, entries: list[PreparedAppend], blocking: bool) -> list[AppendResult]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = self._insert_entries(conn, entries)
        except BaseException:
            _rollback(conn)
            raise
        conn.execute("COMMIT")
        return results

    def _insert_entries(self, conn: sqlite3.Connection, entries: list[PreparedAppend]) -> list[AppendResult]:
        now = time.time_ns() // 1000
        plans: list[tuple[list[tuple[Any, ...]], int]] = []
        heads: dict[str, tuple[int, str]] = {}
        for entry in entries:
            stream = entry.stream
            head = heads.get(stream)
            if head is None:
                row = conn.execute(_STREAM_HEAD, (stream,)).fetchone()
                head = (row[0], row[1]) if row is not None else (0, "")
            version, prev = head
            if not version_matches(entry.expected, version):
                original = self._find_resent(conn, entries)
                if original is not None:
                    return original
                raise ConcurrencyError(stream, entry.expected, version)
            rows = []
            for ev in entry.events:
                version += 1
                digest = event_hash(prev, ev.id, stream, version, ev.type, ev.schema, ev.data, ev.meta, now)
                rows.append((ev.id, stream, version, ev.type, ev.schema, ev.data, ev.meta, now, prev, digest))
                prev = digest
            heads[stream] = (version, prev)
            plans.append((rows, version))
        results: list[AppendResult] = []
        try:
            for rows, version in plans:
                if len(rows) == 1:
                    last = conn.execute(_INSERT, rows[0]).lastrowid
                else:
                    conn.executemany(_INSERT, rows)
                    last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
                if last is None:  # sqlite3 reports no rowid only for statements that insert nothing
                    raise StoreError(f"{self.path}: the insert reported no position")
                results.append(AppendResult(tuple(range(last - len(rows) + 1, last + 1)), version))
        except sqlite3.IntegrityError as exc:
            # A stored event id: either a re-send of an acknowledged append or a clash.
            _rollback(conn)
            conn.execute("BEGIN IMMEDIATE")
            original = self._find_resent(conn, entries)
            if original is not None:
                return original
            raise StoreError(f"{self.path}: unexpected constraint failure: {exc}") from exc
        return results

    def _find_resent(
        self, conn: sqlite3.Connection, entries: list[PreparedAppend]
    ) -> list[AppendResult] | None:
        """Original results if every event is already stored identically, None if none is.

        Raises:
            IdempotencyError: some ids are stored with other content, or only some are stored.
        """
        ids = [ev.id for entry in entries for ev in entry.events]
        stored: dict[str, tuple[Any, ...]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            sql = (
                "SELECT id, position, stream, version, type, schema, data, meta "
                f"FROM events WHERE id IN ({marks})"
            )
            for row in conn.execute(sql, chunk):
                stored[row[0]] = row[1:]
        if not stored:
            return None
        return match_resent(entries, stored)

    # ------------------------------------------------------------------ reads

    def _decode_row(self, row: tuple[Any, ...]) -> RecordedEvent:
        position, eid, stream, version, type_, schema, data, meta, recorded_at, prev_hash, digest = row
        schema, data_obj, meta_obj = decode_payload(
            self.upcasters, type_, schema, data, meta, stream=stream, version=version, position=position
        )
        try:
            event_id = UUID(eid)
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptEventError(
                stream, version, f"malformed event id {eid!r}", position=position
            ) from exc
        return RecordedEvent(
            event_id,
            stream,
            version,
            position,
            type_,
            schema,
            data_obj,
            meta_obj,
            from_micros(recorded_at),
            prev_hash,
            digest,
        )

    def _query(self, sql: str, params: Sequence[Any]) -> Callable[[bool], tuple[list[RecordedEvent], bool]]:
        """A page of events, and whether the query ran out of rows.

        A page ends after ``LIMIT`` rows or once it holds about ``_PAGE_BYTES`` of payload,
        so that pages of large events stay small in memory.
        """

        def run(blocking: bool) -> tuple[list[RecordedEvent], bool]:
            cursor = self._conn.execute(sql, params)
            events: list[RecordedEvent] = []
            size = 0
            try:
                for row in cursor:
                    events.append(self._decode_row(row))
                    size += len(row[6]) + len(row[7])
                    if size >= _PAGE_BYTES:
                        return events, False
            finally:
                cursor.close()
            return events, len(events) < params[-1]

        return run

    async def read_stream(
        self,
        stream: str,
        from_version: int = 1,
        to_version: int | None = None,
        *,
        backwards: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_read_range("from_version", from_version, "to_version", to_version, limit)
        low, high = from_version, to_version if to_version is not None else 2**62
        remaining = limit
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            order = "DESC" if backwards else "ASC"
            sql = (
                f"SELECT {_COLUMNS} FROM events WHERE stream = ? AND version >= ? AND version <= ? "
                f"ORDER BY version {order} LIMIT ?"
            )
            events, exhausted = await self._run(self._query(sql, (stream, low, high, page)))
            for event in events:
                yield event
            if exhausted:
                return
            if remaining is not None:
                remaining -= len(events)
            if backwards:
                high = events[-1].version - 1
            else:
                low = events[-1].version + 1
            await anyio.lowlevel.checkpoint()

    async def read_all(
        self,
        from_position: int = 1,
        to_position: int | None = None,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
        limit: int | None = None,
        backwards: bool = False,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_read_range("from_position", from_position, "to_position", to_position, limit)
        filters, params = _filters(types, stream_prefix)
        low, high = from_position, to_position if to_position is not None else 2**62
        remaining = limit
        order = "DESC" if backwards else "ASC"
        sql = (
            f"SELECT {_COLUMNS} FROM events WHERE position >= ? AND position <= ?{filters} "
            f"ORDER BY position {order} LIMIT ?"
        )
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            events, exhausted = await self._run(self._query(sql, (low, high, *params, page)))
            for event in events:
                yield event
            if exhausted:
                return
            if remaining is not None:
                remaining -= len(events)
            if backwards:
                high = events[-1].position - 1
            else:
                low = events[-1].position + 1
            await anyio.lowlevel.checkpoint()

    async def stream_version(self, stream: str) -> int:
        def run(blocking: bool) -> int:
            row = self._conn.execute("SELECT max(version) FROM events WHERE stream = ?", (stream,)).fetchone()
            return row[0] or 0

        return await self._run(run)

    async def head(self) -> int:
        return await self._run(self._head_sync)

    def _head_sync(self, blocking: bool) -> int:
        return self._conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        filters, params = _filters(None, prefix)
        sql = f"SELECT stream, max(version) FROM events WHERE 1{filters} GROUP BY stream ORDER BY stream"

        def run(blocking: bool) -> list[tuple[str, int]]:
            return [(row[0], row[1]) for row in self._conn.execute(sql, params)]

        return await self._run(run)

    async def subscribe(
        self,
        from_position: int = 1,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_read_range("from_position", from_position, "to_position", None, None)
        wanted = None if types is None else list(types)
        position = from_position
        while True:
            # Take the wake-up before looking at the head, so an append in between is not missed.
            if self._wake is None:
                self._wake = anyio.Event()
            wake = self._wake
            head = await self.head()
            if head >= position:
                async for event in self.read_all(position, head, types=wanted, stream_prefix=stream_prefix):
                    yield event
                position = head + 1
                continue
            # Appends of this object wake us at once; other processes are seen by polling.
            with anyio.move_on_after(_POLL_INTERVAL):
                await wake.wait()

    # ------------------------------------------------------------------ verify

    async def verify(self, stream: str | None = None) -> VerifyReport:
        self._check_open()
        return await self._worker.call(lambda: self._verify_sync(stream))

    def _verify_sync(self, stream: str | None) -> VerifyReport:
        if self._aux is not None:
            return self._verify_on(self._aux, stream)
        with self._lock:
            return self._verify_on(self._conn, stream)

    def _verify_on(self, conn: sqlite3.Connection, stream: str | None) -> VerifyReport:
        checker = ChainChecker()
        problems: list[Problem] = []
        try:
            if stream is None:
                result = [row[0] for row in conn.execute("PRAGMA quick_check")]
                if result != ["ok"]:
                    problems.extend(Problem("", 0, f"SQLite integrity check: {line}") for line in result)
            conn.execute("BEGIN")  # one consistent view of the log while checking it
            try:
                where = "WHERE stream = ?" if stream is not None else ""
                sql = (
                    "SELECT position, id, stream, version, type, schema, data, meta, recorded_at, "
                    f"prev_hash, hash FROM events {where} ORDER BY stream, version"
                )
                # The (stream, version) index gives this order without sorting, and the cursor
                # streams rows, so memory stays flat however large the log is.
                for row in conn.execute(sql, () if stream is None else (stream,)):
                    position, eid, name, version, type_, schema, data, meta, rec, prev, digest = row
                    checker.add(
                        position=position,
                        event_id=eid,
                        stream=name,
                        version=version,
                        type_=type_,
                        schema=schema,
                        data=data,
                        meta=meta,
                        recorded_at_us=rec,
                        prev_hash=prev,
                        hash_=digest,
                    )
            finally:
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            problems.append(Problem(stream or "", 0, f"SQLite could not read the log: {exc}"))
        return VerifyReport(tuple(problems + checker.problems), checker.streams, checker.events)

    # ------------------------------------------------------------------ snapshots

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        self._check_open()
        snap = prepare_snapshot(snapshot, self.max_event_bytes)
        now = time.time_ns() // 1000
        row = (snap.stream, snap.type, snap.version, snap.schema, snap.data, snap.meta, now)

        def run(blocking: bool) -> None:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT OR REPLACE INTO snapshots "
                    "(stream, type, version, schema, data, meta, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
            except BaseException:
                _rollback(conn)
                raise
            conn.execute("COMMIT")

        inline = self.durability == "normal" and len(snap.data) <= _INLINE_MAX_BYTES
        await self._run(run, inline=inline)

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        sql = "SELECT stream, version, type, schema, data, meta, recorded_at FROM snapshots WHERE stream = ?"
        params: list[Any] = [stream]
        if at_or_before_version is not None:
            sql += " AND version <= ?"
            params.append(at_or_before_version)
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        sql += " ORDER BY version DESC, recorded_at DESC LIMIT 1"

        def run(blocking: bool) -> Snapshot | None:
            row = self._conn.execute(sql, params).fetchone()
            if row is None:
                return None
            name, version, stype, schema, data, meta, recorded_at = row
            schema, data_obj, meta_obj = decode_payload(
                self.upcasters, stype, schema, data, meta, stream=name, version=version, position=None
            )
            return Snapshot(name, version, stype, schema, data_obj, meta_obj, from_micros(recorded_at))

        return await self._run(run)

    async def delete_snapshots(self, stream: str | None = None) -> int:
        def run(blocking: bool) -> int:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                if stream is None:
                    count = conn.execute("DELETE FROM snapshots").rowcount
                else:
                    count = conn.execute("DELETE FROM snapshots WHERE stream = ?", (stream,)).rowcount
            except BaseException:
                _rollback(conn)
                raise
            conn.execute("COMMIT")
            return count

        return await self._run(run, inline=self.durability == "normal")

    # ------------------------------------------------------------------ housekeeping

    def _schedule_checkpoint(self) -> None:
        """Queue a checkpoint on the worker thread (the caller never waits for it).

        It holds the connection lock, so this process's writes queue behind it instead of
        appending to the WAL meanwhile: the checkpoint can then copy every frame and the
        next write starts the WAL over from its beginning.
        """
        if self._checkpoint_pending:
            return
        self._checkpoint_pending = True

        def checkpoint() -> None:
            try:
                with self._lock:
                    if not self._closed:
                        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                self._checkpoint_pending = False

        self._worker.submit(checkpoint)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._notify()
        # Closing the last connection checkpoints the WAL (an fsync): do it off the loop,
        # after every job already queued.
        await self._worker.call(self._close_connections)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._worker.stop)

    def _close_connections(self) -> None:
        with self._lock:
            if self._aux is not None:
                self._aux.close()
            self._conn.close()

    def __repr__(self) -> str:
        return f"SQLiteEventStore({self.path!r}, durability={self.durability!r})"


def _ignore_result(exc: BaseException | None, result: Any) -> None:
    """Completion of a background checkpoint: a failure only delays the next one."""


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _filters(types: Iterable[str] | None, stream_prefix: str | None) -> tuple[str, list[Any]]:
    sql = ""
    params: list[Any] = []
    if types is not None:
        wanted = list(types) if not isinstance(types, str) else [types]
        if not wanted:
            return " AND 0", []
        sql += f" AND type IN ({','.join('?' * len(wanted))})"
        params.extend(wanted)
    if stream_prefix:
        sql += " AND substr(stream, 1, ?) = ?"
        params.extend((len(stream_prefix), stream_prefix))
    return sql, params
