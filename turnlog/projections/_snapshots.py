"""Snapshots of branch state: delta-encoded, versioned, and never needed for a correct result.

A ``branch_state`` snapshot at version v (the head) holds the scalars of the state in full
(system, provider sessions, counters, view bounds) and only what changed since the previous
snapshot of the same stream (``base_version``):

- the messages recorded since then, in extra records ``branch_state.part<k>`` (so a head stays
  small however many messages the delta has); loading walks the chain back to the start of the
  view, so a branch of a million messages costs one message list in snapshots, not one per
  snapshot;
- the runs, action links and per-message overrides that changed since then (``maps: delta``),
  or all of them (``maps: full``, a keyframe) when ``SnapshotPolicy.keyframe_every`` heads
  have passed since the last keyframe and the deltas since hold as many entries as it does,
  when there is no base, or when the events in between hold a type whose effect on them is
  not known. Loading merges the heads back to the keyframe. A branch with a hundred thousand
  runs therefore does not write them all again every thousand events, nor every
  ``keyframe_every`` heads: its keyframes cost about what its deltas cost.

A head is a ``SnapshotHead`` (``_snapshot_head``); this module writes and reads chains of them
and never touches a state's storage except through the snapshot support of ``BranchState``.

A chain with a missing, foreign or outdated link is not used: ``rebuild`` folds from the
events instead, with the same result. The store itself never returns a record whose digest
does not match its bytes or that does not stand on the log's event at its version (an
edited or transplanted snapshot): to this module such a record is simply missing. Records of schema 1 (every head a keyframe, messages
partly in the head) are still read.

Snapshot meta records ``projection_version``; a snapshot written by another projection code
version is ignored (and replaced by the next snapshot written).

Why one module of about 580 lines: writing a chain and reading it back are two halves of one
format (what a delta holds is decided on write and undone on read); the head's model lives
apart in ``_snapshot_head``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson
from pydantic import ValidationError

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore, NewSnapshot, RecordedEvent, Snapshot

from ._catalogue import CATALOGUE
from ._decode import decode_messages
from ._errors import ProjectionError
from ._fold import gc_paused
from ._head_read import head_and_runs, link_of
from ._messages import AnyMessage, System
from ._runs import Deferred, RunTable
from ._snapshot_head import READABLE_SCHEMAS, HeadLink, HeadMaps, HeadMapsMemo, SnapshotHead
from ._state import BranchState, RunInfo

__all__ = [
    "PROJECTION_VERSION",
    "SNAPSHOT_TYPE",
    "Changes",
    "SnapshotPolicy",
    "changes_in",
    "delta_changes",
    "load_snapshot_state",
    "maybe_snapshot",
    "snapshot_records",
]

PROJECTION_VERSION = 2
"""Version of the fold code; bump it when a rule changes so old snapshots are ignored.

2: a fork no longer inherits the runs still open at its fork point.
"""

SNAPSHOT_TYPE = "branch_state"
"""The snapshot type of branch states."""

_MAX_DELTAS = 4096
"""A chain of more delta heads than this is taken as broken (it is never written)."""
_PART_BYTES = 4 * 1024 * 1024  # keeps every record far below the store's size limit


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When ``maybe_snapshot`` writes a snapshot.

    Attributes:
        every: Write when the state is at least this many versions past the last snapshot.
        at_run_end: Also write at the end of every run (``run_ended=True``), whatever ``every``
            says, so a restart after a run never folds that run again.
        keyframe_every: Write the runs, action links and overrides in full in one head of
            this many (a keyframe) and only what changed in the others; 1 writes them in full
            every time. Past this many heads (2 or more), the next keyframe waits until the deltas since
            the last one hold as many entries as it holds (so that keyframes do not copy a
            long branch's whole runs table over and over). A load merges the heads back to
            the keyframe.
    """

    every: int = 1000
    at_run_end: bool = True
    keyframe_every: int = 16

    def __post_init__(self) -> None:
        if self.every < 1:
            raise UsageError(f"SnapshotPolicy.every must be >= 1, got {self.every}")
        if not 1 <= self.keyframe_every <= _MAX_DELTAS:
            raise UsageError(
                f"SnapshotPolicy.keyframe_every must be in 1..{_MAX_DELTAS}, got {self.keyframe_every}"
            )


