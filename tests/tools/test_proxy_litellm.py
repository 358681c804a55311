"""``turnlog proxy`` in front of the LiteLLM proxy, itself in front of the loopback fake upstream.

The official openai and anthropic SDKs get the same answers through ``turnlog proxy`` as
straight from LiteLLM, plain and streamed, and each call is recorded on the branch its base URL
names. LiteLLM serves both ``/v1/chat/completions`` (translated to Anthropic Messages for the
fake) and ``/v1/messages``.

LiteLLM lives in a venv of its own (``benchmarks/_litellm.py``); without it the tests skip
with the reason, and with ``TURNLOG_REQUIRE_LITELLM=1`` (set by ``.ci/run``) they fail. It
starts slowly, so one server serves the whole module (one xdist worker runs them all).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal

from benchmarks._litellm import MASTER_KEY, MODEL, find_litellm, running_litellm
from turnlog.testing import FakeUpstreamServer, UpstreamThread

from .proxykit import events_of, recorded, running_proxy, transcript

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

pytestmark = pytest.mark.xdist_group("litellm")

ANSWER = "Recorded through two proxies."
HI = [{"role": "user", "content": "hi"}]
#: A prompt the fake upstream behind LiteLLM answers with 529 (overloaded).
OVERLOADED = "the upstream is overloaded"


@pytest.fixture(scope="module")
def litellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The LiteLLM proxy in front of a fake Anthropic upstream; yields its base URL."""
    program = find_litellm()
    if program is None or not program.exists():
        if os.environ.get("TURNLOG_REQUIRE_LITELLM") == "1":
            pytest.fail("TURNLOG_REQUIRE_LITELLM=1 but no litellm program (set TURNLOG_LITELLM)")
        pytest.skip("the LiteLLM proxy is not installed (see benchmarks/_litellm.py; TURNLOG_LITELLM)")
    overloaded = {"status": 529, "times": None, "match": {"last_user_contains": OVERLOADED}}
    fake = FakeUpstreamServer([overloaded, {"text": ANSWER, "times": None}])
    workdir = tmp_path_factory.mktemp("litellm")
    with UpstreamThread(fake) as upstream, start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(running_litellm(program, upstream.base_url, workdir)) as base:
            yield base


def _gpt(base_url: str) -> Any:
    return openai.AsyncOpenAI(api_key=MASTER_KEY, base_url=base_url, max_retries=0)


def _claude(base_url: str) -> Any:
    return anthropic.AsyncAnthropic(api_key=MASTER_KEY, base_url=base_url, max_retries=0)


async def _openai_calls(base_url: str) -> list[Any]:
    """A plain call, then a streamed one that continues the same conversation."""
    async with _gpt(base_url) as client:
        plain = await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=50)
        answer = plain.choices[0].message.content
        follow = [*HI, {"role": "assistant", "content": answer}, {"role": "user", "content": "again"}]
        stream = await client.chat.completions.create(
            model=MODEL, messages=follow, max_tokens=50, stream=True, stream_options={"include_usage": True}
        )
        texts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    return [(answer, plain.choices[0].finish_reason, plain.usage.completion_tokens), "".join(texts)]


async def _anthropic_calls(base_url: str) -> list[Any]:
    async with _claude(base_url) as client:
        plain = await client.messages.create(model=MODEL, max_tokens=50, messages=HI)
        said = plain.content[0].text
        follow = [*HI, {"role": "assistant", "content": said}, {"role": "user", "content": "again"}]
        async with client.messages.stream(model=MODEL, max_tokens=50, messages=follow) as stream:
            texts = [t async for t in stream.text_stream]
            final = await stream.get_final_message()
    return [
        (plain.content[0].text, plain.stop_reason, plain.usage.output_tokens),
        ("".join(texts), final.stop_reason, final.usage.output_tokens),
    ]


def _one_branch(branches: list[Any], name: str) -> Any:
    named = [b for b in branches if b.branch.name == name]
    assert len(named) == 1, [b.branch.name for b in branches]
    return named[0]


