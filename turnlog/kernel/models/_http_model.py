"""The HTTP transport every API provider shares: keys, retries, credential scrubbing, streams.

``HTTPChatModel`` implements ``ChatModel`` over httpx for one API, named by its ``codec``
(``ChatCompletionsCodec``, ``AnthropicCodec``, ``GeminiCodec``): the codec builds the body and
reads the answer; this class sends it, retries per the ``RetryPolicy``, reads SSE streams
(the loop is written once, here), and translates every foreign failure once: httpx exceptions
and HTTP error statuses become the ``ProviderError`` tree of ``turnlog.kernel.models``, a
codec's complaint about an answer becomes ``ResponseFormatError``, an error event inside a
stream ``ServerError`` (or ``RateLimitError``). The API key lives in a private attribute; it,
every configured header value and the credentials of ``base_url`` (user-info, secret-looking
query parameters) are scrubbed from every error, raw response, repr and httpx log line.

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

from ._codec import Assembly, Codec, StreamFault, WireError
from ._contract import BaseChatModel, ModelProfile
from ._errors import (
    MissingAPIKey,
    ModelRequestsBlocked,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ResponseFormatError,
    ServerError,
)
from ._http import (
    CLASS_DEFAULT,
    ClassDefault,
    Failure,
    Secret,
    is_loopback,
    redact_request,
    scrubbed,
    with_reported,
)
from ._retry import RetryPolicy, parse_retry_after
from ._secrets import Scrubber, scrub_url, url_secrets
from ._sse import sse_data, sse_lines
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk

__all__ = ["DEFAULT_TIMEOUT", "HTTPChatModel", "model_requests_allowed", "result_chunk"]

#: Like the official client: 10 minutes for a whole read, 5 seconds to connect.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)

_ALLOW_ENV = "TURNLOG_ALLOW_MODEL_REQUESTS"


def model_requests_allowed() -> bool:
    """False when ``TURNLOG_ALLOW_MODEL_REQUESTS`` is 0/false/no/off (only loopback allowed then)."""
    value = os.environ.get(_ALLOW_ENV, "1").strip().lower()
    return value not in {"0", "false", "no", "off"}


def result_chunk(answer: ModelResponse) -> StreamChunk:
    """The closing ``result`` chunk of a streamed call: usage, finish reason, served model."""
    return StreamChunk(
        type="result",
        content=answer.text,
        metadata={
            "usage": answer.usage.to_dict(),
            "cache_read_tokens": answer.cache_read_tokens,
            "cache_write_tokens": answer.cache_write_tokens,
            "finish_reason": answer.finish_reason,
            "model": answer.model,
        },
    )


class HTTPChatModel(BaseChatModel):
    """A client of one model API over HTTP; subclasses name the API's ``codec`` and defaults.

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
        class MyAPIModel(HTTPChatModel):
            codec = MyCodec()  # a Codec: body, path, answer, stream assembly
            default_provider = "mine"
            default_base_url = "https://api.example.com"
            default_api_key_env = "MY_API_KEY"
        ```
    """

    #: ``invoke(request, on_chunk=...)`` hands the SSE deltas of a streamed call to a sink.
    streams_chunks = True

    #: The wire format of the API.
    codec: ClassVar[Codec]
    #: The request parameters a verb may pass (``communicate(..., temperature=0)``): anything
    #: else is refused before it is sent, with a "did you mean" (``turnlog.kernel._options``).
    #: Each provider sets its codec's ``ACCEPTED_PARAMETERS``; an instance may widen it
    #: (``model.request_params |= {"top_k"}``) or turn the check off (``None``).
    request_params: frozenset[str] | None = None
    #: The provider name, API root and key variable used when the caller gives none.
    default_provider: ClassVar[str]
    default_base_url: ClassVar[str]
    default_api_key_env: ClassVar[str | None]

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
    def endpoint(self) -> str:
        """The endpoint recorded with each call (the codec's, e.g. ``chat/completions``)."""
        return self.codec.endpoint

    @property
    def profile(self) -> ModelProfile:
        """Streams its deltas (``streams_chunks``), records the codec's endpoint, takes ``request_params``."""
        return ModelProfile(
            streams_chunks=self.streams_chunks,
            endpoint=self.endpoint,
            request_params=self.request_params,
            transport=type(self).__name__,
        )

    @property
    def url(self) -> str:
        """The URL of a non-streamed call (the API's path joins the base path; a query stays a query)."""
        return self._target(False)

    def _target(self, stream: bool) -> str:
        """The URL one request is sent to (some APIs have a streaming endpoint of their own)."""
        path, query = self.codec.path(self.model, stream=stream)
        parts = urlsplit(self.base_url)
        joined = "&".join(q for q in (parts.query, query) if q)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{path}", query=joined))

    async def __aenter__(self) -> HTTPChatModel:
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
        """The JSON body sent for ``request`` (the codec's; parameters that name secrets are dropped).

        Raises:
            UsageError: A parameter or message the API cannot take.
        """
        return self.codec.body(self.model, request)

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
            **self.codec.api_headers(),
            **self._headers,
        }
        if key:
            headers.update(self.codec.auth_headers(key))
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
            ProviderConnectionError: Transport failure, or a stream cut before its end.
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
                answer = self._parse(self._decode_json(response.text, scrub), scrub)
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
        if retry_after is None:
            retry_after = self.codec.retry_after(body)
        message, code = self.codec.error_parts(body)
        text = message[:1000]
        # Some servers send the status again as the code ("code": "400" or 400): say it once.
        label = f" {code}" if code not in (None, "", status, str(status)) else ""
        summary = f"{self.provider} {self.model}: HTTP {status}{label}: {text}"
        cls = self.codec.error_class(status, code, text, body)
        error = cls(
            summary,
            status_code=status,
            body=body,
            retry_after=retry_after,
            provider=self.provider,
            model=self.model,
        )
        retryable = self.retry.should_retry_status(status, response.headers)
        if retry_after is not None and retry_after > self.retry.max_retry_after:
            # A wait named in the body (Gemini's RetryInfo) too long to honour: surfaced, as a
            # header's would be, instead of retrying sooner than the server asked.
            retryable = False
        return Failure(error, retryable=retryable, retry_after=retry_after)

    async def _read_stream(
        self, response: httpx.Response, started: float, scrub: Scrubber, on_chunk: ChunkSink | None = None
    ) -> ModelResponse:
        assembly = self.codec.assembly(self.model)
        ttft: float | None = None
        try:
            async for data in sse_data(sse_lines(response.aiter_text())):
                if await self._fold(assembly, data, scrub, on_chunk, quiet=ttft is None) and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000.0
                if assembly.stopped:
                    break
        except httpx.RequestError as exc:
            raise self._stream_cut(exc, assembly.count, assembly.unit) from exc
        missing = assembly.missing()
        if missing is not None:
            raise Failure(
                ProviderConnectionError(
                    f"{self.provider} {self.model}: the stream ended before {missing} "
                    f"after {assembly.count} {assembly.unit} (truncated answer discarded)",
                    provider=self.provider,
                    model=self.model,
                ),
                retryable=False,
            )
        return dataclasses.replace(self._parse(assembly.result(), scrub), ttft_ms=ttft)

    async def _fold(
        self, assembly: Assembly, data: str, scrub: Scrubber, on_chunk: ChunkSink | None, *, quiet: bool
    ) -> bool:
        """Fold one ``data`` payload; True when it carried output.

        An error event while the stream is still ``quiet`` (no output yet: nothing reached the
        caller's sink) is retried like the same error answered as a status; after output it never is.
        """
        if assembly.end_marker is not None and data.strip() == assembly.end_marker:
            assembly.add(None)
            return False
        payload = self._decode_json(data, scrub)
        try:
            output = assembly.add(payload)
        except WireError as exc:
            raise Failure(self._format_error(str(exc), scrub), retryable=False) from exc
        except StreamFault as fault:
            cls = RateLimitError if fault.rate_limited else ServerError
            error = cls(
                f"{self.provider} {self.model}: {scrub(fault.summary)}",
                status_code=200,
                body=scrub(fault.detail),
                provider=self.provider,
                model=self.model,
            )
            status = 429 if fault.rate_limited else 529
            retryable = quiet and self.retry.should_retry_status(status, {})
            raise Failure(error, retryable=retryable) from None
        if on_chunk is not None:
            for piece in assembly.take_pieces():
                await on_chunk(scrubbed(piece, scrub))
        return output

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

    def _parse(self, raw: Any, scrub: Scrubber) -> ModelResponse:
        # Scrub first: text, model name, tool arguments, everything derived comes from the clean copy.
        try:
            return self.codec.parse(scrub(raw), model=self.model, provider=self.provider)
        except WireError as exc:
            raise Failure(self._format_error(str(exc), scrub), retryable=False) from exc

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
