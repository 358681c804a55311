"""A loopback HTTP server that speaks the OpenAI Chat Completions wire format from a script.

``FakeOpenAIServer`` is a real server on 127.0.0.1: clients reach it over a real socket with
real HTTP/1.1, so transports are tested exactly as they run against api.openai.com. Its
answers follow the recorded shapes of the real API byte for byte: a JSON
``chat.completion`` object, or an SSE stream of ``chat.completion.chunk`` events (a role
chunk, content or tool-call fragments, a separate finish chunk, the usage chunk with
``choices: []`` when ``stream_options.include_usage`` is set, and ``data: [DONE]``), sent
with chunked transfer encoding. Error answers carry the ``{"error": {...}}`` envelope and
``retry-after`` / ``retry-after-ms`` headers; a script can also cut a stream mid-way, send
an error event inside a stream, or delay the first byte.

Like the real API it refuses, with the real API's 400 answer and before using up a script
entry, what api.openai.com refuses (``_fake_openai_checks``: no model, no messages, tool
turns out of order, a strict JSON schema that is not closed). It reports the dated snapshot
of a model alias (``gpt-4o-mini`` -> ``gpt-4o-mini-2024-07-18``), ``service_tier``,
``message.annotations``, the usage detail objects, ``n`` choices, the ``openai-version`` and
``Date`` headers, and random ``chatcmpl-...`` / ``call_...`` ids.

The script is a list of entries (see ``ScriptEntry`` in ``_fake_openai_script``;
docs/providers.md has the file format).
For each request the server takes the first unused entry whose ``match`` fits the request;
when none does, the first unused entry without ``match``. Every request is recorded (body,
headers with credentials reduced to a presence flag and a SHA-256 digest, receive times) and
exposed as ``server.requests``, at ``GET /_fake/requests`` and, optionally, in a JSONL file.

The HTTP plumbing (reading requests, chunked SSE writing, the connection tasks) is
``_loopback``'s, shared with ``FakeUpstreamServer``.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import itertools
import json
import re
import secrets
import string
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._fake_openai_checks import request_problem
from ._fake_openai_script import (
    ErrorBody,
    ScriptEntry,
    ScriptError,
    ScriptMatch,
    ScriptToolCall,
    matches_request,
)
from ._loopback import (
    Frame,
    HTTPRequest,
    LoopbackServer,
    append_jsonl,
    dumps,
    end_stream,
    open_stream,
    request_fields,
    send,
    words,
    write_frames,
)
from ._loopback_script import ScriptSlots, coerce_entries, load_entries

__all__ = [
    "ErrorBody",
    "FakeOpenAIServer",
    "ScriptEntry",
    "ScriptError",
    "ScriptMatch",
    "ScriptToolCall",
    "load_script",
]

_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key")
OPENAI_VERSION = "2020-10-01"
"""The ``openai-version`` header the real API sends."""
SNAPSHOTS = {
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "gpt-4o": "gpt-4o-2024-08-06",
    "gpt-4.1": "gpt-4.1-2025-04-14",
    "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
    "gpt-4.1-nano": "gpt-4.1-nano-2025-04-14",
    "o3-mini": "o3-mini-2025-01-31",
}
"""Model aliases and the dated snapshot the real API reports serving for each."""
_ID_CHARS = string.ascii_letters + string.digits


def _random_id(length: int) -> str:
    """Random letters and digits, like the ids of the real API (unique across server starts)."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(length))


def _fragments(text: str, size: int | None) -> list[str]:
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]
    return re.findall(r"\s*\S+\s*?(?=\s|$)|\s+", text) or [""]


def load_script(path: str | Path) -> list[ScriptEntry]:
    """Read a script file: JSON (a list, or ``{"responses": [...]}``) or JSONL (one entry a line).

    Raises:
        ScriptError: The file is missing, not JSON, or an entry is invalid (names file and entry).
    """
    return load_entries(path, ScriptEntry)


