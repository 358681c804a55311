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

The answers are rendered by ``_fake_openai_wire``; the HTTP plumbing (reading requests,
chunked SSE writing, the connection tasks) is ``_loopback``'s, shared with ``FakeUpstreamServer``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
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
from ._fake_openai_wire import Answer, error_json, send_json
from ._loopback import HTTPRequest, LoopbackServer, append_jsonl, request_fields
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
        await send_json(
            writer, 400, error_json("malformed HTTP request", "invalid_request_error"), close=True
        )

    async def serve_one(self, request: HTTPRequest, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        keep_alive = request.keep_alive
        if request.method == "GET" and request.path.rstrip("/") == "/_fake/requests":
            await send_json(writer, 200, json.dumps(self.requests).encode(), close=not keep_alive)
            return keep_alive
        record = self._record(request, writer.get_extra_info("peername"))
        if request.method != "POST" or not request.bare_path.endswith("/chat/completions"):
            body = error_json(f"Invalid URL ({request.method} {request.path})", "invalid_request_error")
            return await self._reply(writer, record, 404, body, keep_alive)
        denied = self._check_key(request)
        if denied is not None:
            return await self._reply(writer, record, 401, denied, keep_alive)
        problem = request_problem(request.json)
        if problem is not None:
            message, param, code = problem
            body = error_json(message, "invalid_request_error", code=code, param=param)
            return await self._reply(writer, record, 400, body, keep_alive)
        claimed = self._script.claim(lambda entry: _fits(entry, request))
        if claimed is None:
            body = error_json(
                f"fake-openai: no scripted response left for request {record['seq']}",
                "invalid_request_error",
                code="script_exhausted",
            )
            return await self._reply(writer, record, 400, body, keep_alive)
        index, entry = claimed
        record["entry"] = index
        record["response_status"] = entry.status
        append_jsonl(self._record_path, record)
        return await Answer(entry, request, next(self._ids), echo=self._echo).send(writer, keep_alive)

    async def _reply(
        self, writer: asyncio.StreamWriter, record: dict[str, Any], status: int, body: bytes, keep_alive: bool
    ) -> bool:
        record["response_status"] = status
        append_jsonl(self._record_path, record)
        await send_json(writer, status, body, close=not keep_alive)
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
            return error_json(message, "invalid_request_error")  # the real API sends code null here
        else:
            shown = f"{token[:3]}*****{token[-4:]}" if len(token) > 8 else "*****"
            message = f"Incorrect API key provided: {shown}."
        return error_json(message, "invalid_request_error", code="invalid_api_key")


def _fits(entry: ScriptEntry, request: HTTPRequest) -> bool:
    return entry.match is not None and matches_request(entry.match, request.json, request.text)
