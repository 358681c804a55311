"""StateCache: folded branch states kept in process memory, for fast repeated time travel.

A log is append-only and its events never change, so the state of a stream at a version is
the same forever: a cached state is never stale. ``rebuild(..., cache=cache)`` starts from
the newest cached state at or before the target and keeps a checkpoint every ``every``
versions while it folds. Checkpoints of one stream share their message storage, so keeping
thousands of them costs little beyond the messages themselves.

With snapshots on, the cache and the store's snapshots work together: when the nearest cached
state is more than ``every`` versions below the target, the newest snapshot head above it is
loaded instead, and it takes the message slots it shares with a cached state of the same
stream from that state rather than from the snapshot chain. A process that starts with an
empty cache therefore pays for reading a branch's messages about once, whatever order its
time-travel queries come in.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field

from turnlog._errors import UsageError
from turnlog.eventstore import EventStore

from ._snapshot_head import HeadMapsMemo
from ._state import BranchState

__all__ = ["StateCache"]


@dataclass(slots=True)
class _Checkpoints:
    versions: list[int] = field(default_factory=list)
    states: list[BranchState] = field(default_factory=list)

    def best(self, version: int) -> BranchState | None:
        i = bisect.bisect_right(self.versions, version)
        return self.states[i - 1] if i else None

    def above(self, version: int) -> BranchState | None:
        i = bisect.bisect_left(self.versions, version)
        return self.states[i] if i < len(self.versions) else None

    def add(self, state: BranchState) -> None:
        i = bisect.bisect_left(self.versions, state.version)
        if i < len(self.versions) and self.versions[i] == state.version:
            return
        self.versions.insert(i, state.version)
        self.states.insert(i, state)


class StateCache:
    """Folded states of the branches of one store, kept for ``rebuild(..., cache=...)``.

    Args:
        store: The store the states come from (a cache serves exactly one store).
        every: Keep a checkpoint every this many versions while folding; a rebuild then folds
            at most ``every - 1`` events after the nearest checkpoint.
        max_streams: How many streams to keep; the least recently used goes first.

    Example:
        >>> cache = StateCache(store)  # doctest: +SKIP
        >>> now = await rebuild(store, branch_id, cache=cache)  # doctest: +SKIP
        >>> then = await rebuild(store, branch_id, at_version=10, cache=cache)  # fast  # doctest: +SKIP
    """

    __slots__ = ("_streams", "every", "keyframes", "max_streams", "store")

    def __init__(self, store: EventStore, *, every: int = 64, max_streams: int = 16) -> None:
        if every < 1 or max_streams < 1:
            raise UsageError("StateCache needs every >= 1 and max_streams >= 1")
        self.store = store
        self.every = every
        self.max_streams = max_streams
        self._streams: OrderedDict[tuple[str, int], _Checkpoints] = OrderedDict()
        self.keyframes = HeadMapsMemo(4 * max_streams)
        """Decoded snapshot keyframes (runs, links, overrides), reused by later loads."""

    def _entry(self, stream: str, rules: int, create: bool) -> _Checkpoints | None:
        key = (stream, rules)
        entry = self._streams.get(key)
        if entry is not None:
            self._streams.move_to_end(key)
        elif create:
            entry = self._streams[key] = _Checkpoints()
            while len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
        return entry

    def best(self, stream: str, version: int, rules: int = 0) -> BranchState | None:
        """The cached state of ``stream`` with the highest version at or before ``version``."""
        entry = self._entry(stream, rules, create=False)
        return entry.best(version) if entry is not None else None

    def above(self, stream: str, version: int, rules: int = 0) -> BranchState | None:
        """The cached state of ``stream`` with the lowest version at or after ``version``.

        ``rebuild`` lends its messages to a snapshot head below it (see ``load_snapshot_state``).
        """
        entry = self._entry(stream, rules, create=False)
        return entry.above(version) if entry is not None else None

    def add(self, stream: str, state: BranchState, rules: int = 0) -> None:
        """Remember ``state`` as the state of ``stream`` at ``state.version``."""
        entry = self._entry(stream, rules, create=True)
        assert entry is not None
        entry.add(state)

    def clear(self) -> None:
        """Forget every state."""
        self._streams.clear()
        self.keyframes = HeadMapsMemo(4 * self.max_streams)

    def __len__(self) -> int:
        """How many states are cached."""
        return sum(len(e.versions) for e in self._streams.values())
