"""The test models: scripted replies with matchers, function replies, recorded calls."""

from __future__ import annotations

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, ScriptExhaustedError, UsageError
from turnlog.kernel.models import ChatModel, ModelRequest, ModelResponse, RateLimitError, Usage
from turnlog.testing import FunctionModel, ScriptedModel


def request(text: str) -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": text}])


async def test_positional_replies_in_order_then_exhaustion() -> None:
    model = ScriptedModel("one", ModelResponse(text="two", usage=Usage(1, 2, 0.0)))
    assert isinstance(model, ChatModel)
    assert (await model.invoke(request("a"))).text == "one"
    second = await model.invoke(request("b"))
    assert (second.text, second.usage, second.provider) == ("two", Usage(1, 2, 0.0), "test")
    model.assert_complete()
    with pytest.raises(ScriptExhaustedError):
        await model.invoke(request("c"))


async def test_when_matchers_win_over_position_and_are_used_once() -> None:
    model = (
        ScriptedModel("positional")
        .add("rainy", when="weather")
        .add("sunny", when=lambda r: "sun" in str(r.messages))
    )
    assert (await model.invoke(request("the weather?"))).text == "rainy"
    assert (await model.invoke(request("the weather again?"))).text == "positional"
    assert (await model.invoke(request("sun?"))).text == "sunny"
    assert [c.matched_by for c in model.calls] == ["when", "position", "when"]
    assert model.calls[0].last_user_message == "the weather?"


async def test_exceptions_are_raised_and_recorded() -> None:
    model = ScriptedModel(RateLimitError("later", status_code=429))
    with pytest.raises(RateLimitError):
        await model.invoke(request("x"))
    assert isinstance(model.calls[0].error, RateLimitError)


async def test_assert_complete_names_unused_replies() -> None:
    model = ScriptedModel("a", "b")
    await model.invoke(request("x"))
    with pytest.raises(AssertionError, match="1 scripted replies were never used"):
        model.assert_complete()


async def test_tool_calls_in_a_mapping_reply() -> None:
    model = ScriptedModel({"text": "", "tool_calls": [{"name": "add", "arguments": {"a": 1}, "id": "c1"}]})
    response = await model.invoke(request("x"))
    assert response.tool_calls[0].name == "add" and response.finish_reason == "tool_calls"


async def test_function_model_sync_and_async() -> None:
    sync_model = FunctionModel(lambda r: f"{len(r.messages)} messages")
    assert (await sync_model.invoke(request("x"))).text == "1 messages"

    async def answer(r: ModelRequest) -> str:
        return r.messages[-1]["content"].upper()

    async_model = FunctionModel(answer)
    assert (await async_model.invoke(request("shout"))).text == "SHOUT"
    assert async_model.calls[0].matched_by == "function"


async def test_recorded_model_serves_recorded_answers_by_fingerprint() -> None:
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch, ReplayMismatch
    from turnlog.projections import catalogue_upcasters
    from turnlog.testing import RecordedModel

    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        original = Branch(store=store, system="Be brief.", chat_model=ScriptedModel("Paris.", "Berlin."))
        await original.communicate("Capital of France?")
        await original.communicate("Capital of Germany?")

        replay = await RecordedModel.from_store(store, branch_id=original.id)
        assert replay.model == "scripted"
        copy = Branch(store=store, system="Be brief.", chat_model=replay)
        assert await copy.communicate("Capital of France?") == "Paris."
        assert await copy.communicate("Capital of Germany?") == "Berlin."
        with pytest.raises(ReplayMismatch):
            await copy.communicate("Capital of Spain?")


# ------------------------------------------------------------------ usage in either spelling


async def test_usage_takes_the_fake_servers_spelling_too(store: EventStore) -> None:
    """prompt_tokens / completion_tokens (the fake server's) count as input / output tokens."""
    model = ScriptedModel(
        {"text": "a", "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}},
        {"text": "b", "usage": {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.5}},
    )
    branch = Branch(store=store, chat_model=model)
    await branch.communicate("one")
    await branch.communicate("two")
    runs = list(branch.state.runs.values())
    assert [(r.usage.input_tokens, r.usage.output_tokens) for r in runs] == [(7, 3), (5, 2)]


async def test_a_scripted_reply_may_report_cache_reads_and_writes(store: EventStore) -> None:
    """The cache counts of a scripted usage reach the call and the run, as a provider's would."""
    usage = {"input_tokens": 900, "output_tokens": 4, "cache_read_tokens": 800, "cache_write_tokens": 50}
    branch = Branch(store=store, chat_model=ScriptedModel({"text": "a", "usage": usage}))
    await branch.communicate("one")
    expected = Usage(900, 4, cache_read_tokens=800, cache_write_tokens=50)
    [run] = branch.state.runs.values()
    [called] = [d for e, d in await branch.events() if e.type == "model.called"]
    assert run.usage == called.usage == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("usage", "complaint"),
    [
        ({"input_token": 1}, "unknown key 'input_token'"),
        ({"prompt_tokens": 1, "input_tokens": 2}, "input_tokens twice"),
        ({"output_tokens": "many"}, "output_tokens"),
    ],
)
def test_a_bad_usage_is_refused_when_the_script_is_written(usage: dict[str, object], complaint: str) -> None:
    """A malformed usage is a clear UsageError at construction, not a pydantic error in a failed run."""
    with pytest.raises(UsageError, match=complaint):
        ScriptedModel({"text": "a", "usage": usage})
    with pytest.raises(UsageError, match=complaint):
        ScriptedModel().add({"text": "a", "usage": usage})


async def test_function_model_reads_either_spelling(store: EventStore) -> None:
    """A FunctionModel reply's usage is read as ScriptedModel reads it."""
    model = FunctionModel(lambda _: {"text": "ok", "usage": {"prompt_tokens": 4, "completion_tokens": 1}})
    branch = Branch(store=store, chat_model=model)
    await branch.communicate("q")
    (run,) = branch.state.runs.values()
    assert (run.usage.input_tokens, run.usage.output_tokens) == (4, 1)
