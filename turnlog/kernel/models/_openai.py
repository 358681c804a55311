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
import ipaddress
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import orjson

from ._errors import (
    AuthenticationError,
    ContextLengthError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeout,
    RateLimitError,
    ResponseFormatError,
    ServerError,
)
from ._fingerprint import sent_params
from ._retry import RetryPolicy, parse_retry_after
from ._secrets import REDACTED, Scrubber, scrub_url, url_secrets
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

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
_CONTEXT_MESSAGE = re.compile(
    r"context[\s_-]?(length|window)|maximum context|prompt is too long|input token count", re.IGNORECASE
)
_REDACTED = REDACTED


class ModelRequestsBlocked(ProviderError):
    """A request to a non-loopback host while ``TURNLOG_ALLOW_MODEL_REQUESTS=0``.

    Attributes:
        url: The URL that would have been called.
    """

    def __init__(self, url: str, *, provider: str = "", model: str = "") -> None:
        self.url = url
        super().__init__(
            f"{provider} {model}: model requests to {url} are blocked ({_ALLOW_ENV}=0); "
            "only loopback servers (127.0.0.1, ::1, localhost) may be called",
            provider=provider,
            model=model,
        )


class MissingAPIKey(AuthenticationError):
    """No API key was given and its environment variable is unset (raised before any request).

    It is an ``AuthenticationError`` with status 401 because that is what the provider would
    answer to a request without a key.

    Attributes:
        env_var: The environment variable that was consulted.
    """

    def __init__(self, env_var: str | None, *, provider: str = "", model: str = "") -> None:
        self.env_var = env_var
        where = f"pass api_key=... or set ${env_var}" if env_var else "pass api_key=..."
        super().__init__(
            f"{provider} {model}: no API key ({where})", status_code=401, provider=provider, model=model
        )


def model_requests_allowed() -> bool:
    """False when ``TURNLOG_ALLOW_MODEL_REQUESTS`` is 0/false/no/off (only loopback allowed then)."""
    value = os.environ.get(_ALLOW_ENV, "1").strip().lower()
    return value not in {"0", "false", "no", "off"}


def _is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host in {"localhost", "localhost.localdomain"} or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Secret:
    """A string that never shows itself in a repr, a str or a traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return _REDACTED

    __str__ = __repr__


class _Failure(Exception):
    """One failed attempt: the error to raise, whether it may be retried, and the server's wait."""

    def __init__(self, error: ProviderError, *, retryable: bool, retry_after: float | None = None) -> None:
        self.error = error
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(str(error))