def _usable(snap: Snapshot | None) -> bool:
    return (
        snap is not None
        and snap.type == SNAPSHOT_TYPE
        and snap.schema in READABLE_SCHEMAS
        and snap.meta.get("projection_version") == PROJECTION_VERSION
    )


class _Head:
    """A usable head record: its chain fields (``link``) at once, the whole head when asked."""

    __slots__ = ("_head", "link", "snap")

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.link = link_of(snap.data)
        self._head: tuple[SnapshotHead, list[RunInfo | Deferred[RunInfo]]] | None = None

    @property
    def head(self) -> SnapshotHead:
        """The validated head, but for its runs (validated once, on first use)."""
        return self.head_and_runs[0]

    @property
    def head_and_runs(self) -> tuple[SnapshotHead, list[RunInfo | Deferred[RunInfo]]]:
        """The head and its runs, each left as stored until used (see ``head_and_runs``)."""
        if self._head is None:
            where = f"snapshot of stream {self.snap.stream!r} at version {self.snap.version}"
            self._head = head_and_runs(self.snap.data, where)
        return self._head


def _link_or_none(snap: Snapshot | None) -> HeadLink | None:
    """The chain fields of a usable head written before (None: not usable, or they do not validate).

    Only used to decide what the next snapshot holds: a head that does not validate is not a base.
    """
    if snap is None or not _usable(snap):
        return None
    try:
        return link_of(snap.data)
    except ValidationError:
        return None


async def maybe_snapshot(
    store: EventStore,
    state: BranchState,
    policy: SnapshotPolicy | None = None,
    *,
    run_ended: bool = False,
    events: Sequence[RecordedEvent] = (),
) -> bool:
    """Write a snapshot of ``state`` when ``policy`` says one is due; return whether it did.

    Call it after folding new events (the kernel does after each command, with
    ``run_ended=True`` after a run's terminal event). It reads the newest snapshot of the
    stream to decide, and writes only the messages recorded since that one.

    ``events`` are events of the state's stream the caller holds already (the kernel passes
    those it appended since its last snapshot): when they hold every version after the last
    snapshot up to the state's, what changed is taken from them; otherwise those events are
    read from the store. Either way the snapshot written is the same.
    """
    policy = policy or SnapshotPolicy()
    if state.version < 1:
        return False
    stream = f"branch-{state.branch_id}"
    prev = await store.load_snapshot(stream, state.version, type=SNAPSHOT_TYPE)
    usable = _usable(prev)
    last = prev.version if prev is not None and usable else 0
    if last >= state.version:
        return False
    due = state.version - last >= policy.every or (run_ended and policy.at_run_end)
    if not due:
        return False
    base = prev if usable else None
    changed = None
    base_head = _link_or_none(base)
    if (
        base is not None
        and base_head is not None
        and base_head.extends_to_delta(policy.keyframe_every, _MAX_DELTAS)
    ):
        since = [e for e in events if e.stream == stream and base.version < e.version <= state.version]
        if [e.version for e in since] != list(range(base.version + 1, state.version + 1)):
            since = [e async for e in store.read_stream(stream, base.version + 1, state.version)]
        changed = delta_changes(base, state, since, policy.keyframe_every)
    # extra parts first, the head last: a head is only ever visible with all its parts
    for record in snapshot_records(state, base, changed):
        await store.save_snapshot(record)
    return True


@dataclass(frozen=True, slots=True)
class Changes:
    """What events changed in the maps of a state: run ids, linked request ids, override slots."""

    runs: frozenset[str]
    links: frozenset[str]
    slots: frozenset[int]


