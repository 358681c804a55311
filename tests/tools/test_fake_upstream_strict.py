"""The fake Anthropic and Gemini servers refuse what the real services refuse, as they do."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from turnlog.testing import FakeUpstreamServer

anthropic = pytest.importorskip("anthropic")
genai = pytest.importorskip("google.genai")
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types as genai_types  # noqa: E402

KEY = "sk-strict-fake-0123456789"
HI = [{"role": "user", "content": "hi"}]
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3"}]}
BASE = {"model": "claude-sonnet-4-5", "max_tokens": 100}


async def post_anthropic(
    server: FakeUpstreamServer, body: dict[str, Any], path: str = "/v1/messages"
) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(
            server.base_url + path, json=body, headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "claude-sonnet-4-5", "messages": HI}, "max_tokens: Field required"),
        ({**BASE, "messages": HI, "user": "u"}, "user: Extra inputs are not permitted"),
        ({**BASE, "messages": []}, "at least one message"),
        ({**BASE, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({**BASE, "messages": [*HI, RESULT]}, "unexpected `tool_use_id`"),
        ({**BASE, "messages": [*HI, CALL, {"role": "user", "content": "and?"}]}, "without `tool_result`"),
        (
            {**BASE, "messages": [*HI, {**CALL, "content": RESULT["content"]}]},
            "can only be in `user` messages",
        ),
        ({**BASE, "messages": HI, "temperature": 0.1, "top_p": 0.5}, "cannot both be specified"),
    ],
)
async def test_anthropic_refusals_have_the_real_shape(body: dict[str, Any], words: str) -> None:
    async with FakeUpstreamServer([{"text": "never"}], api_key=KEY) as server:
        answer = await post_anthropic(server, body)
        assert server.unused()  # the script entry was not used up by a refused request
    assert answer.status_code == 400
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    assert answer.headers["x-should-retry"] == "false"


async def test_anthropic_takes_a_well_formed_tool_loop_and_beta_fields() -> None:
    async with FakeUpstreamServer([{"text": "ok", "times": None}], api_key=KEY) as server:
        loop = await post_anthropic(server, {**BASE, "messages": [*HI, CALL, RESULT]})
        older = await post_anthropic(
            server,
            {**BASE, "model": "claude-sonnet-4-20250514", "messages": HI, "temperature": 0.1, "top_p": 0.5},
        )
        beta = await post_anthropic(
            server, {**BASE, "messages": HI, "context_management": {}}, path="/v1/messages?beta=true"
        )
    assert (loop.status_code, older.status_code, beta.status_code) == (200, 200, 200)


async def test_the_anthropic_sdk_sees_a_bad_request() -> None:
    async with FakeUpstreamServer([{"text": "never"}], api_key=KEY) as server:
        async with anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0) as sdk:
            with pytest.raises(anthropic.BadRequestError) as caught:
                await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[*HI, RESULT])
    assert "unexpected `tool_use_id`" in str(caught.value)


def gemini_body(*contents: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"contents": list(contents), **extra}


USER = {"role": "user", "parts": [{"text": "add"}]}
TWO_CALLS = {
    "role": "model",
    "parts": [
        {"functionCall": {"name": "add", "args": {}}, "thoughtSignature": "c2ln"},
        {"functionCall": {"name": "add", "args": {}}},
    ],
}
ONE_ANSWER = {"role": "user", "parts": [{"functionResponse": {"name": "add", "response": {"output": 1}}}]}


@pytest.mark.parametrize(
    ("model", "body", "words"),
    [
        ("gemini-2.5-flash", gemini_body(USER, temperature=0.1), 'Unknown name "temperature"'),
        ("gemini-2.5-flash", gemini_body(), "contents is not specified"),
        ("gemini-2.5-flash", gemini_body({"role": "assistant", "parts": [{"text": "x"}]}), "valid role"),
        ("gemini-2.5-flash", gemini_body(USER, TWO_CALLS, ONE_ANSWER), "number of function response parts"),
        (
            "gemini-3-pro-preview",
            gemini_body(
                USER, {"role": "model", "parts": [{"functionCall": {"name": "add", "args": {}}}]}, ONE_ANSWER
            ),
            "missing a thought_signature",
        ),
    ],
)
async def test_gemini_refusals_have_the_real_shape(model: str, body: dict[str, Any], words: str) -> None:
    async with FakeUpstreamServer([{"text": "never"}], api_key=KEY) as server:
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{server.base_url}/v1beta/models/{model}:generateContent",
                json=body,
                headers={"x-goog-api-key": KEY},
            )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert words in error["message"]


async def test_the_genai_sdk_gets_signed_calls_and_is_refused_without_them() -> None:
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1}}]}, {"text": "done"}]
    tool = genai_types.Tool(
        function_declarations=[genai_types.FunctionDeclaration(name="add", description="Add.")]
    )
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        client = genai.Client(
            api_key=KEY,
            http_options=genai_types.HttpOptions(
                base_url=server.base_url, retry_options=genai_types.HttpRetryOptions(attempts=1)
            ),
        )
        async with client.aio as aio:
            config = genai_types.GenerateContentConfig(tools=[tool])
            first = await aio.models.generate_content(
                model="gemini-3-pro-preview", contents="add", config=config
            )
            [part] = first.candidates[0].content.parts
            assert part.function_call.name == "add" and part.thought_signature
            answer = genai_types.Part.from_function_response(name="add", response={"output": 2})
            history = [
                genai_types.Content(role="user", parts=[genai_types.Part(text="add")]),
                first.candidates[0].content,
            ]
            unsigned = genai_types.Content(
                role="model", parts=[genai_types.Part(function_call=part.function_call)]
            )
            with pytest.raises(genai_errors.ClientError) as caught:
                await aio.models.generate_content(
                    model="gemini-3-pro-preview",
                    contents=[history[0], unsigned, genai_types.Content(role="user", parts=[answer])],
                    config=config,
                )
            second = await aio.models.generate_content(
                model="gemini-3-pro-preview",
                contents=[*history, genai_types.Content(role="user", parts=[answer])],
                config=config,
            )
    assert caught.value.code == 400 and "thought_signature" in str(caught.value)
    assert second.text == "done"
