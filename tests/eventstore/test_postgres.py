"""The PostgreSQL backend: the conformance suite, plus what only a server can do to a store.

Each test gets its own PostgreSQL schema (``?schema=...``), dropped afterwards, so tests never
see each other's events. Without ``TURNLOG_TEST_PG_DSN`` they are skipped with a reason.
"""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import anyio
import pytest
from conformance import StoreConformance
from test_stateful import SETTINGS, StoreMachine

from turnlog.eventstore import (
    EventStore,
    InvalidEventError,
    NewEvent,
    PostgresEventStore,
    RecordedEvent,
    StoreError,
    StoreFormatError,
    StoreNotFound,
    StoreUnavailable,
    UnsupportedStoreURL,
    encode_json,
    event_hash,
    open_store,
)
from turnlog.eventstore._postgres import FORMAT_VERSION

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


def with_params(dsn: str, **params: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + urlencode(params)


def dsn() -> str:
    """The server's DSN, for helpers; only reached by tests that took ``pg_dsn`` or ``pg_url``."""
    return os.environ["TURNLOG_TEST_PG_DSN"]


async def raw_sql(query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn(), autocommit=True) as conn:
        cursor = await conn.execute(query, params)
        return await cursor.fetchall() if cursor.description else []


# -- conformance ---------------------------------------------------------------------------


@pytest.mark.postgres
class TestPostgresConformance(StoreConformance):
    @pytest.fixture
    async def store(self, pg_url: str) -> AsyncIterator[EventStore]:
        async with open_store(pg_url) as store:
            yield store

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        assert isinstance(store, PostgresEventStore)
        await raw_sql(
            f'UPDATE "{store.schema}".events SET {column} = %s WHERE stream = %s AND version = %s',
            [data, stream, version],
        )

    async def tamper_snapshot(self, store: EventStore, stream: str, version: int, data: bytes) -> None:
        assert isinstance(store, PostgresEventStore)
        await raw_sql(
            f'UPDATE "{store.schema}".snapshots SET data = %s WHERE stream = %s AND version = %s',
            [data, stream, version],
        )


class PostgresMachine(StoreMachine):
    """The hypothesis state machine of the SQLite tests, on a fresh schema per example."""

    @property  # read once per example, by StoreMachine.__init__
    def url(self) -> str:  # type: ignore[override]
        self.schema = f"t_{uuid.uuid4().hex}"
        return with_params(dsn(), schema=self.schema)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            with psycopg.connect(dsn(), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


TestPostgresMachine = pytest.mark.slow(
    pytest.mark.postgres(pytest.mark.usefixtures("pg_dsn")(PostgresMachine.TestCase))
)
TestPostgresMachine.settings = SETTINGS


# -- opening ---------------------------------------------------------------------------


def test_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg installed, opening a PostgreSQL store says which extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreError, match=r"pip install 'turnlog\[postgres\]'"):
        PostgresEventStore("postgresql://localhost/db")


@pytest.mark.parametrize("query", ["schema=bad-name", "schema=x;drop", "pool_size=0", "pool_size=many"])
def test_bad_url_parameters_are_refused(query: str) -> None:
    """A malformed schema name or pool size is refused before any connection is made."""
    with pytest.raises(UnsupportedStoreURL, match=query.split("=")[0]):
        PostgresEventStore(f"postgresql://localhost/db?{query}")


async def test_unreachable_server_fails_fast_with_the_reason() -> None:
    """Opening a store on a port nobody listens on raises StoreUnavailable at once, saying why."""
    with anyio.fail_after(10), pytest.raises(StoreUnavailable, match="opening the store") as info:
        async with PostgresEventStore("postgresql://postgres@127.0.0.1:1/x?connect_timeout=3"):
            pass
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


def test_repr_hides_the_password() -> None:
    """The password never appears in the store's repr."""
    store = PostgresEventStore("postgresql://me:s3cret@localhost/db?schema=x")
    assert "s3cret" not in repr(store)
    assert "***" in repr(store)


@pytest.mark.postgres
class TestPostgresServer:
    """Behaviour that needs a live server."""

    async def test_schema_records_the_format_version(self, pg_url: str, pg_schema: str) -> None:
        """Opening creates the tables and records the format version."""
        async with PostgresEventStore(pg_url) as store:
            assert await store.head() == 0
        rows = await raw_sql(
            f'SELECT value FROM "{pg_schema}".turnlog_meta WHERE key = %s', ["format_version"]
        )
        assert rows == [(str(FORMAT_VERSION),)]

    async def test_newer_format_refuses_to_open(self, pg_url: str, pg_schema: str) -> None:
        """A store written by a newer format refuses to open and names both versions."""
        async with PostgresEventStore(pg_url) as store:
            await store.append("s", [NewEvent("a.b", {})])
        await raw_sql(
            f'UPDATE "{pg_schema}".turnlog_meta SET value = %s WHERE key = %s', ["99", "format_version"]
        )
        with pytest.raises(StoreFormatError, match="newer turnlog") as info:
            async with PostgresEventStore(pg_url):
                pass
        assert (info.value.found, info.value.supported) == (99, FORMAT_VERSION)

    async def test_opening_a_missing_schema_to_read_creates_nothing(
        self, pg_url: str, pg_schema: str
    ) -> None:
        """create=False on a schema without turnlog's tables raises StoreNotFound and creates nothing."""
        store = open_store(pg_url, create=False)
        with pytest.raises(StoreNotFound) as info:
            async with store:
                pass
        assert pg_schema in info.value.location
        rows = await raw_sql("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", [pg_schema])
        assert rows == []
        async with open_store(pg_url) as store:
            await store.append("s", [NewEvent("a.b", {})])
        async with open_store(pg_url, create=False) as store:
            assert [e.position for e in await _subscribed(store, 1)] == [1]

    async def test_a_format_1_store_is_upgraded_on_open(self, pg_url: str, pg_schema: str) -> None:
        """A store of format 1 (no xid column, no sequence) opens, keeps its events and continues."""
        async with PostgresEventStore(pg_url) as store:
            first = await store.append("s", [NewEvent("a.b", {"n": n}) for n in range(3)])
        # What format 1 looked like: the same tables without xid, positions as max + 1.
        await raw_sql(f'ALTER TABLE "{pg_schema}".events DROP COLUMN xid')
        await raw_sql(f'DROP SEQUENCE "{pg_schema}".events_position')
        await raw_sql(f"UPDATE \"{pg_schema}\".turnlog_meta SET value = '1' WHERE key = 'format_version'")
        async with PostgresEventStore(pg_url) as store:
            assert [e.position async for e in store.read_all()] == list(first.positions)
            assert await store.head() == 3
            result = await store.append("t", [NewEvent("a.b", {})])
            assert result.positions == (4,)
            assert [e.position async for e in store.read_all()] == [1, 2, 3, 4]
            assert (await store.verify()).ok
        assert await raw_sql(
            f"SELECT value FROM \"{pg_schema}\".turnlog_meta WHERE key = 'format_version'"
        ) == [(str(FORMAT_VERSION),)]
        assert FORMAT_VERSION == 2

    async def test_schema_with_foreign_tables_is_refused(self, pg_url: str, pg_schema: str) -> None:
        """A schema holding an unrelated ``events`` table is not taken over."""
        await raw_sql(f'CREATE SCHEMA "{pg_schema}"')
        await raw_sql(f'CREATE TABLE "{pg_schema}".events (id int)')
        with pytest.raises(StoreFormatError, match="did not create"):
            async with PostgresEventStore(pg_url):
                pass

    async def test_concurrent_openers_of_a_fresh_schema(self, pg_url: str) -> None:
        """Several stores opening the same fresh schema at once all succeed and share it."""
        stores = [PostgresEventStore(pg_url) for _ in range(4)]
        try:
            async with anyio.create_task_group() as tg:
                for i, store in enumerate(stores):
                    tg.start_soon(store.append, f"s-{i}", [NewEvent("a.b", {"i": i})])
            # Wait for the four appends of the other stores to settle: see _subscribed.
            assert sorted(e.data["i"] for e in await _subscribed(stores[0], 4)) == [0, 1, 2, 3]
            assert await stores[0].head() == 4
            names = sorted(name for name, _ in await stores[0].list_streams())
            assert names == [f"s-{i}" for i in range(4)]
        finally:
            for store in stores:
                await store.close()

    async def test_dropped_connection_fails_only_the_call_in_flight(
        self, pg_url: str, pg_schema: str
    ) -> None:
        """A connection terminated mid-call fails that call with StoreUnavailable; the next succeeds."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        async with PostgresEventStore(with_params(pg_url, application_name=app)) as store:
            await store.append("s", [NewEvent("a.b", {"n": 1})])
            # Hold the append lock from outside so the next append is surely in flight.
            async with await psycopg.AsyncConnection.connect(dsn()) as blocker:
                await blocker.execute(f'LOCK TABLE "{pg_schema}".events IN EXCLUSIVE MODE')
                failure: list[BaseException] = []

                async def doomed_append() -> None:
                    try:
                        await store.append("s", [NewEvent("a.b", {"n": 2})])
                    except StoreUnavailable as exc:
                        failure.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(doomed_append)
                    pids = await _wait_for_lock_waiter(app)
                    killed_at = anyio.current_time()
                    await raw_sql("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])
                failed_after = anyio.current_time() - killed_at
                await blocker.rollback()
            assert len(failure) == 1
            assert isinstance(failure[0].__cause__, psycopg.OperationalError)
            assert "connection" in str(failure[0])
            started = anyio.current_time()
            result = await store.append("s", [NewEvent("a.b", {"n": 3})])
            # quickly: no wait for the pool (whose timeout is several seconds)
            assert failed_after < 2.0 and anyio.current_time() - started < 2.0
            assert result.version == 2
            assert [e.data["n"] async for e in store.read_stream("s")] == [1, 3]

    async def test_a_lone_caller_keeps_one_spare_connection_and_close_returns_it(self, pg_url: str) -> None:
        """Appends one after another reuse the spare connection; close gives it back and ends it."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        async with PostgresEventStore(with_params(pg_url, application_name=app)) as store:
            for n in range(5):
                await store.append("s", [NewEvent("a.b", {"n": n})])
            assert store._db._spare is not None
            spare = store._db._spare
            await store.append("s", [NewEvent("a.b", {"n": 5})])
            assert store._db._spare is spare
        assert store._db._spare is None and spare.closed
        assert await raw_sql(query, [app]) == [(0,)]

    async def test_the_spare_connection_is_never_held_back_from_a_waiting_caller(self, pg_url: str) -> None:
        """With one pooled connection, callers that wait for it get it: the spare is not kept then."""
        async with PostgresEventStore(with_params(pg_url, pool_size="1")) as store:

            async def work(n: int) -> None:
                for i in range(20):
                    await store.append(f"s-{n}", [NewEvent("a.b", {"i": i})])
                    await store.stream_version(f"s-{n}")

            with anyio.fail_after(20):  # the pool's own timeout (5 s) would fail a call first
                async with anyio.create_task_group() as tg:
                    for n in range(4):
                        tg.start_soon(work, n)
            assert [await store.stream_version(f"s-{n}") for n in range(4)] == [20] * 4
            assert (await store.verify()).ok

    async def test_a_spare_connection_killed_while_idle_is_replaced(self, pg_url: str) -> None:
        """The spare is checked like any pooled connection: a terminated one is never used."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        async with PostgresEventStore(with_params(pg_url, application_name=app)) as store:
            await store.append("s", [NewEvent("a.b", {"n": 1})])
            assert store._db._spare is not None
            await raw_sql(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = %s",
                [app],
            )
            result = await store.append("s", [NewEvent("a.b", {"n": 2})])
            assert result.version == 2

    async def test_terminated_backends_fail_only_their_calls_and_quickly(self, pg_url: str) -> None:
        """Backends killed under 4 busy writers: each failure is quick, nothing acknowledged is lost."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        acked: list[tuple[str, int]] = []
        failures: list[float] = []
        killed = 0
        async with PostgresEventStore(with_params(pg_url, application_name=app)) as store:
            await store.head()
            stop = anyio.Event()

            async def write(n: int) -> None:
                i = 0
                while not stop.is_set():
                    started = anyio.current_time()
                    try:
                        await store.append(f"s-{n}", [NewEvent("a.b", {"n": n, "i": i})])
                        acked.append((f"s-{n}", i))
                    except StoreUnavailable:
                        failures.append(anyio.current_time() - started)
                    i += 1

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for n in range(4):
                        tg.start_soon(write, n)
                    for _ in range(5):
                        await anyio.sleep(0.2)
                        killed += len(
                            await raw_sql(
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE application_name = %s",
                                [app],
                            )
                        )
                    await anyio.sleep(0.3)
                    stop.set()
            stored = {(e.stream, e.data["i"]) async for e in store.read_all()}
            assert (await store.verify()).ok
        # Whether a call was in flight at a kill is luck (test_dropped_connection_... makes
        # sure of it); a call that failed failed quickly, and idle connections were replaced.
        assert killed >= 5
        assert max(failures, default=0.0) < 2.0, failures
        assert set(acked) <= stored
        assert len(acked) > 3 * len(failures) + 20

    async def test_subscriber_recovers_from_terminated_backends_without_skips_or_duplicates(
        self, pg_url: str
    ) -> None:
        """Every connection of a subscribing store killed 4 times: it delivers each event once, in order."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        total = 200
        got: list[int] = []
        async with (
            PostgresEventStore(with_params(pg_url, application_name=app), poll_interval=0.5) as reader,
            PostgresEventStore(pg_url) as writer,
        ):
            await writer.head()
            done = anyio.Event()

            async def consume() -> None:
                async for event in reader.subscribe():
                    got.append(event.data["n"])
                    if len(got) == total:
                        done.set()
                        return

            async def write() -> None:
                for n in range(total):
                    await writer.append(f"s-{n % 5}", [NewEvent("a.b", {"n": n})])
                    await anyio.sleep(0.005)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume)
                    tg.start_soon(write)
                    for _ in range(4):
                        await anyio.sleep(0.25)
                        await raw_sql(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                            [app],
                        )
            # the writer finished before the last kill's recovery could take long: bounded delivery
        assert got == list(range(total))

    async def test_psycopg_messages_do_not_reach_stderr(self, pg_url: str) -> None:
        """Killed connections are reported as StoreUnavailable, with nothing printed by the driver."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        code = textwrap.dedent(
            """
            import sys, anyio, psycopg
            from turnlog.eventstore import NewEvent, StoreUnavailable
            from turnlog.eventstore import PostgresEventStore

            async def main(url, dsn, app):
                async with PostgresEventStore(url, poll_interval=0.1) as store:
                    for round in range(3):
                        await store.append("s", [NewEvent("a.b", {})])
                        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                            await conn.execute(
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE application_name = %s", [app])
                        try:
                            await store.append("s", [NewEvent("a.b", {})])
                        except StoreUnavailable:
                            pass
                    print(await store.head() >= 3)

            anyio.run(main, *sys.argv[1:])
            """
        )
        url = with_params(pg_url, application_name=app)
        proc = await anyio.run_process([sys.executable, "-c", code, url, dsn(), app], check=False)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode().strip() == "True"
        assert proc.stderr.decode() == ""

    async def test_idle_connections_killed_by_the_server_are_replaced(self, pg_url: str) -> None:
        """After the server drops every idle connection of the store, the next call still succeeds."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        async with PostgresEventStore(with_params(pg_url, application_name=app)) as store:
            await store.append("s", [NewEvent("a.b", {})])
            # With a timeout, pg_terminate_backend returns once the backend has exited (not
            # when the signal is sent), so the connections are really dead, not dying, when
            # the next append checks one out.
            killed = await raw_sql(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = %s",
                [app],
            )
            assert killed and all(row[0] for row in killed)
            assert (await store.append("s", [NewEvent("a.b", {})])).version == 2
            assert await store.head() == 2

    async def test_subscriber_survives_a_dropped_listener(self, pg_url: str) -> None:
        """Killing the LISTEN connection neither ends the subscription nor loses an event."""
        app = f"turnlog-test-{uuid.uuid4().hex[:8]}"
        async with PostgresEventStore(with_params(pg_url, application_name=app), poll_interval=0.2) as store:
            seen: list[int] = []
            first = anyio.Event()
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async for event in store.subscribe():
                            seen.append(event.data["n"])
                            first.set()
                            if len(seen) == 3:
                                return

                    tg.start_soon(consume)
                    await store.append("s", [NewEvent("a.b", {"n": 1})])
                    await first.wait()
                    await raw_sql(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s AND query LIKE 'LISTEN%%'",
                        [app],
                    )
                    await store.append("s", [NewEvent("a.b", {"n": 2}), NewEvent("a.b", {"n": 3})])
            assert seen == [1, 2, 3]

    async def test_subscriber_catches_an_event_whose_notification_was_lost(
        self, pg_url: str, pg_schema: str
    ) -> None:
        """An event committed without NOTIFY still reaches a subscriber, by the timed re-query."""
        async with PostgresEventStore(pg_url, poll_interval=0.2) as store:
            await store.append("s", [NewEvent("a.b", {"n": 1})])
            got: list[RecordedEvent] = []
            first = anyio.Event()
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async for event in store.subscribe():
                            got.append(event)
                            first.set()
                            if len(got) == 2:
                                return

                    tg.start_soon(consume)
                    await first.wait()
                    await _insert_without_notify(pg_schema, got[0])
            assert [e.data["n"] for e in got] == [1, 2]
            assert (await store.verify()).ok

    async def test_subscriber_sees_appends_of_another_process(self, pg_url: str) -> None:
        """Live delivery includes events appended by a different process."""
        code = textwrap.dedent(
            """
            import sys, anyio
            from turnlog.eventstore import NewEvent
            from turnlog.eventstore import PostgresEventStore
            async def main():
                async with PostgresEventStore(sys.argv[1]) as store:
                    for n in range(5):
                        await store.append("other", [NewEvent("a.b", {"n": n})])
            anyio.run(main)
            """
        )
        async with PostgresEventStore(pg_url, poll_interval=120.0) as store:
            got: list[int] = []
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async for event in store.subscribe():
                            got.append(event.data["n"])
                            if len(got) == 5:
                                return

                    tg.start_soon(consume)
                    await anyio.sleep(0.2)  # let the subscription reach its LISTEN
                    proc = await anyio.run_process([sys.executable, "-c", code, pg_url], check=False)
                    assert proc.returncode == 0, proc.stderr.decode()
            # poll_interval=120 means only notifications (or the quick re-query of events held
            # back by an older transaction) could have delivered these in time
            assert got == [0, 1, 2, 3, 4]

    async def test_subscriber_gets_an_event_held_back_once_the_older_transaction_ends(
        self, pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An event committed after a position taken by a still-open transaction is delivered when
        that transaction commits, though its commit notifies nobody and nothing else is appended."""
        async with (
            PostgresEventStore(pg_url, poll_interval=120.0) as reader,
            PostgresEventStore(pg_url) as writer,
        ):
            got: list[int] = []
            first = anyio.Event()
            # Set once a query of the subscriber started after the second append has returned:
            # it found that event committed but held back (a seam on the reader's queries).
            looked: list[anyio.Event] = []
            fetch_global = reader._fetch_global

            async def watched(action: str, query: str, params: Any) -> list[tuple[Any, ...]]:
                after = looked[:]
                rows = await fetch_global(action, query, params)
                if action == "subscribe":
                    for event in after:
                        event.set()
                return rows

            monkeypatch.setattr(reader, "_fetch_global", watched)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:

                    async def consume() -> None:
                        async for event in reader.subscribe():
                            got.append(event.data["n"])
                            first.set()
                            if len(got) == 2:
                                return

                    tg.start_soon(consume)
                    await writer.append("s", [NewEvent("a.b", {"n": 1})])
                    await first.wait()  # the subscriber is live, waiting for a notification
                    async with await psycopg.AsyncConnection.connect(dsn()) as older:
                        # An open transaction with an id and a position, as an append not yet
                        # committed (or any writer on the server) has.
                        await older.execute(
                            f"SELECT pg_current_xact_id(), nextval('\"{pg_schema}\".events_position')"
                        )
                        await writer.append("s", [NewEvent("a.b", {"n": 2})])  # committed, notified
                        looked.append(anyio.Event())
                        await looked[0].wait()
                        # held back: the older transaction may still add an event before it
                        assert await reader.head() == 1
                        assert got == [1]
                        await older.commit()  # no NOTIFY, and no append after this one
            assert got == [1, 2]

    async def test_tampered_byte_is_named_by_verify(self, pg_url: str, pg_schema: str) -> None:
        """Changing one stored byte with plain SQL makes verify name the stream and version."""
        async with PostgresEventStore(pg_url) as store:
            await store.append("s", [NewEvent("a.b", {"text": "hello"}) for _ in range(3)])
            await raw_sql(
                f"UPDATE \"{pg_schema}\".events SET data = replace(data::text, '6865', '6a65')::bytea "
                "WHERE stream = 's' AND version = 2"
            )
            report = await store.verify()
            assert not report.ok
            assert {(p.stream, p.version) for p in report.problems} == {("s", 2)}

    @pytest.mark.parametrize("event_id", ["not-a-uuid", "0190B9C2-0000-7000-8000-000000000001"])
    async def test_ids_that_would_not_round_trip_are_refused(self, pg_url: str, event_id: str) -> None:
        """An id the uuid column would respell (or refuse) is rejected before anything is written."""
        async with PostgresEventStore(pg_url) as store:
            bad = NewEvent("a.b", {}, id=event_id)  # type: ignore[arg-type]
            with pytest.raises(InvalidEventError, match="canonical"):
                await store.append("s", [NewEvent("a.b", {}), bad])
            assert await store.head() == 0

    async def test_positions_stay_gapless_after_rejected_appends(self, pg_url: str) -> None:
        """Appends refused by their expected version consume no position (checked before reserving)."""
        async with PostgresEventStore(pg_url) as store:
            await store.append("s", [NewEvent("a.b", {})], 0)
            for _ in range(3):
                with pytest.raises(StoreError):
                    await store.append("s", [NewEvent("a.b", {})], 0)
            result = await store.append("t", [NewEvent("a.b", {})], 0)
            assert result.positions == (2,)


