"""The SQLite backend: the conformance suite plus what only SQLite has."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from conformance import StoreConformance, collect, ev
from freezegun import freeze_time

from turnlog.eventstore import (
    EventStore,
    MemoryEventStore,
    NewEvent,
    NewSnapshot,
    SQLiteEventStore,
    StoreError,
    StoreFormatError,
    StoreNotFound,
    StoreUnavailable,
    TurnlogError,
    UnsupportedStoreURL,
    encode_json,
    open_store,
)
from turnlog.eventstore._sqlite import FORMAT_VERSION
from turnlog.eventstore._sqlite_compact import meta_digest
from turnlog.eventstore._sqlite_layout import COPIED_BLOB_BYTES


class TestSQLiteFile(StoreConformance):
    @pytest.fixture
    async def store(self, sqlite_url: str) -> AsyncIterator[EventStore]:
        async with open_store(sqlite_url) as store:
            yield store

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        assert isinstance(store, SQLiteEventStore)
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            tamper_row(conn, stream, version, data, column)
        finally:
            conn.close()

    async def tamper_snapshot(self, store: EventStore, stream: str, version: int, data: bytes) -> None:
        assert isinstance(store, SQLiteEventStore)
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            conn.execute(
                "UPDATE snapshots SET data = ? WHERE stream = ? AND version = ?", (data, stream, version)
            )
        finally:
            conn.close()


class TestSQLiteMemory(StoreConformance):
    shares_across_processes = False

    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        async with open_store("sqlite:///:memory:") as store:
            yield store

    async def tamper(
        self, store: EventStore, stream: str, version: int, data: bytes, column: str = "data"
    ) -> None:
        assert isinstance(store, SQLiteEventStore)
        tamper_row(store._conn, stream, version, data, column)  # the private database has no other way in

    async def tamper_snapshot(self, store: EventStore, stream: str, version: int, data: bytes) -> None:
        assert isinstance(store, SQLiteEventStore)
        store._conn.execute(
            "UPDATE snapshots SET data = ? WHERE stream = ? AND version = ?", (data, stream, version)
        )


def tamper_row(conn: sqlite3.Connection, stream: str, version: int, value: bytes, column: str) -> None:
    """Set an event's ``data`` or ``meta`` by hand, in either layout (a payload goes in uncompressed)."""
    if "stream_id" not in {row[1] for row in conn.execute("PRAGMA table_info(events)")}:
        conn.execute(
            f"UPDATE events SET {column} = ? WHERE stream = ? AND version = ?", (value, stream, version)
        )
        return
    where = "stream_id = (SELECT stream_id FROM streams WHERE name = ?) AND version = ?"
    if column == "data":
        conn.execute(f"UPDATE events SET codec = 0, data = ? WHERE {where}", (value, stream, version))
    else:
        assert column == "meta"
        meta_id = conn.execute(
            "INSERT INTO metas (digest, meta) VALUES (?, ?)", (meta_digest(value), value)
        ).lastrowid
        conn.execute(f"UPDATE events SET meta_id = ? WHERE {where}", (meta_id, stream, version))


class TestSQLiteFileCompact(TestSQLiteFile):
    """The conformance suite on a store of format 3 (the compact layout)."""

    @pytest.fixture
    async def store(self, sqlite_url: str) -> AsyncIterator[EventStore]:
        async with open_store(f"{sqlite_url}?format=3") as store:
            assert isinstance(store, SQLiteEventStore) and store.format_version == 3
            yield store


class TestSQLiteMemoryCompact(TestSQLiteMemory):
    """The conformance suite on a private database of format 3."""

    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        async with SQLiteEventStore(":memory:", new_format=3) as store:
            yield store


class TestSQLiteFileZstd(TestSQLiteFile):
    """The conformance suite on a store of format 4 (the compact layout, zstd)."""

    @pytest.fixture
    async def store(self, sqlite_url: str) -> AsyncIterator[EventStore]:
        async with open_store(f"{sqlite_url}?format=4") as store:
            assert isinstance(store, SQLiteEventStore) and store.format_version == 4
            yield store


