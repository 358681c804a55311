"""The Gemini API (Generative Language) over httpx: ``generateContent`` and ``streamGenerateContent``.

``GeminiAPIModel`` implements ``ChatModel`` for ``POST {base_url}/v1beta/models/{model}:generateContent``
(and ``:streamGenerateContent?alt=sse`` when streaming). Like ``AnthropicModel`` it shares the
transport of ``OpenAIChatModel`` and translates the Chat Completions form of a request once:

- ``system`` / ``developer`` messages become ``systemInstruction``;
- user turns are ``role: "user"`` contents, assistant turns ``role: "model"``; text parts,
  images as ``inlineData`` (data URIs) or ``fileData`` (URLs);
- an assistant turn's ``tool_calls`` become ``functionCall`` parts, and ``tool`` messages
  become ``functionResponse`` parts (named after the call they answer) of the next user turn;
- tools become one ``functionDeclarations`` tool; ``temperature``, ``top_p``, ``max_tokens``
  and ``stop`` go into ``generationConfig``; a ``json_schema`` response format becomes
  ``responseMimeType: application/json`` with ``responseJsonSchema``.

Answers: the text parts of the first candidate (``thought`` parts are thinking, kept in the
raw answer), ``functionCall`` parts as ``ToolCall``s (the API's call ``id`` when it gives
one, else a generated ``call_...`` id), ``finishReason``, ``modelVersion`` as the served model,
and ``usageMetadata`` (output = candidates + thoughts tokens). A key the API does not know is
answered with 400 ``INVALID_ARGUMENT`` / ``API_KEY_INVALID``: it raises ``AuthenticationError``.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import orjson

from turnlog._errors import UsageError

from ._errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderHTTPError,
    RateLimitError,
)
from ._http import Failure, error_class, scrubbed
from ._openai import OpenAIChatModel
from ._secrets import Scrubber
from ._sse import sse_data, sse_lines
from ._types import ChunkSink, ChunkType, ModelRequest, ModelResponse, StreamChunk, ToolCall, Usage

__all__ = ["GEMINI_BASE_URL", "GeminiAPIModel", "to_contents"]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
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


class GeminiAPIModel(OpenAIChatModel):
    """A Gemini API client (generativelanguage.googleapis.com or any server speaking it).

    Args:
        model: The model, e.g. ``gemini-2.5-flash``.
        provider: The provider name recorded with each call (default ``gemini_api``).
        base_url: The API root without ``/v1beta``; default the Generative Language API.
        api_key: The key; when None it is read from ``$GEMINI_API_KEY``, else ``$GOOGLE_API_KEY``.
        timeout, retry, headers, client: As for ``OpenAIChatModel``.
    """

    endpoint = "v1beta/models/{model}:generateContent"
    default_provider = "gemini_api"
    default_base_url = GEMINI_BASE_URL
    default_api_key_env = "GEMINI_API_KEY"
    #: The OpenAI names it maps into ``generationConfig`` (``_CONFIG``) and the native fields
    #: of a ``generateContent`` body; see ``OpenAIChatModel.request_params``.
    request_params = frozenset(_CONFIG) | {
        "cachedContent", "generationConfig", "safetySettings", "stream_options", "toolConfig",
    }  # fmt: skip

    @property
    def url(self) -> str:
        """The ``generateContent`` URL of the model."""
        return self._method_url("generateContent")

    def _method_url(self, method: str, query: str = "") -> str:
        parts = urlsplit(self.base_url)
        path = f"{parts.path.rstrip('/')}/v1beta/models/{quote(self.model, safe='')}:{method}"
        joined = "&".join(q for q in (parts.query, query) if q)
        return urlunsplit(parts._replace(path=path, query=joined))

    def _target(self, stream: bool) -> str:
        return self._method_url("streamGenerateContent", "alt=sse") if stream else self.url

    def _key(self) -> str | None:
        if self._api_key is None and self.api_key_env == "GEMINI_API_KEY":
            fallback = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
            if fallback:
                return fallback
        return super()._key()

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The ``generateContent`` body for ``request``."""
        base = super().build_body(
            dataclasses.replace(request, stream=False, response_format=None, tools=None)
        )
        system, contents = to_contents(request.messages)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        for key, value in base.items():
            if key in ("model", "messages", "stream_options"):
                continue
            if key in _CONFIG:
                config[_CONFIG[key]] = [value] if key == "stop" and isinstance(value, str) else value
            else:
                body[key] = value  # a native field (safetySettings, generationConfig, ...)
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
        return body

    def _request_headers(self, key: str | None, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "User-Agent": "turnlog",
            **self._headers,
        }
        if key:
            headers["x-goog-api-key"] = key
        return headers

    def _error_parts(self, body: Any) -> tuple[str, Any]:
        detail = body.get("error") if isinstance(body, dict) else None
        if isinstance(body, list) and body and isinstance(body[0], dict):
            detail = body[0].get("error")  # a streamed call's error comes as a one-element array
        if isinstance(detail, dict):
            return str(detail.get("message", detail)), detail.get("status")
        return str(body), None

    def _error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        if status == 400 and (
            "API_KEY_INVALID" in orjson.dumps(body).decode() or "API key not valid" in message
        ):
            return AuthenticationError
        if code == "RESOURCE_EXHAUSTED":
            return RateLimitError
        return error_class(status, code, message)

    def _from_completion(self, raw: Any, scrub: Scrubber) -> ModelResponse:
        raw = scrub(raw)
        candidates = raw.get("candidates") if isinstance(raw, dict) else None
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            blocked = raw.get("promptFeedback") if isinstance(raw, dict) else None
            why = f" (promptFeedback: {blocked})" if blocked else ""
            raise self._format_error(f"no candidates in the answer{why}: {str(raw)[:300]}", scrub)
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
                    raise self._format_error(f"functionCall {call.get('name')}: args is not an object", scrub)
                call_id = str(call.get("id") or f"call_{secrets.token_hex(12)}")
                call["id"] = call_id  # recorded with the id the history will name
                calls.append(ToolCall(call_id, str(call.get("name") or ""), arguments))
        return ModelResponse(
            text="".join(texts),
            tool_calls=tuple(calls),
            raw=raw,
            usage=_usage(raw.get("usageMetadata")),
            model=str(raw.get("modelVersion") or self.model),
            provider=self.provider,
            finish_reason=candidate.get("finishReason"),
        )

    async def _read_stream(
        self, response: httpx.Response, started: float, scrub: Scrubber, on_chunk: ChunkSink | None = None
    ) -> ModelResponse:
        assembly = _ContentAssembly()
        ttft: float | None = None
        try:
            async for data in sse_data(sse_lines(response.aiter_text())):
                chunk = self._decode_json(data, scrub)
                if isinstance(chunk, dict) and chunk.get("error"):
                    message, _ = self._error_parts(scrub(chunk))
                    raise Failure(
                        ProviderConnectionError(
                            f"{self.provider} {self.model}: error in the stream after {assembly.chunks} "
                            f"chunks: {message}",
                            provider=self.provider,
                            model=self.model,
                        ),
                        retryable=False,
                    )
                if not isinstance(chunk, dict):
                    raise Failure(
                        self._format_error("a stream chunk is not an object", scrub), retryable=False
                    )
                if assembly.add(chunk) and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000.0
                if on_chunk is not None:
                    for piece in assembly.take_pieces():
                        await on_chunk(scrubbed(piece, scrub))
        except httpx.RequestError as exc:
            raise self._stream_cut(exc, assembly.chunks, "chunks") from exc
        if assembly.finish is None:
            raise Failure(
                ProviderConnectionError(
                    f"{self.provider} {self.model}: the stream ended without a finishReason after "
                    f"{assembly.chunks} chunks (truncated answer discarded)",
                    provider=self.provider,
                    model=self.model,
                ),
                retryable=False,
            )
        return dataclasses.replace(self._from_completion(assembly.response(), scrub), ttft_ms=ttft)


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
    return Usage(input_tokens=prompt, output_tokens=output)


def _declaration(schema: Mapping[str, Any]) -> dict[str, Any]:
    function = schema.get("function") if schema.get("type") == "function" else schema
    if not isinstance(function, Mapping) or not function.get("name"):
        raise UsageError(f"a tool schema needs a function name: {dict(schema)!r}")
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
        ValueError: a message has a role Gemini cannot express.
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
                parts.append({"functionCall": {"id": str(call.get("id") or ""), "name": name, "args": args}})
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


class _ContentAssembly:
    """Folds ``streamGenerateContent`` chunks into one response, noting the chunks they make."""

    def __init__(self) -> None:
        self.chunks = 0
        self.finish: str | None = None
        self._head: dict[str, Any] = {}
        self._parts: list[dict[str, Any]] = []
        self._pieces: list[StreamChunk] = []

    def add(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk; True when it carried output."""
        self.chunks += 1
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

    def response(self) -> dict[str, Any]:
        """The assembled object, shaped like a ``generateContent`` answer."""
        candidate = {
            "content": {"role": "model", "parts": self._parts},
            "finishReason": self.finish,
            "index": 0,
        }
        return {"candidates": [candidate], **self._head}
