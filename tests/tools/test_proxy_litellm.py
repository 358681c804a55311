"""``turnlog proxy`` in front of the LiteLLM proxy, itself in front of the loopback fake upstream.

The official openai, anthropic and google-genai SDKs get the same results through ``turnlog
proxy`` as straight from LiteLLM: plain and streamed, a tool call and its result round,
LiteLLM's 4xx and 5xx, an error inside a stream, and the SDK's own retry after a 5xx; each call
is recorded on the branch its base URL names, with its status. LiteLLM serves
``/v1/chat/completions`` (translated to Anthropic Messages for the fake), ``/v1/messages`` and
Gemini's ``/v1beta/models/M:generateContent`` / ``:streamGenerateContent`` (also translated).
Where LiteLLM reshapes an answer (an in-stream error; an upstream 529 it retried twice becomes
its 500) the expectation is what the SDK gets from LiteLLM directly.

LiteLLM lives in a venv of its own (``benchmarks/_litellm.py``); without it the tests skip
with the reason, and with ``TURNLOG_REQUIRE_LITELLM=1`` (set by ``.ci/run``) they fail. It
starts slowly, so one server serves the whole module (one xdist worker runs them all). Its
retries keep their number but lose their back-off (``RETRY_BACKOFF_OFF``): each 5xx took
about 2.5 s of waiting inside LiteLLM.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal

from benchmarks._litellm import MASTER_KEY, MODEL, RETRY_BACKOFF_OFF, find_litellm, running_litellm
from turnlog.testing import FakeUpstreamServer, UpstreamThread

from .proxykit import events_of, recorded, running_proxy, transcript

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")
from google.genai import types as genai_types  # noqa: E402

pytestmark = pytest.mark.xdist_group("litellm")

ANSWER = "Recorded through two proxies."
HI = [{"role": "user", "content": "hi"}]
#: A prompt the fake upstream behind LiteLLM answers with 529 (overloaded).
OVERLOADED = "the upstream is overloaded"
#: A prompt whose streamed answer breaks off with the API's in-stream error event.
BREAKS = "a stream that breaks"
PARTIAL = "part of it"
#: LiteLLM's router tries each request 1 + 2 times (``openai.DEFAULT_MAX_RETRIES``) before it
#: gives up; a client sees a 5xx only when that many upstream attempts in a row fail.
LITELLM_ATTEMPTS = 3
#: The prompts that fail ``LITELLM_ATTEMPTS`` times, then get ``ANSWER``: one per SDK and side,
#: as the direct and the proxied run each need their own failures.
FLAKY = [f"flaky {sdk} {side}" for sdk in ("openai", "anthropic", "gemini") for side in ("direct", "proxied")]
TOOL_SAYS = "The sum is {tool_result}."

_SCRIPT: list[dict[str, Any]] = [
    {"status": 529, "times": None, "match": {"last_user_contains": OVERLOADED}},
    {
        "text": PARTIAL,
        "times": None,
        "match": {"last_user_contains": BREAKS},
        "stream_error": {"message": "Overloaded", "type": "overloaded_error"},
    },
    *({"status": 529, "times": LITELLM_ATTEMPTS, "match": {"last_user_contains": f}} for f in FLAKY),
    {
        "tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}],
        "times": None,
        "match": {"has_tools": True, "after_tool_result": False},
    },
    {"text": TOOL_SAYS, "template": True, "times": None, "match": {"after_tool_result": True}},
]


@pytest.fixture(scope="module")
def litellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The LiteLLM proxy in front of a fake Anthropic upstream; yields its base URL."""
    program = find_litellm()
    if program is None or not program.exists():
        if os.environ.get("TURNLOG_REQUIRE_LITELLM") == "1":
            pytest.fail("TURNLOG_REQUIRE_LITELLM=1 but no litellm program (set TURNLOG_LITELLM)")
        pytest.skip("the LiteLLM proxy is not installed (see benchmarks/_litellm.py; TURNLOG_LITELLM)")
    fake = FakeUpstreamServer([*_SCRIPT, {"text": ANSWER, "times": None}])
    workdir = tmp_path_factory.mktemp("litellm")
    with UpstreamThread(fake) as upstream, start_blocking_portal() as portal:
        # LiteLLM still retries a failing upstream twice, without waiting between the tries
        running = running_litellm(program, upstream.base_url, workdir, env=RETRY_BACKOFF_OFF)
        with portal.wrap_async_context_manager(running) as base:
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


