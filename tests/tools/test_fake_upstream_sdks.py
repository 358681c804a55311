"""The official ``anthropic`` and ``google-genai`` SDKs against ``turnlog fake-upstream``."""

from __future__ import annotations

from typing import Any

import pytest

from turnlog.testing import FakeUpstreamServer

anthropic = pytest.importorskip("anthropic")
genai = pytest.importorskip("google.genai")
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types as genai_types  # noqa: E402

KEY = "sk-upstream-sdk-0123456789"
HI = [{"role": "user", "content": "hi"}]
TOOL = {
    "name": "add",
    "description": "Add.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
}


def claude(server: FakeUpstreamServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, **kw)


def gemini(server: FakeUpstreamServer, attempts: int = 1) -> Any:
    options = genai_types.HttpOptions(
        base_url=server.base_url,
        retry_options=genai_types.HttpRetryOptions(attempts=attempts, initial_delay=0.01),
    )
    return genai.Client(api_key=KEY, http_options=options)


# -- Anthropic ---------------------------------------------------------------------------------


async def test_anthropic_plain_answer_with_cache_usage() -> None:
    script = [{"text": "Hello!", "usage": {"input_tokens": 12, "output_tokens": 3, "cached_tokens": 5}}]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with claude(server) as sdk:
            message = await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HI)
    assert [b.text for b in message.content if b.type == "text"] == ["Hello!"]
    assert message.stop_reason == "end_turn" and message.role == "assistant"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 3)
    assert message.usage.cache_read_input_tokens == 5


async def test_anthropic_stream_with_thinking_and_a_tool_call() -> None:
    script = [
        {"thinking": "think first", "text": "Adding.", "tool_calls": [{"name": "add", "arguments": {"a": 2}}]}
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with claude(server) as sdk:
            async with sdk.messages.stream(
                model="claude-sonnet-4-5", max_tokens=100, messages=HI, tools=[TOOL]
            ) as stream:
                texts = [text async for text in stream.text_stream]
                message = await stream.get_final_message()
    assert "".join(texts) == "Adding."
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert message.content[0].thinking == "think first" and message.content[0].signature
    use = message.content[2]
    assert (use.name, use.input) == ("add", {"a": 2}) and use.id.startswith("toolu_")
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, "BadRequestError"), (401, "AuthenticationError"), (403, "PermissionDeniedError"),
     (404, "NotFoundError"), (429, "RateLimitError"), (500, "InternalServerError"), (529, "OverloadedError")],
)  # fmt: skip
async def test_anthropic_error_classes(status: int, error: str) -> None:
    async with FakeUpstreamServer([{"status": status}], api_key=KEY) as server:
        async with claude(server) as sdk:
            with pytest.raises(getattr(anthropic, error)) as caught:
                await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HI)
    assert caught.value.status_code == status
    assert caught.value.body["error"]["type"]


async def test_anthropic_sdk_retries_and_honours_retry_after() -> None:
    script = [{"status": 429, "retry_after": 0.01}, {"status": 529}, {"text": "finally"}]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with claude(server, max_retries=2) as sdk:
            message = await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HI)
        assert len(server.requests) == 3
    assert message.content[0].text == "finally"


async def test_anthropic_stream_error_event_raises() -> None:
    script = [
        {"text": "partial answer", "stream_error": {"message": "Overloaded", "type": "overloaded_error"}}
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with claude(server) as sdk:
            with pytest.raises(anthropic.APIStatusError):
                async with sdk.messages.stream(
                    model="claude-sonnet-4-5", max_tokens=100, messages=HI
                ) as stream:
                    await stream.get_final_message()


# -- Gemini ------------------------------------------------------------------------------------


async def test_gemini_plain_answer_with_usage() -> None:
    script = [{"text": "Hello!", "usage": {"input_tokens": 12, "output_tokens": 3}}]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with gemini(server).aio as aio:
            response = await aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert response.text == "Hello!"
    assert response.candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert (response.usage_metadata.prompt_token_count, response.usage_metadata.candidates_token_count) == (
        12,
        3,
    )


async def test_gemini_stream_with_thoughts_and_a_function_call() -> None:
    script = [
        {"thinking": "think first", "text": "Adding.", "tool_calls": [{"name": "add", "arguments": {"a": 2}}]}
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        async with gemini(server).aio as aio:
            stream = await aio.models.generate_content_stream(model="gemini-2.5-flash", contents="hi")
            chunks = [chunk async for chunk in stream]
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert "".join(p.text for p in parts if p.text and not p.thought) == "Adding."
    assert "".join(p.text for p in parts if p.thought) == "think first"
    calls = [p.function_call for p in parts if p.function_call]
    assert [(c.name, c.args) for c in calls] == [("add", {"a": 2})]
    assert chunks[-1].candidates[0].finish_reason == genai_types.FinishReason.STOP


async def test_gemini_errors() -> None:
    async with FakeUpstreamServer([{"status": 429}, {"status": 500}], api_key=KEY) as server:
        async with gemini(server).aio as aio:
            with pytest.raises(genai_errors.ClientError) as client_error:
                await aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
            with pytest.raises(genai_errors.ServerError) as server_error:
                await aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (client_error.value.code, client_error.value.status) == (429, "RESOURCE_EXHAUSTED")
    assert server_error.value.code == 500


async def test_gemini_bad_key_is_a_400_invalid_argument() -> None:
    async with FakeUpstreamServer([{"text": "never"}], api_key="the-right-key") as server:
        async with gemini(server).aio as aio:
            with pytest.raises(genai_errors.ClientError) as caught:
                await aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT")
    assert "API key not valid" in caught.value.message
