"""The PostgreSQL backend: the same store contract on a server (psycopg 3, a connection pool).

Why this module is over 500 lines: it is the class, ``PostgresEventStore``, whose state (the
stream heads it remembers, the id of its last append transaction) its appends and global
reads share, so they stay together. The rest is split
by what it does, as the SQLite backend is: connections and the first open in
``_postgres_pool``, planning appends and importing in ``_postgres_write``, read queries and
``verify`` in ``_postgres_read``, LISTEN and the subscribe loop in ``_postgres_listen``; the
statements in ``_postgres_sql``, tracking in ``_postgres_port``, redaction in
``_postgres_redact``. Those modules never import this one.

Ordering without serializing writers. Appends to different streams run in parallel: each
transaction checks ``expected_version`` against the heads of its streams and inserts, and
``UNIQUE (stream, version)`` settles a race on one stream (the loser re-reads and gets its
``ConcurrencyError``, or a new version under ``ANY``). The heads are those this store object
remembers, confirmed by the insert statement itself (one statement per append), or read by
a statement before it when unknown or wrong. Positions come from a sequence, so
transactions commit in any order and a rolled-back one leaves a gap. What keeps readers from
skipping an event:

1. Each transaction takes its transaction id (``pg_current_xact_id()``, stored in the row's
   ``xid``) and its whole block of positions in one statement, under an advisory lock held
   for that statement only (not through the commit). So between two append transactions,
   the one with the higher id has the higher positions.
2. Global readers (``read_all``, ``subscribe``, ``head``, ``raw_events``) only read rows whose
   ``xid`` is below the oldest transaction still running in their snapshot
   (``pg_snapshot_xmin(pg_current_snapshot())``). Such a row is committed, and so is every
   row of a lower position (its transaction id is lower still): once a reader sees position
   ``k + 1``, nothing at or below ``k`` can appear later.

A store object also sees its own appends in global reads as soon as ``append`` returns: a
global read first waits, when needed, until the transactions older than its last append have
ended. ``docs/postgres.md`` discusses the choice and what it costs.

Group commit: concurrent appends from one process share one transaction (``GroupCommit``);
each is checked on its own before anything is inserted, so one that fails fails alone.

URL: ``postgresql://user:password@host:port/dbname?schema=NAME&pool_size=N``. ``schema`` (default
``public``) names the PostgreSQL schema holding the tables and ``pool_size`` bounds the pool
(default 10); every other query parameter goes to libpq unchanged.
"""

from __future__ import annotations

import struct
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import anyio

from ._base import EventStore
from ._decoding import decode_event
from ._encoder import check_encoded
from ._encoding import to_micros
from ._errors import StoreError, StoreUnavailable
from ._group_commit import GroupCommit
from ._paging import BY_POSITION, BY_VERSION, read_pages
from ._postgres_listen import SUBSCRIBE_PAGE, follow, retrying
from ._postgres_pool import PgPool, close_quietly, prepare_appends
from ._postgres_port import TrackingSql, planned_result, record_tracking, resent_rows_query, stored_row
from ._postgres_read import (
    bound_snapshots,
    check_bound,
    live_query,
    range_query,
    raw_events_of,
    stored_rows_of,
    stored_rows_query,
    verify_on,
)
from ._postgres_redact import redact_postgres
from ._postgres_sql import (
    FORMAT_VERSION,
    MANY_STATEMENT,
    ONE_FORMATS,
    ONE_KEYS,
    ONE_STATEMENT,
    ROW_COLUMNS,
    SNAPSHOT_COLUMNS,
    masked,
)
from ._postgres_write import (
    GROUP_FORMATS,
    RACE_ATTEMPTS,
    Plan,
    _Raced,
    check_uuid,
    group_params,
    import_events,
    import_snapshots,
    plan_from_heads,
    plan_from_lookup,
)
from ._raw import RAW_PAGE, RawEvent, RawSnapshot, StoredRow, check_raw_events, check_raw_range
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
from ._results import append_result
from ._snapshots import bind_snapshot, first_intact, prepare_snapshot
from ._upcasting import Upcasters
from ._validation import (
    DEFAULT_MAX_EVENT_BYTES,
    PreparedAppend,
    check_expected_version,
    check_read_range,
    check_stream_name,
    check_stream_prefix,
    check_tracking,
    check_type_filter,
    prepare_batch,
    prepare_events,
)

