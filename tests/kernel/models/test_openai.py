"""OpenAIChatModel against the loopback fake server, over real sockets."""

from __future__ import annotations

import hashlib
import itertools
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.kernel.models import (
    AuthenticationError,
    ContextLengthError,
    MissingAPIKey,
    ModelRequest,
    ModelRequestsBlocked,
    OpenAIChatModel,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeout,
    RateLimitError,
    ResponseFormatError,
    RetryPolicy,
    ServerError,
    ToolCall,
    parse_retry_after,
)
from turnlog.testing import FakeOpenAIServer

KEY = "sk-test-0123456789abcdef-SECRET"
HELLO = ModelRequest(messages=[{"role": "user", "content": "hello there"}], params={"temperature": 0})
FAST = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def streamed(request: ModelRequest) -> ModelRequest:
    return ModelRequest(
        messages=request.messages,
        params=request.params,
        tools=request.tools,
        response_format=request.response_format,
        stream=True,
    )


def client_for(server: FakeOpenAIServer, **kw: Any) -> OpenAIChatModel:
    kw.setdefault("api_key", KEY)
    kw.setdefault("retry", FAST)
    return OpenAIChatModel("gpt-4.1-mini", provider="fake", base_url=server.base_url, **kw)


def walk(error: BaseException) -> Iterator[Any]:
    """Every object reachable from an error that a logger or recorder might print."""
    seen: set[int] = set()
    todo: list[Any] = [error]
    while todo:
        item = todo.pop()
        if id(item) in seen or item is None:
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, BaseException):
            todo += [item.__cause__, item.__context__, *item.args, *vars(item).values()]
            request = getattr(item, "_request", None)
            if request is not None:
                todo.append(dict(request.headers))


def assert_no_key(error: BaseException) -> None:
    for item in walk(error):
        assert KEY not in repr(item)
        assert KEY not in str(item)


# -- plain and streamed answers ---------------------------------------------------------------


async def test_plain_answer_text_usage_and_request_on_the_wire() -> None:
    async with FakeOpenAIServer([{"text": "General Kenobi!", "usage": {"prompt_tokens": 11}}]) as server:
        reply = await client_for(server).invoke(HELLO)
    assert reply.text == "General Kenobi!"
    assert reply.finish_reason == "stop"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.cost_usd) == (11, 2, None)
    # the dated snapshot the server reports serving
    assert (reply.provider, reply.model, reply.attempts, reply.ttft_ms) == (
        "fake", "gpt-4.1-mini-2025-04-14", 1, None
    )  # fmt: skip
    assert reply.latency_ms > 0
    assert reply.raw["object"] == "chat.completion"
    [sent] = server.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"] == {"model": "gpt-4.1-mini", "messages": HELLO.messages, "temperature": 0}
    assert sent["headers"]["content-type"] == "application/json"
    auth = sent["credentials"]["authorization"]
    assert auth["scheme"] == "Bearer"
    assert auth["sha256"] == hashlib.sha256(KEY.encode()).hexdigest()


