"""Test models: for writing tests against turnlog without any provider.

``ScriptedModel`` answers from a script (a queue plus ``when`` matchers) and records every
call; ``FunctionModel`` lets a function produce each answer (``RecordedModel``, which serves
a store's recorded answers, is the kernel's: ``execute_replay`` uses it). They implement the
``ChatModel`` protocol::

    model = ScriptedModel("Hello!", "Bye.")
    branch = Branch(store=store, chat_model=model)
    assert await branch.communicate("hi") == "Hello!"
    model.add("Sure.", when="weather")        # answers any request mentioning "weather"
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from turnlog.kernel import RecordedCall
from turnlog.kernel._errors import ScriptExhaustedError, UsageError
from turnlog.kernel.models import ModelRequest, ModelResponse, ToolCall, Usage

__all__ = [
    "FunctionModel",
    "ScriptedModel",
    "estimate_tokens",
    "request_text",
    "usage_of",
]

Reply = str | ModelResponse | BaseException | Mapping[str, Any]
Matcher = Callable[[ModelRequest], bool]


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def request_text(request: ModelRequest) -> str:
    """Every text part of the request's messages, joined with newlines (for matching)."""
    parts: list[str] = []
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "\n".join(parts)


def _build_response(
    reply: str | ModelResponse | Mapping[str, Any], request: ModelRequest, model: str
) -> ModelResponse:
    if isinstance(reply, ModelResponse):
        return replace(reply, provider=reply.provider or "test", model=reply.model or model)
    if isinstance(reply, str):
        reply = {"text": reply}
    text = str(reply.get("text", ""))
    calls = tuple(
        ToolCall(
            id=str(c.get("id", f"call_{i}")), name=str(c["name"]), arguments=dict(c.get("arguments", {}))
        )
        for i, c in enumerate(reply.get("tool_calls", ()))
    )
    given = reply.get("usage")
    if given is None:
        usage = Usage(estimate_tokens(request_text(request)), estimate_tokens(text), None)
    else:
        usage = usage_of(given)
    finish_reason = "tool_calls" if calls else "stop"
    raw = {
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens},
    }
    return ModelResponse(
        text=text,
        tool_calls=calls,
        raw=raw,
        usage=usage,
        model=model,
        provider="test",
        finish_reason=finish_reason,
    )


# Both spellings of token counts: ours (``Usage``) and the OpenAI wire's, which the fake
# server's scripts use, so a usage mapping copied from either place works in both.
_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "prompt_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "completion_tokens": "output_tokens",
    "cost_usd": "cost_usd",
    "cache_read_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
}


def usage_of(value: Any) -> Usage:
    """A reply's ``usage`` as a ``Usage``: a ``Usage``, or a mapping in either spelling.

    The mapping may say ``input_tokens`` / ``output_tokens`` (``Usage``'s names) or
    ``prompt_tokens`` / ``completion_tokens`` (the OpenAI wire's, as in the fake server's
    scripts), plus ``cost_usd`` and the cache counts ``cache_read_tokens`` /
    ``cache_write_tokens`` (part of the input tokens); ``total_tokens`` is accepted and ignored
    (it is the sum).

    Raises:
        UsageError: an unknown key, one count given in both spellings, or a value that is
            not a count (the message names the key).
    """
    if isinstance(value, Usage):
        return value
    if not isinstance(value, Mapping):
        raise UsageError(f"a scripted reply's usage must be a mapping or a Usage, not {type(value).__name__}")
    fields: dict[str, Any] = {}
    for key, count in value.items():
        if key == "total_tokens":
            continue
        field = _USAGE_KEYS.get(key)
        if field is None:
            raise UsageError(
                f"a scripted reply's usage has an unknown key {key!r}: use input_tokens / output_tokens "
                "(or prompt_tokens / completion_tokens), cost_usd, cache_read_tokens and cache_write_tokens"
            )
        if field in fields:
            raise UsageError(
                f"a scripted reply's usage gives {field} twice (as {key!r} and another spelling)"
            )
        fields[field] = count
    try:
        return Usage(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"a scripted reply's usage is malformed: {problems}") from exc


def _checked(reply: Reply) -> Reply:
    """``reply`` with its usage made a ``Usage`` now, so a bad one fails where it is written."""
    if isinstance(reply, Mapping) and reply.get("usage") is not None:
        return {**reply, "usage": usage_of(reply["usage"])}
    return reply


