"""``RecordedModel``: the chat model that serves a store's recorded ``model.called`` answers.

It is product code: ``execute_replay`` re-runs a branch with it armed, call by call. The test
doubles of ``turnlog.testing`` (``ScriptedModel``, ``FunctionModel``) record their calls as
``RecordedCall`` too, and ``turnlog.testing`` re-exports both names for tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from turnlog.eventstore import EventStore
from turnlog.kernel._errors import ReplayMismatch
from turnlog.kernel.models import ModelRequest, ModelResponse, ProviderError, ToolCall, request_fingerprint
from turnlog.projections import AssistantResponse, ModelCalled, decode_event, with_answer

__all__ = ["RecordedCall", "RecordedModel"]


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
        # a call recorded with its answer keeps the answer's text in the message only
        texts: dict[str, str] = {}
        async for event in store.read_all(types=["model.called", "message.added"], stream_prefix=prefix):
            if event.type == "message.added":
                _note_answer(event.data, texts)
                continue
            data = decode_event(event)
            assert isinstance(data, ModelCalled)
            calls.append(data)
        return cls([_whole(c, texts.get(c.answer_id or "")) for c in calls], model=model)

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
            _whole(call, text),
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


def _note_answer(data: Mapping[str, Any], texts: dict[str, str]) -> None:
    """Keep the text of an assistant response's ``message.added`` payload (none when erased)."""
    message = data.get("message")
    if not isinstance(message, Mapping) or message.get("kind") != "AssistantResponse":
        return
    content = message.get("content")
    text = content.get("text") if isinstance(content, Mapping) else None
    if isinstance(text, str):
        texts[str(message.get("id"))] = text


def _whole(call: ModelCalled, text: str | None) -> ModelCalled:
    """``call`` with the raw response as received (the answer's text put back where it stood)."""
    if not call.answer_paths or text is None:
        return call
    return call.model_copy(
        update={"response": with_answer(call, text), "answer_id": None, "answer_paths": []}
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
