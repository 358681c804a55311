"""A batch of facts: events decoded and turned into fact rows as they are read, written in one go.

The extraction side of the analytics projection. ``Batch.add_row`` decodes a row read
with ``read_rows`` the way ``read_all`` would (same checks, same errors) and ``Batch.add``
takes the facts of one decoded event; the projection writes a batch, its rollups and its
checkpoint in one transaction (``_database``). A batch knows nothing of the projection: it
is given the price table, the committed branch-to-session map and the store's upcasters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from orjson import JSONDecodeError
from orjson import loads as _loads

from turnlog.eventstore import RawEvent, RecordedEvent, StoredRow, Upcaster, Upcasters
from turnlog.projections import CATALOGUE, decode_event, visible_data

from ._facts import (
    FactEvent,
    When,
    model_call_fact,
    model_call_row,
    run_end_fact,
    run_end_row,
    run_start_fact,
    run_start_row,
    tool_call_fact,
)
from ._pricing import PriceTable
from ._tables import RELEVANT_TYPES

__all__ = ["Batch", "DecodedRow", "lifted"]


class Batch:
    """The facts of a run of events, taken as the events arrive and written in one transaction.

    Extraction is pure: it reads the events, the price table and the projection's committed
    branch-to-session map, and keeps the branches it learns in ``branches`` (newer than the
    map) until the batch commits. Run starts and ends are kept in log order, as the rows of
    ``run_start_fact`` and ``run_end_fact``, because an end may close a run started in an
    earlier batch (found in the database when the batch is written).
    """

    __slots__ = (
        "_lifts", "_message_schema", "_meta", "_meta_bytes", "_moment", "_prices", "_sessions",
        "_upcasters", "_us", "_versions", "_when", "branches", "events", "model_rows", "runs", "tool_rows",
    )  # fmt: skip

    def __init__(
        self,
        prices: PriceTable,
        sessions: Mapping[str, str | None],
        upcasters: Upcasters | None,
        events: Sequence[RecordedEvent] = (),
    ) -> None:
        """Start a batch.

        Args:
            prices: Prices the model calls.
            sessions: The committed branch-to-session map (read, never written: the branches
                this batch learns are kept in ``branches`` until it commits).
            upcasters: The store's upcasters (None or empty: none), applied by ``add_row``.
            events: Decoded events to take at once (``add``).
        """
        self._prices = prices
        self._sessions = sessions
        self.events = 0
        self.model_rows: list[tuple[Any, ...]] = []
        self.tool_rows: list[tuple[Any, ...]] = []
        self.runs: list[tuple[Any, ...]] = []
        self.branches: dict[str, str | None] = {}
        # None when the store has none: decode then skips the upcasting step entirely
        self._upcasters: Upcasters | None = upcasters or None
        self._versions = _versions()
        # Messages of this schema that are no tool call are skipped unparsed (see add_row);
        # with upcasters (which may rewrite a message) every message is parsed.
        self._message_schema = self._versions.get("message.added", -1) if self._upcasters is None else -1
        # The events of one run share their meta (branch and run ids), and a run's events
        # of the types read sit side by side in the log: the last meta parsed is reused.
        self._meta_bytes = b"{}"
        self._meta: dict[str, Any] = {}
        # The catalogue's upcasting steps from each older (type, schema) met, found once.
        self._lifts: dict[tuple[str, int], tuple[Upcaster, ...] | None] = {}
        # The events of one append share their time: decode it once per append.
        self._us = -1
        self._moment = _EPOCH
        self._when: When = ("", "")
        for event in events:
            self.add(event)

    def add_row(self, row: StoredRow) -> None:
        """Decode a stored row (``read_rows``) as ``read_all`` would, then take its facts (see ``add``).

        ``read_rows`` leaves the decoding to its caller; ``RawEvent.decode`` makes the checks
        of ``read_all`` (data and meta must be JSON objects, else ``CorruptEventError`` naming
        the event) and applies the store's upcasters, when it has any.
        """
        position, stream, version, kind, schema, data_bytes, meta_bytes, us = row
        if (
            kind == "message.added"
            and schema == self._message_schema
            and b"ActionResponse" not in data_bytes
            and data_bytes[:1] == b"{"
        ):
            # Most events read are messages that are no tool call (two in five): without the
            # word anywhere in its bytes, a message cannot be an ActionResponse (nor a
            # redacted one keep that kind), so it makes no fact and is not parsed at all.
            # Only the facts' payloads are checked: a malformed message of another kind
            # costs nothing here (read_all and verify still refuse it).
            self.events += 1
            return
        if self._upcasters is None:
            # The common case inline (no upcasters): the same parse and the same checks as
            # ``RawEvent.decode``, without building one and its two calls per event.
            # Anything it would reject goes to it, so its errors stay the only errors.
            data: Any
            meta: Any
            try:
                data = _loads(data_bytes)
                if meta_bytes == self._meta_bytes:
                    meta = self._meta  # read, never written, by the facts
                else:
                    meta = _loads(meta_bytes)
                    if meta.__class__ is dict:
                        self._meta_bytes, self._meta = meta_bytes, meta
            except (JSONDecodeError, TypeError):
                data = meta = None
            if data.__class__ is not dict or meta.__class__ is not dict:
                _raw(row).decode(None)  # raises CorruptEventError naming the event
        else:
            schema, data, meta = _raw(row).decode(self._upcasters)
        if len(data) == 1 and "turnlog_redacted" in data:
            data = visible_data(kind, data)
        current = self._versions.get(kind, schema)
        if schema != current:
            # An older payload is lifted here, before the event is built (once, not twice as
            # lifted would); without every step up, lifted decodes it or names the event.
            key = (kind, schema)
            steps = (
                self._lifts[key] if key in self._lifts else self._lifts.setdefault(key, _steps(kind, schema))
            )
            if steps is not None:
                for step in steps:
                    data = step(data)
                schema = current
        self.events += 1
        if kind == "message.added" and schema == current:
            # Most events read are messages that are no tool call: skip them here, as add
            # would, without building the event (two in five of the events read).
            message = data.get("message")
            if message.__class__ is dict and message.get("kind") != "ActionResponse":
                return
        if us != self._us:
            moment = _EPOCH + timedelta(microseconds=us)
            text = moment.isoformat(timespec="microseconds")  # as _facts._when formats it
            self._us, self._moment, self._when = us, moment, (text, text[:10])
        if schema == current:
            # The common shape of the facts read most, without an event object (see
            # _facts.model_call_row); any other payload takes the fact functions below.
            if kind == "model.called":
                fact = model_call_row(
                    position, stream, data, meta, self._when, self._moment, self._prices, self._session_of
                )
                if fact is not None:
                    self.model_rows.append(fact)
                    return
            elif kind == "run.started":
                fact = run_start_row(position, stream, data, meta, self._when, self._session_of)
                if fact is not None:
                    self.runs.append(fact)
                    return
            elif kind == "run.ended" or kind == "run.failed":
                fact = run_end_row(
                    position, stream, kind == "run.failed", data, meta, self._when, self._session_of
                )
                if fact is not None:
                    self.runs.append(fact)
                    return
        event = DecodedRow(stream, version, position, kind, schema, data, meta, self._moment)
        self._take(event if schema == current else lifted(event))

    def _session_of(self, branch: str | None) -> str | None:
        if branch is None:
            return None
        branches = self.branches
        if branch in branches:
            return branches[branch]
        return self._sessions.get(branch)

    def _known(self, branch: str) -> bool:
        return branch in self.branches or branch in self._sessions

    def add(self, event: FactEvent) -> None:
        """Take the facts of one event (of a type in ``RELEVANT_TYPES``)."""
        self.events += 1
        kind = event.type
        if len(event.data) == 1 and "turnlog_redacted" in event.data:
            view = visible_data(kind, event.data)
            event = DecodedRow(
                event.stream,
                event.version,
                event.position,
                kind,
                event.schema,
                view,
                event.meta,
                event.recorded_at,
            )
        if event.schema != self._versions.get(kind, event.schema):
            event = lifted(event)
        self._take(event)

    def _take(self, event: FactEvent) -> None:
        # The facts of an event whose payload is visible and current (see add).
        kind = event.type
        # By frequency: most events read are messages, and most messages are no tool call.
        if kind == "message.added":
            message = event.data.get("message")
            if message.__class__ is dict and message.get("kind") != "ActionResponse":
                return  # what tool_call_fact would say, without its checks of the rest
            row = tool_call_fact(event, self._session_of)
            if row is not None:
                self.tool_rows.append(row)
        elif kind == "model.called":
            self.model_rows.append(model_call_fact(event, self._prices, self._session_of))
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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def lifted(event: FactEvent) -> FactEvent:
    """``event`` with an older payload the store did not upcast lifted through the catalogue.

    The catalogue's upcasters are applied to the payload as a store opened with
    ``catalogue_upcasters()`` applies them, so a stored row and ``read_all`` give the same
    facts (and an old log costs about what a current one does: every ``model.called``,
    ``run.ended`` and ``run.failed`` written before schema 2 takes this path). Without a step
    up to the current schema, the payload is decoded by its schema class, which lifts it or
    names the event it cannot read.
    """
    schema = CATALOGUE.get(event.type)
    if schema is None or event.schema == schema.schema_version:
        return event
    steps = _steps(event.type, event.schema)
    data = event.data
    for step in steps or ():
        data = step(data)
    if steps is None:
        recorded = event if isinstance(event, RecordedEvent) else _as_recorded(event)
        data = decode_event(recorded).model_dump(mode="json")
    return DecodedRow(
        event.stream, event.version, event.position, event.type, schema.schema_version,
        data, event.meta, event.recorded_at,
    )  # fmt: skip


def _steps(kind: str, version: int) -> tuple[Upcaster, ...] | None:
    """The catalogue's upcasters that lift ``kind`` from ``version`` to its current schema, in order.

    None when a step is missing (or the version is newer than the catalogue's).
    """
    schema: Any = CATALOGUE.get(kind)
    steps = getattr(schema, "upcasters", None) or {}
    found = []
    while version < schema.schema_version:
        step = steps.get(version)
        if step is None:
            return None
        found.append(step)
        version += 1
    return tuple(found) if version == schema.schema_version else None


def _raw(row: StoredRow) -> RawEvent:
    # Rare (a store with upcasters, or a payload to reject): RawEvent.decode does it, and
    # names the event; the id and hashes are not read by it.
    position, stream, version, kind, schema, data, meta, us = row
    return RawEvent(position, "", stream, version, kind, schema, data, meta, us, "", "")


def _as_recorded(event: FactEvent) -> RecordedEvent:
    # Rare (a payload older than the catalogue's schema): decode_event reads a RecordedEvent,
    # and names the event by stream, version and position when it cannot decode it.
    return RecordedEvent(
        _NO_ID, event.stream, event.version, event.position, event.type, event.schema,
        event.data, event.meta, event.recorded_at, "", "",
    )  # fmt: skip


_NO_ID = UUID(int=0)


def _versions() -> dict[str, int]:
    """The catalogue's schema version of each type analytics reads, as registered now."""
    return {
        name: schema.schema_version for name in RELEVANT_TYPES if (schema := CATALOGUE.get(name)) is not None
    }


class DecodedRow:
    """A stored event that analytics decoded itself from a raw row: what the fact functions read.

    Why not the store's ``RecordedEvent``: a ``DecodedRow`` is made for most events a
    rebuild reads (hundreds of thousands) and dropped as soon as its facts are taken. A
    ``RecordedEvent`` needs the event id parsed into a ``UUID`` and its hashes, which no fact
    reads, and a frozen dataclass sets each field through ``object.__setattr__``: building
    one costs about 7 to 15 times as much as this slotted object (5-12 µs against 0.8 µs),
    which would add seconds to a rebuild of a million events. It carries exactly the
    fields of ``FactEvent``, which ``RecordedEvent`` also satisfies (``read_all`` and
    ``subscribe`` hand their events to the fact functions as they are). ``recorded_at`` is
    the same object for every event of one append.
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
