"""Snapshots of branch state: delta-encoded, versioned, and never needed for a correct result.

A ``branch_state`` snapshot at version v holds the small part of the state in full (system,
runs, provider sessions, links, per-message overrides, counters) and only the messages
recorded since the previous snapshot of the same stream (``base_version``). Loading walks the
chain back to the start of the view; a branch of a million messages therefore costs one
message list in snapshots, not one per snapshot. A chain with a missing, foreign or outdated
link is not used: ``rebuild`` folds from the events instead, with the same result.

Snapshot meta records ``projection_version``; a snapshot written by another projection code
version is ignored (and replaced by the next snapshot written).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError
from turnlog.eventstore import EventStore, NewSnapshot, Snapshot

from ._bulk import validate_messages
from ._catalogue import UsageData
from ._errors import ProjectionError
from ._fold import gc_paused
from ._messages import AnyMessage, System, message_from_dict
from ._state import BranchState, ForkOrigin, RunInfo, _set_storage

__all__ = [
    "PROJECTION_VERSION",
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

_SNAPSHOT_SCHEMA = 1
_PART_BYTES = 4 * 1024 * 1024  # keeps every record far below the store's size limit
_MESSAGES: TypeAdapter[list[AnyMessage | None]] = TypeAdapter(list[AnyMessage | None])


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When ``maybe_snapshot`` writes a snapshot.

    Attributes:
        every: Write when the state is at least this many versions past the last snapshot.
        at_run_end: Also write at the end of every run (``run_ended=True``), whatever ``every``
            says, so a restart after a run never folds that run again.
    """

    every: int = 1000
    at_run_end: bool = True

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"SnapshotPolicy.every must be >= 1, got {self.every}")


