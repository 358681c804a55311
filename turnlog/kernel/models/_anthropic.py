"""The Anthropic Messages API over httpx: plain JSON and SSE streaming.

``AnthropicModel`` implements ``ChatModel`` for ``POST {base_url}/v1/messages``. It shares
everything but the wire format with ``OpenAIChatModel`` (retries, timeouts, the error tree,
credential scrubbing, the loopback guard of the test suite): requests arrive in Chat
Completions form (``ModelRequest.messages``) and are translated here, once:

- ``system`` / ``developer`` messages become the top-level ``system`` text;
- user text and images become ``text`` / ``image`` blocks;
- an assistant turn's ``tool_calls`` become ``tool_use`` blocks, and ``tool`` messages become
  ``tool_result`` blocks of the next user turn (consecutive turns of one role are merged, empty
  text blocks are dropped: the API refuses both);
- tools become ``{"name", "description", "input_schema"}``; ``max_tokens`` defaults to
  ``DEFAULT_MAX_TOKENS`` (the API requires it); ``stop`` becomes ``stop_sequences``; a
  ``response_format`` is not sent (turnlog puts the schema into the instruction).

Answers are read back into a ``ModelResponse``: the text blocks joined, ``tool_use`` blocks as
``ToolCall``s, ``thinking`` blocks kept in the raw message, ``stop_reason`` as the finish
reason, and the usage with the cache tokens counted as input (``input_tokens`` +
``cache_creation_input_tokens`` + ``cache_read_input_tokens``; the raw usage keeps each).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from turnlog._errors import UsageError

from ._errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderHTTPError,
    RateLimitError,
    ServerError,
)
from ._http import Failure, error_class, scrubbed
from ._openai import OpenAIChatModel
from ._secrets import Scrubber
from ._sse import sse_data, sse_lines
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "AnthropicModel", "to_messages"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_RENAMED = {"stop": "stop_sequences"}
_DROPPED = frozenset({"n", "seed", "presence_penalty", "frequency_penalty", "logprobs", "stream_options"})


class AnthropicModel(OpenAIChatModel):
    """A Messages API client (api.anthropic.com or any server speaking it).

    Args:
        model: The model, e.g. ``claude-sonnet-4-5``.
        provider: The provider name recorded with each call (default ``anthropic``).
        base_url: The API root without ``/v1``; default ``https://api.anthropic.com``.
        api_key: The key; when None it is read from ``$ANTHROPIC_API_KEY`` at request time.
        timeout, retry, headers, client: As for ``OpenAIChatModel``.

    Example:
        ```python
        model = AnthropicModel("claude-sonnet-4-5")  # key from $ANTHROPIC_API_KEY
        reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        ```
    """

    endpoint = "v1/messages"
    default_provider = "anthropic"
    default_base_url = ANTHROPIC_BASE_URL
    default_api_key_env = "ANTHROPIC_API_KEY"
    #: The Messages API's parameters, and the OpenAI names it translates (``stop``,
    #: ``max_completion_tokens``) or drops (``_DROPPED``); see ``OpenAIChatModel.request_params``.
    request_params = frozenset(
        {
            "container", "max_completion_tokens", "max_tokens", "mcp_servers", "metadata",
            "service_tier", "stop", "stop_sequences", "temperature", "thinking", "tool_choice",
            "top_k", "top_p",
        }
    ) | _DROPPED  # fmt: skip

    def __repr__(self) -> str:
        return f"AnthropicModel(provider={self.provider!r}, model={self.model!r}, base_url={self._shown_base()!r})"

    def _shown_base(self) -> str:
        return self._shown_url.removesuffix(f"/{self.endpoint}")

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API body for ``request``."""
        base = super().build_body(
            dataclasses.replace(request, stream=False, response_format=None, tools=None)
        )
        system, messages = to_messages(request.messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if system:
            body["system"] = system
        params = {k: v for k, v in base.items() if k not in ("model", "messages")}
        for key, value in params.items():
            if key in _DROPPED:
                continue
            body[_RENAMED.get(key, key)] = [value] if key == "stop" and isinstance(value, str) else value
        if "max_completion_tokens" in body:
            body.setdefault("max_tokens", body.pop("max_completion_tokens"))
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        if request.stream:
            body["stream"] = True
        return body

    def _request_headers(self, key: str | None, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": "turnlog",
            "anthropic-version": ANTHROPIC_VERSION,
            **self._headers,
        }
        if key:
            headers["x-api-key"] = key
        return headers

    def _error_parts(self, body: Any) -> tuple[str, Any]:
        detail = body.get("error") if isinstance(body, dict) else None
        if isinstance(detail, dict):
            return str(detail.get("message", detail)), detail.get("type")
        return str(body), None

    def _error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        if code == "authentication_error" or code == "permission_error":
            return AuthenticationError
        if code == "rate_limit_error":
            return RateLimitError
        if code == "overloaded_error" or status == 529:
            return ServerError
        return error_class(status, code, message)

    def _from_completion(self, raw: Any, scrub: Scrubber) -> ModelResponse:
        raw = scrub(raw)
        if (
            not isinstance(raw, dict)
            or raw.get("type") != "message"
            or not isinstance(raw.get("content"), list)
        ):
            raise self._format_error(f"not a Messages API message: {str(raw)[:300]}", scrub)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in raw["content"]:
            if not isinstance(block, dict):
                raise self._format_error("a content block is not an object", scrub)
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                arguments = block.get("input")
                if not isinstance(arguments, dict):
                    raise self._format_error(f"tool_use {block.get('id')}: input is not an object", scrub)
                calls.append(ToolCall(str(block.get("id") or ""), str(block.get("name") or ""), arguments))
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            raw=raw,
            usage=_usage(raw.get("usage")),
            model=str(raw.get("model") or self.model),
            provider=self.provider,
            finish_reason=raw.get("stop_reason"),
        )

    async def _read_stream(
        self, response: httpx.Response, started: float, scrub: Scrubber, on_chunk: ChunkSink | None = None
    ) -> ModelResponse:
        assembly = _MessageAssembly()
        ttft: float | None = None
        try:
            async for data in sse_data(sse_lines(response.aiter_text())):
                event = self._decode_json(data, scrub)
                if not isinstance(event, dict):
                    raise Failure(self._format_error("an SSE event is not an object", scrub), retryable=False)
                if event.get("type") == "error":
                    raise Failure(self._stream_error(event, scrub, assembly.events), retryable=False)
                if assembly.add(event) and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000.0
                if on_chunk is not None:
                    for piece in assembly.take_pieces():
                        await on_chunk(scrubbed(piece, scrub))
                if assembly.stopped:
                    break
            else:
                raise Failure(
                    ProviderConnectionError(
                        f"{self.provider} {self.model}: the stream ended before message_stop "
                        f"after {assembly.events} events (truncated answer discarded)",
                        provider=self.provider,
                        model=self.model,
                    ),
                    retryable=False,
                )
        except httpx.RequestError as exc:
            raise self._stream_cut(exc, assembly.events, "events") from exc
        return dataclasses.replace(self._from_completion(assembly.message(self.model), scrub), ttft_ms=ttft)

    def _stream_error(self, event: dict[str, Any], scrub: Scrubber, seen: int) -> ProviderHTTPError:
        detail = scrub(event.get("error"))
        message = detail.get("message", detail) if isinstance(detail, dict) else detail
        kind = detail.get("type") if isinstance(detail, dict) else None
        cls = RateLimitError if kind == "rate_limit_error" else ServerError
        return cls(
            f"{self.provider} {self.model}: {kind or 'error'} event in the stream after {seen} events: {message}",
            status_code=200,
            body=detail,
            provider=self.provider,
            model=self.model,
        )


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt = raw.get("input_tokens")
    output = raw.get("output_tokens")
    cached = count("cache_creation_input_tokens") + count("cache_read_input_tokens")
    return Usage(
        input_tokens=prompt + cached if isinstance(prompt, int) else None,
        output_tokens=output if isinstance(output, int) else None,
    )


