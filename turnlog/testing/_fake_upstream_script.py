"""The script of the fake upstream APIs: entries (pydantic models), matching, templates.

One script serves all three APIs of ``turnlog fake-upstream`` (Anthropic Messages, OpenAI
Responses, Gemini): an entry says *what* the model answers (text, thinking, tool calls, an
error with a status code, how slowly it streams) and each API module renders it in its own wire
format. ``docs/providers.md`` has the file format; ``_loopback_script`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._fake_openai_script import ScriptError
from ._loopback_script import load_entries

__all__ = [
    "Api",
    "RequestView",
    "ScriptError",
    "UpstreamEntry",
    "UpstreamError",
    "UpstreamMatch",
    "UpstreamToolCall",
    "fill_template",
    "load_upstream_script",
    "matches",
]

Api = Literal["anthropic", "responses", "gemini"]
"""The wire format of a request: Anthropic Messages, OpenAI Responses, or Gemini."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UpstreamMatch(_Model):
    """Conditions on a request; all given conditions must hold."""

    api: Api | None = None
    """The request is for this API."""
    last_user_contains: str | None = None
    """The text of the last user turn contains this."""
    contains: str | None = None
    """The request body (as JSON text) contains this text."""
    model: str | None = None
    """The requested model equals this."""
    stream: bool | None = None
    """The request asked (or did not ask) for a stream."""
    has_tools: bool | None = None
    """The request did (or did not) offer tools."""
    after_tool_result: bool | None = None
    """The last user turn is (or is not) a tool result."""


class UpstreamToolCall(_Model):
    """A tool call the fake model makes."""

    name: str
    """The tool name (``Read``, ``Bash`` for Claude; ``exec_command`` for Codex; ``read_file`` for Gemini)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The arguments object."""
    id: str | None = None
    """The call id; default ``toolu_fake...`` / ``call_fake...`` / none for Gemini."""


class UpstreamError(_Model):
    """The error an entry answers with (each API wraps it in its own error JSON)."""

    message: str
    """Human-readable message."""
    type: str | None = None
    """Anthropic ``error.type`` / OpenAI ``error.type`` / Google ``error.status``; default per status."""
    code: str | None = None
    """OpenAI ``error.code`` (e.g. ``rate_limit_exceeded``)."""
    reason: str | None = None
    """Google ``ErrorInfo.reason`` in ``error.details`` (e.g. ``API_KEY_INVALID``)."""


class UpstreamEntry(_Model):
    """One scripted answer.

    A plain answer gives ``text`` and/or ``thinking`` and/or ``tool_calls``; an error answer gives
    ``status`` (not 200) and optionally ``error``. Whether the answer streams follows the request,
    as on the real APIs.
    """

    match: UpstreamMatch | None = None
    """Serve this entry only to requests that fit; entries with a match are tried first."""
    times: int | None = Field(default=1, ge=1)
    """How many requests this entry answers (null: any number)."""
    status: int = Field(default=200, ge=100, le=599)
    """The HTTP status."""
    text: str | None = None
    """The assistant text."""
    template: bool = False
    """Fill ``{user_turns}``, ``{last_user}`` and ``{tool_result}`` in ``text`` from the request."""
    thinking: str | None = None
    """Reasoning text sent before the answer (a thinking block / reasoning item / thought part)."""
    tool_calls: list[UpstreamToolCall] = Field(default_factory=list)
    """Tool calls, after the text."""
    stop_reason: str | None = None
    """Anthropic ``stop_reason`` (default ``tool_use`` with tool calls, else ``end_turn``)."""
    usage: dict[str, int] | None = None
    """``input_tokens`` / ``output_tokens`` / ``cached_tokens`` / ``thinking_tokens`` overriding the computed ones."""
    model: str | None = None
    """The model name reported (default: the requested one)."""
    error: UpstreamError | None = None
    """The error of a non-200 answer (default: the API's usual one for the status)."""
    retry_after: float | None = None
    """Sends ``retry-after: <seconds>`` (and Gemini's ``RetryInfo``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers."""
    delay_ms: float = Field(default=0.0, ge=0)
    """Wait this long before the first byte of the answer."""
    chunk_delay_ms: float = Field(default=0.0, ge=0)
    """Stream: wait this long before each text/argument fragment after the first."""
    chunk_chars: int | None = Field(default=None, ge=1)
    """Stream: fragment size in characters (default: one word per fragment)."""
    cut_after: int | None = Field(default=None, ge=0)
    """Stream: close the connection after this many events, without the final ones."""
    stream_error: UpstreamError | None = None
    """Stream: send the API's in-stream error event after the content (or ``cut_after`` events) and end."""


@dataclass(frozen=True)
class RequestView:
    """What matching and templates need to know of a request, whatever its API."""

    api: Api
    model: str
    stream: bool
    has_tools: bool
    last_user_text: str
    user_turns: int
    """User turns that are not tool results (the prompts the model has seen)."""
    tool_result: str | None
    """The text of the tool result(s) in the last user turn, if it is one."""
    input_words: int


def matches(match: UpstreamMatch, view: RequestView, body_text: str) -> bool:
    """Whether a request fits every condition of ``match``."""
    checks = [
        match.api is None or match.api == view.api,
        match.last_user_contains is None or match.last_user_contains in view.last_user_text,
        match.contains is None or match.contains in body_text,
        match.model is None or match.model == view.model,
        match.stream is None or match.stream == view.stream,
        match.has_tools is None or match.has_tools == view.has_tools,
        match.after_tool_result is None or match.after_tool_result == (view.tool_result is not None),
    ]
    return all(checks)


def load_upstream_script(path: str | Path) -> list[UpstreamEntry]:
    """Read a script file: JSON (a list, or ``{"responses": [...]}``) or JSONL (one entry a line).

    Raises:
        ScriptError: The file is missing, not JSON, or an entry is invalid (names file and entry).
    """
    return load_entries(path, UpstreamEntry)


def fill_template(entry: UpstreamEntry, view: RequestView) -> str:
    """The entry's text, with placeholders filled when ``template`` is set."""
    text = entry.text or ""
    if not entry.template:
        return text
    return (
        text.replace("{user_turns}", str(view.user_turns))
        .replace("{last_user}", view.last_user_text)
        .replace("{tool_result}", view.tool_result or "")
    )
