"""Incremental updates equal a rebuild; the rollup path equals the scan path; re-pricing equals a rebuild."""

from __future__ import annotations

import sqlite3
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.analytics import (
    FACT_TABLES,
    RELEVANT_TYPES,
    AnalyticsProjection,
    Price,
    PriceTable,
    UpdateReport,
)
from turnlog.analytics import _queries as queries
from turnlog.analytics._rollup import ROLLUPS, rebuild_rollups, register_functions
from turnlog.eventstore import ANY, NewEvent, SQLiteEventStore, uuid7
from turnlog.projections import BranchCreated, BranchIncluded, new_event

from .synthlog import SyntheticLog

Entries = list[tuple[str, list[NewEvent], Any]]


def _log(seed: int, turns: int) -> list[Entries]:
    """A random log, one list of append_batch entries per turn, sessions included."""
    synth = SyntheticLog(seed, datetime(2026, 11, 1, tzinfo=UTC))
    rng = synth.rng
    session = str(uuid7())
    branches = [str(uuid7()) for _ in range(3)]
    groups: list[Entries] = []
    for i, branch in enumerate(branches):
        created = BranchCreated(branch_id=branch, session_id=session if i == 0 else None)
        groups.append([(f"branch-{branch}", [new_event(created)], ANY)])
    for _ in range(turns):
        if rng.random() < 0.1:
            included = new_event(BranchIncluded(branch_id=rng.choice(branches)))
            groups.append([(f"session-{session}", [included], ANY)])
        groups.append(synth.turn(rng.choice(branches)))
    return groups


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        names = [t.name for t in FACT_TABLES] + [r.name for r in ROLLUPS] + ["analytics_branches"]
        return {name: conn.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall() for name in names}
    finally:
        conn.close()


async def _queries(analytics: AnalyticsProjection, since: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for by in queries.GROUPINGS:
        if by != "tool":
            out[f"usage-{by}"] = await analytics.usage(by, since=since)  # type: ignore[arg-type]
    for by in ("model", "day"):
        out[f"errors-{by}"] = await analytics.error_rates(by, since=since)  # type: ignore[arg-type]
    for by in ("tool", "day", "branch", "session"):
        out[f"tools-{by}"] = await analytics.tool_usage(by, since=since)  # type: ignore[arg-type]
    out["runs"] = await analytics.run_usage("verb", since=since)
    return out


async def _check(seed: int, turns: int, cuts: list[int], batch: int) -> None:
    groups = _log(seed, turns)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with SQLiteEventStore(root / "store.db") as store:
            async with AnalyticsProjection(store, batch_size=batch) as analytics:
                start = 0
                for cut in [*sorted(set(cuts)), len(groups)]:
                    chunk = groups[start:cut]
                    start = max(start, cut)
                    if chunk:
                        await store.append_batch([entry for group in chunk for entry in group])
                    await analytics.update()
                assert await analytics.checkpoint() == await store.head()
                fast = await _queries(analytics, None)
                scanned = await _queries(analytics, "1970-01-01")
                seeks, queries._SEEK_GROUPS = queries._SEEK_GROUPS, 0  # one ordered pass instead of seeks
                try:
                    one_pass = await _queries(analytics, None)
                finally:
                    queries._SEEK_GROUPS = seeks
            async with AnalyticsProjection(store, database=root / "fresh.db") as fresh:
                await fresh.rebuild()
        incremental, rebuilt = _tables(root / "store.db.analytics"), _tables(root / "fresh.db")
        assert incremental == rebuilt
        # The SQL recomputation of the rollups (used after a re-pricing) agrees as well.
        conn = sqlite3.connect(root / "fresh.db", isolation_level=None)
        register_functions(conn)
        rebuild_rollups(conn)
        conn.close()
        assert _tables(root / "fresh.db") == rebuilt
    assert fast == scanned == one_pass


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    turns=st.integers(0, 30),
    cuts=st.lists(st.integers(0, 35), max_size=5),
    batch=st.integers(1, 40),
)
def test_incremental_updates_equal_a_rebuild_and_every_query_path_agrees(
    seed: int, turns: int, cuts: list[int], batch: int
) -> None:
    anyio.run(_check, seed, turns, cuts, batch)


