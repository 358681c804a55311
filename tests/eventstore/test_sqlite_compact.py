"""SQLite formats 3 and 4 (the compact layout): what they store, old stores, migration, damage."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conformance import collect

from turnlog.eventstore import (
    CorruptStoreError,
    NewEvent,
    NewSnapshot,
    SQLiteEventStore,
    event_hash,
    migrate,
    open_store,
)
from turnlog.eventstore._sqlite_compact import COMPACT_PAGE_SIZE, TRAIN_AFTER


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def turn(n: int) -> list[NewEvent]:
    """Two messages of a chat turn, with the meta the kernel gives them (its branch and run)."""
    meta = {"branch_id": "b-1", "run_id": f"run-{n // 10}"}
    text = f"turn {n}: " + "the quick brown fox jumps over the lazy dog; " * 4
    return [
        NewEvent(
            "message.added", {"message": {"kind": "UserPrompt", "content": {"text": text}, "n": n}}, meta
        ),
        NewEvent(
            "message.added", {"message": {"kind": "AssistantResponse", "content": {"text": text}}}, meta
        ),
    ]


async def fill(url: str, turns: int) -> None:
    async with open_store(url) as store:
        for n in range(turns):
            await store.append(f"branch-{n % 3}", turn(n))
        await store.save_snapshot(NewSnapshot("branch-0", 3, "state", {"v": 3}))


@pytest.fixture(params=[3, 4], ids=["format3-zlib", "format4-zstd"])
def compact(request: pytest.FixtureRequest) -> int:
    """A compact format: 3 (payloads in zlib) or 4 (in zstd); both are read and written alike."""
    return int(request.param)


def compressed_positions(path: Path) -> list[int]:
    with raw(path) as conn:
        return [
            row[0] for row in conn.execute("SELECT position FROM events WHERE codec != 0 ORDER BY position")
        ]


async def test_new_store_of_format_3_stores_bytes_and_numbers(tmp_path: Path, compact: int) -> None:
    """Ids are 16 bytes, hashes 32, streams and types integers; meta repeated by a run is kept once."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", 4)
    with raw(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone() == (
            str(compact),
        )
        row = conn.execute(
            "SELECT typeof(id), length(id), length(hash), typeof(stream_id), typeof(type_id) "
            "FROM events WHERE version = 2"
        ).fetchone()
        assert row == ("blob", 16, 32, "integer", "integer")
        assert conn.execute("SELECT count(*) FROM metas").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM streams").fetchone() == (3,)
        assert conn.execute("PRAGMA page_size").fetchone() == (COMPACT_PAGE_SIZE,)
        if compact >= 4:  # positions are never reused: deletes are refused, as in format 2
            with pytest.raises(sqlite3.DatabaseError, match="never deletes"):
                conn.execute("DELETE FROM events WHERE position = 1")
    async with open_store(f"sqlite:///{db}") as store:
        events = await collect(store.read_stream("branch-1"))
        assert [e.meta for e in events] == [{"branch_id": "b-1", "run_id": "run-0"}] * 2
        assert (await store.verify()).ok


async def test_payloads_are_compressed_after_the_dictionary_is_trained(tmp_path: Path, compact: int) -> None:
    """Past TRAIN_AFTER events, payloads go in compressed and read back byte for byte."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", TRAIN_AFTER)
    positions = compressed_positions(db)
    assert positions and positions[0] > TRAIN_AFTER
    with raw(db) as conn:
        assert conn.execute("SELECT count(*) FROM dicts").fetchone() == (1,)
        (small,) = conn.execute("SELECT sum(length(data)) FROM events WHERE codec != 0").fetchone()
    async with open_store(f"sqlite:///{db}") as store:
        raws = await store.raw_events(0, 10_000)  # type: ignore[attr-defined]
        assert sum(len(e.data) for e in raws if e.position in set(positions)) > 2 * small
        assert [e.data for e in await collect(store.read_all())] == [
            e.data for e in await collect(store.read_all())
        ]
        assert (await store.verify()).ok


async def test_a_format_2_store_stays_format_2_and_takes_appends(tmp_path: Path) -> None:
    """A store made in format 2 is read and appended to as it is, and keeps its format."""
    db = tmp_path / "old.db"
    await fill(f"sqlite:///{db}?format=2", 5)
    async with open_store(f"sqlite:///{db}?format=3") as store:  # the format of a new store only
        assert isinstance(store, SQLiteEventStore) and store.format_version == 2
        assert len(await collect(store.read_all())) == 10
        await store.append("branch-0", turn(99), expected_version=4)
        assert (await store.verify()).ok
    with raw(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone() == ("2",)
        assert conn.execute("SELECT typeof(id) FROM events LIMIT 1").fetchone() == ("text",)
        assert conn.execute("PRAGMA page_size").fetchone() == (4096,)  # SQLite's default, as before


async def test_migrate_from_format_2_to_3_keeps_every_logical_byte(tmp_path: Path, compact: int) -> None:
    """A migrated store gives back the very rows it was given (ids, hashes, payloads, times)."""
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    await fill(f"sqlite:///{old}?format=2", 2 * TRAIN_AFTER)
    async with open_store(f"sqlite:///{old}") as store:
        await store.redact("branch-1", 2, reason="test", include_meta=True)
    async with open_store(f"sqlite:///{old}") as src, open_store(f"sqlite:///{new}?format={compact}") as dst:
        report = await migrate(src, dst)
        assert report.ok
        before = await src.raw_events(0, 10_000)  # type: ignore[attr-defined]
        after = await dst.raw_events(0, 10_000)  # type: ignore[attr-defined]
        assert after == before
        assert await dst.raw_snapshots() == await src.raw_snapshots()  # type: ignore[attr-defined]
        assert [e.data for e in await collect(dst.read_all())] == [
            e.data for e in await collect(src.read_all())
        ]
        assert (await dst.verify()).ok
    assert compressed_positions(new)[0] == 1  # trained from the copy before its first chunk went in
    assert new.stat().st_size < old.stat().st_size


def test_turnlog_migrate_writes_format_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``turnlog migrate`` into a new SQLite file makes it a store of the newest compact format."""
    import anyio

    from turnlog.tools._cli import main

    old, new = tmp_path / "old.db", tmp_path / "new.db"
    anyio.run(fill, f"sqlite:///{old}?format=2", 3)
    assert main(["migrate", "--from", str(old), "--to", str(new)]) == 0
    assert "ok: the copy verifies" in capsys.readouterr().out
    with raw(new) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone() == ("4",)


async def test_a_corrupt_compressed_row_raises_naming_its_position(tmp_path: Path, compact: int) -> None:
    """Reads raise CorruptStoreError with the row's position; verify reports it, never raises."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", TRAIN_AFTER)
    victim = compressed_positions(db)[3]
    with raw(db) as conn:
        (data,) = conn.execute("SELECT data FROM events WHERE position = ?", (victim,)).fetchone()
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0x55
        conn.execute("UPDATE events SET data = ? WHERE position = ?", (bytes(damaged), victim))
    async with open_store(f"sqlite:///{db}") as store:
        with pytest.raises(CorruptStoreError, match=f"position {victim}") as info:
            await collect(store.read_all())
        assert info.value.position == victim
        with pytest.raises(CorruptStoreError):
            await collect(store.read_all(from_position=victim, to_position=victim))
        report = await store.verify()
        assert not report.ok
        assert victim in {p.position for p in report.problems}


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ("UPDATE dicts SET zdict = zdict || x'00'", "altered"),
        ("UPDATE dicts SET zdict = x'00' || substr(zdict, 2), sha256 = x'00'", "altered"),
        ("DELETE FROM dicts", "lacks"),
    ],
)
async def test_a_tampered_dictionary_is_a_clear_error(
    tmp_path: Path, edit: str, said: str, compact: int
) -> None:
    """A dictionary whose bytes do not match its SHA-256, or that is gone, fails reads clearly."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", TRAIN_AFTER)
    first = compressed_positions(db)[0]
    with raw(db) as conn:
        conn.execute(edit)
    async with open_store(f"sqlite:///{db}") as store:
        assert len(await collect(store.read_all(to_position=first - 1))) == first - 1
        with pytest.raises(CorruptStoreError, match=f"dictionary 1.*{said}|{said}.*dictionary 1") as info:
            await collect(store.read_all())
        assert info.value.position == first
        report = await store.verify()
        assert not report.ok and any(said in p.what for p in report.problems)