def _tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    function = schema.get("function") if schema.get("type") == "function" else schema
    if not isinstance(function, Mapping) or not function.get("name"):
        raise UsageError(f"a tool schema needs a function name: {dict(schema)!r}")
    tool: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        tool["description"] = function["description"]
    tool["input_schema"] = dict(function.get("parameters") or {"type": "object", "properties": {}})
    return tool


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, Mapping):
            blocks.append({"type": "text", "text": str(part)})
        elif part.get("type") == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": str(part["text"])})
        elif part.get("type") == "image_url":
            blocks.append(_image(part.get("image_url")))
        else:
            blocks.append(dict(part))  # already a Messages API block
    return blocks


def _image(value: Any) -> dict[str, Any]:
    url = value.get("url") if isinstance(value, Mapping) else value
    url = str(url or "")
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": head[5:], "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _arguments(text: Any) -> Any:
    if isinstance(text, dict):
        return text
    try:
        value = orjson.loads(text) if isinstance(text, str) and text.strip() else {}
    except orjson.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def to_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Chat Completions messages as the Messages API's ``system`` text and ``messages``.

    Raises:
        ValueError: a message has a role the Messages API cannot express.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(b["text"] for b in _text_blocks(message.get("content")) if b.get("type") == "text")
        elif role == "user":
            push("user", _text_blocks(message.get("content")))
        elif role == "assistant":
            blocks = _text_blocks(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id") or ""),
                        "name": str(function.get("name") or ""),
                        "input": _arguments(function.get("arguments")),
                    }
                )
            push("assistant", blocks)
        elif role == "tool":
            content = message.get("content")
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id") or ""),
            }
            if content not in (None, ""):
                result["content"] = content if isinstance(content, str) else _text_blocks(content)
            # Tool results open the user turn that answers the calls.
            if out and out[-1]["role"] == "user" and out[-1]["content"][0].get("type") == "tool_result":
                out[-1]["content"].append(result)
            else:
                push("user", [result])
        else:
            raise UsageError(f"messages[{i}]: role {role!r} has no Messages API form")
    return "\n\n".join(system), out


