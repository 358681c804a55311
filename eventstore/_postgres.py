"""The PostgreSQL backend: the same store contract on a server (psycopg 3, a connection pool).

Ordering. Every append transaction takes ``LOCK TABLE events IN EXCLUSIVE MODE`` before it
reads anything. The lock serializes writers (it does not block readers: ``SELECT`` takes
ACCESS SHARE) and is released only after the commit is visible, so the next writer starts
after every earlier commit. Positions are assigned inside the lock as ``max(position) + 1``
rather than from a sequence, which makes them gapless (a rolled-back append consumes nothing)
as well as strictly increasing in commit order: a reader tailing by position can never see
``k + 1`` and later find ``k``. The price is that appends to unrelated streams do not run in
parallel; ``docs/postgres.md`` discusses it and ``docs/performance.md`` measures it.

URL: ``postgresql://user:password@host:port/dbname?schema=NAME&pool_size=N``. ``schema`` (default
``public``) names the PostgreSQL schema holding the tables and ``pool_size`` bounds the pool
(default 10); every other query parameter goes to libpq unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import astuple
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import anyio

from ._base import EventStore
from ._encoder import check_encoded
from ._encoding import (
    DEFAULT_MAX_EVENT_BYTES,
    ChainChecker,
    PreparedAppend,
    chain_hashes,
    check_read_range,
    check_stream_name,
    decode_event,
    decode_snapshot,
    match_resent,
    prepare_batch,
    prepare_snapshot,
    to_micros,
    version_matches,
)
from ._errors import (
    ConcurrencyError,
    InvalidEventError,
    StoreError,
    StoreFormatError,
    StoreUnavailable,
)
from ._ids import uuid7
from ._paging import BY_POSITION, BY_VERSION, read_pages
from ._postgres_sql import (
    FORMAT_VERSION,
    LOCK_TIMEOUT,
    ROW_COLUMNS,
    SNAPSHOT_COLUMNS,
    Sql,
    advisory_key,
    import_psycopg,
    masked,
    parse_url,
)
from ._raw import RAW_PAGE, RawEvent, RawSnapshot, check_continuation, check_raw_range, raw_event
from ._records import (
    ANY,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    VerifyReport,
)
from ._upcasting import Upcasters

__all__ = ["FORMAT_VERSION", "PostgresEventStore"]

_PAGE = 500


class PostgresEventStore(EventStore):
    """An event store in a PostgreSQL database, shared by any number of processes and hosts.

    Positions are gapless and strictly increasing in commit order (see the module docstring).
    Subscribers are woken by LISTEN/NOTIFY and re-query on a timer as well, so a lost
    notification delays an event by at most ``poll_interval`` seconds and never loses it.

    Example::

        async with PostgresEventStore("postgresql://postgres@127.0.0.1/test?schema=demo") as store:
            await store.append("branch-1", [NewEvent("message.added", {"content": "hi"})])

    Args:
        url: ``postgresql://`` or ``postgres://`` URL; ``schema`` and ``pool_size`` query
            parameters are read here, the others go to libpq.
        upcasters: Upcasters applied on read.
        max_event_bytes: Limit on the encoded size of one event.
        poll_interval: Seconds a subscriber waits for a notification before re-querying.
    """

    capabilities: frozenset[str] = frozenset({"gapless_positions", "cross_process_subscribe", "raw_copy"})

    def __init__(
        self,
        url: str,
        *,
        upcasters: Upcasters | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        poll_interval: float = 1.0,
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
                f"PostgreSQL: {action} timed out after {LOCK_TIMEOUT} waiting for the append lock"
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
                    timeout=15.0,
                    # An idle connection killed by the server is found and replaced here,
                    # so only a call already running when it broke can fail.
                    check=self._pgpool.AsyncConnectionPool.check_connection,
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
                if self._check_format(None if row is None else row[0]) and len(tables) == 4:
                    # Nothing to create: no DDL, so no lock that would wait for writers.
                    self._store_id = await self._read_store_id(conn)
                    return
            elif tables:
                raise StoreFormatError(
                    f"schema {sql.schema!r} already has a table named {sorted(tables)[0]!r} that turnlog "
                    "did not create: choose another schema with ?schema=NAME in the store URL",
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

    def _check_format(self, value: str | None) -> bool:
        """Refuse a store this code cannot read; True when it is exactly the current format."""
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
        return found == FORMAT_VERSION

    @asynccontextmanager
    async def _connection(self, action: str) -> AsyncIterator[Any]:
        pool = await self._ensure_open()
        with self._errors(action):
            async with pool.connection() as conn:
                yield conn

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
        """Append validated entries in one transaction (``append``, ``append_batch``, ``append_encoded``)."""
        for entry in prepared:
            for index, event in enumerate(entry.events):
                _check_uuid(event.id, entry.stream, index)
        sql = self._sql
        ids = [event.id for entry in prepared for event in entry.events]
        streams = list(dict.fromkeys(entry.stream for entry in prepared))
        # Pipelined: BEGIN, the lock and both reads go in one round trip, the insert and COMMIT
        # in another, so the lock is held for little more than the commit itself.
        async with self._connection("append") as conn, conn.pipeline() as pipe, conn.transaction():
            await conn.execute(sql.lock)
            found = await conn.execute(sql.by_ids, [ids])
            heads = await conn.execute(sql.heads, [streams])
            await pipe.sync()
            stored = {
                str(row[3]): (row[0], row[1], row[2], row[4], row[5], row[6], row[7])
                for row in await found.fetchall()
            }
            if stored:
                # A re-send of an acknowledged append (or a clash, which raises).
                return match_resent(prepared, stored)
            results, columns = _plan(prepared, await heads.fetchall())
            await conn.execute(sql.insert, columns)
            await self._before_commit(pipe)
        return results

    async def _before_commit(self, pipeline: Any) -> None:
        """A seam for tests that need long append transactions; does nothing here."""

    # -- reads -------------------------------------------------------------------------

    async def _fetch(self, action: str, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self._connection(action) as conn:
            return await (await conn.execute(query, params)).fetchall()

    async def _fetch_events(
        self, action: str, query: str, params: Sequence[Any], count: int
    ) -> tuple[list[RecordedEvent], bool]:
        """One page of decoded events, and whether the range ran out of them."""
        rows = await self._fetch(action, query, params)
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
        type_list = _type_list(types)

        async def fetch(low: int, high: int | None, count: int) -> tuple[list[RecordedEvent], bool]:
            query = self._range_query(low, high, type_list, stream_prefix, backwards, count)
            return await self._fetch_events("read_all", *query, count)

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
    ) -> tuple[str, list[Any]]:
        where = ["position >= %s"]
        params: list[Any] = [low]
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
        rows = await self._fetch("head", self._sql.head, [])
        return int(rows[0][0])

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
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
        type_list = _type_list(types)
        await self._ensure_open()
        listener = _Listener(self)
        low = max(from_position, 1)
        try:
            # LISTEN before catching up, so nothing committed after the catch-up query is missed.
            await listener.start()
            while True:
                # Positions are gapless and in commit order, so "everything after the last one
                # seen" never skips an event, whichever notification woke us (or none).
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
        """Matching events from ``low`` up to the head read first, and that head."""
        failures = 0
        while True:
            try:
                # Read before the events: everything at or below it is committed already.
                head = int((await self._fetch("subscribe", self._sql.head, []))[0][0])
                query = self._range_query(low, head, types, prefix, False, _PAGE)
                return await self._fetch("subscribe", *query), head
            except StoreUnavailable:
                # The in-flight query broke; the pool replaces the connection. Give the server
                # a few chances before telling the subscriber.
                failures += 1
                if failures >= 5:
                    raise
                await anyio.sleep(0.1 * 2**failures)

    # -- verification ------------------------------------------------------------------

    async def verify(self, stream: str | None = None) -> VerifyReport:
        if stream is not None:
            check_stream_name(stream)
        checker = ChainChecker()
        where, params = ("", []) if stream is None else ("WHERE stream = %s", [stream])
        query = f'SELECT {ROW_COLUMNS} FROM {self._sql.events} {where} ORDER BY stream COLLATE "C", version'
        async with self._connection("verify") as conn, conn.transaction():
            async with conn.cursor(name="turnlog_verify") as cursor:
                await cursor.execute(query, params)
                while rows := await cursor.fetchmany(2000):
                    for row in rows:
                        checker.add_row(row)
        return checker.report()

    # -- snapshots ---------------------------------------------------------------------

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        snap = prepare_snapshot(snapshot, self.max_event_bytes)
        values = [snap.stream, snap.type, snap.version, snap.schema, snap.data, snap.meta,
                  to_micros(datetime.now(UTC))]  # fmt: skip
        query = f"""
            INSERT INTO {self._sql.snapshots} (stream, type, version, schema, data, meta, recorded_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (stream, type, version) DO UPDATE SET schema = excluded.schema,
                data = excluded.data, meta = excluded.meta, recorded_at = excluded.recorded_at"""
        async with self._connection("save_snapshot") as conn:
            await conn.execute(query, values)

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        check_stream_name(stream)
        where: list[str] = ["stream = %s"]
        params: list[Any] = [stream]
        if at_or_before_version is not None:
            _check_bound("at_or_before_version", at_or_before_version, minimum=0)
            where.append("version <= %s")
            params.append(at_or_before_version)
        if type is not None:
            where.append("type = %s")
            params.append(type)
        query = (
            f"SELECT {SNAPSHOT_COLUMNS} FROM {self._sql.snapshots} "
            f"WHERE {' AND '.join(where)} ORDER BY version DESC, recorded_at DESC LIMIT 1"
        )
        rows = await self._fetch("load_snapshot", query, params)
        return decode_snapshot(self.upcasters, rows[0]) if rows else None

    async def delete_snapshots(self, stream: str | None = None) -> int:
        where, params = ("", []) if stream is None else ("WHERE stream = %s", [check_stream_name(stream)])
        async with self._connection("delete_snapshots") as conn:
            cursor = await conn.execute(f"DELETE FROM {self._sql.snapshots} {where}", params)
            return max(cursor.rowcount, 0)

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
        where: list[str] = ["position > %s"]
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
        rows = await self._fetch("raw_events", query, [*params, limit])
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
        sql = self._sql
        async with self._connection("import") as conn, conn.transaction():
            await conn.execute(sql.lock)
            streams = list(dict.fromkeys(e.stream for e in events)) or [""]
            rows = await (await conn.execute(sql.heads, [streams])).fetchall()
            position = rows[0][0]
            tips = {row[1]: (row[2] or 0, row[3] or "") for row in rows}
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
                await conn.execute(sql.insert, columns)
            if snapshots:
                async with conn.cursor() as cursor:
                    await cursor.executemany(
                        f"""INSERT INTO {sql.snapshots} (stream, type, version, schema, data, meta,
                            recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s)
                            ON CONFLICT (stream, type, version) DO UPDATE SET schema = excluded.schema,
                            data = excluded.data, meta = excluded.meta, recorded_at = excluded.recorded_at""",
                        [astuple(snap) for snap in snapshots],
                    )


async def _configure(conn: Any) -> None:
    # A writer waiting this long for the append lock gives up with StoreUnavailable.
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


def _plan(
    entries: list[PreparedAppend], heads: list[tuple[Any, ...]]
) -> tuple[list[AppendResult], list[list[Any]]]:
    """Check expected versions and chain the new events; return the results and insert columns."""
    position = heads[0][0]
    tips: dict[str, tuple[int, str]] = {row[1]: (row[2] or 0, row[3] or "") for row in heads}
    now = to_micros(datetime.now(UTC))
    results: list[AppendResult] = []
    columns: list[list[Any]] = [[] for _ in range(11)]
    for entry in entries:
        name = entry.stream
        version, prev = tips[name]
        if not version_matches(entry.expected, version):
            raise ConcurrencyError(name, entry.expected, version)
        first = position + 1
        for event, digest in zip(
            entry.events, chain_hashes(name, version, prev, entry.events, now), strict=True
        ):
            version += 1
            position += 1
            values = (position, name, version, event.id, event.type, event.schema, event.data,
                      event.meta, now, prev, digest)  # fmt: skip
            for column, value in zip(columns, values, strict=True):
                column.append(value)
            prev = digest
        tips[name] = (version, prev)
        results.append(AppendResult(tuple(range(first, position + 1)), version))
    return results, columns


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
    if types is None:
        return None
    if isinstance(types, str):
        return [types]
    return list(types)
