"""What the pages show, read through the public APIs of the store, projections and kernel.

``UIData`` owns one store (read-only unless writes were allowed), one ``StateCache`` so
that moving through a branch's versions refolds at most a few events, and the branch index.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnlog.eventstore import EventStore, Problem, RecordedEvent, VerifyReport, check_events, check_stream
from turnlog.kernel import AmbiguousBranch, RecoveryReport, UnknownBranch, find_branch
from turnlog.projections import (
    BranchDiff,
    BranchState,
    HistoryRow,
    ProjectionError,
    RunInfo,
    StateCache,
    diff,
    history,
    rebuild,
)

from .._shown import Damage, branch_damage
from ._http_status import BadRequest, Forbidden, NotFound

if TYPE_CHECKING:
    from turnlog.analytics import Grouping
from ._index import BranchIndex, BranchRow

__all__ = ["RunDetail", "UIData"]

PAGE = 50
"""Branches per page of the list."""
TIMELINE_PAGE = 200
"""Timeline rows per page."""


@dataclass(slots=True)
class RunDetail:
    """A run with everything its page shows."""

    branch_id: str
    info: RunInfo | None
    chunks: list[RecordedEvent]
    calls: list[dict[str, Any]]
    session_id: str | None = None
    cwd: str | None = None
    position: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_int(value: str | None, what: str, *, default: int | None = None, low: int = 1) -> int | None:
    """An integer query parameter, or ``default`` when absent; anything else is a bad request."""
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{what} must be a whole number, not {value!r}") from None
    if number < low:
        raise BadRequest(f"{what} must be at least {low}, not {number}")
    return number


class UIData:
    """The read side of the app over one store.

    Args:
        store: The store (wrap it in ``ReadOnlyStore`` to refuse writes).
        allow_writes: Whether the actions (fork, recover) may run.
        analytics_db: Where the analytics tables live; None: the store's default analytics
            database when writes are allowed, else a private temporary file.
    """

    def __init__(
        self, store: EventStore, *, allow_writes: bool = False, analytics_db: str | None = None
    ) -> None:
        self.store = store
        self.allow_writes = allow_writes
        self.cache = StateCache(store, every=16, max_streams=32)
        self.index = BranchIndex(store)
        self.analytics_db = analytics_db
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def close(self) -> None:
        """Remove the private analytics file, if one was made."""
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    # ---------------------------------------------------------------------------------- branches

    async def branch_page(self, query: str, page: int) -> tuple[list[BranchRow], int]:
        """One page of the branches matching ``query`` and how many match."""
        await self.index.refresh()
        rows = self.index.search(query)
        return rows[(page - 1) * PAGE : page * PAGE], len(rows)

    async def updated_at(self, branch_id: str) -> datetime | None:
        """The time of the branch's last event."""
        async for event in self.store.read_stream(f"branch-{branch_id}", backwards=True, limit=1):
            return event.recorded_at
        return None

    async def resolve(self, ref: str) -> str:
        """A branch id from an id, a unique id prefix or a name; unknown is a 404."""
        if await self.store.stream_version(f"branch-{ref}") > 0:
            return ref
        try:
            return await find_branch(self.store, ref)
        except (UnknownBranch, AmbiguousBranch) as exc:
            raise NotFound(str(exc)) from exc

    async def head(self, branch_id: str) -> int:
        """The branch's current version."""
        return await self.store.stream_version(f"branch-{branch_id}")

    async def state(self, branch_id: str, at: int | None = None) -> BranchState:
        """The branch as it was after version ``at`` (now when None); out of range is a 404."""
        head = await self.head(branch_id)
        if at is not None and not 1 <= at <= head:
            raise NotFound(f"branch {branch_id} has versions 1 to {head}; there is no version {at}")
        try:
            return await rebuild(self.store, branch_id, at_version=at, cache=self.cache)
        except ProjectionError as exc:
            raise NotFound(str(exc)) from exc

    async def damage(self, branch_id: str, at: int) -> Damage:
        """The damaged events the branch's state at ``at`` stands on (a fork's parents included)."""
        return await branch_damage(self.store, branch_id, at)

    async def damaged_versions(self, branch_id: str, first: int, last: int) -> dict[int, str]:
        """Version -> what is wrong, for the damaged events of a version range of the branch."""
        problems = await check_stream(self.store, f"branch-{branch_id}", first, last)
        return {p.version: p.what for p in problems}

    async def damaged_names(self, branch_ids: list[str]) -> set[str]:
        """The branches among ``branch_ids`` whose first event (it names the branch) fails its check."""
        firsts = [e for b in branch_ids async for e in self.store.read_stream(f"branch-{b}", 1, 1)]
        return {p.stream.removeprefix("branch-") for p in await check_events(self.store, firsts)}

    async def damaged_events(self, events: list[RecordedEvent]) -> tuple[Problem, ...]:
        """The problems of events a page is about to show (checked against the hash chain)."""
        return await check_events(self.store, events)

    async def timeline(self, branch_id: str, page: int) -> tuple[list[HistoryRow], int]:
        """One page of the branch's own events and the number of pages."""
        head = await self.head(branch_id)
        pages = max(1, -(-head // TIMELINE_PAGE))
        if page > pages:
            raise NotFound(f"the timeline of branch {branch_id} has {pages} page(s); there is no page {page}")
        first = (page - 1) * TIMELINE_PAGE + 1
        rows = await history(self.store, branch_id, from_version=first, to_version=first + TIMELINE_PAGE - 1)
        return rows, pages

    async def run_of_version(self, branch_id: str, first: int, last: int) -> dict[int, str]:
        """Version -> run id for the events of a version range that belong to a run."""
        return {
            e.version: str(e.meta["run_id"])
            async for e in self.store.read_stream(f"branch-{branch_id}", first, last)
            if e.meta.get("run_id")
        }

    async def diff(self, branch_id: str, a: int, b: int) -> BranchDiff:
        """What changed between versions ``a`` and ``b`` (the later one folded first)."""
        states = {v: await self.state(branch_id, v) for v in sorted({a, b}, reverse=True)}
        return diff(states[a], states[b])

    # -------------------------------------------------------------------------------------- runs

    async def run(self, run_id: str) -> RunDetail:
        """A run: its lifecycle from the branch's state, its chunks and its model calls."""
        await self.index.refresh()
        ref = self.index.runs.get(run_id)
        if ref is None:
            raise NotFound(f"no run {run_id!r} in this store")
        # the live feed starts after this position: take it before reading, so that nothing
        # appended meanwhile is missed (a chunk read twice is dropped by the page)
        position = await self.store.head()
        state = await self.state(ref.branch_id)
        chunks = [e async for e in self.store.read_stream(f"run-{run_id}")]
        calls = [
            e.data
            async for e in self.store.read_all(
                types=["model.called"], stream_prefix=f"branch-{ref.branch_id}"
            )
            if e.data.get("run_id") == run_id
        ]
        detail = RunDetail(ref.branch_id, state.runs.get(run_id), chunks, calls, position=position)
        for chunk in chunks:
            meta = chunk.data.get("metadata") or {}
            detail.session_id = detail.session_id or meta.get("session_id")
            detail.cwd = detail.cwd or meta.get("cwd")
        info = detail.info
        if detail.session_id is None and info is not None and info.provider:
            detail.session_id = state.provider_sessions.get((info.provider, info.model or ""))
        return detail

    # ------------------------------------------------------------------------------------- audit

    async def verify(self) -> tuple[VerifyReport, list[tuple[str, int]]]:
        """The store's verification and every stream with its version."""
        from turnlog.tools._cmd_verify import with_invariants

        report = await with_invariants(self.store, await self.store.verify())
        return report, await self.store.list_streams()

    async def replay(self, branch_id: str, execute: bool) -> tuple[Any, Any]:
        """The audit replay of a branch and, when asked, the execute replay."""
        from turnlog.kernel import audit_replay, execute_replay

        audit = await audit_replay(self.store, branch_id)
        executed = await execute_replay(self.store, branch_id) if execute else None
        return audit, executed

    # --------------------------------------------------------------------------------- analytics

    def analytics_database(self) -> str | None:
        """The analytics database: given, the store's default one (writes allowed), or a private temporary file."""
        if self.analytics_db is not None:
            return self.analytics_db
        if self.allow_writes:
            return None
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="turnlog-ui-")
        return str(Path(self._scratch.name) / "analytics.db")

    async def analytics(self, by: str) -> dict[str, Any]:
        """The figures of ``turnlog stats --by BY`` (plus ``--by day`` for the time charts)."""
        from turnlog.analytics import AnalyticsProjection

        grouping = _GROUPINGS.get(by)
        if grouping is None:
            raise BadRequest(f"analytics can be grouped by model, provider, verb, tool or day, not {by!r}")
        async with AnalyticsProjection(self.store, database=self.analytics_database()) as analytics:
            report = await analytics.update()
            result: dict[str, Any] = {"by": by, "position": report.to_position}
            if by == "tool":
                result["tools"] = [r.to_dict() for r in await analytics.tool_usage("tool")]
            elif by == "verb":
                result["runs"] = [r.to_dict() for r in await analytics.run_usage("verb")]
            else:
                result["usage"] = [r.to_dict() for r in await analytics.usage(grouping)]
                result["errors"] = [r.to_dict() for r in await analytics.error_rates(grouping)]
            result["days"] = [r.to_dict() for r in await analytics.usage("day")]
            result["tool_calls"] = [r.to_dict() for r in await analytics.tool_usage("tool")]
            if by in ("model", "provider", "verb"):
                result["series"] = await _series(analytics, by, [str(d["key"]) for d in result["days"]])
        return result

    # ----------------------------------------------------------------------------------- actions

    def require_writes(self) -> None:
        """Refuse an action when the app was started without ``--allow-writes``."""
        if not self.allow_writes:
            raise Forbidden("this action needs turnlog ui --allow-writes; the store is open read-only")

    async def fork(self, branch_id: str, at: int, name: str | None) -> str:
        """Fork ``branch_id`` after version ``at``; return the new branch id."""
        from turnlog.kernel import Branch

        self.require_writes()
        head = await self.head(branch_id)
        if not 1 <= at <= head:
            raise NotFound(f"branch {branch_id} has versions 1 to {head}; cannot fork at {at}")
        # The kernel writes the fork (Branch.fork), as it writes every branch stream.
        branch = await Branch.load(self.store, branch_id)
        return (await branch.fork(at, name=name or None)).id

    async def recover(self, persist_dir: str | None) -> RecoveryReport:
        """Close the runs a crash left open (``turnlog recover``)."""
        from turnlog.kernel import recover

        self.require_writes()
        return await recover(self.store, persist_dir)


SERIES_DAYS = 30
"""Days of the per-dimension time series (the latest ones)."""


_GROUPINGS: dict[str, Grouping] = {
    "model": "model",
    "provider": "provider",
    "verb": "verb",
    "tool": "tool",
    "day": "day",
}
"""What the analytics page can group by, as the analytics queries' own type."""


async def _series(analytics: Any, by: str, days: list[str]) -> dict[str, Any]:
    """Model calls per day and per ``by`` key: ``turnlog stats --by BY --since D --until D+1``."""
    from datetime import date, timedelta

    days = sorted(d for d in days if d and d != "None")[-SERIES_DAYS:]
    per_day = []
    for day in days:
        until = (date.fromisoformat(day) + timedelta(days=1)).isoformat()
        per_day.append({str(r.key): r for r in await analytics.usage(by, since=day, until=until)})
    keys = sorted({k for rows in per_day for k in rows})

    def column(pick: Any) -> dict[str, list[Any]]:
        return {k: [pick(rows[k]) if k in rows else None for rows in per_day] for k in keys}

    return {
        "days": days,
        "tokens": column(lambda r: r.input_tokens + r.output_tokens),
        "cost": column(lambda r: r.cost_usd),
        "p95": column(lambda r: r.latency_ms.p95),
        "error_rate": column(lambda r: r.error_rate),
    }


async def annotated_ids(store: EventStore, branch_id: str, at: int) -> set[str]:
    """Ids of the messages a ``message.annotated`` event of the branch touched by version ``at``."""
    return {
        str(e.data.get("message_id"))
        async for e in store.read_all(types=["message.annotated"], stream_prefix=f"branch-{branch_id}")
        if e.version <= at
    }
