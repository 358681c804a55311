"""The script of the fake OpenAI server: its entries (pydantic models) and matching.

A script is a list of ``ScriptEntry``; ``docs/providers.md`` has the file format and
``_loopback_script`` reads it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._errors import ScriptError

__all__ = [
    "ErrorBody",
    "ScriptEntry",
    "ScriptError",
    "ScriptMatch",
    "ScriptToolCall",
    "matches_request",
]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScriptMatch(_Model):
    """Conditions on a request; all given conditions must hold."""

    last_user_contains: str | None = None
    """The content of the last ``user`` message contains this text."""
    contains: str | None = None
    """The request body (as JSON text) contains this text."""
    model: str | None = None
    """The requested model equals this."""
    stream: bool | None = None
    """The request asked (or did not ask) for a stream."""
    has_tools: bool | None = None
    """The request did (or did not) send tools."""


class ScriptToolCall(_Model):
    """A tool call the fake model makes."""

    name: str
    """The function name."""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """Arguments as an object (encoded compactly) or as the exact string to send (may be malformed)."""
    id: str | None = None
    """The call id; default ``call_<n>``."""


class ErrorBody(_Model):
    """The ``error`` object of an OpenAI error answer."""

    message: str
    """Human-readable message."""
    type: str = "invalid_request_error"
    """``invalid_request_error``, ``server_error``, ``tokens``, ``insufficient_quota``..."""
    param: str | None = None
    """The offending parameter, if any."""
    code: str | None = None
    """``context_length_exceeded``, ``rate_limit_exceeded``, ``invalid_api_key``..."""


class ScriptEntry(_Model):
    """One scripted answer.

    A plain answer gives ``text`` and/or ``tool_calls``; an error answer gives ``status`` (not
    200) and ``error``. Whether the answer is JSON or SSE follows the request's ``stream``
    flag, as on the real API.
    """

    match: ScriptMatch | None = None
    """Serve this entry only to requests that fit; entries with a match are tried first."""
    times: int | None = Field(default=1, ge=1)
    """How many requests this entry answers (null: any number)."""
    status: int = Field(default=200, ge=100, le=599)
    """The HTTP status."""
    text: str | None = None
    """The assistant text."""
    refusal: str | None = None
    """A refusal instead of text."""
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    """Tool calls (``finish_reason`` then defaults to ``tool_calls``)."""
    finish_reason: str | None = None
    """Default: ``tool_calls`` with tool calls, else ``stop``."""
    usage: dict[str, Any] | None = None
    """Usage fields overriding the computed ``prompt_tokens`` / ``completion_tokens``."""
    model: str | None = None
    """The model name reported (default: the requested one)."""
    error: ErrorBody | None = None
    """The error object of a non-200 answer (default: a generic one for the status)."""
    retry_after: float | None = None
    """Sends ``retry-after: <seconds>``."""
    retry_after_ms: float | None = None
    """Sends ``retry-after-ms: <milliseconds>``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers."""
    delay_ms: float = Field(default=0.0, ge=0)
    """Wait this long before the first byte of the answer (a slow first byte)."""
    chunk_delay_ms: float = Field(default=0.0, ge=0)
    """Stream: wait this long before each chunk after the first."""
    chunk_chars: int | None = Field(default=None, ge=1)
    """Stream: text fragment size in characters (default: one word per fragment)."""
    cut_after: int | None = Field(default=None, ge=0)
    """Stream: close the connection after this many ``data:`` events, before ``[DONE]``."""
    stream_error: ErrorBody | None = None
    """Stream: send ``data: {"error": ...}`` after the content (or after ``cut_after`` events) and end."""
    raw_body: str | None = None
    """Send exactly this body (``content-type: application/json`` unless ``headers`` say otherwise)."""


def _last_user_text(body: Any) -> str:
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def matches_request(match: ScriptMatch, body: Any, body_text: str) -> bool:
    """Whether a request (parsed ``body`` and its text) fits every condition of ``match``."""
    request = body if isinstance(body, dict) else {}
    checks = [
        match.last_user_contains is None or match.last_user_contains in _last_user_text(body),
        match.contains is None or match.contains in body_text,
        match.model is None or request.get("model") == match.model,
        match.stream is None or bool(request.get("stream")) == match.stream,
        match.has_tools is None or bool(request.get("tools")) == match.has_tools,
    ]
    return all(checks)