async def test_repricing_equals_a_rebuild_with_the_new_table(tmp_path: Path) -> None:
    groups = _log(3, 40)
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch([entry for group in groups for entry in group])
        async with AnalyticsProjection(store) as analytics:
            await analytics.update()
        prices = PriceTable().with_entries({"llama-3.1-8b": Price(0.05, 0.08), "gpt-4o": Price(5.0, 20.0)})
        async with AnalyticsProjection(store, prices=prices) as analytics:
            report = await analytics.update()
            assert report.events == 0
            repriced = await analytics.usage("model")
        async with AnalyticsProjection(store, prices=prices, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
            rebuilt = await fresh.usage("model")
    assert repriced == rebuilt
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")
    local = next(row for row in repriced if row.key == "llama-3.1-8b")
    assert local.cost_usd is not None


async def test_two_projections_on_one_database_never_apply_a_batch_twice(tmp_path: Path) -> None:
    groups = _log(5, 60)
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch([entry for group in groups for entry in group])
        async with (
            AnalyticsProjection(store, batch_size=7) as one,
            AnalyticsProjection(store, batch_size=5) as two,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(one.update)
            tg.start_soon(two.update)
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")


async def test_follow_applies_live_events(tmp_path: Path) -> None:
    synth = SyntheticLog(11, datetime(2026, 11, 1, tzinfo=UTC))
    branch = str(uuid7())
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch(synth.turn(branch))
        async with AnalyticsProjection(store) as analytics:
            applied = [0]
            changed = [anyio.Event()]

            def on_batch(report: UpdateReport) -> None:
                applied[0] = report.to_position
                changed[0].set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: analytics.follow(on_batch=on_batch))
                for _ in range(3):
                    await store.append_batch(synth.turn(branch))
                last = [
                    e.position async for e in store.read_all(types=RELEVANT_TYPES, backwards=True, limit=1)
                ]
                with anyio.fail_after(10):
                    while applied[0] < last[0]:
                        changed[0] = anyio.Event()
                        await changed[0].wait()
                tg.cancel_scope.cancel()
            live = await analytics.sql("SELECT COUNT(*) FROM analytics_runs")
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
            assert await fresh.sql("SELECT COUNT(*) FROM analytics_runs") == live == [(4,)]


async def test_follow_keeps_exact_counts_while_another_projection_rebuilds(tmp_path: Path) -> None:
    synth = SyntheticLog(12, datetime(2026, 11, 1, tzinfo=UTC))
    branch = str(uuid7())
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch(synth.turn(branch))
        async with AnalyticsProjection(store, batch_size=3) as follower, AnalyticsProjection(store) as other:
            applied = [0]
            changed = [anyio.Event()]

            def on_batch(report: UpdateReport) -> None:
                applied[0] = report.to_position
                changed[0].set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: follower.follow(on_batch=on_batch))
                for round_ in range(6):
                    await store.append_batch(synth.turn(branch))
                    if round_ in (2, 4):
                        await other.rebuild()
                last = [
                    e.position async for e in store.read_all(types=RELEVANT_TYPES, backwards=True, limit=1)
                ]
                with anyio.fail_after(10):
                    while applied[0] < last[0]:
                        changed[0] = anyio.Event()
                        await changed[0].wait()
                tg.cancel_scope.cancel()
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")


async def test_a_projection_sees_the_branches_another_one_applied(tmp_path: Path) -> None:
    # `late` opens (and reads the branch map) first; `early` then applies the branch's
    # creation with its session. The calls after it, applied by `late`, carry that session.
    synth = SyntheticLog(3, datetime(2026, 11, 1, tzinfo=UTC))
    session, branch = str(uuid7()), str(uuid7())
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        async with AnalyticsProjection(store) as late, AnalyticsProjection(store) as early:
            await late.update()
            created = new_event(BranchCreated(branch_id=branch, session_id=session))
            await store.append_batch([(f"branch-{branch}", [created], ANY)])
            await early.update()
            await store.append_batch(synth.turn(branch))
            report = await late.update()
            assert report.model_calls >= 1
            sessions = await late.sql('SELECT DISTINCT "turnlog.session.id" FROM analytics_model_calls')
        assert sessions == [(session,)]
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")


