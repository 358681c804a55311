"""communicate: a recorded exchange under one run, then optional parsing."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, ResponseParseError
from turnlog.kernel.models import ServerError
from turnlog.projections import AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds, first_of


class Answer(BaseModel):
    city: str
    population: int


async def types_of(branch: Branch) -> list[str]:
    return [event.type for event, _ in await branch.events()]


async def test_plain_mode_returns_text_and_records_two_messages(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("Paris."))
    assert await branch.communicate("Capital of France?") == "Paris."
    assert [type(m) for m in branch.messages] == [Instruction, AssistantResponse]
    assert await types_of(branch) == [
        "branch.created",
        "run.started",
        "message.added",
        "model.called",
        "message.added",
        "run.ended",
    ]
    await assert_rebuilds(branch)


async def test_skip_validation_returns_raw_text(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("not json at all"))
    out = await branch.communicate("x", response_format=Answer, skip_validation=True)
    assert out == "not json at all"
    assert len(branch.messages) == 2


async def test_response_format_parses_into_the_model(store: EventStore) -> None:
    reply = 'Sure:\n```json\n{"City": "Paris", "population": 2100000}\n```'
    model = ScriptedModel(reply)
    branch = Branch(store=store, chat_model=model)
    out = await branch.communicate("Tell me", response_format=Answer)
    assert out == Answer(city="Paris", population=2100000)
    assert len(branch.messages) == 2
    assert "ResponseSchema" in model.calls[0].request.messages[0]["content"]
    called = await first_of(branch, "model.called")
    assert called.response_format == "Answer"
    model.assert_complete()


async def test_parse_falls_back_to_a_reformat_request_and_annotates(store: EventStore) -> None:
    chat_model = ScriptedModel("The city is Paris, about two million people.")
    parse_model = ScriptedModel('{"city": "Paris", "population": 2000000}')
    branch = Branch(store=store, chat_model=chat_model, parse_model=parse_model)
    out = await branch.communicate("Tell me", response_format=Answer)
    assert out == Answer(city="Paris", population=2000000)
    assert len(branch.messages) == 2, "the reformat exchange is not recorded as messages"
    response = branch.messages[1]
    assert response.metadata["parsed_text"] == '{"city": "Paris", "population": 2000000}'
    called = [d for e, d in await branch.events() if e.type == "model.called"]
    assert [c.verb for c in called] == ["communicate", "parse"]
    assert response.metadata["model_call_id"] == called[1].call_id
    assert response.metadata["original_model_call_id"] == called[0].call_id
    await assert_rebuilds(branch)


async def test_parse_failure_raises_naming_the_type(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("bad parse", "still bad", "no", "nope"))
    with pytest.raises(ResponseParseError, match="Failed to parse model response into Answer") as info:
        await branch.communicate("x", response_format=Answer)
    assert isinstance(info.value, ValueError)
    failed = await first_of(branch, "run.failed")
    assert failed.error_type == "ResponseParseError"
    assert len(branch.messages) == 2, "the exchange itself was recorded before parsing"


async def test_num_parse_retries_above_five_warns_and_clamps(store: EventStore) -> None:
    parse_model = ScriptedModel(*["no json"] * 5)
    branch = Branch(store=store, chat_model=ScriptedModel("no json"), parse_model=parse_model)
    with pytest.warns(UserWarning, match="num_parse_retries=10 is high. Lowering to 5"):
        with pytest.raises(ResponseParseError):
            await branch.communicate("x", response_format=Answer, num_parse_retries=10)
    parse_model.assert_complete()


async def test_clear_messages_leaves_exactly_the_new_exchange(store: EventStore) -> None:
    branch = Branch(store=store, system="sys", chat_model=ScriptedModel("a", "b", "c"))
    await branch.communicate("one")
    await branch.communicate("two")
    await branch.communicate("three", clear_messages=True)
    assert len(branch.messages) == 2
    assert branch.messages[0].content.instruction == "three"
    assert branch.system is not None and branch.system.content.system_message == "sys"
    await assert_rebuilds(branch)


async def test_request_fields_returns_the_fields_found(store: EventStore) -> None:
    reply = '{"Answer": "42", "reasoning": "because", "noise": 1}'
    branch = Branch(store=store, chat_model=ScriptedModel(reply))
    out = await branch.communicate("q", request_fields=["answer", "reasoning", "confidence"])
    assert out == {"answer": "42", "reasoning": "because"}


async def test_removed_keyword_raises(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("x"))
    with pytest.raises(TypeError, match="use chat_model="):
        await branch.communicate("x", imodel=ScriptedModel("y"))


async def test_chat_model_override_is_used(store: EventStore) -> None:
    default, other = ScriptedModel(), ScriptedModel("from other", model="other")
    branch = Branch(store=store, chat_model=default)
    assert await branch.communicate("x", chat_model=other) == "from other"
    started = await first_of(branch, "run.started")
    assert started.model == "other"


async def test_extra_keywords_reach_the_request(store: EventStore) -> None:
    model = ScriptedModel("x")
    branch = Branch(store=store, chat_model=model)
    await branch.communicate("x", timeout=42, max_tokens=10)
    assert dict(model.calls[0].request.params) == {"timeout": 42, "max_tokens": 10}


async def test_failure_records_no_half_exchange(store: EventStore) -> None:
    model = ScriptedModel("fine", ServerError("boom", status_code=503))
    branch = Branch(store=store, chat_model=model)
    await branch.communicate("first")
    with pytest.raises(ServerError):
        await branch.communicate("second")
    assert len(branch.messages) == 2
    assert (await types_of(branch))[-3:] == ["run.started", "model.called", "run.failed"]
    await assert_rebuilds(branch)
