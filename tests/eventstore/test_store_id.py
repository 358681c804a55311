"""Store identity: an id kept in the store's meta, the same on every open, different per store."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from turnlog.eventstore import MemoryEventStore, NewEvent, open_store

pytestmark = pytest.mark.anyio


async def test_sqlite_store_keeps_its_id_across_opens(tmp_path: Path) -> None:
    """A new SQLite store has an id at once, and reopening it gives the same id."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with open_store(url) as store:
        first = store.store_id
    assert first is not None and str(uuid.UUID(first)) == first
    async with open_store(url) as store:
        assert store.store_id == first
    async with open_store(f"sqlite:///{tmp_path / 'other.db'}") as other:
        assert other.store_id not in (None, first)


async def test_an_older_sqlite_store_gets_an_id_on_its_first_write(tmp_path: Path) -> None:
    """A store made before store ids has none until it is written, then keeps the one made."""
    path = tmp_path / "old.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.append("branch-1", [NewEvent("x.y", {})])
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM meta WHERE key = 'store_id'")
    db.close()
    async with open_store(f"sqlite:///{path}") as store:
        assert store.store_id is None
        await store.append("branch-1", [NewEvent("x.y", {})])
        made = store.store_id
    assert made is not None
    async with open_store(f"sqlite:///{path}") as store:
        assert store.store_id == made


async def test_memory_stores_have_distinct_ids() -> None:
    """Each memory store is a store of its own."""
    assert MemoryEventStore().store_id != MemoryEventStore().store_id


async def test_postgres_store_keeps_its_id(pg_url: str) -> None:
    """A PostgreSQL store gets an id when it is first opened and keeps it."""
    async with open_store(pg_url) as store:
        await store.head()
        first = store.store_id
    assert first is not None
    async with open_store(pg_url) as store:
        await store.head()
        assert store.store_id == first
