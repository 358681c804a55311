"""Finding a recorded branch or session by id, unique id prefix or name.

Branches and sessions are both streams (``branch-<id>``, ``session-<id>``) whose first event
carries the name, so one lookup serves both.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from turnlog.eventstore import EventStore
from turnlog.kernel._errors import (
    AmbiguousBranch,
    AmbiguousSession,
    BranchNameTaken,
    UnknownBranch,
    UnknownSession,
)
from turnlog.projections import match_ref, visible_event

__all__ = [
    "branches_named",
    "find_branch",
    "find_session",
    "name_holder",
    "name_stream",
    "unique_branch_name",
]


async def _find(
    store: EventStore,
    kind: str,
    ref: str,
    unknown: type[UnknownBranch] | type[UnknownSession],
    ambiguous: type[AmbiguousBranch] | type[AmbiguousSession],
) -> str:
    match = await match_ref(store, kind, ref)
    if match.found is not None:
        return match.found
    if match.ambiguous:
        raise ambiguous(ref, list(match.ambiguous))
    raise unknown(ref, list(match.close), match.message)


async def find_branch(store: EventStore, ref: str) -> str:
    """The id of the branch ``ref`` names: an id, a unique id prefix, or a name.

    Raises:
        UnknownBranch: nothing matches (``candidates`` lists close names and ids).
        AmbiguousBranch: several branches match.
    """
    return await _find(store, "branch", ref, UnknownBranch, AmbiguousBranch)


async def find_session(store: EventStore, ref: str) -> str:
    """The id of the session ``ref`` names: an id, a unique id prefix, or a name.

    Raises:
        UnknownSession: nothing matches (``candidates`` lists close names and ids).
        AmbiguousSession: several sessions match.
    """
    return await _find(store, "session", ref, UnknownSession, AmbiguousSession)


async def branches_named(store: EventStore, name: str) -> list[str]:
    """The ids of the branches whose name is exactly ``name`` (no prefix match), oldest first."""
    found: list[str] = []
    for stream, _ in await store.list_streams("branch-"):
        async for first in store.read_stream(stream, 1, 1):
            if visible_event(first).data.get("name") == name:
                found.append(stream.removeprefix("branch-"))
    return found


def name_stream(name: str) -> str:
    """The stream whose one ``branch.name_claimed`` event says which branch holds ``name``.

    A digest, not the name itself: a name may be as long as a stream name may be and hold
    any printable character.
    """
    return "name-" + hashlib.sha256(name.encode()).hexdigest()[:40]


async def name_holder(store: EventStore, name: str) -> str | None:
    """The id of the branch whose claim on ``name`` is recorded, or None."""
    async for claim in store.read_stream(name_stream(name), 1, 1):
        holder = claim.data.get("branch_id")
        return holder if isinstance(holder, str) else None
    return None


# One lock per store: the check that a name is free and the append that takes it are one step
# for every creator in this process. Weak keys: a closed store takes its lock with it.
_NAME_LOCKS: weakref.WeakKeyDictionary[EventStore, anyio.Lock] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def unique_branch_name(store: EventStore, name: str | None) -> AsyncIterator[None]:
    """Refuse ``name`` when a branch has it; create the branch inside the block.

    Two steps keep a name unique. Here, under the store's name lock (one creator of a name at
    a time in this process), branches that have the name are looked for, which also finds
    those recorded before names were claimed. Across processes the store decides: the
    Kernel appends the branch's first event together with ``branch.name_claimed`` on the
    name's stream (``name_stream``), on the condition that that stream is empty, so of two
    processes creating one name at the same instant exactly one commits and the other gets
    ``BranchNameTaken``.

    Raises:
        BranchNameTaken: a branch of the store has the name (nothing is created).
    """
    if name is None:
        yield
        return
    lock = _NAME_LOCKS.get(store)
    if lock is None:
        lock = _NAME_LOCKS[store] = anyio.Lock()
    async with lock:
        holder = await name_holder(store, name)
        taken = [holder] if holder is not None else await branches_named(store, name)
        if taken:
            raise BranchNameTaken(name, taken[0])
        yield
