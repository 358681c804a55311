"""The PostgreSQL backend: the same store contract on a server (psycopg 3, a connection pool).

Why this module is over 500 lines: it is one class, ``PostgresEventStore``, whose state (the
pool, the stream heads it remembers, the id of its last append transaction, the listener) is
shared by appends, reads and subscriptions alike. What is not the class lives elsewhere: the
statements in ``_postgres_sql``, the SQL of tracking in ``_postgres_port``, redaction in
``_postgres_redact``. Splitting the class itself would mean mixins over shared private state,
which the rest of the code base avoids.

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

import select
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import astuple
from datetime import UTC, datetime
from typing import Any, NamedTuple
from uuid import UUID

import anyio

from ._base import EventStore
from ._chain import ChainChecker
from ._decoding import decode_event
from ._encoder import check_encoded
from ._encoding import chain_hashes, to_micros
from ._errors import (
    ConcurrencyError,
    IdempotencyError,
    InvalidEventError,
    StoreError,
    StoreFormatError,
    StoreNotFound,
    StoreUnavailable,
)
from ._group_commit import GroupCommit
from ._ids import uuid7
from ._open import parse_postgres_url as parse_url
from ._paging import BY_POSITION, BY_VERSION, read_pages
from ._postgres_port import TrackingSql, planned_result, record_tracking, resent_rows_query, stored_row
from ._postgres_redact import redact_postgres, redaction_rows_query
from ._postgres_sql import (
    FORMAT_VERSION,
    LOCK_TIMEOUT,
    ROW_COLUMNS,
    SNAPSHOT_COLUMNS,
    Sql,
    advisory_key,
    import_psycopg,
    masked,
)
from ._raw import (
    RAW_PAGE,
    RawEvent,
    RawSnapshot,
    check_continuation,
    check_raw_events,
    check_raw_range,
    raw_event,
)
from ._records import (
    ANY,
    NO_STREAM,
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
from ._redaction import REDACTIONS_STREAM, Redaction, RedactionRecords, RedactionResult
from ._results import append_result, match_resent
from ._snapshots import bind_snapshot, first_intact, prepare_snapshot
from ._upcasting import Upcasters
from ._validation import (
    DEFAULT_MAX_EVENT_BYTES,
    PreparedAppend,
    check_read_range,
    check_stream_name,
    check_stream_prefix,
    check_tracking,
    check_type_filter,
    prepare_batch,
    version_matches,
)

__all__ = ["FORMAT_VERSION", "PostgresEventStore"]

_PAGE = 500
_RACE_ATTEMPTS = 10
"""How often an append that keeps losing the race for its stream version is retried (``ANY``)."""
_OWN_WRITES_TIMEOUT = 30.0
"""How long a global read waits for older transactions to end so that it sees this store's appends."""
_POOL_TIMEOUT = 5.0
"""How long a call waits for a pooled connection before ``StoreUnavailable``."""
_HEADS_KEPT = 10_000
"""How many stream heads a store object remembers for one-statement appends."""
_ROW_KEYS = (
    "stream",
    "version",
    "event_id",
    "type",
    "schema",
    "data",
    "meta",
    "recorded_at",
    "prev_hash",
    "hash",
)
"""The parameters of ``Sql.insert_one``, in the order of a plan's columns."""
_SUBSCRIBE_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""The pauses of a subscriber between attempts when its query fails; then it raises."""


class _Raced(Exception):
    """Another transaction stored one of the group's (stream, version) pairs or ids first."""


