"""The Gemini API (Generative Language) of the fake upstream: requests read, entries rendered.

``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` (on Vertex AI
``/v1beta1/[projects/{p}/locations/{l}/]publishers/google/models/{model}:...``) answers an SSE stream of
``GenerateContentResponse`` chunks (``data:`` lines only, CRLF CRLF framing): each chunk a
``candidates[0].content`` with ``role: "model"`` and ``parts`` (``{"text"}``, ``{"text", "thought":
true}``, ``{"functionCall": {"name", "args"}}``), ``usageMetadata`` on every chunk and
``finishReason: "STOP"`` on the last; ``:generateContent`` answers one such object as JSON;
``:countTokens`` answers ``{"totalTokens": N}``. Errors are Google's ``{"error": {"code",
"message", "status", "details"}}`` (a bad key is 400 ``INVALID_ARGUMENT`` with an ``ErrorInfo``
whose reason is ``API_KEY_INVALID``; a 429 carries ``RetryInfo``).

Gemini CLI's default model (``auto``) first asks a flash-lite model, through ``generateContent``
with a JSON answer format, whether the request needs a ``flash`` or ``pro`` model; the server
answers that routing request itself (``routing_reply``).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from ._fake_gemini_checks import signs_calls
from ._fake_upstream_script import RequestView, UpstreamEntry, UpstreamError, fill_template
from ._fake_upstream_wire import Reply, fragments
from ._loopback import sse, words

__all__ = [
    "BAD_KEY",
    "count_tokens",
    "error_reply",
    "is_routing",
    "operation",
    "reply",
    "routing_reply",
    "view",
]

#: The Gemini API's model paths, and Vertex AI's (``/v1beta1/[projects/P/locations/L/]publishers/google/models/M``).
_PATH = re.compile(
    r"^/v1(?:beta1?|alpha)?/(?:(?:projects/[^/]+/locations/[^/]+/)?publishers/google/)?models/([^/:]+)"
    r":(streamGenerateContent|generateContent|countTokens)$"
)
_STATUS = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "Request had invalid authentication credentials."),
    403: ("PERMISSION_DENIED", "The caller does not have permission."),
    404: ("NOT_FOUND", "models/unknown is not found for API version v1beta."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: ("INTERNAL", "An internal error has occurred."),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}

BAD_KEY = UpstreamError(
    message="API key not valid. Please pass a valid API key.",
    type="INVALID_ARGUMENT",
    reason="API_KEY_INVALID",
)
"""What the real API answers (with status 400) to a key it does not know."""


def operation(path: str) -> str | None:
    """``streamGenerateContent`` / ``generateContent`` / ``countTokens`` for a Gemini model path."""
    found = _PATH.match(path.split("?", 1)[0])
    return found.group(2) if found else None


def _model(path: str) -> str:
    found = _PATH.match(path.split("?", 1)[0])
    return found.group(1) if found else ""


def _parts_text(parts: Any) -> str:
    return (
        "\n".join(
            str(p.get("text", ""))
            for p in parts
            if isinstance(p, dict) and "text" in p and not p.get("thought")
        )
        if isinstance(parts, list)
        else ""
    )


def _responses(parts: Any) -> list[str]:
    out = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"].get("response")
            if isinstance(response, dict) and set(response) <= {"output", "error"}:
                value = response.get("output", response.get("error"))
                out.append(value if isinstance(value, str) else json.dumps(value))
            else:
                out.append(json.dumps(response))
    return out


def _is_context(text: str) -> bool:
    # The CLI sends its session context as a user turn wrapped in one XML-like tag.
    stripped = text.strip()
    return stripped.startswith("<") and stripped.endswith(">")


def view(body: Any, path: str) -> RequestView:
    """The request as matching and templates see it."""
    body = body if isinstance(body, dict) else {}
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    users = [c for c in contents if c.get("role", "user") == "user"]
    prompts = [
        c for c in users if not _responses(c.get("parts")) and not _is_context(_parts_text(c.get("parts")))
    ]
    last = users[-1] if users else {}
    results = _responses(last.get("parts"))
    system = body.get("systemInstruction") or {}
    everything = _parts_text(system.get("parts") if isinstance(system, dict) else None) + " ".join(
        _parts_text(c.get("parts")) + " ".join(_responses(c.get("parts"))) for c in contents
    )
    return RequestView(
        api="gemini",
        model=_model(path),
        stream=operation(path) == "streamGenerateContent",
        has_tools=bool(body.get("tools")),
        last_user_text=_parts_text(prompts[-1].get("parts")) if prompts else "",
        user_turns=len(prompts),
        tool_result="\n".join(results) if results else None,
        input_words=words(everything) + len(json.dumps(body.get("tools") or [])) // 40,
    )


def _schema(body: dict[str, Any]) -> str:
    config = body.get("generationConfig") or {}
    return json.dumps(config.get("responseJsonSchema") or config.get("responseSchema") or "")


def is_routing(body: Any) -> bool:
    """Whether a request is Gemini CLI's model-routing question.

    The router asks, with a JSON answer format, for a ``model_choice`` (``flash`` / ``pro``) or
    a ``complexity_score`` (1-100) of the user's request.
    """
    if not isinstance(body, dict):
        return False
    schema = _schema(body)
    return "model_choice" in schema or "complexity_score" in schema


def count_tokens(body: Any) -> dict[str, Any]:
    """The ``countTokens`` answer."""
    return {"totalTokens": max(view(body, "").input_words, 1)}


def _usage(entry: UpstreamEntry | None, request: RequestView, output: int, thoughts: int) -> dict[str, Any]:
    given = (entry.usage if entry else None) or {}
    prompt = given.get("input_tokens", max(request.input_words, 1))
    candidates = given.get("output_tokens", max(output, 1))
    thinking = given.get("thinking_tokens", thoughts)
    usage: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thinking,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thinking:
        usage["thoughtsTokenCount"] = thinking
    if given.get("cached_tokens"):
        usage["cachedContentTokenCount"] = given["cached_tokens"]
    return usage


def _chunk(
    parts: list[dict[str, Any]], model: str, number: int, usage: dict[str, Any], finish: bool
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": f"fake{number:016d}",
    }


def reply(entry: UpstreamEntry, request: RequestView, number: int) -> Reply:
    """The answer to a generateContent request: JSON, or SSE chunks for ``streamGenerateContent``."""
    text = fill_template(entry, request)
    model = entry.model or request.model or "gemini-fake"
    calls: list[dict[str, Any]] = [
        {"functionCall": {"name": c.name, "args": dict(c.arguments)}} for c in entry.tool_calls
    ]
    if calls and signs_calls(request.model):
        # Gemini 3 signs the first call of a turn; the next request must send it back (checked).
        calls[0]["thoughtSignature"] = base64.b64encode(f"fake-signature-{number}".encode()).decode()
    thought = [{"text": entry.thinking, "thought": True}] if entry.thinking else []
    if text or not (calls or thought):
        answer = [{"text": text}]
    else:
        answer = []
    usage = _usage(
        entry, request, words(text) + sum(len(json.dumps(c)) // 4 for c in calls), words(entry.thinking or "")
    )
    headers = dict(entry.headers)
    if not request.stream:
        return Reply(
            200, body=_chunk([*thought, *answer, *calls], model, number, usage, True), headers=headers
        )
    partial = {
        k: v for k, v in usage.items() if k in ("promptTokenCount", "totalTokenCount", "promptTokensDetails")
    }
    partial["totalTokenCount"] = usage["promptTokenCount"]
    pieces: list[list[dict[str, Any]]] = [[part] for part in thought]
    pieces += [[{"text": piece}] for piece in fragments(text, entry.chunk_chars) if piece] if answer else []
    if calls:
        pieces.append(calls)
    pieces = pieces or [[{"text": ""}]]
    frames = [
        sse(_chunk(parts, model, number, partial, False), crlf=True, paced=True) for parts in pieces[:-1]
    ]
    tail = [sse(_chunk(pieces[-1], model, number, usage, True), crlf=True, paced=True)]
    error_frame = None
    if entry.stream_error is not None:
        error_frame = sse(_error_body(500, entry.stream_error), crlf=True)
    return Reply(200, frames=frames + tail, headers=headers, error_frame=error_frame, tail=len(tail))


def routing_reply(body: Any, request: RequestView, number: int) -> Reply:
    """The answer to the CLI's routing question: always the simple (flash) model."""
    if "complexity_score" in _schema(body if isinstance(body, dict) else {}):
        answer = {"complexity_reasoning": "fake upstream: a simple request", "complexity_score": 10}
    else:
        answer = {"reasoning": "fake upstream: a simple request", "model_choice": "flash"}
    usage = _usage(None, request, 12, 0)
    return Reply(
        200, body=_chunk([{"text": json.dumps(answer)}], request.model or "gemini-fake", number, usage, True)
    )


def _error_body(status: int, error: UpstreamError | None, retry_after: float | None = None) -> dict[str, Any]:
    kind, message = _STATUS.get(
        status, ("INTERNAL" if status >= 500 else "INVALID_ARGUMENT", f"HTTP {status}")
    )
    details: list[dict[str, Any]] = []
    if error is not None:
        kind, message = error.type or kind, error.message
        if error.reason:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": error.reason,
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            )
    if retry_after is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after:g}s"}
        )
    body: dict[str, Any] = {"code": status, "message": message, "status": kind}
    if details:
        body["details"] = details
    return {"error": body}


def error_reply(
    status: int, error: UpstreamError | None, number: int, retry_after: float | None = None
) -> Reply:
    """An error answer with Google's body shape.

    The wait goes in the body's ``RetryInfo`` only, as the real API names it: no
    ``retry-after`` header, so a client that honours the wait must read the body.
    """
    return Reply(status, body=_error_body(status, error, retry_after))