_NO_MAP_CHANGE = frozenset({"messages.cleared", "provider.session_bound", "model.called", "branch.user_set"})
_RUN_TYPES = frozenset({"run.started", "run.ended", "run.failed"})


def changes_in(events: Sequence[RecordedEvent], state: BranchState) -> Changes | None:
    """The keys of ``state``'s runs, links and overrides that ``events`` may have changed.

    ``events`` are events of the state's stream that its fold included. None when one of them
    has a type whose effect on those maps is not known (an extra fold rule may change anything):
    the caller then writes them in full.
    """
    runs: set[str] = set()
    links: set[str] = set()
    ids: set[str] = set()
    for event in events:
        kind, data = event.type, event.data
        schema = CATALOGUE.get(kind)
        if schema is None or event.schema != schema.schema_version:
            return None  # an extra type, or an older payload shape: write the maps in full
        if kind in _RUN_TYPES:
            runs.add(str(data.get("run_id")))
        elif kind == "message.added":
            message = data.get("message")
            if not isinstance(message, dict):
                return None
            ids.add(str(message.get("id")))
            content = message.get("content")
            request = content.get("action_request_id") if isinstance(content, dict) else None
            if message.get("kind") == "ActionResponse" and request is not None:
                links.add(str(request))
                ids.add(str(request))
        elif kind == "message.annotated":
            ids.add(str(data.get("message_id")))
        elif kind not in _NO_MAP_CHANGE:
            return None
    return Changes(frozenset(runs), frozenset(links), frozenset(state.overridden_slots(ids)))


def delta_changes(
    base: Snapshot | None, state: BranchState, events: Sequence[RecordedEvent], keyframe_every: int
) -> Changes | None:
    """What a head of ``state`` based on ``base`` may store as a delta; None: store in full.

    ``events`` must hold the state's events after ``base.version`` (extra ones are ignored).
    None when there is no base, when the base's keyframe is ``keyframe_every - 1`` deltas
    back and the deltas since hold as many runs, links and overrides as it does, when an event is missing, or when ``changes_in`` says None.
    """
    head = _link_or_none(base)
    if (
        base is None
        or head is None
        or base.version >= state.version
        or not head.extends_to_delta(keyframe_every, _MAX_DELTAS)
    ):
        return None
    since = [e for e in events if base.version < e.version <= state.version]
    if len(since) != state.version - base.version:
        return None
    return changes_in(since, state)


def _split(messages: list[Any]) -> list[list[Any]]:
    parts: list[list[Any]] = [[]]
    size = 0
    for m in messages:
        weight = len(orjson.dumps(m)) if m is not None else 4
        if size + weight > _PART_BYTES and parts[-1]:
            parts.append([])
            size = 0
        parts[-1].append(m)
        size += weight
    return parts


