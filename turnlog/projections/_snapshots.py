"""Snapshots of branch state: delta-encoded, versioned, and never needed for a correct result.

A ``branch_state`` snapshot at version v (the head) holds the scalars of the state in full
(system, provider sessions, counters, view bounds) and only what changed since the previous
snapshot of the same stream (``base_version``):

- the messages recorded since then, in extra records ``branch_state.part<k>`` (so a head stays
  small however many messages the delta has); loading walks the chain back to the start of the
  view, so a branch of a million messages costs one message list in snapshots, not one per
  snapshot;
- the runs, action links and per-message overrides that changed since then (``maps: delta``),
  or all of them (``maps: full``, a keyframe) every ``SnapshotPolicy.keyframe_every`` heads,
  when there is no base, or when the events in between hold a type whose effect on them is
  not known. Loading merges the heads back to the keyframe. A branch with a hundred thousand runs therefore
  does not write them all again every thousand events.

A chain with a missing, foreign or outdated link is not used: ``rebuild`` folds from the
events instead, with the same result. The store itself never returns a record whose digest
does not match its bytes or that does not stand on the log's event at its version (an
edited or transplanted snapshot): to this module such a record is simply missing. Records of schema 1 (every head a keyframe, messages
partly in the head) are still read.

Snapshot meta records ``projection_version``; a snapshot written by another projection code
version is ignored (and replaced by the next snapshot written).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore, NewSnapshot, RecordedEvent, Snapshot

from ._bulk import validate_messages
from ._catalogue import CATALOGUE, UsageData
from ._errors import ProjectionError
from ._fold import gc_paused
from ._messages import AnyMessage, System, message_from_dict
from ._state import BranchState, ForkOrigin, RunInfo, _set_storage

__all__ = [
    "PROJECTION_VERSION",
    "Keyframe",
    "KeyframeMemo",
    "SNAPSHOT_TYPE",
    "SnapshotPolicy",
    "load_snapshot_state",
    "maybe_snapshot",
    "snapshot_records",
]

PROJECTION_VERSION = 1
"""Version of the fold code; bump it when a rule changes so old snapshots are ignored."""

SNAPSHOT_TYPE = "branch_state"
"""The snapshot type of branch states."""

_SNAPSHOT_SCHEMA = 2
_READABLE_SCHEMAS = frozenset({1, 2})
_MAX_DELTAS = 4096
"""A chain of more delta heads than this is taken as broken (it is never written)."""
_PART_BYTES = 4 * 1024 * 1024  # keeps every record far below the store's size limit
_MESSAGES: TypeAdapter[list[AnyMessage | None]] = TypeAdapter(list[AnyMessage | None])


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When ``maybe_snapshot`` writes a snapshot.

    Attributes:
        every: Write when the state is at least this many versions past the last snapshot.
        at_run_end: Also write at the end of every run (``run_ended=True``), whatever ``every``
            says, so a restart after a run never folds that run again.
        keyframe_every: Write the runs, action links and overrides in full in one head of
            this many (a keyframe) and only what changed in the others; 1 writes them in full
            every time. A load merges the heads back to the keyframe.
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
        and snap.schema in _READABLE_SCHEMAS
        and snap.meta.get("projection_version") == PROJECTION_VERSION
    )


async def maybe_snapshot(
    store: EventStore,
    state: BranchState,
    policy: SnapshotPolicy | None = None,
    *,
    run_ended: bool = False,
) -> bool:
    """Write a snapshot of ``state`` when ``policy`` says one is due; return whether it did.

    Call it after folding new events (the kernel does after each command, with
    ``run_ended=True`` after a run's terminal event). It reads the newest snapshot of the
    stream to decide, and writes only the messages recorded since that one.
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
    if base is not None and _depth(base) + 1 < policy.keyframe_every:
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
    index, over = state._index, state._over
    slots = {slot for slot in map(index.get, ids) if slot is not None and slot in over}
    return Changes(frozenset(runs), frozenset(links), frozenset(slots))


def delta_changes(
    base: Snapshot | None, state: BranchState, events: Sequence[RecordedEvent], keyframe_every: int
) -> Changes | None:
    """What a head of ``state`` based on ``base`` may store as a delta; None: store in full.

    ``events`` must hold the state's events after ``base.version`` (extra ones are ignored).
    None when there is no base, when the base's keyframe is ``keyframe_every - 1`` deltas
    back, when an event is missing, or when ``changes_in`` says None.
    """
    if base is None or base.version >= state.version or _depth(base) + 1 >= keyframe_every:
        return None
    since = [e for e in events if base.version < e.version <= state.version]
    if len(since) != state.version - base.version:
        return None
    return changes_in(since, state)


def _depth(head: Snapshot) -> int:
    """How many delta heads stand between ``head`` and its keyframe (0: it is one)."""
    return int(head.data.get("depth", 0)) if head.data.get("maps") == "delta" else 0


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
    base_n = 0
    if base is not None and base.version < state.version and 0 <= base.data.get("n", -1) <= state._n:
        base_n = int(base.data["n"])
    else:
        base = None
    if base is None:
        changed = None
    log = state._log
    start, n = state._start, state._n
    if changed is None:
        runs = list(state.runs.values())
        links = dict(state.action_links)
        over = [(slot, msg) for slot, msg in state._over.items() if start <= slot < n]
    else:
        runs = [r for r in state.runs.values() if r.run_id in changed.runs]
        links = {k: state.action_links[k] for k in changed.links if k in state.action_links}
        over = [(slot, state._over[slot]) for slot in sorted(changed.slots) if start <= slot < n]
    last = log[n - 1] if start < n else None
    data: dict[str, Any] = {
        "branch_id": state.branch_id,
        "name": state.name,
        "user": state.user,
        "session_id": state.session_id,
        "system": state.system.to_dict() if state.system is not None else None,
        "chat_model": dict(state.chat_model) if state.chat_model is not None else None,
        "parse_model": dict(state.parse_model) if state.parse_model is not None else None,
        "metadata": dict(state.metadata),
        "runs": [_run_to_dict(r) for r in runs],
        "provider_sessions": [
            [p, m, s, *([state.provider_cwds[(p, m)]] if (p, m) in state.provider_cwds else [])]
            for (p, m), s in state.provider_sessions.items()
        ],
        "action_links": links,
        "forked_from": _fork_to_dict(state.forked_from),
        "version": state.version,
        "position": state.position,
        "created_at": _iso(state.created_at),
        "updated_at": _iso(state.updated_at),
        "model_calls": state.model_calls,
        "start": state._start,
        "n": state._n,
        "over": [[slot, msg.to_dict()] for slot, msg in over],
        "maps": "full" if changed is None else "delta",
        "depth": 0 if changed is None else _depth(base) + 1,  # type: ignore[arg-type]
        "base_version": base.version if base is not None else None,
        "base_n": base_n,
        # the id in the last slot of the view: a state that lends its messages must hold it too
        "last_id": last.id if last is not None else None,
        # the messages live in the parts, so that a head stays small
        "messages": [],
    }
    # slots before the view's start are never shown again: store them as null
    messages = [
        m.to_dict() if m is not None and i >= start else None
        for i, m in enumerate(log[base_n:n], start=base_n)
    ]
    parts = _split(messages) if messages else []
    data["parts"] = len(parts) + 1
    stream = f"branch-{state.branch_id}"
    meta = {"projection_version": PROJECTION_VERSION}
    records = [
        NewSnapshot(
            stream, state.version, f"{SNAPSHOT_TYPE}.part{k}", {"messages": p}, _SNAPSHOT_SCHEMA, meta
        )
        for k, p in enumerate(parts, start=1)
    ]
    records.append(NewSnapshot(stream, state.version, SNAPSHOT_TYPE, data, _SNAPSHOT_SCHEMA, meta))
    return records


async def _messages_of(store: EventStore, link: Snapshot) -> list[Any] | None:
    """Every message slot a chain link holds (its extra parts loaded), or None if one is gone."""
    messages = list(link.data["messages"])
    for k in range(1, int(link.data.get("parts", 1))):
        part = await store.load_snapshot(link.stream, link.version, type=f"{SNAPSHOT_TYPE}.part{k}")
        if (
            part is None
            or part.version != link.version
            or part.meta.get("projection_version") != PROJECTION_VERSION
        ):
            return None
        messages.extend(part.data["messages"])
    return messages


class _Heads:
    """The heads of one chain, each read from the store at most once per load."""

    __slots__ = ("seen", "store", "stream")

    def __init__(self, store: EventStore, stream: str, head: Snapshot) -> None:
        self.store, self.stream = store, stream
        self.seen: dict[int, Snapshot] = {head.version: head}

    async def base_of(self, link: Snapshot) -> Snapshot | None:
        """The head ``link`` is based on, or None when it is gone, outdated or does not match."""
        base_version = int(link.data["base_version"])
        prev = self.seen.get(base_version)
        if prev is None:
            prev = await self.store.load_snapshot(self.stream, base_version, type=SNAPSHOT_TYPE)
            if prev is None or not _usable(prev) or prev.version != base_version:
                return None
            self.seen[base_version] = prev
        if int(prev.data["n"]) != int(link.data["base_n"]):
            return None
        return prev


@dataclass(slots=True)
class Keyframe:
    """The decoded runs, action links and overrides of a head, merged from its keyframe on."""

    runs: dict[str, RunInfo]
    links: dict[str, str]
    over: dict[int, AnyMessage]

    def merged(self, deltas: Sequence[Snapshot]) -> Keyframe:
        """A copy with the maps of ``deltas`` (oldest first) applied; ``self`` is unchanged."""
        out = Keyframe(dict(self.runs), dict(self.links), dict(self.over))
        for link in deltas:
            _apply_maps(out, link.data)
        return out


def _apply_maps(maps: Keyframe, d: Mapping[str, Any]) -> None:
    for run in d["runs"]:
        # a changed run keeps its place, a new one goes last: the order of the fold
        maps.runs[run["run_id"]] = _run_from_dict(run)
    maps.links.update(d["action_links"])
    for slot, message in d["over"]:
        maps.over[int(slot)] = message_from_dict(message)


class KeyframeMemo:
    """The decoded maps (runs, links, overrides) of recently loaded heads, for the next loads.

    A keyframe holds every run, link and override of its branch, O(runs) to read and decode;
    the heads after it hold only what changed. ``StateCache`` keeps one and passes it to
    ``load_snapshot_state``: a load then reads and decodes only the delta heads after the
    newest head of its chain already decoded. A head never changes once written, and the kept
    maps are never changed (a load merges into a copy); maps of heads near each other share
    their run objects.

    Args:
        size: How many heads to keep, the least recently used going first.
    """

    __slots__ = ("_items", "size")

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, int], Keyframe] = OrderedDict()

    def get(self, stream: str, version: int) -> Keyframe | None:
        """The decoded keyframe of ``stream`` at ``version``, if kept."""
        found = self._items.get((stream, version))
        if found is not None:
            self._items.move_to_end((stream, version))
        return found

    def put(self, stream: str, version: int, keyframe: Keyframe) -> None:
        """Keep a decoded keyframe."""
        self._items[(stream, version)] = keyframe
        self._items.move_to_end((stream, version))
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


