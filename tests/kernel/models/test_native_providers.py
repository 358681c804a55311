"""The Anthropic Messages and Gemini API providers against the loopback fake upstream, through verbs."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from turnlog.analytics import AnalyticsProjection, Price, PriceTable, build_traces
from turnlog.eventstore import EventStore, NewEvent, open_store
from turnlog.kernel import Branch, execute_replay, iModel
from turnlog.kernel.models import (
    AnthropicModel,
    AuthenticationError,
    GeminiAPIModel,
    ModelRequest,
    ProviderConnectionError,
    RateLimitError,
    RetryPolicy,
    ServerError,
)
from turnlog.projections import ModelCalled, RunEnded, Usage, catalogue_upcasters, decode_event
from turnlog.testing import FakeUpstreamServer

KEY = "sk-native-provider-test-0123456789"
FAST = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0)
PROVIDERS = {"anthropic": "claude-sonnet-4-5", "gemini_api": "gemini-2.5-flash"}


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with open_store(f"sqlite:///{tmp_path / 'native.db'}", upcasters=catalogue_upcasters()) as s:
        yield s


def model(provider: str, server: FakeUpstreamServer, **kw: Any) -> iModel:
    kw.setdefault("retry", FAST)
    return iModel(provider=provider, model=PROVIDERS[provider], base_url=server.base_url, api_key=KEY, **kw)


async def calls(branch: Branch) -> list[Any]:
    return [d for e, d in await branch.events() if e.type == "model.called"]


def test_imodel_names_the_native_transports() -> None:
    assert isinstance(iModel("anthropic/claude-sonnet-4-5").backend, AnthropicModel)
    assert isinstance(iModel("gemini_api/gemini-2.5-flash").backend, GeminiAPIModel)
    assert isinstance(iModel("google/gemini-2.5-flash").backend, GeminiAPIModel)
    assert iModel("anthropic/claude-sonnet-4-5").backend.url == "https://api.anthropic.com/v1/messages"
    gemini = iModel("gemini_api/gemini-2.5-flash").backend
    assert (
        gemini.url
        == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )


async def test_keys_come_from_the_environment_variables_users_have(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    async with FakeUpstreamServer([{"text": "a"}, {"text": "b"}], api_key=KEY) as server:
        for provider in PROVIDERS:
            m = iModel(provider=provider, model=PROVIDERS[provider], base_url=server.base_url)
            await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    anthropic, gemini = server.requests
    assert anthropic["credentials"]["x-api-key"]["sha256"] == digest
    assert gemini["credentials"]["x-goog-api-key"]["sha256"] == digest


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_communicate_records_usage_model_and_no_key(
    provider: str, store: EventStore, tmp_path: Path
) -> None:
    script = [
        {
            "text": "Hello from the API.",
            "usage": {"input_tokens": 30, "output_tokens": 5, "cached_tokens": 10},
        }
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, system="Be brief.", chat_model=model(provider, server, temperature=0))
        assert await branch.communicate("hi") == "Hello from the API."
        [request] = server.requests
    [called] = await calls(branch)
    assert (called.provider, called.status, called.stream) == (provider, "ok", False)
    # Anthropic counts cache reads apart from input_tokens; Gemini's promptTokenCount includes them
    assert (called.usage.input_tokens, called.usage.output_tokens) == (
        40 if provider == "anthropic" else 30,
        5,
    )
    assert called.params == {"temperature": 0}
    body = request["body"]
    if provider == "anthropic":
        assert called.endpoint == "v1/messages"
        assert request["headers"]["anthropic-version"] == "2023-06-01"
        assert body["max_tokens"] == 4096 and body["temperature"] == 0
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": body["messages"][0]["content"][0]["text"]}]}
        ]
        assert "Be brief." in body["messages"][0]["content"][0]["text"]
    else:
        assert request["path"].endswith("/models/gemini-2.5-flash:generateContent")
        assert body["generationConfig"] == {"temperature": 0}
        assert (
            body["contents"][0]["role"] == "user" and "Be brief." in body["contents"][0]["parts"][0]["text"]
        )
    await store.close()
    for path in tmp_path.glob("native.db*"):
        assert KEY.encode() not in path.read_bytes()


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_streaming_records_chunks_ttft_and_the_same_answer(provider: str, store: EventStore) -> None:
    script = [{"text": "one two three", "thinking": "let me think", "times": 2}]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model(provider, server))
        plain = await branch.communicate("count")
        streamed = await branch.communicate("count", stream=True)
        assert "stream" in server.requests[1]["path"] or server.requests[1]["body"].get("stream") is True
    assert plain == streamed == "one two three"
    first, second = await calls(branch)
    assert (first.stream, second.stream) == (False, True)
    assert second.ttft_ms is not None and 0 < second.ttft_ms <= second.latency_ms
    assert second.usage.output_tokens == first.usage.output_tokens  # the inputs differ: one more turn
    chunks = [e.data async for e in store.read_stream(f"run-{second.call_id}")]
    kinds = [c["type"] for c in chunks]
    assert "thinking" in kinds and kinds[-1] == "result"
    assert "".join(c["content"] for c in chunks if c["type"] == "text") == "one two three"
    assert "".join(c["content"] for c in chunks if c["type"] == "thinking") == "let me think"


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_tool_turn_goes_back_in_the_api_s_own_form(
    provider: str, stream: bool, store: EventStore
) -> None:
    script = [
        {
            "match": {"after_tool_result": False},
            "tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}}],
        },
        {"match": {"after_tool_result": True}, "text": "It is 42."},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model(provider, server), tools=[add])
        result = await branch.operate(instruction="What is 20 + 22?", actions=True, stream=stream)
        assert [r.output for r in result.action_responses] == [42]
        assert await branch.communicate("So?") == "It is 42."
        first, second = (r["body"] for r in server.requests)
    [call] = next(m for m in branch.messages if m.role == "assistant").metadata["tool_calls"]
    if provider == "anthropic":
        assert first["tools"][0]["name"] == "add" and "input_schema" in first["tools"][0]
        roles = [m["role"] for m in second["messages"]]
        assert roles == ["user", "assistant", "user"]
        use = second["messages"][1]["content"]
        assert use == [{"type": "tool_use", "id": call["id"], "name": "add", "input": {"a": 20, "b": 22}}]
        result_block, text_block = second["messages"][2]["content"]
        assert result_block == {"type": "tool_result", "tool_use_id": call["id"], "content": "42"}
        assert text_block["type"] == "text" and "So?" in text_block["text"]
    else:
        assert first["tools"][0]["functionDeclarations"][0]["name"] == "add"
        roles = [c["role"] for c in second["contents"]]
        assert roles == ["user", "model", "user"]
        [function_call] = second["contents"][1]["parts"]
        assert function_call["functionCall"]["name"] == "add"
        assert function_call["functionCall"]["args"] == {"a": 20, "b": 22}
        response, text = second["contents"][2]["parts"]
        assert response["functionResponse"]["name"] == "add"
        assert response["functionResponse"]["response"] == {"output": 42}
        assert "So?" in text["text"]


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_errors_are_classified_and_retried(provider: str) -> None:
    script = [
        {"status": 429, "retry_after": 0.01},
        {"status": 500},
        {"text": "finally"},
        {"status": 500, "times": None},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        m = model(provider, server)
        reply = await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        assert (reply.text, reply.attempts) == ("finally", 3)
        with pytest.raises(ServerError) as caught:
            await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
    assert caught.value.attempts == 3
    assert "HTTP 500" in str(caught.value)


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_a_wrong_key_is_an_authentication_error(provider: str) -> None:
    async with FakeUpstreamServer([{"text": "never"}], api_key="sk-the-right-one") as server:
        with pytest.raises(AuthenticationError) as caught:
            await model(provider, server).invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
    assert caught.value.attempts == 1 and KEY not in str(caught.value)


async def test_an_overloaded_anthropic_answer_is_retried_then_a_server_error() -> None:
    async with FakeUpstreamServer([{"status": 529, "times": None}], api_key=KEY) as server:
        with pytest.raises(ServerError) as caught:
            await model("anthropic", server).invoke(
                ModelRequest(messages=[{"role": "user", "content": "hi"}])
            )
    assert caught.value.status_code == 529 and caught.value.attempts == 3


async def test_a_rate_limited_gemini_answer_is_a_rate_limit_error() -> None:
    async with FakeUpstreamServer([{"status": 429}], api_key=KEY) as server:
        m = model("gemini_api", server, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(RateLimitError):
            await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))


@pytest.mark.parametrize("provider", list(PROVIDERS))
async def test_a_stream_cut_mid_way_is_an_error_not_a_short_answer(provider: str) -> None:
    async with FakeUpstreamServer(
        [{"text": "a long answer that never ends", "cut_after": 3}], api_key=KEY
    ) as server:
        request = ModelRequest(messages=[{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(ProviderConnectionError):
            await model(provider, server).invoke(request)


THINKING = {"thinking": {"type": "enabled", "budget_tokens": 2048}}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_anthropic_thinking_goes_back_signed_through_a_tool_loop(
    stream: bool, store: EventStore
) -> None:
    """With thinking on, the follow-up starts the assistant turn with its signed thinking block.

    The fake refuses the follow-up otherwise (400, as the real API does), so the loop fails.
    """
    script = [
        {
            "match": {"after_tool_result": False},
            "thinking": "I should add.",
            "tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}}],
        },
        {"match": {"after_tool_result": True}, "text": "It is 42."},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model("anthropic", server, **THINKING), tools=[add])
        result = await branch.operate(instruction="What is 20 + 22?", actions=True, stream=stream)
        assert [r.output for r in result.action_responses] == [42]
        assert await branch.communicate("So?") == "It is 42."
        _, second = server.requests
    assert "refused" not in second
    answer = next(m for m in branch.messages if m.role == "assistant")
    [block] = answer.metadata["thinking_blocks"]
    assert block["type"] == "thinking" and block["signature"].startswith("sig_fake")
    sent = second["body"]["messages"][1]["content"]
    assert sent[0] == block and sent[1]["type"] == "tool_use"
    assert answer.metadata["tool_calls"][0]["id"] == sent[1]["id"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_gemini_3_thought_signatures_go_back_through_a_tool_loop(
    stream: bool, store: EventStore
) -> None:
    """Each functionCall part goes back with its thoughtSignature; the fake refuses it otherwise."""
    script = [
        {
            "match": {"after_tool_result": False},
            "tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}}],
        },
        {"match": {"after_tool_result": True}, "text": "It is 42."},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        chat_model = iModel(
            provider="gemini_api",
            model="gemini-3-pro-preview",
            base_url=server.base_url,
            api_key=KEY,
            retry=FAST,
        )
        branch = Branch(store=store, chat_model=chat_model, tools=[add])
        result = await branch.operate(instruction="What is 20 + 22?", actions=True, stream=stream)
        assert [r.output for r in result.action_responses] == [42]
        assert await branch.communicate("So?") == "It is 42."
        first, second = server.requests
    assert "refused" not in second and "thoughtSignature" not in str(first["body"])
    [call] = next(m for m in branch.messages if m.role == "assistant").metadata["tool_calls"]
    assert call["signature"]
    [part] = second["body"]["contents"][1]["parts"]
    assert part["thoughtSignature"] == call["signature"]


async def test_the_strict_fakes_refuse_a_tool_loop_that_lost_its_signatures() -> None:
    """Without the signed parts the same follow-ups are refused: the checks above can fail."""
    lost_thinking = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        **THINKING,
        "messages": [
            {"role": "user", "content": "What is 20 + 22?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
        ],
    }
    lost_signature = {
        "contents": [
            {"role": "user", "parts": [{"text": "What is 20 + 22?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "add", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "add", "response": {"output": 42}}}]},
        ]
    }
    async with FakeUpstreamServer([{"text": "never", "times": None}], api_key=KEY) as server:
        anthropic = AnthropicModel("claude-sonnet-4-5", base_url=server.base_url, api_key=KEY, retry=FAST)
        gemini = GeminiAPIModel("gemini-3-pro-preview", base_url=server.base_url, api_key=KEY, retry=FAST)
        async with httpx.AsyncClient() as client:
            refused = await client.post(
                anthropic.url,
                json=lost_thinking,
                headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            )
            unsigned = await client.post(gemini.url, json=lost_signature, headers={"x-goog-api-key": KEY})
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert (
        "Expected `thinking` or `redacted_thinking`, but found `tool_use`"
        in refused.json()["error"]["message"]
    )
    assert unsigned.status_code == 400
    assert unsigned.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "missing a thought_signature" in unsigned.json()["error"]["message"]


@pytest.mark.parametrize(("provider", "quiet_frames"), [("anthropic", 1), ("gemini_api", 0)])
async def test_an_error_event_before_any_output_is_retried_after_output_it_is_not(
    provider: str, quiet_frames: int
) -> None:
    """Nothing reached the caller before the error: the call is tried again; after text it fails."""
    overloaded = {
        "type": "overloaded_error" if provider == "anthropic" else "UNAVAILABLE",
        "message": "Overloaded",
    }
    script = [
        {"text": "lost", "stream_error": overloaded, "cut_after": quiet_frames},
        {"text": "fine"},
        {
            "text": "a longer answer in many pieces",
            "chunk_chars": 4,
            "stream_error": overloaded,
            "cut_after": 6,
        },
    ]
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], stream=True)
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        m = model(provider, server)
        reply = await m.invoke(request)
        assert (reply.text, reply.attempts) == ("fine", 2)
        with pytest.raises(ServerError) as caught:
            await m.invoke(request)
    assert caught.value.attempts == 1 and caught.value.status_code == 200
    assert "Overloaded" in str(caught.value)


def broken(a: int) -> int:
    """Fail always."""
    raise RuntimeError(f"no luck with {a}")


async def test_a_failed_tool_goes_back_to_anthropic_as_an_error_result(store: EventStore) -> None:
    script = [
        {"match": {"after_tool_result": False}, "tool_calls": [{"name": "broken", "arguments": {"a": 1}}]},
        {"match": {"after_tool_result": True}, "text": "It failed."},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model("anthropic", server), tools=[broken])
        await branch.operate(instruction="Try it.", actions=True)
        await branch.communicate("So?")
        _, second = server.requests
    result = second["body"]["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert "no luck with 1" in result["content"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_price_of_a_cached_anthropic_call(stream: bool) -> None:
    """Cache reads and writes are reported apart and priced at their own prices."""
    usage = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cached_tokens": 600,
        "cache_creation_input_tokens": 300,
    }
    async with FakeUpstreamServer([{"text": "cached", "usage": usage}], api_key=KEY) as server:
        m = AnthropicModel("claude-opus-4-5", base_url=server.base_url, api_key=KEY, retry=FAST)
        reply = await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}], stream=stream))
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 10)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (600, 300)
    cost = PriceTable().cost(
        reply.model,
        reply.usage.input_tokens,
        reply.usage.output_tokens,
        cache_read_tokens=reply.cache_read_tokens,
        cache_write_tokens=reply.cache_write_tokens,
    )
    # claude-opus-4-5: $5 input, $0.50 cache read, $6.25 cache write, $25 output per million
    assert cost == pytest.approx((100 * 5 + 600 * 0.5 + 300 * 6.25 + 10 * 25) / 1e6)
    full = PriceTable().cost("claude-opus-4-5", 1000, 10)
    assert cost is not None and full is not None and cost < full


async def test_gemini_reports_its_cached_tokens() -> None:
    usage = {"input_tokens": 100, "output_tokens": 10, "cached_tokens": 60}
    async with FakeUpstreamServer([{"text": "cached", "usage": usage}], api_key=KEY) as server:
        m = GeminiAPIModel("gemini-2.5-flash", base_url=server.base_url, api_key=KEY, retry=FAST)
        reply = await m.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (60, None)


@pytest.mark.parametrize("provider", ["anthropic", "gemini_api"])
async def test_a_signed_tool_loop_replays_request_for_request(provider: str, store: EventStore) -> None:
    """Replay sends the recorded thinking blocks and signatures back too: every fingerprint matches."""
    script = [
        {
            "match": {"after_tool_result": False},
            "thinking": "I should add.",
            "tool_calls": [{"name": "add", "arguments": {"a": 20, "b": 22}}],
        },
        {"match": {"after_tool_result": True}, "text": "It is 42.", "times": None},
    ]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        if provider == "anthropic":
            chat_model = model("anthropic", server, **THINKING)
        else:
            chat_model = iModel(
                provider="gemini_api", model="gemini-3-pro-preview", base_url=server.base_url, api_key=KEY
            )
        branch = Branch(store=store, chat_model=chat_model, tools=[add])
        await branch.operate(instruction="What is 20 + 22?", actions=True)
        assert await branch.communicate("So?") == "It is 42."
    [answer] = [m for m in branch.messages if m.role == "assistant" and m.metadata.get("tool_calls")]
    signed = answer.metadata.get("thinking_blocks") or answer.metadata["tool_calls"][0].get("signature")
    assert signed
    report = await execute_replay(store, branch.id)
    assert report.ok, (report.divergence, report.final_mismatch)
    assert report.calls_replayed == 2


class Capital(BaseModel):
    city: str


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_structured_output_on_anthropic_comes_back_through_the_response_tool(
    stream: bool, store: EventStore
) -> None:
    script = [{"tool_calls": [{"name": "turnlog_response", "arguments": {"city": "Paris"}}]}]
    async with FakeUpstreamServer(script, api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model("anthropic", server))
        wire = {
            "type": "json_schema",
            "json_schema": {"name": "Capital", "schema": Capital.model_json_schema()},
        }
        answer = await branch.communicate("Capital of France?", response_format=wire, stream=stream)
        [request] = server.requests
    assert answer == {"city": "Paris"}
    body = request["body"]
    assert body["tool_choice"] == {"type": "tool", "name": "turnlog_response"}
    assert body["tools"][0]["input_schema"]["properties"] == {"city": {"title": "City", "type": "string"}}
    [reply] = [m for m in branch.messages if m.role == "assistant"]
    assert "tool_calls" not in reply.metadata


async def test_a_cached_anthropic_call_is_recorded_priced_and_traced_with_its_cache_counts(
    store: EventStore, tmp_path: Path
) -> None:
    """Cache reads and writes go from the answer to model.called, run.ended, the facts, the spans.

    The call is charged at the cache prices of its day, and a re-price of the stored facts (the
    price table changed) charges it as a fresh build does.
    """
    usage = {
        "input_tokens": 30,
        "output_tokens": 5,
        "cached_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    async with FakeUpstreamServer([{"text": "cached", "usage": usage}], api_key=KEY) as server:
        branch = Branch(store=store, chat_model=model("anthropic", server))
        assert await branch.communicate("hi") == "cached"
    expected = Usage(1230, 5, cache_read_tokens=1000, cache_write_tokens=200)
    [called] = await calls(branch)
    assert called.usage == expected
    [ended] = [d for e, d in await branch.events() if e.type == "run.ended"]
    assert ended.usage == expected
    # claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write, $15 output per million
    cost = (30 * 3 + 1000 * 0.30 + 200 * 3.75 + 5 * 15) / 1e6
    async with AnalyticsProjection(store, database=tmp_path / "a.db") as analytics:
        await analytics.update()
        [row] = await analytics.usage("model")
        [run] = await analytics.run_usage("verb")
    assert (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens) == (1230, 1000, 200)
    assert row.cost_usd == pytest.approx(cost) and row.unpriced_calls == 0
    assert (run.cache_read_tokens, run.cache_write_tokens) == (1000, 200)
    assert run.cost_usd == pytest.approx(cost)
    # Re-priced at other prices, then back: the same figures as the first build.
    other = PriceTable({"claude-sonnet-4-5": Price(1.0, 1.0, cache_read=0.1, cache_write=2.0)})
    async with AnalyticsProjection(store, prices=other, database=tmp_path / "a.db") as analytics:
        await analytics.update()
        [row] = await analytics.usage("model")
        [run] = await analytics.run_usage("verb")
    repriced = (30 * 1.0 + 1000 * 0.1 + 200 * 2.0 + 5 * 1.0) / 1e6
    assert (row.cost_usd, run.cost_usd) == (pytest.approx(repriced), pytest.approx(repriced))
    async with AnalyticsProjection(store, database=tmp_path / "a.db") as analytics:
        await analytics.update()
        [row] = await analytics.usage("model")
    assert row.cost_usd == pytest.approx(cost)
    traces = build_traces([e async for e in store.read_all()])
    spans = [s for t in traces for s in t.spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [
        (
            s.attributes["gen_ai.usage.cache_read.input_tokens"],
            s.attributes["gen_ai.usage.cache_creation.input_tokens"],
        )
        for s in spans
    ] == [(1000, 200)]


async def test_usage_recorded_before_the_cache_counts_still_reads(store: EventStore, tmp_path: Path) -> None:
    """A schema-1 model.called / run.ended (no cache counts) decodes, folds and is priced as before."""
    call = {
        "call_id": "c1", "provider": "anthropic", "model": "claude-sonnet-4-5", "endpoint": "v1/messages",
        "run_id": "r1", "fingerprint": "f" * 64, "usage": {"input_tokens": 100, "output_tokens": 10,
        "cost_usd": None}, "latency_ms": 12.0, "status": "ok",
    }  # fmt: skip
    started = {"run_id": "r1", "verb": "chat", "model": "claude-sonnet-4-5"}
    ended = {"run_id": "r1", "verb": "chat", "duration_ms": 20.0, "usage": call["usage"]}
    await store.append(
        "branch-old",
        [
            NewEvent("branch.created", {"branch_id": "old", "name": "old"}),
            NewEvent("run.started", started),
            NewEvent("model.called", call, schema=1),
            NewEvent("run.ended", ended, schema=1),
        ],
    )
    recorded = [e async for e in store.read_all()]
    assert [e.schema for e in recorded[2:]] == [ModelCalled.schema_version, RunEnded.schema_version] == [3, 2]
    decoded = decode_event(recorded[2])
    assert isinstance(decoded, ModelCalled) and decoded.usage == Usage(100, 10)
    assert decoded.usage.cache_read_tokens is None and decoded.usage.cache_write_tokens is None
    async with open_store(f"sqlite:///{tmp_path / 'native.db'}") as plain:  # no upcasters: lifted on decode
        [old_call] = [e async for e in plain.read_all() if e.type == "model.called"]
        assert old_call.schema == 1 and decode_event(old_call).usage == Usage(100, 10)
    async with AnalyticsProjection(store, database=tmp_path / "old.db") as analytics:
        await analytics.update()
        [row] = await analytics.usage("model")
    assert (row.cache_read_tokens, row.cache_write_tokens) == (0, 0)
    assert row.cost_usd == pytest.approx((100 * 3 + 10 * 15) / 1e6)


async def test_gemini_waits_the_retry_delay_its_quota_error_names() -> None:
    """Gemini names the wait in the body's RetryInfo only (no retry-after header): it is honoured,
    and one longer than ``max_retry_after`` is surfaced at once instead of retried sooner."""
    # A backoff of a minute: a retry that came sooner waited the RetryInfo delay.
    slow = RetryPolicy(max_attempts=2, initial_delay=60.0, jitter=0.0, max_retry_after=5.0)
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    async with FakeUpstreamServer(
        [{"status": 429, "retry_after": 0.3}, {"text": "after"}], api_key=KEY
    ) as server:
        m = GeminiAPIModel("gemini-2.5-flash", base_url=server.base_url, api_key=KEY, retry=slow)
        began = time.monotonic()
        with anyio.fail_after(30):
            reply = await m.invoke(request)
        waited = time.monotonic() - began
    assert (reply.text, reply.attempts) == ("after", 2)
    assert waited >= 0.3  # a lower bound only: the machine may be slow, never fast
    async with FakeUpstreamServer(
        [{"status": 429, "retry_after": 300}, {"text": "never"}], api_key=KEY
    ) as server:
        m = GeminiAPIModel("gemini-2.5-flash", base_url=server.base_url, api_key=KEY, retry=slow)
        with anyio.fail_after(30), pytest.raises(RateLimitError) as caught:
            await m.invoke(request)
        assert len(server.requests) == 1
    assert (caught.value.retry_after, caught.value.attempts) == (300.0, 1)