async def test_a_long_catch_up_doubles_its_transactions_up_to_the_largest(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from turnlog.analytics import _projection

    monkeypatch.setattr(_projection, "_FIRST_BATCH", 2)
    monkeypatch.setattr(_projection, "_LARGEST_BATCH", 8)
    groups = _log(9, 12)
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch([entry for group in groups for entry in group])
        relevant = [e.position async for e in store.read_all(types=RELEVANT_TYPES)]
        async with AnalyticsProjection(store) as analytics:
            await analytics.open()
            checkpoints: list[int] = []
            assert analytics._db is not None
            analytics._db.conn().set_trace_callback(
                lambda sql: checkpoints.append(1) if sql.startswith("INSERT INTO tracking") else None
            )
            report = await analytics.update()
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db", batch_size=1) as fresh:
            await fresh.rebuild()
    assert report.events == len(relevant) > 30
    full = [2, 4, 8]
    full += [8] * ((len(relevant) - 14) // 8)
    assert len(checkpoints) == len(full) + (sum(full) < len(relevant))
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")


class _Interrupted(Exception):
    """Stands for a crash between a rebuild's last batch and its end."""


async def test_a_rebuild_interrupted_before_its_end_answers_from_the_facts_and_is_finished_later(
    tmp_path: Path,
) -> None:
    groups = _log(9, 40)
    async with SQLiteEventStore(tmp_path / "store.db") as store:
        await store.append_batch([entry for group in groups for entry in group])
        async with AnalyticsProjection(store, batch_size=9) as analytics:
            db = analytics._open_db()
            finish = db.finish

            def crash() -> None:
                raise _Interrupted

            db.finish = crash  # type: ignore[method-assign]
            try:
                await analytics.rebuild()
            except _Interrupted:
                pass
            else:  # pragma: no cover - the interruption is the point of the test
                raise AssertionError("the rebuild was not interrupted")
            # Every batch is committed, but the rollups are summed only at the rebuild's end:
            # an unbounded query reads the facts meanwhile, and agrees with a windowed scan.
            assert await analytics.sql("SELECT COUNT(*) FROM analytics_model_rollup") == [(0,)]
            midway = await _queries(analytics, None)
            assert midway == await _queries(analytics, "1970-01-01")
            assert midway["usage-model"], "the facts were written"
            db.finish = finish  # type: ignore[method-assign]
        # A new process finds the rebuild unfinished (no rank indexes) and finishes it.
        async with AnalyticsProjection(store) as analytics:
            assert (await analytics.update()).events == 0
            assert await _queries(analytics, None) == midway
        async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
            await fresh.rebuild()
    assert _tables(tmp_path / "store.db.analytics") == _tables(tmp_path / "fresh.db")


def _fact_indexes(conn: sqlite3.Connection) -> set[str]:
    """The indexes made on the fact tables (not those SQLite makes for their keys)."""
    names = ", ".join(f"'{t.name}'" for t in FACT_TABLES)
    return {
        row[0]
        for row in conn.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({names})"
        )
    }


async def test_a_build_from_scratch_inserts_into_no_index_and_creates_them_all_at_its_end(
    tmp_path: Path, small_log: Any, monkeypatch: Any
) -> None:
    """While a rebuild writes its batches the fact tables have no index; its end creates every one."""
    seen: list[set[str]] = []
    async with AnalyticsProjection(small_log, database=tmp_path / "a.db", batch_size=3) as analytics:
        await analytics.update()
        db = analytics._open_db()
        built = _fact_indexes(db.conn())
        apply_batch = db.apply_batch

        def spy(*args: Any) -> Any:
            seen.append(_fact_indexes(db.conn()))
            return apply_batch(*args)

        monkeypatch.setattr(db, "apply_batch", spy)
        await analytics.rebuild()
        assert _fact_indexes(db.conn()) == built
    assert len(seen) > 2 and all(not names for names in seen)
    assert {f"{t.name}_time" for t in FACT_TABLES[:2]} | {"analytics_model_calls_errors"} <= built