async def _maps_of(heads: _Heads, head: Snapshot, memo: KeyframeMemo | None) -> Keyframe | None:
    """The runs, links and overrides of ``head``: its keyframe and the deltas after it.

    The walk back stops at the first head whose maps ``memo`` holds; what it decodes goes into
    ``memo``. None for a broken chain.
    """
    stream = heads.stream
    deltas: list[Snapshot] = []
    link = head
    while True:
        maps = memo.get(stream, link.version) if memo is not None else None
        if maps is not None:
            break
        if link.data.get("maps") != "delta":
            maps = Keyframe({}, {}, {})
            _apply_maps(maps, link.data)
            if memo is not None:
                memo.put(stream, link.version, maps)
            break
        if len(deltas) >= _MAX_DELTAS or link.data["base_version"] is None:
            return None
        deltas.append(link)
        prev = await heads.base_of(link)
        if prev is None:
            return None
        link = prev
    if not deltas:
        return maps
    merged = maps.merged(deltas[::-1])
    if memo is not None:
        # the maps of the next head are this one's plus one delta: keep them too
        memo.put(stream, head.version, merged)
    return merged


async def load_snapshot_state(
    store: EventStore,
    stream: str,
    at_or_before: int,
    *,
    newer_than: int = 0,
    donors: Sequence[BranchState | None] = (),
    memo: KeyframeMemo | None = None,
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
            only where sharing is exact: the same view start and the same last message id,
            and for a donor below, a log that ends where it does and no id of the newer slots
            already in its index.
        memo: Decoded keyframes to reuse and to add to (``StateCache`` passes its own).

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
    memo: KeyframeMemo | None,
) -> BranchState | None:
    head = await store.load_snapshot(stream, at_or_before, type=SNAPSHOT_TYPE)
    if head is None or not _usable(head) or head.version <= newer_than:
        return None
    heads = _Heads(store, stream, head)
    try:
        maps = await _maps_of(heads, head, memo)
        if maps is None:
            return None
        n, start = int(head.data["n"]), int(head.data["start"])
        lender, prefix = _lender(head, donors, n, start)
        if lender is not None and prefix >= n:
            # every slot of the head is already in memory: only the small part is read
            return _state_from(head, lender._log, lender._index, maps)
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _undecodable(stream, head, exc) from exc
    chain = await _chain(heads, head, max(start, prefix))
    if chain is None:
        return None
    raw, base_n = chain
    try:
        if (
            lender is not None
            and base_n <= prefix
            and _same_ids(raw[: prefix - base_n], lender._log, base_n)
            and _extend(lender, raw[prefix - base_n :], prefix)
        ):
            return _state_from(head, lender._log, lender._index, maps)
        full: list[Any] = [None] * base_n
        full.extend(raw)
        if len(full) != n:
            raise ValueError(f"the snapshot chain holds {len(full)} message slots, expected {n}")
        # slots before the view's start stay None: they are never shown again
        full[:start] = [None] * start
        log, index = _validate_log(full, start)
        return _state_from(head, log, index, maps)
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _undecodable(stream, head, exc) from exc