async def test_openai_sdk_through_turnlog_proxy_to_litellm(litellm: str, tmp_path: Path) -> None:
    expected = await _openai_calls(f"{litellm}/v1")
    assert expected == [(ANSWER, "stop", expected[0][2]), ANSWER]
    async with running_proxy(tmp_path / "s.db", f"openai={litellm}") as proxy:
        got = await _openai_calls(f"{proxy.url}/b/via-litellm/v1")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "via-litellm")
    assert transcript(branch) == [
        ("Instruction", "hi"),
        ("AssistantResponse", ANSWER),
        ("Instruction", "again"),
        ("AssistantResponse", ANSWER),
    ]
    calls = branch.calls()
    assert [(c.provider, c.model, c.status, c.stream) for c in calls] == [
        ("openai", MODEL, "ok", False),
        ("openai", MODEL, "ok", True),
    ]
    assert all(c.usage.output_tokens for c in calls)
    chunks = await events_of(tmp_path / "s.db", f"run-{calls[1].run_id}")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == ANSWER
    # LiteLLM's own headers are not among those recorded; the master key never is
    assert MASTER_KEY not in (tmp_path / "s.db").read_bytes().decode("latin-1")


async def test_anthropic_sdk_through_turnlog_proxy_to_litellm(litellm: str, tmp_path: Path) -> None:
    expected = await _anthropic_calls(litellm)
    assert [e[0] for e in expected] == [ANSWER, ANSWER]
    async with running_proxy(tmp_path / "s.db", f"anthropic={litellm}") as proxy:
        got = await _anthropic_calls(f"{proxy.url}/b/claude-via-litellm")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "claude-via-litellm")
    assert transcript(branch) == [
        ("Instruction", "hi"),
        ("AssistantResponse", ANSWER),
        ("Instruction", "again"),
        ("AssistantResponse", ANSWER),
    ]
    calls = branch.calls()
    assert [(c.provider, c.status, c.stream) for c in calls] == [
        ("anthropic", "ok", False),
        ("anthropic", "ok", True),
    ]
    chunks = await events_of(tmp_path / "s.db", f"run-{calls[1].run_id}")
    assert chunks[0].data["metadata"]["sse"].startswith("event: message_start")
    assert MASTER_KEY not in (tmp_path / "s.db").read_bytes().decode("latin-1")


async def _refusals(base: str) -> list[tuple[int, bytes]]:
    """LiteLLM's own 4xx (a key it does not know) and its 5xx (the upstream behind it fails)."""
    ask = {"model": MODEL, "max_tokens": 50}
    overloaded = [{"role": "user", "content": OVERLOADED}]
    got = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for key, messages in (("sk-not-a-litellm-key-0123", HI), (MASTER_KEY, overloaded)):
            headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
            answer = await client.post("/v1/messages", json={**ask, "messages": messages}, headers=headers)
            # the fake upstream numbers its request ids: the one thing that differs between two runs
            got.append((answer.status_code, re.sub(rb"req_fake[0-9]+", b"req_fake", answer.content)))
    return got


async def test_litellm_errors_reach_the_client_unchanged_and_are_recorded_failed(
    litellm: str, tmp_path: Path
) -> None:
    expected = await _refusals(litellm)
    assert expected[0][0] in (400, 401) and expected[1][0] >= 500
    async with running_proxy(tmp_path / "s.db", f"anthropic={litellm}") as proxy:
        got = await _refusals(f"{proxy.url}/b/refused")
    assert got == expected
    # the second conversation differs from the first: a fork of the named branch
    calls = [c for b in await recorded(tmp_path / "s.db") for c in b.calls()]
    assert sorted((c.status, c.error_type, c.params["_upstream"]["status"]) for c in calls) == [
        ("error", f"HTTP {status}", status) for status, _ in expected
    ]
    assert all(c.error_message for c in calls)
    assert MASTER_KEY not in (tmp_path / "s.db").read_bytes().decode("latin-1")
