"""``turnlog proxy`` with the official SDKs in front of the loopback fake upstreams.

Each SDK gets the same result through the proxy as without it, the bytes are the same (SSE
included), and every model call is recorded on the right branch.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnlog.testing import FakeOpenAIServer, FakeUpstreamServer

from .proxykit import Proxy, events_of, recorded, running_proxy, transcript

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")
from google.genai import types as genai_types  # noqa: E402

KEY = "sk-proxy-test-0123456789abcdef"
HI = [{"role": "user", "content": "hi"}]
ADD = {
    "name": "add",
    "description": "Add.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def deterministic(server: FakeUpstreamServer) -> FakeUpstreamServer:
    """Answer ids count from 1 (the fake starts them at the clock), so two servers answer alike."""
    server._ids = itertools.count(1)
    return server


def claude(base_url: str) -> Any:
    return anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0)


def gpt(base_url: str) -> Any:
    return openai.AsyncOpenAI(api_key=KEY, base_url=base_url, max_retries=0)


def gemini(base_url: str) -> Any:
    options = genai_types.HttpOptions(
        base_url=base_url, retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key=KEY, http_options=options)


async def runs_of(proxy: Proxy) -> list[tuple[str, str]]:
    """(verb status) of every run of every branch."""
    return [(run.verb, run.status) for b in await recorded(proxy.store) for run in b.state.runs.values()]


# -- Anthropic ---------------------------------------------------------------------------------


ANTHROPIC_SCRIPT = [
    {"text": "Hello!"},
    {"text": "Streaming along nicely."},
    {"text": "Adding.", "tool_calls": [{"name": "add", "arguments": {"a": 2}}]},
]


async def _claude_calls(base_url: str) -> list[Any]:
    async with claude(base_url) as sdk:
        plain = await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=HI)
        async with sdk.messages.stream(
            model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "stream"}]
        ) as stream:
            texts = [t async for t in stream.text_stream]
            streamed = await stream.get_final_message()
        tools = await sdk.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=50,
            messages=[{"role": "user", "content": "add"}],
            tools=[ADD],
        )
    return [plain.model_dump(), texts, streamed.model_dump(), tools.model_dump()]


async def test_anthropic_sdk_gets_the_same_answers_and_every_call_is_recorded(tmp_path: Path) -> None:
    async with FakeUpstreamServer(ANTHROPIC_SCRIPT, api_key=KEY) as direct:
        expected = await _claude_calls(deterministic(direct).base_url)
    async with FakeUpstreamServer(ANTHROPIC_SCRIPT, api_key=KEY) as upstream:
        deterministic(upstream)
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            got = await _claude_calls(proxy.url)
    assert got == expected
    branches = await recorded(tmp_path / "s.db")
    assert [transcript(b) for b in branches] == [
        [("Instruction", "hi"), ("AssistantResponse", "Hello!")],
        [("Instruction", "stream"), ("AssistantResponse", "Streaming along nicely.")],
        [("Instruction", "add"), ("AssistantResponse", "Adding."), ("ActionRequest", "add")],
    ]
    calls = [c for b in branches for c in b.calls()]
    assert [(c.provider, c.model, c.status, c.stream) for c in calls] == [
        ("anthropic", "claude-sonnet-4-5", "ok", False),
        ("anthropic", "claude-sonnet-4-5", "ok", True),
        ("anthropic", "claude-sonnet-4-5", "ok", False),
    ]
    assert all(c.usage.input_tokens and c.usage.output_tokens for c in calls)
    assert (
        calls[1].ttft_ms is not None and calls[1].response["content"][0]["text"] == "Streaming along nicely."
    )
    run_id = calls[1].run_id
    chunks = await events_of(tmp_path / "s.db", f"run-{run_id}")
    assert chunks[0].data["metadata"]["sse"].startswith("event: message_start")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == "Streaming along nicely."


async def test_same_request_direct_and_proxied_gives_the_same_bytes(tmp_path: Path) -> None:
    requests = [
        ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": HI}),
        ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": HI, "stream": True}),
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        ),
        ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": HI, "stream": True}),
    ]
    script = [{"text": "one two three four"}] * 4 + [{"status": 529}]
    headers = {"x-api-key": KEY, "x-goog-api-key": KEY, "anthropic-version": "2023-06-01"}

    async def fetch(base: str) -> list[tuple[int, str, bytes]]:
        out = []
        async with httpx.AsyncClient(base_url=base) as client:
            for path, body in requests:
                answer = await client.post(path, json=body, headers=headers)
                out.append((answer.status_code, answer.headers["content-type"], answer.content))
        return out

    async with FakeUpstreamServer(script, api_key=KEY) as direct:
        expected = await fetch(deterministic(direct).base_url)
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        deterministic(upstream)
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            got = await fetch(proxy.url)
    assert got == expected
    assert [status for status, _, _ in got] == [200, 200, 200, 200, 529]
    assert b"event: content_block_delta" in got[1][2] and got[3][2].startswith(b"data: ")
    assert sorted(await runs_of(proxy)) == sorted([("proxy", "ended")] * 4 + [("proxy", "failed")])


async def test_error_answers_reach_the_sdk_unchanged_and_are_failed_calls(tmp_path: Path) -> None:
    script = [
        {"status": 400},
        {"status": 500},
        {"text": "partial answer", "stream_error": {"message": "Overloaded", "type": "overloaded_error"}},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            async with claude(proxy.url) as sdk:
                with pytest.raises(anthropic.BadRequestError) as bad:
                    await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=9, messages=HI)
                with pytest.raises(anthropic.InternalServerError):
                    await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=9, messages=HI)
                with pytest.raises(anthropic.APIStatusError):
                    async with sdk.messages.stream(model="claude-sonnet-4-5", max_tokens=9, messages=HI) as s:
                        await s.get_final_message()
    assert bad.value.status_code == 400 and bad.value.body["error"]["type"] == "invalid_request_error"
    branches = await recorded(tmp_path / "s.db")
    calls = [c for b in branches for c in b.calls()]
    assert [(c.status, c.params["_upstream"]["status"]) for c in calls] == [
        ("error", 400),
        ("error", 500),
        ("error", 200),
    ]
    assert calls[2].error_type == "StreamFault" and "Overloaded" in calls[2].error_message
    assert [r.status for b in branches for r in b.state.runs.values()] == ["failed"] * 3
    chunks = await events_of(tmp_path / "s.db", f"run-{calls[2].run_id}")
    assert any(c.data["type"] == "error" for c in chunks)
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == "partial answer"


# -- OpenAI ------------------------------------------------------------------------------------


async def _gpt_calls(base_url: str) -> list[Any]:
    async with gpt(base_url) as sdk:
        plain = await sdk.chat.completions.create(model="gpt-4o-mini", messages=HI)
        stream = await sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "s"}], stream=True
        )
        pieces = [
            c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content
        ]
        tools = await sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "w"}], tools=[WEATHER]
        )
        with pytest.raises(openai.RateLimitError) as limited:
            await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
            )
    call = tools.choices[0].message.tool_calls[0]
    return [
        plain.choices[0].message.content,
        plain.usage.model_dump(),
        pieces,
        (call.function.name, call.function.arguments),
        limited.value.status_code,
    ]


async def test_openai_chat_completions_sdk_through_the_proxy(tmp_path: Path) -> None:
    script = [
        {"text": "Hello!"},
        {"text": "streamed words here"},
        {"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
        {"status": 429},
    ]
    async with FakeOpenAIServer(script, api_key=KEY) as direct:
        expected = await _gpt_calls(direct.base_url)
    async with FakeOpenAIServer(script, api_key=KEY) as upstream:
        root = upstream.base_url.removesuffix("/v1")
        async with running_proxy(tmp_path / "s.db", f"openai={root}") as proxy:
            got = await _gpt_calls(proxy.url + "/v1")
    assert got == expected
    branches = await recorded(tmp_path / "s.db")
    assert [transcript(b)[-1] for b in branches] == [
        ("AssistantResponse", "Hello!"),
        ("AssistantResponse", "streamed words here"),
        ("ActionRequest", "weather"),
        ("Instruction", "x"),
    ]
    assert [r.status for b in branches for r in b.state.runs.values()] == [
        "ended",
        "ended",
        "ended",
        "failed",
    ]


async def test_openai_responses_sdk_through_the_proxy(tmp_path: Path) -> None:
    script = [{"text": "Plain reply."}, {"text": "A streamed reply.", "thinking": "hmm"}]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            async with gpt(proxy.url + "/v1") as sdk:
                plain = await sdk.responses.create(model="gpt-5", input="hi")
                stream = await sdk.responses.create(model="gpt-5", input="again", stream=True)
                deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
    assert plain.output_text == "Plain reply." and "".join(deltas) == "A streamed reply."
    branches = await recorded(tmp_path / "s.db")
    assert [transcript(b) for b in branches] == [
        [("Instruction", "hi"), ("AssistantResponse", "Plain reply.")],
        [("Instruction", "again"), ("AssistantResponse", "A streamed reply.")],
    ]
    calls = [c for b in branches for c in b.calls()]
    assert [(c.endpoint, c.stream, c.usage.output_tokens is not None) for c in calls] == [
        ("responses", False, True),
        ("responses", True, True),
    ]


# -- Gemini ------------------------------------------------------------------------------------


async def test_gemini_sdk_through_the_proxy(tmp_path: Path) -> None:
    script = [
        {"text": "Hello from Gemini."},
        {"text": "A streamed Gemini answer."},
        {"tool_calls": [{"name": "add", "arguments": {"a": 1}}]},
    ]

    async def calls(base: str) -> list[Any]:
        async with gemini(base).aio as aio:
            plain = await aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
            pieces = [
                c.text
                async for c in await aio.models.generate_content_stream(
                    model="gemini-2.5-flash", contents="s"
                )
            ]
            tool = genai_types.Tool(
                function_declarations=[genai_types.FunctionDeclaration(name="add", description="Add.")]
            )
            called = await aio.models.generate_content(
                model="gemini-2.5-flash",
                contents="add",
                config=genai_types.GenerateContentConfig(tools=[tool]),
            )
        return [plain.text, pieces, called.function_calls[0].name, called.function_calls[0].args]

    async with FakeUpstreamServer(script, api_key=KEY) as direct:
        expected = await calls(direct.base_url)
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            got = await calls(proxy.url)
    assert got == expected
    branches = await recorded(tmp_path / "s.db")
    assert [transcript(b)[-1] for b in branches] == [
        ("AssistantResponse", "Hello from Gemini."),
        ("AssistantResponse", "A streamed Gemini answer."),
        ("ActionRequest", "add"),
    ]
    assert [(r.provider, r.model) for b in branches for r in b.state.runs.values()] == [
        ("gemini", "gemini-2.5-flash")
    ] * 3


async def test_sdk_retries_are_calls_of_the_same_branch(tmp_path: Path) -> None:
    script = [{"status": 429, "retry_after": 0.01}, {"status": 529}, {"text": "finally"}]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(tmp_path / "s.db", upstream.base_url) as proxy:
            sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=proxy.url, max_retries=2)
            async with sdk:
                message = await sdk.messages.create(model="claude-sonnet-4-5", max_tokens=9, messages=HI)
    assert message.content[0].text == "finally"
    (branch,) = await recorded(tmp_path / "s.db")
    assert transcript(branch) == [("Instruction", "hi"), ("AssistantResponse", "finally")]
    assert [r.status for r in branch.state.runs.values()] == ["failed", "failed", "ended"]
    assert [c.params["_upstream"]["status"] for c in branch.calls()] == [429, 529, 200]


# -- openai and gemini: 5xx, an error inside a stream, the SDK's retry ----------------------------


def _scrubbed(text: str) -> str:
    # answer and request ids come from counters and the clock: they differ between two servers
    return re.sub(r"(req|chatcmpl|resp|msg)[-_][A-Za-z0-9]+", r"\1-ID", text)


async def _gpt_failures(base: str) -> list[Any]:
    async with gpt(base) as sdk:
        with pytest.raises(openai.InternalServerError) as failed:
            await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}]
            )
        texts = []
        with pytest.raises(openai.APIError) as broke:
            stream = await sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "s"}], stream=True
            )
            async for chunk in stream:
                texts.extend(c.delta.content or "" for c in chunk.choices)
    async with openai.AsyncOpenAI(api_key=KEY, base_url=base, max_retries=1) as retrying:
        retried = await retrying.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "r"}]
        )
    return [
        (failed.value.status_code, failed.value.body),
        ("".join(texts), type(broke.value).__name__, broke.value.message, broke.value.body),
        retried.choices[0].message.content,
    ]


async def test_openai_chat_5xx_a_broken_stream_and_a_retry_through_the_proxy(tmp_path: Path) -> None:
    script = [
        {"status": 500},
        {"text": "partial answer", "stream_error": {"message": "Overloaded", "type": "server_error"}},
        {"status": 503},
        {"text": "finally"},
    ]
    async with FakeOpenAIServer(script, api_key=KEY) as direct:
        expected = await _gpt_failures(direct.base_url)
    async with FakeOpenAIServer(script, api_key=KEY) as upstream:
        root = upstream.base_url.removesuffix("/v1")
        async with running_proxy(tmp_path / "s.db", f"openai={root}") as proxy:
            got = await _gpt_failures(proxy.url + "/v1")
    assert got == expected
    assert expected[1][0] == "partial answer" and expected[2] == "finally"
    branches = await recorded(tmp_path / "s.db")
    assert [
        [(c.status, c.error_type, c.params["_upstream"]["status"]) for c in b.calls()] for b in branches
    ] == [
        [("error", "HTTP 500", 500)],
        [("error", "StreamFault", 200)],
        [("error", "HTTP 503", 503), ("ok", None, 200)],
    ]
    chunks = await events_of(tmp_path / "s.db", f"run-{branches[1].calls()[0].run_id}")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == "partial answer"
    assert transcript(branches[2]) == [("Instruction", "r"), ("AssistantResponse", "finally")]


async def _gemini_failures(base: str) -> list[Any]:
    out: list[Any] = []
    async with gemini(base).aio as aio:
        for prompt in ("a", "b"):
            with pytest.raises(genai.errors.APIError) as failed:
                await aio.models.generate_content(model="gemini-2.5-flash", contents=prompt)
            out.append((type(failed.value).__name__, failed.value.code, failed.value.details))
        texts = []
        with pytest.raises(Exception) as broke:
            async for c in await aio.models.generate_content_stream(model="gemini-2.5-flash", contents="s"):
                texts.append(c.text or "")
        out.append(("".join(texts), type(broke.value).__name__, _scrubbed(str(broke.value))))
    retry = genai_types.HttpRetryOptions(attempts=2, initial_delay=0.05)
    options = genai_types.HttpOptions(base_url=base, retry_options=retry)
    async with genai.Client(api_key=KEY, http_options=options).aio as aio:
        out.append((await aio.models.generate_content(model="gemini-2.5-flash", contents="r")).text)
    return out


async def test_gemini_4xx_5xx_a_broken_stream_and_a_retry_through_the_proxy(tmp_path: Path) -> None:
    script = [
        {"status": 400},
        {"status": 500},
        {"text": "partial answer", "stream_error": {"message": "Overloaded"}},
        {"status": 503},
        {"text": "finally"},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as direct:
        expected = await _gemini_failures(deterministic(direct).base_url)
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(tmp_path / "s.db", deterministic(upstream).base_url) as proxy:
            got = await _gemini_failures(proxy.url)
    assert got == expected
    # the fake's Gemini stream sends its error after the first piece of text
    assert [e[1] for e in expected[:2]] == [400, 500] and expected[2][0] == "partial "
    assert expected[3] == "finally"
    branches = await recorded(tmp_path / "s.db")
    assert [
        [(c.status, c.error_type, c.params["_upstream"]["status"]) for c in b.calls()] for b in branches
    ] == [
        [("error", "HTTP 400", 400)],
        [("error", "HTTP 500", 500)],
        [("error", "StreamFault", 200)],
        [("error", "HTTP 503", 503), ("ok", None, 200)],
    ]
    chunks = await events_of(tmp_path / "s.db", f"run-{branches[2].calls()[0].run_id}")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == "partial "
    assert transcript(branches[3]) == [("Instruction", "r"), ("AssistantResponse", "finally")]
