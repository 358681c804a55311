"""Calls group by the model requested or by the model served; an alias is priced as what it served."""

from __future__ import annotations

import pytest

from turnlog.analytics import AnalyticsProjection
from turnlog.eventstore import EventStore
from turnlog.projections import BranchCreated, ModelCalled, Usage, new_event

from .conftest import BRANCH_A, DAY1, append_at


def called(model: str, served: str | None, n: int) -> ModelCalled:
    return ModelCalled(
        call_id=f"call-{model}-{n}",
        provider="openai",
        model=model,
        served_model=served,
        endpoint="chat/completions",
        fingerprint="0" * 64,
        usage=Usage(input_tokens=1000, output_tokens=100),
        latency_ms=100.0 + n,
        status="ok",
    )


async def test_usage_groups_by_requested_or_served_model(store: EventStore) -> None:
    stream = f"branch-{BRANCH_A}"
    events = [
        new_event(BranchCreated(branch_id=BRANCH_A)),
        new_event(called("gpt-4o-mini", "gpt-4o-mini-2024-07-18", 1)),
        new_event(called("gpt-4o-mini", None, 2)),
        new_event(called("team-alias", "gpt-4o-2024-08-06", 3)),
    ]
    await append_at(store, DAY1, stream, events)
    async with AnalyticsProjection(store) as analytics:
        await analytics.update()
        requested = {row.key: row for row in await analytics.usage("model")}
        served = {row.key: row for row in await analytics.usage("served_model")}
    assert {k: r.calls for k, r in requested.items()} == {"gpt-4o-mini": 2, "team-alias": 1}
    assert {k: r.calls for k, r in served.items()} == {
        "gpt-4o-mini-2024-07-18": 1,
        "gpt-4o-mini": 1,
        "gpt-4o-2024-08-06": 1,
    }
    # the alias is unknown to the price table, the model it served is not: (1000*2.5 + 100*10)/1e6
    assert requested["team-alias"].cost_usd == pytest.approx(0.0035)
    assert requested["team-alias"].unpriced_calls == 0
