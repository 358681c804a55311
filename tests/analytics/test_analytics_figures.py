"""Exact figures from a small hand-built log: usage, cost, percentiles, tools, runs, errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from turnlog.analytics import (
    AnalyticsDatabaseError,
    AnalyticsProjection,
    InvalidQueryError,
    Percentiles,
    Price,
    PriceTable,
    drop_legacy_tables,
    legacy_tables,
)
from turnlog.eventstore import EventStore, NewEvent, open_store
from turnlog.projections import EventDecodeError


async def test_usage_by_model_has_exact_tokens_costs_and_percentiles(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        report = await analytics.update()
        rows = {row.key: row for row in await analytics.usage("model")}
    assert report.model_calls == 8 and report.tool_calls == 4
    gpt = rows["gpt-4o"]
    assert (gpt.calls, gpt.errors, gpt.error_rate) == (5, 2, 0.4)
    assert (gpt.input_tokens, gpt.output_tokens) == (4000, 1500)
    # (1000*2.5 + 500*10)/1e6 + (2000*2.5 + 1000*10)/1e6 + (1000*2.5)/1e6; two calls had no usage
    assert gpt.cost_usd == pytest.approx(0.0075 + 0.015 + 0.0025, abs=1e-12)
    assert gpt.unpriced_calls == 2
    # nearest rank over 100, 200, 300, 500, 800: ranks 3, 5, 5
    assert gpt.latency_ms == Percentiles(300.0, 800.0, 800.0)
    assert gpt.ttft_ms == Percentiles(20.0, 40.0, 40.0)
    claude = rows["claude-sonnet-4-20250514"]
    assert (claude.calls, claude.cost_usd, claude.unpriced_calls) == (1, 0.5, 0)  # the provider's cost wins
    assert claude.ttft_ms == Percentiles(None, None, None)
    local = rows["my-local-model"]
    assert (local.calls, local.errors, local.cost_usd, local.unpriced_calls) == (2, 1, None, 2)
    assert local.latency_ms == Percentiles(600.0, 700.0, 700.0)
    assert list(rows) == ["gpt-4o", "my-local-model", "claude-sonnet-4-20250514"]  # biggest first


async def test_unknown_model_costs_null_not_zero(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        costs = await analytics.sql(
            'SELECT "turnlog.cost_usd", "turnlog.cost_source" FROM analytics_model_calls '
            "WHERE \"gen_ai.request.model\" = 'my-local-model'"
        )
    assert costs == [(None, None), (None, None)]


async def test_user_price_entry_prices_an_unknown_model_and_reprices_stored_facts(
    small_log: EventStore,
) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
    prices = PriceTable().with_entries({"my-local-model": Price(1.0, 2.0)})
    async with AnalyticsProjection(small_log, prices=prices) as analytics:
        await analytics.update()
        rows = {row.key: row for row in await analytics.usage("model")}
    # (50*1 + 50*2)/1e6; the failed call reported no tokens, so its cost stays unknown
    assert rows["my-local-model"].cost_usd == pytest.approx(150 / 1e6)
    assert rows["my-local-model"].unpriced_calls == 1


async def test_group_by_day_provider_branch_and_session(small_log: EventStore, log: SimpleNamespace) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        days = [(r.key, r.calls, r.errors) for r in await analytics.usage("day")]
        providers = {r.key: r.calls for r in await analytics.usage("provider")}
        branches = {r.key: r.calls for r in await analytics.usage("branch")}
        sessions = {r.key: r.calls for r in await analytics.usage("session")}
        verbs = {r.key: r.calls for r in await analytics.usage("verb")}
    assert days == [("2026-11-30", 4, 1), ("2026-12-01", 4, 2)]
    assert providers == {"openai": 5, "local": 2, "anthropic": 1}
    assert branches == {log.BRANCH_A: 4, log.BRANCH_B: 4}
    assert sessions == {log.SESSION: 4, None: 4}
    assert verbs == {"chat": 8}


async def test_time_range_is_half_open(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        later = {r.key: r.calls for r in await analytics.usage("model", since="2026-12-01")}
        earlier = {r.key: r.calls for r in await analytics.usage("model", until="2026-12-01T00:00:00Z")}
        none = await analytics.usage("model", since="2026-12-02")
    assert later == {"gpt-4o": 2, "my-local-model": 2}
    assert earlier == {"gpt-4o": 3, "claude-sonnet-4-20250514": 1}
    assert none == []


async def test_error_rate_by_type(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        errors = [
            (e.key, e.error_type, e.errors, e.calls, e.rate) for e in await analytics.error_rates("model")
        ]
    assert errors == [("gpt-4o", "RateLimitError", 2, 5, 0.4), ("my-local-model", "Timeout", 1, 2, 0.5)]


async def test_tool_calls_count_errors_denials_and_durations(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        tools = {t.key: t for t in await analytics.tool_usage("tool")}
    search = tools["search"]
    assert (search.calls, search.ok, search.errors, search.denied) == (3, 2, 1, 0)
    assert search.error_rate == pytest.approx(1 / 3)
    assert search.duration_ms == Percentiles(20.0, 30.0, 30.0)
    write = tools["write_file"]
    assert (write.calls, write.ok, write.errors, write.denied, write.error_rate) == (1, 0, 0, 1, 1.0)
    assert write.duration_ms == Percentiles(None, None, None)


async def test_runs_by_verb(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        await analytics.update()
        runs = {r.key: r for r in await analytics.run_usage("verb")}
        failed = await analytics.sql(
            'SELECT "turnlog.reason", "error.type", "gen_ai.request.model" FROM analytics_runs '
            "WHERE \"turnlog.run.id\" = 'r2'"
        )
    chat = runs["chat"]
    assert (chat.runs, chat.ok, chat.failed, chat.running) == (2, 1, 0, 1)
    assert (chat.input_tokens, chat.output_tokens) == (3000, 1500)
    assert chat.cost_usd == pytest.approx((3000 * 2.5 + 1500 * 10) / 1e6)  # priced from the run's model
    assert chat.duration_ms == Percentiles(1500.0, 1500.0, 1500.0)
    react = runs["ReAct"]
    assert (react.runs, react.failed, react.duration_ms.p50) == (1, 1, 2500.0)
    assert failed == [("timeout", "TimeoutError", "my-local-model")]


async def test_nearest_rank_percentiles_over_twenty_values(store: EventStore, log: SimpleNamespace) -> None:
    """Nearest rank, not interpolation: p50 of 1..20 is 10, p95 is 19 and p99 is 20."""
    await log.append_at(
        store, log.DAY1, "branch-p", [log.call("gpt-4o", latency=float(v)) for v in range(20, 0, -1)]
    )
    async with AnalyticsProjection(store) as analytics:
        await analytics.update()
        (row,) = await analytics.usage("model")
    assert row.latency_ms == Percentiles(10.0, 19.0, 20.0)


async def test_update_applies_only_new_events(small_log: EventStore, log: SimpleNamespace) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        first = await analytics.update()
        again = await analytics.update()
        await log.append_at(small_log, log.DAY2, "branch-x", [log.call("gpt-4o", latency=5.0)])
        third = await analytics.update()
        (gpt,) = [r for r in await analytics.usage("model") if r.key == "gpt-4o"]
    assert first.to_position == await small_log.head() - 1
    assert (again.events, again.from_position, again.to_position) == (0, first.to_position, first.to_position)
    assert (third.events, third.model_calls, third.from_position) == (1, 1, first.to_position)
    assert gpt.calls == 6


async def test_invalid_query_arguments_are_refused(small_log: EventStore) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        with pytest.raises(InvalidQueryError, match="since"):
            await analytics.usage("model", since="yesterday")
        with pytest.raises(InvalidQueryError, match="until"):
            await analytics.usage("model", since="2026-12-02", until="2026-12-01")
        with pytest.raises(InvalidQueryError, match="by"):
            await analytics.tool_usage("model")  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "memory://"])
async def test_a_store_in_memory_keeps_its_facts_in_memory(
    url: str, tmp_path: Path, log: SimpleNamespace
) -> None:
    async with open_store(url) as store:
        await log.build_small_log(store)
        async with AnalyticsProjection(store) as analytics:
            assert analytics.database == ":memory:"
            report = await analytics.update()
            assert sum(r.calls for r in await analytics.usage("model")) == 8
        # a private database per projection: the next one rebuilds it from the log
        async with AnalyticsProjection(store) as again:
            assert (await again.update()).model_calls == report.model_calls == 8
        async with AnalyticsProjection(store, database=tmp_path / "analytics.db") as chosen:
            await chosen.update()
            assert sum(r.calls for r in await chosen.usage("model")) == 8
    assert (tmp_path / "analytics.db").is_file()


async def test_a_sqlite_store_keeps_its_facts_beside_its_file_never_in_it(
    store_path: Path, small_log: EventStore
) -> None:
    async with AnalyticsProjection(small_log) as analytics:
        assert analytics.database == f"{store_path.resolve()}.analytics"
        await analytics.update()
    assert (store_path.parent / "store.db.analytics").stat().st_mode & 0o777 == 0o600
    assert legacy_tables(store_path) == []  # nothing of analytics in the store's own file
    conn = sqlite3.connect(store_path)
    try:
        tracked = conn.execute("SELECT consumer FROM tracking").fetchall()
    finally:
        conn.close()
    assert tracked == []
    with pytest.raises(AnalyticsDatabaseError, match="event store's own file"):
        await AnalyticsProjection(small_log, database=store_path).open()


async def test_tables_an_older_turnlog_left_in_the_store_file_are_ignored_until_dropped(
    store_path: Path, small_log: EventStore
) -> None:
    # what turnlog 0.1 wrote into the store's own file: fact tables and a row of ``tracking``
    conn = sqlite3.connect(store_path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE analytics_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("CREATE TABLE analytics_model_calls (position INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO analytics_model_calls VALUES (999)")
        conn.execute("INSERT INTO tracking (consumer, position) VALUES ('analytics', 999)")
        conn.execute("INSERT INTO tracking (consumer, position) VALUES ('other', 3)")
    finally:
        conn.close()
    async with AnalyticsProjection(small_log) as analytics:
        assert (await analytics.update()).from_position == 0  # the old checkpoint is not ours
        assert sum(r.calls for r in await analytics.usage("model")) == 8
    assert legacy_tables(store_path) == ["analytics_model_calls", "analytics_meta"]
    assert drop_legacy_tables(store_path) == ["analytics_model_calls", "analytics_meta"]
    assert legacy_tables(store_path) == []
    conn = sqlite3.connect(store_path)
    try:
        assert conn.execute("SELECT consumer FROM tracking").fetchall() == [("other",)]
    finally:
        conn.close()


async def test_a_replaced_store_file_does_not_reuse_the_facts_of_the_old_one(
    tmp_path: Path, log: SimpleNamespace
) -> None:
    path = tmp_path / "t.db"
    async with open_store(f"sqlite:///{path}") as store:
        await log.build_small_log(store)
        async with AnalyticsProjection(store) as analytics:
            assert (await analytics.update()).model_calls == 8
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    async with open_store(f"sqlite:///{path}") as store:  # another store, same file name
        await store.append(f"branch-{log.BRANCH_A}", [log.call("gpt-4o", latency=10)])
        async with AnalyticsProjection(store) as analytics:
            report = await analytics.update()
            assert (report.from_position, report.model_calls) == (0, 1)
            assert [(r.key, r.calls) for r in await analytics.usage("model")] == [("gpt-4o", 1)]


@pytest.mark.postgres
async def test_postgres_store_keeps_its_facts_in_the_cache_directory(
    tmp_path: Path, log: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    url = pg_url
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    async with open_store(url) as store:
        await log.build_small_log(store)
        async with AnalyticsProjection(store) as analytics:
            report = await analytics.update()
            rows = {
                row.key: (row.calls, row.errors, row.latency_ms) for row in await analytics.usage("model")
            }
        expected = tmp_path / "cache" / "turnlog" / "analytics" / f"{store.store_id}.db"
        assert analytics.database == str(expected) and expected.is_file()
        async with AnalyticsProjection(store) as again:  # the next process carries on
            assert (await again.update()).events == 0
        async with AnalyticsProjection(store, database=tmp_path / "analytics.db") as chosen:
            assert (await chosen.update()).model_calls == 8
    assert (report.model_calls, report.tool_calls) == (8, 4)
    assert rows["gpt-4o"] == (5, 2, Percentiles(300.0, 800.0, 800.0))


async def test_a_payload_missing_what_a_fact_needs_is_an_error_naming_the_event(store: EventStore) -> None:
    ok = {"call_id": "c", "provider": "openai", "model": "gpt-4o", "endpoint": "x", "fingerprint": "0" * 64,
          "latency_ms": 5.0, "status": "ok"}  # fmt: skip
    await store.append("branch-x", [NewEvent("model.called", ok)])  # no usage: the schema's default
    await store.append("branch-x", [NewEvent("model.called", {**ok, "status": "maybe"})])
    async with AnalyticsProjection(store, batch_size=1) as analytics:
        with pytest.raises(EventDecodeError, match="position 2") as caught:
            await analytics.update()
        assert (caught.value.stream, caught.value.version, caught.value.type) == (
            "branch-x",
            2,
            "model.called",
        )
        assert await analytics.checkpoint() == 1  # the valid event before it was applied, once
        (row,) = await analytics.usage("model")
    assert (row.calls, row.input_tokens, row.cost_usd, row.unpriced_calls) == (1, 0, None, 1)
