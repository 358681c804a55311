"""Tamper evidence: edits made behind the store's back with plain sqlite3 are named by verify()."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from turnlog.eventstore import CorruptEventError, NewEvent, VerifyReport, event_hash, open_store

A, B = "branch-a", "branch-b"


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "tamper.db"
    async with open_store(f"sqlite:///{path}") as store:
        for i in range(1, 6):
            await store.append(
                A, [NewEvent("message.added", {"content": f"a{i}", "n": i})], expected_version=i - 1
            )
        await store.append(B, [NewEvent("message.added", {"content": f"b{i}"}) for i in range(1, 4)])
        assert (await store.verify()).ok
    return path


def _edit(path: Path, change: Callable[[sqlite3.Connection], None]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        change(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()


async def _verify(path: Path, stream: str | None = None) -> VerifyReport:
    async with open_store(f"sqlite:///{path}") as store:
        return await store.verify(stream)


def _named(report: VerifyReport) -> set[tuple[str, int]]:
    return {(p.stream, p.version) for p in report.problems}


async def test_one_changed_data_byte_is_named_by_stream_and_version(db: Path) -> None:
    def flip(conn: sqlite3.Connection) -> None:
        (data,) = conn.execute("SELECT data FROM events WHERE stream = ? AND version = 3", (A,)).fetchone()
        raw = bytearray(data)
        at = raw.index(b"a3") + 1
        raw[at] = ord("7")  # still valid JSON: only the hash can tell
        conn.execute("UPDATE events SET data = ? WHERE stream = ? AND version = 3", (bytes(raw), A))

    _edit(db, flip)
    report = await _verify(db)
    assert not report.ok
    assert _named(report) == {(A, 3)}
    assert "altered" in report.problems[0].what
    assert not (await _verify(db, A)).ok
    assert (await _verify(db, B)).ok


async def test_undecodable_payload_is_reported_and_never_read_as_none(db: Path) -> None:
    _edit(
        db, lambda c: c.execute("UPDATE events SET data = ? WHERE stream = ? AND version = 2", (b'{"n":', A))
    )
    assert (A, 2) in _named(await _verify(db))
    async with open_store(f"sqlite:///{db}") as store:
        with pytest.raises(CorruptEventError) as caught:
            _ = [e async for e in store.read_stream(A)]
    assert (caught.value.stream, caught.value.version) == (A, 2)


async def test_swapped_rows_are_detected(db: Path) -> None:
    def swap(conn: sqlite3.Connection) -> None:
        two = conn.execute("SELECT data, meta FROM events WHERE stream = ? AND version = 2", (A,)).fetchone()
        four = conn.execute("SELECT data, meta FROM events WHERE stream = ? AND version = 4", (A,)).fetchone()
        conn.execute("UPDATE events SET data = ?, meta = ? WHERE stream = ? AND version = 2", (*four, A))
        conn.execute("UPDATE events SET data = ?, meta = ? WHERE stream = ? AND version = 4", (*two, A))

    _edit(db, swap)
    assert {(A, 2), (A, 4)} <= _named(await _verify(db))


async def test_reordered_versions_are_detected(db: Path) -> None:
    def reorder(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE events SET version = -1 WHERE stream = ? AND version = 2", (A,))
        conn.execute("UPDATE events SET version = 2 WHERE stream = ? AND version = 3", (A,))
        conn.execute("UPDATE events SET version = 3 WHERE stream = ? AND version = -1", (A,))

    _edit(db, reorder)
    report = await _verify(db)
    assert {stream for stream, _ in _named(report)} == {A}
    assert {2, 3} & {version for _, version in _named(report)}


async def test_deleted_row_is_detected(db: Path) -> None:
    def delete(conn: sqlite3.Connection) -> None:
        conn.execute("DROP TRIGGER events_no_delete")  # the store's guard against deletes
        conn.execute("DELETE FROM events WHERE stream = ? AND version = 2", (A,))

    _edit(db, delete)
    report = await _verify(db)
    assert not report.ok
    assert (A, 3) in _named(report)  # the gap and the broken chain show at the next version


async def test_edited_prev_hash_is_detected(db: Path) -> None:
    _edit(
        db,
        lambda c: c.execute(
            "UPDATE events SET prev_hash = ? WHERE stream = ? AND version = 4", ("0" * 64, A)
        ),
    )
    assert (A, 4) in _named(await _verify(db))


async def test_rehashed_forgery_breaks_the_chain_at_the_next_version(db: Path) -> None:
    """Rewriting an event and recomputing its own hash still breaks the link to its successor."""

    def forge(conn: sqlite3.Connection) -> None:
        row = conn.execute(
            "SELECT id, type, schema, meta, recorded_at, prev_hash FROM events "
            "WHERE stream = ? AND version = 2",
            (A,),
        ).fetchone()
        eid, type_, schema, meta, recorded_at, prev = row
        data = b'{"content":"forged","n":2}'
        digest = event_hash(prev, eid, A, 2, type_, schema, data, meta, recorded_at)
        conn.execute(
            "UPDATE events SET data = ?, hash = ? WHERE stream = ? AND version = 2", (data, digest, A)
        )

    _edit(db, forge)
    assert _named(await _verify(db)) == {(A, 3)}


async def test_changed_timestamp_is_detected(db: Path) -> None:
    _edit(
        db,
        lambda c: c.execute(
            "UPDATE events SET recorded_at = recorded_at + 1 WHERE stream = ? AND version = 1", (B,)
        ),
    )
    assert _named(await _verify(db)) == {(B, 1)}
