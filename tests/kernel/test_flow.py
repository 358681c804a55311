"""Flows: dependency graphs run with anyio; node events in graph-<id>; skips; session wiring."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, Graph, GraphCycleError, Operation, OperationError, Session, UsageError
from turnlog.projections import decode_event
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds


async def node_events(store: EventStore, graph: Graph) -> list[tuple[str, Any]]:
    return [(e.type, decode_event(e)) async for e in store.read_stream(graph.stream)]


async def session_with(store: EventStore, *replies: str) -> tuple[Session, Branch]:
    session = Session(store=store)
    branch = await session.new_branch(chat_model=ScriptedModel(*replies))
    await branch.save()
    return session, branch


async def check_branches(session: Session) -> None:
    for branch in session.branches:
        if branch.version:
            await assert_rebuilds(branch)


async def test_linear_flow_passes_results_as_context(store: EventStore) -> None:
    session, _ = await session_with(store)
    seen: list[Any] = []

    @session.operation()
    async def produce(value: int) -> int:
        return value

    @session.operation()
    async def double(context: dict[str, Any] | None = None) -> int:
        seen.append(context)
        assert context is not None
        (key,) = [k for k in context if k.endswith("_result")]
        return int(context[key]) * 2

    graph = Graph()
    a = graph.add("produce", {"value": 21})
    b = graph.add("double", depends_on=[a])
    c = graph.add("double", depends_on=b)
    result = await session.flow(graph)
    assert result.results == {a.id: 21, b.id: 42, c.id: 84}
    assert result.completed == [a.id, b.id, c.id] and result.failed == {} and result.skipped == []
    assert seen[0] == {f"{a.id}_result": 21}
    types = [t for t, _ in await node_events(store, graph)]
    assert types == ["node.queued"] * 3 + ["node.started", "node.completed"] * 3
    completed = [d for t, d in await node_events(store, graph) if t == "node.completed"]
    assert [d.result for d in completed] == [21, 42, 84]
    await check_branches(session)


async def test_parallel_nodes_respect_max_concurrent(store: EventStore) -> None:
    session, _ = await session_with(store)
    running = 0
    peak = 0

    @session.operation()
    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return n

    graph = Graph()
    nodes = [graph.add("work", {"n": n}) for n in range(6)]
    result = await session.flow(graph, max_concurrent=2)
    assert peak == 2
    assert [result.results[n.id] for n in nodes] == list(range(6))
    peak = 0
    await session.flow(_fresh(nodes), parallel=False)
    assert peak == 1
    await check_branches(session)


def _fresh(nodes: list[Operation]) -> Graph:
    graph = Graph()
    for node in nodes:
        graph.add(node.operation, node.request)
    return graph


async def test_cycles_are_rejected_before_anything_runs(store: EventStore) -> None:
    session, _ = await session_with(store)
    ran: list[str] = []

    @session.operation()
    async def mark(name: str) -> None:
        ran.append(name)

    graph = Graph()
    a = graph.add("mark", {"name": "a"}, node_id="a", depends_on="c")
    graph.add("mark", {"name": "b"}, node_id="b", depends_on=a)
    graph.add("mark", {"name": "c"}, node_id="c", depends_on="b")
    graph.add("mark", {"name": "free"}, node_id="free")
    with pytest.raises(GraphCycleError, match="Graph must be acyclic") as info:
        await session.flow(graph)
    assert sorted(info.value.cycle) == ["a", "b", "c"]
    assert ran == [] and await node_events(store, graph) == []
    bad = Graph()
    bad.add("mark", {"name": "x"}, depends_on="nowhere")
    with pytest.raises(UsageError, match="unknown nodes"):
        await session.flow(bad)
    await check_branches(session)


async def test_empty_and_single_node_graphs(store: EventStore) -> None:
    session, branch = await session_with(store, "only answer")
    empty = await session.flow(Graph())
    assert empty.results == {} and empty.completed == []
    graph = Graph()
    node = graph.add("communicate", {"instruction": "hello"})
    result = await session.flow(graph)
    assert result.results == {node.id: "only answer"}
    assert node.metadata == {"graph_id": graph.id, "branch_id": branch.id}
    assert result.branches == {node.id: branch.id}  # a root node runs on the default branch
    (queued, *_) = [d for t, d in await node_events(store, graph)]
    assert queued.operation == "communicate" and queued.branch_id == branch.id
    await check_branches(session)


async def test_a_failed_node_skips_its_dependents(store: EventStore) -> None:
    session, _ = await session_with(store)

    @session.operation()
    async def explode() -> None:
        raise RuntimeError("kaput")

    @session.operation()
    async def fine() -> str:
        return "fine"

    graph = Graph()
    bad = graph.add("explode")
    child = graph.add("fine", depends_on=bad)
    grandchild = graph.add("fine", depends_on=child)
    free = graph.add("fine")
    unknown = graph.add("nonexistent")
    result = await session.flow(graph)
    assert result.results == {free.id: "fine"}
    assert set(result.failed) == {bad.id, unknown.id}
    assert isinstance(result.failed[unknown.id], OperationError)
    assert sorted(result.skipped) == sorted([child.id, grandchild.id])
    events = await node_events(store, graph)
    failed = {d.node_id: d for t, d in events if t == "node.failed"}
    assert (failed[bad.id].error_type, failed[bad.id].error_message) == ("RuntimeError", "kaput")
    skipped = {d.node_id: d.reason for t, d in events if t == "node.skipped"}
    assert skipped == {
        child.id: f"dependency {bad.id} failed",
        grandchild.id: f"dependency {child.id} skipped",
    }
    assert not any(t == "node.started" and d.node_id == child.id for t, d in events)
    await check_branches(session)


async def test_continue_on_error_runs_dependents_with_the_error(store: EventStore) -> None:
    session, _ = await session_with(store)

    @session.operation()
    async def explode() -> None:
        raise RuntimeError("kaput")

    @session.operation()
    async def report(context: dict[str, Any]) -> str:
        return next(str(v) for k, v in context.items() if k.endswith("_result"))

    graph = Graph(continue_on_error=True)
    bad = graph.add("explode")
    child = graph.add("report", depends_on=bad)
    result = await session.flow(graph)
    assert result.results[child.id] == "{'error': 'kaput'}"
    assert result.skipped == []
    await check_branches(session)


async def test_dependent_nodes_get_forks_included_in_the_session(store: EventStore) -> None:
    session, root = await session_with(store, "Paris.", "It is in France.", "Blue.")
    graph = Graph()
    first = graph.add("communicate", {"instruction": "Capital of France?"})
    follow = graph.add("communicate", {"instruction": "Where is it?"}, depends_on=first, inherit_context=True)
    other = graph.add("communicate", {"instruction": "A color?"}, depends_on=first)
    result = await session.flow(graph)
    assert result.results[first.id] == "Paris."
    follow_branch = session.get_branch(result.branches[follow.id])
    other_branch = session.get_branch(result.branches[other.id])
    assert len({root.id, follow_branch.id, other_branch.id}) == 3
    # inherit_context forks the dependency's branch after it ran: the conversation continues
    asked, answered = follow_branch.messages[:2]
    assert asked.content.instruction == "Capital of France?" and answered.rendered == "Paris."  # type: ignore[union-attr]
    assert len(follow_branch.messages) == 4 and len(other_branch.messages) == 2
    # a plain dependent forks the default branch as it was when the flow started
    assert other_branch.state.forked_from is not None
    assert all(b.session is session for b in (follow_branch, other_branch))
    await check_branches(session)


async def test_forked_branches_see_registered_operations(store: EventStore) -> None:
    session, _ = await session_with(store)
    where: list[str] = []

    @session.operation()
    async def note(text: str) -> str:
        where.append(text)
        return text

    graph = Graph()
    a = graph.add("note", {"text": "root"})
    b = graph.add("note", {"text": "dependent"}, depends_on=a)
    result = await session.flow(graph)
    assert result.statuses == {a.id: "completed", b.id: "completed"} and where == ["root", "dependent"]
    await check_branches(session)


async def test_conditions_skip_nodes(store: EventStore) -> None:
    session, _ = await session_with(store)

    @session.operation()
    async def value(n: int) -> int:
        return n

    graph = Graph()
    a = graph.add("value", {"n": 3})
    big = graph.add("value", {"n": 1}, depends_on=a, when=lambda r: r[a.id] > 10)
    small = graph.add("value", {"n": 2}, depends_on=a, when=lambda r: r[a.id] <= 10)
    result = await session.flow(graph, context={"unused": True})
    assert result.skipped == [big.id] and result.results[small.id] == 2
    await check_branches(session)


async def test_decorator_registration_rules(store: EventStore) -> None:
    session, branch = await session_with(store)

    async def first_op() -> str:
        return "first"

    assert session.operation()(first_op) is first_op
    with pytest.raises(ValueError, match="Operation 'first_op' is already registered"):
        session.register_operation("first_op", first_op)

    async def replacement() -> str:
        return "replaced"

    session.operation("first_op", update=True)(replacement)
    with pytest.raises(ValueError, match="must be an async function"):
        session.register_operation("sync_op", lambda: None)
    with pytest.raises(ValueError, match="Unknown operation"):
        await session.run_operation("missing")
    graph = Graph()
    node_id = graph.add_operation("first_op", branch=branch)
    result = await session.flow(graph)
    assert result.results == {node_id: "replaced"}
    await check_branches(session)


async def test_cancelling_a_flow_propagates(store: EventStore) -> None:
    session, _ = await session_with(store)
    entered = anyio.Event()

    @session.operation()
    async def hang() -> None:
        entered.set()
        await anyio.sleep_forever()

    graph = Graph()
    node = graph.add("hang")
    with anyio.move_on_after(5) as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(session.flow, graph)
            await entered.wait()
            group.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert node.status == "cancelled"
    types = [t for t, _ in await node_events(store, graph)]
    assert types == ["node.queued", "node.started", "node.failed"]
    await check_branches(session)