def _usable(snap: Snapshot | None) -> bool:
    return (
        snap is not None
        and snap.type == SNAPSHOT_TYPE
        and snap.schema == _SNAPSHOT_SCHEMA
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
    # extra parts first, the head last: a head is only ever visible with all its parts
    for record in snapshot_records(state, base):
        await store.save_snapshot(record)
    return True


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


def snapshot_records(state: BranchState, base: Snapshot | None = None) -> list[NewSnapshot]:
    """The snapshot records of ``state``, holding only the messages recorded after ``base``.

    The last record is the head (type ``branch_state``); any before it are extra message parts
    (type ``branch_state.part<k>``, same version) of a large delta.
    """
    base_n = 0
    if base is not None and base.version < state.version and 0 <= base.data.get("n", -1) <= state._n:
        base_n = int(base.data["n"])
    else:
        base = None
    log = state._log
    data: dict[str, Any] = {
        "branch_id": state.branch_id,
        "name": state.name,
        "user": state.user,
        "session_id": state.session_id,
        "system": state.system.to_dict() if state.system is not None else None,
        "chat_model": dict(state.chat_model) if state.chat_model is not None else None,
        "parse_model": dict(state.parse_model) if state.parse_model is not None else None,
        "metadata": dict(state.metadata),
        "runs": [_run_to_dict(r) for r in state.runs.values()],
        "provider_sessions": [[p, m, s] for (p, m), s in state.provider_sessions.items()],
        "action_links": dict(state.action_links),
        "forked_from": _fork_to_dict(state.forked_from),
        "version": state.version,
        "position": state.position,
        "created_at": _iso(state.created_at),
        "updated_at": _iso(state.updated_at),
        "model_calls": state.model_calls,
        "start": state._start,
        "n": state._n,
        "over": [
            [slot, msg.to_dict()] for slot, msg in state._over.items() if state._start <= slot < state._n
        ],
        "base_version": base.version if base is not None else None,
        "base_n": base_n,
        # slots before the view's start are never shown again: store them as null
    }
    messages = [
        m.to_dict() if m is not None and i >= state._start else None
        for i, m in enumerate(log[base_n : state._n], start=base_n)
    ]
    parts = _split(messages)
    data["messages"] = parts[0]
    data["parts"] = len(parts)
    stream = f"branch-{state.branch_id}"
    meta = {"projection_version": PROJECTION_VERSION}
    records = [
        NewSnapshot(
            stream, state.version, f"{SNAPSHOT_TYPE}.part{k}", {"messages": p}, _SNAPSHOT_SCHEMA, meta
        )
        for k, p in enumerate(parts[1:], start=1)
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


async def load_snapshot_state(
    store: EventStore,
    stream: str,
    at_or_before: int,
    *,
    newer_than: int = 0,
    donors: Sequence[BranchState | None] = (),
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
            only where sharing is exact: the same view start, and for a donor below, a log
            that ends where it does and no id of the newer slots already in its index.

    Raises:
        ProjectionError: a snapshot of the current projection version does not decode.
    """
    # a long chain decodes millions of long-lived objects: see gc_paused
    with gc_paused():
        return await _load_chain(
            store, stream, at_or_before, newer_than, [d for d in donors if d is not None]
        )


async def _load_chain(
    store: EventStore, stream: str, at_or_before: int, newer_than: int, donors: list[BranchState]
) -> BranchState | None:
    head = await store.load_snapshot(stream, at_or_before, type=SNAPSHOT_TYPE)
    if head is None or not _usable(head) or head.version <= newer_than:
        return None
    try:
        n, start = int(head.data["n"]), int(head.data["start"])
        lender, prefix = _lender(head, donors, n, start)
        if lender is not None and prefix >= n:
            # every slot of the head is already in memory: only the small part is read
            return _state_from(head, lender._log, lender._index)
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _undecodable(stream, head, exc) from exc
    chain = await _chain(store, stream, head, max(start, prefix))
    if chain is None:
        return None
    raw, base_n = chain
    try:
        if lender is not None and base_n <= prefix:
            extended = _extend(lender, raw[prefix - base_n :], prefix)
            if extended is not None:
                return _state_from(head, lender._log, lender._index)
        full: list[Any] = [None] * base_n
        full.extend(raw)
        if len(full) != n:
            raise ValueError(f"the snapshot chain holds {len(full)} message slots, expected {n}")
        # slots before the view's start stay None: they are never shown again
        full[:start] = [None] * start
        log, index = _validate_log(full, start)
        return _state_from(head, log, index)
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
    used. The head's own newest slots are compared by id with the donor's as a check.
    """
    best: tuple[BranchState | None, int] = (None, 0)
    for donor in donors:
        if donor._start != start or donor.branch_id != head.data["branch_id"] or donor._n <= start:
            continue
        lends = min(donor._n, n)
        if lends <= best[1] or not _agrees(head, donor, lends):
            continue
        best = (donor, lends)
    return best


def _agrees(head: Snapshot, donor: BranchState, lends: int) -> bool:
    """Whether the head's own slots below ``lends`` hold the ids the donor holds there."""
    base_n = int(head.data["base_n"])
    own = head.data["messages"]
    log = donor._log
    for slot in range(max(base_n, donor._start), min(lends, base_n + len(own))):
        stored = own[slot - base_n]
        if not isinstance(stored, dict) or log[slot] is None or stored.get("id") != log[slot].id:  # type: ignore[union-attr]
            return False
    return True


async def _chain(store: EventStore, stream: str, head: Snapshot, stop: int) -> tuple[list[Any], int] | None:
    """The message slots of the chain from ``head`` back to a link based at or below ``stop``.

    Returns the slots in order and the slot number of the first, or None for a broken chain.
    """
    first_part = await _messages_of(store, head)
    if first_part is None:
        return None
    parts: list[list[Any]] = [first_part]
    link = head
    while link.data["base_version"] is not None and int(link.data["base_n"]) > stop:
        base_version = int(link.data["base_version"])
        prev = await store.load_snapshot(stream, base_version, type=SNAPSHOT_TYPE)
        if (
            prev is None
            or not _usable(prev)
            or prev.version != base_version
            or int(prev.data["n"]) != int(link.data["base_n"])
        ):
            return None
        more = await _messages_of(store, prev)
        if more is None:
            return None
        parts.append(more)
        link = prev
    raw: list[Any] = []
    for chunk in reversed(parts):
        raw.extend(chunk)
    return raw, int(link.data["base_n"]) if link.data["base_version"] is not None else 0


def _extend(lender: BranchState, raw: list[Any], prefix: int) -> BranchState | None:
    """Append the validated ``raw`` slots to the lender's log and index in place, or None.

    In place as a fold at the tip of the log appends: only when the lender's log ends at its
    ``_n`` and no new id is in its index (else the caller loads the whole chain).
    """
    if len(lender._log) != prefix or any(m is None for m in raw):
        return None
    messages = validate_messages(raw) if raw else []
    if messages is None:
        messages = _MESSAGES.validate_python(raw)
    ids = [m.id for m in messages]  # type: ignore[union-attr]
    index = lender._index
    if len(set(ids)) != len(ids) or any(i in index for i in ids):
        return None
    lender._log.extend(messages)
    index.update(zip(ids, range(prefix, prefix + len(ids)), strict=True))
    return lender


def _state_from(snap: Snapshot, log: list[AnyMessage | None], index: dict[str, int]) -> BranchState:
    d = snap.data
    n, start = int(d["n"]), int(d["start"])
    if len(log) < n:
        raise ValueError(f"the message log holds {len(log)} slots, expected {n}")
    over = {int(slot): message_from_dict(msg) for slot, msg in d["over"]}
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
        runs={r["run_id"]: _run_from_dict(r) for r in d["runs"]},
        provider_sessions={(p, m): s for p, m, s in d["provider_sessions"]},
        action_links=d["action_links"],
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