def _undecodable(stream: str, head: Snapshot, exc: Exception) -> ProjectionError:
    return ProjectionError(f"snapshot of stream {stream!r} at version {head.version} does not decode: {exc}")


def _lender(head: Snapshot, donors: list[BranchState], n: int, start: int) -> tuple[BranchState | None, int]:
    """The donor whose message slots the head may share, and how many slots it lends (0: none).

    A donor lends its slots below ``min(its _n, n)`` when its view starts where the head's
    does. Every message in a view has a unique id whose index entry is its slot, and a key of
    an index never changes once a state holds it, so the donor's index is right for every
    message of the head's view too. A donor whose view starts elsewhere may index a message of
    the head's view under a later slot (an id added again after ``messages.cleared``) and is not
    used. A donor that lends every slot must also hold the head's last message id there.
    """
    best: tuple[BranchState | None, int] = (None, 0)
    last_id = head.data.get("last_id")
    for donor in donors:
        if donor._start != start or donor.branch_id != head.data["branch_id"] or donor._n <= start:
            continue
        lends = min(donor._n, n)
        if lends <= best[1]:
            continue
        if lends == n:
            last = donor._log[n - 1]
            if last_id is None or last is None or last.id != last_id:
                continue
        best = (donor, lends)
    return best


def _same_ids(stored: list[Any], log: list[AnyMessage | None], first: int) -> bool:
    """Whether the stored slots from slot ``first`` on hold the ids ``log`` holds there."""
    for slot, item in enumerate(stored, start=first):
        held = log[slot]
        if item is None or held is None:
            continue  # before the view's start: never shown
        if not isinstance(item, dict) or item.get("id") != held.id:
            return False
    return True