class OpenAIChatModel:
    """A Chat Completions client for OpenAI and OpenAI-compatible servers.

    Args:
        model: The model name sent in every request, e.g. ``gpt-4.1-mini``.
        provider: The provider name recorded with each call (``openai``, ``ollama``, ``fake``...).
        base_url: The API root ending in ``/v1``; default ``https://api.openai.com/v1``.
        api_key: The key; when None it is read from ``api_key_env`` at request time.
        api_key_env: The environment variable holding the key (None: only the argument counts).
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

    def __init__(
        self,
        model: str,
        *,
        provider: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        require_api_key: bool = True,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not model:
            raise ValueError("OpenAIChatModel needs a model name")
        self.model = model
        self.provider = provider
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        parsed = urlsplit(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(
                f"base_url must be an http(s) URL such as https://host/v1, got {self.base_url!r}"
            )
        self.api_key_env = api_key_env
        self.require_api_key = require_api_key
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry or RetryPolicy()
        self._api_key = _Secret(api_key) if api_key else None
        self._headers = dict(headers or {})
        # Every configured credential, for scrubbing what is recorded (the key is added per call).
        self._scrubber = Scrubber([*self._headers.values(), *url_secrets(self.base_url)])
        self._shown_url = scrub_url(self.url)
        self._client = client
        self._owns_client = False

    def __repr__(self) -> str:
        return (
            f"OpenAIChatModel(provider={self.provider!r}, model={self.model!r}, "
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
        return httpx.AsyncClient(timeout=self.timeout, trust_env=not _is_loopback(self.base_url))

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
            raise ValueError(
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
        if not model_requests_allowed() and not _is_loopback(self.url):
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
                except _Failure as failure:
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
                    answer = _with_reported(answer, response.headers)
                    if on_chunk is not None:
                        await on_chunk(_result_chunk(answer))
                    return answer
                await response.aread()
                answer = self._from_completion(_decode_json(response.text, self, scrub), scrub)
                return _with_reported(answer, response.headers)
        except httpx.TimeoutException as exc:
            _redact_request(exc, self._headers)
            error = ProviderTimeout(
                f"{self.provider} {self.model}: {type(exc).__name__} calling {self._shown_url}",
                provider=self.provider,
                model=self.model,
            )
            raise _Failure(error, retryable=self._retry_transport(body_started)) from exc
        except httpx.RequestError as exc:
            _redact_request(exc, self._headers)
            error = ProviderConnectionError(
                f"{self.provider} {self.model}: {type(exc).__name__} calling {self._shown_url}: "
                f"{scrub(str(exc))}",
                provider=self.provider,
                model=self.model,
            )
            raise _Failure(error, retryable=self._retry_transport(body_started)) from exc

    def _target(self, stream: bool) -> str:
        """The URL one request is sent to (providers with a streaming endpoint of its own override it)."""
        return self.url

    def _retry_transport(self, body_started: bool) -> bool:
        # A stream that already started may have delivered output: never replay it silently.
        return self.retry.retry_transport_errors and not body_started

    def _status_failure(self, response: httpx.Response, scrub: Scrubber) -> _Failure:
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
        return _Failure(error, retryable=retryable, retry_after=retry_after)

    def _error_parts(self, body: Any) -> tuple[str, Any]:
        """The message and the code of an error body (``{"error": {"message", "code"}}`` here)."""
        detail = body.get("error", body) if isinstance(body, dict) else body
        message = detail.get("message") if isinstance(detail, dict) else None
        code = detail.get("code") if isinstance(detail, dict) else None
        return str(message if message is not None else detail), code

    def _error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        """The ``ProviderHTTPError`` subclass of an error answer."""
        return _error_class(status, code, message)

    async def _read_stream(
        self, response: httpx.Response, started: float, scrub: Scrubber, on_chunk: ChunkSink | None = None
    ) -> ModelResponse:
        assembly = _StreamAssembly(self)
        ttft: float | None = None
        try:
            async for data in _sse_data(_sse_lines(response.aiter_text())):
                if data.strip() == "[DONE]":
                    break
                chunk = _decode_json(data, self, scrub)
                if chunk.get("error"):
                    raise _Failure(self._stream_error(chunk, scrub, assembly.chunks), retryable=False)
                if assembly.add(chunk) and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000.0
                if on_chunk is not None:
                    for piece in assembly.take_pieces(scrub):
                        await on_chunk(piece)
            else:
                raise _Failure(
                    ProviderConnectionError(
                        f"{self.provider} {self.model}: the stream ended before [DONE] "
                        f"after {assembly.chunks} chunks (truncated answer discarded)",
                        provider=self.provider,
                        model=self.model,
                    ),
                    retryable=False,
                )
        except httpx.TimeoutException as exc:
            _redact_request(exc, self._headers)
            error = ProviderTimeout(
                f"{self.provider} {self.model}: {type(exc).__name__} after {assembly.chunks} stream chunks",
                provider=self.provider,
                model=self.model,
            )
            raise _Failure(error, retryable=False) from exc
        except httpx.RequestError as exc:
            _redact_request(exc, self._headers)
            error = ProviderConnectionError(
                f"{self.provider} {self.model}: the stream was cut after {assembly.chunks} chunks "
                f"({type(exc).__name__}); the truncated answer is discarded",
                provider=self.provider,
                model=self.model,
            )
            raise _Failure(error, retryable=False) from exc
        return dataclasses.replace(self._from_completion(assembly.completion(), scrub), ttft_ms=ttft)

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
            usage=_usage(raw.get("usage")),
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


def _result_chunk(answer: ModelResponse) -> StreamChunk:
    """The closing ``result`` chunk of a streamed call: usage, finish reason, served model."""
    return StreamChunk(
        type="result",
        content=answer.text,
        metadata={
            "usage": answer.usage.to_dict(),
            "finish_reason": answer.finish_reason,
            "model": answer.model,
        },
    )


#: Headers in which proxies report the real cost and the deployment's model (LiteLLM).
COST_HEADERS = ("x-litellm-response-cost",)
SERVED_MODEL_HEADERS = ("x-litellm-model-name",)


def _with_reported(answer: ModelResponse, headers: httpx.Headers) -> ModelResponse:
    """The answer with the cost and model a proxy reported in its headers (they win)."""
    changes: dict[str, Any] = {}
    for name in COST_HEADERS:
        cost = _number(headers.get(name))
        if cost is not None:
            changes["usage"] = answer.usage.model_copy(update={"cost_usd": cost})
            break
    for name in SERVED_MODEL_HEADERS:
        served = (headers.get(name) or "").strip()
        if served:
            changes["model"] = served
            break
    return dataclasses.replace(answer, **changes) if changes else answer


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if number >= 0 and number != float("inf") else None
    return None


def _error_class(status: int, code: Any, message: str) -> type[ProviderHTTPError]:
    if status in (401, 403):
        return AuthenticationError
    if status == 429:
        return RateLimitError
    if status in (400, 413) and (code == "context_length_exceeded" or _CONTEXT_MESSAGE.search(message)):
        return ContextLengthError
    if status >= 500:
        return ServerError
    return ProviderHTTPError


def _decode_json(text: str, model: OpenAIChatModel, scrub: Scrubber) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        exc.doc = scrub(exc.doc)  # the chained exception keeps the whole body otherwise
        raise _Failure(
            model._format_error(f"undecodable JSON ({exc}): {text[:300]!r}", scrub), retryable=False
        ) from exc


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else None,
        output_tokens=completion if isinstance(completion, int) else None,
        # OpenRouter and LiteLLM report the billed cost in the usage object.
        cost_usd=_number(raw.get("cost")),
    )


_CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key", "openai-organization", "openai-project")


def _redact_request(exc: httpx.RequestError, extra: Mapping[str, str]) -> None:
    # The httpx request hangs off the chained exception; its headers and URL carry the credentials.
    with contextlib.suppress(RuntimeError):
        request = exc.request
        headers = request.headers
        for name in {*_CREDENTIAL_HEADERS, *(k.lower() for k in extra)}:
            if name in headers:
                headers[name] = _REDACTED
        request.url = httpx.URL(scrub_url(str(request.url)))


class _ScrubURLs(logging.Filter):
    """Scrubs the URLs in httpx's log lines (``HTTP Request: POST <url> ...``) of their credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                scrub_url(str(arg)) if isinstance(arg, httpx.URL | str) and "://" in str(arg) else arg
                for arg in record.args
            )
        return True