@dataclass(slots=True)
class _Entry:
    reply: Reply
    when: Matcher | None = None


def _matcher(when: Matcher | str) -> Matcher:
    if isinstance(when, str):
        needle = when
        return lambda request: needle in request_text(request)
    return when


class ScriptedModel:
    """A chat model that answers from a script and records every call.

    Each reply is a string (the answer text), a ``ModelResponse``, a mapping with ``text``,
    ``tool_calls`` (``[{"name", "arguments", "id"}]``) and ``usage``, or an exception
    instance to raise. ``usage`` takes ``input_tokens`` / ``output_tokens`` or the fake
    server's ``prompt_tokens`` / ``completion_tokens``, and ``cost_usd`` (``usage_of``); a
    malformed one raises ``UsageError`` here, at construction, not as a failed run later. Replies with a ``when`` matcher (a substring of the request text, or
    a predicate on the ``ModelRequest``) are tried first, in the order added, and each is
    used once; otherwise the next positional reply answers. With nothing left to answer,
    ``ScriptExhaustedError`` is raised.

    Example:
        >>> model = ScriptedModel("first", "second")
        >>> model.add("rainy", when="weather")
    """

    provider: str = "test"
    endpoint: str = "test"

    def __init__(self, *replies: Reply, model: str = "scripted") -> None:
        self.model = model
        self._queue: list[_Entry] = [_Entry(_checked(r)) for r in replies]
        self.calls: list[RecordedCall] = []

    def add(self, reply: Reply, *, when: Matcher | str | None = None) -> ScriptedModel:
        """Append a reply to the script; return the model for chaining."""
        self._queue.append(_Entry(_checked(reply), _matcher(when) if when is not None else None))
        return self

    @property
    def remaining(self) -> int:
        """How many replies are still unused."""
        return len(self._queue)

    def assert_complete(self) -> None:
        """Raise ``AssertionError`` if some reply of the script was never used."""
        if self._queue:
            raise AssertionError(f"{len(self._queue)} scripted replies were never used")

    def to_config(self) -> dict[str, Any]:
        """The model's configuration (provider and model name)."""
        return {"provider": self.provider, "model": self.model}

    def _take(self, request: ModelRequest) -> tuple[_Entry, str]:
        for i, entry in enumerate(self._queue):
            if entry.when is not None and entry.when(request):
                return self._queue.pop(i), "when"
        for i, entry in enumerate(self._queue):
            if entry.when is None:
                return self._queue.pop(i), "position"
        raise ScriptExhaustedError(
            f"scripted model {self.model!r} has no reply left for call #{len(self.calls)}"
        )

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` from the script."""
        started = time.perf_counter()
        entry, how = self._take(request)
        index = len(self.calls)
        if isinstance(entry.reply, BaseException):
            self.calls.append(RecordedCall(index, request, None, entry.reply, how))
            raise entry.reply
        response = _build_response(entry.reply, request, self.model)
        response = replace(response, latency_ms=(time.perf_counter() - started) * 1000)
        self.calls.append(RecordedCall(index, request, response, None, how))
        return response


ReplyFunction = Callable[[ModelRequest], "str | ModelResponse | Mapping[str, Any] | Awaitable[Any]"]


class FunctionModel:
    """A chat model whose every answer is produced by a function of the request.

    The function may be sync or async and returns what ``ScriptedModel`` accepts as a reply
    (a string, a ``ModelResponse`` or a mapping); it may raise to simulate a failure.

    Example:
        >>> model = FunctionModel(lambda request: f"you said {len(request.messages)} things")
    """

    provider: str = "test"
    endpoint: str = "test"

    def __init__(self, function: ReplyFunction, *, model: str = "function") -> None:
        self.function = function
        self.model = model
        self.calls: list[RecordedCall] = []

    def to_config(self) -> dict[str, Any]:
        """The model's configuration (provider and model name)."""
        return {"provider": self.provider, "model": self.model}

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` with the function's result."""
        started = time.perf_counter()
        index = len(self.calls)
        try:
            reply = self.function(request)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            self.calls.append(RecordedCall(index, request, None, exc, "function"))
            raise
        response = _build_response(reply, request, self.model)
        response = replace(response, latency_ms=(time.perf_counter() - started) * 1000)
        self.calls.append(RecordedCall(index, request, response, None, "function"))
        return response
