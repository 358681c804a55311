"""Run lifecycle (D4): one start, exactly one terminal; signals in log order; suppression."""

from __future__ import annotations

import logging

import anyio
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import (
    Branch,
    MessageRecorded,
    RunEnd,
    RunFailure,
    RunStart,
    Signal,
    current_run,
    observed_run,
)
from turnlog.kernel.models import ModelRequest, Usage
from turnlog.testing import FunctionModel, ScriptedModel

from .conftest import assert_rebuilds


def usage_reply(text: str, tokens_in: int, tokens_out: int) -> dict[str, object]:
    return {"text": text, "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": 0.01}}


async def test_communicate_emits_one_start_and_one_end(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("a"))
    seen: list[Signal] = []
    branch.observe(handler=seen.append)
    assert await branch.communicate("q") == "a"
    assert [type(s) for s in seen] == [RunStart, MessageRecorded, MessageRecorded, RunEnd]
    start, end = seen[0], seen[-1]
    assert isinstance(start, RunStart) and isinstance(end, RunEnd)
    assert start.run_id == end.run_id and end.verb == "communicate"
    assert end.result == "a" and end.duration_ms >= 0
    assert [s.event.version for s in seen] == sorted(s.event.version for s in seen)
    messages = [s for s in seen if isinstance(s, MessageRecorded)]
    assert all(m.run_id == start.run_id for m in messages)


async def test_usage_is_that_of_the_run_only(store: EventStore) -> None:
    model = ScriptedModel(usage_reply("a", 10, 2), usage_reply("b", 30, 4))
    branch = Branch(store=store, chat_model=model)
    ends: list[RunEnd] = []
    branch.observe(RunEnd, handler=ends.append)
    await branch.communicate("one")
    await branch.communicate("two")
    assert ends[0].usage == Usage(10, 2, 0.01)
    assert ends[1].usage == Usage(30, 4, 0.01)
    run = branch.state.runs[ends[1].run_id]
    assert run.status == "ended" and run.usage.input_tokens == 30


async def test_failure_emits_run_failed_and_no_run_end(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(ValueError("bad things")))
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    with pytest.raises(ValueError, match="bad things"):
        await branch.communicate("q")
    assert [type(s) for s in seen] == [RunStart, RunFailure]
    failed = seen[1]
    assert isinstance(failed, RunFailure)
    assert (failed.error_type, failed.error_message, failed.reason) == ("ValueError", "bad things", "error")
    assert isinstance(failed.error, ValueError)
    await assert_rebuilds(branch)


async def test_chat_and_chat_and_record_own_no_lifecycle(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("a", "b"))
    await branch.chat("x")
    await branch.chat_and_record("y")
    assert branch.state.runs == {}


async def test_observer_that_raises_changes_nothing(
    store: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("a"))
    later: list[Signal] = []

    def explode(signal: Signal) -> None:
        raise RuntimeError(f"observer broke on {type(signal).__name__}")

    branch.observe(RunStart, RunEnd, handler=explode)
    branch.observe(handler=later.append)
    with caplog.at_level(logging.ERROR, logger="turnlog.kernel"):
        assert await branch.communicate("q") == "a"
    assert [type(s) for s in later] == [RunStart, MessageRecorded, MessageRecorded, RunEnd]
    assert "observer" in caplog.text
    (run,) = branch.state.runs.values()
    assert run.status == "ended"


async def test_async_observer_raising_on_failure_keeps_the_primary_error(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(KeyError("primary")))

    async def explode(signal: Signal) -> None:
        raise RuntimeError("secondary")

    branch.observe(RunFailure, handler=explode)
    with pytest.raises(KeyError, match="primary"):
        await branch.communicate("q")
    (run,) = branch.state.runs.values()
    assert run.status == "failed" and run.error_type == "KeyError"


async def test_cancelled_run_records_run_failed_cancelled(store: EventStore) -> None:
    entered = anyio.Event()

    async def hang(request: ModelRequest) -> str:
        entered.set()
        await anyio.sleep_forever()
        return "never"

    branch = Branch(store=store, chat_model=FunctionModel(hang))
    async with anyio.create_task_group() as tg:
        tg.start_soon(branch.communicate, "q")
        await entered.wait()
        tg.cancel_scope.cancel()
    (run,) = branch.state.runs.values()
    assert run.status == "failed" and run.reason == "cancelled"
    assert branch.messages == ()
    await assert_rebuilds(branch)


