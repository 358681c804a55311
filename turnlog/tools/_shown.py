"""What a reading command shows is checked against the hash chain, and damage is marked.

``show``, ``log``, ``diff``, ``tail`` and the ui print payloads read from the store; an
event altered behind the store's back must not be shown as if it were the record. These
helpers check the events a view stands on (``turnlog.eventstore.check_events``), find the
messages those events carry, and say so on stderr; the commands mark the lines with
``TAMPERED`` and exit with status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from turnlog.eventstore import (
    CorruptEventError,
    EventStore,
    Problem,
    RecordedEvent,
    check_events,
    check_stream,
)

__all__ = ["TAMPERED", "Damage", "branch_damage", "damage_view", "log_damage", "warn_damage"]

TAMPERED = "TAMPERED"
"""The mark on a line whose event does not match the hash chain."""


@dataclass(frozen=True, slots=True)
class Damage:
    """The damaged events under one view.

    Attributes:
        problems: What is wrong, one ``Problem`` per damaged event (stream and version).
        message_ids: The ids of the messages that damaged ``message.added`` events carry.
    """

    problems: tuple[Problem, ...] = ()
    message_ids: frozenset[str] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def versions(self, stream: str) -> dict[int, str]:
        """Version -> what is wrong, for the damaged events of ``stream``."""
        found: dict[int, str] = {}
        for p in self.problems:
            if p.stream == stream:
                found.setdefault(p.version, p.what)
        return found


async def branch_damage(store: EventStore, branch_id: str, to_version: int | None = None) -> Damage:
    """Check what the state of a branch at ``to_version`` stands on: its events and a fork's parents.

    A fork's state starts with its parent's events up to the fork point, so those are
    checked too, up the chain of forks.
    """
    problems: list[Problem] = []
    stream, last = f"branch-{branch_id}", to_version
    seen: set[str] = set()
    while stream not in seen:
        seen.add(stream)
        problems.extend(await check_stream(store, stream, 1, last))
        parent = await _parent(store, stream)
        if parent is None:
            break
        stream, last = parent
    return Damage(tuple(problems), frozenset(await _message_ids(store, problems)))


_PAGE = 2000
"""Events checked per batch when a whole log is exported (bounded memory, few reads)."""


async def log_damage(store: EventStore, branch_id: str | None = None) -> list[Problem]:
    """The damaged events of what ``export`` writes: the whole log, or a branch and its runs' streams."""
    if branch_id is not None:
        own = f"branch-{branch_id}"
        problems = list(await check_stream(store, own))
        runs: set[str] = set()
        async for event in store.read_stream(own):
            run_id = event.data.get("run_id")
            if event.type == "run.started" and isinstance(run_id, str):
                runs.add(run_id)
        for run_id in sorted(runs):
            problems.extend(await check_stream(store, f"run-{run_id}"))
        return problems
    problems, batch = [], []
    async for event in store.read_all():
        batch.append(event)
        if len(batch) == _PAGE:
            problems.extend(await _checked(store, batch))
    problems.extend(await _checked(store, batch))
    return problems


async def _checked(store: EventStore, batch: list[RecordedEvent]) -> tuple[Problem, ...]:
    problems = await check_events(store, batch)
    batch.clear()
    return problems


async def _parent(store: EventStore, stream: str) -> tuple[str, int] | None:
    try:
        async for first in store.read_stream(stream, 1, 1):
            if first.type == "branch.forked":
                parent, version = first.data.get("parent_stream"), first.data.get("parent_version")
                if isinstance(parent, str) and isinstance(version, int):
                    return parent, version
    except CorruptEventError:  # already a problem of the check
        return None
    return None


async def _message_ids(store: EventStore, problems: Iterable[Problem]) -> set[str]:
    """The ids of the messages the damaged events carry (as stored now: that is what is shown)."""
    ids: set[str] = set()
    for p in problems:
        try:
            async for event in store.read_stream(p.stream, p.version, p.version):
                message = event.data.get("message")
                if event.type == "message.added" and isinstance(message, dict):
                    ids.add(str(message.get("id")))
        except CorruptEventError:
            continue
    return ids


def damage_view(problem: Problem) -> dict[str, object]:
    """A JSON object of one damaged event (``--json`` output lists them under ``tampered``)."""
    return {
        "stream": problem.stream,
        "version": problem.version,
        "position": problem.position,
        "what": problem.what,
    }


def warn_damage(command: str, problems: Iterable[Problem]) -> None:
    """Say on stderr which shown events do not match the hash chain."""
    problems = list(problems)
    if not problems:
        return
    print(
        f"turnlog {command}: {TAMPERED}: {len({(p.stream, p.version) for p in problems})} event(s) do not match the hash chain "
        "(altered behind the store's back); run 'turnlog verify'",
        file=sys.stderr,
    )
    for p in problems:
        print(f"  {p}", file=sys.stderr)