def _gemini(base_url: str, key: str = MASTER_KEY) -> Any:
    # LiteLLM serves Gemini's API under v1beta only (its GET /v1/models/{id} answers the SDK's
    # default /v1/models/M:generateContent with 405); no retries: a failed attempt is a call too
    options = genai_types.HttpOptions(
        base_url=base_url, api_version="v1beta", retry_options=genai_types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key=key, http_options=options)


async def _gemini_calls(base_url: str) -> list[Any]:
    """Gemini's own API, which LiteLLM serves (``/v1beta/models/M:generateContent``) for any model."""
    async with _gemini(base_url).aio as aio:
        plain = await aio.models.generate_content(model=MODEL, contents="hi")
        follow = [
            genai_types.Content(role="user", parts=[genai_types.Part(text="hi")]),
            plain.candidates[0].content,
            genai_types.Content(role="user", parts=[genai_types.Part(text="again")]),
        ]
        chunks = [c async for c in await aio.models.generate_content_stream(model=MODEL, contents=follow)]
    return [
        (plain.text, plain.candidates[0].finish_reason, plain.usage_metadata.model_dump()),
        [(c.text, c.candidates[0].finish_reason) for c in chunks],
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


async def test_gemini_sdk_through_turnlog_proxy_to_litellm(litellm: str, tmp_path: Path) -> None:
    expected = await _gemini_calls(litellm)
    assert expected[0][0] == ANSWER and "".join(t or "" for t, _ in expected[1]) == ANSWER
    async with running_proxy(tmp_path / "s.db", f"gemini={litellm}") as proxy:
        got = await _gemini_calls(f"{proxy.url}/b/gemini-via-litellm")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "gemini-via-litellm")
    assert transcript(branch) == [
        ("Instruction", "hi"),
        ("AssistantResponse", ANSWER),
        ("Instruction", "again"),
        ("AssistantResponse", ANSWER),
    ]
    assert [(c.provider, c.model, c.status, c.stream) for c in branch.calls()] == [
        ("gemini", MODEL, "ok", False),
        ("gemini", MODEL, "ok", True),
    ]
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


# -- tools: a tool call and the round that answers it --------------------------------------------

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
ADD_OPENAI = {
    "type": "function",
    "function": {"name": "add", "description": "Add.", "parameters": ADD_SCHEMA},
}
ADD_ANTHROPIC = {"name": "add", "description": "Add.", "input_schema": ADD_SCHEMA}
ADD_2_3 = [{"role": "user", "content": "add 2 and 3"}]
TOOL_TRANSCRIPT = [
    ("Instruction", "add 2 and 3"),
    ("ActionRequest", "add"),
    ("ActionResponse", "add"),
    ("AssistantResponse", "The sum is 5."),
]


async def _openai_tool_round(base_url: str) -> list[Any]:
    async with _gpt(base_url) as client:
        first = await client.chat.completions.create(
            model=MODEL, messages=ADD_2_3, tools=[ADD_OPENAI], max_tokens=50
        )
        asked = first.choices[0].message
        call = asked.tool_calls[0]
        result = {"role": "tool", "tool_call_id": call.id, "content": "5"}
        follow = [*ADD_2_3, asked.model_dump(exclude_none=True), result]
        second = await client.chat.completions.create(
            model=MODEL, messages=follow, tools=[ADD_OPENAI], max_tokens=50
        )
    # the call ids are the fake's numbered ones: they differ between two runs
    return [
        (first.choices[0].finish_reason, call.type, call.function.name, json.loads(call.function.arguments)),
        (
            second.choices[0].message.content,
            second.choices[0].finish_reason,
            second.choices[0].message.tool_calls,
        ),
    ]


