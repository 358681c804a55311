"""Fixtures for the analytics tests: a real SQLite store and a hand-built log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from freezegun import freeze_time

from turnlog.eventstore import EventStore, NewEvent, open_store
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    BranchCreated,
    BranchIncluded,
    Instruction,
    MessageAdded,
    ModelCalled,
    RunEnded,
    RunFailed,
    RunStarted,
    SessionCreated,
    Usage,
    new_event,
)

BRANCH_A = "0190a000-0000-7000-8000-00000000000a"
BRANCH_B = "0190a000-0000-7000-8000-00000000000b"
SESSION = "0190a000-0000-7000-8000-0000000000s1"
DAY1 = "2026-11-30T10:00:00+00:00"
DAY2 = "2026-12-01T09:30:00+00:00"


def call(
    model: str,
    *,
    provider: str = "openai",
    status: str = "ok",
    tokens: tuple[int | None, int | None] = (None, None),
    cost: float | None = None,
    latency: float = 100.0,
    ttft: float | None = None,
    error_type: str | None = None,
    attempts: int = 1,
    run_id: str | None = None,
    verb: str | None = "chat",
) -> NewEvent:
    """A ``model.called`` event built through the catalogue (so it validates)."""
    usage = Usage(input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost)
    return new_event(
        ModelCalled(
            call_id=f"call-{model}-{latency}",
            provider=provider,
            model=model,
            endpoint="chat/completions",
            verb=verb,
            run_id=run_id,
            fingerprint="0" * 64,
            usage=usage,
            latency_ms=latency,
            ttft_ms=ttft,
            attempts=attempts,
            status=status,  # type: ignore[arg-type]
            error_type=error_type,
            error_message="failed" if status == "error" else None,
            stream=ttft is not None,
        )
    )


def tool(
    function: str, *, error: str | None = None, duration: float | None = None, denied: bool = False
) -> NewEvent:
    """A ``message.added`` event adding an ActionResponse."""
    request = ActionRequest.create(function, {"q": 1})
    response = ActionResponse.create(
        request,
        output=None if error else {"ok": True},
        error=error,
        duration_ms=duration,
        metadata={"denied": True} if denied else {},
    )
    return new_event(MessageAdded(message=response))


async def append_at(store: EventStore, moment: str, stream: str, events: list[NewEvent]) -> None:
    """Append ``events`` to ``stream`` with the store's clock frozen at ``moment``."""
    with freeze_time(moment):
        await store.append(stream, events)


async def build_small_log(store: EventStore) -> None:
    """The hand-built log whose figures the tests check exactly (see test_analytics_figures)."""
    a, b = f"branch-{BRANCH_A}", f"branch-{BRANCH_B}"
    session = f"session-{SESSION}"
    await append_at(store, DAY1, session, [new_event(SessionCreated(session_id=SESSION, name="s"))])
    await append_at(store, DAY1, a, [new_event(BranchCreated(branch_id=BRANCH_A, session_id=SESSION))])
    await append_at(store, DAY1, b, [new_event(BranchCreated(branch_id=BRANCH_B))])
    await append_at(
        store,
        DAY1,
        a,
        [
            new_event(RunStarted(run_id="r1", verb="chat", provider="openai", model="gpt-4o")),
            new_event(MessageAdded(message=Instruction.create("hello"), run_id="r1")),
            call("gpt-4o", tokens=(1000, 500), latency=100, ttft=20, run_id="r1"),
            call("gpt-4o", tokens=(2000, 1000), latency=200, ttft=40, run_id="r1"),
            call("gpt-4o", status="error", latency=300, error_type="RateLimitError", attempts=3),
            call("claude-sonnet-4-20250514", provider="anthropic", tokens=(100, 10), cost=0.5, latency=400),
            tool("search", duration=10),
            tool("search", error="ValueError: bad query", duration=30),
            tool("write_file", error="denied by policy", denied=True),
            tool("search", duration=20),
            new_event(
                RunEnded(
                    run_id="r1",
                    verb="chat",
                    duration_ms=1500,
                    usage=Usage(input_tokens=3000, output_tokens=1500),
                    chunks=12,
                )
            ),
            new_event(RunStarted(run_id="r3", verb="chat", provider="openai", model="gpt-4o")),
        ],
    )
    await append_at(
        store,
        DAY2,
        b,
        [
            new_event(RunStarted(run_id="r2", verb="ReAct", provider="local", model="my-local-model")),
            call("gpt-4o", tokens=(1000, 0), latency=500),
            call("my-local-model", provider="local", tokens=(50, 50), latency=600, run_id="r2"),
            call("my-local-model", provider="local", status="error", latency=700, error_type="Timeout"),
            call("gpt-4o", status="error", latency=800, error_type="RateLimitError"),
            new_event(
                RunFailed(
                    run_id="r2",
                    verb="ReAct",
                    duration_ms=2500,
                    error_type="TimeoutError",
                    error_message="too slow",
                    reason="timeout",
                )
            ),
        ],
    )
    await append_at(store, DAY2, f"session-{SESSION}", [new_event(BranchIncluded(branch_id=BRANCH_A))])


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(store_path: Path) -> AsyncIterator[EventStore]:
    async with open_store(f"sqlite:///{store_path}") as opened:
        yield opened


@pytest.fixture
async def small_log(store: EventStore) -> EventStore:
    await build_small_log(store)
    return store


def as_dicts(rows: list[Any]) -> list[dict[str, Any]]:
    return [row.to_dict() for row in rows]


@pytest.fixture
def log() -> SimpleNamespace:
    """The helpers and ids above, for test modules (conftest is not importable by name)."""
    return SimpleNamespace(
        call=call,
        tool=tool,
        append_at=append_at,
        build_small_log=build_small_log,
        as_dicts=as_dicts,
        BRANCH_A=BRANCH_A,
        BRANCH_B=BRANCH_B,
        SESSION=SESSION,
        DAY1=DAY1,
        DAY2=DAY2,
    )
