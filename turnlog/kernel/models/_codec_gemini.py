"""The Gemini API codec (``generateContent``): request bodies, answers and stream chunks, without I/O.

Requests arrive in Chat Completions form and are translated once:

- ``system`` / ``developer`` messages become ``systemInstruction``;
- user turns are ``role: "user"`` contents, assistant turns ``role: "model"``; text parts,
  images as ``inlineData`` (data URIs) or ``fileData`` (URLs);
- an assistant turn's ``tool_calls`` become ``functionCall`` parts, each with the
  ``thoughtSignature`` the answer gave it (carried as ``extra_content.google.thought_signature``
  on the call, as Google's OpenAI-compatible endpoint does): Gemini 3 refuses a function call
  sent back without its signature; ``tool`` messages become ``functionResponse`` parts (named
  after the call they answer) of one user turn;
- tools become one ``functionDeclarations`` tool; ``temperature``, ``top_p``, ``max_tokens``,
  ``stop`` and friends go into ``generationConfig``; ``tool_choice`` into
  ``toolConfig.functionCallingConfig``; a ``json_schema`` response format becomes
  ``responseMimeType: application/json`` with ``responseJsonSchema``; parameters Gemini has no
  form for (``user``, ``parallel_tool_calls=False``, ...) are refused before sending.

Answers: the text parts of the first candidate (``thought`` parts are thinking, kept in the
raw answer), ``functionCall`` parts as ``ToolCall``s (the API's call ``id`` when it gives
one, else a generated ``call_...`` id; the part's ``thoughtSignature`` as the signature),
``finishReason``, ``modelVersion`` as the served model, and ``usageMetadata`` (output =
candidates + thoughts tokens). A key the API does not know is answered with 400
``INVALID_ARGUMENT`` / ``API_KEY_INVALID``: it is an ``AuthenticationError``. An error inside a
stream is a ``ServerError`` (``RateLimitError`` for ``RESOURCE_EXHAUSTED``); the ``retryDelay``
of a ``RetryInfo`` detail is the wait before the next attempt when no header names one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from turnlog._errors import UsageError

from ._codec import Codec, StreamFault, WireError, function_of, refuse_unknown
from ._errors import AuthenticationError, ProviderHTTPError, RateLimitError
from ._fingerprint import sent_params
from ._http import error_class
from ._types import ChunkType, ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = ["GEMINI_PARAMETERS", "GeminiCodec", "to_contents"]

_CONFIG = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "stop": "stopSequences",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "n": "candidateCount",
}
#: Top-level fields of a ``generateContent`` body that a caller may set as they are.
_NATIVE = frozenset({"safetySettings", "generationConfig", "toolConfig", "cachedContent"})
# ``stream_options`` is Chat Completions' streaming option: Gemini always reports usage in a
# stream, so it has nothing to do and is left out of the body.
GEMINI_PARAMETERS = frozenset(_CONFIG) | _NATIVE | {"tool_choice", "parallel_tool_calls", "stream_options"}
_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class GeminiCodec(Codec):
    """``POST {base}/v1beta/models/{model}:generateContent`` (``:streamGenerateContent?alt=sse``)."""

    api = "gemini"
    endpoint = "v1beta/models/{model}:generateContent"
    ACCEPTED_PARAMETERS = GEMINI_PARAMETERS

    def path(self, model: str, *, stream: bool) -> tuple[str, str]:
        method = "streamGenerateContent" if stream else "generateContent"
        return f"v1beta/models/{quote(model, safe='')}:{method}", "alt=sse" if stream else ""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The ``generateContent`` body for ``request``."""
        self.check_reserved(request)
        params = sent_params(request.params)
        refuse_unknown("Gemini", params, GEMINI_PARAMETERS)
        system, contents = to_contents(request.messages)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        for key, value in params.items():
            if key in _CONFIG:
                config[_CONFIG[key]] = [value] if key == "stop" and isinstance(value, str) else value
            elif key in _NATIVE:
                body[key] = value
        fmt = request.response_format or {}
        if fmt.get("type") in ("json_schema", "json_object"):
            config["responseMimeType"] = "application/json"
            schema = (fmt.get("json_schema") or {}).get("schema")
            if schema:
                config["responseJsonSchema"] = schema
        if config:
            body["generationConfig"] = {**config, **(body.get("generationConfig") or {})}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
        calling = _function_calling(params)
        if calling is not None:
            tool_config = dict(body.get("toolConfig") or {})
            tool_config["functionCallingConfig"] = {
                **calling,
                **(tool_config.get("functionCallingConfig") or {}),
            }
            body["toolConfig"] = tool_config
        return body

    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        candidates = raw.get("candidates") if isinstance(raw, dict) else None
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            blocked = raw.get("promptFeedback") if isinstance(raw, dict) else None
            why = f" (promptFeedback: {blocked})" if blocked else ""
            raise WireError(f"no candidates in the answer{why}: {str(raw)[:300]}")
        candidate = candidates[0]
        parts = (candidate.get("content") or {}).get("parts") or []
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            if "text" in part and not part.get("thought"):
                texts.append(str(part["text"]))
            call = part.get("functionCall")
            if isinstance(call, dict):
                arguments = call.get("args") or {}
                if not isinstance(arguments, dict):
                    raise WireError(f"functionCall {call.get('name')}: args is not an object")
                call_id = str(call.get("id") or f"call_{secrets.token_hex(12)}")
                call["id"] = call_id  # recorded with the id the history will name
                signature = part.get("thoughtSignature")
                calls.append(
                    ToolCall(
                        call_id,
                        str(call.get("name") or ""),
                        arguments,
                        signature=signature if isinstance(signature, str) else None,
                    )
                )
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            raw=raw,
            usage=_usage(raw.get("usageMetadata")),
            model=str(raw.get("modelVersion") or model),
            provider=provider,
            finish_reason=candidate.get("finishReason"),
            cache_read_tokens=_cached(raw.get("usageMetadata")),
        )

    def assembly(self, model: str) -> ContentAssembly:
        return ContentAssembly()

    def error_parts(self, body: Any) -> tuple[str, Any]:
        detail = _error_detail(body)
        if isinstance(detail, dict):
            return str(detail.get("message", detail)), detail.get("status")
        return str(body), None

    def error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        if status == 400 and (
            "API_KEY_INVALID" in orjson.dumps(body).decode() or "API key not valid" in message
        ):
            return AuthenticationError
        if code == "RESOURCE_EXHAUSTED":
            return RateLimitError
        return error_class(status, code, message)

    def retry_after(self, body: Any) -> float | None:
        """The ``retryDelay`` (``"37s"``) of a ``google.rpc.RetryInfo`` detail of the error."""
        detail = _error_detail(body)
        for item in (detail.get("details") if isinstance(detail, dict) else None) or ():
            if isinstance(item, dict) and str(item.get("@type", "")).endswith("google.rpc.RetryInfo"):
                match = _DURATION.match(str(item.get("retryDelay", "")))
                if match:
                    return float(match.group(1))
        return None