def snapshot_records(
    state: BranchState, base: Snapshot | None = None, changed: Changes | None = None
) -> list[NewSnapshot]:
    """The snapshot records of ``state``, holding only the messages recorded after ``base``.

    With ``changed`` (what the events since ``base`` changed, see ``changes_in``), the runs,
    links and overrides are written as a delta against ``base``; without, in full.

    The last record is the head (type ``branch_state``); the ones before it hold the messages
    (type ``branch_state.part<k>``, same version).
    """
    start, n = state.slot_bounds()
    prev = _link_or_none(base) if base is not None and base.version < state.version else None
    if prev is None or not 0 <= prev.n <= n:
        prev, changed = None, None
    base_n = prev.n if prev is not None else 0
    overrides = state.overrides()
    if changed is None:
        runs = list(state.runs.values())
        links = dict(state.action_links)
        over = list(overrides.items())
    else:
        table = state.runs
        if isinstance(table, RunTable):
            runs = table.values_of(changed.runs)
        else:
            runs = [r for r in table.values() if r.run_id in changed.runs]
        links = {k: state.action_links[k] for k in changed.links if k in state.action_links}
        over = [(slot, overrides[slot]) for slot in sorted(changed.slots) if slot in overrides]
    entries = len(runs) + len(links) + len(over)
    slots = state.recorded_slots(base_n)
    [last] = state.recorded_slots(n - 1) if start < n else [None]
    # slots before the view's start are never shown again: they are stored as null
    messages = [m.to_dict() if m is not None else None for m in slots]
    parts = _split(messages) if messages else []
    # built without validation: every value comes from a state the fold made (validated when
    # its events were read), and a head of thousands of runs would be validated only to be dumped
    head = SnapshotHead.model_construct(
        branch_id=state.branch_id,
        name=state.name,
        user=state.user,
        session_id=state.session_id,
        system=state.system.to_dict() if state.system is not None else None,
        chat_model=dict(state.chat_model) if state.chat_model is not None else None,
        parse_model=dict(state.parse_model) if state.parse_model is not None else None,
        metadata=dict(state.metadata),
        runs=runs,
        provider_sessions=[
            (p, m, s, state.provider_cwds[(p, m)]) if (p, m) in state.provider_cwds else (p, m, s)
            for (p, m), s in state.provider_sessions.items()
        ],
        action_links=links,
        forked_from=state.forked_from,
        version=state.version,
        position=state.position,
        created_at=state.created_at,
        updated_at=state.updated_at,
        model_calls=state.model_calls,
        start=start,
        n=n,
        over=[(slot, msg.to_dict()) for slot, msg in over],
        maps="full" if changed is None else "delta",
        depth=0 if changed is None or prev is None else prev.chain_depth + 1,
        keyframe_entries=entries if changed is None or prev is None else prev.keyframe_entries,
        delta_entries=0 if changed is None or prev is None else prev.delta_entries + entries,
        base_version=base.version if prev is not None and base is not None else None,
        base_n=base_n,
        last_id=last.id if last is not None else None,
        # the messages live in the parts, so that a head stays small
        messages=[],
        parts=len(parts) + 1,
    )
    stream = f"branch-{state.branch_id}"
    meta = {"projection_version": PROJECTION_VERSION}
    records = [
        NewSnapshot(
            stream, state.version, f"{SNAPSHOT_TYPE}.part{k}", {"messages": p}, SnapshotHead.SCHEMA, meta
        )
        for k, p in enumerate(parts, start=1)
    ]
    records.append(
        NewSnapshot(stream, state.version, SNAPSHOT_TYPE, head.stored(), SnapshotHead.SCHEMA, meta)
    )
    return records


async def _messages_of(store: EventStore, link: _Head) -> list[Any] | None:
    """Every message slot a chain link holds (its extra parts loaded), or None if one is gone."""
    messages = list(link.link.messages)
    snap = link.snap
    for k in range(1, link.link.parts):
        part = await store.load_snapshot(snap.stream, snap.version, type=f"{SNAPSHOT_TYPE}.part{k}")
        if (
            part is None
            or part.version != snap.version
            or part.meta.get("projection_version") != PROJECTION_VERSION
        ):
            return None
        messages.extend(part.data["messages"])
    return messages


class _Heads:
    """The heads of one chain, each read from the store (and validated) at most once per load."""

    __slots__ = ("seen", "store", "stream")

    def __init__(self, store: EventStore, stream: str, head: _Head) -> None:
        self.store, self.stream = store, stream
        self.seen: dict[int, _Head] = {head.snap.version: head}

    async def base_of(self, link: _Head) -> _Head | None:
        """The head ``link`` is based on, or None when it is gone, outdated or does not match."""
        base_version = link.link.base_version
        if base_version is None:
            return None
        prev = self.seen.get(base_version)
        if prev is None:
            snap = await self.store.load_snapshot(self.stream, base_version, type=SNAPSHOT_TYPE)
            if snap is None or not _usable(snap) or snap.version != base_version:
                return None
            prev = self.seen[base_version] = _Head(snap)
        if prev.link.n != link.link.base_n:
            return None
        return prev