_URL_FILTER = _ScrubURLs()
for _name in ("httpx", "httpcore"):
    if not any(isinstance(f, _ScrubURLs) for f in logging.getLogger(_name).filters):
        logging.getLogger(_name).addFilter(_URL_FILTER)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


async def _sse_lines(pieces: AsyncIterator[str]) -> AsyncIterator[str]:
    """Complete lines of an SSE body, split exactly where the SSE grammar says.

    Only CRLF, CR and LF end a line: ``str.splitlines`` (and httpx's ``aiter_lines``) would
    also break at U+0085 or U+2028, which may appear inside a JSON payload. A CR at the end
    of a piece is held back in case the next piece starts with its LF. An unterminated last
    line is incomplete and dropped.
    """
    pending = ""
    async for piece in pieces:
        pending += piece
        hold = pending.endswith("\r")
        *lines, rest = _LINE_BREAK.split(pending[:-1] if hold else pending)
        for line in lines:
            yield line
        pending = rest + ("\r" if hold else "")
    if pending.endswith("\r"):
        yield pending[:-1]


async def _sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` payloads of an SSE stream (``event``/``id``/comment lines are skipped).

    An event is dispatched at a blank line; an unterminated event at the end of the stream is
    incomplete and discarded, as the SSE specification says.
    """
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)


def _scrubbed(chunk: StreamChunk, scrub: Scrubber) -> StreamChunk:
    """A chunk without the credentials its text or tool input might carry."""
    return dataclasses.replace(chunk, content=scrub(chunk.content), tool_input=scrub(chunk.tool_input))


class _StreamAssembly:
    """Folds ``chat.completion.chunk`` objects into one ``chat.completion`` object."""

    def __init__(self, model: OpenAIChatModel) -> None:
        self._model = model
        self.chunks = 0
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._pieces: list[StreamChunk] = []
        self._emitted_calls = 0
        self._annotations: list[Any] = []

    def add(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk; True when it carried output (text, refusal or a tool-call fragment)."""
        self.chunks += 1
        if not self._head:
            self._head = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint") if k in chunk}
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        output = False
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            output = self._add_delta(delta) or output
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._calls_done(len(self._calls))
        return output

    def take_pieces(self, scrub: Scrubber) -> list[StreamChunk]:
        """The chunks completed since the last call (text deltas, finished tool calls)."""
        pieces, self._pieces = self._pieces, []
        return [_scrubbed(p, scrub) for p in pieces]

    def _calls_done(self, upto: int) -> None:
        """Tool calls with an index below ``upto`` are complete: one ``tool_use`` chunk each."""
        for index in sorted(self._calls)[self._emitted_calls : upto]:
            call = self._calls[index]
            text = "".join(call["arguments"])
            try:
                arguments = orjson.loads(text) if text.strip() else {}
            except orjson.JSONDecodeError:
                arguments = {"_raw": text}
            self._pieces.append(
                StreamChunk(
                    type="tool_use",
                    tool_name=call["name"],
                    tool_id=call["id"] or None,
                    tool_input=arguments if isinstance(arguments, dict) else {"_raw": text},
                )
            )
            self._emitted_calls += 1

    def _add_delta(self, delta: dict[str, Any]) -> bool:
        output = False
        if delta.get("content"):
            self._text.append(delta["content"])
            self._pieces.append(StreamChunk(type="text", content=delta["content"], is_delta=True))
            output = True
        if delta.get("refusal"):
            self._refusal.append(delta["refusal"])
            output = True
        if isinstance(delta.get("annotations"), list):
            self._annotations.extend(delta["annotations"])
        for fragment in delta.get("tool_calls") or []:
            index = int(fragment.get("index", 0))
            if index not in self._calls:
                self._calls_done(len(self._calls))  # a new call starts: the ones before it are complete
            call = self._calls.setdefault(index, {"id": "", "type": "function", "name": "", "arguments": []})
            call["id"] = fragment.get("id") or call["id"]
            function = fragment.get("function") or {}
            call["name"] = function.get("name") or call["name"]
            call["arguments"].append(function.get("arguments") or "")
            output = True
        return output

    def completion(self) -> dict[str, Any]:
        """The assembled object, shaped like a non-streamed ``chat.completion``."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text) if self._text or not self._calls else None,
            "refusal": "".join(self._refusal) if self._refusal else None,
            "annotations": self._annotations,
        }
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": call["type"],
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        return {
            **self._head,
            "object": "chat.completion",
            "model": self._head.get("model", self._model.model),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