async def test_redaction_leaves_no_copy_of_a_compressed_payload_or_its_meta(
    tmp_path: Path, compact: int
) -> None:
    """The compressed bytes of a redacted payload and its meta's row are gone from the file."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", TRAIN_AFTER)
    secret_meta = {"branch_id": "b-1", "run_id": "secret-run-4711"}
    async with open_store(f"sqlite:///{db}") as store:
        result = await store.append("branch-9", [NewEvent("message.added", {"text": "x" * 300}, secret_meta)])
        with raw(db) as conn:
            (stored,) = conn.execute(
                "SELECT data FROM events WHERE position = ? AND codec != 0", (result.positions[0],)
            ).fetchone()
        await store.redact("branch-9", 1, reason="gdpr", include_meta=True)
        (event,) = await collect(store.read_stream("branch-9"))
        assert event.data.get("turnlog_redacted") and (await store.verify()).ok
    content = db.read_bytes()
    assert bytes(stored) not in content
    assert b"secret-run-4711" not in content


async def test_names_made_by_a_rolled_back_append_are_not_reused_wrongly(
    tmp_path: Path, compact: int
) -> None:
    """A failed batch's new type and meta numbers, given again to other names, read back right."""
    from turnlog.eventstore import IdempotencyError

    async with open_store(f"sqlite:///{tmp_path / 's.db'}?format={compact}") as store:
        first = NewEvent("t.one", {"n": 1})
        await store.append("a", [first])
        with pytest.raises(IdempotencyError):  # "b" goes in, then "c" clashes: all rolled back
            await store.append_batch([("b", [NewEvent("t.two", {"n": 2}, {"m": 1})], 0), ("c", [first], 0)])
        await store.append("c", [NewEvent("t.three", {"n": 3}, {"m": 2})])
        await store.append("b", [NewEvent("t.two", {"n": 4}, {"m": 1})])
        events = await collect(store.read_all())
        assert [(e.stream, e.type, e.data, e.meta) for e in events] == [
            ("a", "t.one", {"n": 1}, {}),
            ("c", "t.three", {"n": 3}, {"m": 2}),
            ("b", "t.two", {"n": 4}, {"m": 1}),
        ]
        assert (await store.verify()).ok