async def _anthropic_tool_round(base_url: str) -> list[Any]:
    async with _claude(base_url) as client:
        first = await client.messages.create(
            model=MODEL, max_tokens=50, messages=ADD_2_3, tools=[ADD_ANTHROPIC]
        )
        (use,) = [b for b in first.content if b.type == "tool_use"]
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "5"}
        follow = [
            *ADD_2_3,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [result]},
        ]
        second = await client.messages.create(
            model=MODEL, max_tokens=50, messages=follow, tools=[ADD_ANTHROPIC]
        )
    return [
        (
            first.stop_reason,
            [(b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in first.content],
        ),
        (second.stop_reason, [b.model_dump() for b in second.content]),
    ]


async def test_openai_sdk_tool_round_through_turnlog_proxy_to_litellm(litellm: str, tmp_path: Path) -> None:
    expected = await _openai_tool_round(f"{litellm}/v1")
    assert expected == [("tool_calls", "function", "add", {"a": 2, "b": 3}), ("The sum is 5.", "stop", None)]
    async with running_proxy(tmp_path / "s.db", f"openai={litellm}") as proxy:
        got = await _openai_tool_round(f"{proxy.url}/b/gpt-tools/v1")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "gpt-tools")
    assert transcript(branch) == TOOL_TRANSCRIPT
    request, response = (m.content for m in branch.messages[1:3])
    assert (request.arguments, response.output) == ({"a": 2, "b": 3}, "5")
    assert [(c.provider, c.status) for c in branch.calls()] == [("openai", "ok")] * 2


async def test_anthropic_sdk_tool_round_through_turnlog_proxy_to_litellm(
    litellm: str, tmp_path: Path
) -> None:
    expected = await _anthropic_tool_round(litellm)
    assert expected[0] == ("tool_use", [("tool_use", "add", {"a": 2, "b": 3})])
    assert expected[1][1][0]["text"] == "The sum is 5."
    async with running_proxy(tmp_path / "s.db", f"anthropic={litellm}") as proxy:
        got = await _anthropic_tool_round(f"{proxy.url}/b/claude-tools")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "claude-tools")
    assert transcript(branch) == TOOL_TRANSCRIPT
    request, response = (m.content for m in branch.messages[1:3])
    assert (request.arguments, response.output) == ({"a": 2, "b": 3}, "5")
    assert [(c.provider, c.status) for c in branch.calls()] == [("anthropic", "ok")] * 2


# -- an error inside a stream ------------------------------------------------------------------


async def _openai_broken_stream(base_url: str) -> list[Any]:
    texts = []
    async with _gpt(base_url) as client:
        ask = [{"role": "user", "content": BREAKS}]
        stream = await client.chat.completions.create(model=MODEL, messages=ask, max_tokens=50, stream=True)
        with pytest.raises(openai.APIError) as broke:
            async for chunk in stream:
                texts.extend(c.delta.content or "" for c in chunk.choices)
    return ["".join(texts), type(broke.value).__name__, broke.value.message, broke.value.body]


async def _anthropic_broken_stream(base_url: str) -> list[Any]:
    texts = []
    async with _claude(base_url) as client:
        ask = [{"role": "user", "content": BREAKS}]
        with pytest.raises(anthropic.APIStatusError) as broke:
            async with client.messages.stream(model=MODEL, max_tokens=50, messages=ask) as stream:
                async for text in stream.text_stream:
                    texts.append(text)
    # the SDK's message names the request id (numbered by the fake) and the path it asked
    message = re.sub(r"request_id: [^,]*, path: [^,]*, ", "", broke.value.message)
    return ["".join(texts), type(broke.value).__name__, message, broke.value.body]


@pytest.mark.parametrize(
    ("api", "path", "run"),
    [("openai", "/v1", _openai_broken_stream), ("anthropic", "", _anthropic_broken_stream)],
)
async def test_an_error_inside_a_stream_reaches_the_client_as_from_litellm_and_fails_the_call(
    litellm: str, tmp_path: Path, api: str, path: str, run: Any
) -> None:
    expected = await run(f"{litellm}{path}")
    assert expected[0] == PARTIAL
    async with running_proxy(tmp_path / "s.db", f"{api}={litellm}") as proxy:
        got = await run(f"{proxy.url}/b/broken-{api}{path}")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), f"broken-{api}")
    (call,) = branch.calls()
    assert (call.provider, call.status, call.stream) == (api, "error", True)
    assert call.params["_upstream"]["status"] == 200  # the stream had begun: the status was sent
    assert call.error_type == "StreamFault" and "Overloaded" in (call.error_message or "")
    assert [r.status for r in branch.state.runs.values()] == ["failed"]
    chunks = await events_of(tmp_path / "s.db", f"run-{call.run_id}")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == PARTIAL
    assert [c.data["type"] for c in chunks if c.data.get("is_error")] == ["error"]


