"""``turnlog stats`` and ``turnlog export`` as a user runs them: real subprocesses on a real store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from turnlog.eventstore import open_store
from turnlog.projections import ActionRequest, ActionResponse, MessageAdded, ModelCalled, Usage, new_event


def _call(model: str, latency: float, status: str = "ok", tokens: int | None = 100) -> object:
    return new_event(
        ModelCalled(
            call_id=f"c{latency}", provider="openai" if model.startswith("gpt") else "local", model=model,
            endpoint="chat/completions", fingerprint="0" * 64, latency_ms=latency, status=status,  # type: ignore[arg-type]
            usage=Usage(input_tokens=tokens, output_tokens=tokens),
            error_type="RateLimitError" if status == "error" else None,
        )
    )  # fmt: skip


def _tool(name: str, error: str | None = None) -> object:
    request = ActionRequest.create(name, {})
    return new_event(MessageAdded(message=ActionResponse.create(request, error=error, duration_ms=5.0)))


async def _build(path: Path, *, more: bool = False) -> None:
    async with open_store(f"sqlite:///{path}") as store:
        if more:
            await store.append("branch-b2", [_call("gpt-4o", 50.0)])
            return
        events = [_call("gpt-4o", 100.0), _call("gpt-4o", 300.0, "error", None), _call("my-model", 200.0)]
        await store.append("branch-b1", [*events, _tool("search"), _tool("search", "boom")])


def turnlog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "turnlog.db"
    anyio.run(_build, path)
    return path


def test_stats_json_updates_incrementally(store: Path) -> None:
    first = turnlog("stats", "--json", "--store", str(store))
    assert first.returncode == 0, first.stderr
    result = orjson.loads(first.stdout)
    assert (result["position"], result["applied_events"]) == (5, 5)
    usage = {row["key"]: row for row in result["usage"]}
    assert (usage["gpt-4o"]["calls"], usage["gpt-4o"]["errors"]) == (2, 1)
    assert usage["gpt-4o"]["latency_ms"] == {"p50": 100.0, "p95": 300.0, "p99": 300.0}
    assert usage["gpt-4o"]["cost_usd"] == pytest.approx((100 * 2.5 + 100 * 10) / 1e6)
    assert usage["my-model"]["cost_usd"] is None
    assert result["errors"] == [
        {"key": "gpt-4o", "error_type": "RateLimitError", "errors": 1, "calls": 2, "rate": 0.5}
    ]
    anyio.run(lambda: _build(store, more=True))
    second = orjson.loads(turnlog("stats", "--json", "--store", str(store)).stdout)
    assert (second["position"], second["applied_events"]) == (6, 1)


def test_stats_prints_a_table(store: Path) -> None:
    done = turnlog("stats", "--store", str(store))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model calls by model"
    assert lines[1].split()[:3] == ["model", "calls", "errors"]
    assert lines[2].split()[:4] == ["gpt-4o", "2", "1", "50.0%"]
    assert "failed calls by error type" in done.stdout
    assert lines[-1] == "up to position 5 (5 new events applied)"


def test_a_cli_default_model_is_named_in_the_table(tmp_path: Path) -> None:
    async def build(path: Path) -> None:
        async with open_store(f"sqlite:///{path}") as store:
            await store.append("branch-b1", [_call("", 80.0)])

    path = tmp_path / "cli.db"
    anyio.run(build, path)
    done = turnlog("stats", "--store", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].startswith("(default model)")
    raw = orjson.loads(turnlog("stats", "--json", "--store", str(path)).stdout)
    assert [row["key"] for row in raw["usage"]] == [""]  # the data keeps what was recorded


def test_stats_by_tool_and_by_day(store: Path) -> None:
    tools = turnlog("stats", "--by", "tool", "--store", str(store))
    assert tools.returncode == 0, tools.stderr
    assert tools.stdout.splitlines()[2].split()[:6] == ["search", "2", "1", "1", "0", "50.0%"]
    days = orjson.loads(
        turnlog("stats", "--by", "day", "--json", "--since", "2000-01-01", "--store", str(store)).stdout
    )
    assert [row["calls"] for row in days["usage"]] == [3]


def test_prices_file_prices_an_unknown_model(store: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"my-model": {"input": 1.0, "output": 3.0}}')
    done = turnlog("stats", "--json", "--prices", str(prices), "--store", str(store))
    usage = {row["key"]: row for row in orjson.loads(done.stdout)["usage"]}
    assert usage["my-model"]["cost_usd"] == pytest.approx(400 / 1e6)


def test_user_mistakes_are_one_line_errors(store: Path, tmp_path: Path) -> None:
    bad_time = turnlog("stats", "--since", "last tuesday", "--store", str(store))
    assert bad_time.returncode == 2
    assert bad_time.stderr.strip() == "turnlog stats: --since: not an ISO 8601 time or date: 'last tuesday'"
    missing = turnlog("stats", "--store", str(tmp_path / "nope.db"))
    assert missing.returncode == 2 and "no store at" in missing.stderr
    assert not (tmp_path / "nope.db").exists()
    memory = turnlog("stats", "--store", "sqlite:///:memory:")
    assert memory.returncode == 2 and "no turnlog store at :memory:" in memory.stderr  # always empty


def test_export_jsonl_and_parquet(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "log.jsonl"
    done = turnlog("export", "--format", "jsonl", "--out", str(out), "--store", str(store))
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [line["position"] for line in lines] == [1, 2, 3, 4, 5]
    assert all(len(line["hash"]) == 64 for line in lines)
    pytest.importorskip("pyarrow")
    parquet = turnlog("export", "--format", "parquet", "--out", str(tmp_path / "pq"), "--store", str(store))
    assert parquet.returncode == 0, parquet.stderr
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == [
        "events.parquet", "model_calls.parquet", "runs.parquet", "tool_calls.parquet",
    ]  # fmt: skip


async def _build_across_a_price_change(path: Path) -> None:
    from freezegun import freeze_time  # the store's clock, so each call lands on its own day

    async with open_store(f"sqlite:///{path}") as store:
        with freeze_time("2026-11-30T12:00:00+00:00"):
            await store.append("branch-b1", [_call("my-model", 100.0, tokens=1000)])
        with freeze_time("2026-12-01T12:00:00+00:00"):
            await store.append("branch-b1", [_call("my-model", 200.0, tokens=1000)])


def test_stats_charges_each_call_at_the_price_of_its_day(tmp_path: Path) -> None:
    path = tmp_path / "turnlog.db"
    anyio.run(_build_across_a_price_change, path)
    prices = tmp_path / "prices.json"
    prices.write_text(
        '{"my-model": [{"input": 1.0, "output": 3.0}, {"input": 2.0, "output": 5.0, "since": "2026-12-01"}]}'
    )
    done = turnlog("stats", "--json", "--prices", str(prices), "--store", str(path))
    assert done.returncode == 0, done.stderr
    usage = {row["key"]: row for row in orjson.loads(done.stdout)["usage"]}
    # 1000 in + 1000 out at 1/3 $ per 1M before the change, at 2/5 $ per 1M from it
    assert usage["my-model"]["cost_usd"] == pytest.approx((4000 + 7000) / 1e6)


def test_stats_prices_a_cached_call_from_genai_prices(tmp_path: Path) -> None:
    """``--genai-prices`` prices a model the shipped defaults do not know, cache reads and writes
    at their own prices, and shows the cache columns."""
    pytest.importorskip("genai_prices")
    path = tmp_path / "cached.db"

    async def build() -> None:
        async with open_store(f"sqlite:///{path}") as store:
            call = ModelCalled(
                call_id="c1", provider="anthropic", model="claude-3-opus", endpoint="v1/messages",
                fingerprint="0" * 64, latency_ms=10.0, status="ok",
                usage=Usage(1230, 5, cache_read_tokens=1000, cache_write_tokens=200),
            )  # fmt: skip
            await store.append("branch-c", [new_event(call)])

    anyio.run(build)
    plain = turnlog("stats", "--store", str(path), "--analytics-db", str(tmp_path / "a.db"))
    assert plain.returncode == 0, plain.stderr
    header, row = plain.stdout.splitlines()[1:3]
    assert re.split(r"\s{2,}", header)[4:8] == ["input tok", "cache read", "cache write", "output tok"]
    # The defaults do not know the model: unpriced, with its cache counts shown.
    assert row.split()[4:9] == ["1230", "1000", "200", "5", "-"]
    priced = turnlog(
        "stats", "--store", str(path), "--genai-prices", "--analytics-db", str(tmp_path / "a.db"), "--json"
    )
    assert priced.returncode == 0, priced.stderr
    [usage] = orjson.loads(priced.stdout)["usage"]
    assert (usage["cache_read_tokens"], usage["cache_write_tokens"], usage["unpriced_calls"]) == (
        1000,
        200,
        0,
    )
    # claude-3-opus: $15 input, $1.50 cache read, $18.75 cache write, $75 output per million
    assert usage["cost_usd"] == pytest.approx((30 * 15 + 1000 * 1.5 + 200 * 18.75 + 5 * 75) / 1e6)
