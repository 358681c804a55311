"""The Chat Completions codec: request bodies, answers, usage objects and streamed chunks.

All of it is pure (no I/O). ``ChatCompletionsCodec`` builds the body ``OpenAIChatModel`` sends
(the messages as they are, minus the fields of other APIs that turnlog keeps on them) and
reads the answer back; ``StreamAssembly`` folds ``chat.completion.chunk`` objects into one
``chat.completion`` and notes the pieces it completes (text deltas, finished tool calls).
"""

from __future__ import annotations

from typing import Any

import orjson

from ._codec import Codec, StreamFault, WireError
from ._fingerprint import sent_params
from ._http import number
from ._types import ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = ["CHAT_COMPLETIONS_PARAMETERS", "ChatCompletionsCodec", "StreamAssembly", "usage_of"]

#: The Chat Completions request parameters (OpenAI's reference); compatible servers take more,
#: so the codec passes any parameter through and only the others refuse what they lack.
CHAT_COMPLETIONS_PARAMETERS = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream_options",
        "temperature",
        "tool_choice",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
#: Keys turnlog keeps on messages for the other APIs (Anthropic thinking blocks, a failed tool
#: result, and a tool call's ``extra_content`` holding Gemini's signature); Chat Completions has
#: no such fields, so they are left out of its bodies.
_FOREIGN_MESSAGE_KEYS = ("thinking_blocks", "is_error")


class ChatCompletionsCodec(Codec):
    """``POST {base}/chat/completions``: the OpenAI API and every server that speaks it."""

    api = "chat_completions"
    endpoint = "chat/completions"
    ACCEPTED_PARAMETERS = CHAT_COMPLETIONS_PARAMETERS

    def path(self, model: str, *, stream: bool) -> tuple[str, str]:
        return "chat/completions", ""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The body for ``request`` (parameters that name secrets are dropped)."""
        self.check_reserved(request)
        messages = [_native(m) for m in request.messages]
        body: dict[str, Any] = {"model": model, "messages": messages}
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

    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        if not isinstance(raw, dict) or not isinstance(raw.get("choices"), list) or not raw["choices"]:
            raise WireError(f"no choices in the answer: {str(raw)[:300]}")
        choice = raw["choices"][0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise WireError("choices[0] has no message object")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise WireError(f"choices[0].message.content is {type(content).__name__}")
        calls = tuple(_tool_call(call) for call in message.get("tool_calls") or [])
        return ModelResponse(
            text=content or "",
            tool_calls=calls,
            raw=raw,
            usage=usage_of(raw.get("usage")),
            model=str(raw.get("model") or model),
            provider=provider,
            finish_reason=choice.get("finish_reason"),
            cache_read_tokens=_cached(raw.get("usage")),
        )

    def assembly(self, model: str) -> StreamAssembly:
        return StreamAssembly(model)


def _cached(usage: Any) -> int | None:
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _native(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    signed = isinstance(calls, list) and any(isinstance(c, dict) and "extra_content" in c for c in calls)
    if not signed and not any(key in message for key in _FOREIGN_MESSAGE_KEYS):
        return message  # the common case: the message object goes out as the caller made it
    out = {k: v for k, v in message.items() if k not in _FOREIGN_MESSAGE_KEYS}
    if signed and isinstance(calls, list):
        out["tool_calls"] = [
            {k: v for k, v in c.items() if k != "extra_content"} if isinstance(c, dict) else c for c in calls
        ]
    return out


def _tool_call(call: Any) -> ToolCall:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise WireError(f"a tool call without a function name: {str(call)[:200]}")
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
        raise WireError(
            f"tool call {call_id} ({name}): arguments are not valid JSON ({exc}): {text[:200]!r}"
        ) from exc
    if not isinstance(parsed, dict):
        raise WireError(f"tool call {call_id} ({name}): arguments are not a JSON object")
    return ToolCall(call_id, name, parsed)


def usage_of(raw: Any) -> Usage:
    """The ``Usage`` of a Chat Completions ``usage`` object (empty when there is none)."""
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else None,
        output_tokens=completion if isinstance(completion, int) else None,
        # OpenRouter and LiteLLM report the billed cost in the usage object.
        cost_usd=number(raw.get("cost")),
        cache_read_tokens=_cached(raw),
    )


class StreamAssembly:
    """Folds ``chat.completion.chunk`` objects into one ``chat.completion`` object."""

    unit = "chunks"
    end_marker: str | None = "[DONE]"

    def __init__(self, model: str) -> None:
        self._model = model
        self.count = 0
        self._done = False
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._pieces: list[StreamChunk] = []
        self._emitted_calls = 0
        self._annotations: list[Any] = []

    @property
    def stopped(self) -> bool:
        return self._done

    def missing(self) -> str | None:
        return None if self._done else "[DONE]"

    def add(self, chunk: Any) -> bool:
        """Fold one chunk (None: the ``[DONE]`` marker); True when it carried output."""
        if chunk is None:
            self._done = True
            return False
        self.count += 1
        if not isinstance(chunk, dict):
            raise WireError("a stream chunk is not an object")
        if chunk.get("error"):
            detail = chunk["error"]
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            raise StreamFault(f"error event in the stream after {self.count - 1} chunks: {message}", detail)
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

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call (text deltas, finished tool calls)."""
        pieces, self._pieces = self._pieces, []
        return pieces

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

    def result(self) -> dict[str, Any]:
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
            "model": self._head.get("model", self._model),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
