"""The official ``openai`` SDK against ``turnlog fake-openai``: it must agree with every answer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from turnlog.testing import FakeOpenAIServer

openai = pytest.importorskip("openai")

KEY = "sk-sdk-conformance-0123456789"
HI = [{"role": "user", "content": "hi"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class City(BaseModel):
    name: str
    population: int


def client(server: FakeOpenAIServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, **kw)


async def test_plain_answer() -> None:
    async with FakeOpenAIServer([{"text": "Hello!"}], api_key=KEY) as server:
        async with client(server) as sdk:
            reply = await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI)
    assert reply.choices[0].message.content == "Hello!"
    assert reply.model == "gpt-4o-mini-2024-07-18" and reply.service_tier == "default"
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    assert reply.usage.completion_tokens_details.reasoning_tokens == 0
    assert reply.choices[0].message.annotations == []


async def test_streaming_with_usage() -> None:
    async with FakeOpenAIServer([{"text": "one two three"}], api_key=KEY) as server:
        async with client(server) as sdk:
            stream = await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=HI, stream=True, stream_options={"include_usage": True}
            )
            async with stream:
                chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_tool_calls(stream: bool) -> None:
    script = [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather"}]}
    ]
    async with FakeOpenAIServer(script, api_key=KEY) as server:
        async with client(server) as sdk:
            if stream:
                async with sdk.chat.completions.stream(
                    model="gpt-4o-mini", messages=HI, tools=[TOOL]
                ) as events:
                    reply = await events.get_final_completion()
            else:
                reply = await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI, tools=[TOOL])
    calls = reply.choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", '{"city":"Oslo"}'),
        ("get_weather", "{}"),
    ]
    assert all(c.id.startswith("call_") for c in calls) and reply.choices[0].finish_reason == "tool_calls"


async def test_json_schema_and_parse_with_a_pydantic_model() -> None:
    script = [{"text": '{"name": "Oslo", "population": 700000}', "times": 2}]
    async with FakeOpenAIServer(script, api_key=KEY) as server:
        async with client(server) as sdk:
            parsed = await sdk.chat.completions.parse(model="gpt-4o-mini", messages=HI, response_format=City)
            sent = server.requests[0]["body"]["response_format"]
            plain = await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI, response_format=sent)
    assert parsed.choices[0].message.parsed == City(name="Oslo", population=700000)
    assert sent["json_schema"]["strict"] is True  # the SDK's strict schema passes the fake's checks
    assert plain.choices[0].message.content == '{"name": "Oslo", "population": 700000}'


async def test_refusal() -> None:
    async with FakeOpenAIServer([{"refusal": "I can't help with that."}], api_key=KEY) as server:
        async with client(server) as sdk:
            parsed = await sdk.chat.completions.parse(model="gpt-4o-mini", messages=HI, response_format=City)
    message = parsed.choices[0].message
    assert message.refusal == "I can't help with that." and message.parsed is None


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"status": 400}, "BadRequestError"),
        ({"status": 401}, "AuthenticationError"),
        ({"status": 403}, "PermissionDeniedError"),
        ({"status": 404}, "NotFoundError"),
        ({"status": 409}, "ConflictError"),
        ({"status": 422}, "UnprocessableEntityError"),
        ({"status": 429}, "RateLimitError"),
        ({"status": 500}, "InternalServerError"),
        ({"status": 503}, "InternalServerError"),
    ],
    ids=lambda v: str(v.get("status")) if isinstance(v, dict) else v,
)
async def test_every_error_class(entry: dict[str, Any], error: str) -> None:
    async with FakeOpenAIServer([entry], api_key=KEY) as server:
        async with client(server) as sdk:
            with pytest.raises(getattr(openai, error)) as caught:
                await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI)
    assert caught.value.status_code == entry["status"]
    assert caught.value.body["type"]  # the SDK found the error envelope


async def test_a_request_the_real_api_refuses_is_a_bad_request_for_the_sdk_too() -> None:
    async with FakeOpenAIServer([{"text": "never"}], api_key=KEY) as server:
        async with client(server) as sdk:
            with pytest.raises(openai.BadRequestError) as caught:
                await sdk.chat.completions.create(model="gpt-4o-mini", messages=[])
    assert caught.value.param == "messages"


async def test_a_missing_key_is_an_authentication_error_with_code_none() -> None:
    async with FakeOpenAIServer([{"text": "a"}], api_key=KEY) as server:
        async with openai.AsyncOpenAI(api_key="unused", base_url=server.base_url, max_retries=0) as sdk:
            with pytest.raises(openai.AuthenticationError) as caught:
                # an omitted header (the SDK drops headers given as Omit) is a missing key
                await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=HI, extra_headers={"Authorization": openai.Omit()}
                )
    assert caught.value.code is None


async def test_the_sdk_retries_what_the_fake_asks_it_to() -> None:
    script = [
        {"status": 429, "retry_after_ms": 10},
        {"status": 409},
        {"status": 503, "headers": {"x-should-retry": "true"}, "retry_after": 0.01},
        {"text": "finally"},
    ]
    async with FakeOpenAIServer(script, api_key=KEY) as server:
        async with client(server, max_retries=3) as sdk:
            reply = await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI)
        retried = [r["headers"].get("x-stainless-retry-count") for r in server.requests]
    assert reply.choices[0].message.content == "finally"
    assert retried == ["0", "1", "2", "3"]


async def test_the_sdk_refuses_a_wait_of_more_than_two_minutes() -> None:
    async with FakeOpenAIServer([{"status": 503, "retry_after": 200}, {"text": "no"}], api_key=KEY) as server:
        async with client(server, max_retries=2) as sdk:
            with pytest.raises(openai.InternalServerError):
                await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI)
        assert len(server.requests) == 1
