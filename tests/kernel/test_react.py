"""ReAct and ReActStream: rounds, extension budget, one lifecycle, per-task suppression, fallback."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, ResponseParseError, RunEnd, RunFailure, RunStart, Signal
from turnlog.kernel.models import ModelRequest
from turnlog.kernel.operations.ReAct import Analysis, ReActAnalysis, ReActStream, clamp_extensions
from turnlog.projections import ActionResponse
from turnlog.testing import FunctionModel, ScriptedModel

from .conftest import assert_rebuilds


def step(extend: bool, text: str = "thinking", **extra: Any) -> str:
    return json.dumps({"analysis": text, "extension_needed": extend, **extra})


def answer(text: str) -> str:
    return json.dumps({"answer": text})


async def types_of(branch: Branch) -> list[str]:
    return [e.type async for e in branch.store.read_stream(branch.stream)]


def lookup(key: str) -> str:
    """Look a fact up."""
    return {"capital": "Oslo"}.get(key, "unknown")


async def test_react_defaults_to_three_extensions_under_one_run(store: EventStore) -> None:
    model = ScriptedModel(*(step(True) for _ in range(4)), answer("42"), step(True))
    branch = Branch(store=store, chat_model=model)
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    assert await branch.ReAct(instruction="What is six times seven?") == "42"
    assert len(model.calls) == 5  # first round + 3 extensions + the answer
    assert model.remaining == 1
    assert [type(s) for s in seen] == [RunStart, RunEnd]
    assert seen[0].verb == "ReAct" and seen[1].result == "42"
    types = await types_of(branch)
    assert types.count("run.started") == 1 and types.count("model.called") == 5
    assert "more rounds" in model.calls[0].last_user_message
    assert "Rounds left after this one: 2" in model.calls[1].last_user_message
    assert "original request: What is six times seven?" in model.calls[4].last_user_message
    await assert_rebuilds(branch)


async def test_rounds_stop_when_no_extension_is_needed(store: EventStore) -> None:
    model = ScriptedModel(step(True), step(False), answer("done"))
    branch = Branch(store=store, chat_model=model)
    out = await branch.ReAct(instruction="go", max_extensions=10, return_analysis=True)
    assert [type(o) for o in out[:2]] == [type(out[0])] * 2
    assert isinstance(out[0], ReActAnalysis) and out[1].extension_needed is False
    assert isinstance(out[-1], Analysis) and out[-1].answer == "done"
    model.assert_complete()
    await assert_rebuilds(branch)


@pytest.mark.parametrize("budget", [None, 0, -3])
async def test_no_budget_means_no_extension(store: EventStore, budget: int | None) -> None:
    model = ScriptedModel(step(True), answer("fast"))
    branch = Branch(store=store, chat_model=model)
    assert await branch.ReAct(instruction="go", max_extensions=budget) == "fast"
    model.assert_complete()
    assert "more rounds" not in model.calls[0].last_user_message
    await assert_rebuilds(branch)


async def test_extension_not_allowed(store: EventStore) -> None:
    model = ScriptedModel(step(True), answer("once"))
    branch = Branch(store=store, chat_model=model)
    out = await branch.ReAct(instruction="go", extension_allowed=False, verbose=True, display_as="json")
    assert out == "once"
    model.assert_complete()
    assert model.calls[0].request.params == {}  # display options are not request parameters
    with pytest.raises(TypeError, match="intermediate_response_options"):
        await branch.ReAct(instruction="go", intermediate_response_options=[Verdict])
    await assert_rebuilds(branch)


async def test_budget_above_100_warns_and_clamps(store: EventStore) -> None:
    with pytest.warns(UserWarning, match="should not exceed 100; defaulting to 100"):
        assert clamp_extensions(250) == 100
    model = ScriptedModel(step(False), answer("ok"))
    branch = Branch(store=store, chat_model=model)
    with pytest.warns(UserWarning, match="should not exceed 100"):
        assert await branch.ReAct(instruction="go", max_extensions=101) == "ok"
    await assert_rebuilds(branch)


async def test_react_stream_has_no_lifecycle_and_defaults_to_no_extension(store: EventStore) -> None:
    model = ScriptedModel(step(True), answer("streamed"))
    branch = Branch(store=store, chat_model=model)
    items = [item async for item in branch.ReActStream(instruction="go")]
    assert isinstance(items[0], ReActAnalysis) and items[-1].answer == "streamed"
    model.assert_complete()
    # each operate round owned its own run; there is no ReAct run
    assert [r.verb for r in branch.state.runs.values()] == ["operate", "operate"]
    # the module function drains the same way, with the same default
    model.add(step(True)).add(answer("module"))
    module_items = [i async for i in ReActStream(branch, instruction="again")]
    assert len(module_items) == 2 and module_items[-1].answer == "module"
    await assert_rebuilds(branch)


async def test_tools_run_inside_the_react_run(store: EventStore) -> None:
    first = step(
        True,
        "need a lookup",
        action_required=True,
        action_requests=[{"function": "lookup", "arguments": {"key": "capital"}}],
    )
    model = ScriptedModel(first, step(False, "found it"), answer("Oslo"))
    branch = Branch(store=store, chat_model=model, tools=[lookup])
    assert await branch.ReAct(instruction="Capital of Norway?") == "Oslo"
    (run_id,) = branch.state.runs
    (response,) = [m for m in branch.messages if isinstance(m, ActionResponse)]
    assert response.output == "Oslo"
    assert model.calls[0].tool_names == ["lookup"]
    assert "Oslo" in model.calls[1].request.messages[-1]["content"]  # the tool output came back
    assert model.calls[2].request.tools is None  # the answer round offers no tools
    assert branch.state.runs[run_id].verb == "ReAct"
    await assert_rebuilds(branch)


async def test_final_answer_falls_back_to_the_last_response(store: EventStore) -> None:
    model = ScriptedModel(step(False, "it is probably 7"), RuntimeError("provider down"))
    branch = Branch(store=store, chat_model=model)
    out = await branch.ReAct(instruction="go")
    assert out == step(False, "it is probably 7")
    (run,) = branch.state.runs.values()
    assert run.status == "ended"
    await assert_rebuilds(branch)


async def test_a_failing_round_fails_the_one_run(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(ValueError("boom")))
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    with pytest.raises(ValueError, match="boom"):
        await branch.ReAct(instruction="go")
    assert [type(s) for s in seen] == [RunStart, RunFailure]
    await assert_rebuilds(branch)


async def test_an_unparsed_round_raises_unless_asked_to_continue(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("gibberish"))
    with pytest.raises(ResponseParseError, match="round 1"):
        await branch.ReAct(instruction="go", num_parse_retries=0)
    model = ScriptedModel("gibberish", step(False), answer("recovered"))
    other = Branch(store=store, chat_model=model)
    out = await other.ReAct(instruction="go", continue_after_failed_response=True, num_parse_retries=0)
    assert out == "recovered"
    await assert_rebuilds(branch)
    await assert_rebuilds(other)


class Verdict(BaseModel):
    verdict: str
    score: int


async def test_custom_response_format_and_between_rounds(store: EventStore) -> None:
    model = ScriptedModel(step(True), step(False), json.dumps({"verdict": "fine", "score": 9}))
    branch = Branch(store=store, chat_model=model)
    rounds: list[int] = []

    def between(b: Branch, number: int) -> str:
        rounds.append(number)
        return f"Round {number}: check the numbers."

    out = await branch.ReAct(instruction="judge", response_format=Verdict, between_rounds=between)
    assert out == Verdict(verdict="fine", score=9)
    assert rounds == [2]
    assert "Round 2: check the numbers." in model.calls[1].last_user_message
    await assert_rebuilds(branch)


async def test_concurrent_react_tasks_do_not_suppress_each_other(store: EventStore) -> None:
    both = anyio.Event()
    waiting: list[int] = []

    async def reply(request: ModelRequest) -> str:
        text = str(request.messages[-1]["content"])
        if "final answer" in text:
            return answer("A" if "task-a" in text else "B")
        waiting.append(1)
        if len(waiting) == 2:
            both.set()
        with anyio.fail_after(5):
            await both.wait()  # both loops are inside their runs at the same time
        return step(False)

    branch = Branch(store=store, chat_model=FunctionModel(reply))
    results: dict[str, Any] = {}

    async def go(name: str) -> None:
        results[name] = await branch.ReAct(instruction=f"task-{name}")

    async with anyio.create_task_group() as group:
        group.start_soon(go, "a")
        group.start_soon(go, "b")
    assert results == {"a": "A", "b": "B"}
    runs = list(branch.state.runs.values())
    assert sorted(r.verb for r in runs) == ["ReAct", "ReAct"]
    assert all(r.status == "ended" for r in runs)
    await assert_rebuilds(branch)


async def test_cli_backed_react_nests_its_streamed_runs(store: EventStore) -> None:
    from .test_operate import LineCLI

    cli = LineCLI(step(True), step(False), answer("from the cli"))
    branch = Branch(store=store, chat_model=cli)
    seen: list[Signal] = []
    branch.observe(RunStart, RunEnd, RunFailure, handler=seen.append)
    assert await branch.ReAct(instruction="go") == "from the cli"
    assert len(cli.prompts) == 3
    assert [type(s) for s in seen] == [RunStart, RunEnd]  # the nested streams record no lifecycle
    (run,) = branch.state.runs.values()
    assert run.verb == "ReAct"
    await assert_rebuilds(branch)


async def test_react_run_names_the_provider_and_model_it_uses(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(step(False), answer("a"), model="main"))
    await branch.ReAct(instruction="go")
    analyst = ScriptedModel(step(False), model="analyst")
    branch.chat_model = ScriptedModel(answer("b"), model="main")
    await branch.ReAct(instruction="again", analysis_model=analyst)
    started = [e.data async for e in store.read_stream(branch.stream) if e.type == "run.started"]
    assert [(s["verb"], s["provider"], s["model"]) for s in started] == [
        ("ReAct", "test", "main"),
        ("ReAct", "test", "analyst"),
    ]
