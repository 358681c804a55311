"""The runs table of a branch state: an immutable ordered map that shares storage between versions.

Every event of a run (``run.started``, ``run.ended``) changes one entry of the table, and every
appended event freezes a new state. A plain dict copied on the first write after each freeze
costs O(runs) per event: at 2,000 turns the copies were most of the growth of a turn's cost.
A table here is a shared ``base`` dict and a small ``top`` dict of the entries changed or
added since; a change copies only ``top``, and ``top`` is merged into a new ``base`` once it
outgrows about the square root of the table, so a change costs O(√runs) amortized, a few
microseconds at thousands of runs. Neither dict is ever written to after a table holds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from itertools import chain
from typing import Any, Generic, TypeVar

__all__ = ["Deferred", "RunTable"]

_V = TypeVar("_V")
_EMPTY: dict[str, Any] = {}
_MIN_TOP = 16
"""``top`` may always hold this many entries before a merge (small tables merge rarely)."""


class Deferred(Generic[_V]):
    """A table entry kept as stored until it is used: ``decode(data)`` runs once, on first use.

    What ``decode`` raises is raised at that use (each time, as nothing was decoded).
    """

    __slots__ = ("_decode", "_value", "data", "key")

    def __init__(self, key: str, data: Any, decode: Callable[[Any], _V]) -> None:
        self.key, self.data, self._decode = key, data, decode
        self._value: _V | None = None

    def get(self) -> _V:
        """The decoded entry (decoded now if it was not yet)."""
        value = self._value
        if value is None:
            value = self._value = self._decode(self.data)
            self.data = None  # the stored form is not kept beside the record (memos hold both)
        return value


class RunTable(Mapping[str, _V]):
    """Run id -> run record in start order (a changed run keeps its place, a new one goes last)."""

    __slots__ = ("_base", "_size", "_top")

    # values are records or ``Deferred`` records
    _base: dict[str, Any]
    _top: dict[str, Any]
    _size: int

    def __init__(self, runs: Mapping[str, _V | Deferred[_V]] | None = None) -> None:
        self._base = dict(runs) if runs else _EMPTY
        self._top = _EMPTY
        self._size = len(self._base)

    @classmethod
    def of(cls, runs: Mapping[str, _V]) -> RunTable[_V]:
        """``runs`` as a table (itself when it is one already)."""
        return runs if isinstance(runs, RunTable) else cls(runs)

    def set(self, run_id: str, run: _V) -> RunTable[_V]:
        """A table with ``run_id`` set to ``run``; this one is unchanged."""
        base, top = self._base, self._top
        grows = run_id not in top and run_id not in base
        new: RunTable[_V] = object.__new__(RunTable)
        if len(top) >= max(_MIN_TOP, 2 * math.isqrt(len(base))):
            # {**base, **top}: known keys keep their place, new ones follow in order
            new._base, new._top = {**base, **top, run_id: run}, _EMPTY
        else:
            new._base, new._top = base, {**top, run_id: run}
        new._size = self._size + grows
        return new

    def __getitem__(self, run_id: str) -> _V:
        found = self._top.get(run_id)
        if found is None:
            found = self._base[run_id]
        if type(found) is Deferred:
            return found.get()  # type: ignore[no-any-return]
        return found  # type: ignore[no-any-return]

    def get(self, run_id: str, default: Any = None) -> Any:
        found = self._top.get(run_id)
        if found is None:
            found = self._base.get(run_id, default)
        return found.get() if type(found) is Deferred else found

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._top or run_id in self._base

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[str]:
        base, top = self._base, self._top
        yield from base
        if top:
            yield from (k for k in top if k not in base)

    def values_of(self, run_ids: Collection[str]) -> list[_V]:
        """The runs of ``run_ids`` that the table holds, in table order (ids it lacks are skipped).

        Walks the table from its end and stops once every held id is found: the runs changed
        since a recent snapshot are mostly the latest ones, so a snapshot's delta costs about
        what it holds rather than O(runs) (a walk over all 2,000 runs was most of the growth
        of a turn's cost between 0 and 2,000 turns).
        """
        base, top = self._base, self._top
        wanted = sum(1 for run_id in run_ids if run_id in top or run_id in base)
        found: list[_V] = []
        if wanted:
            # newest first: top's new entries (after base), then base backwards; an id of top
            # that base holds keeps base's place
            newest = (k for k in reversed(top) if k not in base)
            for run_id in chain(newest, reversed(base)):
                if run_id in run_ids:
                    found.append(self[run_id])
                    if len(found) == wanted:
                        break
        found.reverse()
        return found

    def __repr__(self) -> str:
        return f"RunTable({dict(self.items())!r})"
