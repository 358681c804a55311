"""The request fingerprint carried from turn to turn is the fingerprint of the whole request.

A branch hashes only the messages new since its last request (``FingerprintMemo``); replay
and ``ReplayModel`` recompute fingerprints from scratch, so the two must agree exactly.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch
from turnlog.kernel.models import ModelRequest, ModelResponse, Usage, request_fingerprint
from turnlog.kernel.models._fingerprint import FingerprintMemo
from turnlog.projections import ModelCalled

_TEXT = st.text(max_size=12)
_VALUE = st.recursive(
    st.none() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": _VALUE},
    optional={"name": _TEXT, "tool_calls": st.lists(_VALUE, max_size=2)},
)
# what happens to the conversation between two requests
_STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(_MESSAGE, min_size=1, max_size=3)),
    st.tuples(st.just("replace_last"), _MESSAGE),
    st.tuples(st.just("replace_first"), _MESSAGE),
    st.tuples(st.just("drop"), st.integers(1, 4)),
    st.tuples(st.just("rerender"), st.none()),  # the same values, every dict a new object
    st.tuples(st.just("new_turn"), st.tuples(_MESSAGE, _MESSAGE)),  # last re-rendered, answer, next
)
_PARAMS = st.dictionaries(st.sampled_from(["temperature", "seed", "api_key", "top_p"]), _TEXT, max_size=2)


def _apply(messages: list[dict[str, Any]], step: tuple[str, Any]) -> list[dict[str, Any]]:
    kind, arg = step
    if kind == "append":
        return [*messages, *arg]
    if kind == "replace_last" and messages:
        return [*messages[:-1], arg]
    if kind == "replace_first" and messages:
        return [arg, *messages[1:]]
    if kind == "drop":
        return messages[: max(0, len(messages) - arg)]
    if kind == "rerender":
        return copy.deepcopy(messages)
    if kind == "new_turn" and messages:
        return [*messages[:-1], dict(messages[-1]), *arg]
    return [*messages, arg] if isinstance(arg, dict) else messages


@given(
    first=st.lists(_MESSAGE, max_size=6),
    steps=st.lists(st.tuples(_STEP, _PARAMS, st.booleans()), min_size=1, max_size=12),
)
def test_the_carried_fingerprint_equals_the_full_one(
    first: list[dict[str, Any]], steps: list[tuple[tuple[str, Any], dict[str, Any], bool]]
) -> None:
    memo = FingerprintMemo()
    messages = first
    for step, params, stream in steps:
        messages = _apply(messages, step)
        request = ModelRequest(messages=list(messages), params=params, stream=stream)
        assert request_fingerprint(request, model="m", memo=memo) == request_fingerprint(request, model="m")


class _Recording:
    """A chat model that answers at once and keeps the requests it was sent."""

    provider = "test"
    model = "recording"
    endpoint = "test"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(text=f"answer {len(self.requests)}", raw={}, usage=Usage(3, 2, None))


async def test_a_branch_records_the_fingerprint_of_each_request_it_sent(store: EventStore) -> None:
    model = _Recording()
    branch = Branch(store=store, system="Be brief.", chat_model=model)
    for i in range(12):
        await branch.communicate(f"question {i}")
    recorded = [d.fingerprint for _, d in await branch.events() if isinstance(d, ModelCalled)]
    assert recorded == [request_fingerprint(r, model="recording") for r in model.requests]
    assert len(set(recorded)) == 12


class _Answer(BaseModel):
    value: int


_TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
# how each turn asks: plain, with a schema or a tool (dropped from the instruction in history),
# with guidance and context
_ASK = st.sampled_from(["plain", "schema", "tool", "guided"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(asks=st.lists(_ASK, min_size=1, max_size=6))
def test_a_long_lived_branch_sends_what_a_fresh_one_would(asks: list[str]) -> None:
    """The rendered history a branch keeps (the sent instruction's message reused) is what a
    branch loaded afresh renders, message for message, and both fingerprints agree."""

    async def main() -> None:
        async with open_store("memory://") as store:
            model = _Recording()
            branch = Branch(store=store, system="Be brief.", chat_model=model)
            for i, ask in enumerate(asks):
                kwargs: dict[str, Any] = {}
                if ask == "schema":
                    kwargs["response_format"] = _Answer
                elif ask == "tool":
                    kwargs["tool_schemas"] = [_TOOL]
                elif ask == "guided":
                    kwargs.update(guidance=f"be short {i}", context=[{"turn": i}])
                await branch.chat_and_record(f"question {i}", **kwargs)
            await branch.chat("probe")
            fresh_model = _Recording()
            fresh = await Branch.load(store, branch.id, chat_model=fresh_model)
            await fresh.chat("probe")
            kept, anew = model.requests[-1], fresh_model.requests[-1]
            assert kept.messages[:-1] == anew.messages[:-1]
            assert kept.messages[-1]["content"] == anew.messages[-1]["content"]
            assert request_fingerprint(kept, model="m") == request_fingerprint(anew, model="m")

    anyio.run(main)
