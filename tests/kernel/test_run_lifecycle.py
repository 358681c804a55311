"""run's lifecycle, control and error classification: one start, exactly one terminal (D4)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, MessageRecorded, RunEnd, RunFailure, RunStart, Signal, iModel, observed_run
from turnlog.kernel.models import CLIError, ProviderError, StreamChunk
from turnlog.kernel.operations.run import classify_stream_error
from turnlog.projections import AssistantResponse, Instruction

from .conftest import assert_rebuilds
from .streamkit import ChunkModel, Fake, alive, make_fake, text


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    return make_fake(monkeypatch, tmp_path)


def watch(branch: Branch) -> list[Signal]:
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    return seen


def kinds(seen: list[Signal]) -> list[type]:
    return [type(s) for s in seen]


async def terminal_count(store: EventStore, branch: Branch) -> dict[str, int]:
    counts = {"run.started": 0, "run.ended": 0, "run.failed": 0}
    async for event in store.read_stream(branch.stream):
        if event.type in counts:
            counts[event.type] += 1
    return counts


async def test_one_start_and_one_end_and_start_before_first_message(store: EventStore, fake: Fake) -> None:
    fake.script({"steps": [{"text": "ok"}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    seen: list[object] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    async for message in branch.run("go"):
        seen.append(message)
    assert [type(s) for s in seen] == [RunStart, Instruction, AssistantResponse, RunEnd]
    end = seen[-1]
    assert isinstance(end, RunEnd) and end.verb == "run" and end.duration_ms > 0
    assert await terminal_count(store, branch) == {"run.started": 1, "run.ended": 1, "run.failed": 0}


async def test_error_chunk_gives_run_failed_and_no_run_end(store: EventStore) -> None:
    branch = Branch(store=store)
    seen = watch(branch)
    model = ChunkModel([text("so far"), StreamChunk("error", content="boom")])
    with pytest.raises(CLIError, match="boom"):
        async for _ in branch.run("go", chat_model=model):
            pass
    assert kinds(seen) == [RunStart, RunFailure]
    failed = seen[1]
    assert isinstance(failed, RunFailure) and isinstance(failed.error, CLIError) and failed.reason == "error"
    assert model.closed == 1
    await assert_rebuilds(branch)


@pytest.mark.parametrize("content", ["partial result", "{}"])
async def test_benign_end_of_stream_completes(store: EventStore, content: str) -> None:
    branch = Branch(store=store)
    seen = watch(branch)
    model = ChunkModel(
        [
            StreamChunk("system", metadata={"session_id": "s-1"}),
            text(content),
            StreamChunk("error", content="", metadata={"benign_eos": True}),
            text("never read"),
        ]
    )
    got = [m async for m in branch.run("go", chat_model=model)]
    assert got[-1].response == content  # type: ignore[union-attr]
    assert kinds(seen) == [RunStart, RunEnd]
    assert branch.provider_session("claude_code", "fake") == "s-1"


async def test_empty_error_without_the_marker_raises(store: EventStore) -> None:
    branch = Branch(store=store)
    with pytest.raises(CLIError, match=r"\(empty error\)"):
        async for _ in branch.run("go", chat_model=ChunkModel([StreamChunk("error", content="")])):
            pass


async def test_aclose_before_first_iteration_records_nothing(store: EventStore) -> None:
    branch = await Branch(store=store).save()
    seen = watch(branch)
    stream = branch.run("go", chat_model=ChunkModel([text("x")]))
    await stream.aclose()
    assert seen == [] and branch.version == 1


async def test_aclose_after_the_instruction_is_a_clean_end(store: EventStore) -> None:
    branch = Branch(store=store)
    seen = watch(branch)
    model = ChunkModel([text("x")])
    stream = branch.run("go", chat_model=model)
    first = await stream.__anext__()
    assert isinstance(first, Instruction)
    await stream.aclose()
    assert kinds(seen) == [RunStart, RunEnd]
    assert model.calls == []  # the provider was never started


async def test_break_after_a_response_ends_cleanly_and_closes_the_process(
    store: EventStore, fake: Fake
) -> None:
    fake.script({"steps": [{"text": "one"}, {"tool_use": {"name": "t", "input": {}}}, {"hang": True}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    seen = watch(branch)
    async with contextlib.aclosing(branch.run("go")) as stream:
        async for message in stream:
            if isinstance(message, AssistantResponse):
                break
    assert kinds(seen) == [RunStart, RunEnd]
    pid = fake.starts()[0]["pid"]
    assert not alive(pid)
    await assert_rebuilds(branch)


async def test_cancellation_is_run_failed_cancelled_and_the_process_goes(
    store: EventStore, fake: Fake
) -> None:
    fake.script({"steps": [{"text": "one"}, {"hang": True}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    seen = watch(branch)
    got: list[object] = []

    async def consume() -> None:
        async with contextlib.aclosing(branch.run("go")) as stream:
            async for message in stream:
                got.append(message)

    with anyio.move_on_after(1.0):
        await consume()
    assert kinds(seen) == [RunStart, RunFailure]
    failed = seen[1]
    assert isinstance(failed, RunFailure) and failed.reason == "cancelled"
    last = branch.messages[-1]
    assert isinstance(last, AssistantResponse) and last.response == "one" and last.metadata["interrupted"]
    assert not alive(fake.starts()[0]["pid"])
    await assert_rebuilds(branch)


async def test_secondary_close_failure_is_logged_not_raised_over_the_primary(
    store: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    model = ChunkModel(
        [text("a"), StreamChunk("error", content="boom"), text("b")],
        close_error=RuntimeError("close failed"),
    )
    branch = Branch(store=store)
    with caplog.at_level(logging.WARNING), pytest.raises(CLIError, match="boom"):
        async for _ in branch.run("go", chat_model=model):
            pass
    assert "close failed" in caplog.text


async def test_cancelled_close_does_not_replace_the_primary_error(store: EventStore) -> None:
    cancelled = anyio.get_cancelled_exc_class()
    model = ChunkModel([StreamChunk("error", content="boom"), text("b")], close_error=cancelled())
    branch = Branch(store=store)
    with pytest.raises(CLIError, match="boom"):
        async for _ in branch.run("go", chat_model=model):
            pass


async def test_nested_run_leaves_the_lifecycle_to_the_enclosing_run(store: EventStore) -> None:
    branch = Branch(store=store)
    seen = watch(branch)
    model = ChunkModel([StreamChunk("result", metadata={"usage": {"input_tokens": 5}}), text("inner")])
    async with observed_run(branch, "ReAct") as outer:
        assert await branch.run_and_collect("go", chat_model=model) == "inner"
        assert await branch.run_and_collect("again", chat_model=ChunkModel([text("x")])) == "x"
    assert kinds(seen) == [RunStart, RunEnd]
    assert outer.usage.input_tokens == 5
    assert model.closed == 1
    responses = [m for m in branch.messages if isinstance(m, AssistantResponse)]
    assert all(m.metadata["run_id"] != outer.run_id for m in responses)  # each has its own chunk stream


async def test_concurrent_tasks_do_not_suppress_each_other(store: EventStore) -> None:
    branch = await Branch(store=store).save()
    seen = watch(branch)

    async def nested() -> None:
        async with observed_run(branch, "ReAct"):
            await branch.run_and_collect("a", chat_model=ChunkModel([text("a")], delay=0.05))

    async def plain() -> None:
        await branch.run_and_collect("b", chat_model=ChunkModel([text("b")], delay=0.05))

    async with anyio.create_task_group() as tg:
        tg.start_soon(nested)
        tg.start_soon(plain)
    starts = sorted(s.verb for s in seen if isinstance(s, RunStart))
    assert starts == ["ReAct", "run"] and kinds(seen).count(RunEnd) == 2


async def test_observer_that_raises_changes_nothing(store: EventStore) -> None:
    branch = Branch(store=store)

    def bad(signal: Signal) -> None:
        raise RuntimeError("observer broke")

    branch.observe(RunStart, RunEnd, MessageRecorded, handler=bad)
    assert await branch.run_and_collect("go", chat_model=ChunkModel([text("fine")])) == "fine"
    run = next(iter(branch.state.runs.values()))
    assert run.status == "ended"


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("usage limit reached", "rate_limit"),
        ("invalid_api_key", "auth"),
        ("context window exceeded", "context"),
        ("something odd", "unknown"),
    ],
)
def test_error_text_is_classified(message: str, kind: str) -> None:
    error = classify_stream_error(message, provider="codex")
    assert isinstance(error, ProviderError) and error.kind == kind and str(error) == message


async def test_plain_runtime_error_from_the_stream_is_classified(store: EventStore) -> None:
    model = ChunkModel([text("a")], raise_at_end=RuntimeError("invalid api key"))
    branch = Branch(store=store)
    with pytest.raises(CLIError) as info:
        async for _ in branch.run("go", chat_model=model):
            pass
    assert info.value.kind == "auth" and isinstance(info.value.__cause__, RuntimeError)


async def test_classified_error_is_not_wrapped_again(store: EventStore) -> None:
    original = CLIError("quota", kind="rate_limit")
    model = ChunkModel([text("a")], raise_at_end=original)
    branch = Branch(store=store)
    with pytest.raises(CLIError) as info:
        async for _ in branch.run("go", chat_model=model):
            pass
    assert info.value is original


async def test_codex_null_payload_error_raises(store: EventStore) -> None:
    content = "CLI failure (empty error payload; event type='error')"
    branch = Branch(store=store)
    with pytest.raises(CLIError, match="empty error payload"):
        async for _ in branch.run("go", chat_model=ChunkModel([StreamChunk("error", content=content)])):
            pass


async def test_failed_cli_exit_is_run_failed_and_no_process_survives(store: EventStore, fake: Fake) -> None:
    fake.script({"steps": [{"text": "half"}, {"crash": {"exit": 3}}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    seen = watch(branch)
    with pytest.raises(CLIError):
        async for _ in branch.run("go"):
            pass
    assert kinds(seen) == [RunStart, RunFailure]
    assert not alive(fake.starts()[0]["pid"])
    last = branch.messages[-1]
    assert isinstance(last, AssistantResponse) and last.response == "half"