async def _chain(heads: _Heads, head: Snapshot, stop: int) -> tuple[list[Any], int] | None:
    """The message slots of the chain from ``head`` back to a link based at or below ``stop``.

    Returns the slots in order and the slot number of the first, or None for a broken chain.
    """
    first_part = await _messages_of(heads.store, head)
    if first_part is None:
        return None
    parts: list[list[Any]] = [first_part]
    link = head
    while link.data["base_version"] is not None and int(link.data["base_n"]) > stop:
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
    return raw, int(link.data["base_n"]) if link.data["base_version"] is not None else 0


def _extend(lender: BranchState, raw: list[Any], prefix: int) -> bool:
    """Append the validated ``raw`` slots to the lender's log and index in place; whether it did.

    In place as a fold at the tip of the log appends: only when the lender's log ends at its
    ``_n`` and no new id is in its index (else the caller loads the whole chain).
    """
    if len(lender._log) != prefix or any(m is None for m in raw):
        return False
    messages = validate_messages(raw) if raw else []
    if messages is None:
        messages = _MESSAGES.validate_python(raw)
    ids = [m.id for m in messages]  # type: ignore[union-attr]
    index = lender._index
    if len(set(ids)) != len(ids) or any(i in index for i in ids):
        return False
    lender._log.extend(messages)
    index.update(zip(ids, range(prefix, prefix + len(ids)), strict=True))
    return True


