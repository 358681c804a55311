"""The PostgreSQL store's connections: the pool, the first open (tables, format), psycopg's errors.

``PgPool`` is the part of ``PostgresEventStore`` that knows about connections and nothing
about events: it opens the pool once (after one direct connection that creates or checks the
tables), hands out sound pooled connections for an action, and translates psycopg's
exceptions into the store's errors in one place.
"""

from __future__ import annotations

import select
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio

from ._errors import StoreError, StoreFormatError, StoreNotFound, StoreUnavailable
from ._ids import uuid7
from ._postgres_sql import (
    FORMAT_VERSION,
    LOCK_TIMEOUT,
    ONE_STATEMENT,
    Sql,
    advisory_key,
    import_psycopg,
    masked,
)
from ._url import parse_postgres_url

__all__ = ["POOL_TIMEOUT", "PgPool", "close_quietly", "prepare_appends"]

POOL_TIMEOUT = 5.0
"""How long a call waits for a pooled connection before ``StoreUnavailable``."""
SPARE_USES = 1000
"""How many checkouts in a row the spare connection serves before it goes back through the pool."""


class PgPool:
    """The connections of one store object to one schema.

    Attributes:
        pg: The ``psycopg`` module.
        url: The store URL as given.
        conninfo: The libpq conninfo (the URL without turnlog's parameters).
        schema: The PostgreSQL schema holding the tables.
        sql: The statements for that schema.
        store_id: The store id read (or made) at the first open; None before.
    """

    def __init__(self, url: str, *, create: bool) -> None:
        self.pg, self._pgpool = import_psycopg()
        self.url = url
        self.conninfo, self.schema, self._pool_size = parse_postgres_url(url)
        self.sql = Sql(self.schema)
        self.store_id: str | None = None
        self._create = create
        self._pool: Any = None
        self._open_lock = anyio.Lock()
        self._closed = False
        self._reachable = True  # False after a connection failure, until a probe connects
        # The last connection given back, kept out of the pool for the next checkout: a lone
        # caller (one append after another) skips the pool's lock, queue and bookkeeping.
        # Kept only while nobody waits for the pool, and given back to it every SPARE_USES
        # checkouts, so that the pool's own checks (its max_lifetime) still see it.
        self._spare: Any = None
        self._spare_uses = 0
        self._waiting = 0  # checkouts waiting in pool.getconn
        self._idle = int(self.pg.pq.TransactionStatus.IDLE)

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Translate psycopg's exceptions, once, into the store's errors."""
        try:
            yield
        except (self.pg.Error, self._pgpool.PoolTimeout) as exc:
            raise self.translated(action, exc) from exc

    def translated(self, action: str, exc: BaseException) -> BaseException:
        """The store's error for a psycopg exception raised during ``action`` (others as they are)."""
        pg = self.pg
        if isinstance(exc, pg.errors.LockNotAvailable):
            return StoreUnavailable(f"PostgreSQL: {action} timed out after {LOCK_TIMEOUT} waiting for a lock")
        if isinstance(exc, self._pgpool.PoolTimeout):
            return StoreUnavailable(
                f"PostgreSQL: {action} got no connection from the pool within {POOL_TIMEOUT:g} s "
                f"({masked(self.conninfo)}): {exc}"
            )
        if isinstance(exc, pg.OperationalError | pg.InterfaceError):
            return StoreUnavailable(
                f"PostgreSQL connection failed during {action} ({masked(self.conninfo)}): {exc}"
            )
        if isinstance(exc, pg.Error):
            return StoreError(f"PostgreSQL error during {action}: {exc}")
        return exc

    async def ensure_open(self) -> Any:
        """The pool, opened on first use (the tables created or checked first)."""
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise StoreError("the store is closed")
        async with self._open_lock:
            if self._pool is None:
                # One direct connection first: an unreachable server fails at once with libpq's
                # own reason, and the tables exist before any pooled call runs.
                with self.errors("opening the store"):
                    conn = await self.pg.AsyncConnection.connect(self.conninfo, autocommit=True)
                    async with conn:
                        await self._create_schema(conn)
                pool = self._pgpool.AsyncConnectionPool(
                    self.conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self._pool_size,
                    open=False,
                    timeout=POOL_TIMEOUT,
                    # After a failed attempt the pool retries with a growing pause; a short
                    # ceiling keeps callers from waiting long once the server is back.
                    reconnect_timeout=POOL_TIMEOUT,
                    configure=self._configure,
                    name=f"turnlog-{self.schema}",
                )
                try:
                    with self.errors("opening the store"):
                        await pool.open(wait=True, timeout=15.0)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def _configure(self, conn: Any) -> None:
        """Set up a new pooled connection: the lock timeout, UTF-8, the prepared single-event append."""
        # A statement waiting this long for a lock gives up with StoreUnavailable. UTF-8: the
        # store sends the text parameters of its one-event append as UTF-8 bytes itself.
        await conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'; SET client_encoding = 'UTF8'")
        await prepare_appends(self.pg, conn, self.sql)

    async def _create_schema(self, conn: Any) -> None:
        sql = self.sql
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
                    self.store_id = await self._read_store_id(conn)
                    return
                if len(tables) == 4:
                    # Nothing to create: no DDL, so no lock that would wait for writers.
                    self.store_id = await self._read_store_id(conn)
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
            self.store_id = await self._read_store_id(conn)

    async def _read_store_id(self, conn: Any) -> str:
        """The store id in ``turnlog_meta``, made now for a store made before store ids."""
        row = await (await conn.execute(self.sql.store_id)).fetchone()
        if row is None:
            await conn.execute(self.sql.store_id_insert, [str(uuid7())])
            row = await (await conn.execute(self.sql.store_id)).fetchone()
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
    async def connection(self, action: str) -> AsyncIterator[Any]:
        """A pooled connection for ``action``; psycopg's errors become the store's."""
        pool = await self.ensure_open()
        pg = self.pg
        if not self._reachable:
            await self._probe(action)
        with self.errors(action):
            try:
                conn = await self._checkout(pool)
                try:
                    async with conn:
                        yield conn
                finally:
                    await self.release(conn)
            except (pg.OperationalError, pg.InterfaceError, self._pgpool.PoolTimeout):
                self._reachable = False
                raise

    async def acquire(self, action: str) -> Any:
        """A sound pooled connection for ``action``, to give back with ``release``.

        ``connection`` without its context managers, for the append path, whose caller
        translates its own errors with ``failed``. Raises the store's errors.
        """
        pool = self._pool
        if pool is None:
            pool = await self.ensure_open()
        if not self._reachable:
            await self._probe(action)
        try:
            return await self._checkout(pool)
        except BaseException as exc:
            error = self.failed(action, exc)
            if error is exc:
                raise
            raise error from exc

    def failed(self, action: str, exc: BaseException) -> BaseException:
        """What to raise for ``exc`` met on a connection from ``acquire``: the store's error."""
        if isinstance(exc, self.pg.OperationalError | self.pg.InterfaceError | self._pgpool.PoolTimeout):
            self._reachable = False
        return self.translated(action, exc)

    async def release(self, conn: Any) -> None:
        """Give back a connection from ``acquire`` (a closed or broken one is replaced)."""
        pool = self._pool
        if pool is None:  # closed meanwhile
            await close_quietly(self.pg, conn)
        elif (
            self._spare is None
            and not self._waiting
            and self._spare_uses < SPARE_USES
            and conn.pgconn.transaction_status == self._idle
        ):
            # Idle (no transaction left open, not broken): what the pool's putconn checks
            # before it keeps a connection. Nobody waits for one, so none is held back.
            self._spare = conn
            self._spare_uses += 1
        else:
            self._spare_uses = 0
            await pool.putconn(conn)

    async def _checkout(self, pool: Any) -> Any:
        """A pooled connection that is still sound, closing the dead ones met on the way.

        An idle connection killed by the server is found and replaced here, so only a call
        already running when it broke can fail. (The pool's own ``check`` would send an empty
        query on every checkout, and wait between attempts when several connections are dead.)
        """
        conn = self._spare
        if conn is not None:
            self._spare = None
            if not _is_dead(conn):
                return conn
            await close_quietly(self.pg, conn)
            await pool.putconn(conn)  # a closed connection is discarded and replaced
        self._waiting += 1
        try:
            for _ in range(self._pool_size + 1):
                conn = await pool.getconn()
                if not _is_dead(conn):
                    return conn
                await close_quietly(self.pg, conn)
                await pool.putconn(conn)  # a closed connection is discarded and replaced
            return await pool.getconn()
        finally:
            self._waiting -= 1

    async def _probe(self, action: str) -> None:
        """After a connection failure: one direct connection attempt before using the pool.

        While the server is down, calls then fail at once with libpq's own reason instead of
        each waiting for the pool's timeout; once it is back, the pool is used again.
        """
        with self.errors(action):
            conn = await self.pg.AsyncConnection.connect(self.conninfo, autocommit=True)
        await close_quietly(self.pg, conn)
        self._reachable = True

    async def direct(self) -> Any:
        """A new connection outside the pool (autocommit), for a listener; the caller closes it."""
        return await self.pg.AsyncConnection.connect(self.conninfo, autocommit=True)

    async def close(self) -> None:
        """Close the pool; later calls raise ``StoreError``."""
        self._closed = True
        pool, self._pool = self._pool, None
        spare, self._spare = self._spare, None
        if pool is not None:
            if spare is not None:
                await pool.putconn(spare)
            await pool.close()