def _cached(usage: Any) -> int | None:
    value = usage.get("cachedContentTokenCount") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error_detail(body: Any) -> Any:
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]  # a streamed call's error comes as a one-element array
    return body.get("error") if isinstance(body, dict) else None


def _function_calling(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``functionCallingConfig`` of the Chat Completions ``tool_choice`` / ``parallel_tool_calls``."""
    parallel = params.get("parallel_tool_calls")
    if parallel is False:
        raise UsageError(
            "Gemini: parallel_tool_calls=False has no Gemini form (the model decides); "
            "drop it, or use tool_choice to name one function"
        )
    choice = params.get("tool_choice")
    if choice is None:
        return None
    if isinstance(choice, str) and choice in _MODES:
        return {"mode": _MODES[choice]}
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return {"mode": "ANY", "allowedFunctionNames": [str(function_of(choice)["name"])]}
    raise UsageError(
        f"Gemini: tool_choice {choice!r} has no Gemini form "
        "(use auto, none, required or {'type': 'function', 'function': {'name': ...}})"
    )


def _signature(call: Mapping[str, Any]) -> str | None:
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, Mapping) else None
    value = google.get("thought_signature") if isinstance(google, Mapping) else None
    return value if isinstance(value, str) and value else None


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def count(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    prompt, candidates, thoughts = (
        count("promptTokenCount"),
        count("candidatesTokenCount"),
        count("thoughtsTokenCount"),
    )
    output = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    # promptTokenCount includes the cached tokens, as Usage counts them.
    return Usage(
        input_tokens=prompt, output_tokens=output, cache_read_tokens=count("cachedContentTokenCount")
    )


def _declaration(schema: Mapping[str, Any]) -> dict[str, Any]:
    function = function_of(schema)
    declaration: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        declaration["description"] = function["description"]
    if function.get("parameters"):
        declaration["parametersJsonSchema"] = dict(function["parameters"])
    return declaration


def _parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, Mapping):
            parts.append({"text": str(part)})
        elif part.get("type") == "text":
            if part.get("text"):
                parts.append({"text": str(part["text"])})
        elif part.get("type") == "image_url":
            value = part.get("image_url")
            url = str((value.get("url") if isinstance(value, Mapping) else value) or "")
            if url.startswith("data:") and ";base64," in url:
                head, _, data = url.partition(";base64,")
                parts.append({"inlineData": {"mimeType": head[5:], "data": data}})
            else:
                parts.append({"fileData": {"fileUri": url}})
        else:
            parts.append(dict(part))  # already a Gemini part
    return parts


def _result(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        try:
            value = orjson.loads(content)
        except orjson.JSONDecodeError:
            return {"output": content}
        return value if isinstance(value, dict) else {"output": value}
    return {"output": content}


def to_contents(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Chat Completions messages as Gemini's system instruction text and ``contents``.

    Raises:
        UsageError: A message has a role Gemini cannot express.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def push(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})

    for i, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(p["text"] for p in _parts(message.get("content")) if "text" in p)
        elif role == "user":
            push("user", _parts(message.get("content")))
        elif role == "assistant":
            parts = _parts(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = str(function.get("name") or "")
                names[str(call.get("id") or "")] = name
                arguments = function.get("arguments")
                args = _result(arguments) if isinstance(arguments, str) and arguments.strip() else {}
                if isinstance(arguments, dict):
                    args = arguments
                part: dict[str, Any] = {
                    "functionCall": {"id": str(call.get("id") or ""), "name": name, "args": args}
                }
                signature = _signature(call)
                if signature is not None:
                    part["thoughtSignature"] = signature  # unchanged, on the part it came with
                parts.append(part)
            push("model", parts)
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            response = {
                "id": call_id,
                "name": names.get(call_id, ""),
                "response": _result(message.get("content")),
            }
            push("user", [{"functionResponse": response}])
        else:
            raise UsageError(f"messages[{i}]: role {role!r} has no Gemini form")
    return "\n\n".join(system), out


class ContentAssembly:
    """Folds ``streamGenerateContent`` chunks into one response, noting the chunks they make."""

    unit = "chunks"
    end_marker: str | None = None
    #: Gemini's stream has no closing event: it is complete when a chunk gave a finish reason.
    stopped = False

    def __init__(self) -> None:
        self.count = 0
        self.finish: str | None = None
        self._head: dict[str, Any] = {}
        self._parts: list[dict[str, Any]] = []
        self._pieces: list[StreamChunk] = []

    def missing(self) -> str | None:
        return None if self.finish is not None else "a finishReason"

    def add(self, chunk: Any) -> bool:
        """Fold one chunk; True when it carried output."""
        if isinstance(chunk, dict) and chunk.get("error"):
            detail = chunk["error"]
            message = detail.get("message", detail) if isinstance(detail, dict) else detail
            status = detail.get("status") if isinstance(detail, dict) else None
            raise StreamFault(
                f"{status or 'error'} in the stream after {self.count} chunks: {message}",
                detail,
                rate_limited=status == "RESOURCE_EXHAUSTED",
            )
        if not isinstance(chunk, dict):
            raise WireError("a stream chunk is not an object")
        self.count += 1
        for key in ("usageMetadata", "modelVersion", "responseId", "promptFeedback"):
            if key in chunk:
                self._head[key] = chunk[key]
        candidates = chunk.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        if candidate.get("finishReason"):
            self.finish = candidate["finishReason"]
        output = False
        for part in (candidate.get("content") or {}).get("parts") or []:
            if not isinstance(part, dict):
                continue
            output = True
            if "text" in part:
                kind: ChunkType = "thinking" if part.get("thought") else "text"
                last = self._parts[-1] if self._parts else None
                if (
                    last is not None
                    and "text" in last
                    and bool(last.get("thought")) == bool(part.get("thought"))
                ):
                    last["text"] += str(part["text"])
                else:
                    self._parts.append(dict(part))
                if part["text"]:
                    self._pieces.append(StreamChunk(type=kind, content=str(part["text"]), is_delta=True))
            elif isinstance(part.get("functionCall"), dict):
                call = {**part["functionCall"]}
                call.setdefault("id", f"call_{secrets.token_hex(12)}")  # the chunk and the answer agree
                self._parts.append({**part, "functionCall": call})
                self._pieces.append(
                    StreamChunk(
                        type="tool_use",
                        tool_name=call.get("name"),
                        tool_id=call.get("id"),
                        tool_input=call.get("args") if isinstance(call.get("args"), dict) else {},
                    )
                )
            else:
                self._parts.append(dict(part))
        return output

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call."""
        pieces, self._pieces = self._pieces, []
        return pieces

    def result(self) -> dict[str, Any]:
        """The assembled object, shaped like a ``generateContent`` answer."""
        candidate = {
            "content": {"role": "model", "parts": self._parts},
            "finishReason": self.finish,
            "index": 0,
        }
        return {"candidates": [candidate], **self._head}
