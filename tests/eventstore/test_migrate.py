"""``migrate``: a copy between SQLite and PostgreSQL keeps every id, version, position, hash and snapshot."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import (
    ANY,
    EventStore,
    MigrationError,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    migrate,
    open_store,
)


async def fill(store: EventStore) -> None:
    """A small but varied log: several streams, batches, unicode, old schemas, snapshots."""
    for n in range(30):
        await store.append(
            f"branch-{n % 4}",
            [NewEvent("message.added", {"n": n, "text": "héllo 🌍 漢字", "f": n / 7}, {"run_id": str(n)})],
        )
    await store.append_batch(
        [
            ("session-1", [NewEvent("session.created", {"name": None})], 0),
            ("branch-0", [NewEvent("run.started", {"k": k}, schema=2) for k in range(5)], ANY),
        ]
    )
    await store.save_snapshot(
        NewSnapshot("branch-0", 3, "branch_state", {"v": 3}, meta={"projection_version": 1})
    )
    await store.save_snapshot(NewSnapshot("branch-0", 9, "branch_state", {"v": 9}))
    await store.save_snapshot(NewSnapshot("branch-1", 2, "other", {"x": [1, 2]}, schema=3))


async def everything(store: EventStore) -> tuple[list[RecordedEvent], list[Any]]:
    events = [event async for event in store.read_all()]
    snapshots = []
    for stream, _ in await store.list_streams():
        for type_ in ("branch_state", "other"):
            for version in range(0, 20):
                snap = await store.load_snapshot(stream, version, type=type_)
                if snap is not None and snap.version == version:
                    snapshots.append(snap)
    return events, snapshots


@pytest.mark.postgres
async def test_sqlite_to_postgres_to_sqlite_keeps_everything(tmp_path: Path, pg_url: str) -> None:
    """Both directions keep ids, versions, positions, times, hashes and snapshots; verify passes."""
    async with open_store(f"sqlite:///{tmp_path / 'a.db'}") as first:
        await fill(first)
        original = await everything(first)
        async with open_store(pg_url) as middle:
            report = await migrate(first, middle)
            assert (report.events_copied, report.events_present, report.snapshots_copied) == (36, 0, 3)
            assert report.ok and report.head == 36
            assert await everything(middle) == original
            async with open_store(f"sqlite:///{tmp_path / 'b.db'}") as last:
                back = await migrate(middle, last)
                assert back.ok and back.events_copied == 36
                assert await everything(last) == original
                # the copy is a working store: appends continue the chains
                await last.append("branch-0", [NewEvent("message.added", {"n": 99})], 13)
                assert (await last.verify()).ok


@pytest.mark.postgres
async def test_migrate_again_copies_only_what_is_new(tmp_path: Path, pg_url: str) -> None:
    """Re-running a migration is idempotent, and after more appends it resumes where it stopped."""
    async with open_store(f"sqlite:///{tmp_path / 'a.db'}") as source, open_store(pg_url) as target:
        await fill(source)
        await migrate(source, target)
        again = await migrate(source, target)
        assert (again.events_copied, again.events_present, again.ok) == (0, 36, True)
        await source.append("branch-3", [NewEvent("message.added", {"n": 100})])
        seen: list[tuple[int, int]] = []
        resumed = await migrate(source, target, progress=lambda done, total: seen.append((done, total)))
        assert (resumed.events_copied, resumed.events_present, resumed.head) == (1, 36, 37)
        assert seen == [(37, 37)]
        assert await everything(target) == await everything(source)


@pytest.mark.postgres
async def test_target_with_other_events_is_refused_untouched(tmp_path: Path, pg_url: str) -> None:
    """A non-empty target that is not a copy of the source is refused before anything is written."""
    async with open_store(f"sqlite:///{tmp_path / 'a.db'}") as source, open_store(pg_url) as target:
        await fill(source)
        await target.append("elsewhere", [NewEvent("thing.happened", {})])
        with pytest.raises(MigrationError, match="not a copy of this source") as info:
            await migrate(source, target)
        assert info.value.position == 1
        assert await target.head() == 1
        assert await target.load_snapshot("branch-0") is None


async def test_source_that_does_not_verify_is_not_copied(tmp_path: Path) -> None:
    """A tampered source is refused with the problem named, and the target stays empty."""
    path = tmp_path / "a.db"
    async with open_store(f"sqlite:///{path}") as source:
        await fill(source)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE events SET data = ? WHERE stream = 'branch-2' AND version = 3", (b'{"n":0}',))
    conn.close()
    async with (
        open_store(f"sqlite:///{path}") as source,
        open_store(f"sqlite:///{tmp_path / 'b.db'}") as target,
    ):
        with pytest.raises(MigrationError, match="branch-2 v3"):
            await migrate(source, target)
        assert await target.head() == 0


async def test_sqlite_file_to_sqlite_file(tmp_path: Path) -> None:
    """The same copy works between two SQLite files (no server needed)."""
    async with (
        open_store(f"sqlite:///{tmp_path / 'a.db'}") as source,
        open_store(f"sqlite:///{tmp_path / 'b.db'}") as target,
    ):
        await fill(source)
        report = await migrate(source, target)
        assert report.ok and report.events_copied == 36
        assert await everything(target) == await everything(source)


async def test_stores_without_raw_access_are_refused(tmp_path: Path) -> None:
    """In-memory stores cannot take part; the error says what can."""
    async with (
        open_store("sqlite:///:memory:") as memory,
        open_store(f"sqlite:///{tmp_path / 'b.db'}") as file,
    ):
        with pytest.raises(MigrationError, match="in-memory"):
            await migrate(memory, file)
        async with open_store("memory://") as pure:
            with pytest.raises(MigrationError, match="SQLite files and PostgreSQL"):
                await migrate(file, pure)
