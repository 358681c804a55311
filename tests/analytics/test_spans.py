"""The span view: a pure fold from recorded events to traces (nesting, failures, ids, restarts)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from turnlog.analytics import Semconv, SpanView, Trace, build_traces, semconv_from_env
from turnlog.eventstore import NewEvent, RecordedEvent, open_store
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    ChunkReceived,
    Instruction,
    MessageAdded,
    ModelCalled,
    NodeCompleted,
    NodeStarted,
    RunEnded,
    RunFailed,
    RunStarted,
    Usage,
    new_event,
)

pytestmark = pytest.mark.anyio


def _meta(run: str | None, branch: str = "b1") -> dict[str, Any]:
    return {"branch_id": branch, **({"run_id": run} if run else {})}


def _started(run: str, verb: str = "chat", parent: str | None = None) -> NewEvent:
    return new_event(
        RunStarted(run_id=run, verb=verb, parent_run_id=parent, provider="openai", model="m"), meta=_meta(run)
    )


def _ended(run: str, tokens: int = 0) -> NewEvent:
    usage = Usage(input_tokens=tokens, output_tokens=1)
    return new_event(RunEnded(run_id=run, verb="chat", duration_ms=5.0, usage=usage), meta=_meta(run))


def _called(
    run: str | None, call: str, *, status: str = "ok", attempts: int = 1, ttft: float | None = None
) -> NewEvent:
    data = ModelCalled(
        call_id=call,
        provider="anthropic",
        model="claude-x",
        endpoint="messages",
        run_id=run,
        fingerprint="0" * 64,
        usage=Usage(input_tokens=10, output_tokens=2),
        latency_ms=3.0,
        ttft_ms=ttft,
        attempts=attempts,
        status=status,  # type: ignore[arg-type]
        error_type="RateLimitError" if status == "error" else None,
        error_message="slow down" if status == "error" else None,
        response={"id": "msg_1", "stop_reason": "end_turn"},
    )
    return new_event(data, meta=_meta(run))


async def _record(*batches: tuple[str, Sequence[NewEvent]]) -> list[RecordedEvent]:
    async with open_store("memory://") as store:
        for stream, events in batches:
            await store.append(stream, list(events))
        return [e async for e in store.read_all()]


def _names(trace: Trace) -> list[tuple[str, str | None]]:
    by_id = {s.span_id: s.name for s in trace.spans}
    return [(s.name, by_id.get(s.parent_id) if s.parent_id else None) for s in trace.spans]


async def test_a_nested_run_is_a_child_of_its_parent_in_one_trace() -> None:
    events = await _record(
        ("branch-b1", [_started("outer", "operate"), _called("outer", "c1")]),
        ("branch-b1", [_started("inner", "chat", parent="outer"), _called("inner", "c2"), _ended("inner")]),
        ("branch-b1", [_ended("outer", tokens=20)]),
    )
    (trace,) = build_traces(events)
    assert _names(trace) == [
        ("invoke_agent operate", None),
        ("chat claude-x", "invoke_agent operate"),
        ("invoke_agent chat", "invoke_agent operate"),
        ("chat claude-x", "invoke_agent chat"),
    ]
    assert len({s.trace_id for s in trace.spans}) == 1
    assert trace.root.attributes["gen_ai.usage.input_tokens"] == 20


async def test_an_open_run_makes_no_trace_and_marks_where_to_read_again() -> None:
    events = await _record(
        ("branch-b1", [_started("done")]),
        ("branch-b1", [_started("open")]),
        ("branch-b1", [_ended("done")]),
    )
    view = SpanView()
    finished = [t for e in events for t in view.apply(e)]
    assert [t.root.attributes["turnlog.run_id"] for t in finished] == ["done"]
    assert view.open_from() == events[1].position


async def test_reading_again_from_open_from_rebuilds_the_open_run_whole() -> None:
    first = [_started("a"), _called("a", "c1")]
    events = await _record(("branch-b1", first), ("branch-b1", [_started("b")]), ("branch-b1", [_ended("a")]))
    view = SpanView()
    for event in events:
        view.apply(event)
    resume = view.open_from()
    assert resume is not None
    more = await _record(("branch-b1", first), ("branch-b1", [_started("b")]), ("branch-b1", [_ended("a")]),
                         ("branch-b1", [_called("b", "c2"), _ended("b")]))  # fmt: skip
    whole = build_traces(more)
    restarted = build_traces(e for e in more if e.position >= resume)
    assert restarted[-1].spans == whole[-1].spans  # the same run, the same ids, nothing lost


async def test_failures_retries_and_first_token_are_status_attributes_and_events() -> None:
    events = await _record(
        ("branch-b1", [_started("r"), _called("r", "c1", status="error", attempts=3, ttft=1.0)]),
        (
            "branch-b1",
            [
                new_event(
                    RunFailed(
                        run_id="r",
                        verb="chat",
                        duration_ms=9.0,
                        error_type="RateLimitError",
                        error_message="slow down",
                        reason="error",
                    ),
                    meta=_meta("r"),
                )
            ],
        ),
    )
    (trace,) = build_traces(events)
    run, call = trace.spans
    assert (run.status, run.attributes["error.type"], run.status_message) == (
        "error",
        "RateLimitError",
        "slow down",
    )
    assert (call.status, call.attributes["error.type"]) == ("error", "RateLimitError")
    assert call.attributes["turnlog.attempts"] == 3
    assert [e.name for e in call.events] == ["turnlog.retried", "gen_ai.first_token"]
    assert call.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert call.attributes["gen_ai.system"] == "anthropic"


async def test_chunks_are_counted_and_the_first_one_is_an_event() -> None:
    chunk_meta = _meta("r")
    chunks = [new_event(ChunkReceived(seq=i, type="text", content="x"), meta=chunk_meta) for i in (1, 2, 3)]
    events = await _record(("branch-b1", [_started("r")]), ("run-r", chunks), ("branch-b1", [_ended("r")]))
    (trace,) = build_traces(events)
    assert trace.root.attributes["turnlog.chunks"] == 3
    assert [e.name for e in trace.root.events] == ["turnlog.first_chunk"]


async def test_a_react_round_is_a_step_holding_its_call_and_tool() -> None:
    # the tool ran after the model call that asked for it (these messages are built before it)
    later = datetime.now(UTC) + timedelta(seconds=1)
    request = ActionRequest.create(function="lookup", arguments={"q": "x"}, call_id="call_1")
    request = request.model_copy(update={"created_at": later})
    response = ActionResponse.create(request, output={"a": 1}, duration_ms=2.0)
    response = response.model_copy(update={"created_at": later + timedelta(milliseconds=2)})
    events = await _record(
        ("branch-b1", [_started("r", "ReAct")]),
        ("branch-b1", [new_event(MessageAdded(message=Instruction.create("go"), run_id="r"), meta=_meta("r")),
                       _called("r", "c1")]),
        ("branch-b1", [new_event(MessageAdded(message=request, run_id="r"), meta=_meta("r"))]),
        ("branch-b1", [new_event(MessageAdded(message=response, run_id="r"), meta=_meta("r"))]),
        ("branch-b1", [_ended("r")]),
    )  # fmt: skip
    (trace,) = build_traces(events, content=True, semconv=Semconv.LATEST)
    assert _names(trace) == [
        ("invoke_agent ReAct", None),
        ("step 1", "invoke_agent ReAct"),
        ("chat claude-x", "step 1"),
        ("execute_tool lookup", "step 1"),
    ]
    tool = trace.spans[3]
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["gen_ai.tool.call.result"] == '{"a":1}'
    assert '"go"' in str(trace.spans[2].attributes["gen_ai.input.messages"])


async def test_a_run_on_a_flow_node_nests_under_the_node() -> None:
    node = [new_event(NodeStarted(node_id="n1", operation="communicate", branch_id="b1"))]
    events = await _record(
        ("graph-g1", node),
        ("branch-b1", [_started("r"), _ended("r")]),
        ("graph-g1", [new_event(NodeCompleted(node_id="n1", duration_ms=4.0))]),
    )
    run_trace, node_trace = build_traces(events)
    assert node_trace.root.name == "communicate" and node_trace.root.parent_id is None
    assert run_trace.root.parent_id == node_trace.root.span_id
    assert run_trace.root.trace_id == node_trace.root.trace_id


async def test_a_call_outside_any_run_is_a_trace_of_its_own_and_ids_are_derived() -> None:
    events = await _record(("branch-b1", [_called(None, "c1")]))
    (trace,) = build_traces(events)
    assert trace.root.name == "chat claude-x" and trace.root.kind == "client"
    again = build_traces(events)
    assert (again[0].root.trace_id, again[0].root.span_id) == (trace.root.trace_id, trace.root.span_id)
    assert len(trace.root.trace_hex) == 32 and len(trace.root.span_hex) == 16


def test_the_opt_in_list_selects_the_latest_conventions() -> None:
    assert (
        semconv_from_env({"OTEL_SEMCONV_STABILITY_OPT_IN": "database,gen_ai_latest_experimental"})
        is Semconv.LATEST
    )
    assert semconv_from_env({"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest"}) is Semconv.V1_36
    assert semconv_from_env({}) is Semconv.V1_36
