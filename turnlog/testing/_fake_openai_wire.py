"""The answers of the fake OpenAI server, rendered as api.openai.com renders them.

``Answer`` turns one script entry into what the real Chat Completions API sends for a request:
a JSON ``chat.completion`` object, an SSE stream of ``chat.completion.chunk`` events, or an
error with the ``{"error": {...}}`` envelope and ``retry-after`` headers. ``FakeOpenAIServer``
(``_fake_openai``) decides which entry answers; this module decides what the bytes look like.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import re
import secrets
import string
import time
from collections.abc import Mapping
from typing import Any

from ._fake_openai_script import ScriptEntry
from ._loopback import Frame, HTTPRequest, dumps, end_stream, open_stream, send, words, write_frames

__all__ = ["OPENAI_VERSION", "SNAPSHOTS", "Answer", "error_json", "send_json"]

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


def error_json(message: str, kind: str, *, code: str | None = None, param: str | None = None) -> bytes:
    """The real API's ``{"error": {...}}`` envelope."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


async def send_json(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    *,
    close: bool,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Write a whole answer with the headers the real API sends (``openai-version``, ``Date``...)."""
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


class Answer:
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
            await send_json(
                writer, entry.status, entry.raw_body.encode(), close=not keep_alive, headers=self._headers()
            )
        elif entry.status != 200 or entry.error is not None:
            await send_json(
                writer, entry.status, self._error_body(), close=not keep_alive, headers=self._headers()
            )
        elif self.body.get("stream"):
            return await self._stream(writer, keep_alive)
        else:
            body = json.dumps(self.completion()).encode()
            await send_json(writer, 200, body, close=not keep_alive, headers=self._headers())
        return keep_alive

    def _error_body(self) -> bytes:
        if self.echo is not None:
            kind = "server_error" if self.entry.status >= 500 else "invalid_request_error"
            return error_json(self.echo, kind)
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
        return error_json(message, kind, code=code)

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