async def test_timeout_is_recorded_as_timeout(store: EventStore) -> None:
    async def slow(request: ModelRequest) -> str:
        await anyio.sleep(5)
        return "late"

    branch = Branch(store=store, chat_model=FunctionModel(slow))
    with pytest.raises(TimeoutError):
        async with observed_run(branch, "custom"):
            with anyio.fail_after(0.05):
                await branch.chat_and_record("q")
    (run,) = branch.state.runs.values()
    assert run.verb == "custom" and run.status == "failed" and run.reason == "timeout"


async def test_nested_runs_of_the_same_branch_are_suppressed(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(usage_reply("a", 5, 1), usage_reply("b", 7, 1)))
    ends: list[RunEnd] = []
    branch.observe(RunEnd, handler=ends.append)
    async with observed_run(branch, "ReAct") as outer:
        await branch.communicate("round 1")
        await branch.communicate("round 2")
        assert current_run(branch.id) is outer
    assert len(branch.state.runs) == 1
    (end,) = ends
    assert end.verb == "ReAct" and end.usage.input_tokens == 12
    messages = branch.messages
    assert len(messages) == 4
    assert {e.meta.get("run_id") for e, _ in await branch.events() if e.type == "message.added"} == {
        outer.run_id
    }


async def test_concurrent_tasks_do_not_suppress_each_other(store: EventStore) -> None:
    gate = anyio.Event()

    async def wait_then_answer(request: ModelRequest) -> str:
        await gate.wait()
        return "ok"

    branch = Branch(store=store, chat_model=FunctionModel(wait_then_answer))
    await branch.save()
    starts: list[RunStart] = []
    both_started = anyio.Event()

    def on_start(signal: RunStart) -> None:
        starts.append(signal)
        if len(starts) == 2:
            both_started.set()

    branch.observe(RunStart, handler=on_start)
    async with anyio.create_task_group() as tg:
        tg.start_soon(branch.communicate, "a")
        tg.start_soon(branch.communicate, "b")
        with anyio.fail_after(5):
            await both_started.wait()
        gate.set()
    assert len({s.run_id for s in starts}) == 2
    assert all(r.status == "ended" for r in branch.state.runs.values())
    await assert_rebuilds(branch)


async def test_a_run_on_another_branch_is_linked_to_its_parent(store: EventStore) -> None:
    a = Branch(store=store, chat_model=ScriptedModel("x"))
    b = Branch(store=store, chat_model=ScriptedModel("y"))
    async with observed_run(a, "operate") as outer:
        await b.communicate("q")
    (inner,) = b.state.runs.values()
    assert inner.parent_run_id == outer.run_id


async def test_session_observers_see_included_branches(store: EventStore) -> None:
    from turnlog.kernel import Session

    session = Session(store=store)
    seen: list[Signal] = []
    session.observe(RunEnd, handler=seen.append)
    branch = Branch(store=store, chat_model=ScriptedModel("a"))
    await session.include_branches(branch)
    await branch.communicate("q")
    assert [type(s) for s in seen] == [RunEnd]
    assert seen[0].event.meta["session_id"] == session.id


async def test_a_stream_closed_by_its_consumer_ends_cleanly(store: EventStore) -> None:
    branch = await Branch(store=store).save()

    async def stream():  # the shape of a streaming verb: the run spans the iteration
        async with observed_run(branch, "run"):
            for i in range(10):
                yield i

    gen = stream()
    async for item in gen:
        if item == 2:
            break
    await gen.aclose()
    (run,) = branch.state.runs.values()
    assert run.verb == "run" and run.status == "ended"
    await assert_rebuilds(branch)


async def test_exactly_one_terminal_per_start_under_failures(store: EventStore) -> None:
    model = ScriptedModel("ok", RuntimeError("x"), "ok", ValueError("y"), "ok")
    branch = Branch(store=store, chat_model=model)
    for _ in range(5):
        try:
            await branch.communicate("q")
        except (RuntimeError, ValueError):
            pass
    types = [e.type for e, _ in await branch.events() if e.type.startswith("run.")]
    assert types.count("run.started") == 5
    assert types.count("run.ended") + types.count("run.failed") == 5
    assert types.count("run.failed") == 2
