"""The branch index: every branch's name, origin and last run, kept up to date incrementally.

One filtered scan of the log (``branch.created``, ``branch.forked`` and the run lifecycle
events) builds it; each later request reads only the events appended since, so the branch
list stays fast with tens of thousands of branches. Versions come from ``list_streams``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import anyio

from turnlog.eventstore import EventStore, RecordedEvent
from turnlog.projections import visible_event

__all__ = ["BranchIndex", "BranchRow", "RunRef"]

_TYPES = ("branch.created", "branch.forked", "run.started", "run.ended", "run.failed")


@dataclass(slots=True)
class RunRef:
    """Where a run lives and how it stands: ``open``, ``ok``, ``failed`` or ``crashed``."""

    run_id: str
    branch_id: str
    verb: str
    state: str


@dataclass(slots=True)
class BranchRow:
    """One branch as the list shows it."""

    branch_id: str
    name: str | None
    created_at: datetime
    parent_id: str | None = None
    parent_version: int | None = None
    version: int = 0
    last_run: RunRef | None = None
    children: list[str] = field(default_factory=list)


def _run_state(event: RecordedEvent) -> str:
    if event.type == "run.started":
        return "open"
    if event.type == "run.ended":
        return "ok"
    return "crashed" if event.data.get("reason") == "crashed" else "failed"


class BranchIndex:
    """Branches and runs of one store, folded from the log and refreshed on demand."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.branches: dict[str, BranchRow] = {}
        self.order: list[str] = []
        self.runs: dict[str, RunRef] = {}
        self.position = 0
        self._lock = anyio.Lock()

    async def refresh(self) -> None:
        """Read the index events appended since the last refresh, then every branch's version."""
        async with self._lock:
            async for event in self.store.read_all(self.position + 1, types=_TYPES, stream_prefix="branch-"):
                self._apply(event)
                self.position = event.position
            for stream, version in await self.store.list_streams("branch-"):
                row = self.branches.get(stream.removeprefix("branch-"))
                if row is not None:
                    row.version = version

    def _apply(self, event: RecordedEvent) -> None:
        branch_id = event.stream.removeprefix("branch-")
        data = visible_event(event).data  # a redacted branch.created keeps its name
        if event.type in ("branch.created", "branch.forked"):
            if branch_id in self.branches:
                return
            row = BranchRow(branch_id, data.get("name"), event.recorded_at)
            if event.type == "branch.forked":
                row.parent_id = str(data.get("parent_branch_id"))
                row.parent_version = int(data.get("parent_version") or 0)
                parent = self.branches.get(row.parent_id)
                if parent is not None:
                    parent.children.append(branch_id)
            self.branches[branch_id] = row
            self.order.append(branch_id)
            return
        run_id = str(data.get("run_id"))
        ref = self.runs.get(run_id)
        if ref is None:
            ref = self.runs[run_id] = RunRef(run_id, branch_id, str(data.get("verb")), "open")
        ref.state = _run_state(event)
        owner = self.branches.get(branch_id)
        if owner is not None and event.type == "run.started" and data.get("parent_run_id") is None:
            owner.last_run = ref

    def search(self, query: str) -> list[BranchRow]:
        """Branches whose name contains ``query`` or whose id starts with it, newest first."""
        q = query.strip().lower()
        rows = (self.branches[b] for b in reversed(self.order))
        if not q:
            return list(rows)
        return [r for r in rows if r.branch_id.startswith(q) or (r.name is not None and q in r.name.lower())]

    def roots(self) -> list[BranchRow]:
        """Branches that are not forks and have at least one fork, newest first."""
        return [
            self.branches[b]
            for b in reversed(self.order)
            if self.branches[b].parent_id is None and self.branches[b].children
        ]
