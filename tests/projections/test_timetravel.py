"""History rows and diffs between two points of a branch."""

from __future__ import annotations

import pytest

from turnlog.eventstore import open_store
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ModelCalled,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
    System,
    UnknownBranch,
    Usage,
    diff,
    history,
    rebuild,
)

from .helpers import append, fork, new_branch


@pytest.fixture
async def store():
    async with open_store("memory://") as s:
        yield s


async def test_history_has_one_row_per_event_with_a_summary(store) -> None:
    req = ActionRequest.create("search", {"q": "cats"})
    await new_branch(store, "b", name="main", system=System.create("s"))
    events = await append(
        store,
        "b",
        [
            RunStarted(run_id="r1", verb="communicate"),
            MessageAdded(message=Instruction.create("What do cats eat?\nBe brief.")),
            ModelCalled(
                call_id="c",
                provider="openai",
                model="gpt",
                endpoint="chat/completions",
                fingerprint="f",
                latency_ms=120.4,
                status="ok",
                usage=Usage(input_tokens=12, output_tokens=30),
            ),
            MessageAdded(message=AssistantResponse.create("Mostly meat. " * 20)),
            MessageAdded(message=req),
            MessageAdded(message=ActionResponse.create(req, error="denied", metadata={"denied": True})),
            MessageAnnotated(message_id=req.id, metadata={"b": 1, "a": 2}, reason="checked"),
            ProviderSessionBound(provider="claude_code", model="", session_id="s1"),
            MessagesCleared(),
            RunEnded(run_id="r1", verb="communicate", duration_ms=250.0),
            RunFailed(
                run_id="r2",
                verb="run",
                duration_ms=5,
                error_type="Boom",
                error_message="bad",
                reason="crashed",
            ),
        ],
    )
    rows = await history(store, "b")
    assert [r.version for r in rows] == list(range(1, 13))
    assert [r.position for r in rows[1:]] == [e.position for e in events]
    assert [r.type for r in rows[:2]] == ["branch.created", "run.started"]
    summaries = [r.summary for r in rows]
    assert summaries[0] == "created 'main' with a system message"
    assert summaries[2] == "user: What do cats eat? Be brief."
    assert summaries[3] == "openai/gpt ok in 120 ms, 12->30 tokens"
    assert summaries[4].startswith("assistant: Mostly meat.") and summaries[4].endswith("…")
    assert summaries[5] == "tool call search({'q': 'cats'})"
    assert summaries[6] == "tool result search: error denied"
    assert summaries[7] == f"annotated {req.id}: a, b (checked)"
    assert summaries[8] == "claude_code (default model) session s1"
    assert summaries[9] == "messages cleared (system kept)"
    assert summaries[10] == "communicate ended after 250 ms (run r1)"
    assert summaries[11] == "run failed (crashed): Boom: bad (run r2)"
    assert all("\n" not in s and len(s) <= 100 for s in summaries)
    assert rows[1].recorded_at == events[0].recorded_at
    assert [r.version for r in await history(store, "b", from_version=3, to_version=4)] == [3, 4]
    with pytest.raises(UnknownBranch):
        await history(store, "nope")


async def test_diff_reports_added_removed_changed_runs_and_sessions(store) -> None:
    q1, a1 = Instruction.create("q1"), AssistantResponse.create("a1")
    await new_branch(store, "b", system=System.create("old"))
    await append(store, "b", [MessageAdded(message=q1), MessageAdded(message=a1)])
    before = await rebuild(store, "b")
    q2 = Instruction.create("q2")
    new_sys = System.create("new")
    await append(
        store,
        "b",
        [
            MessageAnnotated(message_id=a1.id, metadata={"parsed": True}),
            RunStarted(run_id="r", verb="chat"),
            ProviderSessionBound(provider="p", model="m", session_id="s"),
            MessageAdded(message=new_sys),
            MessagesCleared(),
            MessageAdded(message=q2),
        ],
    )
    after = await rebuild(store, "b")
    d = diff(before, after)
    assert d.added == [q2]
    assert d.removed == [q1, a1]
    assert d.changed == []
    assert d.system == (before.system, new_sys)
    assert list(d.runs) == ["r"] and d.runs["r"][0] is None and d.runs["r"][1].status == "running"
    assert d.provider_sessions == {("p", "m"): (None, "s")}
    assert d and not diff(after, after)

    annotated = await rebuild(store, "b", at_version=4)
    d2 = diff(before, annotated)
    assert d2.added == d2.removed == []
    assert d2.changed == [(a1, annotated.messages[1])] and d2.changed[0][1].metadata == {"parsed": True}


async def test_diff_between_a_branch_and_its_fork(store) -> None:
    q = Instruction.create("q")
    await new_branch(store, "p")
    await append(store, "p", [MessageAdded(message=q)])
    child = await fork(store, "p", 2, name="try-2")
    a_parent, a_child = AssistantResponse.create("parent"), AssistantResponse.create("child")
    await append(store, "p", [MessageAdded(message=a_parent)])
    await append(store, child, [MessageAdded(message=a_child)])
    d = diff(await rebuild(store, "p"), await rebuild(store, child))
    assert d.added == [a_child] and d.removed == [a_parent]
    assert (await rebuild(store, child)).name == "try-2"
