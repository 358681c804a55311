"""Group commit: concurrent appends of one process combined into one transaction and one commit.

A server hosting many conversations appends single events from many tasks at once. Committed
one by one, each append pays a whole commit (an fsync on SQLite at ``durability="full"``, a
round trip and a WAL flush on PostgreSQL). ``GroupCommit`` lets them share it:

- a caller that finds no commit running becomes the *leader*: it takes every append queued
  so far (up to ``max_units``) and hands them to the backend's ``commit`` in one call;
- callers arriving while a commit runs queue up; when it ends, the first of them leads the
  next group. Nothing waits on a timer: a lone caller commits at once, and groups grow by
  themselves with the number of callers (while one commit runs, the next group gathers).
- callers woken by a commit's results usually append again at once, but they only run after
  the commit has ended and found nobody queued. So after a group of more than one, the
  next caller to lead first yields to the event loop (until the queue stops growing): the
  others queue behind it and the next group holds them all. Without that yield, the first of
  them would commit alone, the rest would queue behind that lone commit, and groups would
  alternate between one unit and all the others (two commits, each a round trip or an fsync,
  where one would do). A lone caller, after a group of one, never yields.

Each queued item is one caller's atomic unit (an ``append`` or a whole ``append_batch``).
``commit`` returns one outcome per unit, a result or an exception, so a unit that fails
(``ConcurrencyError``, ``IdempotencyError``) fails alone; the backend keeps the others'
writes (savepoints on SQLite, validate-then-insert on PostgreSQL). Only a failure of the
transaction itself (the commit, the connection) reaches every caller of the group, since
then none of it was stored or the outcome is unknown to all of them alike.

The leader runs ``commit`` shielded from cancellation: the group's other callers depend on
it, and a commit abandoned half-way would leave them without an outcome. A cancelled caller
whose unit is already in a running group stops waiting, but its unit may still be stored
(as with any append cancelled while its commit is in flight); one still queued is dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import anyio
import anyio.lowlevel

from turnlog._errors import UsageError

from ._errors import StoreError

__all__ = ["GroupCommit"]

U = TypeVar("U")
R = TypeVar("R")


@dataclass(eq=False)
class _Waiter(Generic[U]):
    unit: U
    woken: anyio.Event = field(default_factory=anyio.Event)
    lead: bool = False
    taken: bool = False
    outcome: Any = None
    failed: bool = False


class GroupCommit(Generic[U, R]):
    """Combine units submitted concurrently into calls of ``commit`` (see the module docstring).

    Args:
        commit: Stores a group of units in one transaction; returns one outcome per unit, in
            order: its result, or the exception that unit alone raises. An exception raised by
            ``commit`` itself is every unit's outcome.
        max_units: The largest group handed to ``commit``.
    """

    def __init__(
        self, commit: Callable[[list[U]], Awaitable[Sequence[R | BaseException]]], *, max_units: int = 256
    ) -> None:
        if max_units < 1:
            raise UsageError(f"max_units must be >= 1, not {max_units}")
        self._commit = commit
        self._max_units = max_units
        self._queue: list[_Waiter[U]] = []
        self._busy = False
        self._gather = False  # whether the last group held more than one unit
        self.groups = 0
        """How many groups were committed (for tests and benchmarks)."""
        self.units = 0
        """How many units they held."""

    async def submit(self, unit: U) -> R:
        """Store ``unit`` with whatever else is queued; return its own result or raise its own error."""
        if not self._busy:
            if self._gather:
                return await self._lead_gathering(unit)
            return await self._lead_alone(unit)
        waiter: _Waiter[U] = _Waiter(unit)
        self._queue.append(waiter)
        try:
            await waiter.woken.wait()
        except BaseException:
            if not waiter.taken:
                self._queue.remove(waiter)
                if waiter.lead:
                    self._hand_over()
            raise
        if waiter.taken:
            return self._unwrap(waiter)
        try:
            await self._run_group()
        finally:
            self._hand_over()
        return self._unwrap(waiter)

    async def _lead_gathering(self, unit: U) -> R:
        """``submit`` when no commit runs just after a group of several: let them queue, then lead."""
        self._busy = True
        waiter: _Waiter[U] = _Waiter(unit, lead=True)
        self._queue.append(waiter)
        try:
            queued = 0
            while queued != len(self._queue) and len(self._queue) < self._max_units:
                queued = len(self._queue)
                await anyio.lowlevel.checkpoint()
        except BaseException:
            self._queue.remove(waiter)
            self._hand_over()
            raise
        try:
            await self._run_group()
        finally:
            self._hand_over()
        return self._unwrap(waiter)

    async def _lead_alone(self, unit: U) -> R:
        """``submit`` when no commit runs (so nothing is queued): a group of one, with no waiter to wake."""
        # Callers arriving meanwhile queue up, and the first of them leads next (_hand_over).
        self._busy = True
        outcomes: Sequence[Any]
        try:
            with anyio.CancelScope(shield=True):
                outcomes = await self._commit([unit])
            if len(outcomes) != 1:
                raise StoreError(f"group commit: {len(outcomes)} outcomes for 1 append")
        except Exception as exc:
            outcomes = [exc]
        finally:
            self._hand_over()
        self.groups += 1
        self.units += 1
        self._gather = False
        outcome = outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return cast(R, outcome)

    async def _run_group(self) -> None:
        group = self._queue[: self._max_units]
        del self._queue[: len(group)]
        for waiter in group:
            waiter.taken = True
        outcomes: Sequence[Any]
        try:
            with anyio.CancelScope(shield=True):
                outcomes = await self._commit([waiter.unit for waiter in group])
            if len(outcomes) != len(group):
                raise StoreError(f"group commit: {len(outcomes)} outcomes for {len(group)} appends")
        except Exception as exc:
            outcomes = [exc, *(_copy_error(exc) for _ in group[1:])]
        except BaseException as exc:
            # The leader is interrupted (KeyboardInterrupt, ...): the others learn that the
            # outcome of their append is unknown, and the interruption goes on up.
            for waiter in group:
                waiter.outcome = StoreError(f"the commit of this append was interrupted: {exc!r}")
                waiter.failed = True
                waiter.woken.set()
            raise
        self.groups += 1
        self.units += len(group)
        self._gather = len(group) > 1
        for waiter, outcome in zip(group, outcomes, strict=True):
            waiter.outcome = outcome
            waiter.failed = isinstance(outcome, BaseException)
            waiter.woken.set()

    def _hand_over(self) -> None:
        """Wake the first queued caller to lead the next group, or mark the committer idle."""
        if self._queue:
            first = self._queue[0]
            first.lead = True
            first.woken.set()
        else:
            self._busy = False

    def _unwrap(self, waiter: _Waiter[Any]) -> R:
        if waiter.failed:
            raise waiter.outcome
        return cast(R, waiter.outcome)


def _copy_error(exc: Exception) -> Exception:
    """A copy of a failure shared by a group, so each caller raises its own exception object."""
    try:
        twin = copy.copy(exc)
    except Exception:
        return exc
    twin.__cause__ = exc.__cause__
    twin.__traceback__ = None
    return twin