async def test_sse_stream_assembles_text_usage_and_measures_ttft() -> None:
    script = [{"text": "one two three four", "usage": {"prompt_tokens": 5, "completion_tokens": 4}}]
    async with FakeOpenAIServer(script) as server:
        reply = await client_for(server).invoke(streamed(HELLO))
    assert reply.text == "one two three four"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (5, 4)
    assert reply.finish_reason == "stop"
    assert reply.ttft_ms is not None and 0 < reply.ttft_ms <= reply.latency_ms
    assert reply.raw["choices"][0]["message"]["content"] == "one two three four"
    body = server.requests[0]["body"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert server.requests[0]["headers"]["accept"] == "text/event-stream"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_parallel_tool_calls_are_parsed(stream: bool) -> None:
    calls = [
        {"id": "call_a", "name": "get_weather", "arguments": {"city": "New York City"}},
        {"id": "call_b", "name": "get_time", "arguments": {"zone": "UTC", "precise": True}},
    ]
    request = ModelRequest(messages=HELLO.messages, tools=[WEATHER_TOOL], stream=stream)
    async with FakeOpenAIServer([{"tool_calls": calls}]) as server:
        reply = await client_for(server).invoke(request)
    assert reply.text == ""
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == (
        ToolCall("call_a", "get_weather", {"city": "New York City"}),
        ToolCall("call_b", "get_time", {"zone": "UTC", "precise": True}),
    )
    assert server.requests[0]["body"]["tools"] == [WEATHER_TOOL]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_text_and_tool_call_together(stream: bool) -> None:
    script = [{"text": "Let me check.", "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {}}]}]
    async with FakeOpenAIServer(script) as server:
        reply = await client_for(server).invoke(ModelRequest(messages=HELLO.messages, stream=stream))
    assert reply.text == "Let me check."
    assert reply.tool_calls == (ToolCall("c1", "get_weather", {}),)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_malformed_tool_arguments_name_the_call(stream: bool) -> None:
    script = [{"tool_calls": [{"id": "call_bad", "name": "get_weather", "arguments": '{"city": "Par'}]}]
    async with FakeOpenAIServer(script) as server:
        with pytest.raises(ResponseFormatError, match=r"call_bad \(get_weather\)"):
            await client_for(server).invoke(ModelRequest(messages=HELLO.messages, stream=stream))
    assert len(server.requests) == 1  # an undecodable answer is not retried


async def test_json_schema_response_format_is_passed_through() -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {
            "name": "Location",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    request = ModelRequest(messages=HELLO.messages, response_format=response_format)
    async with FakeOpenAIServer([{"text": '{"city":"Edinburgh"}'}]) as server:
        reply = await client_for(server).invoke(request)
    assert server.requests[0]["body"]["response_format"] == response_format
    assert orjson.loads(reply.text) == {"city": "Edinburgh"}


async def test_refusal_and_length_finish_are_reported() -> None:
    script = [{"refusal": "I can't help with that."}, {"text": '{"', "finish_reason": "length"}]
    async with FakeOpenAIServer(script) as server:
        model = client_for(server)
        refused = await model.invoke(HELLO)
        truncated = await model.invoke(streamed(HELLO))
    assert refused.text == ""
    assert refused.raw["choices"][0]["message"]["refusal"] == "I can't help with that."
    assert (truncated.text, truncated.finish_reason) == ('{"', "length")


async def test_secret_named_params_never_reach_the_wire_and_reserved_ones_are_refused() -> None:
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        model = client_for(server)
        await model.invoke(ModelRequest(messages=HELLO.messages, params={"api_key": "x", "max_tokens": 5}))
        with pytest.raises(ValueError, match="messages"):
            await model.invoke(ModelRequest(messages=HELLO.messages, params={"messages": []}))
    with pytest.raises(ValueError, match="http"):
        OpenAIChatModel("m", base_url="127.0.0.1:8000/v1")
    assert server.requests[0]["body"]["max_tokens"] == 5
    assert "api_key" not in server.requests[0]["body"]
    assert len(server.requests) == 1


# -- error mapping ----------------------------------------------------------------------------

CONTEXT_ERROR = {
    "message": "This model's maximum context length is 128000 tokens.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"status": 401}, AuthenticationError),
        ({"status": 403}, AuthenticationError),
        ({"status": 429, "retry_after": 1.5}, RateLimitError),
        ({"status": 400, "error": CONTEXT_ERROR}, ContextLengthError),
        (
            {"status": 400, "error": {"message": "Invalid 'max_tokens'", "code": "integer_below_min_value"}},
            None,
        ),
        ({"status": 404}, None),
        ({"status": 500}, ServerError),
        ({"status": 503}, ServerError),
    ],
    ids=["401", "403", "429", "400-context", "400", "404", "500", "503"],
)
async def test_http_errors_map_to_typed_errors(entry: dict[str, Any], expected: type | None) -> None:
    async with FakeOpenAIServer([entry]) as server:
        model = client_for(server, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(ProviderHTTPError) as caught:
            await model.invoke(HELLO)
    error = caught.value
    assert type(error) is (expected or ProviderHTTPError)
    assert error.status_code == entry["status"]
    assert (error.provider, error.model, error.attempts) == ("fake", "gpt-4.1-mini", 1)
    assert isinstance(error.body, dict) and "error" in error.body
    assert error.body["error"]["message"] in str(error)
    if expected is RateLimitError:
        assert error.retry_after == 1.5


async def test_retry_honours_retry_after_ms_and_retry_after() -> None:
    script = [
        {"status": 429, "retry_after_ms": 300},
        {"status": 503, "retry_after": 0.2},
        {"text": "finally"},
    ]
    async with FakeOpenAIServer(script) as server:
        # A zero backoff: any wait observed between attempts is the server's wish.
        reply = await client_for(server, retry=RetryPolicy(max_attempts=3, initial_delay=0.0)).invoke(HELLO)
    assert (reply.text, reply.attempts) == ("finally", 3)
    times = [r["monotonic"] for r in server.requests]
    assert times[1] - times[0] >= 0.29
    assert times[2] - times[1] >= 0.19
    assert reply.latency_ms >= 490


async def test_retries_exhausted_raise_the_last_error_with_attempts() -> None:
    async with FakeOpenAIServer([{"status": 500, "times": None}]) as server:
        with pytest.raises(ServerError) as caught:
            await client_for(server).invoke(HELLO)
    assert caught.value.attempts == 3
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "entry",
    [
        {"status": 400},
        {"status": 429, "retry_after": 500},
        {"status": 500, "headers": {"x-should-retry": "false"}},
    ],
    ids=["4xx", "retry-after-too-long", "x-should-retry-false"],
)
async def test_errors_that_must_not_be_retried(entry: dict[str, Any]) -> None:
    async with FakeOpenAIServer([entry]) as server:
        with pytest.raises(ProviderHTTPError) as caught:
            await client_for(server).invoke(HELLO)
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


async def test_a_409_is_retried_like_the_official_client() -> None:
    async with FakeOpenAIServer([{"status": 409}, {"text": "ok"}]) as server:
        reply = await client_for(server).invoke(HELLO)
    assert (reply.text, reply.attempts) == ("ok", 2)


async def test_a_wait_beyond_two_minutes_is_refused_even_with_x_should_retry() -> None:
    script = [{"status": 503, "retry_after": 200, "headers": {"x-should-retry": "true"}}, {"text": "ok"}]
    async with FakeOpenAIServer(script) as server:
        with pytest.raises(ServerError) as caught:
            await client_for(server).invoke(HELLO)
    assert (caught.value.attempts, caught.value.retry_after) == (1, 200.0)
    assert len(server.requests) == 1


async def test_a_code_that_repeats_the_status_is_not_printed_twice() -> None:
    body = '{"error": {"message": "bad things", "type": "invalid_request_error", "code": "400"}}'
    script = [{"status": 400, "raw_body": body}]
    async with FakeOpenAIServer(script) as server:
        with pytest.raises(ProviderHTTPError) as caught:
            await client_for(server).invoke(HELLO)
    assert str(caught.value) == "fake gpt-4.1-mini: HTTP 400: bad things"


async def test_x_should_retry_true_retries_a_4xx() -> None:
    script = [{"status": 404, "headers": {"x-should-retry": "true"}}, {"text": "ok"}]
    async with FakeOpenAIServer(script) as server:
        reply = await client_for(server).invoke(HELLO)
    assert (reply.text, reply.attempts) == ("ok", 2)


# -- broken streams, slow servers, dead servers -----------------------------------------------


async def test_stream_cut_mid_way_is_an_error_not_a_short_answer() -> None:
    async with FakeOpenAIServer([{"text": "a long answer that never ends", "cut_after": 3}]) as server:
        with pytest.raises(ProviderConnectionError, match="cut after 3 chunks") as caught:
            await client_for(server).invoke(streamed(HELLO))
    assert caught.value.attempts == 1  # output had started: never silently replayed
    assert len(server.requests) == 1


async def test_stream_that_ends_without_done_is_an_error() -> None:
    chunk = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
    raw = f"data: {orjson.dumps(chunk).decode()}\n\n"
    script = [{"raw_body": raw, "headers": {"content-type": "text/event-stream"}}]
    async with FakeOpenAIServer(script) as server:
        with pytest.raises(ProviderConnectionError, match=r"before \[DONE\] after 1 chunks"):
            await client_for(server).invoke(streamed(HELLO))


async def test_error_event_inside_a_stream_raises() -> None:
    script = [
        {"text": "partial", "stream_error": {"message": "The server had an error", "type": "server_error"}}
    ]
    async with FakeOpenAIServer(script) as server:
        with pytest.raises(ServerError, match="The server had an error"):
            await client_for(server).invoke(streamed(HELLO))


async def test_slow_first_byte_is_measured_as_time_to_first_token() -> None:
    async with FakeOpenAIServer([{"text": "late but fine", "delay_ms": 300}]) as server:
        reply = await client_for(server).invoke(streamed(HELLO))
    assert reply.text == "late but fine"
    assert reply.ttft_ms is not None and reply.ttft_ms >= 300


async def test_read_timeout_is_provider_timeout_and_retried() -> None:
    async with FakeOpenAIServer([{"text": "too late", "delay_ms": 3000, "times": None}]) as server:
        model = client_for(server, timeout=httpx.Timeout(5.0, read=0.2), retry=RetryPolicy(max_attempts=2))
        with pytest.raises(ProviderTimeout, match="ReadTimeout") as caught:
            await model.invoke(HELLO)
    assert caught.value.attempts == 2
    assert len(server.requests) == 2
    assert isinstance(caught.value, TimeoutError)
    assert_no_key(caught.value)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_refused_is_provider_connection_error_without_credentials() -> None:
    model = OpenAIChatModel(
        "gpt-4.1-mini",
        base_url=f"http://127.0.0.1:{unused_port()}/v1",
        api_key=KEY,
        retry=FAST,
        headers={"api-key": f"azure-{KEY}"},
    )
    with pytest.raises(ProviderConnectionError, match="ConnectError") as caught:
        await model.invoke(HELLO)
    assert caught.value.attempts == 3
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert caught.value.__cause__.request.headers["api-key"] == "<redacted>"
    assert_no_key(caught.value)


# -- secrets and the request guard ------------------------------------------------------------


async def test_api_key_never_appears_in_raw_errors_or_reprs() -> None:
    leaky = {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}
    script = [
        {"text": "fine", "model": f"echo-{KEY}"},
        {"status": 401, "error": leaky},
        {"status": 200, "raw_body": f"not json {KEY}"},
    ]
    async with FakeOpenAIServer(script) as server:
        model = client_for(server)
        reply = await model.invoke(HELLO)
        with pytest.raises(AuthenticationError) as auth:
            await model.invoke(HELLO)
        with pytest.raises(ResponseFormatError) as undecodable:
            await model.invoke(HELLO)
    assert KEY not in orjson.dumps(reply.raw).decode()
    assert KEY not in repr(reply)
    assert KEY not in repr(model) and KEY not in repr(vars(model))
    assert_no_key(auth.value)
    assert_no_key(undecodable.value)
    assert "Incorrect API key provided" in str(auth.value)


async def test_fake_server_with_a_required_key_rejects_a_wrong_one() -> None:
    async with FakeOpenAIServer([{"text": "ok"}], api_key="sk-the-right-one") as server:
        with pytest.raises(AuthenticationError, match="invalid_api_key") as caught:
            await client_for(server).invoke(HELLO)
        reply = await client_for(server, api_key="sk-the-right-one").invoke(HELLO)
    assert caught.value.status_code == 401
    assert reply.text == "ok"


async def test_key_comes_from_the_environment_at_request_time(monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url)
        with pytest.raises(MissingAPIKey, match=r"\$OPENAI_API_KEY") as caught:
            await model.invoke(HELLO)
        assert isinstance(caught.value, AuthenticationError)
        assert server.requests == []  # nothing was sent without a key
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        await model.invoke(HELLO)
    assert (
        server.requests[0]["credentials"]["authorization"]["sha256"]
        == hashlib.sha256(KEY.encode()).hexdigest()
    )


async def test_keyless_servers_get_no_authorization_header() -> None:
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        model = OpenAIChatModel("llama3.2", base_url=server.base_url, api_key_env=None, require_api_key=False)
        await model.invoke(HELLO)
    assert server.requests[0]["credentials"] == {}


@pytest.mark.parametrize(
    "url", ["https://api.openai.com/v1", "http://10.0.0.7:8000/v1", "http://example.com/v1"]
)
async def test_requests_to_real_hosts_are_blocked_in_tests(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
    model = OpenAIChatModel("gpt-4.1-mini", base_url=url, api_key=KEY)
    with pytest.raises(ModelRequestsBlocked, match="TURNLOG_ALLOW_MODEL_REQUESTS=0") as caught:
        await model.invoke(HELLO)
    assert isinstance(caught.value, ProviderError)
    assert_no_key(caught.value)


async def test_localhost_is_allowed_while_real_hosts_are_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        url = server.base_url.replace("127.0.0.1", "localhost")
        reply = await OpenAIChatModel("m", base_url=url, api_key=KEY).invoke(HELLO)
    assert reply.text == "ok"


async def test_async_with_reuses_one_connection() -> None:
    async with FakeOpenAIServer([{"text": "a"}, {"text": "b"}, {"text": "c"}]) as server:
        async with client_for(server) as model:
            for _ in range(3):
                await model.invoke(HELLO)
    assert len({r["client_port"] for r in server.requests}) == 1


# -- retry policy -----------------------------------------------------------------------------


def test_retry_after_headers_are_read_in_the_sdk_order() -> None:
    assert parse_retry_after({"retry-after-ms": "45175", "retry-after": "46"}) == 45.175
    assert parse_retry_after({"Retry-After": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2026 07:28:10 GMT"}, now=1792567680.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_capped_exponential_with_jitter() -> None:
    exact = RetryPolicy(initial_delay=0.5, max_delay=8.0, jitter=0.0)
    assert [exact.backoff(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    jittered = RetryPolicy(initial_delay=1.0, jitter=0.25, random=lambda: 1.0)
    assert jittered.backoff(0) == 0.75
    assert exact.delay(0, retry_after=3.0) == 3.0
    assert exact.delay(0, retry_after=500.0) == 0.5  # beyond max_retry_after: not honoured
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_retry_policy_round_trips_through_json() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay=0.1, retry_statuses=frozenset({429, 503}))
    assert RetryPolicy.from_dict(orjson.loads(orjson.dumps(policy.to_dict()))) == policy


# -- SSE decoding, independent of how bytes arrive (unit level, no socket) --------------------


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


SSE_BODY = (
    b": keep-alive\r\n\r\n"
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\r\n\r\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"H\xc3\xa9llo\xc2\x85\xe2\x80\xa8!"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","type":"function",'
    b'"function":{"name":"f","arguments":"{\\"a\\""}}]},"finish_reason":null}]}\r\r'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},'
    b'"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    b"data: [DONE]\n\n"
)


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(SSE_BODY) - 1), unique=True, max_size=12))
async def test_sse_decoding_does_not_depend_on_read_boundaries(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(SSE_BODY)]
    pieces = [SSE_BODY[a:b] for a, b in itertools.pairwise(bounds)]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Pieces(pieces))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key=KEY, client=client)
        reply = await model.invoke(streamed(HELLO))
    # U+0085 and U+2028 are not SSE line breaks (str.splitlines would split there).
    assert reply.text == "Héllo\x85\u2028!"
    assert reply.tool_calls == (ToolCall("t", "f", {"a": 1}),)
    assert reply.finish_reason == "tool_calls"
    assert reply.usage.input_tokens is None  # no usage chunk: unknown, not zero


# -- cancellation and round trips over the socket ---------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [{"text": "slow", "delay_ms": 5000}, {"status": 503, "retry_after": 5}],
    ids=["waiting-for-the-answer", "waiting-to-retry"],
)
async def test_cancellation_propagates_and_is_not_a_provider_error(entry: dict[str, Any]) -> None:
    async with FakeOpenAIServer([entry, {"text": "never"}]) as server:
        # Cancel once the request has reached the server (a loaded machine can take far longer
        # than any fixed delay to send it), plus a moment for the 503 to come back.
        arrived = anyio.Event()
        serve_one = server.serve_one

        async def observed(request: Any, writer: Any) -> bool:
            arrived.set()
            return await serve_one(request, writer)

        server.serve_one = observed  # type: ignore[method-assign]
        model = client_for(server, retry=RetryPolicy(max_attempts=3))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                # A ProviderError raised instead of the cancellation would fail the task group.
                tg.start_soon(model.invoke, HELLO)
                await arrived.wait()
                await anyio.sleep(0.2)
                tg.cancel_scope.cancel()
    assert tg.cancel_scope.cancelled_caught
    assert len(server.requests) == 1


@settings(max_examples=25, deadline=None)
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60),
    size=st.none() | st.integers(min_value=1, max_value=7),
    stream=st.booleans(),
)
async def test_any_text_survives_the_wire_in_any_fragmentation(
    text: str, size: int | None, stream: bool
) -> None:
    async with FakeOpenAIServer([{"text": text, "chunk_chars": size}]) as server:
        reply = await client_for(server).invoke(ModelRequest(messages=HELLO.messages, stream=stream))
    assert reply.text == text