def file_size(path: Path) -> int:
    return os.path.getsize(path)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


async def test_events_survive_reopening(sqlite_url: str) -> None:
    """Events, versions and hashes read back the same after the store is reopened."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(n=1), ev(n=2)])
        before = await collect(store.read_all())
    async with open_store(sqlite_url) as store:
        assert await collect(store.read_all()) == before
        assert (await store.append("s-1", [ev()], expected_version=2)).positions == (3,)
        assert (await store.verify()).ok


async def test_schema_stores_canonical_bytes_and_micros(sqlite_path: Path, sqlite_url: str) -> None:
    """data and meta are stored as canonical JSON blobs, recorded_at as integer microseconds."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(b=1, a=2)])
        (event,) = await collect(store.read_all())
    with raw(sqlite_path) as conn:
        row = conn.execute("SELECT data, typeof(data), meta, recorded_at FROM events").fetchone()
        assert row[:3] == (b'{"a":2,"b":1}', "blob", b"{}")
        assert row[3] == int(event.recorded_at.timestamp() * 1_000_000)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0] == "2"
        assert "tracking" in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


@pytest.mark.parametrize("count", [1, 3, 70])
async def test_payloads_are_stored_as_blobs_of_their_canonical_bytes_small_or_large(
    sqlite_path: Path, sqlite_url: str, count: int
) -> None:
    """Small payloads (bound as bytearray copies) and large ones (bound as bytes) store the same
    blobs: the canonical bytes, of SQLite type blob, read back equal, in single and block inserts."""
    big = "x" * (COPIED_BLOB_BYTES + 1)
    events = [ev(n=n, text=big if n % 2 else "short") for n in range(count)]
    metas = [{"m": big}, {"m": "small"}]
    events = [NewEvent(e.type, e.data, metas[n % 2]) for n, e in enumerate(events)]
    async with open_store(sqlite_url, max_event_bytes=4 * COPIED_BLOB_BYTES) as store:
        await store.append("s-1", events)
        read = await collect(store.read_all())
        assert (await store.verify()).ok
    assert [(e.data, e.meta) for e in read] == [(e.data, e.meta) for e in events]
    with raw(sqlite_path) as conn:
        rows = conn.execute(
            "SELECT data, typeof(data), meta, typeof(meta) FROM events ORDER BY position"
        ).fetchall()
    assert rows == [(encode_json(e.data), "blob", encode_json(e.meta or {}), "blob") for e in events]


async def test_recorded_at_is_the_append_time(sqlite_url: str) -> None:
    """recorded_at is the UTC time of the append, to the microsecond."""
    async with open_store(sqlite_url) as store:
        with freeze_time("2026-03-04 05:06:07.891011"):
            await store.append("s-1", [ev()])
        (event,) = await collect(store.read_all())
    assert event.recorded_at.isoformat() == "2026-03-04T05:06:07.891011+00:00"


@pytest.mark.parametrize(("durability", "level"), [("normal", 1), ("full", 2)])
async def test_durability_sets_synchronous(sqlite_url: str, durability: str, level: int) -> None:
    """durability chooses PRAGMA synchronous; appends work at both levels."""
    async with open_store(sqlite_url, durability=durability) as store:  # type: ignore[arg-type]
        assert isinstance(store, SQLiteEventStore)
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert (await store.append("s-1", [ev(), ev()])).version == 2
        assert (await store.verify()).ok


