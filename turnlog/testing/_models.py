"""Test models: product code for writing tests against turnlog without any provider.

``ScriptedModel`` answers from a script (a queue plus ``when`` matchers) and records every
call; ``FunctionModel`` lets a function produce each answer; ``RecordedModel`` serves the
answers recorded in a store's ``model.called`` events, matched by request fingerprint or in
recorded order (a different request raises ``ReplayMismatch``). They
implement the ``ChatModel`` protocol::

    model = ScriptedModel("Hello!", "Bye.")
    branch = Branch(store=store, chat_model=model)
    assert await branch.communicate("hi") == "Hello!"
    model.add("Sure.", when="weather")        # answers any request mentioning "weather"
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from turnlog.eventstore import EventStore
from turnlog.kernel._errors import ReplayMismatch, ScriptExhaustedError, UsageError
from turnlog.kernel.models import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
    request_fingerprint,
)
from turnlog.projections import AssistantResponse, ModelCalled, decode_event

__all__ = [
    "FunctionModel",
    "RecordedCall",
    "ReplayMismatch",
    "RecordedModel",
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


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One call a test model received.

    Attributes:
        index: 0-based order of the call.
        request: The request as received.
        response: The response returned (None when the call raised).
        error: The exception raised instead (None when a response was returned).
        matched_by: ``"when"``, ``"position"`` or ``"function"``.
    """

    index: int
    request: ModelRequest
    response: ModelResponse | None
    error: BaseException | None
    matched_by: str

    @property
    def last_user_message(self) -> str:
        """The content of the last ``user`` message of the request."""
        return _last_user_text(self.request)

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools the request offered."""
        return [t.get("function", {}).get("name", "") for t in self.request.tools or []]


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
}


def usage_of(value: Any) -> Usage:
    """A reply's ``usage`` as a ``Usage``: a ``Usage``, or a mapping in either spelling.

    The mapping may say ``input_tokens`` / ``output_tokens`` (``Usage``'s names) or
    ``prompt_tokens`` / ``completion_tokens`` (the OpenAI wire's, as in the fake server's
    scripts), plus ``cost_usd``; ``total_tokens`` is accepted and ignored (it is the sum).

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
                "(or prompt_tokens / completion_tokens) and cost_usd"
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


@dataclass(frozen=True, slots=True)
class _Expected:
    """The recorded call the next request must be (see ``RecordedModel.expect``)."""

    call: ModelCalled
    index: int
    version: int
    messages: list[dict[str, Any]]
    text: str
    tool_calls: tuple[ToolCall, ...]
    reasoning: tuple[dict[str, Any], ...] = ()


class RecordedModel:
    """A chat model that serves recorded ``model.called`` responses; it calls no provider.

    Two ways to say which recorded call answers a request:

    - by fingerprint (the default): each request must be one that was recorded (same model,
      messages and parameters), in any order, else ``ReplayMismatch``. Calls recorded as
      failed raise a ``ProviderError`` with the recorded message. Identical requests are
      served in recorded order (the last one repeats).
    - in order (``expect``): the next request must be the armed call; its recorded parameters
      are merged under the request's own (``prepare``), as its model did, and a different
      request raises ``ReplayMismatch`` naming the first difference. ``execute_replay``
      re-runs a branch this way.

    Example::

        replay = await RecordedModel.from_store(store, branch_id=original.id)
        copy = Branch(store=other_store, system="...", chat_model=replay)
        await copy.communicate("same question")   # the recorded answer, no provider call
    """

    endpoint: str = "replay"

    def __init__(self, calls: Sequence[ModelCalled] = (), *, model: str | None = None) -> None:
        names = {c.model for c in calls}
        if model is None:
            if len(names) > 1:
                raise ValueError(f"the recorded calls use several models ({sorted(names)}); pass model=")
            model = next(iter(names), "replay")
        self.model = model
        self.provider = "replay"
        self._by_fingerprint: dict[str, list[ModelCalled]] = {}
        for call in calls:
            if call.model == model:
                self._by_fingerprint.setdefault(call.fingerprint, []).append(call)
        self._next: _Expected | None = None
        self.calls: list[RecordedCall] = []

    @classmethod
    async def from_store(
        cls, store: EventStore, *, branch_id: str | None = None, model: str | None = None
    ) -> RecordedModel:
        """Collect the recorded calls of one branch (or of the whole store)."""
        prefix = f"branch-{branch_id}" if branch_id is not None else "branch-"
        calls = []
        async for event in store.read_all(types=["model.called"], stream_prefix=prefix):
            data = decode_event(event)
            assert isinstance(data, ModelCalled)
            calls.append(data)
        return cls(calls, model=model)

    def to_config(self) -> dict[str, Any]:
        """The model's configuration (provider and model name)."""
        return {"provider": "test", "model": self.model}

    def expect(
        self,
        call: ModelCalled,
        *,
        index: int,
        version: int,
        messages: Sequence[Mapping[str, Any]],
        text: str,
        tool_calls: Sequence[ToolCall] = (),
        reasoning: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Arm the model: the next request must be ``call``, answered with ``text`` and ``tool_calls``.

        Args:
            call: The recorded ``model.called`` payload.
            index: 1-based index of the call among the replayed calls (named in a mismatch).
            version: The version of its event in the branch stream (named in a mismatch).
            messages: The messages the recorded request was built from (to name a difference).
            text: The recorded answer's text (used when the raw response has none).
            tool_calls: The tool calls of the recorded answer.
            reasoning: The signed reasoning blocks of the recorded answer (they go back with it).
        """
        self._next = _Expected(
            call,
            index,
            version,
            [dict(m) for m in messages],
            text,
            tuple(tool_calls),
            tuple(dict(b) for b in reasoning),
        )
        self.provider = call.provider or self.provider
        self.model = call.model or self.model

    def prepare(self, request: ModelRequest) -> ModelRequest:
        """Merge the armed call's recorded parameters under the request's own, as its model did."""
        if self._next is None:
            return request
        return replace(request, params={**self._next.call.params, **dict(request.params)})

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Serve the recorded answer to ``request``."""
        index = len(self.calls)
        expected, self._next = self._next, None
        try:
            response = self._armed(expected, request) if expected else self._recorded(request, index)
        except (ReplayMismatch, ProviderError) as error:
            self.calls.append(RecordedCall(index, request, None, error, "fingerprint"))
            raise
        self.calls.append(RecordedCall(index, request, response, None, "fingerprint"))
        return response

    def _recorded(self, request: ModelRequest, index: int) -> ModelResponse:
        fingerprint = request_fingerprint(request, model=self.model)
        queue = self._by_fingerprint.get(fingerprint)
        if not queue:
            known = sum(len(q) for q in self._by_fingerprint.values())
            raise ReplayMismatch(
                fingerprint,
                f"no recorded model call has fingerprint {fingerprint} ({known} recorded calls known)",
                call_index=index + 1,
            )
        call = queue.pop(0) if len(queue) > 1 else queue[0]
        if call.status == "error":
            raise ProviderError(
                call.error_message or "recorded failure", provider=call.provider, model=call.model
            )
        raw = dict(call.response or {})
        return self._response(call, AssistantResponse.from_response(raw).response, (), latency_ms=0.0)

    def _armed(self, expected: _Expected, request: ModelRequest) -> ModelResponse:
        # The kernel fingerprints the request after ``prepare``; do the same with the armed call.
        sent = replace(request, params={**expected.call.params, **dict(request.params)})
        actual = request_fingerprint(sent, model=self.model)
        if actual != expected.call.fingerprint:
            raise ReplayMismatch(
                actual,
                _explain(sent, expected),
                call_index=expected.index,
                expected=expected.call.fingerprint,
                call_id=expected.call.call_id,
                version=expected.version,
            )
        text = _text_of(expected.call.response)
        answer = self._response(
            expected.call,
            expected.text if text is None else text,
            expected.tool_calls,
            latency_ms=expected.call.latency_ms,
        )
        return replace(answer, reasoning=expected.reasoning)

    def _response(
        self, call: ModelCalled, text: str, tool_calls: tuple[ToolCall, ...], *, latency_ms: float
    ) -> ModelResponse:
        u = call.usage
        return ModelResponse(
            text=text,
            tool_calls=tool_calls,
            raw=dict(call.response or {}),
            usage=u,
            model=self.model,
            provider=self.provider,
            latency_ms=latency_ms,
        )


def _text_of(raw: Any) -> str | None:
    """The assistant text of a raw Chat Completions response, if it has one."""
    if not isinstance(raw, Mapping):
        return None
    choices = raw.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    return content if isinstance(content, str) else "" if content is None else None


def _short(value: Any, width: int = 80) -> str:
    """``value`` on one line, cut to ``width`` characters (for naming a difference)."""
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _explain(sent: ModelRequest, expected: _Expected) -> str:
    """Name the first difference between the request built now and the recorded messages."""
    now = sent.messages
    then = expected.messages
    for i, (a, b) in enumerate(zip(now, then, strict=False), 1):
        if a != b:
            return (
                f"message {i} ({a.get('role')}) is {_short(a.get('content'))!r} now, "
                f"but the log recorded {_short(b.get('content'))!r}"
            )
    if len(now) != len(then):
        return f"the request has {len(now)} messages now, the log recorded {len(then)}"
    recorded_params = expected.call.params
    if dict(sent.params) != recorded_params:
        return f"parameters are {dict(sent.params)} now, the log recorded {recorded_params}"
    tools = [str((t.get("function") or {}).get("name", "")) for t in sent.tools or []]
    if tools != expected.call.tools:
        return f"tools are {tools} now, the log recorded {expected.call.tools}"
    return "the request's fingerprint differs (response format or rendering changed)"
