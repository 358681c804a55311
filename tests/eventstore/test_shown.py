"""``check_events`` / ``check_stream``: a reader proves what it shows without walking the log."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from turnlog.eventstore import MemoryEventStore, NewEvent, check_events, check_stream, open_store

A, B = "branch-a", "branch-b"


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "shown.db"
    async with open_store(f"sqlite:///{path}") as store:
        for i in range(1, 6):
            await store.append(A, [NewEvent("message.added", {"content": f"a{i}"})])
            await store.append(B, [NewEvent("message.added", {"content": f"b{i}"})])
    return path


def _sql(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


async def _check(path: Path, stream: str, first: int = 1, last: int | None = None) -> set[tuple[str, int]]:
    async with open_store(f"sqlite:///{path}") as store:
        return {(p.stream, p.version) for p in await check_stream(store, stream, first, last)}


async def test_a_sound_store_has_no_problem(db: Path) -> None:
    """Nothing is reported for events nobody touched, on either stream or any range."""
    assert await _check(db, A) == set()
    assert await _check(db, B, 2, 4) == set()


async def test_a_payload_changed_on_disk_is_named(db: Path) -> None:
    """A raw UPDATE of one payload names exactly that event, and only where it is shown."""
    _sql(db, "UPDATE events SET data = ? WHERE stream = ? AND version = 3", b'{"content":"forged"}', A)
    assert await _check(db, A) == {(A, 3)}
    assert await _check(db, A, 3, 3) == {(A, 3)}
    assert await _check(db, A, 4, 5) == set()
    assert await _check(db, B) == set()


async def test_a_rewritten_hash_breaks_a_link_to_a_neighbour(db: Path) -> None:
    """Rewriting the hash along with the payload is caught by the next version's prev_hash."""
    forged = hashlib.sha256(b"forged").hexdigest()
    _sql(db, "UPDATE events SET data = ?, hash = ? WHERE stream = ? AND version = 2", b"{}", forged, A)
    # Shown alone, version 2 is still caught through the link to version 3 (read, not shown).
    assert (A, 2) in await _check(db, A, 2, 2)
    assert (A, 3) in await _check(db, A, 3, 3)


async def test_the_memory_store_is_checked_by_verify() -> None:
    """A store without raw reads falls back to verify of the streams shown."""
    store = MemoryEventStore()
    await store.append(A, [NewEvent("message.added", {"content": "x"})])
    events = [e async for e in store.read_stream(A)]
    assert await check_events(store, events) == ()


@pytest.mark.postgres
async def test_postgres_names_a_payload_changed_behind_its_back(
    pg_dsn: str, pg_schema: str, pg_url: str
) -> None:
    """The same check on PostgreSQL: its raw reads give the stored bytes the hash is over."""
    import psycopg

    async with open_store(pg_url) as store:
        for i in range(1, 5):
            await store.append(A, [NewEvent("message.added", {"content": f"a{i}"})])
            await store.append(B, [NewEvent("message.added", {"content": f"b{i}"})])
        assert await check_stream(store, A) == ()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(
            f'UPDATE "{pg_schema}".events SET data = %s WHERE stream = %s AND version = 2',
            (b'{"content":"forged"}', A),
        )
    async with open_store(pg_url) as store:
        assert {(p.stream, p.version) for p in await check_stream(store, A)} == {(A, 2)}
        events = [e async for e in store.read_stream(B)]
        assert await check_events(store, events) == ()


async def test_an_event_that_no_longer_decodes_is_a_problem_not_an_error(db: Path) -> None:
    """A payload turned into garbage is named, and the events after it are still checked."""
    _sql(db, "UPDATE events SET data = ? WHERE stream = ? AND version = 2", b"not json", A)
    _sql(db, "UPDATE events SET data = ? WHERE stream = ? AND version = 4", b'{"content":"x"}', A)
    assert await _check(db, A) == {(A, 2), (A, 4)}