# -- the SDK's own retries -----------------------------------------------------------------------


async def _openai_retried(base_url: str, prompt: str) -> Any:
    async with openai.AsyncOpenAI(api_key=MASTER_KEY, base_url=base_url, max_retries=1) as client:
        ask = [{"role": "user", "content": prompt}]
        answer = await client.chat.completions.create(model=MODEL, messages=ask, max_tokens=50)
    return (answer.choices[0].message.content, answer.choices[0].finish_reason)


async def _anthropic_retried(base_url: str, prompt: str) -> Any:
    async with anthropic.AsyncAnthropic(api_key=MASTER_KEY, base_url=base_url, max_retries=1) as client:
        answer = await client.messages.create(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": prompt}]
        )
    return (answer.content[0].text, answer.stop_reason)


async def _gemini_retried(base_url: str, prompt: str) -> Any:
    # the SDK retries the 5xx codes it names, 500 among them (what LiteLLM answers here)
    retry = genai_types.HttpRetryOptions(attempts=2, initial_delay=0.1)
    options = genai_types.HttpOptions(base_url=base_url, api_version="v1beta", retry_options=retry)
    async with genai.Client(api_key=MASTER_KEY, http_options=options).aio as aio:
        answer = await aio.models.generate_content(model=MODEL, contents=prompt)
    return (answer.text, answer.candidates[0].finish_reason)


@pytest.mark.parametrize(
    ("api", "path", "run"),
    [
        ("openai", "/v1", _openai_retried),
        ("anthropic", "", _anthropic_retried),
        ("gemini", "", _gemini_retried),
    ],
)
async def test_an_sdk_retry_after_a_5xx_is_two_calls_of_the_branch_and_the_right_answer(
    litellm: str, tmp_path: Path, api: str, path: str, run: Any
) -> None:
    expected = await run(f"{litellm}{path}", f"flaky {api} direct")
    assert expected[0] == ANSWER
    async with running_proxy(tmp_path / "s.db", f"{api}={litellm}") as proxy:
        got = await run(f"{proxy.url}/b/retried-{api}{path}", f"flaky {api} proxied")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), f"retried-{api}")
    assert transcript(branch) == [("Instruction", f"flaky {api} proxied"), ("AssistantResponse", ANSWER)]
    calls = branch.calls()
    assert [(c.provider, c.status) for c in calls] == [(api, "error"), (api, "ok")]
    # LiteLLM answers the upstream 529 it gave up on with 500
    assert [c.params["_upstream"]["status"] for c in calls] == [500, 200]
    assert [r.status for r in branch.state.runs.values()] == ["failed", "ended"]


# -- the SDKs' own view of LiteLLM's 4xx and 5xx -------------------------------------------------

BAD_KEY = "sk-not-a-litellm-key-0123"


def _scrub(body: Any) -> str:
    # the fake upstream numbers its request ids: the one thing that differs between two runs
    return re.sub(r"req_fake[0-9]+", "req_fake", json.dumps(body, sort_keys=True))


async def _openai_refused(base_url: str, key: str, prompt: str) -> Any:
    async with openai.AsyncOpenAI(api_key=key, base_url=f"{base_url}/v1", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            ask = [{"role": "user", "content": prompt}]
            await client.chat.completions.create(model=MODEL, messages=ask, max_tokens=50)
    return (type(refused.value).__name__, refused.value.status_code, _scrub(refused.value.body))


async def _anthropic_refused(base_url: str, key: str, prompt: str) -> Any:
    async with anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError) as refused:
            ask = [{"role": "user", "content": prompt}]
            await client.messages.create(model=MODEL, max_tokens=50, messages=ask)
    return (type(refused.value).__name__, refused.value.status_code, _scrub(refused.value.body))


async def _gemini_refused(base_url: str, key: str, prompt: str) -> Any:
    async with _gemini(base_url, key).aio as aio:
        with pytest.raises(genai.errors.APIError) as refused:
            await aio.models.generate_content(model=MODEL, contents=prompt)
    return (type(refused.value).__name__, refused.value.code, _scrub(refused.value.details))


