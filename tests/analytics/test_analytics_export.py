"""Export: JSON Lines carries every envelope field; Parquet tables answer the same questions."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

import anyio
import orjson
import pytest

from turnlog.analytics import (
    AnalyticsProjection,
    MissingExtraError,
    export_jsonl,
    export_parquet,
)
from turnlog.analytics._export import envelope
from turnlog.eventstore import EventStore


async def test_jsonl_writes_every_field_of_every_event(small_log: EventStore) -> None:
    out = io.BytesIO()
    count = await export_jsonl(small_log, out)
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    events = [e async for e in small_log.read_all()]
    assert count == len(lines) == len(events) == await small_log.head()
    assert lines == [orjson.loads(orjson.dumps(envelope(e))) for e in events]
    first = lines[0]
    fields = "id stream version position type schema data meta recorded_at prev_hash hash"
    assert set(first) == set(fields.split())
    assert first["recorded_at"] == "2026-11-30T10:00:00.000000+00:00"
    assert lines[1]["prev_hash"] == "" and len(lines[1]["hash"]) == 64


async def test_jsonl_of_one_branch_has_its_stream_only(small_log: EventStore, log: SimpleNamespace) -> None:
    out = io.BytesIO()
    await export_jsonl(small_log, out, branch=log.BRANCH_B)
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert {line["stream"] for line in lines} == {f"branch-{log.BRANCH_B}"}
    assert [line["version"] for line in lines] == list(range(1, len(lines) + 1))


async def test_parquet_tables_answer_the_same_questions(small_log: EventStore, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    async with AnalyticsProjection(small_log) as analytics:
        written = await export_parquet(small_log, analytics, tmp_path / "out")
        usage = {r.key: r for r in await analytics.usage("model")}
    assert written == {
        "events.parquet": await small_log.head(),
        "model_calls.parquet": 8,
        "tool_calls.parquet": 4,
        "runs.parquet": 3,
    }
    calls = pq.read_table(tmp_path / "out" / "model_calls.parquet").to_pylist()
    assert {"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "error.type"} <= set(
        calls[0]
    )
    gpt = [c for c in calls if c["gen_ai.request.model"] == "gpt-4o"]
    assert sum(c["gen_ai.usage.input_tokens"] or 0 for c in gpt) == usage["gpt-4o"].input_tokens
    assert str(calls[0]["recorded_at"]) == "2026-11-30 10:00:00+00:00"
    events = pq.read_table(tmp_path / "out" / "events.parquet").to_pylist()
    assert [e["position"] for e in events] == list(range(1, len(events) + 1))
    assert orjson.loads(events[0]["data"])["session_id"]


async def test_duckdb_over_the_export_gives_the_projection_figures(
    small_log: EventStore, tmp_path: Path
) -> None:
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    async with AnalyticsProjection(small_log) as analytics:
        await export_parquet(small_log, analytics, tmp_path)
        usage = {r.key: r for r in await analytics.usage("model")}
    rows = duckdb.sql(
        f"""
        SELECT "gen_ai.request.model" AS model, count(*) AS calls,
               quantile_disc("gen_ai.client.operation.duration", 0.95) * 1000 AS p95_ms
        FROM '{tmp_path}/model_calls.parquet' GROUP BY ALL ORDER BY calls DESC
        """
    ).fetchall()
    assert [(m, n) for m, n, _ in rows] == [(k, r.calls) for k, r in usage.items()]
    assert rows[0][2] == pytest.approx(usage["gpt-4o"].latency_ms.p95)


async def test_parquet_without_pyarrow_names_the_extra(
    small_log: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    async with AnalyticsProjection(small_log) as analytics:
        with pytest.raises(MissingExtraError, match=r"pip install 'turnlog\[analytics\]'"):
            await export_parquet(small_log, analytics, tmp_path / "out")
    assert not await anyio.Path(tmp_path / "out").exists()


async def test_parquet_of_one_branch(small_log: EventStore, tmp_path: Path, log: SimpleNamespace) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    async with AnalyticsProjection(small_log) as analytics:
        written = await export_parquet(small_log, analytics, tmp_path, branch=log.BRANCH_A)
    events = pq.read_table(tmp_path / "events.parquet").to_pylist()
    assert {e["stream"] for e in events} == {f"branch-{log.BRANCH_A}"}
    assert {e["branch_id"] for e in events} == {log.BRANCH_A}
    facts = (written["model_calls.parquet"], written["tool_calls.parquet"], written["runs.parquet"])
    assert facts == (4, 4, 2)
