"""Price history: a call is charged at the price in force on the day it was recorded."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from turnlog.analytics import AnalyticsProjection, Price, PriceTable, PriceTableError, load_price_table
from turnlog.eventstore import EventStore
from turnlog.projections import RunEnded, RunStarted, Usage, new_event

OLD = Price(1.0, 2.0)
NEW = Price(0.5, 4.0, since=date(2026, 12, 1))
HISTORY = {"my-model": [NEW, OLD]}  # given in any order: the table sorts it by day


def test_lookup_gives_the_price_in_force_on_the_day() -> None:
    table = PriceTable(HISTORY)
    assert table.history("my-model-2026") == (OLD, NEW)
    assert table.lookup("my-model", date(2026, 11, 30)) == OLD
    assert table.lookup("my-model", date(2026, 12, 1)) == NEW
    # A time is taken on its UTC day: 23:30 at UTC-1 is already the new price's day.
    late = datetime.fromisoformat("2026-11-30T23:30:00-01:00")
    assert table.lookup("my-model", late) == NEW
    assert table.lookup("my-model", datetime(2026, 11, 30, 23, 59, tzinfo=UTC)) == OLD
    assert table.cost("my-model", 1000, 1000, at=date(2026, 11, 1)) == pytest.approx(3000 / 1e6)
    assert table.cost("my-model", 1000, 1000, at=date(2027, 1, 1)) == pytest.approx(4500 / 1e6)


def test_a_call_before_the_first_dated_price_is_charged_at_the_first() -> None:
    later = Price(3.0, 3.0, since=date(2027, 1, 1))
    table = PriceTable({"m": [Price(2.0, 2.0, since=date(2026, 6, 1)), later]})
    assert table.lookup("m", date(2020, 1, 1)) == Price(2.0, 2.0, since=date(2026, 6, 1))
    assert table.lookup("m", date(2027, 1, 1)) == later


def test_a_user_history_overrides_a_default_and_changes_the_fingerprint() -> None:
    mine = PriceTable({"gpt-4o": [Price(9.0, 9.0), Price(1.0, 1.0, since=date(2026, 1, 1))]})
    assert mine.lookup("gpt-4o-2024-08-06", date(2025, 12, 31)) == Price(9.0, 9.0)
    assert mine.lookup("gpt-4o-2024-08-06", date(2026, 1, 1)) == Price(1.0, 1.0, since=date(2026, 1, 1))
    moved = PriceTable({"gpt-4o": [Price(9.0, 9.0), Price(1.0, 1.0, since=date(2026, 1, 2))]})
    assert mine.fingerprint() != moved.fingerprint()
    assert mine != moved


def test_a_price_file_holds_a_history(tmp_path: Path) -> None:
    file = tmp_path / "prices.json"
    file.write_text(
        '{"my-model": [{"input": 1, "output": 2}, {"input": 0.5, "output": 4, "since": "2026-12-01"}]}'
    )
    table = load_price_table(file, environ={})
    assert table.history("my-model") == (OLD, NEW)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"m": [{"input": 1, "output": 1}, {"input": 2, "output": 2}]}', "same day"),
        (
            '{"m": [{"input": 1, "output": 1, "since": "2026-01-01"},'
            ' {"input": 2, "output": 2, "since": "2026-01-01"}]}',
            "same day",
        ),
        ('{"m": {"input": 1, "output": 1, "since": "yesterday"}}', "since must be a day"),
        ('{"m": {"input": 1, "output": 1, "since": 20260101}}', "since must be a day"),
        ('{"m": []}', "non-empty list of prices"),
    ],
)
def test_malformed_histories_are_refused(raw: str, message: str) -> None:
    with pytest.raises(PriceTableError, match=message):
        load_price_table(environ={"TURNLOG_PRICES": raw})


async def _log_across_the_change(store: EventStore, log: SimpleNamespace) -> None:
    stream = f"branch-{log.BRANCH_A}"
    await log.append_at(
        store,
        log.DAY1,  # 2026-11-30: the old price
        stream,
        [
            new_event(RunStarted(run_id="r1", verb="chat", provider="local", model="my-model")),
            log.call("my-model", provider="local", tokens=(1000, 100), latency=100),
            new_event(
                RunEnded(
                    run_id="r1", verb="chat", duration_ms=5, usage=Usage(input_tokens=1000, output_tokens=100)
                )
            ),
        ],
    )
    await log.append_at(
        store,
        log.DAY2,  # 2026-12-01: the new price
        stream,
        [log.call("my-model", provider="local", tokens=(2000, 300), latency=200)],
    )


OLD_COST = (1000 * 1.0 + 100 * 2.0) / 1e6
NEW_COST = (2000 * 0.5 + 300 * 4.0) / 1e6


async def test_each_call_is_charged_at_the_price_of_its_own_day(
    store: EventStore, log: SimpleNamespace, tmp_path: Path
) -> None:
    await _log_across_the_change(store, log)
    prices = PriceTable(HISTORY)
    async with AnalyticsProjection(store, prices=prices) as analytics:
        await analytics.update()
        by_model = {row.key: row for row in await analytics.usage("model")}
        by_day = {row.key: row.cost_usd for row in await analytics.usage("day")}
        runs = await analytics.run_usage("verb")
    assert by_model["my-model"].cost_usd == pytest.approx(OLD_COST + NEW_COST)
    assert by_model["my-model"].unpriced_calls == 0
    assert by_day == {"2026-11-30": pytest.approx(OLD_COST), "2026-12-01": pytest.approx(NEW_COST)}
    # A run is priced at the price in force when it started.
    assert [row.cost_usd for row in runs] == [pytest.approx(OLD_COST)]

    # Re-pricing stored facts (the table changed since they were priced) applies the
    # history the same way: it equals a fresh build with that table.
    async with AnalyticsProjection(store, database=tmp_path / "repriced.db") as analytics:
        await analytics.update()
        flat = {row.key: row.cost_usd for row in await analytics.usage("model")}
    assert flat["my-model"] is None  # the defaults do not know the model
    async with AnalyticsProjection(store, prices=prices, database=tmp_path / "repriced.db") as analytics:
        report = await analytics.update()
        assert report.events == 0
        repriced = {row.key: row.cost_usd for row in await analytics.usage("day")}
        repriced_runs = [row.cost_usd for row in await analytics.run_usage("verb")]
    assert repriced == by_day
    assert repriced_runs == [pytest.approx(OLD_COST)]


async def test_a_single_price_charges_every_day_alike(store: EventStore, log: SimpleNamespace) -> None:
    await _log_across_the_change(store, log)
    async with AnalyticsProjection(store, prices=PriceTable({"my-model": OLD})) as analytics:
        await analytics.update()
        by_model = {row.key: row.cost_usd for row in await analytics.usage("model")}
    assert by_model["my-model"] == pytest.approx((3000 * 1.0 + 400 * 2.0) / 1e6)
