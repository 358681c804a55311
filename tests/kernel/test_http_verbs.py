"""The verbs over HTTP as users run them: format dicts, tool turns, streaming, costs, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import RetryPolicy
from turnlog.projections import catalogue_upcasters
from turnlog.testing import FakeOpenAIServer

API_KEY = "sk-test-http-verbs-0123456789"
CITY_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": False,
        },
    },
}


def model_for(server: FakeOpenAIServer, **kwargs: Any) -> iModel:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=1))
    return iModel(provider="openai", model="gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, **kwargs)


async def model_calls(branch: Branch) -> list[Any]:
    return [d for e, d in await branch.events() if e.type == "model.called"]


# -- 1. a json_schema dict as the response format ------------------------------------------


async def test_communicate_with_a_json_schema_dict_parses_without_reformat_calls(store: EventStore) -> None:
    script = [{"text": '{"name": "Oslo", "population": 700000}'}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.communicate("Biggest city of Norway?", response_format=CITY_FORMAT)
        assert value == {"name": "Oslo", "population": 700000}
        assert len(server.requests) == 1
        assert server.requests[0]["body"]["response_format"] == CITY_FORMAT
    assert len(await model_calls(branch)) == 1


async def test_operate_with_a_json_schema_dict_returns_the_object(store: EventStore) -> None:
    script = [{"text": '{"name": "Oslo", "population": 700000}'}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.operate(instruction="Biggest city of Norway?", response_format=CITY_FORMAT)
    assert value == {"name": "Oslo", "population": 700000}


async def test_an_answer_missing_a_required_property_is_reformatted(store: EventStore) -> None:
    script = [
        {"text": '{"name": "Oslo"}', "match": {"last_user_contains": "Biggest"}},
        {"text": '{"name": "Oslo", "population": 700000}'},
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.communicate("Biggest city of Norway?", response_format=CITY_FORMAT)
    assert value == {"name": "Oslo", "population": 700000}
    assert [c.verb for c in await model_calls(branch)] == ["communicate", "parse"]


# -- 4. costs and models a provider or proxy reports ---------------------------------------


async def test_a_proxy_reported_cost_and_deployment_are_recorded(store: EventStore) -> None:
    script = [
        {
            "text": "hi",
            "model": "my-alias",
            "headers": {
                "x-litellm-response-cost": "0.00042",
                "x-litellm-model-name": "gpt-4o-mini-2024-07-18",
            },
        }
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert (called.model, called.served_model) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert called.usage.cost_usd == 0.00042


async def test_a_cost_in_the_usage_object_and_a_dated_snapshot_are_recorded(store: EventStore) -> None:
    script = [{"text": "hi", "model": "gpt-4o-mini-2024-07-18", "usage": {"cost": 0.0001}}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert (called.model, called.served_model) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert called.usage.cost_usd == 0.0001


async def test_the_served_model_is_not_repeated_when_it_is_the_requested_one(store: EventStore) -> None:
    async with FakeOpenAIServer([{"text": "hi", "model": "gpt-4o-mini"}], api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert called.served_model is None and called.usage.cost_usd is None


# -- 2. tool turns in the history, as Chat Completions defines them ---------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fail(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


TOOL_SCRIPT: list[dict[str, Any]] = [
    {
        "match": {"has_tools": True},
        "tool_calls": [
            {"name": "add", "arguments": {"a": 20, "b": 22}, "id": "call_A1"},
            {"name": "fail", "arguments": {"reason": "no disk"}, "id": "call_B2"},
        ],
    },
    {"text": "The answer is 42.", "times": None},
]


def check_chat_completions(messages: list[dict[str, Any]]) -> None:
    """The ordering rules of the Chat Completions API for tool turns."""
    open_ids: set[str] = set()
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_ids, f"messages[{i}] answers no open call"
            open_ids.discard(message["tool_call_id"])
            continue
        assert not open_ids, f"calls {open_ids} are not answered before messages[{i}]"
        if message["role"] == "assistant":
            assert message.get("content") or message.get("tool_calls"), f"messages[{i}] is empty"
            open_ids = {c["id"] for c in message.get("tool_calls") or ()}
    assert not open_ids


async def test_a_tool_turn_is_sent_back_with_tool_calls_and_tool_messages(store: EventStore) -> None:
    async with FakeOpenAIServer(TOOL_SCRIPT, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server), tools=[add, fail])
        await branch.operate(instruction="What is 20 + 22?", actions=True)
        assert await branch.communicate("And so?") == "The answer is 42."
        sent = server.requests[-1]["body"]["messages"]
    check_chat_completions(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[1]["content"] is None
    assert sent[1]["tool_calls"] == [
        {"id": "call_A1", "type": "function", "function": {"name": "add", "arguments": '{"a":20,"b":22}'}},
        {
            "id": "call_B2",
            "type": "function",
            "function": {"name": "fail", "arguments": '{"reason":"no disk"}'},
        },
    ]
    answers = {m["tool_call_id"]: m["content"] for m in sent[2:4]}  # the tools ran concurrently
    assert answers["call_A1"] == "42" and "no disk" in answers["call_B2"]


async def test_calls_that_were_not_run_are_answered_so_the_history_stays_valid(store: EventStore) -> None:
    async with FakeOpenAIServer(TOOL_SCRIPT, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server), tools=[add, fail])
        await branch.operate(instruction="What is 20 + 22?", actions=True, invoke_actions=False)
        await branch.communicate("And so?")
        await branch.communicate("Once more?")
        first, second = (r["body"]["messages"] for r in server.requests[1:])
    for sent in (first, second):
        check_chat_completions(sent)
        assert [m["role"] for m in sent[:4]] == ["user", "assistant", "tool", "tool"]
        assert "not run" in sent[2]["content"]
    assert second[: len(first)] == first


async def test_every_verb_after_a_tool_turn_sends_valid_tool_turns(store: EventStore) -> None:
    async with FakeOpenAIServer(TOOL_SCRIPT, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server), tools=[add, fail])
        await branch.operate(instruction="What is 20 + 22?", actions=True)
        await branch.chat("Summarize.")
        await branch.communicate("Again?")
        for request in server.requests[1:]:
            check_chat_completions(request["body"]["messages"])


# -- 3. verbs stream over HTTP ---------------------------------------------------------------


async def chunk_events(store: EventStore, call_id: str) -> list[Any]:
    return [e async for e in store.read_stream(f"run-{call_id}")]


@pytest.mark.parametrize("verb", ["chat", "communicate"])
async def test_a_streamed_verb_records_chunks_ttft_and_the_same_response(
    store: EventStore, verb: str
) -> None:
    script = [{"text": "one two three four", "times": 2, "usage": {"prompt_tokens": 5}}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        plain = await getattr(branch, verb)("count")
        streamed = await getattr(branch, verb)("count", stream=True)
        assert "stream" not in server.requests[0]["body"]
        assert server.requests[1]["body"]["stream"] is True
    assert plain == streamed == "one two three four"
    first, second = await model_calls(branch)
    assert (first.stream, second.stream) == (False, True)
    assert first.ttft_ms is None and second.ttft_ms is not None and 0 < second.ttft_ms <= second.latency_ms
    assert second.usage == first.usage
    assert second.response["choices"][0]["message"] == first.response["choices"][0]["message"]
    chunks = [e.data for e in await chunk_events(store, second.call_id)]
    assert [c["content"] for c in chunks if c["type"] == "text"] == ["one", " two", " three", " four"]
    assert all(c.get("is_delta") for c in chunks if c["type"] == "text")
    assert chunks[-1]["type"] == "result"
    assert chunks[-1]["metadata"]["usage"]["input_tokens"] == 5
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert await chunk_events(store, first.call_id) == []
    if verb == "communicate":
        one, two = [m for m in branch.messages if m.role == "assistant"]
        assert one.content == two.content
        assert set(one.metadata) == set(two.metadata) == {"model_call_id"}


async def test_a_model_can_stream_by_default_and_a_call_can_say_no(store: EventStore) -> None:
    async with FakeOpenAIServer([{"text": "hi", "times": None}], api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server, stream=True))
        await branch.communicate("a")
        await branch.communicate("b", stream=False)
        assert [r["body"].get("stream", False) for r in server.requests] == [True, False]
    assert [c.stream for c in await model_calls(branch)] == [True, False]
    assert all("stream" not in c.params for c in await model_calls(branch))


async def test_streamed_tool_calls_become_tool_use_chunks_and_the_same_metadata(store: EventStore) -> None:
    async with FakeOpenAIServer(
        [*TOOL_SCRIPT[:1], {**TOOL_SCRIPT[0], "times": 1}], api_key=API_KEY
    ) as server:
        branch = Branch(store=store, chat_model=model_for(server), tools=[add, fail])
        await branch.operate(instruction="add", actions=True, invoke_actions=False)
        await branch.operate(instruction="add", actions=True, invoke_actions=False, stream=True)
    plain, streamed = [m for m in branch.messages if m.role == "assistant"]
    assert plain.metadata["tool_calls"] == streamed.metadata["tool_calls"]
    _, called = await model_calls(branch)
    chunks = [e.data for e in await chunk_events(store, called.call_id)]
    uses = [(c["tool_id"], c["tool_name"], c["tool_input"]) for c in chunks if c["type"] == "tool_use"]
    assert uses == [("call_A1", "add", {"a": 20, "b": 22}), ("call_B2", "fail", {"reason": "no disk"})]


async def test_a_streamed_echo_of_the_credentials_reaches_neither_the_store_nor_the_buffer(
    tmp_path: Path,
) -> None:
    database = tmp_path / "echo.db"
    async with FakeOpenAIServer([{"text": "x"}], echo=True) as server:
        model = iModel(
            provider="fake",
            model="m",
            base_url=server.base_url,
            api_key=API_KEY,
            headers={"X-Custom-Auth": "HEADERVAL-0123"},
            retry=RetryPolicy(max_attempts=1),
        )
        async with open_store(f"sqlite:///{database}", upcasters=catalogue_upcasters()) as store:
            branch = Branch(store=store, chat_model=model)
            answer = await branch.communicate("echo", stream=True, stream_persist=True)
            assert "x-custom-auth" in answer  # the server did echo, in many deltas
            [called] = await model_calls(branch)
            chunks = [e.data async for e in store.read_stream(f"run-{called.call_id}")]
            assert len(chunks) > 10 and "<redacted>" in "".join(c["content"] for c in chunks)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert API_KEY.encode() not in data and b"HEADERVAL-0123" not in data, path