async def test_the_database_refuses_to_delete_an_event(sqlite_path: Path, sqlite_url: str) -> None:
    """No row can be deleted, so the newest position never becomes available again."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(), ev()])
    conn = raw(sqlite_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="never deletes events"):
            conn.execute("DELETE FROM events WHERE position = 2")
        assert conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'"
        ).fetchone() == (0,)
    finally:
        conn.close()
    async with open_store(sqlite_url) as store:
        assert (await store.append("s-2", [ev()])).positions == (3,)
        assert (await store.verify()).ok


async def test_a_store_made_with_autoincrement_never_reuses_positions(
    sqlite_path: Path, sqlite_url: str
) -> None:
    """A store whose events table has AUTOINCREMENT (made before the trigger) keeps it and works."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(), ev()])
    conn = raw(sqlite_path)
    try:
        (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        conn.executescript(
            "BEGIN; DROP TRIGGER events_no_delete; ALTER TABLE events RENAME TO old_events;"
            + ddl.replace("INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT")
            + "; INSERT INTO events SELECT * FROM old_events; DROP TABLE old_events; COMMIT;"
        )
        conn.execute("DELETE FROM events WHERE position = 2")
    finally:
        conn.close()
    async with open_store(sqlite_url) as store:
        assert (await store.append("s-2", [ev()])).positions == (3,)


async def test_newer_format_refuses_to_open(sqlite_path: Path, sqlite_url: str) -> None:
    """A store written by a newer format version raises StoreFormatError."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev()])
    with raw(sqlite_path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (str(FORMAT_VERSION + 1),))
    with pytest.raises(StoreFormatError, match="newer turnlog") as info:
        open_store(sqlite_url)
    assert (info.value.found, info.value.supported) == (FORMAT_VERSION + 1, FORMAT_VERSION)


async def test_file_that_is_not_sqlite_is_refused(sqlite_path: Path, sqlite_url: str) -> None:
    """A file that is not a SQLite database raises StoreFormatError."""
    with open(sqlite_path, "wb") as file:
        file.write(b"hello, this is a text file\n" * 100)
    with pytest.raises(StoreFormatError, match="not a SQLite database"):
        open_store(sqlite_url)


async def test_sqlite_database_of_another_program_is_refused(sqlite_path: Path, sqlite_url: str) -> None:
    """A SQLite database without turnlog's tables raises StoreFormatError and is not modified."""
    with raw(sqlite_path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(StoreFormatError, match="not a turnlog store"):
        open_store(sqlite_url)
    with raw(sqlite_path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]


async def test_append_waits_for_another_writer_without_blocking_the_loop(sqlite_path: Path) -> None:
    """While another connection holds the write lock, an append waits off the loop, then lands."""
    store = SQLiteEventStore(sqlite_path)
    other = raw(sqlite_path)
    other.execute("BEGIN IMMEDIATE")
    ticks = 0
    async with store:

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.sleep(0.005)

        release = threading.Timer(0.3, other.execute, ("COMMIT",))
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            release.start()
            with anyio.fail_after(10):
                result = await store.append("s-1", [ev()])
            tg.cancel_scope.cancel()
        release.join()
        assert result.positions == (1,)
        assert ticks >= 10  # the loop kept running while the append waited
    other.close()


async def test_write_lock_held_too_long_raises_store_unavailable(sqlite_path: Path) -> None:
    """An append that cannot get the write lock within busy_timeout raises StoreUnavailable."""
    store = SQLiteEventStore(sqlite_path, busy_timeout=0.1)
    other = raw(sqlite_path)
    other.execute("BEGIN IMMEDIATE")
    try:
        async with store:
            with pytest.raises(StoreUnavailable, match="locked"):
                await store.append("s-1", [ev()])
            other.execute("ROLLBACK")
            assert (await store.append("s-1", [ev()])).positions == (1,)
    finally:
        other.close()


async def test_large_batches_run_off_the_loop(sqlite_url: str) -> None:
    """A batch over the inline threshold is written on the worker thread, atomically."""
    async with open_store(sqlite_url) as store:
        result = await store.append("s-1", [ev(n=i) for i in range(1000)])
        assert result.positions == tuple(range(1, 1001)) and result.version == 1000
        assert (await store.verify()).events == 1000


def _store_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("turnlog-sqlite:")]


async def test_a_store_that_only_reads_starts_no_thread(sqlite_url: str) -> None:
    """Reads run inline: opening, reading and closing a store never starts its worker thread."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(n=1)])
    before = _store_threads()
    async with open_store(sqlite_url, create=False) as store:
        assert [e.data["n"] for e in await collect(store.read_stream("s-1"))] == [1]
        assert _store_threads() == before
    assert _store_threads() == before


async def test_closing_ends_the_worker_thread_after_its_jobs(sqlite_path: Path, sqlite_url: str) -> None:
    """A store whose worker ran jobs ends it on close, after the jobs; what they wrote stays."""
    before = _store_threads()
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(n=i) for i in range(1000)])  # a batch goes to the worker
        assert len(_store_threads()) == len(before) + 1
        assert (await store.verify()).events == 1000  # on its own connection, opened for it
    assert _store_threads() == before
    wal = Path(f"{sqlite_path}-wal")
    assert not wal.exists() or file_size(wal) == 0  # the last close checkpointed the WAL
    with raw(sqlite_path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1000


async def test_large_events_are_read_in_small_pages(sqlite_url: str) -> None:
    """Pages end after a few MiB of payload, and paging still returns every event once."""
    async with open_store(sqlite_url) as store:
        for i in range(6):
            await store.append("s-1", [ev(i=i, blob="b" * 1_000_000)])
        assert [e.data["i"] for e in await collect(store.read_all())] == list(range(6))
        backwards = await collect(store.read_stream("s-1", backwards=True, limit=5))
        assert [e.version for e in backwards] == [6, 5, 4, 3, 2]


async def test_wal_is_checkpointed_in_the_background(sqlite_path: Path, sqlite_url: str) -> None:
    """The WAL does not grow without bound although automatic checkpoints are off."""
    wal = Path(f"{sqlite_path}-wal")
    async with open_store(sqlite_url) as store:
        for _ in range(150):  # 24 MB of events
            await store.append("s-1", [ev(blob="z" * 4000) for _ in range(40)])
        await store.verify()  # runs on the worker after any queued checkpoint
        assert file_size(wal) < 12 * 1024 * 1024
        with raw(sqlite_path) as conn:
            busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and log == done


async def test_wal_of_many_small_appends_is_checkpointed_too(sqlite_path: Path, sqlite_url: str) -> None:
    """Each commit writes whole WAL pages: many one-event appends are checkpointed by what they wrote.

    3,000 appends of a few hundred bytes each write about 57 MB of WAL frames (four pages a
    commit), far more than their payload; counting only the payload let the WAL reach that.
    """
    wal = Path(f"{sqlite_path}-wal")
    async with open_store(sqlite_url) as store:
        for i in range(3000):
            await store.append(f"s-{i % 8}", [ev(i=i, text="t" * 250)])
        await store.verify()  # runs on the worker after any queued checkpoint
        # About 8 MiB, plus what the loop wrote while a queued checkpoint waited for its thread.
        assert file_size(wal) < 20 * 1024 * 1024


# ---------------------------------------------------------------- open_store


async def test_open_store_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative, absolute and in-memory SQLite URLs and memory:// open the right backend."""
    monkeypatch.chdir(tmp_path)
    cases = {
        "sqlite:///rel.db": tmp_path / "rel.db",
        f"sqlite:///{tmp_path}/abs.db": tmp_path / "abs.db",
    }
    for url, path in cases.items():
        async with open_store(url) as store:
            assert isinstance(store, SQLiteEventStore) and store.url == url
            await store.append("s-1", [ev()])
        assert file_size(path) > 0
    async with open_store("sqlite:///:memory:") as store:
        assert isinstance(store, SQLiteEventStore) and store.path == ":memory:"
    async with open_store("memory://") as store:
        assert isinstance(store, MemoryEventStore)


async def test_open_store_default_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a URL, $TURNLOG_STORE is used, else ./turnlog.db."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNLOG_STORE", raising=False)
    async with open_store() as store:
        assert isinstance(store, SQLiteEventStore) and store.path == "./turnlog.db"
    monkeypatch.setenv("TURNLOG_STORE", "memory://")
    async with open_store() as store:
        assert isinstance(store, MemoryEventStore)
    monkeypatch.setenv("TURNLOG_STORE", str(tmp_path / "env.db"))
    async with open_store() as store:
        assert isinstance(store, SQLiteEventStore) and store.path == str(tmp_path / "env.db")


