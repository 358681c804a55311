"""The Anthropic Messages codec: request bodies, answers and stream events, without I/O.

Requests arrive in Chat Completions form (``ModelRequest.messages``) and are translated once:

- ``system`` / ``developer`` messages become the top-level ``system``: plain text joined, or a
  list of text blocks when a block carries more than text (``cache_control``), so cache
  markers reach the API;
- user text and images become ``text`` / ``image`` blocks, keeping their ``cache_control``;
  blocks already in Messages form pass through unchanged;
- an assistant turn's ``thinking_blocks`` (the ``thinking`` / ``redacted_thinking`` blocks of
  the answer, signatures included) go first, unchanged, then its text, then its ``tool_calls``
  as ``tool_use`` blocks: with extended thinking on, the API refuses a tool loop whose
  assistant turn lost its thinking;
- ``tool`` messages become ``tool_result`` blocks of the next user turn, with ``is_error``
  when the message says the tool failed (consecutive turns of one role are merged, empty text
  blocks dropped: the API refuses both);
- parameters are translated (``stop`` -> ``stop_sequences``, ``max_completion_tokens`` ->
  ``max_tokens``, ``user`` -> ``metadata.user_id``, ``tool_choice`` / ``parallel_tool_calls``
  -> ``tool_choice`` with ``disable_parallel_tool_use``) or refused before sending
  (``UsageError``), and so are combinations the API refuses (``temperature`` with ``top_p``
  on Claude 4.1 and later; ``temperature`` / ``top_k`` / a forced tool with thinking);
- a ``response_format`` with a JSON schema becomes a tool (``RESPONSE_TOOL``) whose input is
  the answer's text: forced when it is the only tool, required among the caller's tools
  (``any``), offered (``auto``) with extended thinking, which refuses a forced tool; a
  ``tool_choice`` the caller gave stays as given.

Answers: the text blocks joined, ``tool_use`` blocks as ``ToolCall``s, ``thinking`` and
``redacted_thinking`` blocks in ``ModelResponse.reasoning``, ``stop_reason`` as the finish
reason, and the usage with the cache tokens counted as input (the raw usage keeps each).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from turnlog._errors import UsageError

from ._codec import Codec, StreamFault, WireError, function_of, refuse_unknown
from ._errors import AuthenticationError, ProviderHTTPError, RateLimitError, ServerError
from ._fingerprint import sent_params
from ._http import error_class
from ._types import ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = [
    "ANTHROPIC_PARAMETERS",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "RESPONSE_TOOL",
    "AnthropicCodec",
    "to_messages",
]

#: The one stable version of the Messages API; thinking, prompt caching and tool use are all
#: part of it (newer features come with ``anthropic-beta`` headers, which ``headers=`` can add).
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
#: The forced tool that carries a structured answer (``response_format``) back as its input.
RESPONSE_TOOL = "turnlog_response"

#: Body fields the Messages API takes as they are.
_NATIVE = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "service_tier",
        "container",
        "inference_geo",
        "output_config",
        "cache_control",
    }
)
#: Chat Completions parameters with a Messages API form.
_TRANSLATED = frozenset({"stop", "max_completion_tokens", "user", "tool_choice", "parallel_tool_calls"})
#: Chat Completions' streaming option: the Messages API always reports usage in a stream, so
#: it has nothing to do and is left out of the body.
_IGNORED = frozenset({"stream_options"})
ANTHROPIC_PARAMETERS = _NATIVE | _TRANSLATED | _IGNORED
_TEXT_ONLY = frozenset({"type", "text"})
_THINKING = ("thinking", "redacted_thinking")
# Claude 4.1 and later refuse temperature together with top_p: opus-4-1, sonnet-4-5, ..., claude-5-*.
_MODEL_VERSION = re.compile(r"claude-(?:opus-|sonnet-|haiku-)?(\d+)(?:-(\d{1,2}))?(?:-|$|@)")


class AnthropicCodec(Codec):
    """``POST {base}/v1/messages``: the Anthropic Messages API."""

    api = "anthropic_messages"
    endpoint = "v1/messages"
    ACCEPTED_PARAMETERS = ANTHROPIC_PARAMETERS

    def path(self, model: str, *, stream: bool) -> tuple[str, str]:
        return "v1/messages", ""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def api_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The Messages API body for ``request``."""
        self.check_reserved(request)
        params = sent_params(request.params)
        refuse_unknown("Anthropic Messages", params, ANTHROPIC_PARAMETERS)
        system, messages = to_messages(request.messages)
        body: dict[str, Any] = {"model": model, "messages": messages}
        if system:
            body["system"] = system
        body.update({k: v for k, v in params.items() if k in _NATIVE})
        if "stop" in params:
            stop = params["stop"]
            body.setdefault("stop_sequences", [stop] if isinstance(stop, str) else stop)
        if "max_completion_tokens" in params:
            body.setdefault("max_tokens", params["max_completion_tokens"])
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if "user" in params:
            body["metadata"] = {"user_id": params["user"], **(body.get("metadata") or {})}
        tools = [_tool(t) for t in request.tools or ()]
        choice = _tool_choice(params)
        if request.response_format is not None:
            tools.append(_response_tool(request.response_format))
            if choice is None:
                choice = _answer_choice(bool(request.tools), params.get("thinking"))
        if tools:
            body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
        _check_sampling(model, body)
        if request.stream:
            body["stream"] = True
        return body

    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        if (
            not isinstance(raw, dict)
            or raw.get("type") != "message"
            or not isinstance(raw.get("content"), list)
        ):
            raise WireError(f"not a Messages API message: {str(raw)[:300]}")
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        for block in raw["content"]:
            if not isinstance(block, dict):
                raise WireError("a content block is not an object")
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind in _THINKING:
                reasoning.append(block)
            elif kind == "tool_use":
                arguments = block.get("input")
                if not isinstance(arguments, dict):
                    raise WireError(f"tool_use {block.get('id')}: input is not an object")
                if block.get("name") == RESPONSE_TOOL:
                    texts.append(orjson.dumps(arguments).decode())  # the structured answer
                else:
                    calls.append(
                        ToolCall(str(block.get("id") or ""), str(block.get("name") or ""), arguments)
                    )
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            raw=raw,
            usage=usage_of(raw.get("usage")),
            model=str(raw.get("model") or model),
            provider=provider,
            finish_reason=raw.get("stop_reason"),
            reasoning=tuple(reasoning),
            cache_read_tokens=_count(raw.get("usage"), "cache_read_input_tokens"),
            cache_write_tokens=_count(raw.get("usage"), "cache_creation_input_tokens"),
        )

    def assembly(self, model: str) -> MessageAssembly:
        return MessageAssembly(model)

    def error_parts(self, body: Any) -> tuple[str, Any]:
        detail = body.get("error") if isinstance(body, dict) else None
        if isinstance(detail, dict):
            return str(detail.get("message", detail)), detail.get("type")
        return str(body), None

    def error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        if code in ("authentication_error", "permission_error"):
            return AuthenticationError
        if code == "rate_limit_error":
            return RateLimitError
        if code == "overloaded_error" or status == 529:
            return ServerError
        return error_class(status, code, message)