class _MessageAssembly:
    """Folds the Messages API stream events into one ``message`` object, noting the chunks they make."""

    def __init__(self) -> None:
        self.events = 0
        self.stopped = False
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._pieces: list[StreamChunk] = []

    def add(self, event: dict[str, Any]) -> bool:
        """Fold one event; True when it carried output (text, thinking, a tool call's start)."""
        self.events += 1
        kind = event.get("type")
        if kind == "message_start":
            self._message = dict(event.get("message") or {})
        elif kind == "content_block_start":
            index = int(event.get("index", len(self._blocks)))
            block = dict(event.get("content_block") or {})
            self._blocks[index] = block
            if block.get("type") == "tool_use":
                self._json[index] = []
                return True
        elif kind == "content_block_delta":
            return self._delta(int(event.get("index", 0)), event.get("delta") or {})
        elif kind == "content_block_stop":
            self._stop(int(event.get("index", 0)))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self._message.update({k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")})
            usage = event.get("usage")
            if isinstance(usage, dict):
                self._message["usage"] = {**(self._message.get("usage") or {}), **usage}
        elif kind == "message_stop":
            self.stopped = True
        return False

    def _delta(self, index: int, delta: dict[str, Any]) -> bool:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            piece = str(delta.get("text", ""))
            block["text"] = block.get("text", "") + piece
            if piece:
                self._pieces.append(StreamChunk(type="text", content=piece, is_delta=True))
            return bool(piece)
        if kind == "thinking_delta":
            piece = str(delta.get("thinking", ""))
            block["thinking"] = block.get("thinking", "") + piece
            if piece:
                self._pieces.append(StreamChunk(type="thinking", content=piece, is_delta=True))
            return bool(piece)
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        return False

    def _stop(self, index: int) -> None:
        block = self._blocks.get(index)
        if block is None or block.get("type") != "tool_use":
            return
        text = "".join(self._json.pop(index, []))
        block["input"] = _arguments(text) if text.strip() else (block.get("input") or {})
        self._pieces.append(
            StreamChunk(
                type="tool_use",
                tool_name=block.get("name"),
                tool_id=block.get("id"),
                tool_input=block["input"],
            )
        )

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call."""
        pieces, self._pieces = self._pieces, []
        return pieces

    def message(self, model: str) -> dict[str, Any]:
        """The assembled object, shaped like a non-streamed ``message``."""
        message = {"type": "message", "role": "assistant", "model": model, **self._message}
        message["content"] = [block for _, block in sorted(self._blocks.items())]
        return message
