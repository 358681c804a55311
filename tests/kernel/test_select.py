"""select (an operation module with no Branch facade) and interpret (an unrecorded rewrite)."""

from __future__ import annotations

import enum
import functools

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, Graph, Session, UsageError
from turnlog.kernel.operations.select import Selection, SelectionModel, select
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds


class Color(enum.Enum):
    RED = "#f00"
    BLUE = "#00f"


def test_there_is_no_branch_facade() -> None:
    assert not hasattr(Branch, "select")


async def test_select_maps_picks_back_to_the_choices(store: EventStore) -> None:
    model = ScriptedModel('{"selected": ["blue", "Gren", "purple"]}')
    branch = Branch(store=store, chat_model=model)
    out = await select(branch, "Pick colors", ["red", "green", "blue"], max_num_selections=2)
    assert isinstance(out, Selection) and isinstance(out.raw, SelectionModel)
    assert out.selected == ["blue", "green"]  # case and a close spelling match; unknown dropped
    sent = model.calls[0].request.messages[-1]["content"]
    assert "Select at most 2" in sent and "green" in sent
    (run,) = branch.state.runs.values()
    assert run.verb == "operate"  # one recorded exchange under one run
    await assert_rebuilds(branch)


async def test_select_through_a_session_registration_and_a_flow(store: EventStore) -> None:
    session = Session(store=store)
    branch = await session.new_branch(
        chat_model=ScriptedModel('{"selected": ["RED"]}', '{"selected": ["b"]}')
    )
    session.register_operation("select", functools.partial(select, branch))
    picked = await session.run_operation("select", instruction="A warm color?", choices=Color)
    assert picked.selected == [Color.RED]
    graph = Graph()
    node = graph.add("select", {"instruction": "Pick one", "choices": {"a": "first", "b": "second"}})
    result = await session.flow(graph)
    assert result.results[node.id].selected == ["b"]
    await assert_rebuilds(branch)


async def test_select_refuses_bad_choices(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel())
    with pytest.raises(UsageError, match="at least one choice"):
        await select(branch, "x", [])
    with pytest.raises(UsageError, match="choices must be"):
        await select(branch, "x", 42)
    with pytest.raises(UsageError, match="max_num_selections"):
        await select(branch, "x", ["a"], max_num_selections=0)
    assert branch.version == 0


async def test_interpret_rewrites_without_recording_messages(store: EventStore) -> None:
    model = ScriptedModel("Explain event sourcing to a beginner, with one example.")
    branch = Branch(store=store, chat_model=model)
    out = await branch.interpret("event sourcing??", domain="software", style="friendly")
    assert out == "Explain event sourcing to a beginner, with one example."
    assert list(branch.messages) == [] and branch.state.runs == {}
    request = model.calls[0].request
    assert request.params == {"temperature": 0.1}
    sent = request.messages[-1]["content"]
    assert (
        "Domain hint: software. Desired style: friendly." in sent and "User input: event sourcing??" in sent
    )
    (called,) = [e async for e in store.read_stream(branch.stream) if e.type == "model.called"]
    assert called.data["verb"] == "interpret"
    await assert_rebuilds(branch)


async def test_interpret_adds_no_temperature_beside_top_p_or_thinking(store: EventStore) -> None:
    """Claude 4.1+ refuses temperature with top_p, thinking refuses a temperature: interpret adds none then."""
    model = ScriptedModel("one", "two", "three")
    branch = Branch(store=store, chat_model=model)
    await branch.interpret("a", top_p=0.9)
    await branch.interpret("b", thinking={"type": "enabled", "budget_tokens": 1024})
    await branch.interpret("c", temperature=0.7)
    params = [c.request.params for c in model.calls]
    assert params == [
        {"top_p": 0.9},
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"temperature": 0.7},
    ]
