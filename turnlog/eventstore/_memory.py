"""The in-memory backend (``memory://``): pure Python, for tests and throw-away sessions.

It keeps the canonical bytes and hash chain exactly like the durable backends, so it passes
the same conformance suite; it lives as long as the object and is not shared between
processes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import anyio
import anyio.lowlevel

from ._base import EventStore
from ._chain import ChainChecker
from ._decoding import decode_event
from ._encoder import check_encoded
from ._encoding import chain_hashes
from ._errors import ConcurrencyError, RedactionError, StoreError, TrackingError
from ._follow import follow_log
from ._ids import uuid7
from ._raw import RAW_PAGE, RawEvent, StoredRow, check_raw_range, raw_event
from ._records import (
    ANY,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    Tracking,
    VerifyReport,
)
from ._redaction import (
    REDACTIONS_STREAM,
    Plan,
    Redaction,
    RedactionRecords,
    RedactionResult,
    plan_redaction,
)
from ._results import append_result, match_resent
from ._snapshots import bind_snapshot, first_intact, prepare_snapshot
from ._upcasting import Upcasters
from ._upgrade import UPGRADES_STREAM, plan_upgrade
from ._validation import (
    DEFAULT_MAX_EVENT_BYTES,
    PreparedAppend,
    check_expected_version,
    check_read_range,
    check_stream_name,
    check_stream_prefix,
    check_tracking,
    check_type_filter,
    prepare_batch,
    prepare_events,
    version_matches,
)

__all__ = ["MemoryEventStore"]

_PAGE = 500


class MemoryEventStore(EventStore):
    """An event store held in process memory.

    Example:
        >>> import anyio
        >>> from turnlog.eventstore import NewEvent
        >>> async def main():
        ...     async with MemoryEventStore() as store:
        ...         await store.append("branch-1", [NewEvent("message.added", {"text": "hi"})])
        ...         return await store.head()
        >>> anyio.run(main)
        1
    """

    capabilities: frozenset[str] = frozenset({"gapless_positions", "redact", "tracking"})

    def __init__(
        self, *, upcasters: Upcasters | None = None, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        super().__init__(upcasters=upcasters, max_event_bytes=max_event_bytes)
        self.url = "memory://"
        self._store_id = str(uuid7())
        self._rows: list[RawEvent] = []
        self._streams: dict[str, list[int]] = {}
        self._ids: dict[str, int] = {}
        self._snapshots: dict[tuple[str, str, int], tuple[int, bytes, bytes, int]] = {}
        self._tracking: dict[str, int] = {}
        self._wake: anyio.Event | None = None
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    # ------------------------------------------------------------------ appends

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        self._check_open()
        name, prepared = prepare_events(stream, events, self.max_event_bytes)
        expected = check_expected_version(name, expected_version)
        result = self._write([PreparedAppend(name, prepared, expected)])[0]
        await anyio.lowlevel.checkpoint()
        return result

    async def append_encoded(
        self, stream: str, events: Sequence[EncodedEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        self._check_open()
        result = self._write([check_encoded(stream, events, expected_version, self.max_event_bytes)])[0]
        await anyio.lowlevel.checkpoint()
        return result

    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        self._check_open()
        results = self._write(prepare_batch(entries, self.max_event_bytes))
        await anyio.lowlevel.checkpoint()
        return results

    def _write(self, entries: list[PreparedAppend], tracking: Tracking | None = None) -> list[AppendResult]:
        # Everything is computed before the first mutation, so a failure stores nothing.
        resent = self._resent(entries)
        if resent is not None:
            return resent
        if tracking is not None:
            self._check_tracking(tracking)
        now = time.time_ns() // 1000
        position = len(self._rows)
        heads: dict[str, tuple[int, str]] = {}
        new_rows: list[RawEvent] = []
        results: list[AppendResult] = []
        for entry in entries:
            head = heads.get(entry.stream)
            if head is None:
                indexes = self._streams.get(entry.stream)
                last = self._rows[indexes[-1] - 1] if indexes else None
                head = (last.version, last.hash) if last is not None else (0, "")
            version, prev = head
            if not version_matches(entry.expected, version):
                raise ConcurrencyError(entry.stream, entry.expected, version)
            stream = entry.stream
            start = len(new_rows)
            for ev, digest in zip(
                entry.events, chain_hashes(stream, version, prev, entry.events, now), strict=True
            ):
                version += 1
                position += 1
                new_rows.append(
                    raw_event(
                        (
                            position,
                            ev.id,
                            stream,
                            version,
                            ev.type,
                            ev.schema,
                            ev.data,
                            ev.meta,
                            now,
                            prev,
                            digest,
                        )
                    )
                )
                prev = digest
            heads[entry.stream] = (version, prev)
            results.append(append_result(new_rows[start:], version, self.upcasters))
        if tracking is not None:
            self._tracking[tracking.consumer] = tracking.position
        for row in new_rows:
            self._rows.append(row)
            self._streams.setdefault(row.stream, []).append(row.position)
            self._ids[row.id] = row.position
        self._notify()
        return results

    def _check_tracking(self, tracking: Tracking) -> None:
        recorded = self._tracking.get(tracking.consumer)
        if recorded is not None and tracking.position <= recorded:
            raise TrackingError(tracking.consumer, tracking.position, recorded)

    # ------------------------------------------------------------------ tracking (capability "tracking")

    async def save_tracking(self, consumer: str, position: int) -> None:
        self._check_open()
        tracking = check_tracking(Tracking(consumer, position))
        self._check_tracking(tracking)
        self._tracking[consumer] = position
        await anyio.lowlevel.checkpoint()

    async def tracking_position(self, consumer: str) -> int | None:
        self._check_open()
        check_tracking(Tracking(consumer, 0))
        return self._tracking.get(consumer)

    async def append_tracked(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]], tracking: Tracking
    ) -> list[AppendResult]:
        self._check_open()
        prepared = prepare_batch(entries, self.max_event_bytes)
        results = self._write(prepared, check_tracking(tracking))
        await anyio.lowlevel.checkpoint()
        return results

    def _resent(self, entries: list[PreparedAppend]) -> list[AppendResult] | None:
        stored: dict[str, tuple[Any, ...]] = {}
        for entry in entries:
            for ev in entry.events:
                position = self._ids.get(ev.id)
                if position is not None:
                    row = self._rows[position - 1]
                    stored[ev.id] = (
                        row.position,
                        row.stream,
                        row.version,
                        row.type,
                        row.schema,
                        row.data,
                        row.meta,
                        row.recorded_at_us,
                        row.prev_hash,
                        row.hash,
                    )
        return match_resent(entries, stored, self.upcasters) if stored else None

    def _notify(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    # ------------------------------------------------------------------ reads

    async def _emit(self, rows: Iterable[RawEvent], limit: int | None) -> AsyncIterator[RecordedEvent]:
        count = 0
        for row in rows:
            if limit is not None and count >= limit:
                return
            self._check_open()
            yield decode_event(self.upcasters, row)
            count += 1
            if count % _PAGE == 0:
                await anyio.lowlevel.checkpoint()

    async def read_stream(
        self,
        stream: str,
        from_version: int = 1,
        to_version: int | None = None,
        *,
        backwards: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_stream_name(stream)
        check_read_range("from_version", from_version, "to_version", to_version, limit)
        positions = self._streams.get(stream, [])
        # Versions are 1-based and contiguous, so a version range is a slice.
        low = max(from_version, 1) - 1
        high = len(positions) if to_version is None else min(to_version, len(positions))
        chosen = positions[low:high]
        if backwards:
            chosen = chosen[::-1]
        rows = (self._rows[p - 1] for p in chosen)
        async for event in self._emit(rows, limit):
            yield event

    async def read_all(
        self,
        from_position: int = 1,
        to_position: int | None = None,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
        limit: int | None = None,
        backwards: bool = False,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_read_range("from_position", from_position, "to_position", to_position, limit)
        check_stream_prefix(stream_prefix)
        listed = check_type_filter(types)
        wanted = None if listed is None else set(listed)
        head = len(self._rows)
        low = max(from_position, 1)
        high = head if to_position is None else min(to_position, head)
        indexes = range(high, low - 1, -1) if backwards else range(low, high + 1)
        rows = (
            row
            for row in (self._rows[p - 1] for p in indexes)
            if (wanted is None or row.type in wanted)
            and (not stream_prefix or row.stream.startswith(stream_prefix))
        )
        async for event in self._emit(rows, limit):
            yield event

    async def read_rows(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[StoredRow]:
        self._check_open()
        check_raw_range(after_position, to_position, limit)
        listed = check_type_filter(types)
        wanted = None if listed is None else set(listed)
        high = len(self._rows) if to_position is None else min(to_position, len(self._rows))
        out: list[StoredRow] = []
        rows = self._rows
        for index in range(after_position, high):  # position p is rows[p - 1]
            row = rows[index]
            if len(out) >= limit:
                break
            if wanted is None or row.type in wanted:
                out.append(
                    (row.position, row.stream, row.version, row.type, row.schema, row.data, row.meta,
                     row.recorded_at_us)
                )  # fmt: skip
        await anyio.lowlevel.checkpoint()
        return out

    async def stream_version(self, stream: str) -> int:
        self._check_open()
        check_stream_name(stream)
        return len(self._streams.get(stream, ()))

    async def head(self) -> int:
        self._check_open()
        return len(self._rows)

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        self._check_open()
        check_stream_prefix(prefix)
        return sorted(
            (name, len(positions))
            for name, positions in self._streams.items()
            if not prefix or name.startswith(prefix)
        )

    async def subscribe(
        self,
        from_position: int = 1,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        self._check_open()
        check_read_range("from_position", from_position, "to_position", None, None)
        wanted = None if types is None else list(types)
        follow = follow_log(
            self, from_position, types=wanted, stream_prefix=stream_prefix, next_wake=self._next_wake
        )
        async with aclosing(follow) as events:
            async for event in events:
                yield event

    def _next_wake(self) -> anyio.Event:
        """The event the next append sets."""
        if self._wake is None:
            self._wake = anyio.Event()
        return self._wake

    # ------------------------------------------------------------------ verify

    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        self._check_open()
        if stream is not None:
            check_stream_name(stream)
        records = RedactionRecords.from_rows(
            (self._rows[p - 1].version, self._rows[p - 1].data, self._rows[p - 1].id)
            for p in self._streams.get(REDACTIONS_STREAM, ())
        )
        checker = ChainChecker(records)
        names = sorted(self._streams) if stream is None else [stream] if stream in self._streams else []
        for name in names:
            for position in self._streams[name]:
                checker.add_row(self._rows[position - 1])
            await anyio.lowlevel.checkpoint()
        for row in self._snapshot_rows(stream, None, None):
            checker.add_snapshot(row, row[7])
        checker.finish(stream)
        return checker.report()

    # ------------------------------------------------------------------ redaction

    async def upgrade_chain(self, *, actor: str = "") -> list[str]:
        self._check_open()
        rows = [self._rows[p - 1] for name in sorted(self._streams) for p in self._streams[name]]
        plan = plan_upgrade(rows, actor)
        if plan.streams:
            self._write(
                [
                    PreparedAppend(
                        UPGRADES_STREAM, prepare_events(UPGRADES_STREAM, plan.records, 2**62)[1], ANY
                    )
                ]
            )
            for position, prev, digest in plan.updates:
                self._rows[position - 1] = replace(self._rows[position - 1], prev_hash=prev, hash=digest)
            for key in [key for key in self._snapshots if key[0] in plan.streams]:
                del self._snapshots[key]
        await anyio.lowlevel.checkpoint()
        return plan.streams

    async def _redact(self, targets: list[Redaction]) -> list[RedactionResult]:
        self._check_open()
        plans: list[tuple[int, Plan | RedactionResult]] = []
        for target in targets:
            positions = self._streams.get(target.stream, ())
            if not 1 <= target.version <= len(positions):
                raise RedactionError(target.stream, target.version, "no such event")
            position = positions[target.version - 1]
            plans.append((position, plan_redaction(target, self._rows[position - 1])))
        records = [plan.record for _, plan in plans if isinstance(plan, Plan)]
        if records:
            self._write(
                [PreparedAppend(REDACTIONS_STREAM, prepare_events(REDACTIONS_STREAM, records, 2**62)[1], ANY)]
            )
            for position, plan in plans:
                if isinstance(plan, Plan):
                    row = self._rows[position - 1]
                    self._rows[position - 1] = replace(row, data=plan.data, meta=plan.meta)
            for name in {plan.target.stream for _, plan in plans if isinstance(plan, Plan)}:
                for key in [key for key in self._snapshots if key[0] == name]:
                    del self._snapshots[key]
        await anyio.lowlevel.checkpoint()
        return [plan.result() if isinstance(plan, Plan) else plan for _, plan in plans]

    def _event_hash(self, stream: str, version: int) -> str | None:
        positions = self._streams.get(stream, ())
        if 1 <= version <= len(positions):
            return self._rows[positions[version - 1] - 1].hash
        return None

    def _snapshot_rows(
        self, stream: str | None, at_or_before: int | None, type: str | None
    ) -> list[tuple[Any, ...]]:
        """Stored snapshots with the log's hash at their version, newest first (as SQL orders them)."""
        rows = [
            (name, stype, version, schema, data, meta, recorded_at, self._event_hash(name, version))
            for (name, stype, version), (schema, data, meta, recorded_at) in self._snapshots.items()
            if (stream is None or name == stream)
            and (type is None or stype == type)
            and (at_or_before is None or version <= at_or_before)
        ]
        rows.sort(key=lambda row: (row[2], row[6]), reverse=True)
        return rows

    # ------------------------------------------------------------------ snapshots

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        self._check_open()
        snap = prepare_snapshot(snapshot, self.max_event_bytes)
        self._snapshots[(snap.stream, snap.type, snap.version)] = (
            snap.schema,
            snap.data,
            bind_snapshot(snap, self._event_hash(snap.stream, snap.version)),
            time.time_ns() // 1000,
        )
        await anyio.lowlevel.checkpoint()

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        self._check_open()
        check_stream_name(stream)
        return first_intact(self.upcasters, self._snapshot_rows(stream, at_or_before_version, type))

    async def delete_snapshots(self, stream: str | None = None) -> int:
        self._check_open()
        if stream is not None:
            check_stream_name(stream)
        doomed = [key for key in self._snapshots if stream is None or key[0] == stream]
        for key in doomed:
            del self._snapshots[key]
        return len(doomed)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._notify()

    def __repr__(self) -> str:
        return f"MemoryEventStore({len(self._rows)} events)"