@pytest.mark.parametrize(
    ("api", "run"),
    [("openai", _openai_refused), ("anthropic", _anthropic_refused), ("gemini", _gemini_refused)],
)
async def test_each_sdk_sees_litellms_4xx_and_5xx_as_from_litellm_and_calls_are_failed(
    litellm: str, tmp_path: Path, api: str, run: Any
) -> None:
    asks = [(BAD_KEY, "hi"), (MASTER_KEY, OVERLOADED)]
    expected = [await run(litellm, key, prompt) for key, prompt in asks]
    assert expected[0][1] in (400, 401) and expected[1][1] >= 500
    async with running_proxy(tmp_path / "s.db", f"{api}={litellm}") as proxy:
        got = [await run(f"{proxy.url}/b/refused-{api}", key, prompt) for key, prompt in asks]
    assert got == expected
    calls = [c for b in await recorded(tmp_path / "s.db") for c in b.calls()]
    assert [(c.provider, c.status, c.params["_upstream"]["status"]) for c in calls] == [
        (api, "error", status) for _, status, _ in expected
    ]
    # the second conversation differs from the first: a fork of the named branch
    named = _one_branch(await recorded(tmp_path / "s.db"), f"refused-{api}")
    assert [c.status for c in named.calls()] == ["error"]


# -- google-genai: tools, an error inside a stream, retries -----------------------------------

ADD_GEMINI = genai_types.Tool(
    function_declarations=[
        genai_types.FunctionDeclaration(name="add", description="Add.", parameters_json_schema=ADD_SCHEMA)
    ]
)


async def _gemini_tool_round(base_url: str) -> list[Any]:
    config = genai_types.GenerateContentConfig(tools=[ADD_GEMINI])
    async with _gemini(base_url).aio as aio:
        ask = genai_types.Content(role="user", parts=[genai_types.Part(text="add 2 and 3")])
        first = await aio.models.generate_content(model=MODEL, contents=[ask], config=config)
        (call,) = first.function_calls or []
        result = genai_types.Part.from_function_response(name="add", response={"result": "5"})
        follow = [ask, first.candidates[0].content, genai_types.Content(role="user", parts=[result])]
        second = await aio.models.generate_content(model=MODEL, contents=follow, config=config)
    return [(call.name, call.args), second.text]


async def _gemini_broken_stream(base_url: str) -> list[Any]:
    texts = []
    async with _gemini(base_url).aio as aio:
        with pytest.raises(Exception) as broke:
            async for chunk in await aio.models.generate_content_stream(model=MODEL, contents=BREAKS):
                texts.append(chunk.text or "")
    return ["".join(texts), type(broke.value).__name__, str(broke.value)]


async def test_gemini_sdk_tool_round_through_turnlog_proxy_to_litellm(litellm: str, tmp_path: Path) -> None:
    expected = await _gemini_tool_round(litellm)
    assert expected[0] == ("add", {"a": 2, "b": 3}) and expected[1].startswith("The sum is ")
    async with running_proxy(tmp_path / "s.db", f"gemini={litellm}") as proxy:
        got = await _gemini_tool_round(f"{proxy.url}/b/gemini-tools")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "gemini-tools")
    assert transcript(branch) == [*TOOL_TRANSCRIPT[:3], ("AssistantResponse", expected[1])]
    assert [(c.provider, c.status) for c in branch.calls()] == [("gemini", "ok")] * 2


async def test_gemini_sdk_error_inside_a_stream_as_from_litellm_and_the_call_failed(
    litellm: str, tmp_path: Path
) -> None:
    expected = await _gemini_broken_stream(litellm)
    # LiteLLM sends the error as data: {"error": {..., "code": "500"}}, whose string code the
    # SDK cannot compare: the client's TypeError is LiteLLM's doing, the same with turnlog between
    assert expected[0] == PARTIAL
    async with running_proxy(tmp_path / "s.db", f"gemini={litellm}") as proxy:
        got = await _gemini_broken_stream(f"{proxy.url}/b/broken-gemini")
    assert got == expected
    branch = _one_branch(await recorded(tmp_path / "s.db"), "broken-gemini")
    (call,) = branch.calls()
    assert (call.provider, call.status, call.stream) == ("gemini", "error", True)
    assert call.error_type == "StreamFault" and "Overloaded" in (call.error_message or "")
    assert [r.status for r in branch.state.runs.values()] == ["failed"]
    chunks = await events_of(tmp_path / "s.db", f"run-{call.run_id}")
    assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == PARTIAL
    assert [c.data["type"] for c in chunks if c.data.get("is_error")] == ["error"]