async def test_two_connections_share_names_and_the_dictionary(tmp_path: Path, compact: int) -> None:
    """Two stores on one file intern names and train the dictionary once; each reads the other's rows."""
    url = f"sqlite:///{tmp_path / 's.db'}?format={compact}"
    async with open_store(url) as one, open_store(url) as two:
        for n in range(TRAIN_AFTER):
            await (one if n % 2 else two).append(f"branch-{n % 5}", turn(n))
            await (two if n % 2 else one).append(
                f"other-{n % 3}", [NewEvent(f"thing.kind_{n % 7}", {"n": n})]
            )
        assert [e.id for e in await collect(one.read_all())] == [e.id for e in await collect(two.read_all())]
        assert (await one.verify()).ok
    with raw(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT count(*) FROM dicts").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM event_types").fetchone() == (8,)
    assert compressed_positions(tmp_path / "s.db")


async def test_migrate_back_from_format_3_to_2_keeps_every_logical_byte(tmp_path: Path, compact: int) -> None:
    """A format 3 store copies into a format 2 one (for an older turnlog) unchanged."""
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    await fill(f"sqlite:///{new}?format={compact}", 2 * TRAIN_AFTER)
    async with open_store(f"sqlite:///{new}") as src, open_store(f"sqlite:///{old}?format=2") as dst:
        assert (await migrate(src, dst)).ok
        assert await dst.raw_events(0, 10_000) == await src.raw_events(0, 10_000)  # type: ignore[attr-defined]


