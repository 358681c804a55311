"""The contract between verbs and providers: requests, responses, usage and stream chunks.

Every provider (OpenAI-compatible HTTP, CLI agents, the replay model and the test models
of ``turnlog.testing``) implements ``ChatModel`` (and, for streaming CLI agents,
``StreamingModel``). Verbs only ever see these types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from turnlog.projections import Usage

__all__ = [
    "ChatModel",
    "ChunkSink",
    "ChunkType",
    "ModelRequest",
    "ModelResponse",
    "StreamChunk",
    "StreamingModel",
    "ToolCall",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call requested by a model.

    Attributes:
        id: The provider's call id (used to match the result).
        name: The tool (function) name.
        arguments: Parsed arguments (a JSON object).
        signature: The provider's signature of the call, which must go back with it unchanged
            (Gemini's ``thoughtSignature``); None when the provider gave none.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a chat model, in OpenAI Chat Completions message form.

    Attributes:
        messages: ``[{"role": ..., "content": ...}, ...]`` as sent on the wire.
        params: Request parameters other than messages/tools/response_format
            (temperature, max_tokens, ...); never secrets.
        tools: Tool schemas in OpenAI ``{"type": "function", "function": {...}}`` form.
        response_format: An OpenAI ``response_format`` object (e.g. json_schema), or None.
        message_ids: Ids of the recorded messages the request was built from.
        stream: Ask the provider to stream (time to first token is then measured).
    """

    messages: list[dict[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None
    message_ids: list[str] = field(default_factory=list)
    stream: bool = False


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What a model returned for one request.

    Attributes:
        text: The assistant text ("" when the model only called tools).
        tool_calls: Tool calls the model asked for.
        raw: The provider's raw response body (for streams: the assembled final object).
        usage: Tokens and cost.
        model: The model the provider says it served (a dated snapshot such as
            ``gpt-4o-mini-2024-07-18``, a proxy's deployment), else the one asked for.
        provider: The provider name, e.g. ``openai``.
        finish_reason: The provider's finish reason, when it gave one.
        latency_ms: Wall time of the whole call including retries.
        ttft_ms: Time to first token, for streamed calls.
        attempts: How many HTTP attempts the call took (1 without retries).
        reasoning: The provider's reasoning blocks that must go back with this turn unchanged,
            in order, signatures included (Anthropic ``thinking`` / ``redacted_thinking``
            blocks); the next request carries them as the assistant message's
            ``thinking_blocks``.
        cache_read_tokens: Input tokens read from the provider's prompt cache (part of
            ``usage.input_tokens``); None when the provider did not say.
        cache_write_tokens: Input tokens written to the prompt cache (Anthropic's cache
            creation; part of ``usage.input_tokens``); None when the provider did not say.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict)
    usage: Usage = Usage.NONE
    model: str = ""
    provider: str = ""
    finish_reason: str | None = None
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    attempts: int = 1
    reasoning: tuple[dict[str, Any], ...] = ()
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


ChunkType = Literal["system", "thinking", "text", "tool_use", "tool_result", "result", "error"]


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One normalized chunk of a CLI agent stream (Claude Code, Codex, Gemini CLI).

    Attributes:
        type: system / thinking / text / tool_use / tool_result / result / error.
        content: Text for text/thinking/error chunks; the final text for result chunks.
        tool_name: Tool name of a tool_use.
        tool_id: Call id of a tool_use or the id a tool_result answers.
        tool_input: Arguments of a tool_use.
        tool_output: Output of a tool_result.
        is_error: True for an error result of a tool or an error chunk.
        is_delta: True when ``content`` is an increment of a larger text.
        metadata: Everything else (session_id on system chunks; usage, cost, duration,
            num_turns on result chunks; ``benign_eos`` on a clean end-of-stream error).
    """

    type: ChunkType
    content: str = ""
    tool_name: str | None = None
    tool_id: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_output: Any = None
    is_error: bool = False
    is_delta: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON object with every field (the payload of a ``stream.chunk`` event)."""
        return {
            "type": self.type,
            "content": self.content,
            "tool_name": self.tool_name,
            "tool_id": self.tool_id,
            "tool_input": self.tool_input,
            "tool_output": self.tool_output,
            "is_error": self.is_error,
            "is_delta": self.is_delta,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamChunk:
        """The inverse of ``to_dict``."""
        return cls(
            type=data["type"],
            content=data.get("content", ""),
            tool_name=data.get("tool_name"),
            tool_id=data.get("tool_id"),
            tool_input=data.get("tool_input"),
            tool_output=data.get("tool_output"),
            is_error=bool(data.get("is_error", False)),
            is_delta=bool(data.get("is_delta", False)),
            metadata=dict(data.get("metadata") or {}),
        )


ChunkSink = Callable[[StreamChunk], Awaitable[None]]
"""Receives the chunks of a streamed HTTP call as they arrive (``invoke(request, on_chunk=...)``).

An HTTP provider that can stream says so with ``streams_chunks = True`` and then calls the
sink with ``text`` / ``thinking`` deltas (``is_delta=True``), one ``tool_use`` chunk per
completed tool call, and a final ``result`` chunk whose metadata holds the usage, the
finish reason and the served model: the same chunk types a CLI agent's stream has.
"""


@runtime_checkable
class ChatModel(Protocol):
    """A request/response chat model (OpenAI-compatible HTTP, replay, scripted, function)."""

    provider: str
    model: str

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the response; raise ``ProviderError`` subclasses."""
        ...


@runtime_checkable
class StreamingModel(Protocol):
    """A CLI agent that streams chunks and can resume a provider session."""

    provider: str
    model: str

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Start the agent on ``prompt`` (resuming session ``resume``) and yield its chunks."""
        ...
