"""The SQLite backend: the embedded default store.

Why this module is over 500 lines: it is one class, ``SQLiteEventStore``, the port's thirty-odd
methods on one connection, each a few lines that hand a job to ``_run``. What is not the
class lives beside it, one concept per module: the tables and format (``_sqlite_schema``), the
layout of event rows in each format and the SQL that reads and writes them (``_sqlite_layout``),
opening connections and SQLite's errors (``_sqlite_connect``), what a write transaction does
(``_sqlite_write``), pages of reads and ``verify``'s walk (``_sqlite_read``), redaction and the
chain upgrade (``_sqlite_redact``). Splitting the class itself would split the port.

The tables are described (and created) in ``_sqlite_schema``. SQLite has one writer at a time,
so positions are given in commit order and are gapless; they are never reused, as no event is
ever deleted (a trigger refuses deletes; stores made before it have AUTOINCREMENT). Every write
is one ``BEGIN IMMEDIATE`` transaction that checks ``expected_version`` before inserting.

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
  the store instead queues a checkpoint on the worker thread after about 8 MiB of WAL (its
  estimate counts the pages each commit writes, not only the payload: a one-event commit
  writes four pages or more). Twice SQLite's default of 1,000 pages: each checkpoint holds
  the connection through two fsyncs, and half as many of them cost single appends less.

Reads run inline too, one page at a time (500 rows or about 4 MiB of payload), with a
checkpoint between pages so other tasks get their turn. The connection is shared between
the loop and the worker thread under a lock, so there is never more than one user of it
at a time; an inline call that finds the lock taken goes to the worker's queue instead.

Durability: ``"normal"`` (the default) survives a crash of the writing process but a power
loss may roll back the latest commits; ``"full"`` survives power loss too, at the price of
an fsync per commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from turnlog._errors import UsageError

from ._base import EventStore
from ._decoding import decode_event
from ._encoder import check_encoded
from ._errors import (
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)
from ._follow import follow_log
from ._leases import remove_lease_dir
from ._paging import read_pages
from ._raw import (
    RAW_PAGE,
    RawEvent,
    RawSnapshot,
    StoredRow,
    check_raw_events,
    check_raw_range,
    raw_event,
)
from ._records import (
    ANY,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    Tracking,
    VerifyReport,
)
from ._redaction import Redaction, RedactionResult
from ._snapshots import bind_snapshot, first_intact, prepare_snapshot
from ._sqlite_compact import COMPACT_FORMAT, COMPACT_PAGE_SIZE, attach
from ._sqlite_connect import connect, create_private, damage_or_error, is_busy, parse_target
from ._sqlite_layout import StoreConnection
from ._sqlite_read import read_filters, rows_page, verify_on
from ._sqlite_redact import erase_freed, redact_sync, upgrade_sync
from ._sqlite_schema import (
    FORMAT_VERSION,
    NEW_STORE_FORMAT,
    TEXT_FORMAT,
    bump_format,
    ensure_store_id,
    init_schema,
    read_format,
    read_store_id,
    write_transaction,
)
from ._sqlite_write import (
    find_resent,
    insert_entries,
    insert_raw,
    record_tracking,
    tracking_position,
)
from ._upcasting import Upcasters
from ._validation import (
    DEFAULT_MAX_EVENT_BYTES,
    PreparedAppend,
    check_expected_version,
    check_read_range,
    check_stream_name,
    check_stream_prefix,
    check_tracking,
    prepare_batch,
    prepare_events,
)
from ._worker import Worker

if TYPE_CHECKING:
    import anyio

    from ._group_commit import GroupCommit

__all__ = ["FORMAT_VERSION", "SQLiteEventStore"]

Durability = Literal["normal", "full"]
T = TypeVar("T")

_PAGE = 500
_INLINE_MAX_EVENTS = 64
_INLINE_MAX_BYTES = 256 * 1024
_CHECKPOINT_WAL_BYTES = 8 * 1024 * 1024
_COMMIT_PAGES = 4
"""WAL pages a commit writes at the least in a store with AUTOINCREMENT (see ``_written``)."""
_POLL_INTERVAL = 0.025
_NO_BOUND = 2**62
_ROW_POSITION: Callable[[tuple[Any, ...]], int] = itemgetter(0)
"""The key of a stored row in ``read_all`` pages (its position)."""
_ROW_VERSION: Callable[[tuple[Any, ...]], int] = itemgetter(3)
"""The key of a stored row in ``read_stream`` pages (its version)."""


class _WouldBlock(Exception):
    """An inline attempt found the database busy; retry on the worker thread."""


class SQLiteEventStore(EventStore):
    """The event store in one SQLite file (or a private in-memory database).

    Args:
        path: The database file, or ``":memory:"`` for a store that lives as long as the object.
        upcasters: Applied on read to events and snapshots.
        max_event_bytes: Size limit of one encoded event (data plus meta).
        durability: ``"normal"`` (survives a process crash) or ``"full"`` (survives power loss).
        busy_timeout: Seconds a write waits for another process holding the write lock.
        create: Create the file and the store's tables when missing (the default). When false,
            a missing file or an empty database raises ``StoreNotFound`` and nothing is created.
        new_format: The format of a store this creates: 3 (the compact layout: about a
            quarter of the size) or 2 (the default for now; turnlog versions before the compact
            layout can open it). An existing store keeps its format (``turnlog migrate``
            copies one into a new store of format 3).

    A file the store creates is readable and writable by its owner only (mode 0600, less if
    the umask says so); SQLite gives its ``-wal`` and ``-shm`` files the same mode. Opening
    an existing store only reads its layout, so it never waits for another process's writer.

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

    capabilities: frozenset[str] = frozenset(
        {"gapless_positions", "cross_process_subscribe", "raw_copy", "redact", "tracking"}
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        upcasters: Upcasters | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        durability: Durability = "normal",
        busy_timeout: float = 5.0,
        create: bool = True,
        new_format: int = NEW_STORE_FORMAT,
    ) -> None:
        super().__init__(upcasters=upcasters, max_event_bytes=max_event_bytes)
        if durability not in ("normal", "full"):
            raise UsageError(f"durability must be 'normal' or 'full', not {durability!r}")
        target, in_memory = parse_target(os.fspath(path))
        self.path = target
        self.url = "sqlite:///:memory:" if in_memory else f"sqlite:///{target}"
        self.durability = durability
        self._in_memory = in_memory
        self._resolved: Path | None = None
        if in_memory:
            # A private database ends with its object, so it cannot be a migration's source or
            # target (a migration may be interrupted and resumed by another process).
            self.capabilities = self.capabilities - {"raw_copy"}
        self._busy_ms = max(0, int(busy_timeout * 1000))
        self._lock = threading.Lock()
        self._closed = False
        self._wake: anyio.Event | None = None
        self._checkpoint_pending = False
        self._wal_bytes = 0
        if not in_memory:
            if create:
                create_private(target)
            elif not os.path.exists(target):
                raise StoreNotFound(target, "no such file")
        # Past the check above, the file is never created by sqlite3 itself: a file that
        # vanished in between is an error, not a new world-readable store.
        self._conn = connect(
            target,
            busy_ms=self._busy_ms,
            in_memory=in_memory,
            durability=durability,
            create=create,
            page_size=COMPACT_PAGE_SIZE if create and new_format >= COMPACT_FORMAT else None,
        )
        # verify's own connection, opened by the first verify (on the worker thread)
        self._aux: StoreConnection | None = None
        try:
            init_schema(self._conn, target, self._busy_ms, create=create, new_format=new_format)
            self._store_id = read_store_id(self._conn)
            self.format_version = read_format(self._conn)
            """The format of the store's layout (``_sqlite_schema.FORMAT_VERSION``)."""
            # A format 1 store becomes format 2 on its first write (same layout, see ``bump_format``).
            self._old_format = self.format_version < TEXT_FORMAT
            attach(self._conn, self.format_version, target)
        except BaseException:
            self._conn.close()
            raise
        self._worker = Worker(f"turnlog-sqlite:{os.path.basename(target)}")
        # A store without AUTOINCREMENT (text stores made since the delete trigger) has no
        # ``sqlite_sequence`` page for a commit to write.
        counter = self._conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'")
        pages = _COMMIT_PAGES - 1 + int(counter.fetchone()[0] > 0)
        self._commit_bytes = pages * int(self._conn.execute("PRAGMA page_size").fetchone()[0])

    # ------------------------------------------------------------------ running jobs

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    @property
    def local_path(self) -> Path | None:
        # Resolved once: the connection keeps the file it opened, whatever the working
        # directory becomes, and a resolve() per run lease cost more than the lease itself.
        if self._in_memory:
            return None
        resolved = self._resolved
        if resolved is None:
            resolved = self._resolved = Path(self.path).resolve()
        return resolved

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
            if is_busy(exc):
                if not blocking:
                    raise _WouldBlock from exc
                raise StoreUnavailable(
                    f"{self.path}: the database stayed locked by another connection for "
                    f"{self._busy_ms} ms: {exc}"
                ) from exc
            raise damage_or_error(self.path, exc) from exc
        except sqlite3.DatabaseError as exc:
            raise damage_or_error(self.path, exc) from exc

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

    async def append_encoded(
        self, stream: str, events: Sequence[EncodedEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        self._check_open()
        entry = check_encoded(stream, events, expected_version, self.max_event_bytes)
        return (await self._write([entry]))[0]

    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        self._check_open()
        return await self._write(prepare_batch(entries, self.max_event_bytes))

    _group: GroupCommit[list[PreparedAppend], list[AppendResult]] | None = None
    """Combines the appends that go to the worker thread (see ``_write``); made on first use."""

    async def _write(self, entries: list[PreparedAppend]) -> list[AppendResult]:
        count = 0
        size = 0
        for entry in entries:
            count += len(entry.events)
            for ev in entry.events:
                size += len(ev.data) + len(ev.meta)
        inline = self.durability == "normal" and count <= _INLINE_MAX_EVENTS and size <= _INLINE_MAX_BYTES
        if inline:
            results = await self._run(lambda blocking: self._write_sync(entries, blocking), inline=True)
        else:
            # A write that goes to the worker thread waits there anyway (under "full" for its
            # fsync): the appends queued meanwhile share one transaction and one commit.
            if self._group is None:
                # imported here: a store that is only read (``turnlog show``) never needs it
                from ._group_commit import GroupCommit

                self._group = GroupCommit(self._commit_group)
            results = await self._group.submit(entries)
        self._written(count, size)
        return results

    async def _commit_group(
        self, units: list[list[PreparedAppend]]
    ) -> list[list[AppendResult] | BaseException]:
        return await self._run(lambda blocking: self._write_group_sync(units), inline=False)

    def _write_group_sync(
        self, units: list[list[PreparedAppend]]
    ) -> list[list[AppendResult] | BaseException]:
        """Write each unit under its own savepoint in one transaction: one fails alone."""
        outcomes: list[list[AppendResult] | BaseException] = []
        with write_transaction(self._conn) as conn:
            self._before_write(conn)
            for unit in units:
                conn.execute("SAVEPOINT turnlog_unit")
                try:
                    outcomes.append(
                        insert_entries(conn, unit, self.upcasters, self.path, savepoint="turnlog_unit")
                    )
                except StoreError as exc:
                    self._conn.layout.discard()
                    conn.execute("ROLLBACK TO turnlog_unit")
                    outcomes.append(exc)
                conn.execute("RELEASE turnlog_unit")
        return outcomes

    def _written(self, count: int, size: int) -> None:
        """After a commit of ``count`` events: wake subscribers, checkpoint the WAL now and then."""
        self._notify()
        if not self._in_memory and self.durability == "normal":
            # WAL frames are whole pages: a commit writes at least one page of each b-tree it
            # touches (the events table, its two indexes, the AUTOINCREMENT counter if any), however
            # small its rows. Counting payload bytes alone under-ran the WAL's real growth by
            # about 30x for single-event appends (57 MB of WAL for 3,000 appends of 1.6 MB).
            self._wal_bytes += size + 200 * count + self._commit_bytes
            if self._wal_bytes >= _CHECKPOINT_WAL_BYTES:
                self._wal_bytes = 0
                self._schedule_checkpoint()

    def _write_sync(self, entries: list[PreparedAppend], blocking: bool) -> list[AppendResult]:
        with write_transaction(self._conn) as conn:
            self._before_write(conn)
            return insert_entries(conn, entries, self.upcasters, self.path)

    def _before_write(self, conn: sqlite3.Connection) -> None:
        """In a write transaction, before anything is written: a store id and this format if need be."""
        if self._store_id is None or self._old_format:  # a store made by an older turnlog
            self._first_write(conn)

    def _first_write(self, conn: sqlite3.Connection) -> None:
        """On the first write to a store made by an older turnlog: a store id, this format."""
        self._store_id = ensure_store_id(conn)
        if self._old_format:
            bump_format(conn)
            self._old_format = False

    # ------------------------------------------------------------------ tracking (capability "tracking")

    async def save_tracking(self, consumer: str, position: int) -> None:
        tracking = check_tracking(Tracking(consumer, position))

        def run(blocking: bool) -> None:
            with write_transaction(self._conn) as conn:
                self._before_write(conn)
                record_tracking(conn, tracking)

        await self._run(run, inline=self.durability == "normal")

    async def tracking_position(self, consumer: str) -> int | None:
        check_tracking(Tracking(consumer, 0))
        return await self._run(lambda blocking: tracking_position(self._conn, consumer))

    async def append_tracked(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]], tracking: Tracking
    ) -> list[AppendResult]:
        self._check_open()
        prepared = prepare_batch(entries, self.max_event_bytes)
        tracking = check_tracking(tracking)
        count = sum(len(entry.events) for entry in prepared)
        size = sum(len(ev.data) + len(ev.meta) for entry in prepared for ev in entry.events)

        def run(blocking: bool) -> list[AppendResult]:
            with write_transaction(self._conn) as conn:
                # A re-send stores nothing, its tracking included (the original recorded it).
                original = find_resent(conn, prepared, self.upcasters)
                if original is not None:
                    return original
                self._before_write(conn)
                record_tracking(conn, tracking)
                return insert_entries(conn, prepared, self.upcasters, self.path)

        inline = self.durability == "normal" and count <= _INLINE_MAX_EVENTS and size <= _INLINE_MAX_BYTES
        results = await self._run(run, inline=inline)
        self._written(count, size)
        return results

    # ------------------------------------------------------------------ reads

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
        check_stream_name(stream)
        check_read_range("from_version", from_version, "to_version", to_version, limit)
        order = "DESC" if backwards else "ASC"
        layout = self._conn.layout
        version = layout.version_col
        sql = layout.page_select(
            f"{layout.stream_is()} AND {version} >= ? AND {version} <= ?",
            f"ORDER BY {version} {order} LIMIT ?",
        )

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[tuple[Any, ...]], bool]:
            return await self._run(
                rows_page(self._conn, sql, stream, low, _NO_BOUND if high is None else high, count)
            )

        pages = read_pages(
            fetch, from_version, to_version, key=_ROW_VERSION, limit=limit, backwards=backwards
        )
        upcasters = self.upcasters
        convert = layout.row if layout.compact else None
        async for page in pages:
            for row in page:
                yield decode_event(upcasters, row if convert is None else convert(row))

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
        layout = self._conn.layout
        filters, params = read_filters(types, stream_prefix, layout)
        order = "DESC" if backwards else "ASC"
        position = layout.position_col
        sql = layout.page_select(
            f"{position} >= ? AND {position} <= ?{filters}", f"ORDER BY {position} {order} LIMIT ?"
        )

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[tuple[Any, ...]], bool]:
            return await self._run(
                rows_page(self._conn, sql, low, _NO_BOUND if high is None else high, *params, count)
            )

        pages = read_pages(
            fetch, from_position, to_position, key=_ROW_POSITION, limit=limit, backwards=backwards
        )
        upcasters = self.upcasters
        convert = layout.row if layout.compact else None
        async for page in pages:
            for row in page:
                yield decode_event(upcasters, row if convert is None else convert(row))

    async def stream_version(self, stream: str) -> int:
        check_stream_name(stream)

        def run(blocking: bool) -> int:
            row = self._conn.execute(self._conn.layout.stream_version_sql(), (stream,)).fetchone()
            return row[0] or 0

        return await self._run(run)

    async def head(self) -> int:
        return await self._run(self._head_sync)

    def _head_sync(self, blocking: bool) -> int:
        return self._conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        check_stream_prefix(prefix)
        sql, params = self._conn.layout.list_streams_sql(prefix)

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
        # Appends of this object wake us at once; other processes are seen by polling.
        follow = follow_log(
            self,
            from_position,
            types=wanted,
            stream_prefix=stream_prefix,
            next_wake=self._next_wake,
            poll_interval=_POLL_INTERVAL,
        )
        async with aclosing(follow) as events:
            async for event in events:
                yield event

    def _next_wake(self) -> anyio.Event:
        """The event the next append of this object sets."""
        if self._wake is None:
            import anyio  # here: a store that is only read (``run_inline``) never imports it

            self._wake = anyio.Event()
        return self._wake

    # ------------------------------------------------------------------ verify

    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        """Check the hash chains and snapshots, and the database file when ``stream`` is None.

        Checking the whole store runs SQLite's ``PRAGMA integrity_check`` (``quick_check``
        when ``quick``: faster, but it does not compare indexes with their tables);
        ``VerifyReport.checks`` says which ran.

        Damage never raises: a page SQLite cannot read, a row of the wrong types or text that
        is not UTF-8 becomes a ``Problem``.
        """
        self._check_open()
        if stream is not None:
            check_stream_name(stream)
        return await self._worker.call(lambda: self._verify_sync(stream, quick))

    def _verify_sync(self, stream: str | None, quick: bool) -> VerifyReport:
        if self._aux is None and not self._in_memory:
            # A connection of its own, so that a long walk never holds the store's; opened
            # here, not when the store opens: most stores are never verified.
            with contextlib.suppress(StoreError):
                aux = connect(self.path, busy_ms=self._busy_ms, in_memory=False, durability=self.durability)
                attach(aux, self.format_version, self.path)
                self._aux = aux
        if self._aux is not None:
            return verify_on(self._aux, stream, quick)
        with self._lock:
            return verify_on(self._conn, stream, quick)

    # ------------------------------------------------------------------ redaction

    async def _redact(self, targets: list[Redaction]) -> list[RedactionResult]:
        results = await self._run(
            lambda blocking: redact_sync(
                self._conn,
                targets,
                path=self.path,
                in_memory=self._in_memory,
                upcasters=self.upcasters,
                before_write=self._before_write,
            ),
            inline=False,
        )
        self._written(len(results), 0)
        return results

    async def upgrade_chain(self, *, actor: str = "") -> list[str]:
        return await self._run(
            lambda blocking: upgrade_sync(
                self._conn, actor, path=self.path, upcasters=self.upcasters, before_write=self._before_write
            ),
            inline=False,
        )

    async def compact(self) -> None:
        """Erase freed content: checkpoint and truncate the WAL, ``VACUUM``, truncate again."""
        if not self._in_memory:
            await self._run(lambda blocking: erase_freed(self._conn, self.path), inline=False)

    # ------------------------------------------------------------------ snapshots

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        self._check_open()
        snap = prepare_snapshot(snapshot, self.max_event_bytes)
        now = time.time_ns() // 1000

        def run(blocking: bool) -> None:
            with write_transaction(self._conn) as conn:
                meta = bind_snapshot(snap, self._conn.layout.event_hash(conn, snap.stream, snap.version))
                layout = self._conn.layout
                conn.execute(
                    layout.upsert_snapshot,
                    layout.snapshot_params(
                        (snap.stream, snap.type, snap.version, snap.schema, snap.data, meta, now)
                    ),
                )

        inline = self.durability == "normal" and len(snap.data) <= _INLINE_MAX_BYTES
        await self._run(run, inline=inline)

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        check_stream_name(stream)
        sql = f"{self._conn.layout.bound_snapshots} WHERE s.stream = ?"
        params: list[Any] = [stream]
        if at_or_before_version is not None:
            sql += " AND s.version <= ?"
            params.append(at_or_before_version)
        if type is not None:
            sql += " AND s.type = ?"
            params.append(type)
        sql += " ORDER BY s.version DESC, s.recorded_at DESC"

        def run(blocking: bool) -> Snapshot | None:
            # The newest snapshot that is intact and stands on this log; the rows are read
            # one by one, so normally only the first is.
            cursor = self._conn.execute(sql, params)
            convert = self._conn.layout.snapshot_row
            try:
                return first_intact(self.upcasters, map(convert, cursor))
            finally:
                cursor.close()

        return await self._run(run)

    async def delete_snapshots(self, stream: str | None = None) -> int:
        if stream is not None:
            check_stream_name(stream)

        def run(blocking: bool) -> int:
            with write_transaction(self._conn) as conn:
                if stream is None:
                    return conn.execute("DELETE FROM snapshots").rowcount
                return conn.execute("DELETE FROM snapshots WHERE stream = ?", (stream,)).rowcount

        return await self._run(run, inline=self.durability == "normal")

    # ------------------------------------------------------------------ raw copy (capability "raw_copy")

    async def raw_events(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[RawEvent]:
        """Up to ``limit`` stored events after ``after_position``, as stored (see ``RawCopy.raw_events``)."""
        sql, params = self._position_page(after_position, limit, types, to_position, stored=False)
        layout = self._conn.layout
        convert = layout.row if layout.compact else None

        def run(blocking: bool) -> list[RawEvent]:
            rows = layout.page(self._conn, self._conn.execute(sql, params).fetchall())
            if convert is None:
                return [raw_event(row) for row in rows]
            return [raw_event(convert(row)) for row in rows]

        return await self._run(run, inline=limit <= _PAGE)

    async def read_rows(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[StoredRow]:
        """Up to ``limit`` stored events after ``after_position``, as tuples (see ``EventStore.read_rows``)."""
        sql, params = self._position_page(after_position, limit, types, to_position, stored=True)
        layout = self._conn.layout

        def run(blocking: bool) -> list[StoredRow]:
            return layout.stored_rows(self._conn.execute(sql, params).fetchall())

        return await self._run(run, inline=limit <= _PAGE)

    def _position_page(
        self,
        after_position: int,
        limit: int,
        types: Iterable[str] | None,
        to_position: int | None,
        *,
        stored: bool,
    ) -> tuple[str, list[Any]]:
        """The SQL and parameters of one page of the log by position (``raw_events``, ``read_rows``).

        ``stored``: the columns of a ``StoredRow`` (``read_rows``), else those of a ``RawEvent``.
        """
        self._check_open()
        check_raw_range(after_position, to_position, limit)
        layout = self._conn.layout
        filters, params = read_filters(types, None, layout)
        position = layout.position_col
        select = layout.stored_select if stored else layout.page_select
        sql = select(f"{position} > ? AND {position} <= ?{filters}", f"ORDER BY {position} LIMIT ?")
        return sql, [after_position, _NO_BOUND if to_position is None else to_position, *params, limit]

    async def raw_snapshots(self) -> list[RawSnapshot]:
        """Every stored snapshot, ordered by stream, type and version."""
        layout = self._conn.layout
        sql = f"SELECT {layout.snapshot_columns} FROM snapshots ORDER BY stream, type, version"

        def run(blocking: bool) -> list[RawSnapshot]:
            return [RawSnapshot(*layout.snapshot_row(row)[:7]) for row in self._conn.execute(sql)]

        return await self._run(run, inline=False)

    async def import_raw(self, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot] = ()) -> None:
        """Store already-hashed events and snapshots unchanged, in one transaction.

        Raises:
            InvalidEventError: an event does not continue its stream (version and ``prev_hash``)
                or its position is not after the head; nothing is written.
        """
        self._check_open()
        events, snapshots = list(events), list(snapshots)
        check_raw_events(events)

        def run(blocking: bool) -> None:
            with write_transaction(self._conn) as conn:
                if self._old_format:
                    self._first_write(conn)
                insert_raw(conn, events, snapshots)

        await self._run(run, inline=False)
        if events:
            self._written(len(events), sum(len(e.data) + len(e.meta) for e in events))

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
        if not self._in_memory and self._resolved is not None:
            # The run leases' directory, kept while the store was open (``_leases``); resolved
            # means a lease may have made it. Left when another lease of any process is in it.
            remove_lease_dir(self._resolved)
        if not self._worker.started and self._wal_is_empty():
            # Nothing is queued and the WAL holds no frame, so closing checkpoints nothing:
            # it is closed here rather than on a thread started only for that (a store that
            # was only read, like ``turnlog show``'s). Should another process write and close
            # in between, this close checkpoints what it wrote: a wait, never a wrong result.
            self._close_connections()
            return
        # Closing the last connection checkpoints the WAL (an fsync): do it off the loop,
        # after every job already queued, as the worker thread's last job.
        await self._worker.finish(self._close_connections)

    def _wal_is_empty(self) -> bool:
        if self._in_memory:
            return True
        try:
            return os.stat(f"{self.path}-wal").st_size == 0
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def _close_connections(self) -> None:
        with self._lock:
            if self._aux is not None:
                self._aux.close()
            self._conn.close()

    def __repr__(self) -> str:
        return f"SQLiteEventStore({self.path!r}, durability={self.durability!r})"
