"""Flows: run a dependency graph of ``Operation`` nodes on a session's branches.

``Graph`` holds nodes and their dependencies; ``flow(session, graph)`` (also
``Session.flow``) runs it with anyio: one task per node in a task group, at most
``max_concurrent`` running at once (a ``CapacityLimiter``). Before anything runs the graph
is checked: a cycle raises ``GraphCycleError``, an unknown dependency ``UsageError``.

Which branch a node runs on:

- its own ``branch`` (included in the session when it is not yet);
- with ``inherit_context``: a fork of its first dependency's branch, made when the node
  starts, so it continues that conversation;
- with dependencies: a fork of the default branch made when the flow starts (parallel
  dependents never interleave on one branch);
- otherwise the flow's ``default_branch``, else the session's default branch.

Forks are included in the session, so every node sees the session's registered operations.

A node whose dependency failed, was cancelled or was skipped is skipped, unless the graph
was made with ``continue_on_error=True`` (then it runs and sees ``{"error": ...}`` as that
dependency's result). A node's ``when`` predicate, given the results of its dependencies,
may skip it too. A node whose operation accepts ``context`` receives the flow context and
``{"<dependency id>_result": result}`` items merged into it.

Node events are recorded in ``graph-<graph id>``::

    node.queued (every node, at the start)
        └─ node.started ─┬─ node.completed {result}
                         └─ node.failed {error_type, error_message}
        └─ node.skipped {reason}          (instead of started)
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from pydantic import BaseModel

from turnlog.eventstore import uuid7
from turnlog.kernel._errors import GraphCycleError, UsageError
from turnlog.kernel._node import Operation, dependency_ids
from turnlog.kernel._tools import jsonable
from turnlog.projections import (
    EventData,
    NodeCompleted,
    NodeFailed,
    NodeQueued,
    NodeSkipped,
    NodeStarted,
    new_event,
)

if TYPE_CHECKING:
    from turnlog.eventstore import EventStore
    from turnlog.kernel._branch import Branch

__all__ = ["FlowResult", "FlowSession", "Graph", "GraphCycleError", "flow"]

Condition = Callable[[Mapping[str, Any]], "bool | Awaitable[bool]"]


class Graph:
    """Operation nodes and their dependencies.

    Args:
        continue_on_error: Run the dependents of a failed node anyway.
        graph_id: The graph id (default: a fresh UUIDv7); events go to ``graph-<id>``.

    Example::

        graph = Graph()
        a = graph.add("communicate", {"instruction": "Name a color"})
        b = graph.add("communicate", {"instruction": "Name a fruit"})
        graph.add("summarize", depends_on=[a, b])
        result = await session.flow(graph)
    """

    def __init__(self, *, continue_on_error: bool = False, graph_id: str | None = None) -> None:
        self.id = graph_id or str(uuid7())
        self.continue_on_error = continue_on_error
        self.nodes: dict[str, Operation] = {}
        self.conditions: dict[str, Condition] = {}

    @property
    def stream(self) -> str:
        """The graph's stream name, ``graph-<id>``."""
        return f"graph-{self.id}"

    def add(
        self,
        operation: Operation | str,
        parameters: Mapping[str, Any] | BaseModel | None = None,
        *,
        depends_on: Iterable[Operation | str] | Operation | str = (),
        branch: Branch | None = None,
        inherit_context: bool = False,
        node_id: str | None = None,
        when: Condition | None = None,
    ) -> Operation:
        """Add a node (an ``Operation``, or one built from a name); return it.

        Raises:
            UsageError: the node id is taken.
        """
        if isinstance(operation, Operation):
            node = operation
            node.depends_on = tuple(dict.fromkeys([*node.depends_on, *dependency_ids(depends_on)]))
        else:
            node = Operation(
                operation,
                parameters,
                branch=branch,
                node_id=node_id,
                depends_on=depends_on,
                inherit_context=inherit_context,
            )
        if node.id in self.nodes:
            raise UsageError(f"graph {self.id} has a node {node.id} already")
        self.nodes[node.id] = node
        node.metadata["graph_id"] = self.id
        if when is not None:
            self.conditions[node.id] = when
        return node

    def add_operation(
        self,
        operation: str,
        node_id: str | None = None,
        depends_on: Iterable[Operation | str] | None = None,
        inherit_context: bool = False,
        branch: Branch | None = None,
        **parameters: Any,
    ) -> str:
        """Add a node from a name and keyword parameters; return its id."""
        node = self.add(
            operation,
            parameters,
            depends_on=depends_on or (),
            branch=branch,
            inherit_context=inherit_context,
            node_id=node_id,
        )
        return node.id

    def order(self) -> list[str]:
        """The node ids in an order where every node comes after its dependencies.

        Raises:
            UsageError: a node depends on an id that is not in the graph.
            GraphCycleError: the graph has a cycle.
        """
        for node in self.nodes.values():
            missing = [d for d in node.depends_on if d not in self.nodes]
            if missing:
                raise UsageError(f"node {node.id} depends on unknown nodes: {missing}")
        indegree = {nid: len(set(n.depends_on)) for nid, n in self.nodes.items()}
        dependents: dict[str, list[str]] = {nid: [] for nid in self.nodes}
        for nid, node in self.nodes.items():
            for dep in set(node.depends_on):
                dependents[dep].append(nid)
        ready = [nid for nid, k in indegree.items() if k == 0]
        out: list[str] = []
        while ready:
            nid = ready.pop(0)
            out.append(nid)
            for child in dependents[nid]:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
        if len(out) < len(self.nodes):
            raise GraphCycleError(self._a_cycle({n for n in self.nodes if n not in out}))
        return out

    def _a_cycle(self, left: set[str]) -> list[str]:
        # Every node left has a dependency left: walk dependencies until one repeats.
        path: list[str] = []
        seen: dict[str, int] = {}
        nid = min(left)
        while nid not in seen:
            seen[nid] = len(path)
            path.append(nid)
            nid = next(d for d in self.nodes[nid].depends_on if d in left)
        return path[seen[nid] :]


