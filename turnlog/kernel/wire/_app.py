"""The recording proxy: an ASGI app that forwards LLM API calls and records them as they stream.

``ProxyApp`` serves every path. A model call (``_apis.route``) is forwarded (``_upstream``)
and recorded by a ``CallRecorder`` (``WireRecorder`` for ``turnlog proxy``, ``RunWire`` under
``run()``); anything else passes through unrecorded. Streams go on
event by event: each complete SSE event of the upstream is recorded (``RecordedCall.chunks``:
committed, or journaled for ``recover``), then forwarded with its exact bytes, so nothing is
buffered beyond one event and a client never holds an event the log cannot have. A client that goes away mid-stream cancels the upstream request and the call is
recorded as cancelled with what had arrived. See ``docs/proxy.md``.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, unquote

import anyio
import httpx
import orjson
from anyio.abc import TaskGroup

from turnlog.kernel.models import ModelResponse, StreamChunk
from turnlog.kernel.models._codec import StreamFault, WireError
from turnlog.kernel.models._secrets import Scrubber

from ._apis import DEFAULT_UPSTREAMS, Api, Route, error_body, fingerprint, route
from ._replay import MISS_STATUS, ReplayIndex, miss_body
from ._upstream import Started, Upstream, UpstreamAnswer, UpstreamRequest

__all__ = ["MAX_BODY", "CallRecorder", "ProxyApp", "ProxyConfig", "RecordedCall"]

_log = logging.getLogger("turnlog.kernel.wire")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The largest request body accepted (bytes); a larger one gets 413 in the API's shape.
MAX_BODY = 32 * 1024 * 1024
#: Headers that belong to one connection, never forwarded (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
#: Upstream response headers recorded with each call (``model.called.params._upstream``).
RECORDED_HEADERS = ("content-type", "request-id", "x-request-id", "retry-after", "openai-processing-ms")
_CREDENTIALS = ("authorization", "x-api-key", "x-goog-api-key", "api-key", "chatgpt-account-id")
_BRANCH_PREFIX = re.compile(r"^/b/([^/]+)(/.*)$")
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """How the proxy forwards.

    Attributes:
        upstreams: The base URL of each API's upstream (default: the real hosts).
        token: When set, every request must send it in ``x-turnlog-token``.
        max_body: The largest request body accepted, in bytes.
        timeout: The upstream timeout (connect, and between two reads).
        record_missing: With a replay index: a request without a recording goes upstream and
            is recorded (else it gets the documented miss).
    """

    upstreams: dict[Api, str] = field(default_factory=lambda: dict(DEFAULT_UPSTREAMS))
    token: str | None = None
    max_body: int = MAX_BODY
    timeout: httpx.Timeout = field(default_factory=lambda: httpx.Timeout(600.0, connect=10.0))
    record_missing: bool = False


class RecordedCall(Protocol):
    """One call being recorded: its stream events as they pass, then its end.

    ``WireCall`` (``turnlog proxy``: the call on its own branch) and ``RunWireCall`` (the call of
    a CLI under ``run()``: the chunks of the run's wire stream) are the two.
    """

    route: Route
    started: float
    scrub: Scrubber

    async def chunks(self, batch: Sequence[tuple[str, Sequence[StreamChunk], str | None]]) -> None:
        """Record stream events (exact SSE text, the codec's pieces, an error), before forwarding.

        Recorded means in the log after ``recover`` should the process die the next instant:
        committed, or written to a journal that ``recover`` imports.
        """

    async def flush(self) -> None:
        """Commit what ``chunks`` journaled, after it was forwarded (a no-op if it committed)."""

    async def settle(self) -> None:
        """Commit a call ``finish`` journaled, once its answer's last byte was forwarded (or a no-op)."""

    async def finish(self, answer: ModelResponse, upstream: dict[str, Any]) -> None:
        """Close the call with its answer."""

    async def fail(
        self,
        error_type: str,
        message: str,
        upstream: dict[str, Any],
        *,
        reason: Literal["error", "cancelled", "timeout"] = "error",
        answer: ModelResponse | None = None,
    ) -> None:
        """Close a failed or cancelled call."""


class CallRecorder(Protocol):
    """Where the calls the app forwards are recorded."""

    async def open_call(
        self, route: Route, body: dict[str, Any], name: str | None, scrub: Scrubber
    ) -> RecordedCall:
        """Record the start of a call (``name``: the branch the client named, if any)."""


class _TooLarge(Exception):
    pass


class ProxyApp:
    """The ASGI app of ``turnlog proxy`` (one set of upstream connection pools shared by every call)."""

    def __init__(
        self, config: ProxyConfig, recorder: CallRecorder, replay: ReplayIndex | None = None
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.replay = replay
        self.upstream = Upstream(config.timeout)

    async def aclose(self) -> None:
        """Close the upstream connections."""
        await self.upstream.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
        path = scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0] or scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        name = next((v for k, v in headers if k == "x-turnlog-branch"), None)
        named = _BRANCH_PREFIX.match(path)
        if named is not None:
            name, path = unquote(named.group(1)), named.group(2)
        api = _api_of(path, {k for k, _ in headers})
        if self.config.token is not None:
            given = next((v for k, v in headers if k == "x-turnlog-token"), "")
            if not hmac.compare_digest(given.encode(), self.config.token.encode()):
                await _reply(
                    send, 401, error_body(api, 401, "turnlog proxy: a valid x-turnlog-token is needed")
                )
                return
        try:
            body = await _read_body(receive, self.config.max_body)
        except _TooLarge:
            message = f"turnlog proxy: the request body is larger than {self.config.max_body} bytes"
            await _reply(send, 413, error_body(api, 413, message, "request_too_large"))
            return
        base = self.config.upstreams[api]
        target = path + (f"?{query}" if query else "")
        parsed = _json(_decoded(body, headers)) if body else None
        call_route = route(scope["method"], path, query, parsed)
        if call_route is None or not isinstance(parsed, dict):
            forwarded = _forwarded(scope["headers"], identity=False)
            await self._pass(self.upstream.request(scope["method"], base, target, forwarded, body), api, send)
            return
        scrub = Scrubber(_secrets(headers, query))
        if self.replay is not None:
            key = fingerprint(call_route, scrub(parsed))
            recording = self.replay.recordings.get(key)
            if recording is not None:
                await self.replay.answer(recording, send)
                return
            if not self.config.record_missing:
                await _reply(send, MISS_STATUS, miss_body(call_route, key))
                return
        # what the upstream sends back is recorded as it is, so ask for it uncompressed
        forwarded = _forwarded(scope["headers"], identity=True)
        request = self.upstream.request(scope["method"], base, target, forwarded, body)
        call, response = await self._open(request, call_route, parsed, name, scrub)
        await self._record(request, call, response, send, receive)

    async def _open(
        self,
        request: UpstreamRequest,
        call_route: Route,
        body: dict[str, Any],
        name: str | None,
        scrub: Scrubber,
    ) -> tuple[RecordedCall, UpstreamAnswer | httpx.RequestError]:
        """Record the call's start while its request goes upstream: the upstream's wait hides it.

        A request that goes direct is written first, then the call opened, then the answer's
        head read: no task of its own. One through a proxy the environment names is sent by a
        task while the call opens.
        """
        started = time.perf_counter()
        if self.upstream.direct(request):
            try:
                on_its_way: Started | httpx.RequestError = await self.upstream.start(request)
            except httpx.RequestError as exc:
                on_its_way = exc
            try:
                call = await self.recorder.open_call(call_route, body, name, scrub)
            except BaseException:
                if isinstance(on_its_way, Started):
                    await on_its_way.aclose()
                raise
            call.started = started  # latency and time to first token count from the request
            if isinstance(on_its_way, httpx.RequestError):
                return call, on_its_way
            try:
                return call, await on_its_way.answer()
            except httpx.RequestError as exc:
                return call, exc
        sent: list[UpstreamAnswer | httpx.RequestError] = []

        async def forward() -> None:
            try:
                sent.append(await self.upstream.send(request))
            except httpx.RequestError as exc:
                sent.append(exc)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                call = await self.recorder.open_call(call_route, body, name, scrub)
        except BaseException:
            with anyio.CancelScope(shield=True):
                if sent and isinstance(sent[0], UpstreamAnswer):
                    await sent[0].aclose()
            raise
        call.started = started
        return call, sent[0]

    async def _pass(self, request: UpstreamRequest, api: Api, send: Send) -> None:
        try:
            response = await self.upstream.send(request)
        except httpx.RequestError as exc:
            status, message = _unreachable(request, exc)
            await _reply(send, status, error_body(api, status, message))
            return
        try:
            await _start(send, response)
            async for piece in response.aiter_raw():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _record(
        self,
        request: UpstreamRequest,
        call: RecordedCall,
        response: UpstreamAnswer | httpx.RequestError,
        send: Send,
        receive: Receive,
    ) -> None:
        api = call.route.api
        if isinstance(response, httpx.RequestError):
            exc = response
            status, message = _unreachable(request, exc)
            await call.fail(type(exc).__name__, message, {"status": status}, reason="error")
            await _reply(send, status, error_body(api, status, message))
            return
        upstream = {
            "status": response.status_code,
            "headers": {k: response.headers[k] for k in RECORDED_HEADERS if k in response.headers},
        }
        gone = anyio.Event()
        streamed = _Streamed()  # the stream's assembly and fault, once it streams
        try:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    gone.set()
                    tg.cancel_scope.cancel()

                await _start(send, response)
                tail = b""
                try:
                    sse = response.headers.get("content-type", "").startswith("text/event-stream")
                    if response.status_code == 200 and sse:
                        await _stream(response, call, send, upstream, streamed, tg, watch)
                    else:
                        tg.start_soon(watch)
                        tail = await _whole(response, call, send, upstream)
                except httpx.RequestError as exc:
                    await call.fail(type(exc).__name__, f"the upstream answer broke off: {exc}", upstream)
                # the end of the answer reaches the client once the call is closed in the log,
                # or journaled whole (a non-streamed answer: committed right after, ``settle``)
                await send({"type": "http.response.body", "body": tail})
                await call.settle()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await call.settle()  # a journaled answer is committed whatever happened since
                await response.aclose()
                if gone.is_set():
                    answer = streamed.answer(call)
                    if streamed.fault is not None:
                        # the upstream's error event reached the client, which left on it (an SDK
                        # raises there, while LiteLLM keeps the stream open): it failed upstream,
                        # as it does when the stream ends after that event (``_stream``)
                        await call.fail("StreamFault", streamed.fault.summary, upstream, answer=answer)
                    elif answer is not None and streamed.complete:
                        # a client that leaves once the final event reached it (Codex reads up
                        # to response.completed) got the whole answer: the call succeeded
                        await call.finish(answer, upstream)
                    else:
                        await call.fail(
                            "ClientDisconnected",
                            "the client went away mid-answer",
                            upstream,
                            reason="cancelled",
                        )


@dataclass
class _Streamed:
    """What a streamed call's close needs of its stream, should the client leave before the end."""

    assembly: Any = None
    """The codec's assembly of the stream's events (None until the stream starts)."""
    fault: StreamFault | None = None
    """The error an event of the stream carried (the last one, should there be several)."""

    @property
    def complete(self) -> bool:
        """Every event of the answer arrived."""
        return self.assembly is not None and self.assembly.missing() is None

    def answer(self, call: RecordedCall) -> ModelResponse | None:
        """What arrived of the answer, if the codec can make one of it."""
        if self.assembly is None:
            return None
        try:
            answer: ModelResponse = call.route.wire.parse(
                self.assembly.result(), model=call.route.model, provider=call.route.api
            )
        except (WireError, StreamFault, KeyError, TypeError, ValueError):
            return None
        return answer


async def _stream(
    response: UpstreamAnswer,
    call: RecordedCall,
    send: Send,
    upstream: dict[str, Any],
    streamed: _Streamed,
    tg: TaskGroup,
    watch: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Record and forward an event stream, one read of the upstream at a time (read in ``tg``).

    The events that came with the answer's head go first, before ``watch`` (the client's
    departure) and the reading task start: nothing waits for a socket before them, and the
    first byte does not wait for two tasks' first steps.
    """
    assembly = streamed.assembly = call.route.wire.assembly(call.route.model)
    pending = response.take()
    waiting = True  # for the stream's first event
    if pending:
        sent, pending = await _forward_events(pending, streamed, call, send, 1)
        waiting = not sent
    tg.start_soon(watch)
    reads = _Reads(response)
    tg.start_soon(reads.run)
    if not waiting:  # the rest of what came with the head, as the events of one read
        _, pending = await _forward_events(pending, streamed, call, send)
        await call.flush()
    while (piece := await reads.next()) is not None:
        pending += piece
        if waiting:
            # the first event goes alone, not after the whole burst a fast upstream sent
            # with it: the client's time to first byte pays for one event's recording
            sent, pending = await _forward_events(pending, streamed, call, send, 1)
            waiting = not sent
        _, pending = await _forward_events(pending, streamed, call, send)
        # what was journaled and forwarded is committed now, while the next events gather in
        # the socket: they are read, recorded and forwarded together after
        await call.flush()
    if pending:
        await send({"type": "http.response.body", "body": pending, "more_body": True})
    answer = streamed.answer(call)
    if streamed.fault is not None:
        await call.fail("StreamFault", streamed.fault.summary, upstream, answer=answer)
    elif answer is None or not streamed.complete:
        await call.fail(
            "IncompleteStream", f"the stream ended without {assembly.missing()}", upstream, answer=answer
        )
    else:
        await call.finish(answer, upstream)


async def _forward_events(
    pending: bytes,
    streamed: _Streamed,
    call: RecordedCall,
    send: Send,
    most: int | None = None,
) -> tuple[int, bytes]:
    """Record the complete events of ``pending`` (``most`` of them) in one go, then forward them.

    Returns how many were and the bytes left; an event that carries an error sets ``streamed.fault``.
    """
    assembly = streamed.assembly
    batch: list[tuple[str, list[StreamChunk], str | None]] = []
    forwarded = 0
    while (most is None or len(batch) < most) and (found := _EVENT_END.search(pending, forwarded)):
        text = pending[forwarded : found.end()].decode("utf-8", errors="replace")
        forwarded = found.end()
        error = None
        for data in _data(text):
            try:
                assembly.add(None if data == assembly.end_marker else orjson.loads(data))
            except StreamFault as exc:
                streamed.fault, error = exc, exc.summary
            except (WireError, orjson.JSONDecodeError) as exc:
                error = f"unreadable stream event: {exc}"
        batch.append((text, assembly.take_pieces(), error))
    if batch:
        await call.chunks(batch)
        await send({"type": "http.response.body", "body": pending[:forwarded], "more_body": True})
    return len(batch), pending[forwarded:]


class _Reads:
    """An upstream answer's body, read by a task of its own, handed over one socket read at a time.

    httpcore (behind an environment proxy) yields a chunked body one chunk at a time, so a read
    that brought twenty events would be twenty pieces, each recorded in its own commit (the
    own client yields what one read brought, decoded). The reading task does not stop between
    the pieces of one read (only a read of the socket suspends it), so ``next`` hands over every
    piece that read brought, joined: one commit per read of the upstream, as many events as it
    brought, and while a commit runs the next events wait in the socket to be read together.
    """

    def __init__(self, response: UpstreamAnswer) -> None:
        self.response = response
        self.pieces: list[bytes] = []
        self.ready = anyio.Event()
        self.done = False
        self.error: httpx.RequestError | None = None

    async def run(self) -> None:
        """Read the body to its end (a broken answer's error is raised by ``next``)."""
        try:
            async for piece in self.response.aiter_raw():
                self.pieces.append(piece)
                self.ready.set()
        except httpx.RequestError as exc:
            self.error = exc
        finally:
            self.done = True
            self.ready.set()

    async def next(self) -> bytes | None:
        """What arrived since the last call (waiting for something); None at the end of the body.

        Raises:
            httpx.RequestError: the answer broke off (after every piece read before was handed over).
        """
        await self.ready.wait()
        if self.pieces:
            piece = b"".join(self.pieces)
            self.pieces.clear()
            if not self.done:
                self.ready = anyio.Event()
            return piece
        if self.error is not None:
            raise self.error
        return None


async def _whole(response: UpstreamAnswer, call: RecordedCall, send: Send, upstream: dict[str, Any]) -> bytes:
    """Forward and record an answer that is not an event stream; return its last piece, unsent.

    The last piece goes out with the end of the answer once the call is closed in the log: with
    a ``content-length`` a client holds the whole answer at its last byte, which must not be
    before the answer is recorded.
    """
    parts: list[bytes] = []
    async for piece in response.aiter_raw():
        if parts:
            await send({"type": "http.response.body", "body": parts[-1], "more_body": True})
        parts.append(piece)
    tail = parts[-1] if parts else b""
    whole = b"".join(parts)
    raw = _json(whole)
    codec = call.route.wire
    if response.status_code >= 400:
        # an error page that is not JSON (a gateway's HTML) is named by its first characters
        message = codec.error_parts(raw)[0] if raw is not None else whole[:300].decode(errors="replace")
        await call.fail(f"HTTP {response.status_code}", call.scrub(message), upstream)
        return tail
    try:
        if isinstance(raw, list):  # Gemini's stream without alt=sse is one JSON array
            assembly = codec.assembly(call.route.model)
            for item in raw:
                assembly.add(item)
            raw = assembly.result()
        answer = codec.parse(raw, model=call.route.model, provider=call.route.api)
    except (WireError, StreamFault) as exc:
        await call.fail("ResponseFormatError", str(exc), upstream)
        return tail
    await call.finish(answer, upstream)
    return tail


def _data(event: str) -> list[str]:
    lines = [line[5:].removeprefix(" ") for line in event.splitlines() if line.startswith("data:")]
    return ["\n".join(lines)] if lines else []


async def _start(send: Send, response: UpstreamAnswer) -> None:
    headers = [
        (k.lower(), v) for k, v in response.raw_headers if k.decode("latin-1").lower() not in HOP_BY_HOP
    ]
    if "content-length" in response.headers and "content-encoding" not in response.headers:
        headers.append((b"content-length", response.headers["content-length"].encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})


async def _reply(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise anyio.get_cancelled_exc_class()
        piece = message.get("body", b"")
        size += len(piece)
        if size > limit:
            raise _TooLarge
        parts.append(piece)
        if not message.get("more_body"):
            return b"".join(parts)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _decoded(body: bytes, headers: list[tuple[str, str]]) -> bytes:
    """The request body as JSON text: Codex signed in with ChatGPT compresses it with zstd.

    The body goes upstream as it came; only what is read and recorded is decompressed. A body
    that does not decompress goes upstream as it came, unrecorded (it is not JSON), and the
    recorder says so on its log (``turnlog.kernel.wire``; the body itself is never logged).
    """
    encoding = next((v.strip().lower() for k, v in headers if k == "content-encoding"), "")
    if encoding == "zstd":
        import zstandard  # only Codex's ChatGPT calls need it: imported when one comes

        try:
            return zstandard.ZstdDecompressor().decompress(body, max_output_size=MAX_BODY)
        except zstandard.ZstdError as exc:
            _log.warning(
                "wire recorder: a zstd request body of %d bytes does not decompress (%s): "
                "forwarded as sent, not recorded",
                len(body),
                exc,
            )
            return body
    return body


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _api_of(path: str, headers: set[str]) -> Api:
    """Which API (and so which upstream) a request is for: its path, else its headers.

    Paths shared by several APIs (``/v1/models``) go where the client's headers point: the
    Anthropic SDKs always send ``anthropic-version``, Google's send ``x-goog-api-key``. The
    ChatGPT backend is everything under ``/backend-api/``, Code Assist every ``/v1internal:``
    method.
    """
    if path.startswith("/backend-api/"):
        return "chatgpt"
    if path.startswith("/v1internal:"):
        return "code_assist"
    if path.startswith("/v1/messages") or path == "/v1/complete":
        return "anthropic"
    if path.startswith(("/v1beta/", "/v1alpha/")) or ("/models/" in path and ":" in path):
        return "gemini"
    if "anthropic-version" in headers:
        return "anthropic"
    if "x-goog-api-key" in headers or "x-goog-api-client" in headers:
        return "gemini"
    return "openai"


def _secrets(headers: list[tuple[str, str]], query: str) -> list[str]:
    found = []
    for key, value in headers:
        if key in _CREDENTIALS:
            found.append(value)
            found.append(value.removeprefix("Bearer ").removeprefix("bearer "))
    found += [v for k, v in parse_qsl(query) if k.lower() in ("key", "api_key", "api-key")]
    return [s for s in found if len(s) >= 8]


def _forwarded(headers: list[tuple[bytes, bytes]], *, identity: bool) -> list[tuple[bytes, bytes]]:
    """The client's headers that go upstream: all but hop-by-hop and turnlog's own.

    ``identity``: ``accept-encoding: identity`` in place of the client's (a recorded answer is
    recorded as it comes, so it must come uncompressed).
    """
    out = []
    for key, value in headers:
        name = key.decode("latin-1").lower()
        if name in HOP_BY_HOP or name.startswith("x-turnlog-"):
            continue
        if identity and name == "accept-encoding":
            continue
        out.append((key, value))
    if identity:
        out.append((b"accept-encoding", b"identity"))
    return out


def _unreachable(request: UpstreamRequest, exc: httpx.RequestError) -> tuple[int, str]:
    where = request.where
    if isinstance(exc, httpx.TimeoutException):
        return 504, f"turnlog proxy: the upstream {where} timed out ({type(exc).__name__})"
    return 502, f"turnlog proxy: the upstream {where} is unreachable ({type(exc).__name__}: {exc})"