async def _maps_of(heads: _Heads, head: _Head, memo: HeadMapsMemo | None) -> HeadMaps | None:
    """The runs, links and overrides of ``head``: its keyframe and the deltas after it.

    The walk back stops at the first head whose maps ``memo`` holds; what it decodes goes into
    ``memo``. None for a broken chain.
    """
    stream = heads.stream
    deltas: list[tuple[SnapshotHead, list[RunInfo | Deferred[RunInfo]]]] = []
    link = head
    while True:
        version = link.snap.version
        maps = memo.get(stream, version) if memo is not None else None
        if maps is not None:
            break
        if link.link.maps != "delta":
            maps = HeadMaps({}, {}, {})
            maps.add(*link.head_and_runs)
            if memo is not None:
                memo.put(stream, version, maps)
            break
        if len(deltas) >= _MAX_DELTAS or link.link.base_version is None:
            return None
        deltas.append(link.head_and_runs)
        prev = await heads.base_of(link)
        if prev is None:
            return None
        link = prev
    if not deltas:
        return maps
    merged = maps.merged(deltas[::-1])
    if memo is not None:
        # the maps of the next head are this one's plus one delta: keep them too
        memo.put(stream, head.snap.version, merged)
    return merged


async def load_snapshot_state(
    store: EventStore,
    stream: str,
    at_or_before: int,
    *,
    newer_than: int = 0,
    donors: Sequence[BranchState | None] = (),
    memo: HeadMapsMemo | None = None,
) -> BranchState | None:
    """The state of the newest usable snapshot chain at or before a version, or None.

    None means: fold from the events (no snapshot, an outdated one, a broken chain, or a head
    at or below ``newer_than``).

    Args:
        store: The store holding the snapshots.
        stream: The branch stream.
        at_or_before: The newest version the head may have.
        newer_than: Only a head above this version is of use (the caller has that state).
        donors: States of the same stream, folded with the same rules, already in memory (a
            ``StateCache`` passes its nearest states below and above the target). The message
            slots a donor already holds are taken from it, shared as between the states of one
            fold, instead of being read from the chain and validated again. A donor is used
            only where sharing is exact (see ``BranchState.lendable_slots``), and for a donor
            below, only when its log ends where it does and no id of the newer slots is in
            its index yet.
        memo: Decoded maps of heads to reuse and to add to (``StateCache`` passes its own).

    Raises:
        ProjectionError: a snapshot of the current projection version does not decode.
    """
    # a long chain decodes millions of long-lived objects: see gc_paused
    with gc_paused():
        return await _load_chain(
            store, stream, at_or_before, newer_than, [d for d in donors if d is not None], memo
        )


async def _load_chain(
    store: EventStore,
    stream: str,
    at_or_before: int,
    newer_than: int,
    donors: list[BranchState],
    memo: HeadMapsMemo | None,
) -> BranchState | None:
    snap = await store.load_snapshot(stream, at_or_before, type=SNAPSHOT_TYPE)
    if snap is None or not _usable(snap) or snap.version <= newer_than:
        return None
    try:
        top = _Head(snap)
        heads = _Heads(store, stream, top)
        maps = await _maps_of(heads, top, memo)
        if maps is None:
            return None
        head = top.head
        lender, prefix = _lender(head, donors)
        if lender is not None and prefix >= head.n:
            # every slot of the head is already in memory: only the small part is read
            return _state_from(head, maps, lender=lender)
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _undecodable(stream, snap, exc) from exc
    chain = await _chain(heads, top, max(head.start, prefix))
    if chain is None:
        return None
    raw, base_n = chain
    try:
        if (
            lender is not None
            and base_n <= prefix
            and lender.holds_ids(raw[: prefix - base_n], base_n)
            and _extend(lender, raw[prefix - base_n :], prefix)
        ):
            return _state_from(head, maps, lender=lender)
        full: list[Any] = [None] * base_n
        full.extend(raw)
        if len(full) != head.n:
            raise ValueError(f"the snapshot chain holds {len(full)} message slots, expected {head.n}")
        # slots before the view's start stay None: they are never shown again
        start = head.start
        slots: list[AnyMessage | None] = [None] * start
        slots.extend(decode_messages(full[start:]))
        return _state_from(head, maps, slots=slots)
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _undecodable(stream, snap, exc) from exc


