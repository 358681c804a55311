"""A batch of facts: events decoded and turned into fact rows as they are read, written in one go.

The extraction side of the analytics projection. ``Batch.add_stored`` decodes a row read
with ``raw_events`` the way ``read_all`` would (same checks, same errors) and ``Batch.add``
takes the facts of one decoded event; the projection writes a batch, its rollups and its
checkpoint in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from turnlog.eventstore import RawEvent, RecordedEvent, Upcasters
from turnlog.projections._redacted import visible_data

from ._facts import FactEvent, RunEnd, RunStart, model_call_fact, run_end_fact, run_start_fact, tool_call_fact

if TYPE_CHECKING:
    from ._projection import AnalyticsProjection

__all__ = ["Batch", "StoredEvent"]


class Batch:
    """The facts of a run of events, taken as the events arrive and written in one transaction.

    Extraction is pure: it reads the events, the price table and the projection's committed
    branch-to-session map, and keeps the branches it learns in ``branches`` (newer than the
    map) until the batch commits. Run starts and ends are kept in log order, as ``RunStart``
    and ``RunEnd``, because an end may close a run started in an earlier batch (found in the
    database when the batch is written).
    """

    __slots__ = (
        "_moment", "_owner", "_upcasters", "_us", "_versions",
        "branches", "events", "model_rows", "runs", "tool_rows",
    )  # fmt: skip

    def __init__(self, owner: AnalyticsProjection, events: Sequence[RecordedEvent] = ()) -> None:
        self._owner = owner
        self.events = 0
        self.model_rows: list[tuple[Any, ...]] = []
        self.tool_rows: list[tuple[Any, ...]] = []
        self.runs: list[RunStart | RunEnd] = []
        self.branches: dict[str, str | None] = {}
        # None when the store has none: decode then skips the upcasting step entirely
        self._upcasters: Upcasters | None = owner.store.upcasters or None
        self._versions = owner._versions
        # The events of one append share their time: decode it once per append.
        self._us = -1
        self._moment = _EPOCH
        for event in events:
            self.add(event)

    def add_stored(self, stored: RawEvent) -> None:
        """Decode a stored event as ``read_all`` would, then take its facts (see ``add``).

        ``raw_events`` leaves the decoding to its caller; ``RawEvent.decode`` makes the checks
        of ``read_all`` (data and meta must be JSON objects, else ``CorruptEventError`` naming
        the event) and applies the store's upcasters, when it has any. The event id is not
        parsed (no fact uses it; ``verify`` checks it).
        """
        schema, data, meta = stored.decode(self._upcasters)
        kind = stored.type
        if len(data) == 1 and "turnlog_redacted" in data:
            data = visible_data(kind, data)
        if kind == "message.added" and schema == self._versions.get(kind, schema):
            # Most events read are messages that are no tool call: skip them here, as add
            # would, without building the event (two in five of the events read).
            message = data.get("message")
            if message.__class__ is dict and message.get("kind") != "ActionResponse":
                self.events += 1
                return
        us = stored.recorded_at_us
        if us != self._us:
            self._us, self._moment = us, _EPOCH + timedelta(microseconds=us)
        self.add(
            StoredEvent(
                stored.stream, stored.version, stored.position, kind, schema, data, meta, self._moment
            )
        )

    def _session_of(self, branch: str | None) -> str | None:
        if branch is None:
            return None
        session = self.branches.get(branch, _UNSEEN)
        return self._owner._sessions.get(branch) if session is _UNSEEN else session

    def _known(self, branch: str) -> bool:
        return branch in self.branches or branch in self._owner._sessions

    def add(self, event: FactEvent) -> None:
        """Take the facts of one event (of a type in ``RELEVANT_TYPES``)."""
        self.events += 1
        kind = event.type
        owner = self._owner
        if len(event.data) == 1 and "turnlog_redacted" in event.data:
            view = visible_data(kind, event.data)
            event = StoredEvent(
                event.stream,
                event.version,
                event.position,
                kind,
                event.schema,
                view,
                event.meta,
                event.recorded_at,
            )
        if event.schema != owner._versions.get(kind, event.schema):
            event = owner._lifted(event)
        # By frequency: most events read are messages, and most messages are no tool call.
        if kind == "message.added":
            message = event.data.get("message")
            if message.__class__ is dict and message.get("kind") != "ActionResponse":
                return  # what tool_call_fact would say, without its checks of the rest
            row = tool_call_fact(event, self._session_of)
            if row is not None:
                self.tool_rows.append(row)
        elif kind == "model.called":
            self.model_rows.append(model_call_fact(event, owner.prices, self._session_of))
        elif kind == "run.started":
            self.runs.append(run_start_fact(event, self._session_of))
        elif kind in ("run.ended", "run.failed"):
            self.runs.append(run_end_fact(event, self._session_of))
        else:
            self._note_branch(event)

    def _note_branch(self, event: FactEvent) -> None:
        data = event.data
        branch = data.get("branch_id")
        if not isinstance(branch, str):
            return
        if event.type == "branch.created":
            session = data.get("session_id") or event.meta.get("session_id")
        elif event.type == "branch.forked":
            session = event.meta.get("session_id") or self._session_of(data.get("parent_branch_id") or "")
        else:  # branch.included, on session-<id>
            session = event.meta.get("session_id")
            if session is None and event.stream.startswith("session-"):
                session = event.stream[8:]
        if session is None and self._known(branch):
            return
        self.branches[branch] = session


_UNSEEN = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class StoredEvent:
    """An event the projection decoded itself from a stored row: what the fact functions read.

    A plain slotted object, not a ``RecordedEvent``: it is made once per event read and
    dropped as soon as its facts are taken, and a frozen dataclass costs several times as
    much to build. ``recorded_at`` is the same object for every event of one append.
    """

    __slots__ = ("data", "meta", "position", "recorded_at", "schema", "stream", "type", "version")

    def __init__(
        self,
        stream: str,
        version: int,
        position: int,
        type: str,
        schema: int,
        data: dict[str, Any],
        meta: dict[str, Any],
        recorded_at: datetime,
    ) -> None:
        self.stream = stream
        self.version = version
        self.position = position
        self.type = type
        self.schema = schema
        self.data = data
        self.meta = meta
        self.recorded_at = recorded_at