async def test_prev_hash_is_not_stored_and_reads_as_the_previous_versions_hash(
    tmp_path: Path, compact: int
) -> None:
    """Rows hold no prev_hash; every read (by stream, backwards, from a version, by position) gives the
    hash of the stream's previous version, and "" for version 1."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", TRAIN_AFTER)
    with raw(db) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(events)")]
        assert "prev_hash" not in columns and "hash" in columns
    async with open_store(f"sqlite:///{db}") as store:
        whole = await collect(store.read_stream("branch-1"))
        assert whole[0].prev_hash == ""
        assert [e.prev_hash for e in whole[1:]] == [e.hash for e in whole[:-1]]
        assert [e.prev_hash for e in await collect(store.read_stream("branch-1", 7, 9))] == [
            e.hash for e in whole[5:8]
        ]
        backwards = await collect(store.read_stream("branch-1", backwards=True, limit=3))
        assert [e.prev_hash for e in backwards] == [e.hash for e in whole[-2:-5:-1]]
        by_hash = {e.hash: e for e in await collect(store.read_all())}
        raws = await store.raw_events(0, 10_000)  # type: ignore[attr-defined]
        for event in raws:
            assert event.prev_hash == by_hash[event.hash].prev_hash
            if event.version > 1:
                assert by_hash[event.prev_hash].version == event.version - 1
        one_by_one = [e async for e in store.read_all(5, 9)]  # pages of mixed streams
        assert [e.prev_hash for e in one_by_one] == [by_hash[e.hash].prev_hash for e in one_by_one]
        assert (await store.verify()).ok
    with raw(db) as conn:
        conn.execute("DROP TRIGGER IF EXISTS events_no_delete")  # format 4's guard against deletes
        conn.execute("DELETE FROM events WHERE stream_id = 2 AND version = 4")
    async with open_store(f"sqlite:///{db}") as store:
        after = await collect(store.read_stream("branch-1", 3, 6))
        assert [e.prev_hash for e in after] == [whole[1].hash, "", whole[4].hash]


@pytest.mark.parametrize(
    ("edit", "named", "said"),
    [
        # As in format 2: the gap and the broken chain, at the next version, and nothing else.
        ("DELETE FROM events WHERE stream_id = 2 AND version = 2", {3}, ["version gap", "broken chain"]),
        ("DELETE FROM events WHERE stream_id = 2 AND version = 1", {2}, ["version gap", "altered"]),
        (
            "UPDATE events SET data = CAST('{}' AS BLOB), codec = 0 WHERE stream_id = 2 AND version = 2",
            {2},
            ["altered"],
        ),
        (
            "UPDATE events SET hash = zeroblob(32) WHERE stream_id = 2 AND version = 2",
            {2, 3},
            ["altered", "altered"],
        ),
        (
            "UPDATE events SET recorded_at = recorded_at + 1 WHERE stream_id = 2 AND version = 4",
            {4},
            ["altered"],
        ),
    ],
)
async def test_verify_names_a_deleted_or_altered_row_without_a_stored_prev_hash(
    tmp_path: Path, edit: str, named: set[int], said: list[str], compact: int
) -> None:
    """With prev_hash derived, a deleted row, an altered payload, hash or time is still named."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", 15)
    with raw(db) as conn:
        assert conn.execute("SELECT name FROM streams WHERE stream_id = 2").fetchone() == ("branch-1",)
        conn.execute("DROP TRIGGER IF EXISTS events_no_delete")  # format 4's guard against deletes
        conn.execute(edit)
    async with open_store(f"sqlite:///{db}") as store:
        report = await store.verify()
    assert {(p.stream, p.version) for p in report.problems} == {("branch-1", v) for v in named}
    assert len(report.problems) == len(said), report.problems
    assert all(what in p.what for what, p in zip(said, report.problems, strict=True)), report.problems