def _undecodable(stream: str, snap: Snapshot, exc: Exception) -> ProjectionError:
    return ProjectionError(f"snapshot of stream {stream!r} at version {snap.version} does not decode: {exc}")


def _lender(head: SnapshotHead, donors: list[BranchState]) -> tuple[BranchState | None, int]:
    """The donor whose message slots the head may share, and how many slots it lends (0: none)."""
    best: tuple[BranchState | None, int] = (None, 0)
    for donor in donors:
        if donor.branch_id != head.branch_id:
            continue
        lends = donor.lendable_slots(head.start, head.n, head.last_id)
        if lends > best[1]:
            best = (donor, lends)
    return best


async def _chain(heads: _Heads, top: _Head, stop: int) -> tuple[list[Any], int] | None:
    """The message slots of the chain from ``top`` back to a link based at or below ``stop``.

    Returns the slots in order and the slot number of the first, or None for a broken chain.
    """
    first_part = await _messages_of(heads.store, top)
    if first_part is None:
        return None
    parts: list[list[Any]] = [first_part]
    link = top
    while link.link.base_version is not None and link.link.base_n > stop:
        prev = await heads.base_of(link)
        if prev is None:
            return None
        more = await _messages_of(heads.store, prev)
        if more is None:
            return None
        parts.append(more)
        link = prev
    raw: list[Any] = []
    for chunk in reversed(parts):
        raw.extend(chunk)
    return raw, link.link.base_n if link.link.base_version is not None else 0


def _extend(lender: BranchState, raw: list[Any], prefix: int) -> bool:
    """Append the decoded ``raw`` slots to the lender's shared log in place; whether it did.

    In place as a fold at the tip of the log appends: only when the lender's log ends at
    ``prefix`` and no new id is in its index (else the caller loads the whole chain).
    """
    if not lender.can_grow_at(prefix) or any(m is None for m in raw):
        return False
    return lender.grow(decode_messages(raw) if raw else [])


def _state_from(
    head: SnapshotHead,
    maps: HeadMaps,
    *,
    slots: list[AnyMessage | None] | None = None,
    lender: BranchState | None = None,
) -> BranchState:
    system = decode_messages([head.system])[0] if head.system is not None else None
    if system is not None and not isinstance(system, System):
        raise ValueError(f"the system message of the head is a {type(system).__name__}")
    fields = {
        "name": head.name,
        "user": head.user,
        "session_id": head.session_id,
        "system": system,
        "chat_model": MappingProxyType(head.chat_model) if head.chat_model is not None else None,
        "parse_model": MappingProxyType(head.parse_model) if head.parse_model is not None else None,
        "metadata": head.metadata,
        "runs": RunTable(maps.runs),
        "provider_sessions": {(e[0], e[1]): e[2] for e in head.provider_sessions},
        "provider_cwds": {(e[0], e[1]): e[3] for e in head.provider_sessions if len(e) > 3},
        "action_links": maps.links,
        "forked_from": head.forked_from,
        "version": head.version,
        "position": head.position,
        "created_at": head.created_at,
        "updated_at": head.updated_at,
        "model_calls": head.model_calls,
    }
    return BranchState.restored(
        head.branch_id,
        fields,
        start=head.start,
        n=head.n,
        overrides=maps.over,
        slots=slots,
        lender=lender,
    )
