"""A child process of ``test_open_race``: every round, open one new store with the others and append.

Imported by the child (multiprocessing ``spawn``), not collected by pytest.
"""

from __future__ import annotations

import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import anyio

from turnlog.eventstore import NewEvent, open_store


async def _open_and_append(path: Path, worker: int) -> None:
    async with open_store(f"sqlite:///{path}") as store:
        await store.append(f"race-{worker}", [NewEvent(type="race.opened", data={"worker": worker})])


def run(
    directory: str, rounds: int, worker: int, barrier: Barrier, results: Queue[tuple[int, int, str]]
) -> None:
    """For each round: wait for every worker, then open ``round-N.db`` and append one event."""
    for number in range(rounds):
        barrier.wait()
        try:
            anyio.run(_open_and_append, Path(directory) / f"round-{number}.db", worker)
        except Exception:  # every failure is reported, none is fatal to the other rounds
            results.put((number, worker, traceback.format_exc()))
        else:
            results.put((number, worker, ""))