class _Plan(NamedTuple):
    """What one group transaction inserts, and the outcome of every unit not inserted."""

    outcomes: list[Any]
    inserts: list[tuple[int, list[tuple[int, int, int]]]]
    deferred: list[int]
    columns: list[list[Any]]
    rows: int


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
        self._pg, self._pgpool = import_psycopg()
        self.url = url
        self._conninfo, self.schema, self._pool_size = parse_url(url)
        self._sql = Sql(self.schema)
        self._pool: Any = None
        self._open_lock = anyio.Lock()
        self._closed = False
        self.poll_interval = poll_interval
        self._create = create
        self._group: GroupCommit[list[PreparedAppend], list[AppendResult]] = GroupCommit(self._commit_group)
        self._reachable = True  # False after a connection failure, until a probe connects
        self._own_xid = 0  # the newest transaction id of an append of this store object
        self._xmin_seen = 0  # the highest snapshot xmin this store object has seen
        # The (version, hash) of the streams this store object last appended to or read the
        # head of: a guess, checked by the server at the insert (see _commit_once).
        self._heads: dict[str, tuple[int, str]] = {}

    def __repr__(self) -> str:
        return f"PostgresEventStore({masked(self.url)!r})"

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Translate psycopg's exceptions, once, into the store's errors."""
        pg = self._pg
        try:
            yield
        except pg.errors.LockNotAvailable as exc:
            raise StoreUnavailable(
                f"PostgreSQL: {action} timed out after {LOCK_TIMEOUT} waiting for a lock"
            ) from exc
        except self._pgpool.PoolTimeout as exc:
            raise StoreUnavailable(
                f"PostgreSQL: {action} got no connection from the pool within {_POOL_TIMEOUT:g} s "
                f"({masked(self._conninfo)}): {exc}"
            ) from exc
        except (pg.OperationalError, pg.InterfaceError) as exc:
            raise StoreUnavailable(
                f"PostgreSQL connection failed during {action} ({masked(self._conninfo)}): {exc}"
            ) from exc
        except pg.Error as exc:
            raise StoreError(f"PostgreSQL error during {action}: {exc}") from exc

    async def _ensure_open(self) -> Any:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise StoreError("the store is closed")
        async with self._open_lock:
            if self._pool is None:
                # One direct connection first: an unreachable server fails at once with libpq's
                # own reason, and the tables exist before any pooled call runs.
                with self._errors("opening the store"):
                    conn = await self._pg.AsyncConnection.connect(self._conninfo, autocommit=True)
                    async with conn:
                        await self._create_schema(conn)
                pool = self._pgpool.AsyncConnectionPool(
                    self._conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self._pool_size,
                    open=False,
                    timeout=_POOL_TIMEOUT,
                    # After a failed attempt the pool retries with a growing pause; a short
                    # ceiling keeps callers from waiting long once the server is back.
                    reconnect_timeout=_POOL_TIMEOUT,
                    configure=_configure,
                    name=f"turnlog-{self.schema}",
                )
                try:
                    with self._errors("opening the store"):
                        await pool.open(wait=True, timeout=15.0)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def _create_schema(self, conn: Any) -> None:
        sql = self._sql
        async with conn.transaction():
            # Concurrent openers of a fresh database would race on CREATE ... IF NOT EXISTS.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s)", [advisory_key(f"turnlog-schema:{sql.schema}")]
            )
            query = (
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name IN ('turnlog_meta', 'events', 'snapshots', 'tracking')"
            )
            tables = {row[0] for row in await (await conn.execute(query, [sql.schema])).fetchall()}
            if "turnlog_meta" in tables:
                row = await (await conn.execute(sql.format)).fetchone()
                found = self._check_format(None if row is None else row[0])
                if found < FORMAT_VERSION:
                    # Format 1: add the transaction ids and the position sequence (see Sql.upgrade).
                    # Readers need it too, so it runs whatever ``create`` says.
                    for statement in sql.upgrade:
                        await conn.execute(statement)
                    for statement in sql.create:  # all IF NOT EXISTS: fills in what format 1 lacked
                        await conn.execute(statement)
                    self._store_id = await self._read_store_id(conn)
                    return
                if len(tables) == 4:
                    # Nothing to create: no DDL, so no lock that would wait for writers.
                    self._store_id = await self._read_store_id(conn)
                    return
            elif tables:
                raise StoreFormatError(
                    f"schema {sql.schema!r} already has a table named {sorted(tables)[0]!r} that turnlog "
                    "did not create: choose another schema with ?schema=NAME in the store URL",
                    supported=FORMAT_VERSION,
                )
            if not self._create:
                if "turnlog_meta" not in tables:
                    raise StoreNotFound(f"{masked(self.url)} (schema {sql.schema!r})", "no turnlog tables")
                raise StoreFormatError(
                    f"schema {sql.schema!r} lacks some of turnlog's tables ({', '.join(sorted(tables))} found)",
                    supported=FORMAT_VERSION,
                )
            for statement in sql.create:
                await conn.execute(statement)
            self._store_id = await self._read_store_id(conn)

    async def _read_store_id(self, conn: Any) -> str:
        """The store id in ``turnlog_meta``, made now for a store made before store ids."""
        row = await (await conn.execute(self._sql.store_id)).fetchone()
        if row is None:
            await conn.execute(self._sql.store_id_insert, [str(uuid7())])
            row = await (await conn.execute(self._sql.store_id)).fetchone()
        return str(row[0])

    def _check_format(self, value: str | None) -> int:
        """Refuse a store this code cannot read; return its format version."""
        if value is None:
            raise StoreFormatError(
                f"schema {self.schema!r} has a turnlog_meta table without a format version: "
                "not a turnlog store",
                supported=FORMAT_VERSION,
            )
        try:
            found = int(value)
        except ValueError:
            raise StoreFormatError(
                f"schema {self.schema!r}: unreadable format version {value!r}", supported=FORMAT_VERSION
            ) from None
        if found > FORMAT_VERSION:
            raise StoreFormatError(
                f"schema {self.schema!r} was written by a newer turnlog (format {found}; this one "
                f"reads up to {FORMAT_VERSION}): upgrade turnlog to open it",
                found=found,
                supported=FORMAT_VERSION,
            )
        return found

    @asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[Any]:
        pool = await self._ensure_open()
        pg = self._pg
        if not self._reachable:
            await self._probe(action)
        with self._errors(action):
            try:
                conn = await self._checkout(pool)
                try:
                    async with conn:
                        yield conn
                finally:
                    await pool.putconn(conn)
            except (pg.OperationalError, pg.InterfaceError, self._pgpool.PoolTimeout):
                self._reachable = False
                raise

    async def _checkout(self, pool: Any) -> Any:
        """A pooled connection that is still sound, closing the dead ones met on the way.

        An idle connection killed by the server is found and replaced here, so only a call
        already running when it broke can fail. (The pool's own ``check`` would send an empty
        query on every checkout, and wait between attempts when several connections are dead.)
        """
        for _ in range(self._pool_size + 1):
            conn = await pool.getconn()
            if not _is_dead(conn):
                return conn
            await _close_quietly(self._pg, conn)
            await pool.putconn(conn)  # a closed connection is discarded and replaced
        return await pool.getconn()

    async def _probe(self, action: str) -> None:
        """After a connection failure: one direct connection attempt before using the pool.

        While the server is down, calls then fail at once with libpq's own reason instead of
        each waiting for the pool's timeout; once it is back, the pool is used again.
        """
        with self._errors(action):
            conn = await self._pg.AsyncConnection.connect(self._conninfo, autocommit=True)
        await _close_quietly(self._pg, conn)
        self._reachable = True

    async def __aenter__(self) -> PostgresEventStore:
        await self._ensure_open()
        return self

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- appends -----------------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        (result,) = await self.append_batch([(stream, events, expected_version)])
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
                _check_uuid(event.id, entry.stream, index)
        if self._closed:
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
        for _ in range(_RACE_ATTEMPTS):
            try:
                outcomes, _deferred = await self._commit_once([unit])
            except _Raced:
                continue  # the next attempt reads the new heads: ConcurrencyError or a new version
            return outcomes[0]
        streams = ", ".join(repr(entry.stream) for entry in unit)
        return StoreUnavailable(
            f"PostgreSQL: the append to {streams} lost the race for the next version "
            f"{_RACE_ATTEMPTS} times in a row to other writers"
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
        now = to_micros(datetime.now(UTC))
        guess = self._plan_from_heads(units, now)
        async with self._connection("append") as conn:
            reserved = None
            if guess is not None:
                plan, tips, query, params = guess
                reserved = await self._store(conn, query, params, tips)
            if reserved is None:
                plan, tips = await self._plan_from_lookup(conn, units, now)
                if not plan.rows:
                    self._remember(tips)
                    return plan.outcomes, plan.deferred
                params = [plan.rows, plan.rows, *plan.columns]
                reserved = await self._store(conn, self._sql.insert, params, tips)
                if reserved is None:
                    raise StoreError("PostgreSQL: the append statement returned no row")
            await self._notify(conn, reserved[1])
        return self._committed(plan, tips, reserved), plan.deferred

    def _committed(
        self, plan: _Plan, tips: dict[str, tuple[int, str]], reserved: tuple[Any, ...]
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

    def _plan_from_heads(
        self, units: list[list[PreparedAppend]], now: int
    ) -> tuple[_Plan, dict[str, tuple[int, str]], str, Any] | None:
        """A plan from the heads this store object knows, and its gated statement and parameters.

        None when a stream's head is unknown (a stream never seen is taken as new when the
        unit allows that), or when a unit would fail against the known heads: only the
        stored heads and ids can tell a re-send, a conflict or a stale head apart.
        """
        tips: dict[str, tuple[int, str]] = {}
        for unit in units:
            for entry in unit:
                if entry.stream not in tips:
                    tip = self._heads.get(entry.stream)
                    if tip is None:
                        if entry.expected is not ANY and entry.expected != NO_STREAM:
                            return None
                        tip = (0, "")
                    tips[entry.stream] = tip
        heads = list(tips.items())
        plan = _plan_group(units, {}, tips, now)
        if plan.deferred or any(outcome is not None for outcome in plan.outcomes):
            return None
        if plan.rows == 1:
            return (
                plan,
                tips,
                self._sql.insert_one,
                dict(zip(_ROW_KEYS, (c[0] for c in plan.columns), strict=True)),
            )
        params = [plan.rows, plan.columns[2], [stream for stream, _ in heads],
                  [digest for _, (_, digest) in heads], plan.rows, *plan.columns]  # fmt: skip
        return plan, tips, self._sql.insert_checked, params

    async def _plan_from_lookup(
        self, conn: Any, units: list[list[PreparedAppend]], now: int
    ) -> tuple[_Plan, dict[str, tuple[int, str]]]:
        """A plan from the heads and ids read from the store (one statement)."""
        ids = [event.id for unit in units for entry in unit for event in entry.events]
        streams = list(dict.fromkeys(entry.stream for unit in units for entry in unit))
        rows = await (await conn.execute(self._sql.lookup, [ids, streams])).fetchall()
        stored = {
            row[4]: (row[1], row[2], row[3], row[5], row[6], row[7], row[8]) for row in rows if row[0] == "id"
        }
        tips = {row[2]: (row[3] or 0, row[9] or "") for row in rows if row[0] == "head"}
        return _plan_group(units, stored, tips, now), tips

    async def _store(
        self, conn: Any, query: str, params: Any, tips: dict[str, tuple[int, str]]
    ) -> tuple[Any, ...] | None:
        """Run an append statement; its row (transaction id, last position), None if its gate was shut."""
        errors = self._pg.errors
        try:
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
            await _close_quietly(self._pg, conn)
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
        type_list = _type_list(types)

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[RecordedEvent], bool]:
            query = self._range_query(low, high, type_list, stream_prefix, backwards, count)
            return await self._fetch_events("read_all", *query, count, log=True)

        pages = read_pages(
            fetch, max(from_position, 1), to_position, key=BY_POSITION, limit=limit, backwards=backwards
        )
        async for page in pages:
            for event in page:
                yield event

    def _range_query(
        self,
        low: int,
        high: int | None,
        types: list[str] | None,
        prefix: str | None,
        backwards: bool,
        page: int,
        bound: str | None = None,
    ) -> tuple[str, list[Any]]:
        where = ["position >= %s", self._sql.settled]
        params: list[Any] = [low]
        if bound is not None:
            where.append(bound)
        if high is not None:
            where.append("position <= %s")
            params.append(high)
        if types is not None:
            where.append("type = ANY(%s::text[])")
            params.append(types)
        if prefix is not None:
            where.append("starts_with(stream, %s)")
            params.append(prefix)
        order = "DESC" if backwards else "ASC"
        query = (
            f"SELECT {ROW_COLUMNS} FROM {self._sql.events} WHERE {' AND '.join(where)} "
            f"ORDER BY position {order} LIMIT {page}"
        )
        return query, params

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
        type_list = _type_list(types)
        await self._ensure_open()
        listener = _Listener(self)
        low = max(from_position, 1)
        try:
            # LISTEN before catching up, so nothing committed after the catch-up query is missed.
            await listener.start()
            while True:
                # Rows become visible to global reads in position order (see the module
                # docstring), so "everything after the last one seen" never skips an event,
                # whichever notification woke us (or none).
                rows, head = await self._fetch_live(low, type_list, stream_prefix)
                for row in rows:
                    low = row[0] + 1
                    yield decode_event(self.upcasters, row)
                if len(rows) < _PAGE:
                    # Every matching event up to the head was delivered: skip the others for good.
                    low = max(low, head + 1)
                    await listener.wait(self.poll_interval)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.close()

    async def _fetch_live(
        self, low: int, types: list[str] | None, prefix: str | None
    ) -> tuple[list[tuple[Any, ...]], int]:
        """Matching events from ``low`` up to the head, and that head: one statement, one snapshot."""
        # The head is read first, in the same statement: everything at or below it is final.
        query, params = self._range_query(low, None, types, prefix, False, _PAGE, "position <= h.head")
        query = (
            f"WITH h(head) AS MATERIALIZED ({self._sql.head}) "
            f"SELECT h.head, e.* FROM h LEFT JOIN LATERAL ({query}) AS e ON true"
        )
        pauses = iter(_SUBSCRIBE_RETRIES)
        while True:
            try:
                rows = await self._fetch_global("subscribe", query, params)
                break
            except StoreUnavailable:
                # The in-flight query broke; the pool replaces the connection. Give the server
                # a few chances (about 3 s in all) before telling the subscriber.
                pause = next(pauses, None)
                if pause is None:
                    raise
                await anyio.sleep(pause)
        head = int(rows[0][0])
        return [row[1:] for row in rows if row[1] is not None], head

    # -- verification ------------------------------------------------------------------

    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        if stream is not None:
            check_stream_name(stream)
        checker = ChainChecker()
        where, params = ("", []) if stream is None else ("WHERE stream = %s", [stream])
        records_query = redaction_rows_query(self._sql.events)
        query = f'SELECT {ROW_COLUMNS} FROM {self._sql.events} {where} ORDER BY stream COLLATE "C", version'
        snapshot_where = "" if stream is None else "WHERE s.stream = %s"
        snapshots = (
            f'{self._bound_snapshots} {snapshot_where} ORDER BY s.stream COLLATE "C", s.type, s.version'
        )
        async with self._connection("verify") as conn, conn.transaction():
            found = await (await conn.execute(records_query, (REDACTIONS_STREAM,))).fetchall()
            checker.redactions = RedactionRecords.from_rows(found)
            async with conn.cursor(name="turnlog_verify") as cursor:
                await cursor.execute(query, params)
                while rows := await cursor.fetchmany(2000):
                    for row in rows:
                        checker.add_row(row)
            async with conn.cursor(name="turnlog_verify_snapshots") as cursor:
                await cursor.execute(snapshots, params)
                while rows := await cursor.fetchmany(200):
                    for row in rows:
                        checker.add_snapshot(row, row[7])
        checker.finish(stream)
        return checker.report()

    async def _redact(self, targets: list[Redaction]) -> list[RedactionResult]:
        return await redact_postgres(self._connection, self._sql, self.append, targets)

    @property
    def _bound_snapshots(self) -> str:
        """Snapshots with the hash of the log's event at their version (NULL when there is none)."""
        return (
            f"SELECT s.stream, s.type, s.version, s.schema, s.data, s.meta, s.recorded_at, e.hash "
            f"FROM {self._sql.snapshots} s LEFT JOIN {self._sql.events} e "
            "ON e.stream = s.stream AND e.version = s.version"
        )

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
            _check_bound("at_or_before_version", at_or_before_version, minimum=0)
            where.append("s.version <= %s")
            params.append(at_or_before_version)
        if type is not None:
            where.append("s.type = %s")
            params.append(type)
        query = (
            f"{self._bound_snapshots} WHERE {' AND '.join(where)} ORDER BY s.version DESC, s.recorded_at DESC"
        )
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
        where: list[str] = ["position > %s", self._sql.settled]
        params: list[Any] = [after_position]
        if to_position is not None:
            where.append("position <= %s")
            params.append(to_position)
        type_list = _type_list(types)
        if type_list is not None:
            where.append("type = ANY(%s::text[])")
            params.append(type_list)
        query = (
            f"SELECT {ROW_COLUMNS} FROM {self._sql.events} WHERE {' AND '.join(where)} "
            "ORDER BY position LIMIT %s"
        )
        rows = await self._fetch_global("raw_events", query, [*params, limit])
        return [raw_event((r[0], str(r[1]), r[2], r[3], r[4], r[5], bytes(r[6]), bytes(r[7]), r[8], r[9], r[10]))
                for r in rows]  # fmt: skip

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
                    await self._import_events(conn, events)
                    if snapshots:
                        await self._import_snapshots(conn, snapshots)
            except BaseException:
                # The position lock may still be held by this session: never pool it again.
                await _close_quietly(self._pg, conn)
                raise

    async def _import_events(self, conn: Any, events: Sequence[RawEvent]) -> None:
        """Insert raw events after every position stored or handed out, under the position lock.

        The lock is held from reading the highest position to moving the sequence past the
        imported ones, so no append takes a position in between; the transaction id is taken
        under it too, as an append's is (see the module docstring).
        """
        sql = self._sql
        quiet = bool(events) and await self._reclaim_positions(conn, events[0].position)
        await conn.execute(sql.take_lock)
        xid_text, handed_out, stored = await (await conn.execute(sql.reserved_high)).fetchone()
        # With every writer kept out, positions handed out but not stored never will be: an
        # import resumed after a kill may take them again, as its first run meant to.
        position = high = max(handed_out, stored)
        if quiet:
            position = stored
        streams = list(dict.fromkeys(e.stream for e in events)) or [""]
        rows = await (await conn.execute(sql.heads, [streams])).fetchall()
        tips = {row[0]: (row[1] or 0, row[2] or "") for row in rows}
        columns: list[list[Any]] = [[] for _ in range(11)]
        for index, event in enumerate(events):
            _check_uuid(event.id, event.stream, index)
            check_continuation(event, tips[event.stream], position)
            position = event.position
            values = (
                event.position, event.stream, event.version, event.id, event.type, event.schema,
                event.data, event.meta, event.recorded_at_us, event.prev_hash, event.hash,
            )  # fmt: skip
            for column, value in zip(columns, values, strict=True):
                column.append(value)
            tips[event.stream] = (event.version, event.hash)
        if columns[0]:
            await conn.execute(sql.advance, [max(position, high), True])
        await conn.execute(sql.release_lock)
        if columns[0]:
            await conn.execute(sql.insert_raw, columns)
            self._own_xid = max(self._own_xid, int(xid_text))

    async def _reclaim_positions(self, conn: Any, first: int) -> bool:
        """Keep writers out when ``first`` falls among positions handed out but not stored.

        An import or migrate killed after moving the sequence leaves it ahead of what is
        stored, and a re-run brings the same positions again. Waiting for every writer of the
        events table to end (``Sql.quiesce``, taken before the position lock, in the order
        appends take them) proves that those positions will never be stored by anyone else,
        so the re-run may use them; until commit, appends wait. Returns whether it did so.
        """
        handed_out, stored = await (await conn.execute(self._sql.positions_high)).fetchone()
        if not stored < first <= handed_out:
            return False
        await conn.execute(self._sql.quiesce)
        return True

    async def _import_snapshots(self, conn: Any, snapshots: Sequence[RawSnapshot]) -> None:
        async with conn.cursor() as cursor:
            await cursor.executemany(
                f"""INSERT INTO {self._sql.snapshots} (stream, type, version, schema, data, meta,
                    recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (stream, type, version) DO UPDATE SET schema = excluded.schema,
                    data = excluded.data, meta = excluded.meta, recorded_at = excluded.recorded_at""",
                [astuple(snap) for snap in snapshots],
            )

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
                _check_uuid(event.id, entry.stream, index)
        if self._closed:
            raise StoreError("the store is closed")
        for _ in range(_RACE_ATTEMPTS):
            try:
                outcome = await self._append_tracked_once(prepared, tracking)
            except _Raced:
                continue  # the next attempt reads the new heads: ConcurrencyError or a new version
            if isinstance(outcome, BaseException):
                raise outcome
            return await self._with_events(outcome)
        raise StoreUnavailable(
            f"PostgreSQL: the tracked append lost the race for the next version {_RACE_ATTEMPTS} times in a row"
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
            plan, tips = await self._plan_from_lookup(conn, [unit], now)
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


def _is_dead(conn: Any) -> bool:
    """Whether an idle connection is closed, or the server has closed or written to it.

    An idle connection has nothing to read: a terminated backend leaves its last message and
    the end of the stream. Looking at the socket costs no round trip.
    """
    if conn.closed or conn.broken:
        return True
    fd = conn.pgconn.socket
    if hasattr(select, "poll"):  # no limit on the descriptor's number, unlike select()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


async def _configure(conn: Any) -> None:
    # A statement waiting this long for a lock gives up with StoreUnavailable.
    await conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")


class _Listener:
    """A dedicated LISTEN connection that reconnects when the server drops it."""

    def __init__(self, store: PostgresEventStore) -> None:
        self._store = store
        self._conn: Any = None

    async def start(self) -> None:
        store = self._store
        try:
            with store._errors("subscribe (LISTEN)"):
                conn = await store._pg.AsyncConnection.connect(store._conninfo, autocommit=True)
                try:
                    await conn.execute(store._sql.listen)
                except BaseException:
                    await conn.close()
                    raise
        except StoreUnavailable:
            self._conn = None  # polling carries on; the next wait tries again
            return
        self._conn = conn

    async def wait(self, seconds: float) -> None:
        """Return on a notification, or after ``seconds``, or when the connection broke."""
        if self._conn is None:
            await anyio.sleep(seconds)
            await self.start()
            return
        pg = self._store._pg
        try:
            # stop_after=1 ends the generator by itself: breaking out would leave it holding
            # the connection's lock.
            async for _ in self._conn.notifies(timeout=seconds, stop_after=1):
                pass
            # Take the notifications that arrived meanwhile too: one query covers them all, so
            # a subscriber behind many writers queries once per catch-up, not once per append.
            async for _ in self._conn.notifies(timeout=0.0):
                pass
        except (pg.OperationalError, pg.InterfaceError):
            # The listener was dropped: notifications sent meanwhile are lost, which the caller's
            # re-query after this return makes up for.
            await self.close()
            await self.start()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except self._store._pg.Error:
                pass  # closing a connection the server already dropped


def _plan_group(
    units: list[list[PreparedAppend]],
    stored: dict[str, tuple[Any, ...]],
    tips: dict[str, tuple[int, str]],
    now: int,
) -> _Plan:
    """Check each unit against the heads (and the units before it); chain and lay out the good ones.

    A unit whose ids are stored is a re-send (its original results) or an ``IdempotencyError``;
    one whose ``expected_version`` fails gets its ``ConcurrencyError``; one sharing a new id
    with an earlier unit of the group waits (``deferred``) until that one is stored. Rows of
    the others follow each other in the insert; their positions are known after the reservation.
    """
    outcomes: list[Any] = [None] * len(units)
    inserts: list[tuple[int, list[tuple[int, int, int]]]] = []
    deferred: list[int] = []
    columns: list[list[Any]] = [[] for _ in range(10)]
    planned: set[str] = set()
    row = 0
    for index, unit in enumerate(units):
        unit_ids = [event.id for entry in unit for event in entry.events]
        if any(event_id in stored for event_id in unit_ids):
            try:
                outcomes[index] = match_resent(unit, stored)
            except IdempotencyError as exc:
                outcomes[index] = exc
            continue
        if not planned.isdisjoint(unit_ids):
            deferred.append(index)
            continue
        local: dict[str, tuple[int, str]] = {}
        chained: list[tuple[PreparedAppend, int, str, list[str]]] = []
        for entry in unit:
            version, prev = local.get(entry.stream) or tips[entry.stream]
            if not version_matches(entry.expected, version):
                outcomes[index] = ConcurrencyError(entry.stream, entry.expected, version)
                break
            hashes = chain_hashes(entry.stream, version, prev, entry.events, now)
            chained.append((entry, version, prev, hashes))
            local[entry.stream] = (version + len(hashes), hashes[-1])
        if outcomes[index] is not None:
            continue
        tips.update(local)
        planned.update(unit_ids)
        spans: list[tuple[int, int, int]] = []
        for entry, version, prev, hashes in chained:
            spans.append((row, len(hashes), version + len(hashes)))
            for event, digest in zip(entry.events, hashes, strict=True):
                version += 1
                values = (entry.stream, version, event.id, event.type, event.schema, event.data,
                          event.meta, now, prev, digest)  # fmt: skip
                for column, value in zip(columns, values, strict=True):
                    column.append(value)
                prev = digest
                row += 1
        inserts.append((index, spans))
    return _Plan(outcomes, inserts, deferred, columns, row)


async def _close_quietly(pg: Any, conn: Any) -> None:
    try:
        await conn.close()
    except pg.Error:
        pass  # a connection the server dropped already


def _check_uuid(event_id: str, stream: str, index: int) -> None:
    # The id column is a uuid: anything but the canonical spelling would come back spelled
    # differently from what was hashed.
    try:
        canonical = str(UUID(event_id))
    except ValueError:
        canonical = None
    if canonical != event_id:
        raise InvalidEventError(
            f"event id {event_id!r} is not a UUID in canonical form (e.g. str(uuid7()))",
            stream=stream,
            index=index,
        )


def _check_bound(name: str, value: object, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEventError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise InvalidEventError(f"{name} must be >= {minimum}, not {value}")


def _type_list(types: Iterable[str] | None) -> list[str] | None:
    return check_type_filter(types)
