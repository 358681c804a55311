"""A loopback HTTP server speaking the Anthropic, OpenAI Responses and Gemini APIs from one script.

``FakeUpstreamServer`` is what the real coding-agent CLIs (Claude Code, Codex, Gemini CLI) talk to
in the tests: a real HTTP/1.1 server on 127.0.0.1 that routes each request by its path to the API
module that speaks its wire format:

- ``HEAD /`` (Claude Code's connectivity check) answers 200;
- ``POST /v1/messages[?beta=true]`` and ``/v1/messages/count_tokens``: ``_fake_anthropic``;
  a model request the real API would refuse is answered as it would (``_fake_anthropic_checks``,
  ``_fake_gemini_checks``: 400 with the real error shape) before the script is consulted;
- ``POST /v1/responses`` and the ChatGPT backend's ``/backend-api/codex/responses`` (Codex signed
  in with ChatGPT; its zstd-compressed bodies are read): ``_fake_responses``; ``GET
  /backend-api/wham/accounts/check`` answers the signed-in account without a routing constraint;
- ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` / ``:generateContent`` /
  ``:countTokens`` (and Vertex AI's ``/v1beta1/[projects/{p}/locations/{l}/]publishers/google/
  models/{model}:...``): ``_fake_gemini``. Gemini CLI's model router asks ``generateContent`` for a
  ``model_choice``; unless a script entry with a ``match`` claims it, the server answers it
  itself (``flash``) without using up an entry;
- Code Assist (Gemini CLI signed in with Google): ``POST /v1internal:streamGenerateContent`` /
  ``:generateContent`` / ``:countTokens`` are the Gemini API in an envelope (the ``request`` of the
  body is answered, each answer and event wrapped in ``{"response", "traceId"}``);
  ``:loadCodeAssist`` names a user on the standard tier with a project, the other methods answer
  ``{}``.

For each model request the server takes the first unused entry whose ``match`` fits; when none
does, the first unused entry without ``match``; when none is left, a 400 error in the API's shape
naming the exhausted script. Every request is recorded (credentials reduced to a digest) in
``server.requests``, at ``GET /_fake/requests`` and optionally in a JSONL file; ``POST
/_fake/script`` replaces the script of a running server (a JSON list of entries).

The server runs on the caller's event loop (``async with``) or on its own thread
(``UpstreamThread``), so that synchronous test fixtures and subprocesses can use it. The HTTP
plumbing (reading requests, chunked SSE writing, the connection tasks) is ``_loopback``'s,
shared with ``FakeOpenAIServer``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from . import _fake_anthropic, _fake_anthropic_checks, _fake_gemini, _fake_gemini_checks, _fake_responses
from ._fake_upstream_script import (
    Api,
    RequestView,
    ScriptError,
    UpstreamEntry,
    UpstreamError,
    matches,
)
from ._fake_upstream_wire import Reply
from ._loopback import (
    HTTPRequest,
    LoopbackServer,
    append_jsonl,
    end_stream,
    open_stream,
    request_fields,
    response_head,
    send,
    sse,
    write_frames,
)
from ._loopback_script import ScriptSlots, coerce_entries

__all__ = ["FakeUpstreamServer", "UpstreamThread"]

_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key", "chatgpt-account-id")
#: The ChatGPT backend's Responses API (Codex signed in with ChatGPT).
CHATGPT_RESPONSES = "/backend-api/codex/responses"
#: Code Assist's model methods (Gemini CLI signed in with Google): the Gemini API in an envelope.
_CODE_ASSIST = re.compile(r"^/v1internal:(streamGenerateContent|generateContent|countTokens)$")
#: The project Code Assist's ``loadCodeAssist`` names for the signed-in user.
CODE_ASSIST_PROJECT = "fake-code-assist-project"


def _route(method: str, path: str) -> tuple[Api, str] | None:
    """(api, operation) of a model request path, or None."""
    bare = path.split("?", 1)[0].rstrip("/")
    if method != "POST":
        return None
    if bare == "/v1/messages":
        return ("anthropic", "messages")
    if bare == "/v1/messages/count_tokens":
        return ("anthropic", "count_tokens")
    if (bare.endswith("/responses") and bare.startswith("/v1")) or bare == CHATGPT_RESPONSES:
        return ("responses", "responses")
    assist = _CODE_ASSIST.match(bare)
    if assist is not None:
        return ("gemini", assist.group(1))
    gemini = _fake_gemini.operation(bare)
    if gemini is not None:
        return ("gemini", gemini)
    return None


class FakeUpstreamServer(LoopbackServer):
    """A scripted Anthropic / OpenAI Responses / Gemini API server on a loopback port.

    Args:
        script: Entries (dicts or ``UpstreamEntry``), or the path of a JSON/JSONL script file.
        host: A loopback address to bind (default 127.0.0.1).
        port: The port; 0 picks a free one.
        api_key: When set, requests must carry this key (each API's own header) or get that
            API's answer to a bad key (Gemini: 400 ``API_KEY_INVALID``, the others 401).
        record_path: Also append every recorded request to this JSONL file.
        log: Write one line per request (method, path, status, entry) to this stream.

    Example:
        ```python
        async with FakeUpstreamServer([{"text": "Hello!"}]) as server:
            env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-test"}
        ```
    """

    name = "fake-upstream"
    noun = "fake upstream"

    def __init__(
        self,
        script: str | Path | Sequence[Mapping[str, Any] | UpstreamEntry] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        record_path: str | Path | None = None,
        log: TextIO | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self._script = ScriptSlots(coerce_entries(script, UpstreamEntry))
        self._api_key = api_key
        self._record_path = Path(record_path) if record_path else None
        self._log = log
        self._ids = itertools.count(int(time.time() * 1000) % 10**9)
        self.requests: list[dict[str, Any]] = []
        """Every request received, in order."""

    # -- addresses ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>``: ``ANTHROPIC_BASE_URL`` and ``GOOGLE_GEMINI_BASE_URL``."""
        return self._root_url

    @property
    def openai_base_url(self) -> str:
        """``http://<host>:<port>/v1``: an OpenAI client's (and Codex's provider) ``base_url``."""
        return f"{self.base_url}/v1"

    # -- script ------------------------------------------------------------------------------

    def set_script(self, script: str | Path | Sequence[Mapping[str, Any] | UpstreamEntry]) -> None:
        """Replace the script (entries not yet used are dropped); the request record is kept."""
        self._script = ScriptSlots(coerce_entries(script, UpstreamEntry))

    def unused(self) -> list[UpstreamEntry]:
        """Entries with a finite ``times`` that were not used up."""
        return self._script.unused()

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` when some finite entry was not used up."""
        left = self._script.unused_indexes()
        if left:
            raise AssertionError(f"fake-upstream: script entries {left} were never served")

    def model_requests(self, api: Api | None = None) -> list[dict[str, Any]]:
        """Recorded requests that were answered from the script (not built-in ones), optionally of one API."""
        return [r for r in list(self.requests) if r["entry"] is not None and (api is None or r["api"] == api)]

    # -- one request -------------------------------------------------------------------------

    async def serve_one(self, request: HTTPRequest, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        keep_alive = request.keep_alive
        bare = request.bare_path
        if bare == "/_fake/requests" and request.method == "GET":
            await _write_json(writer, 200, list(self.requests), {}, close=not keep_alive)
            return keep_alive
        if bare == "/_fake/script" and request.method == "POST":
            try:
                self.set_script(request.json if isinstance(request.json, list) else [])
            except ScriptError as exc:
                await _write_json(writer, 400, {"error": str(exc)}, {}, close=not keep_alive)
                return keep_alive
            await _write_json(writer, 200, {"entries": len(self._script)}, {}, close=not keep_alive)
            return keep_alive
        route = _route(request.method, request.path)
        record = self._record(request, route, writer.get_extra_info("peername"))
        if route is None:
            status, reply = self._other(request)
            record["response_status"] = status
            self._persist(record)
            if request.method == "HEAD":
                writer.write(
                    response_head(
                        status, {"content-length": "0", **({"connection": "close"} if not keep_alive else {})}
                    )
                )
                await writer.drain()
                return keep_alive
            await _write_json(writer, status, reply, {}, close=not keep_alive)
            return keep_alive
        api, operation = route
        number = next(self._ids)
        if bare.startswith("/v1internal:"):
            answer, entry = self._answer(api, operation, _code_assist_inner(request), number, record)
            if operation != "countTokens":  # Code Assist answers a count as it is
                answer = _code_assist_envelope(answer, number)
        else:
            answer, entry = self._answer(api, operation, request, number, record)
        record["response_status"] = answer.status
        self._persist(record)
        if entry is not None and entry.delay_ms:
            await asyncio.sleep(entry.delay_ms / 1000.0)
        if answer.frames is None:
            await _write_json(writer, answer.status, answer.body, answer.headers, close=not keep_alive)
            return keep_alive
        return await _stream(writer, answer, entry, keep_alive)

    def _other(self, request: HTTPRequest) -> tuple[int, Any]:
        """Requests that are not model calls: the root check, model lists, unknown paths.

        Also what a subscription login asks first: the ChatGPT backend's account check (the
        signed-in account, without a routing constraint) and Code Assist's ``loadCodeAssist``
        (a user on the standard tier with a project); Code Assist's other ``v1internal``
        methods answer an empty object.
        """
        bare = request.bare_path
        if request.method in ("HEAD", "GET") and bare == "":
            return 200, {}
        if request.method == "GET" and bare.endswith("/wham/accounts/check"):
            account = request.headers.get("chatgpt-account-id", "")
            entry = {"id": account, "workspace_backend_origin": "https://chatgpt.com"}
            return 200, {"accounts": [{**entry, "account_routing_override": "NO_CONSTRAINT"}]}
        if request.method == "POST" and bare == "/v1internal:loadCodeAssist":
            tier = {"id": "standard-tier", "name": "Gemini Code Assist", "hasOnboardedPreviously": True}
            return 200, {"currentTier": tier, "cloudaicompanionProject": CODE_ASSIST_PROJECT}
        if request.method == "POST" and bare.startswith("/v1internal:"):
            return 200, {}
        if request.method == "GET" and bare in ("/v1/models", "/v1beta/models"):
            return 200, {"object": "list", "data": [], "models": []}
        return 404, {
            "error": {
                "message": f"fake-upstream: no such endpoint: {request.method} {request.path}",
                "type": "not_found_error",
            }
        }

    def _answer(
        self, api: Api, operation: str, request: HTTPRequest, number: int, record: dict[str, Any]
    ) -> tuple[Reply, UpstreamEntry | None]:
        """The reply to a model request and the script entry it came from (None: not scripted)."""
        module = {"anthropic": _fake_anthropic, "responses": _fake_responses, "gemini": _fake_gemini}[api]
        denied = self._check_key(api, request, number)
        if denied is not None:
            return denied, None
        if operation == "count_tokens":
            return Reply(200, body=_fake_anthropic.count_tokens(request.json)), None
        if api == "gemini" and operation == "countTokens":
            return Reply(200, body=_fake_gemini.count_tokens(request.json)), None
        view: RequestView = (
            module.view(request.json, request.path) if api == "gemini" else module.view(request.json)
        )
        record["model"] = view.model
        refused = _refusal(api, request, view)
        if refused is not None:
            record["refused"] = refused.message  # as the real service would: nothing of the script is used
            return module.error_reply(400, refused, number), None
        claimed = self._script.claim(
            lambda entry: entry.match is not None and matches(entry.match, view, request.text),
            fallback=not (api == "gemini" and _fake_gemini.is_routing(request.json)),
        )
        if claimed is None:
            if api == "gemini" and _fake_gemini.is_routing(request.json):
                record["builtin"] = "routing"
                return _fake_gemini.routing_reply(request.json, view, number), None
            return module.error_reply(400, _exhausted(record["seq"]), number), None
        index, entry = claimed
        record["entry"] = index
        if entry.status != 200:
            answer = module.error_reply(entry.status, entry.error, number, entry.retry_after)
            answer.headers.update(entry.headers)
            return answer, entry
        return module.reply(entry, view, number), entry

    def _check_key(self, api: Api, request: HTTPRequest, number: int) -> Reply | None:
        if self._api_key is None:
            return None
        headers = request.headers
        bearer = headers.get("authorization", "")
        offered = {bearer.partition(" ")[2]} if bearer.lower().startswith("bearer ") else set()
        if api == "anthropic":
            offered.add(headers.get("x-api-key", ""))
        if api == "gemini":
            offered.add(headers.get("x-goog-api-key", ""))
            offered.update(parse_qs(urlsplit(request.path).query).get("key", []))
        if self._api_key in offered:
            return None
        if api == "anthropic":
            return _fake_anthropic.error_reply(401, None, number)
        if api == "responses":
            return _fake_responses.error_reply(401, None, number)
        return _fake_gemini.error_reply(400, _fake_gemini.BAD_KEY, number)

    def _record(self, request: HTTPRequest, route: tuple[Api, str] | None, peer: object) -> dict[str, Any]:
        headers = {k: v for k, v in request.headers.items() if k not in _CREDENTIAL_HEADERS}
        credentials = {
            name: {"present": True, "sha256": hashlib.sha256(request.headers[name].encode()).hexdigest()}
            for name in _CREDENTIAL_HEADERS
            if name in request.headers
        }
        record: dict[str, Any] = {
            **request_fields(len(self.requests) + 1, request, peer),
            "api": route[0] if route else None,
            "operation": route[1] if route else None,
            "model": None,
            "headers": headers,
            "credentials": credentials,
            "body": request.json,
            "body_text": None if request.json is not None else request.text,
            "entry": None,
            "builtin": None,
            "response_status": None,
        }
        self.requests.append(record)
        return record

    def _persist(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            print(
                f"fake-upstream: {record['method']} {record['path']} -> {record['response_status']}"
                f" (entry {record['entry']}{', ' + record['builtin'] if record['builtin'] else ''})",
                file=self._log,
                flush=True,
            )
        append_jsonl(self._record_path, record)


def _refusal(api: Api, request: HTTPRequest, view: RequestView) -> UpstreamError | None:
    """The 400 the real service would answer to this request (None: it would take it)."""
    if api == "anthropic":
        beta = "beta=true" in urlsplit(request.path).query or "anthropic-beta" in request.headers
        return _fake_anthropic_checks.problem(request.json, beta=beta)
    if api == "gemini":
        return _fake_gemini_checks.problem(request.json, view.model)
    return None


def _code_assist_inner(request: HTTPRequest) -> HTTPRequest:
    """The Gemini request inside a Code Assist request (its ``request``, under a Gemini path)."""
    body = request.json if isinstance(request.json, dict) else {}
    inner = dict(body["request"]) if isinstance(body.get("request"), dict) else {}
    inner.pop("session_id", None)  # Code Assist's own field of the wrapped request
    query = request.path.partition("?")[2]
    path = f"/v1beta/models/{body.get('model') or ''}:{request.bare_path.partition(':')[2]}"
    headers = {k: v for k, v in request.headers.items() if k != "content-encoding"}
    return HTTPRequest(
        request.method, path + (f"?{query}" if query else ""), headers, json.dumps(inner).encode()
    )


def _code_assist_envelope(answer: Reply, number: int) -> Reply:
    """A Gemini answer as Code Assist sends it: each answer and stream event in ``response``."""
    if answer.status != 200:
        return answer  # errors are Google's error objects, without the envelope
    trace = f"fake-trace-{number}"
    if answer.frames is None:
        answer.body = {"response": answer.body, "traceId": trace}
        return answer
    frames = []
    for frame in answer.frames:
        text = frame.data.decode()
        payload = json.loads(text.partition("data: ")[2])
        frames.append(sse({"response": payload, "traceId": trace}, crlf=True, paced=frame.paced))
    answer.frames = frames
    return answer


def _exhausted(seq: int) -> UpstreamError:
    return UpstreamError(message=f"fake-upstream: no scripted response left for request {seq}")


async def _write_json(
    writer: asyncio.StreamWriter, status: int, body: Any, headers: Mapping[str, str], *, close: bool
) -> None:
    await send(writer, status, json.dumps(body).encode(), close=close, headers=headers)


async def _stream(
    writer: asyncio.StreamWriter, answer: Reply, entry: UpstreamEntry | None, keep_alive: bool
) -> bool:
    assert answer.frames is not None
    headers = {k.lower(): v for k, v in answer.headers.items()}
    if not keep_alive:
        headers["connection"] = "close"
    await open_stream(writer, headers, close=False)
    frames = list(answer.frames)
    cut = entry.cut_after if entry is not None else None
    if answer.error_frame is not None:
        position = len(frames) - answer.tail
        position = min(cut, position) if cut is not None else position
        frames = [*frames[:position], answer.error_frame]
        cut = None
    delay = (entry.chunk_delay_ms if entry is not None else 0.0) / 1000.0
    if not await write_frames(writer, frames, cut=cut, delay=delay):
        return False  # close without the closing events: a stream cut mid-way
    await end_stream(writer)
    return keep_alive and answer.error_frame is None


class UpstreamThread:
    """Runs a ``FakeUpstreamServer`` on its own event loop in a daemon thread.

    For synchronous code (pytest fixtures, subprocess-driven tests): ``with UpstreamThread(server)
    as server: ...`` returns once the server listens and stops it on exit.
    """

    def __init__(self, server: FakeUpstreamServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-upstream", daemon=True)

    def __enter__(self) -> FakeUpstreamServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(timeout=30)
        return self.server

    def __exit__(self, *exc_info: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()
