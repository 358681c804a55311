"""The OpenAI Responses codec: request bodies, ``response`` objects and their SSE events.

All of it is pure (no I/O). ``ResponsesCodec`` builds a ``POST {base}/responses`` body from
Chat-Completions-shaped messages (the system message becomes ``instructions``; tool calls and
tool results become ``function_call`` / ``function_call_output`` items) and reads a ``response``
object back; ``ResponseAssembly`` folds the typed SSE events (``response.output_text.delta``,
``response.function_call_arguments.delta``, ..., ``response.completed``) into one ``response``
object and notes the pieces it completes. The recording proxy uses it for what Codex and the
``openai`` SDK's ``responses`` API send.
"""

from __future__ import annotations

from typing import Any

import orjson

from ._codec import Codec, StreamFault, WireError, function_of
from ._fingerprint import sent_params
from ._types import ChunkType, ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = ["RESPONSES_PARAMETERS", "ResponseAssembly", "ResponsesCodec", "usage_of"]

#: The Responses request parameters besides ``input``, ``instructions``, ``tools`` and ``model``.
RESPONSES_PARAMETERS = frozenset(
    {
        "include",
        "max_output_tokens",
        "metadata",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt_cache_key",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "temperature",
        "text",
        "tool_choice",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)


class ResponsesCodec(Codec):
    """``POST {base}/responses``: the OpenAI Responses API (what Codex speaks)."""

    api = "responses"
    endpoint = "responses"
    ACCEPTED_PARAMETERS = RESPONSES_PARAMETERS

    def path(self, model: str, *, stream: bool) -> tuple[str, str]:
        return "responses", ""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The body for ``request`` (parameters that name secrets are dropped)."""
        self.check_reserved(request)
        instructions, items = to_input(request.messages)
        body: dict[str, Any] = {"model": model, "input": items}
        if instructions:
            body["instructions"] = instructions
        body.update(sent_params(request.params))
        if request.tools:
            body["tools"] = [_tool(schema) for schema in request.tools]
        if request.response_format is not None:
            body["text"] = {"format": _text_format(request.response_format)}
        if request.stream:
            body["stream"] = True
        return body

    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        if not isinstance(raw, dict) or not isinstance(raw.get("output"), list):
            raise WireError(f"no output in the answer: {str(raw)[:300]}")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for item in raw["output"]:
            if not isinstance(item, dict):
                raise WireError("an output item is not an object")
            if item.get("type") == "message":
                texts.extend(
                    str(part.get("text", ""))
                    for part in item.get("content") or []
                    if isinstance(part, dict) and part.get("type") == "output_text"
                )
            elif item.get("type") == "function_call":
                calls.append(_call(item))
        usage = raw.get("usage")
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            raw=raw,
            usage=usage_of(usage),
            model=str(raw.get("model") or model),
            provider=provider,
            finish_reason=_finish(raw, bool(calls)),
            cache_read_tokens=_cached(usage),
        )

    def assembly(self, model: str) -> ResponseAssembly:
        return ResponseAssembly(model)


def _finish(raw: dict[str, Any], called: bool) -> str | None:
    status = raw.get("status")
    if status == "incomplete":
        details = raw.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return str(reason or "incomplete")
    if status == "completed":
        return "tool_calls" if called else "stop"
    return str(status) if status is not None else None


def _cached(usage: Any) -> int | None:
    details = usage.get("input_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usage_of(raw: Any) -> Usage:
    """The ``Usage`` of a Responses ``usage`` object (empty when there is none)."""
    if not isinstance(raw, dict):
        return Usage()
    given, made = raw.get("input_tokens"), raw.get("output_tokens")
    return Usage(
        input_tokens=given if isinstance(given, int) else None,
        output_tokens=made if isinstance(made, int) else None,
        cache_read_tokens=_cached(raw),
    )


def _call(item: dict[str, Any]) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str):
        raise WireError(f"a function_call without a name: {str(item)[:200]}")
    call_id = str(item.get("call_id") or item.get("id") or "")
    text = item.get("arguments")
    if isinstance(text, dict):
        return ToolCall(call_id, name, text)
    if not isinstance(text, str) or not text.strip():
        return ToolCall(call_id, name, {})
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"function_call {call_id} ({name}): arguments are not valid JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise WireError(f"function_call {call_id} ({name}): arguments are not a JSON object")
    return ToolCall(call_id, name, parsed)


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    function = function_of(schema)
    tool: dict[str, Any] = {"type": "function", "name": function["name"]}
    for key in ("description", "parameters", "strict"):
        if key in function:
            tool[key] = function[key]
    return tool


def _text_format(response_format: dict[str, Any]) -> dict[str, Any]:
    # Chat Completions nests the schema under json_schema; Responses puts it beside the type.
    if response_format.get("type") == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        return {"type": "json_schema", **response_format["json_schema"]}
    return dict(response_format)


def to_input(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """``(instructions, input items)`` of Chat-Completions-shaped messages."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer") and isinstance(content, str):
            instructions.append(content)
        elif role == "tool":
            output = content if isinstance(content, str) else orjson.dumps(content).decode()
            items.append(
                {"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}
            )
        else:
            if content:
                items.append({"type": "message", "role": role, "content": content})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments") or "{}",
                    }
                )
    return "\n\n".join(instructions), items


