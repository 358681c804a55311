"""``turnlog proxy --replay``: a script recorded through the proxy runs again offline, identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from turnlog.testing import FakeOpenAIServer, FakeUpstreamServer

from .proxykit import recorded, running_proxy

KEY = "sk-proxy-replay-0123456789abcdef"
CLOSED = "http://127.0.0.1:9"  # nothing listens there: a replay that went upstream would fail
HEADERS = {"x-api-key": KEY, "x-goog-api-key": KEY, "anthropic-version": "2023-06-01"}
CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 30}
GEMINI_STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


async def agent(base: str, prompt: str = "hi") -> list[Any]:
    """A small agent script: SDK calls plain and streamed, and raw requests whose bytes are kept."""
    out: list[Any] = []
    async with anthropic.AsyncAnthropic(api_key=KEY, base_url=base, max_retries=0) as sdk:
        message = await sdk.messages.create(**CLAUDE, messages=[{"role": "user", "content": prompt}])
        out.append(message.model_dump())
        async with sdk.messages.stream(**CLAUDE, messages=[{"role": "user", "content": f"{prompt}!"}]) as s:
            out.append([t async for t in s.text_stream])
    async with httpx.AsyncClient(base_url=base, headers=HEADERS) as client:
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
        answer = await client.post(GEMINI_STREAM, json=body)
        out.append((answer.status_code, answer.headers["content-type"], answer.content))
    return out


async def test_a_recorded_script_replays_offline_with_identical_answers(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    script = [
        {"text": "First answer."},
        {"text": "A streamed second answer."},
        {"text": "Gemini streams too."},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            live = await agent(proxy.url)
    async with running_proxy(store, CLOSED, extra=("--replay",)) as proxy:
        again = await agent(proxy.url)
        twice = await agent(proxy.url)
    assert again == live == twice
    assert live[2][2].startswith(b"data: ") and b"Gemini" in live[2][2]  # SSE bytes, byte for byte
    assert len(await recorded(store)) == 3  # replaying records nothing


async def test_a_changed_prompt_is_the_documented_miss_and_record_missing_fills_it(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeOpenAIServer([{"text": "Recorded."}, {"text": "Filled in."}], api_key=KEY) as upstream:
        root = upstream.base_url.removesuffix("/v1")
        async with running_proxy(store, f"openai={root}") as proxy:
            async with openai.AsyncOpenAI(api_key=KEY, base_url=f"{proxy.url}/v1", max_retries=0) as sdk:
                first = await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}]
                )
        async with running_proxy(store, f"openai={root}", extra=("--replay", "--pace", "recorded")) as proxy:
            async with openai.AsyncOpenAI(
                api_key="sk-another-key-entirely", base_url=f"{proxy.url}/v1", max_retries=0
            ) as sdk:
                same = await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}]
                )
                with pytest.raises(openai.NotFoundError) as miss:
                    await sdk.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "b"}]
                    )
        async with running_proxy(store, f"openai={root}", extra=("--replay", "--record-missing")) as proxy:
            async with openai.AsyncOpenAI(api_key=KEY, base_url=f"{proxy.url}/v1", max_retries=0) as sdk:
                filled = await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "b"}]
                )
                replayed = await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "a"}]
                )
        assert len(upstream.requests) == 2
    assert same.model_dump() == first.model_dump() == replayed.model_dump()
    assert miss.value.status_code == 404
    assert "no recorded call matches this request" in miss.value.message
    assert miss.value.body["code"] == "not_found_error"
    assert filled.choices[0].message.content == "Filled in."
    assert len(await recorded(store)) == 2