class FakeOpenAIServer(LoopbackServer):
    """A scripted OpenAI-compatible server on a loopback port.

    Args:
        script: Entries (dicts or ``ScriptEntry``), or the path of a JSON/JSONL script file.
        host: A loopback address to bind (default 127.0.0.1).
        port: The port; 0 picks a free one (read ``server.port`` / ``server.base_url``).
        api_key: When set, requests must send ``Authorization: Bearer <api_key>`` or get the
            real API's 401 ``invalid_api_key`` answer.
        record_path: Also append every recorded request to this JSONL file.
        echo: Answer with the request line and every header received, credentials included (as
            a careless server or proxy may): the text of a 200 answer, the message of an error
            answer. For tests that no credential reaches the log.

    Example:
        ```python
        async with FakeOpenAIServer([{"text": "Hello!"}]) as server:
            model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
            reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
            assert reply.text == "Hello!"
            assert server.requests[0]["body"]["model"] == "gpt-4.1-mini"
        ```
    """

    name = "fake-openai"
    noun = "fake server"

    def __init__(
        self,
        script: str | Path | Sequence[Mapping[str, Any] | ScriptEntry],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        record_path: str | Path | None = None,
        echo: bool = False,
    ) -> None:
        super().__init__(host=host, port=port)
        self._script = ScriptSlots(coerce_entries(script, ScriptEntry))
        self._api_key_digest = hashlib.sha256(api_key.encode()).hexdigest() if api_key else None
        self._record_path = Path(record_path) if record_path else None
        self._echo = echo
        self._ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []
        """Every request received, in order (see the module docstring for the fields)."""

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1``: pass it as ``base_url`` to a client."""
        return f"{self._root_url}/v1"

    def unused(self) -> list[ScriptEntry]:
        """Entries with a finite ``times`` that were not used up."""
        return self._script.unused()

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` when some finite entry was not used up."""
        left = self._script.unused_indexes()
        if left:
            raise AssertionError(f"fake-openai: script entries {left} were never served")

    async def refuse_malformed(self, writer: asyncio.StreamWriter) -> None:
        """Answer a request that is not HTTP with the real API's error envelope."""
        await _send(writer, 400, _error_json("malformed HTTP request", "invalid_request_error"), close=True)

    async def serve_one(self, request: HTTPRequest, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        keep_alive = request.keep_alive
        if request.method == "GET" and request.path.rstrip("/") == "/_fake/requests":
            await _send(writer, 200, json.dumps(self.requests).encode(), close=not keep_alive)
            return keep_alive
        record = self._record(request, writer.get_extra_info("peername"))
        if request.method != "POST" or not request.bare_path.endswith("/chat/completions"):
            body = _error_json(f"Invalid URL ({request.method} {request.path})", "invalid_request_error")
            return await self._reply(writer, record, 404, body, keep_alive)
        denied = self._check_key(request)
        if denied is not None:
            return await self._reply(writer, record, 401, denied, keep_alive)
        problem = request_problem(request.json)
        if problem is not None:
            message, param, code = problem
            body = _error_json(message, "invalid_request_error", code=code, param=param)
            return await self._reply(writer, record, 400, body, keep_alive)
        claimed = self._script.claim(lambda entry: _fits(entry, request))
        if claimed is None:
            body = _error_json(
                f"fake-openai: no scripted response left for request {record['seq']}",
                "invalid_request_error",
                code="script_exhausted",
            )
            return await self._reply(writer, record, 400, body, keep_alive)
        index, entry = claimed
        record["entry"] = index
        record["response_status"] = entry.status
        append_jsonl(self._record_path, record)
        return await _Answer(entry, request, next(self._ids), echo=self._echo).send(writer, keep_alive)

    async def _reply(
        self, writer: asyncio.StreamWriter, record: dict[str, Any], status: int, body: bytes, keep_alive: bool
    ) -> bool:
        record["response_status"] = status
        append_jsonl(self._record_path, record)
        await _send(writer, status, body, close=not keep_alive)
        return keep_alive

    def _record(self, request: HTTPRequest, peer: object) -> dict[str, Any]:
        headers = {k: v for k, v in request.headers.items() if k not in _CREDENTIAL_HEADERS}
        credentials: dict[str, Any] = {}
        for name in _CREDENTIAL_HEADERS:
            value = request.headers.get(name)
            if value is not None:
                scheme, _, token = value.partition(" ") if name == "authorization" else ("", "", value)
                credentials[name] = {
                    "present": True,
                    "scheme": scheme or None,
                    "sha256": hashlib.sha256((token or scheme).encode()).hexdigest(),
                }
        record = {
            **request_fields(len(self.requests) + 1, request, peer),
            "headers": headers,
            "credentials": credentials,
            "body": request.json,
            "body_text": None if request.json is not None else request.text,
            "entry": None,
            "response_status": None,
        }
        self.requests.append(record)
        return record

    def _check_key(self, request: HTTPRequest) -> bytes | None:
        if self._api_key_digest is None:
            return None
        value = request.headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and hashlib.sha256(token.encode()).hexdigest() == self._api_key_digest:
            return None
        if not value:
            message = (
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password "
                "field (with blank username) if you're accessing the API from your browser and are "
                "prompted for a username and password. You can obtain an API key from "
                "https://platform.openai.com/account/api-keys."
            )
            return _error_json(message, "invalid_request_error")  # the real API sends code null here
        else:
            shown = f"{token[:3]}*****{token[-4:]}" if len(token) > 8 else "*****"
            message = f"Incorrect API key provided: {shown}."
        return _error_json(message, "invalid_request_error", code="invalid_api_key")


def _fits(entry: ScriptEntry, request: HTTPRequest) -> bool:
    return entry.match is not None and matches_request(entry.match, request.json, request.text)


def _error_json(message: str, kind: str, *, code: str | None = None, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    *,
    close: bool,
    headers: Mapping[str, str] | None = None,
) -> None:
    base = {
        "date": email.utils.formatdate(usegmt=True),
        "content-type": "application/json",
        "content-length": str(len(body)),
        "x-request-id": f"req_{hashlib.sha256(body).hexdigest()[:24]}",
        "openai-version": OPENAI_VERSION,
    }
    await send(writer, status, body, close=close, base=base, headers=headers)


_DEFAULT_ERRORS = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to sample from this model.", "invalid_request_error", None),
    404: (
        "The model does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    ),
    429: ("Rate limit reached. Please try again later.", "tokens", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
    503: ("The server is overloaded or not ready yet.", "server_error", None),
}


class _Answer:
    """Renders one script entry as the real API would answer the given request."""

    def __init__(self, entry: ScriptEntry, request: HTTPRequest, number: int, *, echo: bool = False) -> None:
        self.entry = entry
        # Echo mode: the request line and every header as received, credentials included.
        lines = [f"{request.method} {request.path}", *(f"{k}: {v}" for k, v in request.headers.items())]
        self.echo = "\n".join(lines) if echo else None
        self.request = request
        body = request.json if isinstance(request.json, dict) else {}
        self.body = body
        requested = str(body.get("model") or "gpt-fake")
        self.model = entry.model or SNAPSHOTS.get(requested, requested)
        self.id = f"chatcmpl-{_random_id(29)}"
        self.created = int(time.time())
        n = body.get("n")
        self.n = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
        self.calls = [
            {
                "id": call.id or f"call_{_random_id(24)}",
                "name": call.name,
                "arguments": call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments, separators=(",", ":")),
            }
            for i, call in enumerate(entry.tool_calls)
        ]
        self.text = self.echo if self.echo is not None else entry.text or ""
        self.finish = entry.finish_reason or ("tool_calls" if self.calls else "stop")

    def _headers(self) -> dict[str, str]:
        headers = {"openai-processing-ms": "1", "openai-version": OPENAI_VERSION}
        if self.entry.retry_after is not None:
            headers["retry-after"] = f"{self.entry.retry_after:g}"
        if self.entry.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{self.entry.retry_after_ms:g}"
        headers.update({k.lower(): v for k, v in self.entry.headers.items()})
        return headers

    def usage(self) -> dict[str, Any]:
        messages = self.body.get("messages") or []
        prompt = sum(words(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
        completion = words(self.text) + sum(len(c["arguments"]) // 4 + 1 for c in self.calls)
        usage: dict[str, Any] = {
            "prompt_tokens": max(prompt, 1),
            "completion_tokens": completion * self.n,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        usage.update(self.entry.usage or {})
        if not (self.entry.usage and "total_tokens" in self.entry.usage):
            usage["total_tokens"] = int(usage["prompt_tokens"] or 0) + int(usage["completion_tokens"] or 0)
        return usage

    async def send(self, writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
        """Write the answer; False when the connection must close afterwards."""
        if self.entry.delay_ms:
            await asyncio.sleep(self.entry.delay_ms / 1000.0)
        entry = self.entry
        if entry.raw_body is not None:
            await _send(
                writer, entry.status, entry.raw_body.encode(), close=not keep_alive, headers=self._headers()
            )
        elif entry.status != 200 or entry.error is not None:
            await _send(
                writer, entry.status, self._error_body(), close=not keep_alive, headers=self._headers()
            )
        elif self.body.get("stream"):
            return await self._stream(writer, keep_alive)
        else:
            body = json.dumps(self.completion()).encode()
            await _send(writer, 200, body, close=not keep_alive, headers=self._headers())
        return keep_alive

    def _error_body(self) -> bytes:
        if self.echo is not None:
            kind = "server_error" if self.entry.status >= 500 else "invalid_request_error"
            return _error_json(self.echo, kind)
        if self.entry.error is not None:
            return json.dumps({"error": self.entry.error.model_dump()}).encode()
        message, kind, code = _DEFAULT_ERRORS.get(
            self.entry.status,
            (
                f"HTTP {self.entry.status}",
                "server_error" if self.entry.status >= 500 else "invalid_request_error",
                None,
            ),
        )
        return _error_json(message, kind, code=code)

    def completion(self) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` object."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if (self.calls or self.entry.refusal) and not self.text else self.text,
            "refusal": self.entry.refusal,
            "annotations": [],
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in self.calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": i, "message": message, "logprobs": None, "finish_reason": self.finish}
                for i in range(self.n)
            ],
            "usage": self.usage(),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    def chunks(self) -> list[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects of the stream, usage chunk included when asked."""
        include_usage = bool((self.body.get("stream_options") or {}).get("include_usage"))
        deltas: list[tuple[dict[str, Any], str | None]] = []
        first: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        calls = list(self.calls)
        if calls and not self.text:
            first = {
                "role": "assistant",
                "content": None,
                "tool_calls": [self._call_head(0, calls[0])],
                "refusal": None,
            }
        deltas.append((first, None))
        if self.text:
            deltas += [({"content": piece}, None) for piece in _fragments(self.text, self.entry.chunk_chars)]
        if self.entry.refusal:
            deltas += [
                ({"refusal": piece}, None) for piece in _fragments(self.entry.refusal, self.entry.chunk_chars)
            ]
        for index, call in enumerate(calls):
            if index > 0 or self.text:
                deltas.append(({"tool_calls": [self._call_head(index, call)]}, None))
            for piece in (
                _fragments(call["arguments"], self.entry.chunk_chars or 8) if call["arguments"] else []
            ):
                deltas.append(({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, None))
        deltas.append(({}, self.finish))
        out = []
        for delta, finish in deltas:
            for index in range(self.n):
                chunk = self._chunk_head()
                chunk["choices"] = [
                    {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
                ]
                if include_usage:
                    chunk["usage"] = None
                out.append(chunk)
        if include_usage:
            chunk = self._chunk_head()
            chunk["choices"] = []
            chunk["usage"] = self.usage()
            out.append(chunk)
        return out

    @staticmethod
    def _call_head(index: int, call: dict[str, Any]) -> dict[str, Any]:
        return {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }

    def _chunk_head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    async def _stream(self, writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
        headers = {"x-request-id": f"req_{self.id[-12:]}", **self._headers()}
        if not keep_alive:
            headers["connection"] = "close"
        await open_stream(writer, headers, close=False)
        events = [dumps(chunk) for chunk in self.chunks()]
        cut = self.entry.cut_after
        if self.entry.stream_error is not None:
            position = len(events) - 1 - (1 if events and '"choices":[]' in events[-1] else 0)
            position = min(cut, len(events)) if cut is not None else position
            events = [*events[:position], dumps({"error": self.entry.stream_error.model_dump()})]
            cut = None
        elif cut is None:
            events.append("[DONE]")
        frames = [Frame(f"data: {event}\n\n".encode(), paced=True) for event in events]
        delay = self.entry.chunk_delay_ms / 1000.0
        if not await write_frames(writer, frames, cut=cut, delay=delay) or cut is not None:
            return False  # close without the terminating chunk: a stream cut mid-way
        await end_stream(writer)
        return keep_alive