async def prepare_appends(pg: Any, conn: Any, sql: Sql) -> None:
    """Prepare on ``conn`` the statements of a one-trip append that it lacks (``Sql.one_trip_statements``).

    The insert is prepared with SQL's ``PREPARE``; BEGIN, COMMIT and NOTIFY at the protocol
    level. Those already there are left alone, so this also mends a connection where some
    were deallocated.
    """
    from psycopg.generators import execute

    query = "SELECT name FROM pg_prepared_statements WHERE starts_with(name, 'turnlog_')"
    present = {row[0] for row in await (await conn.execute(query)).fetchall()}
    if ONE_STATEMENT not in present:
        await conn.execute(sql.prepare_one)
    pgconn = conn.pgconn
    for name, text in sql.one_trip_statements:
        if name.decode() in present:
            continue
        async with conn.lock:
            pgconn.send_prepare(name, text)
            results = await conn.wait(execute(pgconn))
        for result in results:
            if result.status == pg.pq.ExecStatus.FATAL_ERROR:
                raise pg.errors.error_from_result(result, encoding="utf-8")


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


async def close_quietly(pg: Any, conn: Any) -> None:
    """Close ``conn``, ignoring the error of a connection the server dropped already."""
    try:
        await conn.close()
    except pg.Error:
        pass  # a connection the server dropped already