class ResponseAssembly:
    """Folds Responses SSE events into one ``response`` object, noting the chunks they make."""

    unit = "events"
    end_marker: str | None = None

    def __init__(self, model: str) -> None:
        self._model = model
        self.count = 0
        self._response: dict[str, Any] | None = None
        self._head: dict[str, Any] = {}
        self._items: dict[int, dict[str, Any]] = {}
        self._text: dict[int, list[str]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._pieces: list[StreamChunk] = []

    @property
    def stopped(self) -> bool:
        return self._response is not None

    def missing(self) -> str | None:
        return None if self._response is not None else "response.completed"

    def add(self, event: Any) -> bool:
        """Fold one event; True when it carried output."""
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise WireError("a stream event is not a typed object")
        self.count += 1
        kind = event["type"]
        if kind in ("response.failed", "error"):
            detail = (event.get("response") or {}).get("error") if kind == "response.failed" else event
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            code = detail.get("code") if isinstance(detail, dict) else None
            raise StreamFault(
                f"{kind} in the stream after {self.count - 1} events: {message}",
                detail,
                rate_limited=code == "rate_limit_exceeded",
            )
        if kind in ("response.created", "response.in_progress") and isinstance(event.get("response"), dict):
            self._head = {k: v for k, v in event["response"].items() if k not in ("output", "usage")}
        elif kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            self._response = response if isinstance(response, dict) else {}
        return self._output(kind, event)

    def _output(self, kind: str, event: dict[str, Any]) -> bool:
        index = int(event.get("output_index", 0) or 0)
        if kind in ("response.output_text.delta", "response.reasoning_summary_text.delta"):
            delta = str(event.get("delta") or "")
            text_kind: ChunkType = "text" if kind == "response.output_text.delta" else "thinking"
            if text_kind == "text":
                self._text.setdefault(index, []).append(delta)
            if delta:
                self._pieces.append(StreamChunk(type=text_kind, content=delta, is_delta=True))
            return True
        if kind == "response.function_call_arguments.delta":
            self._arguments.setdefault(index, []).append(str(event.get("delta") or ""))
            return True
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            item = event["item"]
            self._items[index] = item
            if item.get("type") == "function_call":
                call = _call(item)
                self._pieces.append(
                    StreamChunk(
                        type="tool_use",
                        tool_name=call.name,
                        tool_id=call.id or None,
                        tool_input=call.arguments,
                    )
                )
            return True
        return False

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call (text deltas, finished tool calls)."""
        pieces, self._pieces = self._pieces, []
        return pieces

    def result(self) -> dict[str, Any]:
        """The assembled object, shaped like a non-streamed ``response`` object."""
        if self._response is not None and self._response.get("output"):
            return self._response
        output = [self._items[i] for i in sorted(self._items)]
        for index, parts in sorted(self._text.items()):
            if index not in self._items:
                text = "".join(parts)
                output.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                )
        base = self._response if self._response is not None else self._head
        return {"object": "response", "model": self._model, **base, "output": output}
