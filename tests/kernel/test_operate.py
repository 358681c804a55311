"""operate: one Middle call, outer validation, actions merged, one lifecycle; the repair Middle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import (
    Branch,
    ChatParam,
    ParseParam,
    ResponseParseError,
    RunEnd,
    RunStart,
    Signal,
)
from turnlog.kernel.models import StreamChunk
from turnlog.kernel.operations import RepairMiddle
from turnlog.projections import AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds


class Answer(BaseModel):
    city: str
    population: int


def mul(a: int, b: int) -> int:
    """Multiply."""
    return a * b


async def types_of(branch: Branch) -> list[str]:
    return [e.type async for e in branch.store.read_stream(branch.stream)]


GOOD = '{"city": "Oslo", "population": 700000}'


async def test_response_format_parses_under_one_run(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(f"Here:\n```json\n{GOOD}\n```"))
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, handler=seen.append)
    out = await branch.operate(instruction="Biggest city of Norway?", response_format=Answer)
    assert out == Answer(city="Oslo", population=700000)
    assert [type(m) for m in branch.messages] == [Instruction, AssistantResponse]
    assert await types_of(branch) == [
        "branch.created",
        "run.started",
        "message.added",
        "model.called",
        "message.added",
        "run.ended",
    ]
    assert [type(s) for s in seen] == [RunStart, RunEnd]
    assert seen[0].verb == "operate" and seen[1].result == out
    await assert_rebuilds(branch)


@pytest.mark.parametrize(("handle", "expected"), [("return_value", "no json here"), ("return_none", None)])
async def test_handle_validation_values(store: EventStore, handle: str, expected: Any) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("no json here"))
    out = await branch.operate(
        instruction="x",
        response_format=Answer,
        handle_validation=handle,
        num_parse_retries=0,  # type: ignore[arg-type]
    )
    assert out == expected
    assert len(branch.messages) == 2
    await assert_rebuilds(branch)


async def test_handle_validation_raise_fails_the_run(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("no json here"))
    with pytest.raises(ResponseParseError, match="Failed to parse LLM response into 'Answer'") as info:
        await branch.operate(
            instruction="x", response_format=Answer, handle_validation="raise", num_parse_retries=0
        )
    assert isinstance(info.value, ValueError) and info.value.target == "Answer"
    (run,) = branch.state.runs.values()
    assert (run.status, run.error_type) == ("failed", "ResponseParseError")
    await assert_rebuilds(branch)


async def test_parse_model_reformats_before_validation_fails(store: EventStore) -> None:
    branch = Branch(
        store=store, chat_model=ScriptedModel("Oslo, about 700k"), parse_model=ScriptedModel(GOOD)
    )
    out = await branch.operate(instruction="x", response_format=Answer)
    assert out == Answer(city="Oslo", population=700000)
    assert (await types_of(branch)).count("model.called") == 2
    await assert_rebuilds(branch)


async def test_skip_validation_returns_the_raw_text(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("not json"))
    assert await branch.operate(instruction="x", response_format=Answer, skip_validation=True) == "not json"
    await assert_rebuilds(branch)


async def test_reason_and_actions_extend_the_format_and_merge_responses(store: EventStore) -> None:
    reply = (
        '{"city": "Oslo", "population": 1, "reason": {"title": "t", "content": "count", '
        '"confidence_score": 0.9}, "action_required": true, '
        '"action_requests": [{"function": "mul", "arguments": {"a": 7, "b": 100000}}]}'
    )
    model = ScriptedModel(reply)
    branch = Branch(store=store, chat_model=model, tools=[mul])
    out = await branch.operate(instruction="x", response_format=Answer, reason=True, actions=True)
    assert isinstance(out, Answer) and out.city == "Oslo"
    assert out.reason.confidence_score == 0.9  # type: ignore[attr-defined]
    assert [(r.function, r.output) for r in out.action_responses] == [("mul", 700000)]  # type: ignore[attr-defined]
    request = model.calls[0].request
    assert request.tools is not None and request.tools[0]["function"]["name"] == "mul"
    assert "action_requests" in request.messages[-1]["content"]  # the operative schema is shown
    kinds = [type(m).__name__ for m in branch.messages]
    assert kinds == ["Instruction", "AssistantResponse", "ActionRequest", "ActionResponse"]
    (run_id,) = branch.state.runs
    await assert_rebuilds(branch)
    assert branch.state.runs[run_id].status == "ended"


async def test_invoke_actions_false_keeps_requests_only(store: EventStore) -> None:
    reply = (
        '{"action_required": true, "action_requests": [{"function": "mul", "arguments": {"a": 1, "b": 2}}]}'
    )
    branch = Branch(store=store, chat_model=ScriptedModel(reply), tools=[mul])
    out = await branch.operate(instruction="x", actions=True, invoke_actions=False)
    assert out.action_requests[0].function == "mul"
    assert not hasattr(out, "action_responses") or out.action_responses == []
    assert len(branch.messages) == 2
    await assert_rebuilds(branch)


async def test_a_custom_middle_is_called_exactly_once(store: EventStore) -> None:
    calls: list[tuple[Any, ...]] = []

    async def middle(
        branch: Branch,
        instruction: Any,
        chat_param: ChatParam,
        parse_param: ParseParam | None = None,
        clear_messages: bool = False,
        skip_validation: bool = False,
    ) -> Any:
        calls.append((instruction, chat_param, parse_param, clear_messages, skip_validation))
        return {"city": "Bergen", "action_requests": [{"function": "mul", "arguments": {"a": 2, "b": 3}}]}

    branch = Branch(store=store, tools=[mul])
    out = await branch.operate(
        instruction="hi", guidance="be brief", middle=middle, clear_messages=True, actions=True, temperature=0
    )
    (instruction, chat_param, parse_param, clear, skip) = calls[0]
    assert len(calls) == 1 and instruction == "hi" and clear is True and skip is False
    assert chat_param.guidance == "be brief" and chat_param.imodel_kw == {"temperature": 0}
    assert parse_param is not None and parse_param.handle_validation == "return_value"
    # a dict result gets the action responses merged in; operate appended no exchange itself
    assert out["action_responses"][0]["output"] == 6
    assert [type(m).__name__ for m in branch.messages] == ["ActionRequest", "ActionResponse"]
    assert (await types_of(branch)).count("run.started") == 1
    await assert_rebuilds(branch)


async def test_removed_and_unsupported_arguments(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(GOOD))
    with pytest.raises(TypeError, match="chat_model="):
        await branch.operate(instruction="x", imodel=ScriptedModel())
    with pytest.raises(TypeError, match="response_format="):
        await branch.operate(instruction="x", request_model=Answer)
    # a caller-supplied operative is ignored; the format decides
    out = await branch.operate(instruction="x", response_format=Answer, operative=object())
    assert out == Answer(city="Oslo", population=700000)
    await assert_rebuilds(branch)


async def test_instruct_mapping_fills_the_request(store: EventStore) -> None:
    model = ScriptedModel('{"reason": {"content": "because"}}')
    branch = Branch(store=store, chat_model=model)
    out = await branch.operate(instruct={"instruction": "why?", "guidance": "short", "reason": True})
    assert out.reason.content == "because"
    assert "why?" in model.calls[0].request.messages[-1]["content"]
    await assert_rebuilds(branch)


# ----------------------------------------------------------------------------- the repair Middle


async def test_repair_middle_owns_several_recorded_exchanges_in_one_run(store: EventStore) -> None:
    model = ScriptedModel("Oslo!", '{"city": "Oslo"}', GOOD)
    branch = Branch(store=store, chat_model=model)
    out = await branch.operate(instruction="x", response_format=Answer, middle=RepairMiddle(max_rounds=3))
    assert out == Answer(city="Oslo", population=700000)
    types = await types_of(branch)
    assert types.count("model.called") == 3 and types.count("message.added") == 6
    assert types.count("run.started") == 1 and types.count("run.ended") == 1
    second = model.calls[1].request.messages[-1]["content"]
    assert "did not follow the ResponseSchema" in second and "Attempt 2 of 3" in second
    (run_id,) = branch.state.runs
    assert [data.get("run_id") async for data in _data(branch, "message.added")] == [run_id] * 6
    await assert_rebuilds(branch)


async def _data(branch: Branch, kind: str) -> AsyncIterator[Mapping[str, Any]]:
    async for e in branch.store.read_stream(branch.stream):
        if e.type == kind:
            yield e.data


async def test_repair_middle_gives_up_after_its_budget(store: EventStore) -> None:
    model = ScriptedModel("no", "still no")
    branch = Branch(store=store, chat_model=model)
    with pytest.raises(ResponseParseError, match="Answer"):
        await branch.operate(
            instruction="x",
            response_format=Answer,
            middle=RepairMiddle(max_rounds=2),
            handle_validation="raise",
        )
    model.assert_complete()
    assert len(branch.messages) == 4
    (run,) = branch.state.runs.values()
    assert run.status == "failed"
    await assert_rebuilds(branch)


# ------------------------------------------------------------------------------------ CLI models


class LineCLI:
    """An in-process CLI agent: each run streams one scripted text."""

    provider = "test"  # test models are not rebuilt from their recorded config
    model = "line-1"
    is_cli = True

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.prompts: list[str] = []

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        self.prompts.append(prompt)
        text = self.texts.pop(0)
        yield StreamChunk("text", content=text)
        yield StreamChunk("result", content=text, metadata={"num_turns": 1})

    async def invoke(self, request: Any) -> Any:
        raise AssertionError("a CLI agent is driven by stream(), never invoke()")


async def test_operate_on_a_cli_model_uses_run_and_collect(store: EventStore) -> None:
    cli = LineCLI(GOOD)
    branch = Branch(store=store, chat_model=cli)
    out = await branch.operate(instruction="Biggest city?", response_format=Answer)
    assert out == Answer(city="Oslo", population=700000)
    assert len(cli.prompts) == 1
    assert [type(m) for m in branch.messages] == [Instruction, AssistantResponse]
    types = await types_of(branch)
    assert types.count("run.started") == 1 and types.count("run.ended") == 1
    (run,) = branch.state.runs.values()
    assert run.verb == "operate"
    await assert_rebuilds(branch)


async def test_an_explicit_middle_replaces_the_cli_middle_of_a_cli_model(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=LineCLI(GOOD))
    out = await branch.operate(instruction="x", middle=_fixed_middle)
    assert out == "fixed"
    await assert_rebuilds(branch)


async def _fixed_middle(*args: Any, **kwargs: Any) -> str:
    return "fixed"


async def test_operate_run_names_the_provider_and_model_it_uses(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(GOOD, model="main"))
    await branch.operate(instruction="city?", response_format=Answer)
    await branch.operate(instruction="city?", chat_model=ScriptedModel(GOOD, model="other"))
    started = [e.data async for e in store.read_stream(branch.stream) if e.type == "run.started"]
    assert [(s["provider"], s["model"]) for s in started] == [("test", "main"), ("test", "other")]