def _state_from(
    snap: Snapshot, log: list[AnyMessage | None], index: dict[str, int], maps: Keyframe
) -> BranchState:
    d = snap.data
    n, start = int(d["n"]), int(d["start"])
    if len(log) < n:
        raise ValueError(f"the message log holds {len(log)} slots, expected {n}")
    over = {slot: msg for slot, msg in maps.over.items() if start <= slot < n}
    system = d["system"]
    state = BranchState(
        d["branch_id"],
        name=d["name"],
        user=d["user"],
        session_id=d["session_id"],
        system=System.model_validate(system) if system is not None else None,
        chat_model=MappingProxyType(d["chat_model"]) if d["chat_model"] is not None else None,
        parse_model=MappingProxyType(d["parse_model"]) if d["parse_model"] is not None else None,
        metadata=d["metadata"],
        runs=maps.runs,
        provider_sessions={(e[0], e[1]): e[2] for e in d["provider_sessions"]},
        provider_cwds={(e[0], e[1]): e[3] for e in d["provider_sessions"] if len(e) > 3},
        action_links=maps.links,
        forked_from=ForkOrigin(**d["forked_from"]) if d["forked_from"] is not None else None,
        version=int(d["version"]),
        position=int(d["position"]),
        created_at=_from_iso(d["created_at"]),
        updated_at=_from_iso(d["updated_at"]),
        model_calls=int(d["model_calls"]),
    )
    _set_storage(state, log, n, start, index, MappingProxyType(over) if over else MappingProxyType({}))
    return state


def _validate_log(raw: list[Any], start: int) -> tuple[list[AnyMessage | None], dict[str, int]]:
    """The validated message slots of a snapshot chain and the slot of each message id.

    The first ``start`` slots are None.
    """
    # the usual case (every slot of the view holds a stored message) takes the bulk path
    messages = validate_messages(raw[start:]) if start < len(raw) else []
    if messages is None:
        log = _MESSAGES.validate_python(raw)
        return log, {m.id: i for i, m in enumerate(log) if m is not None}
    full: list[AnyMessage | None] = [None] * start
    full.extend(messages)
    # a later slot of the same id wins, as in the fold
    return full, dict(zip(map(_ID, messages), range(start, start + len(messages)), strict=True))


_ID = attrgetter("id")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _from_iso(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text is not None else None


def _fork_to_dict(origin: ForkOrigin | None) -> dict[str, Any] | None:
    if origin is None:
        return None
    return {
        "parent_branch_id": origin.parent_branch_id,
        "parent_stream": origin.parent_stream,
        "parent_version": origin.parent_version,
    }


def _run_to_dict(run: RunInfo) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "verb": run.verb,
        "status": run.status,
        "started_at": _iso(run.started_at),
        "ended_at": _iso(run.ended_at),
        "duration_ms": run.duration_ms,
        "usage": run.usage.model_dump(),
        "parent_run_id": run.parent_run_id,
        "provider": run.provider,
        "model": run.model,
        "chunks": run.chunks,
        "error_type": run.error_type,
        "error_message": run.error_message,
        "reason": run.reason,
        "recovered": run.recovered,
    }


def _run_from_dict(d: Mapping[str, Any]) -> RunInfo:
    fields = dict(d)
    fields["started_at"] = _from_iso(fields["started_at"])
    fields["ended_at"] = _from_iso(fields["ended_at"])
    fields["usage"] = UsageData.model_validate(fields["usage"])
    return RunInfo(**fields)
