"""Check the events a reader is about to show, without walking the whole log.

``verify`` walks every chain; a reader (``show``, ``log``, ``tail``, the ui) shows a few
events and must not pay for the whole store, yet must not show an altered payload as if it
were the record. ``check_events`` proves each event it is given as far as those events go:
its stored bytes give its stored hash (so an edit of ``data`` or ``meta`` behind the
store's back is caught), and it links to its neighbours in its stream (its ``prev_hash`` is
the previous version's hash, the next version's ``prev_hash`` is its hash), so an edit that
also rewrote the hash breaks a link. A forger who rewrote the rest of a stream to its end is
left to ``verify``, which walks every chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, cast

from ._base import EventStore
from ._errors import CorruptEventError
from ._problem import Problem
from ._raw import RAW_PAGE, RawEvent
from ._records import RecordedEvent
from ._redaction import event_hash_matches

__all__ = ["check_events", "check_stream"]

_GAP = 64
"""Shown positions further apart than this are read by separate raw reads, so that a reader
of one branch among thousands never reads the events of the others in between."""


class _RawReader(Protocol):
    async def raw_events(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[RawEvent]: ...


async def check_stream(
    store: EventStore, stream: str, from_version: int = 1, to_version: int | None = None
) -> tuple[Problem, ...]:
    """``check_events`` over the versions ``from_version`` to ``to_version`` of ``stream``.

    An event that cannot even be decoded is a problem too (it is not raised).
    """
    events: list[RecordedEvent] = []
    try:
        async for event in store.read_stream(stream, from_version, to_version):
            events.append(event)
    except CorruptEventError as exc:
        # The reader fails on it too; here it is one more damaged event, and the events
        # after it are still checked.
        broken = exc.version if exc.version >= from_version else from_version
        rest = (
            await check_stream(store, stream, broken + 1, to_version)
            if to_version is None or broken < to_version
            else ()
        )
        problem = Problem(stream, broken, f"the stored event cannot be decoded: {exc}", exc.position)
        return (*await check_events(store, events), problem, *rest)
    return await check_events(store, events)


async def check_events(store: EventStore, events: Sequence[RecordedEvent]) -> tuple[Problem, ...]:
    """Problems of the given events as stored, each with its stream and version; empty when sound.

    Each event's stored bytes must give its stored hash (by the digest chain, the legacy
    chain, or a redaction marker's digest), and its hash must link to the stored neighbours
    of its stream. The cost is a few reads for the events given, not a walk of their streams.
    A store that cannot hand out its stored bytes (no ``"raw_copy"`` capability: the memory
    store) is checked by ``verify`` of the streams concerned instead.
    """
    if not events:
        return ()
    shown = {(e.stream, e.version): e for e in events}
    if "raw_copy" not in store.capabilities:
        return await _verified(store, shown)
    rows = await _raw_rows(cast(_RawReader, store), list(shown.values()))
    problems: list[Problem] = []
    for key, event in sorted(shown.items()):
        row = rows.get(key)
        if row is None:
            problems.append(Problem(*key, "the event is no longer stored where it was read", event.position))
            continue
        problems.extend(await _row_problems(store, row, rows))
    return tuple(problems)


async def _verified(store: EventStore, shown: dict[tuple[str, int], RecordedEvent]) -> tuple[Problem, ...]:
    problems: list[Problem] = []
    for stream in sorted({s for s, _ in shown}):
        report = await store.verify(stream, quick=True)
        problems.extend(p for p in report.problems if (p.stream, p.version) in shown)
    return tuple(problems)


async def _raw_rows(store: _RawReader, events: list[RecordedEvent]) -> dict[tuple[str, int], RawEvent]:
    """The stored rows of ``events``, read by clusters of nearby positions."""
    wanted = {(e.stream, e.version) for e in events}
    rows: dict[tuple[str, int], RawEvent] = {}
    events.sort(key=lambda e: e.position)
    cluster: list[RecordedEvent] = []
    for event in [*events, None]:
        if cluster and (event is None or event.position - cluster[-1].position > _GAP):
            after, last = cluster[0].position - 1, cluster[-1].position
            types = sorted({e.type for e in cluster})
            while True:
                page = await store.raw_events(after, RAW_PAGE, types=types, to_position=last)
                rows.update(((r.stream, r.version), r) for r in page if (r.stream, r.version) in wanted)
                if len(page) < RAW_PAGE:
                    break
                after = page[-1].position
            cluster = []
        if event is not None:
            cluster.append(event)
    return rows


async def _row_problems(
    store: EventStore, row: RawEvent, rows: dict[tuple[str, int], RawEvent]
) -> list[Problem]:
    found: list[Problem] = []

    def problem(what: str) -> None:
        found.append(Problem(row.stream, row.version, what, row.position))

    if not _hash_holds(row):
        problem("hash does not match the stored bytes (the event was altered)")
    before = rows.get((row.stream, row.version - 1))
    prev_hash = (
        before.hash if before is not None else await _neighbour(store, row.stream, row.version - 1, "hash")
    )
    if row.version > 1 and prev_hash is not None and prev_hash != row.prev_hash:
        problem("prev_hash does not match the hash of the previous version (broken chain)")
    if row.version == 1 and row.prev_hash != "":
        problem("the first version has a prev_hash (broken chain)")
    after = rows.get((row.stream, row.version + 1))
    next_prev = (
        after.prev_hash
        if after is not None
        else await _neighbour(store, row.stream, row.version + 1, "prev_hash")
    )
    if next_prev is not None and next_prev != row.hash:
        problem("the next version's prev_hash is not this event's hash (broken chain)")
    return found


def _hash_holds(row: RawEvent) -> bool:
    fields: tuple[Any, ...] = tuple(row)
    _, event_id, stream, version, type_, schema, data, meta, recorded_at_us, prev_hash, hash_ = fields
    try:
        return event_hash_matches(
            prev_hash,
            str(event_id),
            stream,
            version,
            type_,
            schema,
            bytes(data),
            bytes(meta),
            recorded_at_us,
            hash_,
        )
    except (TypeError, ValueError):  # a row of the wrong types: damaged, as verify says
        return False


async def _neighbour(store: EventStore, stream: str, version: int, field: str) -> str | None:
    """The stored ``hash`` or ``prev_hash`` of one version (None when there is none to compare)."""
    if version < 1:
        return None
    try:
        async for event in store.read_stream(stream, version, version):
            return cast(str, getattr(event, field))
    except CorruptEventError:  # reported on its own when it is shown; here it proves nothing
        return None
    return None
