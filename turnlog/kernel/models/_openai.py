"""OpenAI-compatible Chat Completions over httpx: plain JSON and SSE streaming.

``OpenAIChatModel`` implements ``ChatModel`` for api.openai.com and any server that speaks
the same wire format (``POST {base_url}/chat/completions``): vLLM, Ollama, LiteLLM, the
loopback ``turnlog fake-openai`` server.

Everything foreign is translated here, once: httpx exceptions and HTTP error statuses become
the ``ProviderError`` tree of ``turnlog.kernel.models``; SSE frames become one assembled
``ModelResponse``. The API key lives in a private attribute; it, every configured header value
and the credentials of ``base_url`` (user-info, secret-looking query parameters) are scrubbed
from every error, raw response, repr and httpx log line this module produces.

Requests to non-loopback hosts are refused while ``TURNLOG_ALLOW_MODEL_REQUESTS`` is ``0``
(the test suite sets it), so no test can reach a real provider by accident.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import orjson

from turnlog._errors import UsageError

from ._errors import (
    MissingAPIKey,
    ModelRequestsBlocked,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeout,
    ResponseFormatError,
    ServerError,
)
from ._fingerprint import sent_params
from ._http import (
    CLASS_DEFAULT,
    ClassDefault,
    Failure,
    Secret,
    error_class,
    is_loopback,
    redact_request,
    with_reported,
)
from ._openai_wire import StreamAssembly, result_chunk, usage_of
from ._retry import RetryPolicy, parse_retry_after
from ._secrets import Scrubber, scrub_url, url_secrets
from ._sse import sse_data, sse_lines
from ._types import ChunkSink, ModelRequest, ModelResponse, ToolCall

__all__ = [
    "DEFAULT_TIMEOUT",
    "OPENAI_BASE_URL",
    "MissingAPIKey",
    "ModelRequestsBlocked",
    "OpenAIChatModel",
    "model_requests_allowed",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Like the official client: 10 minutes for a whole read, 5 seconds to connect.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)

_ALLOW_ENV = "TURNLOG_ALLOW_MODEL_REQUESTS"
_RESERVED_PARAMS = frozenset({"model", "messages", "tools", "response_format", "stream"})


def model_requests_allowed() -> bool:
    """False when ``TURNLOG_ALLOW_MODEL_REQUESTS`` is 0/false/no/off (only loopback allowed then)."""
    value = os.environ.get(_ALLOW_ENV, "1").strip().lower()
    return value not in {"0", "false", "no", "off"}


class OpenAIChatModel:
    """A Chat Completions client for OpenAI and OpenAI-compatible servers.

    Args:
        model: The model name sent in every request, e.g. ``gpt-4.1-mini``.
        provider: The provider name recorded with each call (``openai``, ``ollama``, ``fake``...);
            default ``default_provider`` (``openai``).
        base_url: The API root ending in ``/v1``; default ``default_base_url``
            (``https://api.openai.com/v1``).
        api_key: The key; when None it is read from ``api_key_env`` at request time.
        api_key_env: The environment variable holding the key (None: only the argument counts);
            default ``default_api_key_env`` (``OPENAI_API_KEY``).
        require_api_key: Raise ``MissingAPIKey`` when no key is found; when False a request is
            sent without an ``Authorization`` header (local servers such as Ollama).
        timeout: Connect/read/write/pool timeouts (a float sets all four).
        retry: The retry policy (default: 3 attempts, the official client's backoff).
        headers: Extra request headers (e.g. ``OpenAI-Organization``); never recorded.
        client: An ``httpx.AsyncClient`` to use instead of one per call (or per ``async with``).

    Example:
        ```python
        model = OpenAIChatModel("gpt-4.1-mini")  # key from $OPENAI_API_KEY
        reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        print(reply.text, reply.usage.output_tokens)
        ```
    """

    endpoint = "chat/completions"
    #: ``invoke(request, on_chunk=...)`` hands the SSE deltas of a streamed call to a sink.
    streams_chunks = True

    #: The provider name, API root and key variable used when the caller gives none; a
    #: provider speaking another wire format sets its own (``AnthropicModel``, ``GeminiAPIModel``).
    default_provider: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = OPENAI_BASE_URL
    default_api_key_env: ClassVar[str | None] = "OPENAI_API_KEY"

    #: The request parameters a verb may pass (``communicate(..., temperature=0)``): those of
    #: the Chat Completions API. Anything else is refused before it is sent, with a "did you
    #: mean" (``turnlog.kernel._options``). A compatible server that takes more (vLLM's
    #: ``top_k``...) widens it on the instance (``model.request_params |= {"top_k"}``), or
    #: turns the check off (``model.request_params = None``).
    request_params: frozenset[str] | None = frozenset(
        {
            "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
            "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
            "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
            "reasoning_effort", "safety_identifier", "seed", "service_tier", "stop", "store",
            "stream_options", "temperature", "tool_choice", "top_logprobs", "top_p", "user",
            "verbosity", "web_search_options",
        }
    )  # fmt: skip

    def __init__(
        self,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | ClassDefault | None = CLASS_DEFAULT,
        require_api_key: bool = True,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise UsageError(f"{type(self).__name__} needs a model name")
        self.model = model
        self.provider = provider or self.default_provider
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        parsed = urlsplit(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UsageError(
                f"base_url must be an http(s) URL such as https://host/v1, got {self.base_url!r}"
            )
        self.api_key_env = self.default_api_key_env if api_key_env is CLASS_DEFAULT else api_key_env
        self.require_api_key = require_api_key
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry or RetryPolicy()
        self._api_key = Secret(api_key) if api_key else None
        self._headers = dict(headers or {})
        # Every configured credential, for scrubbing what is recorded (the key is added per call).
        self._scrubber = Scrubber([*self._headers.values(), *url_secrets(self.base_url)])
        self._shown_url = scrub_url(self.url)
        self._client = client
        self._owns_client = False

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(provider={self.provider!r}, model={self.model!r}, "
            f"base_url={scrub_url(self.base_url)!r})"
        )

    @property
    def url(self) -> str:
        """The full Chat Completions URL (the endpoint joins the path; a query stays a query)."""
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{self.endpoint}"))

    async def __aenter__(self) -> OpenAIChatModel:
        """Keep one connection pool open until the block exits (otherwise: one per call)."""
        if self._client is None:
            self._client = self._new_client()
            self._owns_client = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool opened by ``async with`` (a client passed in stays open)."""
        if self._owns_client and self._client is not None:
            client, self._client, self._owns_client = self._client, None, False
            await client.aclose()

    def _new_client(self) -> httpx.AsyncClient:
        # Proxies from the environment are for the outside world, never for loopback servers.
        return httpx.AsyncClient(timeout=self.timeout, trust_env=not is_loopback(self.base_url))

    @contextlib.asynccontextmanager
    async def _client_scope(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        async with self._new_client() as client:
            yield client

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (parameters that name secrets are dropped)."""
        reserved = sorted(_RESERVED_PARAMS & set(request.params))
        if reserved:
            raise UsageError(
                f"ModelRequest.params may not set {', '.join(reserved)}: "
                "use the ModelRequest fields (messages, tools, response_format, stream) or the model"
            )
        body: dict[str, Any] = {"model": self.model, "messages": request.messages}
        body.update(sent_params(request.params))
        if request.tools:
            body["tools"] = request.tools
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if request.stream:
            body["stream"] = True
            options = dict(body.get("stream_options") or {})
            options.setdefault("include_usage", True)
            body["stream_options"] = options
        return body

    def _key(self) -> str | None:
        if self._api_key is not None:
            return self._api_key.reveal()
        value = os.environ.get(self.api_key_env) if self.api_key_env else None
        if value:
            return value
        if self.require_api_key:
            raise MissingAPIKey(self.api_key_env, provider=self.provider, model=self.model)
        return None

    def _request_headers(self, key: str | None, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": "turnlog",
            **self._headers,
        }
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        """Send ``request``; retry per the policy; return the (assembled) response.

        With ``request.stream`` and ``on_chunk``, every text delta is handed to ``on_chunk``
        as it arrives (a ``text`` chunk with ``is_delta``), each tool call once complete (a
        ``tool_use`` chunk), then a ``result`` chunk with the usage; see ``ChunkSink``.

        Raises:
            ModelRequestsBlocked: A non-loopback URL while model requests are disabled.
            MissingAPIKey: No key and ``require_api_key``.
            AuthenticationError, RateLimitError, ContextLengthError, ServerError,
            ProviderHTTPError: The provider's HTTP error (after retries where retryable).
            ProviderConnectionError: Transport failure, or a stream cut before ``[DONE]``.
            ProviderTimeout: A connect/read timeout.
            ResponseFormatError: An undecodable answer (including malformed tool arguments).
        """
        if not model_requests_allowed() and not is_loopback(self.url):
            raise ModelRequestsBlocked(self._shown_url, provider=self.provider, model=self.model)
        body = self.build_body(request)
        try:
            payload = orjson.dumps(body)
        except TypeError as exc:
            raise TypeError(
                f"{self.provider} {self.model}: the request is not JSON-serializable: {exc}"
            ) from exc
        key = self._key()
        scrub = self._scrubber.with_secrets(key)
        headers = self._request_headers(key, stream=request.stream)
        started = time.perf_counter()
        attempt = 0
        async with self._client_scope() as client:
            while True:
                attempt += 1
                try:
                    response = await self._attempt(
                        client, payload, headers, request.stream, started, scrub, on_chunk
                    )
                except Failure as failure:
                    if not failure.retryable or attempt >= self.retry.max_attempts:
                        error = failure.error
                        error.attempts = attempt
                        error.latency_ms = (time.perf_counter() - started) * 1000.0
                        raise error from failure.__cause__
                    await anyio.sleep(self.retry.delay(attempt - 1, failure.retry_after))
                    continue
                latency = (time.perf_counter() - started) * 1000.0
                return dataclasses.replace(response, attempts=attempt, latency_ms=latency)

    async def _attempt(
        self,
        client: httpx.AsyncClient,
        payload: bytes,
        headers: dict[str, str],
        stream: bool,
        started: float,
        scrub: Scrubber,
        on_chunk: ChunkSink | None = None,
    ) -> ModelResponse:
        body_started = False
        try:
            async with client.stream(
                "POST", self._target(stream), content=payload, headers=headers
            ) as response:
                if not 200 <= response.status_code < 300:
                    await response.aread()
                    raise self._status_failure(response, scrub)
                # Some compatible servers ignore "stream": accept their plain JSON answer.
                stream = stream and response.headers.get("content-type", "").startswith("text/event-stream")
                body_started = stream
                if stream:
                    answer = await self._read_stream(response, started, scrub, on_chunk)
                    answer = with_reported(answer, response.headers)
                    if on_chunk is not None:
                        await on_chunk(result_chunk(answer))
                    return answer
                await response.aread()
                answer = self._from_completion(self._decode_json(response.text, scrub), scrub)
                return with_reported(answer, response.headers)
        except httpx.TimeoutException as exc:
            redact_request(exc, self._headers)
            error: ProviderError = ProviderTimeout(
                f"{self.provider} {self.model}: {type(exc).__name__} calling {self._shown_url}",
                provider=self.provider,
                model=self.model,
            )
            raise Failure(error, retryable=self._retry_transport(body_started)) from exc
        except httpx.RequestError as exc:
            redact_request(exc, self._headers)
            error = ProviderConnectionError(
                f"{self.provider} {self.model}: {type(exc).__name__} calling {self._shown_url}: "
                f"{scrub(str(exc))}",
                provider=self.provider,
                model=self.model,
            )
            raise Failure(error, retryable=self._retry_transport(body_started)) from exc

    def _target(self, stream: bool) -> str:
        """The URL one request is sent to (providers with a streaming endpoint of its own override it)."""
        return self.url

    def _retry_transport(self, body_started: bool) -> bool:
        # A stream that already started may have delivered output: never replay it silently.
        return self.retry.retry_transport_errors and not body_started

    def _status_failure(self, response: httpx.Response, scrub: Scrubber) -> Failure:
        status = response.status_code
        retry_after = parse_retry_after(response.headers)
        body: Any
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = response.text
        body = scrub(body)
        message, code = self._error_parts(body)
        text = message[:1000]
        # Some servers send the status again as the code ("code": "400" or 400): say it once.
        label = f" {code}" if code not in (None, "", status, str(status)) else ""
        summary = f"{self.provider} {self.model}: HTTP {status}{label}: {text}"
        cls = self._error_class(status, code, text, body)
        error = cls(
            summary,
            status_code=status,
            body=body,
            retry_after=retry_after,
            provider=self.provider,
            model=self.model,
        )
        retryable = self.retry.should_retry_status(status, response.headers)
        return Failure(error, retryable=retryable, retry_after=retry_after)

    def _error_parts(self, body: Any) -> tuple[str, Any]:
        """The message and the code of an error body (``{"error": {"message", "code"}}`` here)."""
        detail = body.get("error", body) if isinstance(body, dict) else body
        message = detail.get("message") if isinstance(detail, dict) else None
        code = detail.get("code") if isinstance(detail, dict) else None
        return str(message if message is not None else detail), code

    def _error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        """The ``ProviderHTTPError`` subclass of an error answer."""
        return error_class(status, code, message)

    async def _read_stream(
        self, response: httpx.Response, started: float, scrub: Scrubber, on_chunk: ChunkSink | None = None
    ) -> ModelResponse:
        assembly = StreamAssembly(self.model)
        ttft: float | None = None
        try:
            async for data in sse_data(sse_lines(response.aiter_text())):
                if data.strip() == "[DONE]":
                    break
                chunk = self._decode_json(data, scrub)
                if chunk.get("error"):
                    raise Failure(self._stream_error(chunk, scrub, assembly.chunks), retryable=False)
                if assembly.add(chunk) and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000.0
                if on_chunk is not None:
                    for piece in assembly.take_pieces(scrub):
                        await on_chunk(piece)
            else:
                raise Failure(
                    ProviderConnectionError(
                        f"{self.provider} {self.model}: the stream ended before [DONE] "
                        f"after {assembly.chunks} chunks (truncated answer discarded)",
                        provider=self.provider,
                        model=self.model,
                    ),
                    retryable=False,
                )
        except httpx.RequestError as exc:
            raise self._stream_cut(exc, assembly.chunks, "chunks") from exc
        return dataclasses.replace(self._from_completion(assembly.completion(), scrub), ttft_ms=ttft)

    def _stream_cut(self, exc: httpx.RequestError, seen: int, unit: str) -> Failure:
        """The failure of a stream that broke after ``seen`` of its ``unit`` (never retried).

        Shared by every HTTP provider: part of the answer may have reached the caller's chunk
        sink already, so the call fails instead of starting over.
        """
        redact_request(exc, self._headers)
        error: ProviderError
        if isinstance(exc, httpx.TimeoutException):
            error = ProviderTimeout(
                f"{self.provider} {self.model}: {type(exc).__name__} after {seen} stream {unit}",
                provider=self.provider,
                model=self.model,
            )
        else:
            error = ProviderConnectionError(
                f"{self.provider} {self.model}: the stream was cut after {seen} {unit} "
                f"({type(exc).__name__}); the truncated answer is discarded",
                provider=self.provider,
                model=self.model,
            )
        return Failure(error, retryable=False)

    def _stream_error(self, chunk: dict[str, Any], scrub: Scrubber, seen: int) -> ProviderError:
        detail = scrub(chunk["error"])
        message = detail.get("message", detail) if isinstance(detail, dict) else detail
        return ServerError(
            f"{self.provider} {self.model}: error event in the stream after {seen} chunks: {message}",
            status_code=200,
            body=detail,
            provider=self.provider,
            model=self.model,
        )

    def _from_completion(self, raw: Any, scrub: Scrubber) -> ModelResponse:
        # Scrub first: text, model name, tool arguments, everything derived comes from the clean copy.
        raw = scrub(raw)
        if not isinstance(raw, dict) or not isinstance(raw.get("choices"), list) or not raw["choices"]:
            raise self._format_error(f"no choices in the answer: {str(raw)[:300]}", scrub)
        choice = raw["choices"][0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise self._format_error("choices[0] has no message object", scrub)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise self._format_error(f"choices[0].message.content is {type(content).__name__}", scrub)
        calls = tuple(self._tool_call(call, scrub) for call in message.get("tool_calls") or [])
        return ModelResponse(
            text=content or "",
            tool_calls=calls,
            raw=raw,
            usage=usage_of(raw.get("usage")),
            model=str(raw.get("model") or self.model),
            provider=self.provider,
            finish_reason=choice.get("finish_reason"),
        )

    def _tool_call(self, call: Any, scrub: Scrubber) -> ToolCall:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise self._format_error(f"a tool call without a function name: {str(call)[:200]}", scrub)
        call_id = str(call.get("id") or "")
        name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            return ToolCall(call_id, name, arguments)
        text = arguments if isinstance(arguments, str) else ""
        if not text.strip():
            return ToolCall(call_id, name, {})
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise self._format_error(
                f"tool call {call_id} ({name}): arguments are not valid JSON ({exc}): {text[:200]!r}", scrub
            ) from exc
        if not isinstance(parsed, dict):
            raise self._format_error(f"tool call {call_id} ({name}): arguments are not a JSON object", scrub)
        return ToolCall(call_id, name, parsed)

    def _format_error(self, what: str, scrub: Scrubber) -> ResponseFormatError:
        return ResponseFormatError(
            f"{self.provider} {self.model}: {scrub(what)}", provider=self.provider, model=self.model
        )

    def _decode_json(self, text: str, scrub: Scrubber) -> Any:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            exc.doc = scrub(exc.doc)  # the chained exception keeps the whole body otherwise
            raise Failure(
                self._format_error(f"undecodable JSON ({exc}): {text[:300]!r}", scrub), retryable=False
            ) from exc