@pytest.mark.parametrize("url", ["store.db", "/tmp/x.db", "mysql://host/db", "sqlite://x.db", "memory://x"])
def test_open_store_refuses_unknown_urls(url: str) -> None:
    """A plain path or an unknown scheme raises UnsupportedStoreURL naming what is supported."""
    with pytest.raises(UnsupportedStoreURL) as info:
        open_store(url)
    assert isinstance(info.value, ValueError)
    if "://" not in url:
        assert "sqlite:///" in str(info.value)


async def test_durability_can_be_asked_for_in_the_url(tmp_path: Path) -> None:
    """?durability=full in a SQLite URL sets synchronous=FULL; it is not part of the file name."""
    url = f"sqlite:///{tmp_path / 'a.db'}?durability=full"
    async with open_store(url) as store:
        assert isinstance(store, SQLiteEventStore) and store.durability == "full"
        await store.append("s", [NewEvent("t", {})])
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["a.db"]
    async with open_store(url, durability="full") as store:
        assert await store.stream_version("s") == 1
    async with open_store(f"sqlite:///{tmp_path / 'a.db'}?durability=normal") as store:
        assert isinstance(store, SQLiteEventStore) and store.durability == "normal"


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("?durability=fast", "durability must be one of normal, full, not 'fast'"),
        ("?durability", "durability must be one of normal, full, not ''"),
        ("?mode=ro", "unknown SQLite URL parameter 'mode'"),
        ("?durability=full&durability=normal", "durability is given twice"),
    ],
)
def test_bad_sqlite_url_parameters_are_refused(tmp_path: Path, suffix: str, message: str) -> None:
    """An unknown or malformed parameter raises instead of becoming part of the file name."""
    with pytest.raises(UnsupportedStoreURL, match=re.escape(message)):
        open_store(f"sqlite:///{tmp_path / 'a.db'}{suffix}")
    assert list(tmp_path.iterdir()) == []


