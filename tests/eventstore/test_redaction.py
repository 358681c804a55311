"""Redaction beyond the conformance suite: the legacy chain and physical erasure on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.eventstore import (
    UPGRADES_STREAM,
    MemoryEventStore,
    NewEvent,
    NewSnapshot,
    RawEvent,
    Redaction,
    RedactionError,
    SQLiteEventStore,
    UpgradeRefused,
    encode_json,
    event_hash,
)
from turnlog.eventstore._chain import ChainChecker
from turnlog.eventstore._encoding import legacy_event_hash

SECRET = "alice-secret-4711@example.com"


def _legacy_rows(count: int) -> list[RawEvent]:
    rows, prev = [], ""
    for version in range(1, count + 1):
        eid = f"01900000-0000-7000-8000-{version:012d}"
        data = encode_json({"n": version})
        digest = legacy_event_hash(prev, eid, "old", version, "a.b", 1, data, b"{}", 5)
        rows.append(RawEvent(version, eid, "old", version, "a.b", 1, data, b"{}", 5, prev, digest))
        prev = digest
    return rows


def test_legacy_chain_events_still_verify_and_differ_from_the_digest_chain() -> None:
    checker = ChainChecker()
    for row in _legacy_rows(3):
        checker.add_row(tuple(getattr(row, f) for f in row.__slots__))
    assert checker.report().ok
    assert event_hash("", "i", "s", 1, "a.b", 1, b"{}", b"{}", 1) != legacy_event_hash(
        "", "i", "s", 1, "a.b", 1, b"{}", b"{}", 1
    )


async def test_a_legacy_event_cannot_be_redacted(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "s.db") as store:
        await store.import_raw(_legacy_rows(2))
        assert (await store.verify()).ok
        with pytest.raises(RedactionError, match="legacy chain"):
            await store.redact("old", 1, reason="x")
        await store.append("old", [NewEvent("a.b", {"n": 3})])  # new events join by the digest chain
        await store.redact("old", 3, reason="x")
        report = await store.verify()
        assert report.ok and report.redacted == 1, report.problems


async def test_sqlite_redaction_leaves_no_byte_of_the_payload_in_any_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteEventStore(path) as store:
        filler = [NewEvent("message.added", {"content": "x" * 3000, "n": n}) for n in range(50)]
        await store.append("branch-a", [NewEvent("message.added", {"content": SECRET * 400}), *filler])
        await store.append("branch-b", [NewEvent("message.added", {"content": f"small {SECRET}"})])
        await store.save_snapshot(NewSnapshot("branch-a", 1, "state.test", {"copy": SECRET}))
        assert any(SECRET.encode() in p.read_bytes() for p in tmp_path.iterdir())
        await store.redact_many([Redaction("branch-a", 1, "gdpr"), Redaction("branch-b", 1, "gdpr")])
        files = list(tmp_path.iterdir())
        assert files
        for file in files:
            assert SECRET.encode() not in file.read_bytes(), file
        report = await store.verify()
        assert report.ok and report.redacted == 2


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    picks=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5), st.booleans()), max_size=8),
)
async def test_random_redactions_keep_verify_ok(sizes: list[int], picks: list[tuple[int, int, bool]]) -> None:
    async with MemoryEventStore() as store:
        for number, size in enumerate(sizes):
            await store.append(f"s{number}", [NewEvent("a.b", {"v": v}, {"k": v}) for v in range(size)])
        done = set()
        for stream, version, meta in picks:
            if stream < len(sizes) and version <= sizes[stream]:
                await store.redact(f"s{stream}", version, reason=f"r{version}", include_meta=meta)
                done.add((stream, version))
        report = await store.verify()
        assert report.ok, report.problems
        assert report.redacted == len(done)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_upgrade_chain_verifies_first_then_rehashes_and_records(tmp_path: Path, backend: str) -> None:
    store = MemoryEventStore() if backend == "memory" else SQLiteEventStore(tmp_path / "u.db")
    async with store:
        rows = _legacy_rows(3)
        if isinstance(store, MemoryEventStore):
            for row in rows:
                store._rows.append(row)
                store._streams.setdefault(row.stream, []).append(row.position)
        else:
            await store.import_raw(rows)
        await store.append("old", [NewEvent("a.b", {"n": 4})])
        await store.save_snapshot(NewSnapshot("old", 4, "s.t", {"n": 4}))
        assert await store.upgrade_chain(actor="ops") == ["old"]
        assert await store.load_snapshot("old") is None
        report = await store.verify()
        assert report.ok, report.problems
        records = [e async for e in store.read_stream(UPGRADES_STREAM)]
        assert [
            (r.data["stream"], r.data["from_version"], r.data["old_head_hash"] != r.data["new_head_hash"])
            for r in records
        ] == [("old", 1, True)]
        await store.redact("old", 1, reason="now possible")
        assert (await store.verify()).ok
        assert await store.upgrade_chain() == []  # nothing legacy left


async def test_upgrade_chain_refuses_a_log_that_does_not_verify(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "u.db") as store:
        rows = _legacy_rows(2)
        bad = rows[1]
        rows[1] = RawEvent(
            *(getattr(bad, f) for f in bad.__slots__[:6]),
            b'{"n":99}',
            *(getattr(bad, f) for f in bad.__slots__[7:]),
        )
        await store.import_raw(rows)
        with pytest.raises(UpgradeRefused) as info:
            await store.upgrade_chain()
        assert "altered" in str(info.value)
        assert await store.stream_version(UPGRADES_STREAM) == 0


async def test_a_format_1_store_is_read_as_it_is_and_its_first_write_records_format_2(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "f1.db"
    async with SQLiteEventStore(path) as store:
        await store.import_raw(_legacy_rows(2))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    conn.close()

    def stored_format() -> str:
        db = sqlite3.connect(path)
        try:
            return db.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0]
        finally:
            db.close()

    async with SQLiteEventStore(path) as store:
        assert (await store.verify()).ok
        assert stored_format() == "1"  # reading changes nothing
        await store.append("old", [NewEvent("a.b", {"n": 3})])
    assert stored_format() == "2"
    async with SQLiteEventStore(path) as store:
        assert (await store.verify()).ok