__all__ = ["FORMAT_VERSION", "PostgresEventStore"]

_OWN_WRITES_TIMEOUT = 30.0
"""How long a global read waits for older transactions to end so that it sees this store's appends."""
_ONE_STATEMENT = ONE_STATEMENT.encode()
_MANY_STATEMENT = MANY_STATEMENT.encode()
_HEADS_KEPT = 10_000
"""How many stream heads a store object remembers for one-statement appends."""


class PostgresEventStore(EventStore):
    """An event store in a PostgreSQL database, shared by any number of processes and hosts.

    Positions are strictly increasing and a global reader never skips one, but they may have
    gaps (see the module docstring). Subscribers are woken by LISTEN/NOTIFY and re-query on a
    timer as well, so a lost notification delays an event by at most ``poll_interval`` seconds
    and never loses it.

    Example::

        async with PostgresEventStore("postgresql://postgres@127.0.0.1/test?schema=demo") as store:
            await store.append("branch-1", [NewEvent("message.added", {"content": "hi"})])

    Args:
        url: ``postgresql://`` or ``postgres://`` URL; ``schema`` and ``pool_size`` query
            parameters are read here, the others go to libpq.
        upcasters: Upcasters applied on read.
        max_event_bytes: Limit on the encoded size of one event.
        poll_interval: Seconds a subscriber waits for a notification before re-querying.
        create: Create the tables when the schema has none (the default). When false, a
            schema without turnlog's tables raises ``StoreNotFound`` on first use and
            nothing is created.
    """

    capabilities: frozenset[str] = frozenset({"cross_process_subscribe", "raw_copy", "redact", "tracking"})

    def __init__(
        self,
        url: str,
        *,
        upcasters: Upcasters | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        poll_interval: float = 1.0,
        create: bool = True,
    ) -> None:
        super().__init__(upcasters=upcasters, max_event_bytes=max_event_bytes)
        self._db = PgPool(url, create=create)
        self._pg = self._db.pg
        from psycopg.generators import execute, fetch_many  # psycopg is there: PgPool imported it

        self._execute = execute
        self._fetch_many = fetch_many
        self._pipeline_sync = int(self._pg.pq.ExecStatus.PIPELINE_SYNC)
        self._fatal_error = int(self._pg.pq.ExecStatus.FATAL_ERROR)
        self._tuples_ok = int(self._pg.pq.ExecStatus.TUPLES_OK)
        self._in_error = int(self._pg.pq.TransactionStatus.INERROR)
        self.url = url
        self.schema = self._db.schema
        self._sql = self._db.sql
        self.poll_interval = poll_interval
        self._group: GroupCommit[list[PreparedAppend], list[AppendResult]] = GroupCommit(self._commit_group)
        self._own_xid = 0  # the newest transaction id of an append of this store object
        self._xmin_seen = 0  # the highest snapshot xmin this store object has seen
        # The (version, hash) of the streams this store object last appended to or read the
        # head of: a guess, checked by the server at the insert (see _commit_once).
        self._heads: dict[str, tuple[int, str]] = {}

    def __repr__(self) -> str:
        return f"PostgresEventStore({masked(self.url)!r})"

    # -- connections (see _postgres_pool) ----------------------------------------------

    async def _ensure_open(self) -> Any:
        pool = await self._db.ensure_open()
        self._store_id = self._db.store_id
        return pool

    @asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[Any]:
        await self._ensure_open()
        async with self._db.connection(action) as conn:
            yield conn

    async def __aenter__(self) -> PostgresEventStore:
        await self._ensure_open()
        return self

    async def close(self) -> None:
        await self._db.close()

    # -- appends -----------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        # append_batch's checks for one entry (the ids of one entry are checked for repeats by
        # prepare_events), without its loop over entries.
        name, encoded = prepare_events(stream, events, self.max_event_bytes)
        entry = PreparedAppend(name, encoded, check_expected_version(name, expected_version))
        (result,) = await self._append_prepared([entry])
        return result

    async def append_encoded(
        self, stream: str, events: Sequence[EncodedEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        entry = check_encoded(stream, events, expected_version, self.max_event_bytes)
        (result,) = await self._append_prepared([entry])
        return result

    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        return await self._append_prepared(prepare_batch(entries, self.max_event_bytes))

    async def _append_prepared(self, prepared: list[PreparedAppend]) -> list[AppendResult]:
        """Append validated entries atomically (``append``, ``append_batch``, ``append_encoded``)."""
        for entry in prepared:
            for index, event in enumerate(entry.events):
                check_uuid(event.id, entry.stream, index)
        if self._db.closed:
            raise StoreError("the store is closed")
        return await self._with_events(await self._group.submit(prepared))

    async def _commit_group(self, units: list[list[PreparedAppend]]) -> list[Any]:
        """Store concurrent appends in one transaction; one outcome (results or error) each."""
        try:
            outcomes, deferred = await self._commit_once(units)
        except _Raced:
            # Another connection stored one of these versions or ids first. Which unit lost
            # is unknown, so each goes again in its own transaction.
            return [await self._commit_alone(unit) for unit in units]
        for index in deferred:
            outcomes[index] = await self._commit_alone(units[index])
        return outcomes

    async def _commit_alone(self, unit: list[PreparedAppend]) -> Any:
        for _ in range(RACE_ATTEMPTS):
            try:
                outcomes, _deferred = await self._commit_once([unit])
            except _Raced:
                continue  # the next attempt reads the new heads: ConcurrencyError or a new version
            return outcomes[0]
        streams = ", ".join(repr(entry.stream) for entry in unit)
        return StoreUnavailable(
            f"PostgreSQL: the append to {streams} lost the race for the next version "
            f"{RACE_ATTEMPTS} times in a row to other writers"
        )

    async def _commit_once(self, units: list[list[PreparedAppend]]) -> tuple[list[Any], list[int]]:
        """Check each unit, insert the good ones: one statement, or two when the heads are unknown.

        When this store object knows the head of every stream (it wrote or read it last) and
        the units pass against those heads, the insert goes at once, gated on the server on
        the heads being unchanged and no id being stored (``Sql.insert_checked``). Otherwise,
        or when the gate is shut, the heads and stored ids are read first, as a separate
        statement. Those reads need no transaction of their own: what they find may change
        before the insert, and then the insert fails on a unique constraint (``_Raced``) and
        the units go again. The insert is one statement, so it commits in its own round trip.

        Raises:
            _Raced: a unique constraint on (stream, version) or the id failed at the insert.
        """
        now = time.time_ns() // 1000  # to_micros(datetime.now(UTC)), in one call
        guess = plan_from_heads(self._heads, self._sql, units, now)
        db = self._db
        if self._store_id is None:
            await self._ensure_open()
        # The pool's context managers cost a lone append more than the rest of its checkout.
        conn = await db.acquire("append")
        try:
            return await self._commit_on(conn, units, now, guess)
        except BaseException as exc:
            error = db.failed("append", exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            await db.release(conn)

    async def _commit_on(
        self, conn: Any, units: list[list[PreparedAppend]], now: int, guess: Any
    ) -> tuple[list[Any], list[int]]:
        """``_commit_once`` on a pooled connection."""
        reserved = None
        notified = False
        if guess is not None:
            plan, tips, query, params = guess
            # Insert, commit and notify in one round trip (the notification of a shut gate
            # wakes subscribers for nothing; they find nothing new).
            notified = self._one_trip
            if notified and query is self._sql.insert_checked:
                try:
                    params = group_params(plan.rows, params[2], params[3], plan.columns)
                    query = self._sql.insert_many
                except struct.error:
                    # A value beyond its column's type (a schema above 2**31 - 1): the
                    # server refuses it in the statement with its psycopg parameters.
                    notified = False
            reserved = await self._store(conn, query, params, tips, notify=notified)
        if reserved is None:
            notified = False
            plan, tips = await plan_from_lookup(conn, self._sql, units, now)
            if not plan.rows:
                self._remember(tips)
                return plan.outcomes, plan.deferred
            params = [plan.rows, plan.rows, *plan.columns]
            reserved = await self._store(conn, self._sql.insert, params, tips)
            if reserved is None:
                raise StoreError("PostgreSQL: the append statement returned no row")
        if not notified:
            await self._notify(conn, reserved[1])
        return self._committed(plan, tips, reserved), plan.deferred

    def _committed(
        self, plan: Plan, tips: dict[str, tuple[int, str]], reserved: tuple[Any, ...]
    ) -> list[Any]:
        """After a commit: keep the new heads and the transaction id; each unit's outcome.

        ``reserved`` is the insert's row (transaction id, last position); the inserted units
        get their results, the others keep the outcome the plan gave them.
        """
        self._remember(tips)
        xid_text, last = reserved[:2]
        self._own_xid = max(self._own_xid, int(xid_text))
        first = last - plan.rows + 1
        outcomes = plan.outcomes
        for index, spans in plan.inserts:
            outcomes[index] = [
                planned_result(plan.columns, first, offset, count, version, self.upcasters)
                for offset, count, version in spans
            ]
        return outcomes

    async def _store(
        self, conn: Any, query: str, params: Any, tips: dict[str, tuple[int, str]], *, notify: bool = False
    ) -> tuple[Any, ...] | None:
        """Run an append statement; its row (transaction id, last position), None if its gate was shut.

        With ``notify`` (``query`` is ``Sql.insert_one``), subscribers are woken after its commit
        in the same round trip.
        """
        errors = self._pg.errors
        try:
            if notify:
                if query is self._sql.insert_one:
                    return await self._insert_notified(conn, params)
                return await self._one_trip_insert(conn, _MANY_STATEMENT, params, GROUP_FORMATS)
            if query is self._sql.insert_one:
                params = dict(zip(ONE_KEYS, params, strict=True))
            return await self._insert(conn, query, params)
        except errors.UniqueViolation as exc:
            if exc.diag.constraint_name == "events_pkey":
                raise StoreError(
                    "PostgreSQL: a reserved position is taken already: positions were written "
                    f"without the sequence {self._sql.sequence} ({exc})"
                ) from exc
            for stream in tips:
                self._heads.pop(stream, None)
            raise _Raced from exc
        except BaseException:
            # The statement may have failed holding the position lock, a session lock:
            # drop the connection rather than return it to the pool with the lock.
            await close_quietly(self._pg, conn)
            raise

    def _remember(self, tips: dict[str, tuple[int, str]]) -> None:
        """Keep the heads just written or read, for the next append's plan (a bounded cache)."""
        if len(self._heads) + len(tips) > _HEADS_KEPT:
            self._heads.clear()
        self._heads.update(tips)

    async def _notify(self, conn: Any, position: int) -> None:
        """Wake subscribers after a commit; a lost notification only delays them (``poll_interval``)."""
        try:
            await conn.execute(self._sql.notify, [str(position)])
        except self._pg.Error:
            # The append is committed: its caller must learn that, not this failure. The
            # connection, if broken, is discarded by the pool.
            pass

    @property
    def _one_trip(self) -> bool:
        """Whether appends planned from known heads go in one round trip (``_one_trip_insert``).

        A subclass that replaces the ``_insert`` seam (tests holding append transactions open)
        gets it called for every append, each followed by its own notification.
        """
        return type(self)._insert is PostgresEventStore._insert

    async def _insert_notified(self, conn: Any, values: Sequence[Any]) -> tuple[Any, ...] | None:
        """``Sql.insert_one`` in its own transaction, then a notification: one round trip.

        Returns the statement's row (transaction id, last position), None if its gate was shut.
        """
        stream, version, event_id, type_, schema, data, meta, recorded_at, prev_hash, digest = values
        params = (stream.encode(), b"%d" % version, event_id.encode(), type_.encode(), b"%d" % schema, data,
                  meta, b"%d" % recorded_at, prev_hash.encode(), digest.encode())  # fmt: skip
        return await self._one_trip_insert(conn, _ONE_STATEMENT, params, ONE_FORMATS)

    async def _one_trip_insert(
        self, conn: Any, statement: bytes, params: Sequence[bytes], formats: Sequence[int]
    ) -> tuple[Any, ...] | None:
        """A prepared insert (``Sql.insert_one`` or ``Sql.insert_many``) committed and notified in one round trip.

        Returns the statement's row (transaction id, last position), None if its gate was shut.
        BEGIN, the prepared insert, COMMIT and NOTIFY go to libpq in pipeline mode under the
        connection's lock, with one Sync: one write, and one read for the four answers (a lone
        append spends most of its client time in the driver otherwise; a group would pay a
        second round trip for its notification).

        Raises:
            _Raced: the insert committed but the notification failed after it (its row is
                lost with the error): the units go again and find their events stored.
        """
        pg = self._pg
        pgconn = conn.pgconn
        for attempt in range(2):
            async with conn.lock:
                results = await self._pipeline(conn, pgconn, statement, params, formats)
            statuses = [res.status for res in results]
            if self._fatal_error not in statuses:
                break
            failed = statuses.index(self._fatal_error)
            exc = pg.errors.error_from_result(results[failed], encoding="utf-8")
            if failed >= 3:  # the insert is committed (the results: BEGIN, insert, COMMIT, NOTIFY)
                if isinstance(exc, pg.errors.InvalidSqlStatementName):
                    await prepare_appends(pg, conn, self._sql)
                await self._after_failed_notify(conn, exc)
            if pgconn.transaction_status == self._in_error:
                await conn.rollback()  # the insert failed inside BEGIN: end that transaction
            if attempt or not isinstance(exc, pg.errors.InvalidSqlStatementName):
                raise exc
            # psycopg ends every ROLLBACK (or DROP, ALTER) on a connection where it prepared
            # statements of its own with DEALLOCATE ALL, ours included: prepare them again.
            await prepare_appends(pg, conn, self._sql)
        res = results[1]
        if res.status != self._tuples_ok:
            raise StoreError(f"PostgreSQL: unexpected answer to an append ({len(results)} results)")
        if not res.ntuples:
            return None
        return res.get_value(0, 0).decode(), int(res.get_value(0, 1))

    async def _pipeline(
        self, conn: Any, pgconn: Any, statement: bytes, params: Sequence[bytes], formats: Sequence[int]
    ) -> list[Any]:
        """Send BEGIN, the prepared insert, COMMIT, NOTIFY and a Sync; their results and the Sync's."""
        (begin, _), (commit, _), (notify, _), _many = self._sql.one_trip_statements
        pgconn.enter_pipeline_mode()
        try:
            pgconn.send_query_prepared(begin, None)
            pgconn.send_query_prepared(statement, params, formats)
            pgconn.send_query_prepared(commit, None)
            pgconn.send_query_prepared(notify, None)
            pgconn.pipeline_sync()
            results: list[Any] = await conn.wait(self._execute(pgconn))
            # The server answers all five after the Sync, at once: the rest is read already
            # (unless it came in more than one packet, then fetch_many waits for it). Between
            # the results of two queries, libpq returns one None.
            for _ in range(16):
                if results and results[-1].status == self._pipeline_sync:
                    return results
                if pgconn.is_busy():
                    results += await conn.wait(self._fetch_many(pgconn))
                elif (res := pgconn.get_result()) is not None:
                    results.append(res)
            raise StoreError(f"PostgreSQL: unexpected answer to an append ({len(results)} results)")
        finally:
            try:
                pgconn.exit_pipeline_mode()
            except self._pg.Error:
                pass  # results left unread (the connection failed): the caller drops the connection

    async def _after_failed_notify(self, conn: Any, exc: BaseException) -> None:
        """The insert of ``_insert_notified`` committed and its notification failed: ``_Raced``."""
        # Global reads must still wait for it: take every transaction id handed out so far as
        # this one's.
        query = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"
        xmax = await (await conn.execute(query)).fetchone()
        self._own_xid = max(self._own_xid, int(xmax[0]) - 1)
        raise _Raced from exc

    async def _insert(self, conn: Any, query: str, params: Any) -> tuple[Any, ...] | None:
        """Run an append statement (its own transaction in autocommit); return its row, if any.

        A seam for tests that hold append transactions open.
        """
        row = await (await conn.execute(query, params)).fetchone()
        return None if row is None else tuple(row)

    # -- reads -------------------------------------------------------------------------

    async def _fetch(self, action: str, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self._connection(action) as conn:
            rows: list[tuple[Any, ...]] = await (await conn.execute(query, params)).fetchall()
            return rows

    async def _fetch_global(self, action: str, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run a read of the global log (rows filtered by ``Sql.settled``) that sees this store's appends."""
        async with self._connection(action) as conn:
            if self._own_xid and self._own_xid >= self._xmin_seen:
                await self._await_own_writes(conn, action)
            rows: list[tuple[Any, ...]] = await (await conn.execute(query, params)).fetchall()
            return rows

    async def _await_own_writes(self, conn: Any, action: str) -> None:
        """Wait until no transaction older than this store's last append is running.

        Global readers only see rows whose transaction is older than every running one, so
        right after an append, an older transaction still in flight (of any client of the
        server) would hide it. Usually no wait at all: one short query.
        """
        started = anyio.current_time()
        pause = 0.001
        while True:
            xmin = int((await (await conn.execute(self._sql.xmin)).fetchone())[0])
            self._xmin_seen = max(self._xmin_seen, xmin)
            if xmin > self._own_xid:
                return
            if anyio.current_time() - started > _OWN_WRITES_TIMEOUT:
                raise StoreUnavailable(
                    f"PostgreSQL: {action} waited {_OWN_WRITES_TIMEOUT:g} s for transaction {xmin} "
                    "to end (global reads show an event once every older transaction has ended; "
                    "see pg_stat_activity.backend_xid)"
                )
            await anyio.sleep(pause)
            pause = min(pause * 2, 0.05)

    async def _fetch_events(
        self, action: str, query: str, params: Sequence[Any], count: int, *, log: bool = False
    ) -> tuple[list[RecordedEvent], bool]:
        """One page of decoded events (of the global ``log``?), and whether the range ran out of them."""
        rows = await (self._fetch_global if log else self._fetch)(action, query, params)
        return [decode_event(self.upcasters, row) for row in rows], len(rows) < count

    async def read_stream(
        self,
        stream: str,
        from_version: int = 1,
        to_version: int | None = None,
        *,
        backwards: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        check_stream_name(stream)
        check_read_range("from_version", from_version, "to_version", to_version, limit)
        order = "DESC" if backwards else "ASC"

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[RecordedEvent], bool]:
            where = "stream = %s AND version >= %s"
            params: list[Any] = [stream, low]
            if high is not None:
                where += " AND version <= %s"
                params.append(high)
            query = (
                f"SELECT {ROW_COLUMNS} FROM {self._sql.events} WHERE {where} "
                f"ORDER BY version {order} LIMIT {count}"
            )
            return await self._fetch_events("read_stream", query, params, count)

        pages = read_pages(
            fetch, max(from_version, 1), to_version, key=BY_VERSION, limit=limit, backwards=backwards
        )
        async for page in pages:
            for event in page:
                yield event

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
        check_read_range("from_position", from_position, "to_position", to_position, limit)
        check_stream_prefix(stream_prefix)
        type_list = check_type_filter(types)

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[RecordedEvent], bool]:
            query = range_query(self._sql, low, high, type_list, stream_prefix, backwards, count)
            return await self._fetch_events("read_all", *query, count, log=True)

        pages = read_pages(
            fetch, max(from_position, 1), to_position, key=BY_POSITION, limit=limit, backwards=backwards
        )
        async for page in pages:
            for event in page:
                yield event

    async def stream_version(self, stream: str) -> int:
        check_stream_name(stream)
        rows = await self._fetch("stream_version", self._sql.stream_version, [stream])
        return int(rows[0][0])

    async def head(self) -> int:
        rows = await self._fetch_global("head", self._sql.head, [])
        return int(rows[0][0])

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        check_stream_prefix(prefix)
        where, params = ("", []) if prefix is None else ("WHERE starts_with(stream, %s)", [prefix])
        query = (
            f"SELECT stream, max(version) FROM {self._sql.events} {where} "
            'GROUP BY stream ORDER BY stream COLLATE "C"'
        )
        return [(row[0], int(row[1])) for row in await self._fetch("list_streams", query, params)]

    # -- subscriptions -----------------------------------------------------------------

    async def subscribe(
        self,
        from_position: int = 1,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        check_read_range("from_position", from_position, "to_position", None, None)
        check_stream_prefix(stream_prefix)
        type_list = check_type_filter(types)
        await self._ensure_open()

        async def fetch_live(low: int) -> tuple[list[tuple[Any, ...]], int, int]:
            query, params = live_query(self._sql, low, type_list, stream_prefix, SUBSCRIBE_PAGE)
            rows = await retrying(lambda: self._fetch_global("subscribe", query, params))
            return [row[2:] for row in rows if row[2] is not None], int(rows[0][0]), int(rows[0][1])

        # aclosing: the LISTEN connection closes when this generator does, not at garbage collection
        async with aclosing(follow(self._db, max(from_position, 1), fetch_live, self.poll_interval)) as rows:
            async for row in rows:
                yield decode_event(self.upcasters, row)

    # -- verification ------------------------------------------------------------------

    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        if stream is not None:
            check_stream_name(stream)
        async with self._connection("verify") as conn:
            return await verify_on(conn, self._sql, stream)

    async def _redact(self, targets: list[Redaction]) -> list[RedactionResult]:
        return await redact_postgres(self._connection, self._sql, self.append, targets)

    # -- snapshots ---------------------------------------------------------------------

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        snap = prepare_snapshot(snapshot, self.max_event_bytes)
        query = f"""
            INSERT INTO {self._sql.snapshots} (stream, type, version, schema, data, meta, recorded_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (stream, type, version) DO UPDATE SET schema = excluded.schema,
                data = excluded.data, meta = excluded.meta, recorded_at = excluded.recorded_at"""
        lookup = f"SELECT hash FROM {self._sql.events} WHERE stream = %s AND version = %s"
        async with self._connection("save_snapshot") as conn:
            found = await (await conn.execute(lookup, [snap.stream, snap.version])).fetchone()
            meta = bind_snapshot(snap, None if found is None else found[0])
            values = [snap.stream, snap.type, snap.version, snap.schema, snap.data, meta,
                      to_micros(datetime.now(UTC))]  # fmt: skip
            await conn.execute(query, values)

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        check_stream_name(stream)
        where: list[str] = ["s.stream = %s"]
        params: list[Any] = [stream]
        if at_or_before_version is not None:
            check_bound("at_or_before_version", at_or_before_version, minimum=0)
            where.append("s.version <= %s")
            params.append(at_or_before_version)
        if type is not None:
            where.append("s.type = %s")
            params.append(type)
        query = f"{bound_snapshots(self._sql)} WHERE {' AND '.join(where)} ORDER BY s.version DESC, s.recorded_at DESC"
        rows = await self._fetch("load_snapshot", f"{query} LIMIT 1", params)
        found = first_intact(self.upcasters, rows)
        if found is None and rows:  # the newest was not intact: look further back
            found = first_intact(self.upcasters, (await self._fetch("load_snapshot", query, params))[1:])
        return found

    async def delete_snapshots(self, stream: str | None = None) -> int:
        where, params = ("", []) if stream is None else ("WHERE stream = %s", [check_stream_name(stream)])
        async with self._connection("delete_snapshots") as conn:
            cursor = await conn.execute(f"DELETE FROM {self._sql.snapshots} {where}", params)
            deleted: int = cursor.rowcount
            return max(deleted, 0)

    # -- raw copy (capability "raw_copy") ----------------------------------------------

    async def raw_events(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[RawEvent]:
        """Up to ``limit`` stored events after ``after_position``, as stored (see ``RawCopy.raw_events``)."""
        check_raw_range(after_position, to_position, limit)
        query, params = stored_rows_query(
            self._sql, after_position, to_position, check_type_filter(types), ROW_COLUMNS
        )
        rows = await self._fetch_global("raw_events", query, [*params, limit])
        return raw_events_of(rows)

    async def read_rows(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[StoredRow]:
        """Up to ``limit`` stored events after ``after_position``, as tuples (see ``EventStore.read_rows``)."""
        check_raw_range(after_position, to_position, limit)
        query, params = stored_rows_query(self._sql, after_position, to_position, check_type_filter(types))
        rows = await self._fetch_global("read_rows", query, [*params, limit])
        return stored_rows_of(rows)

    async def raw_snapshots(self) -> list[RawSnapshot]:
        """Every stored snapshot, ordered by stream, type and version."""
        query = (
            f'SELECT {SNAPSHOT_COLUMNS} FROM {self._sql.snapshots} ORDER BY stream COLLATE "C", type, version'
        )
        rows = await self._fetch("raw_snapshots", query, [])
        return [RawSnapshot(r[0], r[1], r[2], r[3], bytes(r[4]), bytes(r[5]), r[6]) for r in rows]

    async def import_raw(self, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot] = ()) -> None:
        """Store already-hashed events and snapshots unchanged, in one transaction.

        Raises:
            InvalidEventError: an event does not continue its stream (version and ``prev_hash``)
                or its position is not after the head.
        """
        check_raw_events(events)
        async with self._connection("import") as conn:
            try:
                async with conn.transaction():
                    xid = await import_events(conn, self._sql, events)
                    if snapshots:
                        await import_snapshots(conn, self._sql, snapshots)
            except BaseException:
                # The position lock may still be held by this session: never pool it again.
                await close_quietly(self._pg, conn)
                raise
        if xid is not None:
            self._own_xid = max(self._own_xid, xid)

    # -- additions to the port (see _postgres_port) -------------------------------------

    async def _with_events(self, results: list[AppendResult]) -> list[AppendResult]:
        """``results`` with their recorded events: a re-sent append's are read back here."""
        missing = [position for result in results if result.rows is None for position in result.positions]
        if not missing:
            return results
        query = resent_rows_query(self._sql.events, ROW_COLUMNS)
        rows = {row[0]: stored_row(row) for row in await self._fetch("append", query, [missing])}
        return [
            result
            if result.rows is not None
            else append_result([rows[p] for p in result.positions], result.version, self.upcasters)
            for result in results
        ]

    async def save_tracking(self, consumer: str, position: int) -> None:
        tracking = check_tracking(Tracking(consumer, position))
        async with self._connection("save_tracking") as conn:
            await record_tracking(conn, TrackingSql(self.schema), tracking)

    async def tracking_position(self, consumer: str) -> int | None:
        check_tracking(Tracking(consumer, 0))
        rows = await self._fetch("tracking_position", TrackingSql(self.schema).position, [consumer])
        return int(rows[0][0]) if rows else None

    async def append_tracked(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]], tracking: Tracking
    ) -> list[AppendResult]:
        prepared = prepare_batch(entries, self.max_event_bytes)
        tracking = check_tracking(tracking)
        for entry in prepared:
            for index, event in enumerate(entry.events):
                check_uuid(event.id, entry.stream, index)
        if self._db.closed:
            raise StoreError("the store is closed")
        for _ in range(RACE_ATTEMPTS):
            try:
                outcome = await self._append_tracked_once(prepared, tracking)
            except _Raced:
                continue  # the next attempt reads the new heads: ConcurrencyError or a new version
            if isinstance(outcome, BaseException):
                raise outcome
            return await self._with_events(outcome)
        raise StoreUnavailable(
            f"PostgreSQL: the tracked append lost the race for the next version {RACE_ATTEMPTS} times in a row"
        )

    async def _append_tracked_once(self, unit: list[PreparedAppend], tracking: Tracking) -> Any:
        """``_commit_once`` for one unit, with the consumer moved in the events' transaction.

        Returns the unit's results (or its error, a re-send's original results).

        Raises:
            _Raced: a unique constraint on (stream, version) or the id failed at the insert.
            TrackingError: the consumer is at or past ``tracking.position``; nothing is stored.
        """
        now = to_micros(datetime.now(UTC))
        async with self._connection("append") as conn:
            plan, tips = await plan_from_lookup(conn, self._sql, [unit], now)
            if not plan.rows:  # a re-send (stores nothing, tracking included) or a refusal
                self._remember(tips)
                return plan.outcomes[0]
            params = [plan.rows, plan.rows, *plan.columns]
            async with conn.transaction():
                # _store translates a lost race and drops a connection that failed mid-statement;
                # a TrackingError from the second statement rolls the events back with it.
                reserved = await self._store(conn, self._sql.insert, params, tips)
                if reserved is None:
                    raise StoreError("PostgreSQL: the append statement returned no row")
                await record_tracking(conn, TrackingSql(self.schema), tracking)
            await self._notify(conn, reserved[1])
        return self._committed(plan, tips, reserved)[0]
