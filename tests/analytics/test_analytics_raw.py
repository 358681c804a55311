"""The projection reads stored rows (``read_rows``) when the store keeps them, and agrees with ``read_all``.

A store that declares ``raw_copy`` is read with ``read_rows(types=...)`` and the projection
decodes the payloads itself; any other store is read with ``read_all``. Both must give the
same tables, and the same errors for a corrupt payload or a failing upcaster.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from turnlog.analytics import FACT_TABLES, AnalyticsProjection, _batch
from turnlog.analytics._rollup import ROLLUPS
from turnlog.eventstore import ANY, CorruptEventError, EventStore, Upcasters, open_store, uuid7
from turnlog.projections import BranchCreated, ModelCalled, new_event

from .synthlog import SyntheticLog


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        names = [t.name for t in FACT_TABLES] + [r.name for r in ROLLUPS] + ["analytics_branches", "tracking"]
        return {name: conn.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall() for name in names}
    finally:
        conn.close()


def _without_raw_copy(store: EventStore) -> EventStore:
    """The same store, telling the projection it has no raw reads (so it reads with read_all)."""
    store.capabilities = store.capabilities - {"raw_copy"}
    return store


class _Counting:
    """Counts the calls of ``read_rows`` and ``read_all`` on a store (patched on the instance)."""

    def __init__(self, store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.raw = self.read_all = 0
        read_rows, read_all = store.read_rows, store.read_all

        async def counted_raw(*args: Any, **kwargs: Any) -> Any:
            self.raw += 1
            return await read_rows(*args, **kwargs)

        def counted_read_all(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self.read_all += 1
            return read_all(*args, **kwargs)

        monkeypatch.setattr(store, "read_rows", counted_raw)
        monkeypatch.setattr(store, "read_all", counted_read_all)


async def _synthetic_log(store: EventStore, turns: int = 120) -> None:
    synth = SyntheticLog(7, datetime(2026, 11, 1, tzinfo=UTC))
    branches = [str(uuid7()) for _ in range(3)]
    for branch in branches:
        await store.append_batch([(f"branch-{branch}", [new_event(BranchCreated(branch_id=branch))], ANY)])
    for turn in range(turns):
        await store.append_batch(synth.turn(branches[turn % 3]))


async def test_raw_reads_and_read_all_build_the_same_tables(
    tmp_path: Path, log: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilt from stored rows or from read_all, every table is the same; so is an update."""
    async with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        await log.build_small_log(store)
        await _synthetic_log(store)
        raw_calls = _Counting(store, monkeypatch)
        async with AnalyticsProjection(store, database=tmp_path / "raw.db") as analytics:
            report = await analytics.rebuild()
            assert raw_calls.raw > 1 and raw_calls.read_all == 0  # pages of read_rows, no read_all
            await _synthetic_log(store, turns=10)
            await analytics.update()
        monkeypatch.undo()
        decoded_calls = _Counting(_without_raw_copy(store), monkeypatch)
        async with AnalyticsProjection(store, database=tmp_path / "decoded.db") as analytics:
            await analytics.rebuild()
        assert decoded_calls.read_all >= 1 and decoded_calls.raw == 0
    assert report.model_calls > 100 and report.tool_calls > 10
    assert _tables(tmp_path / "raw.db") == _tables(tmp_path / "decoded.db")


def _tamper(path: Path, position: int, data: bytes, column: str = "data") -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"UPDATE events SET {column} = ? WHERE position = ?", (data, position))
    finally:
        conn.close()


@pytest.mark.parametrize("raw", [True, False], ids=["read_rows", "read_all"])
@pytest.mark.parametrize("column", ["data", "meta"])
@pytest.mark.parametrize(
    ("payload", "reason"),
    [(b"{not json", "payload is not valid JSON"), (b"[1, 2]", "payload is not a JSON object")],
    ids=["not-json", "not-an-object"],
)
async def test_a_corrupt_payload_is_an_error_naming_the_event(
    tmp_path: Path, log: SimpleNamespace, raw: bool, column: str, payload: bytes, reason: str
) -> None:
    """Bad stored bytes (data or meta) raise CorruptEventError naming the event; the batches before it stay applied."""
    path = tmp_path / "store.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.append("branch-x", [log.call("gpt-4o"), log.call("gpt-4o"), log.call("gpt-4o")])
        _tamper(path, 2, payload, column)
        if not raw:
            _without_raw_copy(store)
        async with AnalyticsProjection(store, batch_size=1) as analytics:
            with pytest.raises(CorruptEventError, match=reason) as caught:
                await analytics.update()
            assert await analytics.checkpoint() == 1
            assert [row.calls for row in await analytics.usage("model")] == [1]
    error = caught.value
    assert (error.stream, error.version, error.position) == ("branch-x", 2, 2)
    assert str(error).startswith("stream 'branch-x' version 2 (position 2): " + reason)


async def _error_of(store: EventStore, database: Path) -> BaseException:
    async with AnalyticsProjection(store, database=database) as analytics:
        with pytest.raises(Exception) as caught:
            await analytics.update()
    return caught.value