async def test_a_rehashed_forgery_breaks_the_chain_at_the_next_version(tmp_path: Path, compact: int) -> None:
    """An event rewritten with its own hash recomputed is named at the next version, whose hash
    covers the forged one (it is the next version's prev_hash)."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format={compact}", 15)
    async with open_store(f"sqlite:///{db}") as store:
        raws = await store.raw_events(0, 10_000)  # type: ignore[attr-defined]
    second = next(e for e in raws if e.stream == "branch-1" and e.version == 2)
    data = b'{"message":{"kind":"UserPrompt","content":{"text":"forged"},"n":4}}'
    digest = event_hash(
        second.prev_hash, second.id, "branch-1", 2, second.type, second.schema, data, bytes(second.meta),
        second.recorded_at_us,
    )  # fmt: skip
    with raw(db) as conn:
        conn.execute(
            "UPDATE events SET data = ?, codec = 0, hash = ? WHERE stream_id = 2 AND version = 2",
            (data, bytes.fromhex(digest)),
        )
    async with open_store(f"sqlite:///{db}") as store:
        assert (await collect(store.read_stream("branch-1", 3, 3)))[0].prev_hash == digest
        report = await store.verify()
    assert {(p.stream, p.version) for p in report.problems} == {("branch-1", 3)}


async def test_format_4_writes_zstd_and_format_3_keeps_writing_zlib(tmp_path: Path) -> None:
    """Each compact format compresses with its own codec, also on appends by a later turnlog."""
    three, four = tmp_path / "three.db", tmp_path / "four.db"
    await fill(f"sqlite:///{three}?format=3", TRAIN_AFTER)
    await fill(f"sqlite:///{three}", 5)  # appended to again: still format 3, still zlib
    await fill(f"sqlite:///{four}?format=4", TRAIN_AFTER)
    big = {"messages": [f"message {n} " * 20 for n in range(50)]}
    for path, sign, snapshot_codec in ((three, 1, -1), (four, -1, -2)):
        async with open_store(f"sqlite:///{path}") as store:
            await store.save_snapshot(NewSnapshot("branch-0", 4, "big", big))
        with raw(path) as conn:
            codecs = {row[0] for row in conn.execute("SELECT DISTINCT codec FROM events")}
            assert codecs == {0, sign}
            found = conn.execute("SELECT codec FROM snapshots WHERE type = 'big'").fetchall()
            assert found == [(snapshot_codec,)]
        async with open_store(f"sqlite:///{path}") as store:
            assert len(await collect(store.read_all())) == 2 * (TRAIN_AFTER + (5 if path == three else 0))
            loaded = await store.load_snapshot("branch-0", type="big")
            assert loaded is not None and loaded.data == big
            assert (await store.verify()).ok


async def test_a_store_holding_zlib_and_zstd_rows_reads_both(tmp_path: Path) -> None:
    """Reads follow each row's codec: a format 3 store copied row by row into format 4 reads alike."""
    three, four = tmp_path / "three.db", tmp_path / "four.db"
    await fill(f"sqlite:///{three}?format=3", 2 * TRAIN_AFTER)
    async with open_store(f"sqlite:///{three}") as src, open_store(f"sqlite:///{four}?format=4") as dst:
        assert (await migrate(src, dst)).ok
    with raw(four) as conn, raw(three) as old:
        # Put the format 3 file's zlib rows (and its dictionary, the same keys) into the copy.
        (zdict,) = old.execute("SELECT zdict FROM dicts WHERE dict_id = 1").fetchone()
        (new_zdict,) = conn.execute("SELECT zdict FROM dicts WHERE dict_id = 1").fetchone()
        assert zdict == new_zdict
        zlib_rows = old.execute("SELECT position, codec, data FROM events WHERE codec > 0").fetchall()
        half = zlib_rows[: len(zlib_rows) // 2]
        conn.executemany(
            "UPDATE events SET codec = ?, data = ? WHERE position = ?", [(c, d, p) for p, c, d in half]
        )
        assert {1, -1} <= {row[0] for row in conn.execute("SELECT DISTINCT codec FROM events")}
    async with open_store(f"sqlite:///{three}") as src, open_store(f"sqlite:///{four}") as dst:
        assert await dst.raw_events(0, 10_000) == await src.raw_events(0, 10_000)  # type: ignore[attr-defined]
        assert [e.data for e in await collect(dst.read_all())] == [
            e.data for e in await collect(src.read_all())
        ]
        assert (await dst.verify()).ok


async def test_a_damaged_zstd_snapshot_is_ignored_and_reported(tmp_path: Path) -> None:
    """A format 4 snapshot that does not inflate is not used, and verify names it."""
    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format=4", 4)
    async with open_store(f"sqlite:///{db}") as store:
        await store.save_snapshot(NewSnapshot("branch-0", 3, "state", {"text": "state " * 200}))
    with raw(db) as conn:
        assert conn.execute("SELECT codec FROM snapshots").fetchall() == [(-2,)]
        (data,) = conn.execute("SELECT data FROM snapshots").fetchone()
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0x55
        conn.execute("UPDATE snapshots SET data = ?", (bytes(damaged),))
    async with open_store(f"sqlite:///{db}") as store:
        assert await store.load_snapshot("branch-0") is None
        report = await store.verify()
        assert not report.ok and report.problems


async def test_each_thread_inflates_zstd_rows_with_its_own_decompressor(tmp_path: Path) -> None:
    """A zstd decompressor is never shared between the event loop's thread and the worker's."""
    import threading

    db = tmp_path / "s.db"
    await fill(f"sqlite:///{db}?format=4", TRAIN_AFTER)
    async with open_store(f"sqlite:///{db}") as store:
        assert isinstance(store, SQLiteEventStore)
        layout = store._conn.layout
        here = await collect(store.read_all())  # decoded on this thread
        seen: list[object] = []

        def other() -> None:
            seen.append(layout._threads.by_codec.get(-1))  # type: ignore[attr-defined]

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert layout._threads.by_codec.get(-1) is not None  # type: ignore[attr-defined]
        assert seen == [None]
        assert len(here) == 2 * TRAIN_AFTER