def test_url_and_argument_must_agree_on_durability(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedStoreURL, match="durability=full, the caller for durability=normal"):
        open_store(f"sqlite:///{tmp_path / 'a.db'}?durability=full", durability="normal")


async def test_a_plain_path_in_the_environment_keeps_its_question_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLOG_STORE", str(tmp_path / "odd?name.db"))
    async with open_store() as store:
        await store.append("s", [NewEvent("t", {})])
    assert (tmp_path / "odd?name.db").exists()


def test_postgres_without_the_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """postgresql:// loads its backend lazily; when psycopg is missing, the error names the extra."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for url in ("postgresql://u@h/db", "postgres://u@h/db"):
        with pytest.raises(UnsupportedStoreURL, match=r"turnlog\[postgres\]"):
            open_store(url)


def test_unknown_durability_is_refused(sqlite_url: str) -> None:
    """durability other than normal or full raises ValueError."""
    with pytest.raises(ValueError, match="durability"):
        open_store(sqlite_url, durability="fast")  # type: ignore[arg-type]


# -- opening an existing store only ------------------------------------------------------------


async def test_opening_a_missing_file_to_read_creates_nothing(tmp_path: Path) -> None:
    """create=False on a path that does not exist raises StoreNotFound naming it; no file appears."""
    path = tmp_path / "nope.db"
    with pytest.raises(StoreNotFound) as info:
        open_store(f"sqlite:///{path}", create=False)
    assert info.value.location == str(path)
    assert isinstance(info.value, TurnlogError)
    with pytest.raises(StoreNotFound):
        SQLiteEventStore(path, create=False)
    assert list(tmp_path.iterdir()) == []


async def test_opening_an_empty_file_to_read_creates_no_tables(tmp_path: Path) -> None:
    """create=False on an empty file (or an empty SQLite database) refuses and leaves it empty."""
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StoreNotFound, match="empty"):
        open_store(f"sqlite:///{path}", create=False)
    assert path.stat().st_size == 0


async def test_opening_an_existing_store_to_read_works(sqlite_path: Path, sqlite_url: str) -> None:
    """create=False opens a store that exists, for reads and writes alike."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev()])
    async with open_store(sqlite_url, create=False) as store:
        assert (await store.verify()).events == 1
        assert (await store.append("s-1", [ev()])).version == 2


_HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO tracking (consumer, position) VALUES ('held', 1)")
print("held", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


async def test_reading_needs_no_write_lock(sqlite_path: Path, sqlite_url: str) -> None:
    """While another process holds a write transaction, a store opens, reads and verifies at once."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(n=1), ev(n=2)])
    async with await anyio.open_process([sys.executable, "-c", _HOLD_WRITE_LOCK, str(sqlite_path)]) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        assert (await proc.stdout.receive()).startswith(b"held")
        try:
            with anyio.fail_after(2):  # the busy timeout is 5 s: a wait for the lock would show
                for create in (False, True):
                    async with open_store(sqlite_url, create=create) as store:
                        assert [e.data["n"] for e in await collect(store.read_stream("s-1"))] == [1, 2]
                        report = await store.verify()
                        assert report.ok and report.events == 2
        finally:
            await proc.stdin.aclose()
        assert await proc.wait() == 0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
async def test_store_files_are_private(tmp_path: Path) -> None:
    """The database, its -wal and -shm files are created 0600; a stricter umask still applies."""
    for umask, expected in ((0o022, 0o600), (0o077, 0o600), (0o277, 0o400)):
        path = tmp_path / f"private-{umask:o}.db"
        old = os.umask(umask)
        try:
            store = SQLiteEventStore(path)
        finally:
            os.umask(old)
        async with store:
            if umask != 0o277:
                await store.append("s-1", [ev()])
            for suffix in ("", "-wal", "-shm"):
                mode = os.stat(f"{path}{suffix}").st_mode & 0o777
                assert mode == expected, f"{path.name}{suffix}: {mode:o}"


# -- verify: the database file and the snapshots -----------------------------------------------


def _corrupt_index(path: Path) -> None:
    """Change the stream name in one entry of the (stream, version) index, not in the table."""
    with raw(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' "
            "AND name = 'sqlite_autoindex_events_2'"
        ).fetchone()
    conn.close()
    with open(path, "r+b") as file:
        file.seek((root - 1) * page_size)
        page = file.read(page_size)
        at = page.index(b"qqqq-stream")
        file.seek((root - 1) * page_size + at)
        file.write(b"qqqq-strean")


async def test_verify_runs_integrity_check_and_says_which(sqlite_path: Path, sqlite_url: str) -> None:
    """verify runs integrity_check (quick=True: quick_check), which finds index rows that do
    not match the table; the report says which check ran."""
    async with open_store(sqlite_url) as store:
        await store.append("qqqq-stream", [ev(n=i) for i in range(3)])
        report = await store.verify()
        assert report.ok and "integrity_check" in report.checks and "quick_check" not in report.checks
        assert "quick_check" in (await store.verify(quick=True)).checks
        assert "integrity_check" not in (await store.verify("qqqq-stream")).checks
    _corrupt_index(sqlite_path)
    async with open_store(sqlite_url, create=False) as store:
        full = await store.verify()
        quick = await store.verify(quick=True)
    assert not full.ok
    assert any("integrity_check" in p.what and "index" in p.what for p in full.problems)
    assert quick.checks[-1] == "quick_check"


async def test_a_snapshot_of_an_older_turnlog_is_not_trusted(sqlite_path: Path, sqlite_url: str) -> None:
    """A snapshot without its binding to the log (older turnlog, or stripped) is not returned."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev()])
        await store.save_snapshot(NewSnapshot("s-1", 1, "branch_state", {"n": 1}))
    with raw(sqlite_path) as conn:
        conn.execute("UPDATE snapshots SET meta = '{}'")
    conn.close()
    async with open_store(sqlite_url) as store:
        assert await store.load_snapshot("s-1") is None
        report = await store.verify()
    assert [p.version for p in report.problems] == [1] and "no binding" in report.problems[0].what


_CONFUSIONS = [
    ("data = 5", "data"),
    ("meta = X'ff00'", "payload is not valid JSON"),
    ("recorded_at = 'yesterday'", "recorded_at"),
    ("prev_hash = X'00ff'", "prev_hash"),
    ("hash = 7", "hash"),
    ("position = position", None),  # a control: nothing wrong
    ("id = 'payment-42'", "canonical UUID"),
    ("type = X'c3'", "type"),
    ("stream = CAST(X'62ff' AS TEXT)", "stream"),
]


@pytest.mark.parametrize(("change", "named"), _CONFUSIONS)
async def test_rows_of_the_wrong_types_are_reported_not_raised(
    sqlite_path: Path, sqlite_url: str, change: str, named: str | None
) -> None:
    """verify reports a row whose fields have the wrong types or are not UTF-8; reads raise
    a StoreError subclass, never TypeError or UnicodeDecodeError."""
    async with open_store(sqlite_url) as store:
        await store.append("s-1", [ev(n=1), ev(n=2), ev(n=3)])
    with raw(sqlite_path) as conn:
        conn.execute(f"UPDATE events SET {change} WHERE version = 2")
    conn.close()
    async with open_store(sqlite_url, create=False) as store:
        report = await store.verify()
        assert report.events == 3
        if named is None:
            assert report.ok
        else:
            assert not report.ok
            assert any(named in p.what for p in report.problems), report.problems
            try:
                await collect(store.read_all())
            except StoreError:
                pass


async def test_damaged_files_never_crash_verify(sqlite_path: Path, sqlite_url: str) -> None:
    """Random bit flips in a store file: opening, verify, reads and snapshot loads either work
    or raise a TurnlogError; nothing else escapes."""
    import random
    from contextlib import aclosing

    async with open_store(sqlite_url) as store:
        for k in range(3):
            await store.append(f"branch-{k}", [ev(text=f"hello {k} {i}", n=i) for i in range(30)])
            await store.save_snapshot(NewSnapshot(f"branch-{k}", 15, "branch_state", {"n": 15}))
    original = sqlite_path.read_bytes()
    rng = random.Random(15)
    damaged = sqlite_path.with_name("damaged.db")
    for _ in range(60):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{damaged}{suffix}").unlink(missing_ok=True)
        data = bytearray(original)
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        damaged.write_bytes(data)
        try:
            async with open_store(f"sqlite:///{damaged}", create=False) as store:
                for quick in (False, True):
                    report = await store.verify(quick=quick)
                    assert report.ok or report.problems
                for name in ("branch-0", "branch-1", "branch-2"):
                    with contextlib.suppress(TurnlogError):
                        await store.load_snapshot(name)
                with contextlib.suppress(TurnlogError):
                    async with aclosing(store.read_all()) as events:
                        async for _event in events:
                            pass
        except TurnlogError:
            pass


async def test_rows_of_a_batched_result_are_the_stored_rows(sqlite_url: str) -> None:
    """A 100-event append's result rows, made when first asked for, are the stored rows, pickled too."""
    import pickle

    async with open_store(sqlite_url) as store:
        await store.append("s-0", [NewEvent("t.x", {"n": -1})])
        result = await store.append("s-1", [NewEvent("t.x", {"n": n}, {"k": n % 3}) for n in range(100)])
        stored = [tuple(raw) for raw in await store.raw_events(1, 1000)]  # type: ignore[attr-defined]
        assert list(result.positions) == [row[0] for row in stored] == list(range(2, 102))
        assert [tuple(row) for row in pickle.loads(pickle.dumps(result)).rows or ()] == stored
        assert [tuple(row) for row in result.rows or ()] == stored
        assert [e.data["n"] for e in result.events] == list(range(100))


async def test_chains_verify_past_the_remembered_meta_digests(sqlite_url: str) -> None:
    """More distinct metas than the digest cache holds still hash right: verify finds nothing."""
    async with open_store(sqlite_url) as store:
        for n in range(300):
            await store.append(f"s-{n % 5}", [NewEvent("t.x", {"n": n}, {"run_id": f"r{n}"})])
        await store.append("s-5", [NewEvent("t.x", {"n": n}, {"run_id": f"r{n % 7}"}) for n in range(70)])
        report = await store.verify()
        assert report.ok, report.problems
        assert report.events == 370