def usage_of(raw: Any) -> Usage:
    """The ``Usage`` of a Messages API ``usage`` object.

    The API counts the cache reads and writes apart from ``input_tokens``; ``Usage`` counts
    every prompt token as input and says how many of them were cache reads and writes.
    """
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
        cache_read_tokens=_count(raw, "cache_read_input_tokens"),
        cache_write_tokens=_count(raw, "cache_creation_input_tokens"),
    )


def _count(usage: Any, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _claude_version(model: str) -> tuple[int, int] | None:
    match = _MODEL_VERSION.search(model)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def _check_sampling(model: str, body: dict[str, Any]) -> None:
    """Refuse the sampling combinations the API answers with 400, naming the rule."""
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        if body.get("temperature") not in (None, 1, 1.0):
            raise UsageError(
                "Anthropic: extended thinking takes no temperature other than 1; drop temperature"
            )
        if "top_k" in body:
            raise UsageError("Anthropic: extended thinking takes no top_k; drop top_k")
        choice = body.get("tool_choice")
        if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
            raise UsageError(
                "Anthropic: extended thinking cannot force a tool (tool_choice any/tool); "
                "use tool_choice auto, or turn thinking off"
            )
    version = _claude_version(model)
    if "temperature" in body and "top_p" in body and version is not None and version >= (4, 1):
        raise UsageError(
            f"Anthropic: {model} takes temperature or top_p, not both (Claude 4.1 and later); drop one"
        )


def _tool_choice(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Messages API ``tool_choice`` of the Chat Completions ``tool_choice`` and ``parallel_tool_calls``."""
    choice = params.get("tool_choice")
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        out = {"type": "tool", "name": str(function_of(choice)["name"])}
    elif isinstance(choice, Mapping) and choice.get("type") in ("auto", "any", "tool", "none"):
        out = dict(choice)  # already in Messages form
    else:
        raise UsageError(
            f"Anthropic: tool_choice {choice!r} has no Messages API form "
            "(use auto, none, required or {'type': 'function', 'function': {'name': ...}})"
        )
    parallel = params.get("parallel_tool_calls")
    if parallel is None:
        return out
    if not isinstance(parallel, bool):
        raise UsageError(f"parallel_tool_calls must be True or False, not {parallel!r}")
    if out is None:
        out = {"type": "auto"}
    if out["type"] == "none":
        return out  # no tool is called: parallelism means nothing (the API refuses the flag there)
    out["disable_parallel_tool_use"] = not parallel
    return out


def _answer_choice(acting: bool, thinking: Any) -> dict[str, Any]:
    """How a structured answer is asked for when the caller named no ``tool_choice``.

    Alone, the response tool is forced. Beside the caller's tools the model must call one of
    them or answer through the response tool (``any``). With extended thinking, which refuses a
    forced tool, the response tool is offered (``auto``) and the instruction asks for the JSON.
    """
    if isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive"):
        return {"type": "auto"}
    return {"type": "any"} if acting else {"type": "tool", "name": RESPONSE_TOOL}


def _response_tool(response_format: Mapping[str, Any]) -> dict[str, Any]:
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise UsageError("response_format json_schema needs a schema object")
        described = spec.get("description") or f"Answer with {spec.get('name') or 'the result'}."
    elif kind == "json_object":
        schema, described = {"type": "object"}, "Answer with a JSON object."
    else:
        raise UsageError(f"Anthropic: response_format type {kind!r} has no Messages API form")
    return {"name": RESPONSE_TOOL, "description": str(described), "input_schema": dict(schema)}


def _tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    if schema.get("type") not in (None, "function"):
        return dict(schema)  # a server tool (web_search_...) already in Messages form
    function = function_of(schema)
    tool: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        tool["description"] = function["description"]
    tool["input_schema"] = dict(function.get("parameters") or {"type": "object", "properties": {}})
    if "cache_control" in schema:
        tool["cache_control"] = schema["cache_control"]
    return tool


def _blocks(content: Any) -> list[dict[str, Any]]:
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
                blocks.append({**part, "text": str(part["text"])})  # cache_control, citations stay
        elif part.get("type") == "image_url":
            image = _image(part.get("image_url"))
            if "cache_control" in part:
                image["cache_control"] = part["cache_control"]
            blocks.append(image)
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


def _system(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(set(b) <= _TEXT_ONLY and b.get("type") == "text" for b in blocks):
        return "\n\n".join(str(b["text"]) for b in blocks)
    return blocks  # cache markers (or other block fields) must reach the API as blocks


def to_messages(messages: list[dict[str, Any]]) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """Chat Completions messages as the Messages API's ``system`` and ``messages``.

    Raises:
        UsageError: A message has a role the Messages API cannot express.
    """
    system: list[dict[str, Any]] = []
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
            system.extend(b for b in _blocks(message.get("content")) if b.get("type") == "text")
        elif role == "user":
            push("user", _blocks(message.get("content")))
        elif role == "assistant":
            # Thinking goes back first and unchanged: the signature covers it.
            blocks = [dict(b) for b in message.get("thinking_blocks") or () if isinstance(b, Mapping)]
            blocks.extend(_blocks(message.get("content")))
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
                result["content"] = content if isinstance(content, str) else _blocks(content)
            if message.get("is_error"):
                result["is_error"] = True
            # Tool results open the user turn that answers the calls.
            if out and out[-1]["role"] == "user" and out[-1]["content"][0].get("type") == "tool_result":
                out[-1]["content"].append(result)
            else:
                push("user", [result])
        else:
            raise UsageError(f"messages[{i}]: role {role!r} has no Messages API form")
    return (_system(system) if system else ""), out


class MessageAssembly:
    """Folds the Messages API stream events into one ``message`` object, noting the chunks they make."""

    unit = "events"
    end_marker: str | None = None

    def __init__(self, model: str) -> None:
        self._model = model
        self.count = 0
        self._stopped = False
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._pieces: list[StreamChunk] = []

    @property
    def stopped(self) -> bool:
        return self._stopped

    def missing(self) -> str | None:
        return None if self._stopped else "message_stop"

    def add(self, event: Any) -> bool:
        """Fold one event; True when it carried output (text, thinking, a tool call's start)."""
        if not isinstance(event, dict):
            raise WireError("an SSE event is not an object")
        if event.get("type") == "error":
            detail = event.get("error")
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            kind = detail.get("type") if isinstance(detail, dict) else None
            raise StreamFault(
                f"{kind or 'error'} event in the stream after {self.count} events: {message}",
                detail,
                rate_limited=kind == "rate_limit_error",
            )
        self.count += 1
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
            return block.get("type") == "redacted_thinking"
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
            self._stopped = True
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
        if block.get("name") == RESPONSE_TOOL:
            # A structured answer is the answer's text, not a tool call.
            content = orjson.dumps(block["input"]).decode()
            self._pieces.append(StreamChunk(type="text", content=content, is_delta=True))
            return
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

    def result(self) -> dict[str, Any]:
        """The assembled object, shaped like a non-streamed ``message``."""
        message = {"type": "message", "role": "assistant", "model": self._model, **self._message}
        message["content"] = [block for _, block in sorted(self._blocks.items())]
        return message