async def _wait_for_lock_waiter(app: str) -> list[int]:
    with anyio.fail_after(10):
        while True:
            rows = await raw_sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                [app],
            )
            if rows:
                return [row[0] for row in rows]
            await anyio.sleep(0.02)


async def _subscribed(store: EventStore, count: int) -> list[RecordedEvent]:
    """The first ``count`` events of the log, by subscribing: a global read of another store
    object shows an append only once every older transaction of the server has ended (other
    tests' too), which a subscriber waits for and a single ``head`` or ``read_all`` does not."""
    got: list[RecordedEvent] = []
    with anyio.fail_after(30):
        async for event in store.subscribe():
            got.append(event)
            if len(got) == count:
                break
    return got


async def _insert_without_notify(schema: str, previous: RecordedEvent) -> None:
    """Store one valid event with plain SQL and no NOTIFY, as a lost notification would look."""
    eid = str(uuid.uuid4())
    data, meta = encode_json({"n": 2}), encode_json({})
    when = 1_700_000_000_000_000
    digest = event_hash(previous.hash, eid, "s", 2, "a.b", 1, data, meta, when)
    await raw_sql(
        f'INSERT INTO "{schema}".events (position, stream, version, event_id, type, schema, data, meta, '
        f"recorded_at, prev_hash, hash) VALUES (nextval('\"{schema}\".events_position'), 's', 2, %s, "
        "'a.b', 1, %s, %s, %s, %s, %s)",
        [eid, data, meta, when, previous.hash, digest],
    )