async def test_the_stores_upcasters_apply_as_read_all_applies_them(
    tmp_path: Path, log: SimpleNamespace
) -> None:
    """An upcaster that fails, or lifts past what the catalogue knows, fails the same way on both paths."""
    path = tmp_path / "store.db"

    def broken(data: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("no such field")

    for upcaster, expected in (
        (broken, CorruptEventError),
        (lambda data: {**data, "lifted": True}, Exception),
    ):
        ups = Upcasters()
        ups.add("model.called", ModelCalled.schema_version, upcaster)
        path.unlink(missing_ok=True)
        async with open_store(f"sqlite:///{path}", upcasters=ups) as store:
            await store.append("branch-x", [log.call("gpt-4o")])
            from_rows = await _error_of(store, tmp_path / f"raw-{id(upcaster)}.db")
            from_read_all = await _error_of(_without_raw_copy(store), tmp_path / f"decoded-{id(upcaster)}.db")
        assert isinstance(from_rows, expected)
        assert (type(from_rows), str(from_rows)) == (type(from_read_all), str(from_read_all))


@pytest.mark.postgres
async def test_postgres_raw_reads_build_the_same_tables(
    tmp_path: Path, log: SimpleNamespace, pg_url: str
) -> None:
    """On PostgreSQL (which declares raw_copy) stored rows and read_all build the same tables."""
    url = pg_url
    async with open_store(url) as store:
        assert "raw_copy" in store.capabilities
        await log.build_small_log(store)
        await _synthetic_log(store, turns=40)
        async with AnalyticsProjection(store, database=tmp_path / "raw.db") as analytics:
            report = await analytics.update()
        async with AnalyticsProjection(
            _without_raw_copy(store), database=tmp_path / "decoded.db"
        ) as analytics:
            await analytics.update()
    assert report.model_calls > 8 and report.tool_calls >= 4
    assert _tables(tmp_path / "raw.db") == _tables(tmp_path / "decoded.db")


async def test_a_store_without_raw_reads_uses_read_all(tmp_path: Path, log: SimpleNamespace) -> None:
    """A store without raw_copy (here one in memory) is read with read_all, with the same figures."""
    figures = []
    async with open_store("memory://") as memory, open_store(f"sqlite:///{tmp_path / 'store.db'}") as sqlite:
        assert "raw_copy" not in memory.capabilities and "raw_copy" in sqlite.capabilities
        for name, store in (("memory", memory), ("sqlite", sqlite)):
            await log.build_small_log(store)
            async with AnalyticsProjection(store, database=tmp_path / f"{name}.db") as analytics:
                report = await analytics.update()
                figures.append(
                    (
                        (report.events, report.model_calls, report.tool_calls, report.runs),
                        log.as_dicts(await analytics.usage("model")),
                        log.as_dicts(await analytics.tool_usage("tool")),
                        log.as_dicts(await analytics.run_usage("verb")),
                    )
                )
    assert figures[0] == figures[1]
    assert figures[0][0][1:] == (8, 4, 3)


@pytest.mark.parametrize("raw", [True, False], ids=["read_rows", "read_all"])
async def test_an_older_schema_is_lifted_through_the_catalogue(
    tmp_path: Path, log: SimpleNamespace, raw: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event whose schema is older than the projection expects is lifted (validated and
    dumped by its catalogue schema) before its facts are taken, on either read path."""
    async with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        await log.build_small_log(store)
        if not raw:
            _without_raw_copy(store)
        async with AnalyticsProjection(store, database=tmp_path / "plain.db") as analytics:
            await analytics.update()
        lifted: list[int] = []
        async with AnalyticsProjection(store, database=tmp_path / "lifted.db") as analytics:
            # Pretend the catalogue's model.called moved on a schema: every stored one is older.
            catalogue = _batch.CATALOGUE

            class Newer:
                def get(self, name: str) -> Any:
                    return (
                        SimpleNamespace(schema_version=ModelCalled.schema_version + 1)
                        if name == "model.called"
                        else catalogue.get(name)
                    )

            monkeypatch.setattr(_batch, "CATALOGUE", Newer())
            lift = _batch.lifted

            def counted(event: Any) -> Any:
                lifted.append(event.position)
                return lift(event)

            monkeypatch.setattr(_batch, "lifted", counted)
            await analytics.update()
    assert len(lifted) == 8
    assert _tables(tmp_path / "plain.db") == _tables(tmp_path / "lifted.db")


async def test_a_compact_store_builds_the_same_tables(tmp_path: Path, log: SimpleNamespace) -> None:
    """The same events in the compact row layout (format 3) give the facts of format 2."""
    async with (
        open_store(f"sqlite:///{tmp_path / 'store2.db'}?format=2") as source,
        open_store(f"sqlite:///{tmp_path / 'store3.db'}?format=3") as compact,
    ):
        await log.build_small_log(source)
        await _synthetic_log(source)
        while batch := await source.raw_events(await compact.head()):  # type: ignore[attr-defined]
            await compact.import_raw(batch)  # type: ignore[attr-defined]
        for store, name in ((source, "format2.db"), (compact, "format3.db")):
            async with AnalyticsProjection(store, database=tmp_path / name) as analytics:
                report = await analytics.rebuild()
            assert report.model_calls > 100 and report.tool_calls > 10
    assert _tables(tmp_path / "format3.db") == _tables(tmp_path / "format2.db")
