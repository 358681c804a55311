"""act: tool calls recorded as ActionRequest + ActionResponse, strategies, errors and the gate."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.analytics._facts import tool_call_fact
from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, ToolInvocation, UnknownTool, UsageError, iModel
from turnlog.kernel.models import ToolCall
from turnlog.projections import ActionRequest, ActionResponse, Instruction, catalogue_upcasters, decode_event
from turnlog.testing import FakeOpenAIServer, ScriptedModel

from .conftest import assert_rebuilds

API_KEY = "sk-test-act-0123456789"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def fail(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"tool broke: {reason}")


async def events(branch: Branch) -> list[tuple[str, Any]]:
    return [(e.type, decode_event(e)) async for e in branch.store.read_stream(branch.stream)]


async def added(branch: Branch) -> list[Any]:
    return [data.message for kind, data in await events(branch) if kind == "message.added"]


async def test_one_call_records_request_then_response(store: EventStore) -> None:
    branch = Branch(store=store, tools=[add])
    (response,) = await branch.act({"function": "add", "arguments": {"a": 2, "b": 3}})
    assert isinstance(response, ActionResponse)
    assert (response.function, response.output, response.error) == ("add", 5, None)
    assert response.content.duration_ms is not None and response.content.duration_ms >= 0
    request, recorded = await added(branch)
    assert isinstance(request, ActionRequest) and request.arguments == {"a": 2, "b": 3}
    assert recorded == response and response.content.action_request_id == request.id
    # the view links the request to its response; the recorded request is unchanged
    assert branch.messages[0].content.action_response_id == response.id
    assert request.content.action_response_id is None
    assert branch.state.runs == {}  # act owns no lifecycle
    await assert_rebuilds(branch)


async def test_request_forms_are_normalized(store: EventStore) -> None:
    branch = Branch(store=store, tools=[add])
    recorded = ActionRequest.create("add", {"a": 1, "b": 1})
    await branch.add_message(recorded)
    responses = await branch.act(
        [
            recorded,
            ToolCall(id="call_9", name="add", arguments={"a": 2, "b": 2}),
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 3, "b": 3}'},
            },
            {"name": "add", "arguments": {"a": 4, "b": 4}},
        ]
    )
    assert [r.output for r in responses] == [2, 4, 6, 8]
    requests = [m for m in branch.messages if isinstance(m, ActionRequest)]
    assert len(requests) == 4  # the recorded request was not recorded twice
    assert [r.content.call_id for r in requests] == [None, "call_9", "call_7", None]
    await assert_rebuilds(branch)


async def test_malformed_requests_write_nothing(store: EventStore) -> None:
    branch = Branch(store=store, tools=[add])
    await branch.save()
    for bad in (
        {"arguments": {}},
        {"function": "add", "arguments": "{not json"},
        42,
        {"function": "add", "arguments": [1]},
    ):
        with pytest.raises(UsageError):
            await branch.act(bad)
    with pytest.raises(UsageError, match="Invalid strategy"):
        await branch.act({"function": "add", "arguments": {}}, strategy="random")  # type: ignore[arg-type]
    assert branch.version == 1
    await assert_rebuilds(branch)


async def test_concurrent_calls_overlap(store: EventStore) -> None:
    both = anyio.Event()
    started: list[str] = []

    async def meet(name: str) -> str:
        started.append(name)
        if len(started) == 2:
            both.set()
        with anyio.fail_after(5):
            await both.wait()
        return name

    branch = Branch(store=store, tools=[meet])
    calls = [{"function": "meet", "arguments": {"name": n}} for n in ("x", "y")]
    responses = await branch.act(calls)  # sequential calls would never meet
    assert [r.output for r in responses] == ["x", "y"]
    kinds = [type(m).__name__ for m in branch.messages]
    assert kinds[:2] == ["ActionRequest", "ActionRequest"]  # all requests first, in one append
    await assert_rebuilds(branch)


async def test_sequential_calls_run_in_order(store: EventStore) -> None:
    order: list[int] = []

    async def step(n: int) -> int:
        order.append(n)
        return n

    branch = Branch(store=store, tools=[step])
    calls = [{"function": "step", "arguments": {"n": n}} for n in (1, 2, 3)]
    await branch.act(calls, strategy="sequential")
    assert order == [1, 2, 3]
    kinds = [type(m).__name__ for m in branch.messages]
    assert kinds == ["ActionRequest", "ActionResponse"] * 3
    await assert_rebuilds(branch)


async def test_a_raising_tool_gives_an_error_response(store: EventStore) -> None:
    branch = Branch(store=store, tools=[add, fail])
    ok, broken, unknown, bad_args = await branch.act(
        [
            {"function": "add", "arguments": {"a": 1, "b": 2}},
            {"function": "fail", "arguments": {"reason": "disk"}},
            {"function": "missing", "arguments": {}},
            {"function": "add", "arguments": {"a": "x"}},
        ]
    )
    assert ok.success and ok.output == 3
    assert broken.error == "RuntimeError: tool broke: disk" and broken.output is None
    assert unknown.error is not None and unknown.error.startswith("UnknownTool")
    assert bad_args.error is not None and bad_args.error.startswith("ToolArgumentsError")
    await assert_rebuilds(branch)


def not_a_number(kind: str) -> Any:
    """Returns a float JSON cannot hold."""
    return {"score": float(kind)} if kind != "list" else [1.0, float("-inf")]


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_a_tool_returning_nan_gives_an_error_response(store: EventStore, strategy: str) -> None:
    """NaN or an infinity in a tool's result is recorded as the call's error, never as null."""
    branch = Branch(store=store, tools=[not_a_number])
    calls = [{"function": "not_a_number", "arguments": {"kind": k}} for k in ("nan", "inf", "list")]
    responses = await branch.act(calls, strategy=strategy)  # type: ignore[arg-type]
    for response in responses:
        assert response.output is None and response.error is not None
        assert "JSON has no NaN or Infinity" in response.error
    await assert_rebuilds(branch)


@pytest.mark.parametrize("strategy", ["concurrent", "sequential"])
async def test_suppress_errors_false_raises_after_recording(store: EventStore, strategy: str) -> None:
    branch = Branch(store=store, tools=[add, fail])
    calls = [
        {"function": "fail", "arguments": {"reason": "first"}},
        {"function": "add", "arguments": {"a": 1, "b": 2}},
    ]
    with pytest.raises(RuntimeError, match="tool broke: first"):
        await branch.act(calls, strategy=strategy, suppress_errors=False)  # type: ignore[arg-type]
    responses = [m for m in branch.messages if isinstance(m, ActionResponse)]
    assert responses[0].error == "RuntimeError: tool broke: first"
    # concurrent: every call finished first; sequential: stopped at the failure
    assert len(responses) == (2 if strategy == "concurrent" else 1)
    with pytest.raises(UnknownTool):
        await branch.act({"function": "missing", "arguments": {}}, suppress_errors=False)
    await assert_rebuilds(branch)


async def test_gate_denies_and_the_denial_is_recorded(store: EventStore) -> None:
    ran: list[int] = []

    def guarded(n: int) -> int:
        ran.append(n)
        return n

    asked: list[ToolInvocation] = []

    async def gate(call: ToolInvocation) -> bool:
        asked.append(call)
        return call.arguments["n"] < 10

    branch = Branch(store=store, tools=[guarded])
    allowed, denied = await branch.act(
        [{"function": "guarded", "arguments": {"n": 1}}, {"function": "guarded", "arguments": {"n": 99}}],
        authorize=gate,
    )
    assert ran == [1]  # the denied call never ran
    assert allowed.success and allowed.output == 1
    assert denied.error == "denied by authorization gate" and denied.metadata == {"denied": True}
    assert {c.arguments["n"] for c in asked} == {1, 99} and asked[0].branch_id == branch.id
    # analytics reads the denial from the log
    facts = [
        tool_call_fact(e, lambda _: None)
        async for e in store.read_stream(branch.stream)
        if e.type == "message.added"
    ]
    statuses = {f[5]: f for f in facts if f is not None}
    assert "denied" in statuses[denied.id] and "ok" in statuses[allowed.id]
    await assert_rebuilds(branch)


async def test_a_gate_that_raises_denies(store: EventStore) -> None:
    def gate(call: ToolInvocation) -> bool:
        raise PermissionError("policy store offline")

    branch = Branch(store=store, tools=[add])
    (response,) = await branch.act({"function": "add", "arguments": {"a": 1, "b": 1}}, authorize=gate)
    assert response.metadata == {"denied": True}
    assert (
        response.error
        == "denied by authorization gate (the gate raised PermissionError: policy store offline)"
    )
    await assert_rebuilds(branch)


async def test_calls_inside_operate_carry_its_run(store: EventStore) -> None:
    reply = (
        '{"action_required": true, "action_requests": [{"function": "add", "arguments": {"a": 2, "b": 2}}]}'
    )
    branch = Branch(store=store, chat_model=ScriptedModel(reply), tools=[add])
    result = await branch.operate(instruction="2+2?", actions=True)
    assert result.action_responses[0].output == 4
    (run_id,) = branch.state.runs
    tool_messages = [
        data
        for kind, data in await events(branch)
        if kind == "message.added" and data.message.role == "action"
    ]
    assert [d.run_id for d in tool_messages] == [run_id, run_id]
    await assert_rebuilds(branch)


# ------------------------------------------------------------------ native tool calls over HTTP


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    script = [
        {
            "match": {"has_tools": True},
            "tool_calls": [
                {"name": "add", "arguments": {"a": 20, "b": 22}, "id": "call_a"},
                {"name": "add", "arguments": '{"a": 1, "b": 1}', "id": "call_b"},
            ],
        },
        {"text": "The answer is 42."},
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as s:
        yield s


async def test_openai_tool_calls_run_through_act(store: EventStore, server: FakeOpenAIServer) -> None:
    model = iModel(provider="openai", model="gpt-4.1-mini", base_url=server.base_url, api_key=API_KEY)
    branch = Branch(store=store, chat_model=model, tools=[add])
    result = await branch.operate(instruction="What is 20 + 22?", actions=True)
    body = server.requests[0]["body"]
    assert body["tools"][0]["function"]["name"] == "add"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
    assert [r.output for r in result.action_responses] == [42, 2]
    assert [r.function for r in result.action_requests] == ["add", "add"]
    requests = [m for m in branch.messages if isinstance(m, ActionRequest)]
    assert [r.content.call_id for r in requests] == ["call_a", "call_b"]
    # the next turn sends the tool turn as Chat Completions defines it
    assert await branch.communicate("And so?") == "The answer is 42."
    sent = server.requests[1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[1]["content"] is None
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_a", "call_b"]
    # concurrent calls are recorded as they finish: the tool turns come in either order
    assert sorted((m["tool_call_id"], m["content"]) for m in sent[2:4]) == [("call_a", "42"), ("call_b", "2")]
    assert "output" not in sent[-1]["content"]
    assert isinstance(branch.messages[-2], Instruction)
    server.assert_complete()
    await assert_rebuilds(branch)


# ------------------------------------------------------------------------------------ property

CALLS = st.lists(st.sampled_from(["ok", "fail", "deny", "unknown"]), min_size=1, max_size=6)


async def act_scenario(kinds: list[str], strategy: str) -> None:
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        branch = Branch(store=store, tools=[add, fail])
        requests = [
            {"function": "add", "arguments": {"a": i, "b": 1}}
            if kind in ("ok", "deny")
            else {"function": "fail", "arguments": {"reason": str(i)}}
            if kind == "fail"
            else {"function": "ghost", "arguments": {}}
            for i, kind in enumerate(kinds)
        ]

        def gate(call: ToolInvocation) -> bool:
            return kinds[int(call.arguments.get("a", -1))] != "deny" if "a" in call.arguments else True

        responses = await branch.act(requests, strategy=strategy, authorize=gate)  # type: ignore[arg-type]
        assert len(responses) == len(kinds)
        for i, (kind, response) in enumerate(zip(kinds, responses, strict=True)):
            assert response.content.arguments == requests[i]["arguments"]
            assert (response.metadata.get("denied") is True) == (kind == "deny")
            assert (response.error is None) == (kind == "ok")
            if kind == "ok":
                assert response.output == i + 1
        # every request is answered in the view, and the log rebuilds the same state
        links = branch.state.action_links
        assert sorted(links.values()) == sorted(r.id for r in responses)
        await assert_rebuilds(branch)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=CALLS, strategy=st.sampled_from(["concurrent", "sequential"]))
def test_any_mix_of_calls_is_answered_once_each(kinds: list[str], strategy: str) -> None:
    anyio.run(act_scenario, kinds, strategy)
