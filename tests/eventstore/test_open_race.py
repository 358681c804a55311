"""Several processes create, open and append to one new SQLite file at once: none fails.

Opening a store that another process is creating (the switch to WAL, the tables) must wait
within the busy timeout like any other write, never fail at once with "database is locked".
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import open_store

pytestmark = pytest.mark.slow
PROCESSES = 6
ROUNDS = 100


def test_six_processes_open_one_new_store_a_hundred_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 rounds of 6 processes creating, opening and appending to one new file: zero failures."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import _open_race_worker  # the children import it by this name (spawn)

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(target=_open_race_worker.run, args=(str(tmp_path), ROUNDS, k, barrier, results))
        for k in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=120) for _ in range(PROCESSES * ROUNDS)]
    finally:
        barrier.abort()  # a worker that died would otherwise leave the others waiting
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    failures = [f"round {n}, process {w}:\n{text}" for n, w, text in outcomes if text]
    assert not failures, f"{len(failures)} of {len(outcomes)} opens failed; first:\n{failures[0]}"
    assert all(worker.exitcode == 0 for worker in workers)
    for number in range(ROUNDS):
        assert anyio.run(_events_in, tmp_path / f"round-{number}.db") == PROCESSES


async def _events_in(path: Path) -> int:
    async with open_store(f"sqlite:///{path}", create=False) as store:
        assert (await store.verify()).ok
        return len([event async for event in store.read_all()])
