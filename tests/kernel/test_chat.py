"""chat: one unrecorded request; its model call is still a model.called event."""

from __future__ import annotations

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, called_message_ids
from turnlog.kernel.models import RateLimitError
from turnlog.projections import ActionRequest, ActionResponse, AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds, first_of


async def types_of(branch: Branch) -> list[str]:
    return [event.type for event, _ in await branch.events()]


async def test_chat_returns_text_and_records_no_message(store: EventStore) -> None:
    model = ScriptedModel("Hello there.")
    branch = Branch(store=store, chat_model=model)
    assert await branch.chat("hi") == "Hello there."
    assert branch.messages == ()
    assert await types_of(branch) == ["branch.created", "model.called"]
    await assert_rebuilds(branch)


async def test_chat_returns_the_pair_when_asked(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("42"), user="ann")
    ins, res = await branch.chat("What is 6 x 7?", return_ins_res_message=True)
    assert isinstance(ins, Instruction) and isinstance(res, AssistantResponse)
    assert res.response == "42"
    assert ins.sender == "ann" and ins.recipient == branch.id
    assert res.sender == branch.id and res.recipient == "ann"
    assert branch.messages == ()


async def test_sender_and_recipient_fall_back_to_user_then_defaults(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("a", "b"))
    ins, _ = await branch.chat("x", return_ins_res_message=True)
    assert ins.sender == "user" and ins.recipient == branch.id
    ins, _ = await branch.chat("x", sender="bob", recipient="carol", return_ins_res_message=True)
    assert (ins.sender, ins.recipient) == ("bob", "carol")


async def test_model_called_describes_the_call(store: EventStore) -> None:
    model = ScriptedModel({"text": "ok", "usage": {"input_tokens": 11, "output_tokens": 3, "cost_usd": 0.5}})
    branch = Branch(store=store, chat_model=model, system="Be kind.")
    await branch.chat("hi", temperature=0.2, api_key="sk-secret-123")
    called = await first_of(branch, "model.called")
    assert called.status == "ok" and called.verb == "chat"
    assert (called.provider, called.model, called.endpoint) == ("test", "scripted", "test")
    assert called.params == {"temperature": 0.2}
    assert called.usage.input_tokens == 11 and called.usage.cost_usd == 0.5
    event = next(e for e, _ in await branch.events() if e.type == "model.called")
    assert (await called_message_ids(store, event))[0] == branch.system.id
    assert len(called.fingerprint) == 64
    assert called.response is not None and called.response["choices"][0]["message"]["content"] == "ok"
    assert called.latency_ms >= 0 and called.attempts == 1
    assert model.calls[0].request.params == {"temperature": 0.2, "api_key": "sk-secret-123"}


async def test_same_request_same_fingerprint(store: EventStore) -> None:
    a = Branch(store=store, chat_model=ScriptedModel("x"))
    b = Branch(store=store, chat_model=ScriptedModel("y"))
    await a.chat(plain_content="same words")
    await b.chat(plain_content="same words")
    fa = [d.fingerprint for e, d in await a.events() if e.type == "model.called"]
    fb = [d.fingerprint for e, d in await b.events() if e.type == "model.called"]
    assert fa == fb


async def test_failed_call_is_recorded_then_raised(store: EventStore) -> None:
    error = RateLimitError("slow down", status_code=429, retry_after=2.0)
    branch = Branch(store=store, chat_model=ScriptedModel(error))
    with pytest.raises(RateLimitError):
        await branch.chat("hi")
    called = await first_of(branch, "model.called")
    assert called.status == "error"
    assert called.error_type == "RateLimitError" and called.error_message == "slow down"
    assert called.response is None
    assert branch.messages == ()
    await assert_rebuilds(branch)


async def test_system_text_is_folded_into_the_first_instruction(store: EventStore) -> None:
    model = ScriptedModel("one", "two")
    branch = Branch(store=store, chat_model=model, system="You are terse.")
    await branch.chat_and_record("first", guidance="Use one word.")
    await branch.chat("second")
    first = model.calls[0].request.messages
    assert [m["role"] for m in first] == ["user"]
    text = first[0]["content"]
    assert text.startswith("Guidance: |\n  You are terse.")
    assert text.index("You are terse.") < text.index("Use one word.") < text.index("Instruction: first")
    second = model.calls[1].request.messages
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert "You are terse." in second[0]["content"]
    assert "You are terse." not in second[2]["content"]


async def test_consecutive_assistant_texts_are_merged(store: EventStore) -> None:
    model = ScriptedModel("final")
    branch = Branch(store=store, chat_model=model)
    await branch.add_messages(
        [
            Instruction.create("q1"),
            AssistantResponse.create("a"),
            AssistantResponse.create("b"),
            Instruction.create("q2"),
        ]
    )
    await branch.chat("q3")
    sent = model.calls[0].request.messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "user"]
    assert sent[1]["content"] == "a\n\nb"


async def test_action_responses_extend_the_next_instruction_context(store: EventStore) -> None:
    model = ScriptedModel("done")
    branch = Branch(store=store, chat_model=model)
    request = ActionRequest.create("add", {"a": 1, "b": 2})
    await branch.add_messages(
        [Instruction.create("add them"), request, ActionResponse.create(request, output=3)]
    )
    await branch.chat("and now?")
    last = model.calls[0].request.messages[-1]["content"]
    assert "function: add" in last and "output: 3" in last


async def test_past_instructions_are_sent_without_their_schemas(store: EventStore) -> None:
    model = ScriptedModel("x", "y")
    branch = Branch(store=store, chat_model=model)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    await branch.chat_and_record("use the tool", tool_schemas=[tool])
    assert "Tools" in model.calls[0].request.messages[0]["content"]
    assert model.calls[0].request.tools == [tool]
    await branch.chat("again")
    assert "Tools" not in model.calls[1].request.messages[0]["content"]


async def test_history_must_start_with_an_instruction(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("x"))
    await branch.add_message(AssistantResponse.create("I speak first"))
    with pytest.raises(ValueError, match="First message in progression must be an Instruction"):
        await branch.chat("hi")


async def test_explicit_progression_selects_the_history(store: EventStore) -> None:
    model = ScriptedModel("1", "2", "3")
    branch = Branch(store=store, chat_model=model)
    await branch.chat_and_record("alpha")
    await branch.chat_and_record("beta")
    await branch.chat("gamma", progression=branch.progression[2:])
    sent = model.calls[2].request.messages
    assert [m["content"] for m in sent] == ["Instruction: beta", "2", "Instruction: gamma"]


async def test_images_are_sent_as_content_parts(store: EventStore) -> None:
    model = ScriptedModel("a cat")
    branch = Branch(store=store, chat_model=model)
    await branch.chat("what is this?", images=["https://example.org/cat.png"], image_detail="low")
    content = model.calls[0].request.messages[0]["content"]
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "https://example.org/cat.png", "detail": "low"},
    }