@dataclass(slots=True)
class FlowResult:
    """What a flow did.

    Attributes:
        graph_id: The graph (its events are in ``graph-<graph_id>``).
        results: The result of every completed node, by node id.
        completed: Completed node ids, in completion order.
        failed: The exception of every failed node, by node id.
        skipped: Skipped node ids.
        statuses: Every node's final status, by node id.
        branches: The id of the branch each node ran on.
    """

    graph_id: str
    results: dict[str, Any] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)
    failed: dict[str, BaseException] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    statuses: dict[str, str] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)


def _accepts_context(func: Any) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "context" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _merged_context(existing: Any, additions: Mapping[str, Any]) -> Any:
    if not additions:
        return existing
    if existing is None:
        return dict(additions)
    if isinstance(existing, Mapping):
        return {**existing, **additions}
    return {"original_context": existing, **additions}


class FlowSession(Protocol):
    """What a flow needs of its session (a ``Session`` is one; it runs ``flow`` as ``Session.flow``)."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def store(self) -> EventStore:
        """Where the flow records its ``graph-<id>`` stream."""
        ...

    @property
    def default_branch(self) -> Branch | None:
        """The branch of nodes without one of their own."""
        ...

    def get_branch(self, ref: Branch | str) -> Branch:
        """An included branch by object, id, unique id prefix or name."""
        ...

    async def include_branches(self, branches: Branch | Iterable[Branch]) -> None:
        """Include branches in the session."""
        ...


class _Run:
    """The state of one flow run."""

    def __init__(
        self, session: FlowSession, graph: Graph, context: Mapping[str, Any] | None, limit: int
    ) -> None:
        self.session = session
        self.graph = graph
        self.context = dict(context or {})
        self.limiter = anyio.CapacityLimiter(limit)
        self.done = {nid: anyio.Event() for nid in graph.nodes}
        self.result = FlowResult(graph.id)

    async def record(self, data: EventData, branch_id: str | None = None) -> None:
        meta = {"session_id": self.session.id, "branch_id": branch_id, "correlation_id": self.graph.id}
        event = new_event(data, meta={k: v for k, v in meta.items() if v is not None})
        await self.session.store.append(self.graph.stream, [event])

    async def skip(self, node: Operation, reason: str) -> None:
        node.status = "skipped"
        self.result.skipped.append(node.id)
        self.result.statuses[node.id] = "skipped"
        await self.record(NodeSkipped(node_id=node.id, reason=reason), node.branch_id)

    async def run_node(self, node: Operation, default: Branch) -> None:
        try:
            await self._run_node(node, default)
        finally:
            self.done[node.id].set()

    async def _run_node(self, node: Operation, default: Branch) -> None:
        for dep in node.depends_on:
            await self.done[dep].wait()
        deps = [self.graph.nodes[d] for d in node.depends_on]
        blocked = [d for d in deps if d.status == "skipped"]
        if not self.graph.continue_on_error:
            blocked += [d for d in deps if d.status in ("failed", "cancelled")]
        if blocked:
            first = blocked[0]
            await self.skip(node, f"dependency {first.id} {first.status}")
            return
        dep_results = {d.id: d.response if d.status == "completed" else {"error": str(d.error)} for d in deps}
        condition = self.graph.conditions.get(node.id)
        if condition is not None:
            verdict = condition(dep_results)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                await self.skip(node, "condition not met")
                return
        async with self.limiter:
            branch = await self.branch_for(node, deps, default)
            self.prepare(node, branch, dep_results)
            await self.record(
                NodeStarted(node_id=node.id, operation=node.operation, branch_id=branch.id), branch.id
            )
            try:
                await node.invoke(branch)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.finish(node)

    async def branch_for(self, node: Operation, deps: list[Operation], default: Branch) -> Branch:
        if node.branch is not None:
            return node.branch
        if node.inherit_context and deps and deps[0].branch is not None:
            child = await deps[0].branch.fork()
            await self.session.include_branches(child)
            node.branch = child
            return child
        node.branch = default
        return default

    def prepare(self, node: Operation, branch: Branch, dep_results: Mapping[str, Any]) -> None:
        additions = {**self.context, **{f"{k}_result": jsonable(v) for k, v in dep_results.items()}}
        if not additions:
            return
        method = branch.get_operation(node.operation)
        if method is None or not _accepts_context(method):
            return
        request = node.request
        request["context"] = _merged_context(request.get("context"), additions)
        node.parameters = request

    async def finish(self, node: Operation) -> None:
        result = self.result
        result.statuses[node.id] = node.status
        if node.branch is not None:
            result.branches[node.id] = node.branch.id
        duration = node.duration_ms or 0.0
        if node.status == "completed":
            result.results[node.id] = node.response
            result.completed.append(node.id)
            if isinstance(node.response, Mapping) and isinstance(node.response.get("context"), Mapping):
                self.context.update(node.response["context"])
            data: EventData = NodeCompleted(
                node_id=node.id, duration_ms=duration, result=jsonable(node.response)
            )
        else:
            error = node.error or RuntimeError(f"node ended {node.status}")
            result.failed[node.id] = error
            data = NodeFailed(
                node_id=node.id,
                duration_ms=duration,
                error_type=type(error).__name__,
                error_message=str(error),
            )
        await self.record(data, node.branch_id)


async def flow(
    session: FlowSession,
    graph: Graph,
    *,
    context: Mapping[str, Any] | None = None,
    max_concurrent: int | None = 5,
    parallel: bool = True,
    default_branch: Branch | str | None = None,
) -> FlowResult:
    """Run ``graph`` on ``session``'s branches; see the module docstring.

    Args:
        session: The session whose branches and registered operations the nodes use.
        graph: The nodes.
        context: A flow context merged into the ``context`` of every node that takes one.
        max_concurrent: The most nodes running at once (None: no limit).
        parallel: False runs one node at a time.
        default_branch: The branch of nodes without dependencies (default: the session's).

    Returns:
        The results by node id, and what completed, failed and was skipped.

    Raises:
        GraphCycleError: the graph has a cycle (nothing ran).
        UsageError: an unknown dependency, no branch to run on, or a node branch owned by
            another session (nothing ran).
    """
    order = graph.order()
    if default_branch is not None:
        default = session.get_branch(default_branch)
    elif session.default_branch is not None:
        default = session.default_branch
    else:
        raise UsageError(f"session {session.id} has no default branch for the flow to run on")
    own = [n.branch for n in graph.nodes.values() if n.branch is not None]
    for branch in own:
        if branch.session is not None and branch.session is not session:
            raise UsageError(f"branch {branch.id} of a node belongs to another session")
    if max_concurrent is not None and max_concurrent < 1:
        raise UsageError("max_concurrent must be at least 1")
    await session.include_branches([b for b in own if b.session is None])
    for nid in order:
        node = graph.nodes[nid]
        if node.branch is None and not node.inherit_context:
            if node.depends_on:
                node.branch = await default.fork()
                await session.include_branches(node.branch)
            else:
                node.branch = default
    limit = 1 if not parallel else (max_concurrent or max(1, len(graph.nodes)))
    run = _Run(session, graph, context, limit)
    if not order:
        return run.result
    queued = [
        new_event(
            NodeQueued(
                node_id=nid, operation=graph.nodes[nid].operation, branch_id=graph.nodes[nid].branch_id
            ),
            meta={"session_id": session.id, "correlation_id": graph.id},
        )
        for nid in order
    ]
    await session.store.append(graph.stream, queued)
    async with anyio.create_task_group() as group:
        for nid in order:
            group.start_soon(run.run_node, graph.nodes[nid], default)
    return run.result
